"""Queueing as an axis of its own (issue 18 item 1), without a fabric: the
FIFO a topology's bands become, the plans' keys and presets, --queueing's
errors, and the routing x queueing decomposition on rows with a known
answer. The fabric side: tests/test_queueing_live.py."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from common import paths
from experiments.sweep.kinds import build_plan, finish
from experiments.sweep.plan import ALL_SCHEMES, PlanError, arm, arm_parts
from experiments.sweep.results import points
from experiments.sweep.runner import run_plan
from experiments.sweep.stats import t_quantile
from experiments.sweep.summary import factorial_table, paper_sides
from netns_topology import load_topology, qdisc
from talb.cli import main

ALL = frozenset(ALL_SCHEMES)


# --- the queues --------------------------------------------------------------------------
def test_fifo_holds_what_the_bands_hold():
    bands = load_topology(paths.REPO_ROOT / "topologies" / "fig10.yaml").queue
    fifo = qdisc.fifo_of(bands)
    assert (bands.limit, bands.bands) == (40_000, (1, 4, 2, 1))
    assert (fifo.limit, fifo.bands) == (160_000, (1,))
    assert (fifo.burst, fifo.cburst, fifo.quantum) == (bands.burst, bands.cburst, bands.quantum)
    # the same queue as the FIFO topology written by hand for fig10-fifo
    assert fifo == load_topology(paths.REPO_ROOT / "topologies" / "fig10-fifo.yaml").queue
    assert qdisc.queue_for(bands, "bands") is bands and qdisc.queue_for(bands, "fifo") == fifo
    assert qdisc.fifo_of(fifo) == fifo                      # one band: its own FIFO
    with pytest.raises(ValueError, match="queueing: one of bands, fifo, got 'wfq'"):
        qdisc.queue_for(bands, "wfq")


def test_set_queueing_refuses_a_bad_value_naming_it():
    from netns_topology.state import TestbedError
    from testbed import lifecycle

    with pytest.raises(TestbedError, match="queueing: one of bands, fifo, got 'wfq'"):
        lifecycle.set_queueing("t0noqueue", "wfq")


# --- plans -------------------------------------------------------------------------------
def test_old_keys_unchanged_and_fifo_keys_differ():
    old = build_plan("fig10-2spine", implemented=ALL)
    r = old.runs[0]
    assert r.queueing == "bands" and "queueing" not in r.params()
    assert r.key() == "1be7ea1a232f896f"       # results/fig10-2spine/plan.json, first run
    from dataclasses import replace

    fifo = replace(r, queueing="fifo")
    assert fifo.params()["queueing"] == "fifo" and fifo.key() != r.key()
    assert replace(fifo, queueing="bands").key() == r.key()
    # the factorial's runs with bands are fig10's runs (a results directory serves both)
    fig10 = build_plan("fig10", implemented=ALL)
    fact = build_plan("fig10-factorial", implemented=ALL)
    by_key = {x.key() for x in fig10.runs}
    bands = {x.key() for x in fact.runs if x.queueing == "bands"}
    assert len(bands) == 40 and bands <= by_key


def test_factorial_and_paper_presets():
    fact = build_plan("fig10-factorial", implemented=ALL)
    # TaLB and the paper's three baselines, each under bands and FIFO, loads 0.2 and 0.4, 5 seeds
    assert len(fact.runs) == 4 * 2 * 2 * 5
    assert fact.counts("queueing") == {"bands": 40, "fifo": 40}
    assert fact.counts("scheme") == {s: 20 for s in ("ecmp", "rps", "conga", "talb")}
    assert fact.counts("load") == {0.2: 40, 0.4: 40}
    assert fact.counts("topology") == {"topologies/fig10-4spine.yaml": 80}
    # the 8 arms of a (seed, load) run back to back
    first = fact.runs[:8]
    assert {(x.seed, x.load) for x in first} == {(1, 0.2)}
    assert sorted(arm(x.scheme, x.queueing) for x in first) == sorted(
        arm(s, q) for s in ("ecmp", "rps", "conga", "talb") for q in ("bands", "fifo"))
    rule = fact.seed_rule
    assert rule.loads == (0.2, 0.4) and ("talb/fifo", "ecmp/fifo") in rule.pairs
    assert ("talb", "ecmp") in rule.pairs and len(rule.pairs) == 6

    paper = build_plan("fig10-paper", implemented=ALL)
    assert len(paper.runs) == 4 * 4 * 5
    assert {(x.scheme, x.queueing) for x in paper.runs} == {
        ("talb", "bands"), ("ecmp", "fifo"), ("rps", "fifo"), ("conga", "fifo")}
    assert paper.counts("load") == {ld: 20 for ld in (0.1, 0.2, 0.3, 0.4)}
    # its runs at the top load are the factorial's (T,B) and (X,F) runs
    fact_keys = {x.key() for x in fact.runs}
    assert {x.key() for x in paper.runs if x.load == 0.4} <= fact_keys
    assert set(paper.seed_rule.pairs) == {("talb", "ecmp/fifo"), ("talb", "rps/fifo"),
                                          ("talb", "conga/fifo")}
    assert "fifo" in fact.runs[4].label() and arm_parts("rps/fifo") == ("rps", "fifo")


def test_queueing_option_of_a_free_sweep():
    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.8], seeds=[1],
                   queueing={"*": ["fifo"], "talb": ["bands", "fifo"]})
    assert [(x.scheme, x.queueing) for x in p.runs] == [("talb", "bands"), ("ecmp", "fifo"),
                                                        ("talb", "fifo")]
    assert p.name == "sweep"
    q = build_plan("fig10", implemented=ALL, queueing=["fifo"], loads=[0.8], seeds=[1])
    assert q.name.startswith("fig10+") and q.counts("queueing") == {"fifo": len(ALL)}
    with pytest.raises(PlanError, match="--queueing: one of bands, fifo .*got 'wfq'"):
        build_plan(None, implemented=ALL, queueing=["wfq"])
    with pytest.raises(PlanError, match="--queueing: unknown scheme 'warp'"):
        build_plan(None, implemented=ALL, queueing={"warp": ["fifo"]})


@pytest.mark.parametrize("value, flag_and_value", [
    ("wfq", "--queueing: one of bands, fifo (for every scheme, or SCHEME=QUEUEING), got 'wfq'"),
    ("talb=bandz", "got 'bandz'"),
    ("warp=fifo", "--queueing: unknown scheme 'warp'"),
])
def test_bench_cli_names_a_bad_queueing(tmp_path, value, flag_and_value):
    r = CliRunner().invoke(main, ["bench", "--queueing", value, "--dry-run", "--out",
                                  str(tmp_path)])
    assert r.exit_code == 1 and flag_and_value in r.output, r.output


def test_bench_cli_dry_run_lists_the_arms(tmp_path):
    r = CliRunner().invoke(main, ["bench", "--preset", "fig10-paper", "--dry-run", "--out",
                                  str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "queueing {'bands': 20, 'fifo': 60}" in r.output
    assert "ecmp/fifo load 0.2" in r.output and " talb load 0.2" in r.output


@pytest.mark.parametrize("value", ["wfq", "FIFO", ""])
def test_run_cli_names_a_bad_queueing(value):
    r = CliRunner().invoke(main, ["run", "--model", "alexnet", "--arch", "ps", "--workers", "2",
                                  "--prefix", "t0clirun", "--queueing", value])
    assert r.exit_code != 0
    assert f"--queueing: one of bands, fifo, got {value!r}" in r.output, r.output
    assert not paths.state_dir("t0clirun").exists()


# --- the decomposition on rows with a known answer ---------------------------------------
#: short-tensor AFCT in ms per seed 1, 2, 3 of TaLB (T) and ECMP (X) under bands (B) and FIFO (F)
CELLS = {("talb", "bands"): [10, 12, 11], ("talb", "fifo"): [30, 33, 36],
         ("ecmp", "bands"): [20, 22, 25], ("ecmp", "fifo"): [40, 41, 45]}


def _rows(cells=CELLS, metric="short_fct_mean_s"):
    rows = []
    for (scheme, q), values in cells.items():
        for seed, v in enumerate(values, 1):
            rows.append({"topology": "topologies/fig10.yaml", "scheme": scheme, "model": "threelayer",
                         "arch": "ps", "workers": 4, "servers": 1, "load": 0.8, "seed": seed,
                         "target_link_bps": 100e9, "scaling_mode": "both", "iterations": 4,
                         "warmup": 1, "background_cdf": "websearch",
                         "background_size_scale": None, "agent": "default", "queueing": q,
                         "status": "ok", metric: v / 1e3})
    return rows


def test_decomposition_on_known_numbers():
    rows = _rows()
    table = factorial_table(rows, points(rows))
    got = {(r["baseline"], r["effect"]): r for r in table if r["metric"] == "short_fct_mean_s"}
    # by hand, per seed (ms):
    #   gain        (T,B) − (X,F)                 = -30, -29, -34   mean -31
    #   routing     (T,F) − (X,F)                 = -10,  -8,  -9   mean  -9
    #   queueing    (X,B) − (X,F)                 = -20, -19, -20   mean -19.667
    #   interaction (TB − TF) − (XB − XF)
    #             = (-20, -21, -25) − (-20, -19, -20) =  0,  -2,  -5   mean  -2.333
    #   -9 - 19.667 - 2.333 = -31: the parts add up to the gain
    expect = {"gain": (-30, -29, -34), "routing_fifo": (-10, -8, -9),
              "queueing_base": (-20, -19, -20), "interaction": (0, -2, -5),
              "routing_bands": (-10, -10, -14), "queueing_talb": (-20, -21, -25)}
    for effect, per_seed in expect.items():
        r = got[(None if effect == "queueing_talb" else "ecmp", effect)]
        pr = r["pair"]
        assert pr.n == 3 and r["seeds"] == [1, 2, 3]
        mean = sum(per_seed) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in per_seed) / 2)
        assert pr.diff.mean * 1e3 == pytest.approx(mean), effect
        assert pr.diff.half_width * 1e3 == pytest.approx(t_quantile(2) * sd / math.sqrt(3)), effect
    parts = sum(got[("ecmp", e)]["pair"].diff.mean for e in ("routing_fifo", "queueing_base",
                                                              "interaction"))
    assert parts == pytest.approx(got[("ecmp", "gain")]["pair"].diff.mean)
    # the interaction: mean -2.333 ms, sd 2.517, 95% interval -2.333 ± 4.3027 x 2.5166/sqrt(3)
    inter = got[("ecmp", "interaction")]["pair"]
    assert (inter.diff.low * 1e3, inter.diff.high * 1e3) == pytest.approx((-8.5849, 3.9183), abs=2e-4)
    # its ratio: (T,B)/(T,F) over (X,B)/(X,F), the geometric mean over the seeds
    ratios = [(10 / 30) / (20 / 40), (12 / 33) / (22 / 41), (11 / 36) / (25 / 45)]
    assert inter.ratio == pytest.approx(math.exp(sum(map(math.log, ratios)) / 3))
    # verdicts from Holm across the table's rows, each from the test whose interval the
    # ratio column shows: the additive interval above holds 0, but the ratio of ratios is
    # 0.67, 0.68, 0.55 -- below 1 at every seed, and its interval excludes 1: the bands
    # help TaLB more than ECMP, relatively
    assert inter.scale == "log-ratio" and inter.ratio_high < 1
    assert got[("ecmp", "interaction")]["verdict"] == "bands favour TaLB"
    assert got[("ecmp", "gain")]["verdict"] == "TaLB+bands better"
    assert got[("ecmp", "gain")]["p_holm"] >= got[("ecmp", "gain")]["pair"].p


def test_decomposition_needs_every_cell_and_pairs_on_the_common_seeds():
    cells = dict(CELLS)
    cells[("ecmp", "fifo")] = [40, 41]           # seed 3 has no ECMP-with-FIFO run
    rows = _rows(cells)
    table = factorial_table(rows, points(rows))
    by = {(r["baseline"], r["effect"]): r for r in table if r["metric"] == "short_fct_mean_s"}
    assert by[("ecmp", "interaction")]["seeds"] == [1, 2] and by[("ecmp", "gain")]["n"] == 2
    assert by[(None, "queueing_talb")]["seeds"] == [1, 2, 3]
    # no FIFO run of TaLB at all: no decomposition
    rows = _rows({k: v for k, v in CELLS.items() if k != ("talb", "fifo")})
    assert factorial_table(rows, points(rows)) == []


def test_paper_sides():
    def pts(*arms_):
        return [{"scheme": s, "queueing": q} for s, q in arms_]
    # the paper's configuration when the sweep has it
    assert paper_sides(pts(("talb", "bands"), ("talb", "fifo"), ("ecmp", "bands"),
                           ("ecmp", "fifo")), "ecmp") == (
        {"scheme": "talb", "queueing": "bands"}, {"scheme": "ecmp", "queueing": "fifo"})
    assert paper_sides(pts(("talb", "bands"), ("ecmp", "fifo")), "ecmp")[1]["queueing"] == "fifo"
    # like for like otherwise (every sweep before issue 18)
    assert paper_sides(pts(("talb", "bands"), ("ecmp", "bands")), "ecmp")[1]["queueing"] == "bands"
    assert paper_sides(pts(("talb", "fifo"), ("ecmp", "fifo")), "ecmp") == (
        {"scheme": "talb", "queueing": "fifo"}, {"scheme": "ecmp", "queueing": "fifo"})


# --- a factorial sweep's outputs, from fake results ---------------------------------------
def _fake(spec):
    """Short AFCT: ECMP 100 ms with bands, 200 with FIFO; TaLB half of ECMP's under
    bands, the same as ECMP's under FIFO (all its gain from the bands)."""
    fct = {("ecmp", "bands"): 0.100, ("ecmp", "fifo"): 0.200,
           ("talb", "bands"): 0.050, ("talb", "fifo"): 0.200}[spec.scheme, spec.queueing]
    fct *= 1 + 0.01 * spec.seed + (0.002 * spec.seed ** 2 if spec.scheme == "talb" else 0)
    head = {"scheme": spec.scheme, "queueing": spec.queueing, "samples_per_s": 10 / fct,
            "iteration_time_s": fct, "cpu_bound": False}
    for cls in ("short", "long", "all", "trailing"):
        head.update({f"{cls}_fct_mean_s": fct, f"{cls}_fct_p99_s": 2 * fct, f"{cls}_censored": 0,
                     # network FCT (what paper vs ours compares): half of it, same ratios
                     f"{cls}_netfct_mean_s": fct / 2, f"{cls}_netfct_p99_s": fct})
    return {"format": "talb-run/1", "config": {"workers": 4, "servers": 1, "arch": "ps"},
            "model": {"batch_size": 32}, "placement": {"workers": [], "servers": []},
            "fabric": {"queueing": {"mode": spec.queueing}}, "scaling": {"time_scale": 1.0},
            "flags": {"cpu_bound": False}, "headline": head, "software": {"commit": "c0ffee"},
            "tensors": [], "summary": {"cpu_guard": {"flagged": False, "cpu_busy_mean": 0.5,
                                                     "reason": "test"}}}


def test_factorial_sweep_report(tmp_path):
    p = build_plan("fig10-factorial", implemented=ALL, schemes=["ecmp", "talb"], seeds=3,
                   fixed_seeds=True)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake(s))), progress=False)
    res = finish(p, tmp_path)
    assert {r["queueing_in_effect"] for r in res["rows"]} == {"bands", "fifo"}
    md = (tmp_path / "summary.md").read_text()
    assert "## Routing × queueing: where TaLB's gain comes from" in md
    assert (tmp_path / "factorial.csv").exists()
    by = {(r["load"], r["baseline"], r["effect"]): r for r in res["factorial"]
          if r["metric"] == "short_fct_mean_s"}
    # TaLB's gain over ECMP with FIFO is all queueing: routing under FIFO is ~0
    gain = by[(0.4, "ecmp", "gain")]["pair"]
    assert gain.ratio == pytest.approx(0.25, rel=0.05)
    # the network FCT is decomposed too (the fakes' is half the FCT: the same ratio)
    net = {(r["load"], r["baseline"], r["effect"]): r for r in res["factorial"]
           if r["metric"] == "short_netfct_mean_s"}
    assert net[(0.4, "ecmp", "gain")]["pair"].ratio == pytest.approx(0.25, rel=0.05)
    assert "### short-tensor AFCT, network FCT (ms)" in md
    assert abs(by[(0.4, "ecmp", "routing_fifo")]["pair"].diff.mean) < 0.002
    assert by[(0.4, "ecmp", "queueing_base")]["verdict"] == "bands better"
    # paper vs ours pairs TaLB with bands against ECMP with FIFO, and says so
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert "TaLB bands, ECMP fifo" in row["where"] and row["ours"].startswith("-75%")
    assert row["ours_handoff"].startswith("-75%")        # the FCT from the hand-off: same sides
    # TaLB against each scheme: under the same queueing
    assert "| 0.4 | talb/fifo | ecmp/fifo |" in md and "| 0.4 | talb | ecmp |" in md
    for panels in res["plots"].values():
        for lines in panels.values():
            assert sorted(lines) == ["ecmp", "ecmp/fifo", "talb", "talb/fifo"]
    pairs = (tmp_path / "paired.csv").read_text()
    assert "talb/fifo" in pairs and "ecmp/fifo" in pairs


def test_paper_sweep_report(tmp_path):
    p = build_plan("fig10-paper", implemented=ALL, schemes=["ecmp", "talb"], loads=[0.8],
                   seeds=3, fixed_seeds=True)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake(s))), progress=False)
    res = finish(p, tmp_path)
    assert res["factorial"] == []
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["n"] == 3 and "TaLB bands, ECMP fifo" in row["where"]
    assert row["pair"].ratio == pytest.approx(0.25, rel=0.05)
    md = (tmp_path / "summary.md").read_text()
    assert "| 0.8 | talb | ecmp/fifo |" in md and "Routing × queueing" in md.split("## Seeds")[0] \
        .split("## Paper vs ours")[1]     # the note points to the decomposition
