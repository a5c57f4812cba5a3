"""`talb bench faults` without a fabric: the designs, the run order, the
report's statistics from made-up rows, and the command's errors (its own
process, as a user runs it)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from experiments.faults import (DESIGNS, command, measure_of, paired, plan, report_md, seeds_of,
                                spec_of, summary)
from workload.faults import parse_fault


def test_every_design_spec_parses_and_the_control_spans_the_fault():
    for d in DESIGNS.values():
        for f, arch, scheme, seed, spec in plan(d):
            p = parse_fault(spec)
            assert p.kind == f.kind and p.at_s == d.at_s
            if f.kind == "none":
                assert p.for_s == (d.for_s if d.control_spans_fault else 0.0)
            else:
                assert p.for_s == d.for_s
    up = DESIGNS["uplink"]
    assert spec_of(up.faults[2], up.at_s, up.for_s) == \
        "uplink-down@3s:for=2s,leaf=leaf0,spine=spine0,agent=stop"
    assert measure_of(DESIGNS["kinds"]) == {"window_s": 0.5, "settle_windows": None,
                                            "threshold": 2.0, "span_s": None}


def test_runs_go_seed_by_seed_every_cell_paired():
    d = DESIGNS["uplink"]
    runs = plan(d)
    assert len(runs) == len(d.seeds) * len(d.faults) * len(d.schemes) == 54
    cells = len(d.faults) * len(d.schemes)
    for i, seed in enumerate(d.seeds):            # each block of `cells` runs is one seed
        block = runs[i * cells:(i + 1) * cells]
        assert {r[3] for r in block} == {seed}
        assert {(r[0].label, r[2]) for r in block} == \
            {(f.label, s) for f in d.faults for s in d.schemes}


def test_the_command_reproduces_the_design():
    d = DESIGNS["uplink"]
    cmd = command(d, "ps", "conga", 4, spec_of(d.faults[1], d.at_s, d.for_s))
    assert cmd == ("talb run --topology topologies/fig10-4spine.yaml --scheme conga --model "
                   "threelayer --arch ps --workers 4 --servers 1 --placement remote "
                   "--target-link-rate 100gbit --scaling both --load 0.2 --seed 4 --iterations 12 "
                   "--fault uplink-down@3s:for=2s,leaf=leaf0,spine=spine0")


def _row(fault, kind, scheme, seed, rec, training_s=10.0, cpu_bound=False):
    return {"fault": fault, "kind": kind, "spec": "x", "pattern": "ps", "scheme": scheme,
            "seed": seed, "recovery_s": rec, "after_restore_s": max(0.0, (rec or 0) - 2),
            "degraded_windows": int((rec or 0) / 0.25), "stalled_windows": 0,
            "worst_window": 1.5, "window_s": 0.25, "slow": 0, "after": 100,
            "last_slow_s": 0.0, "worst_slowdown": 1.2, "stuck": 0, "last_stuck_s": 0.0,
            "verified": 100, "tensors": 100,
            "checksum_failed": 0, "not_delivered": 0, "retrans": 10, "queue_drops": 0,
            "counters": {}, "injected": True, "restored": True, "error": None,
            "training_s": training_s, "iteration_s": 0.8, "cpu_bound": cpu_bound,
            "cpu_busy_mean": 0.5, "cpu_guard": "-", "results": "f.json", "command": "talb run"}


def test_report_pairs_by_seed_and_states_the_noise_floor():
    rows = []
    for seed in range(1, 6):
        for scheme in ("talb", "ecmp"):
            rows.append(_row("none", "none", scheme, seed, 0.0, 10.0))
            # TaLB recovers 0.5 s later than ECMP at every seed; its training loses 1 s more
            rows.append(_row("hurt", "uplink-down", scheme, seed,
                             2.0 + 0.1 * seed + (0.5 if scheme == "talb" else 0.0),
                             12.0 + (1.0 if scheme == "talb" else 0.0), cpu_bound=seed == 3))
    cells = summary(rows)
    talb, ecmp = cells[("ps", "hurt", "talb")], cells[("ps", "hurt", "ecmp")]
    assert talb["nonzero"] == 5 and talb["cpu_bound"] == 1
    assert talb["time_lost"][0] == pytest.approx(3.0) and ecmp["time_lost"][0] == pytest.approx(2.0)
    pr = paired(talb["by_seed"], ecmp["by_seed"])
    assert pr["n"] == 5 and pr["mean"] == pytest.approx(0.5) and pr["p"] < 0.1
    assert cells[("ps", "none", "talb")]["nonzero"] == 0
    md = report_md(rows, DESIGNS["uplink"])
    assert "**Noise floor** (the `none` control, 10 runs): recovery > 0 in 0 of 10" in md
    assert "| ps | hurt | ecmp | 5 | +0.50 s | 0.062 | +0.00 s | - | +1.00 s | 0.062 |" in md   # TaLB − ECMP
    assert "2 flagged CPU-bound" in md
    assert md.count("\n    talb run") == len(rows)


def test_paired_differences_of_zero_have_no_test():
    assert paired({1: 0.0, 2: 0.0}, {1: 0.0, 2: 0.0}) == \
        {"n": 2, "mean": 0.0, "lo": 0.0, "hi": 0.0, "p": None}
    assert paired({1: None}, {1: 1.0}) is None       # a lost tensor: no number to pair


def test_seeds():
    assert seeds_of("1-3,7") == (1, 2, 3, 7)
    with pytest.raises(ValueError, match="--seeds: expected seeds like 1-5"):
        seeds_of("one")


@pytest.mark.parametrize("args, words", [
    (["--seeds", "x"], ["--seeds", "expected seeds like 1-5 or 1,3,7, got 'x'"]),
    (["--faults", "bogus"], ["--faults", "uplink-down-agent-stopped", "'bogus'"]),
    (["--schemes", "talb,nope"], ["--schemes", "'talb,nope'"]),
    (["--design", "nope"], ["--design", "uplink", "kinds"]),
    (["--window", "0"], ["--window", "must be > 0"]),
])
def test_bad_options_are_refused_naming_the_value(args, words):
    p = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "faults", *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p
    for w in words:
        assert w in p.stderr, p.stderr


def test_help_names_the_designs():
    p = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "faults", "--help"],
                       capture_output=True, text=True, timeout=60, check=True)
    assert "uplink" in p.stdout and "kinds" in p.stdout and "--seeds" in p.stdout
    json.dumps(DESIGNS["uplink"].workers)   # the design is plain data (design.json)


def test_the_archive_measures_as_the_full_file(tmp_path):
    """A slim archived run gives the recovery the full one gave."""
    import random
    import tarfile

    from experiments.faults import archive
    from workload.faults import report

    rng = random.Random(1)
    tensors, t = [], 0
    for i in range(2000):
        fct = int(30e6 * rng.lognormvariate(0, 0.5)) + (2_000_000_000 if 900 <= i < 910 else 0)
        tensors.append({"key": f"push/{i}", "kind": "push", "layer": i % 3, "partition": i % 7,
                        "iteration": i // 240, "warmup": i < 240, "censored": False, "ok": True,
                        "t_start_ns": t + rng.randrange(1000), "t_done_ns": t + fct,
                        "fct_s": fct / 1e9, "netfct_s": 0.0, "ports": [1, 2]})
        t += int(3.3e6) + (2_500_000_000 if i == 915 else 0)   # the rest wait for the stuck
    record = {"kind": "uplink-down", "injected": True, "t_inject_ns": 3_000_000_000,
              "t_restore_ns": 5_000_000_000, "for_s": 2.0}
    run = {"config": {}, "summary": {}, "flags": {}, "fault": record, "tensors": tensors,
           "load": {"offered": 0.2, "background": {"flows": [1] * 1000}}, "cpu_samples": [1]}
    (tmp_path / "r.json").write_text(json.dumps(run))
    with tarfile.open(archive(tmp_path, ["r.json"])) as tf:
        slim = json.load(tf.extractfile("r.json"))
    assert "background" not in slim["load"] and "cpu_samples" not in slim
    full = report(record, tensors, **measure_of(DESIGNS["uplink"]))["recovery"]
    again = report(slim["fault"], slim["tensors"], **measure_of(DESIGNS["uplink"]))["recovery"]
    assert full["recovery_s"] > 0
    for k in ("recovery_s", "degraded_windows", "stalled_windows", "slow", "before", "after"):
        assert again[k] == full[k], k
