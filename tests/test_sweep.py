"""The sweep harness without a fabric: statistics, presets' plans, resume,
and the outputs (CSV, plots, summary) from results files (experiments/sweep)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
from click.testing import CliRunner

from experiments.sweep import plan as planmod
from experiments.sweep.kinds import build_plan, finish
from experiments.sweep.plan import ALL_SCHEMES, PlanError
from experiments.sweep.layout import result_path
from experiments.sweep.runner import run_plan
from experiments.sweep.stats import estimate, overlap, t_quantile
from common.paths import REPO_ROOT as REPO
from netns_topology import load_topology
from markdown_tables import verdict_cells

ALL = frozenset(ALL_SCHEMES)
#: the presets of "all schemes" run every scheme of the registry
N = len(ALL_SCHEMES)


# --- statistics --------------------------------------------------------------------------
def test_t_interval_on_known_samples():
    # 2, 4, 6, 8, 10: mean 6, s = sqrt(10) = 3.1623, t(0.975, 4) = 2.7764
    # half-width = 2.7764 * 3.1623 / sqrt(5) = 3.9265 (by hand)
    e = estimate([2, 4, 6, 8, 10])
    assert e.n == 5 and e.mean == pytest.approx(6.0)
    assert e.sd == pytest.approx(math.sqrt(10))
    assert e.half_width == pytest.approx(3.9265, abs=1e-4)
    assert (e.low, e.high) == pytest.approx((2.0735, 9.9265), abs=1e-4)


def test_t_interval_two_values_and_missing_values():
    # 1, 3: mean 2, s = sqrt(2), t(0.975, 1) = 12.706: half = 12.706 * sqrt(2) / sqrt(2)
    e = estimate([1.0, None, 3.0])
    assert e.n == 2 and e.half_width == pytest.approx(12.706, abs=5e-4)
    assert estimate([5.0]).half_width is None and estimate([]).mean is None


def test_t_quantiles_from_scipy():
    assert t_quantile(1) == pytest.approx(12.706, abs=5e-4)
    assert t_quantile(30) == pytest.approx(2.042, abs=5e-4)
    assert 2.000 < t_quantile(50) < 2.021       # between the 40 and 60 rows of a table
    assert 1.960 < t_quantile(1000) < 1.980
    with pytest.raises(ValueError, match="df"):
        t_quantile(0)


def test_overlap_is_a_plot_aid():
    a, b, c = estimate([1, 2, 3]), estimate([2, 3, 4]), estimate([10, 11, 12])
    assert overlap(a, b) is True and overlap(a, c) is False
    assert overlap(a, estimate([1])) is None


# --- plans ---------------------------------------------------------------------------------
def test_fig10_plan_matches_its_description():
    p = build_plan("fig10", implemented=ALL)
    # every scheme x 4 background loads (0.1..0.4) x 5 seeds on the 4-spine fabric, workers
    # off the server's leaf, PS 4:1 three-layer model
    assert len(p.runs) == N * 4 * 5
    assert p.counts("scheme") == {s: 20 for s in ALL_SCHEMES}
    assert p.counts("load") == {0.1: N * 5, 0.2: N * 5, 0.3: N * 5, 0.4: N * 5}
    assert p.counts("seed") == {s: N * 4 for s in range(1, 6)}
    assert p.counts("topology") == {"topologies/fig10-4spine.yaml": N * 20}
    assert p.counts("placement") == {"remote": N * 20}
    assert load_topology(REPO / "topologies/fig10-4spine.yaml").rto_min == 10   # ms
    assert p.seed_rule.loads == (0.4,)
    old = build_plan("fig10-2spine", implemented=ALL)
    assert old.counts("load") == {0.2: N * 5, 0.4: N * 5, 0.6: N * 5, 0.8: N * 5}
    assert old.counts("topology") == {"topologies/fig10.yaml": N * 20}
    assert old.counts("placement") == {"spread": N * 20}
    assert {(r.model, r.arch, r.workers, r.servers) for r in p.runs} == {("threelayer", "ps", 4, 1)}
    assert len({r.key() for r in p.runs}) == len(p.runs)


def test_other_presets_plans():
    f11 = build_plan("fig11", implemented=ALL)
    assert f11.counts("topology") == {"topologies/fig11-4spine.yaml": N * 20}
    assert build_plan("fig11-2spine", implemented=ALL).counts("topology") == {
        "topologies/fig11.yaml": N * 20}
    rto = build_plan("fig10-rto", implemented=ALL)
    assert len(rto.runs) == 4 * 2 * 5 and rto.counts("load") == {0.4: 40}
    assert set(rto.counts("rto_min")) == {None, "kernel"}     # None: the topology's 10 ms
    conns = build_plan("fig10-conns", implemented=ALL)
    assert conns.counts("connections") == {"pair": 20, "pool:8": 20}
    assert sorted(conns.seed_rule.pairs) == sorted(
        [("talb", b) for b in ("ecmp", "rps", "conga")]
        + [("talb/pool:8", f"{b}/pool:8") for b in ("ecmp", "rps", "conga")])
    # their runs with the fabric's own settings are fig10's runs
    fig10_keys = {x.key() for x in build_plan("fig10", implemented=ALL).runs}
    assert {x.key() for x in conns.runs if x.connections == "pair"} <= fig10_keys
    assert {x.key() for x in rto.runs if x.rto_min is None} <= fig10_keys
    pp = build_plan("fig10-paper-pool", implemented=ALL)
    assert {(x.scheme, x.queueing, x.connections) for x in pp.runs} == {
        ("talb", "bands", "pool:8"), *((b, "fifo", "pool:8") for b in ("ecmp", "rps", "conga"))}
    # TaLB's runs are fig10-conns' (the same keys); the rule pairs it with FIFO baselines
    assert {x.key() for x in pp.runs if x.scheme == "talb"} <= {x.key() for x in conns.runs}
    assert ("talb/pool:8", "ecmp/fifo/pool:8") in pp.seed_rule.pairs
    f9 = build_plan("fig9", implemented=ALL)
    assert len(f9.runs) == N * 3 * 4 * 5
    assert f9.counts("model") == {m: N * 20 for m in ("alexnet", "resnet50", "vgg19")}
    assert f9.counts("target_link_bps") == {r: N * 15 for r in (10e9, 25e9, 50e9, 100e9)}
    assert f9.counts("topology") == {"topologies/testbed4x4.yaml": N * 60}
    # fig9 and fig4 scale by `fit`: the 4-packet floor would inflate VGG19's bytes 6.5x
    # at 100G under pure byte scaling (tests/test_scaling.py)
    assert {r.scaling_mode for r in f9.runs} == {"fit"}
    f4 = build_plan("fig4", implemented=ALL)
    assert f4.counts("scheme") == {"ecmp": 20, "rps": 20, "conga": 20}
    assert {(r.model, r.workers, r.servers, r.scaling_mode, r.background_size_scale)
            for r in f4.runs} == {("vgg19", 15, 1, "fit", 0.1)}
    fifo = build_plan("fig10-fifo", implemented=ALL)
    assert fifo.counts("topology") == {"topologies/fig10-fifo.yaml": N * 10}
    assert fifo.counts("load") == {0.2: N * 5, 0.8: N * 5}
    q = build_plan("quick", implemented=ALL)
    assert len(q.runs) == N * 2 * 3 and q.counts("load") == {0.2: N * 3, 0.4: N * 3}
    ab = build_plan("ablation", implemented=ALL)
    settings = planmod.PRESETS["ablation"]["agents"]
    assert "paper" in settings and "default" in settings
    # TaLB under every setting at 0.5 and 0.8 x 5 seeds, plus ECMP once per point
    assert ab.counts("scheme") == {"talb": len(settings) * 2 * 5, "ecmp": 2 * 5}
    assert ab.counts("agent")["paper"] == 10
    # settings run back to back at each (seed, load): a drift of the machine over
    # the sweep cannot look like a difference between settings
    first = ab.runs[:len(settings) + 1]
    assert [r.agent for r in first if r.scheme == "talb"] == list(settings)
    assert {(r.seed, r.load) for r in first} == {(1, 0.5)}
    assert [r.scheme for r in first].count("ecmp") == 1
    assert dict(next(r for r in ab.runs if r.agent == "paper").agent_opts)["threshold"] == "max"


def test_missing_schemes_refused_or_skipped():
    with pytest.raises(PlanError, match="does not implement.*rps") as exc:
        build_plan("fig10", implemented=frozenset({"ecmp", "talb"}))
    assert "conga" in str(exc.value)
    p = build_plan("fig10", implemented=frozenset({"ecmp", "talb"}), skip_missing=True)
    assert p.counts("scheme") == {"ecmp": 20, "talb": 20}
    assert p.skipped_schemes == [s for s in ALL_SCHEMES if s not in ("ecmp", "talb")]
    with pytest.raises(PlanError, match="unknown scheme.*warp"):
        build_plan(None, schemes=["warp"], implemented=ALL)


def test_overrides_and_bad_values():
    p = build_plan("fig10", implemented=ALL, schemes=["ecmp"], loads=[0.5], seeds=[3, 4])
    assert p.name.startswith("fig10+") and len(p.runs) == 2
    assert {(r.load, r.seed) for r in p.runs} == {(0.5, 3), (0.5, 4)}
    with pytest.raises(PlanError, match="--loads.*1.5"):
        build_plan(None, loads=[1.5], implemented=ALL)
    with pytest.raises(PlanError, match="--topologies.*nosuch"):
        build_plan(None, topologies=["nosuch.yaml"], implemented=ALL)
    with pytest.raises(PlanError, match="--agents.*fastest"):
        build_plan(None, agents=["fastest"], implemented=ALL)
    with pytest.raises(PlanError, match="--preset.*fig99"):
        build_plan("fig99")


def test_key_covers_every_parameter():
    r = build_plan("quick", implemented=ALL).runs[0]
    from dataclasses import replace

    for change in (dict(seed=99), dict(load=0.3), dict(agent_opts=(("w1", 0.0),)),
                   dict(iterations=9), dict(topology="x.yaml"), dict(target_link_bps=1.0),
                   dict(background_size_scale=0.1)):
        assert replace(r, **change).key() != r.key(), change


def test_keys_of_committed_sweeps_are_stable():
    """A field added later, at its default, leaves old keys alone: the
    committed fig10 results stay the resume and report set of `--preset fig10-2spine`."""
    r = build_plan("fig10-2spine", implemented=ALL).runs[0]
    assert "background_size_scale" not in r.params()
    assert r.key() == "1be7ea1a232f896f"       # results/fig10-2spine/plan.json, first run


# --- resume and outputs with a fake run ---------------------------------------------------
def _t(start_ms, done_ms, *, warmup=False, cls="short"):
    return {"src": 0, "dst": 4, "class": cls, "warmup": warmup,
            "t_start_ns": int((start_ms + (1000 if not warmup else 0)) * 1e6),
            "t_done_ns": int((done_ms + (1000 if not warmup else 0)) * 1e6),
            "fct_s": (done_ms - start_ms) / 1e3}


#: network FCT of the fakes: this share of their FCT (the rest: the socket buffer)
NET_SHARE = 0.4


def _fake_results(spec, *, cpu_bound=False, wire=True, offered=None):
    """A results file with the fields the sweep reads (experiment.py's format).
    ``wire=False``: as recorded before wire times (no network FCT at all).
    ``offered``: (training, background) of the busiest leaf's offered uplink
    load (summary.offered_load); None: a file from before it."""
    base = {"ecmp": 0.100, "talb": 0.050}.get(spec.scheme, 0.080) * (1 + spec.load)
    jitter = 1 + 0.01 * spec.seed
    head = {"scheme": spec.scheme, "samples_per_s": 100.0 / base, "iteration_time_s": base,
            "cpu_bound": cpu_bound}
    for cls in ("short", "long", "all", "trailing"):
        head[f"{cls}_fct_mean_s"] = base * jitter
        head[f"{cls}_fct_p99_s"] = 2 * base * jitter
        head[f"{cls}_censored"] = 0
        if wire:
            head[f"{cls}_netfct_mean_s"] = NET_SHARE * base * jitter
            head[f"{cls}_netfct_p99_s"] = NET_SHARE * 2 * base * jitter
            head[f"{cls}_sendbuf_wait_mean_s"] = (1 - NET_SHARE) * base * jitter
            head[f"{cls}_wire_missing"] = 0
    workers = [f"h{i}" for i in range(spec.workers)]
    return {"format": "talb-run/1",
            "config": {"workers": spec.workers, "servers": spec.servers, "arch": spec.arch},
            "model": {"batch_size": 32, "layer_fwd_s": [0.01], "layer_bwd_s": [0.02]},
            "placement": {"workers": workers, "servers": ["ps0"]},
            "fabric": {"host_link_bps": {h: 50e6 for h in workers + ["ps0"]}},
            "scaling": {"time_scale": 1.0},
            "flags": {"cpu_bound": cpu_bound}, "headline": head,
            "software": {"commit": "c0ffee"},
            # one connection h0 -> ps0: the second tensor is handed over at 10 ms but
            # can move only when the first is delivered at 50 ms: own service 30 of 70 ms
            "tensors": [_t(0, 500, warmup=True), _t(0, 50), _t(10, 80, cls="long"),
                        {"fct_s": None, "warmup": False}] if not wire else
            # the same, with 20 ms and 35 ms of them in the socket buffer
            [_t(0, 500, warmup=True), {**_t(0, 50), "sendbuf_wait_s": 0.020},
             {**_t(10, 80, cls="long"), "sendbuf_wait_s": 0.035},
             {"fct_s": None, "warmup": False}],
            "summary": {"cpu_guard": {"flagged": cpu_bound, "cpu_busy_mean": 0.5,
                                      "reason": "test"},
                        "bytes": {"expected_per_iteration": {"push_per_worker": 1_000_000,
                                                             "pull_per_worker": 1_000_000}},
                        "tcp": {"per_host": {"h0": {"out_segs": 1000, "retrans_segs": 20,
                                                    "timeouts": 3}}},
                        "uplinks": {"mean_spread": 0.25},
                        "port_drops": {"by_kind": {"to_host": 7, "leaf_up": 2,
                                                   "spine_down": 0}},
                        **({"offered_load": {
                            "max_total": sum(offered), "max_leaf": "leaf1",
                            "leaves": {"leaf1": {"training": offered[0], "background": offered[1],
                                                 "total": sum(offered)}}}} if offered else {})}}


def test_resumed_sweep_does_not_repeat_finished_runs(tmp_path):
    p = build_plan("quick", implemented=frozenset({"ecmp", "talb"}), skip_missing=True)
    calls = []

    def fake(spec, path, stop_after=None):
        calls.append(spec.key())
        if stop_after is not None and len(calls) > stop_after:
            raise KeyboardInterrupt
        path.write_text(json.dumps(_fake_results(spec)))

    with pytest.raises(KeyboardInterrupt):
        run_plan(p, tmp_path, run_fn=lambda s, q: fake(s, q, stop_after=5), progress=False)
    assert len(calls) == 6                       # the 6th was interrupted
    first = list(calls)
    calls.clear()
    rep = run_plan(p, tmp_path, run_fn=fake, progress=False)
    assert rep["skipped"] == 5 and rep["done"] == len(p.runs) - 5
    assert len(calls) == len(p.runs) - 5
    assert not set(calls) & set(first[:5])       # no finished run again
    assert first[5] in calls                     # the interrupted one is run
    calls.clear()
    assert run_plan(p, tmp_path, run_fn=fake, progress=False)["done"] == 0 and calls == []


def test_failed_run_recorded_and_retried(tmp_path):
    p = build_plan(None, implemented=ALL, schemes=["ecmp"], loads=[0.2], seeds=2)
    bad = p.runs[0].key()

    def flaky(spec, path):
        if spec.key() == bad:
            raise RuntimeError("node n1 failed")
        path.write_text(json.dumps(_fake_results(spec)))

    rep = run_plan(p, tmp_path, run_fn=flaky, progress=False)
    assert rep["done"] == 1 and list(rep["failed"]) == [bad]
    assert "node n1 failed" in json.loads((tmp_path / "failed.json").read_text())[bad]["error"]
    rep = run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
                   progress=False)
    assert rep["done"] == 1 and not (tmp_path / "failed.json").exists()


def test_outputs_exclude_cpu_bound_and_fill_the_tables(tmp_path):
    p = build_plan("quick", implemented=frozenset({"ecmp", "talb"}), skip_missing=True)
    flagged = p.runs[0]

    def fake(spec, path):
        path.write_text(json.dumps(_fake_results(spec, cpu_bound=spec == flagged)))

    run_plan(p, tmp_path, run_fn=fake, progress=False)
    (tmp_path / "analysis.md").write_text("The PS's access link is the bottleneck.")
    res = finish(p, tmp_path)
    csv_lines = (tmp_path / "runs.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(p.runs)
    assert sum(r["status"] == "cpu_bound" for r in res["rows"]) == 1
    pt = next(q for q in res["points"] if q["scheme"] == flagged.scheme and q["load"] == flagged.load)
    assert pt["counted"] == 2 and pt["cpu_bound"] == 1
    md = (tmp_path / "summary.md").read_text()
    assert "Runs made at commit c0ffee." in md        # the runs' code, not the report's
    assert flagged.key() in md.split("## Runs excluded")[1]
    # the hand-written analysis is carried into the summary, kept across --report-only
    assert "The PS's access link is the bottleneck." in md.split("## Analysis")[1]
    # where the time goes: 4 workers x 1 MB into one 50 Mbit/s PS link = 0.64 s per
    # iteration, over the 0.03 s compute: at most 4 x 32 / 0.64 = 200 samples/s
    row0 = next(r for r in res["rows"] if r["status"] == "ok")
    assert row0["access_bound_samples_per_s"] == pytest.approx(200.0)
    assert row0["access_gap"] == pytest.approx(1 - row0["samples_per_s"] / 200.0)
    assert (row0["tcp_retrans_pct"], row0["tcp_timeouts"]) == (pytest.approx(2.0), 3)
    assert (row0["drops_to_host"], row0["drops_leaf_up"], row0["uplink_spread"]) == (7, 2, 0.25)
    assert row0["rto_tail_pct"] == pytest.approx(0.0)      # none of the measured >= 200 ms
    # 50 + 70 ms of FCT, 50 + 30 ms of own service: 1/3 of it behind the first tensor
    assert row0["hol_pct"] == pytest.approx(100 / 3)
    # 20 + 35 ms of the 50 + 70 ms in the socket buffer
    assert row0["sendbuf_pct"] == pytest.approx(100 * 55 / 120)
    assert row0["short_netfct_mean_s"] == pytest.approx(NET_SHARE * row0["short_fct_mean_s"])
    assert row0["all_sendbuf_wait_mean_s"] == pytest.approx((1 - NET_SHARE) * row0["all_fct_mean_s"])
    assert row0["all_wire_missing"] == 0
    assert row0["short_service_mean_s"] == pytest.approx(0.050)
    assert ("| hol | sendbuf | short service mean | access gap | tcp retrans | tcp timeouts "
            "| rto tail |") in md
    assert "rps, letflow, drill, conga" in md
    # ecmp at 0.8: talb has half ecmp's FCT at every seed in the fake -> -50%, paired;
    # the seed whose ecmp run is CPU-bound (if at 0.8) has nothing to pair
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["paper"] == "−68%" and row["ours"].startswith("-50% [-50%, -50%]")
    assert row["metric"] == "short_netfct_mean_s"        # the paper's FCT is the network's
    assert row["ours_handoff"].startswith("-50% [-50%, -50%]")   # the hand-off FCT beside it
    assert row["verdict"] == "TaLB better" and row["p_holm"] < 0.05
    assert row["paper_effect"] == "excluded (ours above)"           # 0.32 < 0.5
    assert next(r for r in res["paper_vs_ours"]
                if r["number"] == "short-flow AFCT vs RPS")["verdict"] == "not run"
    # results files without a pairing record (made before it existed): said so, no crash
    assert "**Pairing not recorded.**" in md and "testbed wall-clock (time scale 1:" in md
    assert "**FCT rows compare network FCT**" in md and "| short netfct mean |" in md
    # every scheme pair at every point: ecmp-talb, 2 loads, 13 outcomes (iteration time the 13th)
    from experiments.sweep.results import OUTCOME_METRICS

    pairs = (tmp_path / "paired.csv").read_text().splitlines()
    assert len(OUTCOME_METRICS) == 13 and len(pairs) == 1 + 2 * 13
    assert "## Paired comparisons: TaLB against each scheme" in md
    # the chance count names the table's own tests: 2 loads x 5 outcomes, all measured
    assert verdict_cells(md) == 10 and "(with 10 tests, about 0 better/worse" in md
    for name, panels in res["plots"].items():
        assert (tmp_path / name).stat().st_size > 0
        for title, lines in panels.items():
            assert sorted(lines) == ["ecmp", "talb"], (name, title)


def test_offered_uplink_load_in_the_csv_and_summary(tmp_path):
    """runs.csv carries each run's offered uplink load and its parts; the
    points table shows the mean and range per point and marks the points
    at or past saturation; runs from before the block say n/a."""
    import csv

    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.2, 0.8], seeds=2)

    def fake(spec, path):
        bg = {0.2: 0.25, 0.8: 0.85}[spec.load] + 0.1 * spec.seed
        path.write_text(json.dumps(_fake_results(spec, offered=(0.2, bg))))

    run_plan(p, tmp_path, run_fn=fake, progress=False)
    res = finish(p, tmp_path)
    with open(tmp_path / "runs.csv") as f:
        rows = list(csv.DictReader(f))
    r = next(x for x in rows if x["load"] == "0.8" and x["seed"] == "2")
    assert float(r["offered_uplink_load"]) == pytest.approx(0.2 + 0.85 + 0.2)
    assert float(r["offered_uplink_training"]) == pytest.approx(0.2)
    assert float(r["offered_uplink_background"]) == pytest.approx(1.05)
    assert r["offered_uplink_leaf"] == "leaf1"
    pt = next(q for q in res["points"] if q["load"] == 0.8 and q["scheme"] == "talb")
    assert pt["range"]["offered_uplink_load"] == [pytest.approx(1.15), pytest.approx(1.25)]
    md = (tmp_path / "summary.md").read_text()
    points = md.split("## Points")[1].split("### Where the time goes")[0]
    assert "| offered uplink load |" in points
    assert "| 1.20 [1.15–1.25] **past saturation** |" in points
    assert "| 0.60 [0.55–0.65] |" in points
    assert "2 of 4 points here (load 0.8)." in points
    # the same report from files without the block: n/a, the report still made
    run_plan(p, tmp_path / "old", run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    finish(p, tmp_path / "old")
    points = (tmp_path / "old" / "summary.md").read_text().split("## Points")[1]
    assert "| n/a |" in points and "**past saturation** |" not in points
    assert "n/a: runs recorded before the offered load was." in points


def test_cli_refuses_missing_scheme_naming_it(tmp_path):
    from talb.cli import main

    r = CliRunner().invoke(main, ["bench", "--schemes", "ecmp,warp", "--dry-run", "--out",
                                  str(tmp_path)])
    assert r.exit_code == 1 and "warp" in r.output
    r = CliRunner().invoke(main, ["bench", "--preset", "fig10", "--skip-missing", "--dry-run",
                                  "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["bench", "datapath", "--help"])
    assert r.exit_code == 0 and "iperf3" in r.output


def test_point_with_every_seed_cpu_bound_says_so(tmp_path):
    p = build_plan("quick-ci", implemented=frozenset({"ecmp", "talb"}), skip_missing=True)

    def fake(spec, path):
        bound = spec.scheme == "talb" and spec.load == 0.4
        path.write_text(json.dumps(_fake_results(spec, cpu_bound=bound)))

    run_plan(p, tmp_path, run_fn=fake, progress=False)
    res = finish(p, tmp_path)
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "overall AFCT vs ECMP")
    assert row["ours"] == "-" and row["verdict"] == "no counted run (CPU-bound or failed)"
    pt = next(q for q in res["points"] if q["scheme"] == "talb" and q["load"] == 0.4)
    assert pt["counted"] == 0 and pt["cpu_bound"] == 2 and pt["est"]["all_fct_mean_s"].mean is None


def _sweep(tmp_path, schemes, seeds, bound=lambda spec: False, wire=True):
    p = build_plan(None, implemented=ALL, schemes=schemes, loads=[0.8], seeds=seeds)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(
        json.dumps(_fake_results(s, cpu_bound=bound(s), wire=wire))), progress=False)
    return finish(p, tmp_path)


def test_headline_pairs_by_seed_and_names_the_unpaired(tmp_path):
    res = _sweep(tmp_path, ["ecmp", "talb"], 3,
                 bound=lambda s: s.scheme == "talb" and s.seed == 2)
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["n"] == 2 and row["unpaired_seeds"] == [2]
    md = (tmp_path / "summary.md").read_text()
    assert "| 2 (seed 2 unpaired) |" in md
    # TaLB at half ECMP's network FCT at each seed: -0.09 s x NET_SHARE x (1 + 0.01 seed)
    assert row["pair"].diff.mean == pytest.approx(-0.09 * NET_SHARE * (1.01 + 1.03) / 2)
    assert row["pair_handoff"].diff.mean == pytest.approx(-0.09 * (1.01 + 1.03) / 2)
    assert row["paper_effect"] == "excluded (ours above)"


def test_headline_without_talb_says_so(tmp_path):
    res = _sweep(tmp_path, ["ecmp", "rps"], 2)
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["verdict"] == "TaLB not run" and row["unpaired_seeds"] == [] and row["n"] == 0


def test_runs_from_before_wire_times_fall_back_to_the_handoff_fct(tmp_path):
    """Results recorded before wire times (the committed ones): the FCT rows
    are judged on the FCT from the hand-off, say so, and stay in the Holm
    family (the same family as with wire times); nothing is made up."""
    res = _sweep(tmp_path, ["ecmp", "talb"], 3, wire=False)
    with_wire = _sweep(tmp_path / "wire", ["ecmp", "talb"], 3)
    for number in ("short-flow AFCT vs ECMP", "short-flow p99 FCT vs ECMP",
                   "long-flow AFCT vs ECMP", "overall AFCT vs ECMP"):
        row = next(r for r in res["paper_vs_ours"] if r["number"] == number)
        assert row["verdict"].endswith("no network FCT in these runs (recorded before wire times)")
        assert row["verdict"].startswith("TaLB better; on the FCT from the hand-off"), row["verdict"]
        assert "_fct_" in row["metric"]                    # a hand-off metric
        assert row["n"] == 3 and row["ours"].startswith("-50% [-50%, -50%]")
        assert row["ours_handoff"] == row["ours"] and row["holm"]
        assert row["paper_effect"] != "-"
    family = [r["number"] for r in res["paper_vs_ours"] if r["holm"] and r["p"] is not None]
    assert family == [r["number"] for r in with_wire["paper_vs_ours"]
                      if r["holm"] and r["p"] is not None]
    assert next(r for r in res["paper_vs_ours"]
                if r["number"] == "short-flow AFCT vs RPS")["verdict"] == "not run"
    speed = next(r for r in res["paper_vs_ours"] if r["number"] == "training speed vs ECMP")
    assert speed["verdict"] == "TaLB better"          # the rest of the table as before
    assert all(r.get("short_netfct_mean_s") is None and r.get("sendbuf_pct") is None
               for r in res["rows"])
    pt = next(q for q in res["points"] if q["scheme"] == "talb")
    assert pt["est"]["short_netfct_mean_s"].mean is None
    md = (tmp_path / "summary.md").read_text()
    assert "no network FCT in these runs" in md


def test_bootstrap_shown_from_ten_pairs(tmp_path):
    res = _sweep(tmp_path, ["ecmp", "talb"], 10)
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["n"] == 10 and "(bootstrap [" in row["diff"]
    lo, hi = row["pair"].bootstrap
    assert row["pair"].diff.low < row["pair"].diff.mean < row["pair"].diff.high
    assert lo <= row["pair"].diff.mean <= hi
    md = (tmp_path / "summary.md").read_text()
    assert "so none is shown" not in md
    # the check on the tested scale, counted over paired.csv
    import csv
    table = list(csv.DictReader(open(tmp_path / "paired.csv")))
    checked = [r["boot_agrees"] for r in table if r["boot_agrees"]]
    assert checked and all(r["boot_ratio_low"] for r in table if r["boot_agrees"] and
                           r["scale"] == "log-ratio")
    assert f"agrees in {checked.count('True')} of the {len(checked)} comparisons" in md


def test_report_reads_runs_from_the_archive(tmp_path):
    """A committed directory keeps its runs only as runs.tar.xz: the report
    reads them from there, the same rows as from runs/."""
    import shutil
    import tarfile

    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.8], seeds=2)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    direct = finish(p, tmp_path)["rows"]
    with tarfile.open(tmp_path / "runs.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "runs", arcname="runs")
    shutil.rmtree(tmp_path / "runs")
    archived = finish(p, tmp_path)["rows"]
    assert archived == direct and all(r["status"] == "ok" for r in archived)
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
    (tmp_path / "runs.tar.xz").unlink()
    assert {r["status"] for r in finish(p, tmp_path)["rows"]} == {"missing"}


def test_archive_parts_are_append_only_and_the_newest_wins(tmp_path):
    """`talb bench archive`: the first pack writes runs.tar.xz, a later one
    only the new or changed runs into runs-2.tar.xz (the first part's bytes
    untouched); the report reads every part, a run made again from the
    newest; nothing new writes nothing; no runs/ is refused by name."""
    import shutil

    from experiments.sweep.archive import ArchiveError, pack_new_runs, parts

    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.8], seeds=3)
    first, later = [r for r in p.runs if r.seed < 3], [r for r in p.runs if r.seed == 3]
    run_plan(dataclasses.replace(p, runs=first), tmp_path,
             run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))), progress=False)
    res = pack_new_runs(tmp_path)
    assert res["part"] == tmp_path / "runs.tar.xz" and res["new"] == len(first)
    one = (tmp_path / "runs.tar.xz").read_bytes()
    assert pack_new_runs(tmp_path)["part"] is None            # nothing new: nothing written
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    # one run of the first chunk made again, with another result
    again = result_path(tmp_path, first[0])
    redone = json.loads(again.read_text())
    redone["headline"]["samples_per_s"] = 12345.0
    again.write_text(json.dumps(redone))
    direct = finish(p, tmp_path)["rows"]
    res = pack_new_runs(tmp_path)
    assert (res["part"].name, res["new"], res["replaced"], res["kept"]) == \
        ("runs-2.tar.xz", len(later), 1, len(first) - 1)
    assert (tmp_path / "runs.tar.xz").read_bytes() == one
    assert parts(tmp_path) == [tmp_path / "runs.tar.xz", tmp_path / "runs-2.tar.xz"]
    assert not list(tmp_path.glob(".*partial"))
    shutil.rmtree(tmp_path / "runs")
    archived = finish(p, tmp_path)["rows"]
    assert archived == direct and all(r["status"] == "ok" for r in archived)
    assert [r["samples_per_s"] for r in archived if r["key"] == first[0].key()] == [12345.0]
    with pytest.raises(ArchiveError, match=r"runs: no such directory"):
        pack_new_runs(tmp_path)


def test_talb_bench_archive_command(tmp_path):
    """The CLI: a part written and said, then "nothing to pack", and a
    directory without runs/ refused naming it (exit 1, no traceback)."""
    from click.testing import CliRunner

    from talb.cli import main

    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.8], seeds=1)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    r = CliRunner().invoke(main, ["bench", "archive", str(tmp_path)])
    assert r.exit_code == 0 and "runs.tar.xz: 2 new and 0 changed run(s)" in r.output, r.output
    r = CliRunner().invoke(main, ["bench", "archive", str(tmp_path)])
    assert r.exit_code == 0 and "nothing to pack" in r.output, r.output
    r = CliRunner().invoke(main, ["bench", "archive", str(tmp_path / "none")])
    assert r.exit_code == 1 and "none/runs: no such directory" in r.output, r.output


# --- seeds chosen by the interval they reach (experiments/sweep/seeds.py) ------------------------
def test_presets_carry_a_seed_rule_and_previews_do_not():
    fig10 = build_plan("fig10", implemented=ALL).seed_rule
    assert (fig10.first, fig10.cap, fig10.width, fig10.metric, fig10.loads) == \
        (5, 10, 0.2, "short_netfct_mean_s", (0.4,))
    assert {b for _, b in fig10.pairs} == {"ecmp", "rps", "conga"}
    assert build_plan("fig9", implemented=ALL).seed_rule.metric == "samples_per_s"
    assert build_plan("quick", implemented=ALL).seed_rule is None
    assert build_plan("fig10", implemented=ALL, seeds=[1, 2, 3]).seed_rule is None
    assert build_plan("fig10", implemented=ALL, fixed_seeds=True).seed_rule is None
    assert build_plan("fig10", implemented=ALL, seeds=3, seed_cap=12).seed_rule.cap == 12
    # without TaLB, or with no pair of the rule's schemes, there is nothing to watch
    assert build_plan("fig10", implemented=ALL, schemes=["ecmp", "rps"]).seed_rule is None


@pytest.mark.parametrize("kw, flag", [
    (dict(preset="quick", seed_cap=12), "--seed-cap: the preset has no seed rule"),
    (dict(preset="fig10", seeds=[1, 2], seed_width=0.1), "--seed-width: --seeds lists"),
    (dict(preset="fig10", seeds=6, seed_cap=4), r"--seed-cap: at least --seeds \(6\), got 4"),
    (dict(preset="fig10", seed_width=0.0), "--seed-width: a width"),
    (dict(preset="fig10", seed_cap=0), "--seed-cap: at least 1, got 0"),
])
def test_seed_rule_options_refused_with_the_flag_named(kw, flag):
    preset = kw.pop("preset")
    with pytest.raises(PlanError, match=flag):
        build_plan(preset, implemented=ALL, **kw)


def _noisy(noise_of):
    """A fake run whose short AFCT is TaLB's half of ECMP's times (1 + noise_of(seed))."""
    def run(spec, path):
        res = _fake_results(spec)
        if spec.scheme == "talb":
            res["headline"]["short_fct_mean_s"] *= 1 + noise_of(spec.seed)
        res["summary"]["tensors"] = {"by_class": {"short": {"n": 400}}, "trailing": {"n": 40}}
        res["training_s"] = 4.0
        path.write_text(json.dumps(res))
    return run


def _rule_sweep(tmp_path, noise_of, **kw):
    from experiments.sweep.runner import run_sweep

    p = build_plan("quick", implemented=ALL, schemes=["ecmp", "talb"], loads=[0.2, 0.8],
                   seeds=3, fixed_seeds=False)
    rule = planmod.SeedRule(first=3, cap=kw.get("cap", 6), width=0.2, pairs=(("talb", "ecmp"),),
                            loads=(0.8,))
    p = dataclasses.replace(p, seed_rule=rule)
    return run_sweep(p, tmp_path, run_fn=_noisy(noise_of), progress=False)


def test_seed_rule_stops_at_once_when_the_interval_is_narrow(tmp_path):
    plan, rep = _rule_sweep(tmp_path, lambda seed: 0.0)     # the same ratio at every seed
    assert rep["done"] == 2 * 2 * 3 and len(plan.runs) == 12
    rec = json.loads((tmp_path / "seeds.json").read_text())
    (pt,) = rec["points"]
    assert pt["status"] == "narrow" and pt["seeds"] == [1, 2, 3] and rec["extra_runs"] == []
    assert pt["pairs"][0]["ratio"] == pytest.approx(0.5)


def test_seed_rule_adds_seeds_at_the_headline_point_only_up_to_the_cap(tmp_path):
    # TaLB's ratio swings ±30% from seed to seed: the interval never gets under 0.2
    plan, rep = _rule_sweep(tmp_path, lambda seed: 0.3 * (-1) ** seed, cap=6)
    added = [r for r in plan.runs if r.seed > 3]
    assert {r.load for r in added} == {0.8} and {r.seed for r in added} == {4, 5, 6}
    assert {r.scheme for r in added} == {"ecmp", "talb"} and len(added) == 6
    assert rep["done"] == 12 + 6
    (pt,) = json.loads((tmp_path / "seeds.json").read_text())["points"]
    assert pt["status"] == "cap" and pt["seeds"] == [1, 2, 3, 4, 5, 6]
    assert pt["pairs"][0]["width"] > 0.2


def test_seed_rule_stops_when_more_seeds_narrow_the_interval(tmp_path):
    # wild for the first 3 seeds, then steady: a few more seeds bring the width under 0.2
    plan, _ = _rule_sweep(tmp_path, lambda seed: [0.0, 0.12, -0.12, 0.1][seed - 1]
                          if seed <= 4 else 0.0, cap=12)
    (pt,) = json.loads((tmp_path / "seeds.json").read_text())["points"]
    assert pt["status"] == "narrow" and 3 < len(pt["seeds"]) < 12
    assert pt["pairs"][0]["width"] < 0.2


def test_resumed_and_reported_sweeps_keep_the_added_seeds(tmp_path):
    from experiments.sweep import seeds
    from experiments.sweep.runner import run_sweep

    plan, _ = _rule_sweep(tmp_path, lambda seed: 0.3 * (-1) ** seed, cap=5)
    bare = dataclasses.replace(plan, runs=[r for r in plan.runs if r.seed <= 3])
    again = seeds.with_recorded(bare, tmp_path)
    assert [r.key() for r in again.runs] == [r.key() for r in plan.runs]
    calls = []
    run_sweep(again, tmp_path, run_fn=lambda s, q: calls.append(s), progress=False)
    assert calls == [], "a resumed sweep re-runs nothing it has"
    finish(again, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "## Seeds" in md and "cap (5) reached, still wider" in md
    # 400 short tensors of ~0.09-0.18 s: one 200 ms RTO moves a mean by at most 0.2/(400 x 0.09)
    assert "could move a run's `short_fct_mean_s` by at most" in md
    assert "no run over 5%" in md


def test_rto_weight_on_known_numbers():
    from experiments.sweep.seeds import rto_weight

    row = {"short_fct_mean_s": 0.05, "short_count": 40, "samples_per_s": 100.0, "training_s": 2.0}
    assert rto_weight(row, "short_fct_mean_s") == pytest.approx(0.2 / (40 * 0.05))   # 10%
    assert rto_weight(row, "samples_per_s") == pytest.approx(0.1)
    assert rto_weight({"short_fct_mean_s": 0.05}, "short_fct_mean_s") is None
    # hosts with a 10 ms minimum RTO (the 4-spine presets): one timeout weighs 20x less
    fast = {**row, "rto_min_ms_in_effect": 10}
    assert rto_weight(fast, "short_fct_mean_s") == pytest.approx(0.01 / (40 * 0.05))
    assert rto_weight({**row, "rto_min_ms_in_effect": None}, "samples_per_s") == \
        pytest.approx(0.1)


def test_rto_tail_is_200_ms_whatever_the_minimum_rto():
    from experiments.sweep.results import mechanism

    spec = build_plan("quick", implemented=ALL).runs[0]
    res = _fake_results(spec)          # measured tensors of 50 and 70 ms
    tail = {}
    for ms in (None, 10):
        res["fabric"]["rto_min_ms"] = ms
        tail[ms] = mechanism(res, None)["rto_tail_pct"]
    res["tensors"][1]["fct_s"] = 0.25                 # the 50 ms tensor now takes 250 ms
    assert (tail[None], tail[10], mechanism(res, None)["rto_tail_pct"]) == (0, 0, 50)


def test_cli_states_the_seed_rule_and_refuses_it_where_it_cannot_apply(tmp_path):
    from talb.cli import main

    r = CliRunner().invoke(main, ["bench", "--preset", "fig10", "--seed-cap", "12", "--dry-run",
                                  "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "seed rule: 5 seeds everywhere, then up to 12 at the headline points" in r.output
    r = CliRunner().invoke(main, ["bench", "--preset", "quick", "--seed-cap", "12", "--dry-run",
                                  "--out", str(tmp_path)])
    assert r.exit_code == 1 and "--seed-cap: the preset has no seed rule" in r.output
