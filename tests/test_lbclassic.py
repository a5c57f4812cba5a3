"""lb-classic without a fabric: the normalisation and classes on constructed
flows with known answers, the capacity and window rules, the plan (keys
apart from training runs, training options refused) and the report (paired
verdicts, every published direction listed with one, reproducible)."""
from __future__ import annotations

import json
import math
import random
import zlib
from collections import Counter
from pathlib import Path

import pytest

from experiments.sweep.kinds import build_plan
from experiments.sweep.labels import DRILL_ASYMMETRIC
from experiments.sweep.plan import ALL_SCHEMES, PRESETS, PlanError
from workload import background_only as bo

REPO = Path(__file__).resolve().parents[1]
#: lb-classic runs every scheme of the registry
ALL = frozenset(ALL_SCHEMES)
MS = 1e-3


def _flow(fid, size, *, start_s, fct_s=None, status="done", src="h0", dst="h4", t0=10**12):
    start = t0 + int(start_s * 1e9)
    return {"flow_id": fid, "src": src, "dst": dst, "size_bytes": size, "planned_start_ns": start,
            "start_ns": start, "end_ns": start + int(fct_s * 1e9) if fct_s else None,
            "received_bytes": size if status == "done" else 0, "status": status, "error": "",
            "fct_s": fct_s if status == "done" else None, "size_class": "wire-scale"}


RATES = {"h0": 50e6, "h4": 50e6, "h1": 25e6}


def _rows(flows, base=1 * MS, scale=0.2):
    return bo.flow_rows(flows, t0_ns=10**12, warmup_s=2.0, window_s=10.0, size_scale=scale,
                        host_rate_bps=RATES, base_s=base)


def test_ideal_and_normalised_fct_known_answers():
    # 62,500 B at 50 Mbit/s = 10 ms; + B 1 ms = ideal 11 ms; FCT 22 ms -> 2.0
    r = _rows([_flow(0, 62_500, start_s=3.0, fct_s=22 * MS)])[0]
    assert r["serial_s"] == pytest.approx(10 * MS)
    assert r["nfct"] == pytest.approx(2.0)
    # the slower host sets R: 25 Mbit/s -> 20 ms + 1 ms; FCT 21 ms -> exactly its ideal
    r = _rows([_flow(1, 62_500, start_s=3.0, fct_s=21 * MS, src="h1")])[0]
    assert r["nfct"] == pytest.approx(1.0)
    # without B a 100-byte flow would read 1000x at 16 us + 1 ms of handshake:
    # with it, ~1 on an idle fabric
    r = _rows([_flow(2, 100, start_s=3.0, fct_s=1.016 * MS)])[0]
    assert r["nfct"] == pytest.approx(1.0, abs=1e-3)
    # another B for the same flow (the report's pooled one)
    assert bo.normalised(r, 0.5 * MS) == pytest.approx(1.016 / (0.016 + 0.5))
    # a censored flow has no FCT and no normalised FCT, never 0
    r = _rows([_flow(3, 1000, start_s=3.0, status="censored")])[0]
    assert r["nfct"] is None and r["fct_s"] is None


def test_phases_and_classes_at_the_cdf_scale():
    flows = _rows([_flow(0, 10_000, start_s=1.0, fct_s=0.01),      # warm-up
                   _flow(1, 10_000, start_s=2.0, fct_s=0.01),      # window starts at W
                   _flow(2, 30_000, start_s=11.9, fct_s=0.01),     # window
                   _flow(3, 300_000, start_s=12.0, fct_s=0.1)],    # fill starts at W + D
                  scale=0.2)
    assert [f["phase"] for f in flows] == ["warmup", "window", "window", "fill"]
    # 10 KB at x0.2 is 50 KB at the CDF's scale: short; 30 KB -> 150 KB medium; 300 KB -> 1.5 MB long
    assert [f["class"] for f in flows] == ["short", "short", "medium", "long"]
    assert "size_class" not in flows[0]          # the wire-scale class is not carried over
    assert bo.size_class(20_000, 0.2) == "short" and bo.size_class(200_000, 0.2) == "long"


def test_class_summary_counts_means_and_p99():
    # 100 short window flows with normalised FCT 1..100 (nearest-rank p99 = 99),
    # 2 censored short ones, 3 long ones; warm-up and fill flows left out
    serial = 8 * 10_000 / 50e6
    flows = [_flow(i, 10_000, start_s=2.0 + i * 0.05, fct_s=(i + 1) * (serial + MS))
             for i in range(100)]
    flows += [_flow(100 + i, 10_000, start_s=5.0, status="censored") for i in range(2)]
    flows += [_flow(200 + i, 250_000, start_s=6.0, fct_s=4 * (8 * 250_000 / 50e6 + MS))
              for i in range(3)]
    flows += [_flow(300, 10_000, start_s=0.5, fct_s=9.9), _flow(301, 10_000, start_s=12.5, fct_s=9.9)]
    s = bo.class_summary(_rows(flows))
    short, long_, all_ = s["short"], s["long"], s["all"]
    assert (short["flows"], short["done"], short["censored"]) == (102, 100, 2)
    assert short["nfct_mean"] == pytest.approx(50.5)
    assert short["nfct_p99"] == pytest.approx(99.0)
    assert short["fct_mean_s"] == pytest.approx(50.5 * (serial + MS))
    assert (long_["done"], long_["nfct_mean"], long_["nfct_p99"]) == (3, pytest.approx(4.0),
                                                                      pytest.approx(4.0))
    assert (all_["flows"], all_["done"], all_["censored"]) == (105, 103, 2)
    assert all_["nfct_mean"] == pytest.approx((50.5 * 100 + 12) / 103)
    assert s["medium"]["flows"] == 0 and s["medium"]["nfct_mean"] is None
    assert short["bytes"] == 102 * 10_000


def test_capacity_window_and_cdf_rules():
    from common import paths
    from netns_topology import load_topology
    from workload.background import FlowSizeCDF, arrival_rate

    topo = lambda n: load_topology(paths.REPO_ROOT / "topologies" / n)  # noqa: E731
    assert bo.even_capacity_bps(topo("lb-classic-sym.yaml")) == 200e6
    # leaf0's uplinks 50 + 25: traffic spread evenly fits 2 x 75, not the 175 of the sum
    assert bo.even_capacity_bps(topo("lb-classic-asym.yaml")) == 150e6
    assert bo.even_capacity_bps(topo("fig11.yaml")) == 75e6
    ws = FlowSizeCDF.named("websearch")
    assert bo.cdf_at(ws, 100_000) == pytest.approx(0.53 + 0.07 * 20 / 120)
    assert bo.cdf_at(ws, 0) == 0.0 and bo.cdf_at(ws, 3e7) == 1.0
    # the default window plans SHORT_FLOWS_TARGET short flows on average
    w = bo.default_window_s("websearch", 0.2, 0.5, 200e6)
    short_per_s = arrival_rate(0.5, 200e6, ws.scaled(0.2)) * bo.cdf_at(ws, 100_000)
    assert w * short_per_s == pytest.approx(bo.SHORT_FLOWS_TARGET, rel=0.01)
    assert bo.default_window_s("websearch", 0.2, 0.01, 200e6) == bo.WINDOW_MAX_S
    assert bo.default_window_s("datamining", 0.025, 0.9, 200e6) == bo.WINDOW_MIN_S == 20.0
    # the preset's scales give both CDFs ~330 KB flows, <= 100 flows/s at load 0.9
    for cdf, scale in bo.DEFAULT_SIZE_SCALE.items():
        d = FlowSizeCDF.named(cdf).scaled(scale)
        assert 300e3 < d.mean() < 360e3
        assert arrival_rate(0.9, 200e6, d) < 100
    assert bo.margin_s(10) == 2.0 and bo.margin_s(150) == 15.0


def test_plan_runs_and_keys():
    p = build_plan("lb-classic")
    assert len(p.runs) == 2 * 2 * 6 * len(ALL) * 5     # fabrics x CDFs x loads x schemes x seeds
    assert p.counts("scheme") == {s: 120 for s in ALL}
    assert {r.model for r in p.runs} == {"none"} and {r.background_cdf for r in p.runs} == \
        {"websearch", "datamining"}
    assert all(r.background_s and r.background_size_scale for r in p.runs)
    assert {r.load for r in p.runs} == {0.1, 0.3, 0.5, 0.7, 0.8, 0.9}
    # scheme innermost: what a point compares runs back to back
    assert [r.scheme for r in p.runs[:7]] == ["ecmp", "rps", "letflow", "drill", "conga", "talb",
                                              "presto"]
    keys = {r.key() for r in p.runs}
    assert len(keys) == len(p.runs)
    training = {r.key() for name, pre in PRESETS.items() if pre.get("kind") != "background"
                for r in build_plan(name).runs}
    assert not keys & training
    assert all(r.params()["model"] == "none" and "background_s" in r.params() for r in p.runs)
    q = build_plan("lb-classic-quick")
    assert len(q.runs) == 8 and {r.background_s for r in q.runs} == {5.0}
    assert q.runs[0].label() == "lb-classic-quick websearch ecmp load 0.3 seed 1"
    # overrides
    o = build_plan("lb-classic", cdfs=["websearch"], loads=[0.5], seeds=2,
                   schemes=["ecmp", "conga"])
    assert len(o.runs) == 2 * 1 * 1 * 2 * 2 and o.name.startswith("lb-classic+")


@pytest.mark.parametrize("over,flag", [
    ({"models": ["vgg19"]}, "--models"), ({"iterations": 3}, "--iterations"),
    ({"workers": 4}, "--workers"), ({"target_rates": [1e10]}, "--target-rates"),
    ({"loads": [0.0, 0.5]}, "--loads"), ({"cdfs": ["video"]}, "--cdfs"),
    ({"queueing": ["fifo"]}, "--queueing"), ({"seed_cap": 3}, "--seed-cap"),
    ({"seed_width": 2.5}, "--seed-width"),
])
def test_plan_refuses_what_makes_no_sense(over, flag):
    with pytest.raises(PlanError, match=flag):
        build_plan("lb-classic", **over)


def test_seed_rule_watches_the_loads_the_directions_are_tested_at():
    """Each balancer against ECMP on the all-flow mean, at the light and the
    heavy load of the sweep (0.1 and 0.8 in the full preset); none where the
    sweep has neither, nor in the quick preview or with fixed seeds."""
    rule = build_plan("lb-classic").seed_rule
    assert (rule.first, rule.cap, rule.width, rule.metric, rule.loads) == \
        (5, 10, 0.2, "all_nfct_mean", (0.1, 0.8))
    # the light-load direction is the symmetric fabric's: the asymmetric one gets no seeds there
    sym, asym = "topologies/lb-classic-sym.yaml", "topologies/lb-classic-asym.yaml"
    assert rule.where == ((0.1, sym), (0.8, asym), (0.8, sym))
    assert build_plan("lb-classic", loads=[0.3, 0.8],
                      topologies=["lb-classic-asym"]).seed_rule.where == ((0.8, asym),)
    assert rule.pairs == tuple((s, "ecmp") for s in ALL_SCHEMES if s != "ecmp")
    assert build_plan("lb-classic", loads=[0.3, 0.5, 0.9]).seed_rule.loads == \
        (0.3, 0.9)
    assert build_plan("lb-classic", loads=[0.8]).seed_rule.loads == (0.8,)
    assert build_plan("lb-classic", loads=[0.5]).seed_rule is None
    assert build_plan("lb-classic", fixed_seeds=True).seed_rule is None
    assert build_plan("lb-classic", seeds=[1, 2]).seed_rule is None
    assert build_plan("lb-classic", seed_cap=12).seed_rule.cap == 12
    # pairs the schemes leave out are dropped; with no ECMP, no pair is left
    assert build_plan("lb-classic", schemes=["ecmp", "drill"]
                      ).seed_rule.pairs == (("drill", "ecmp"),)
    assert build_plan("lb-classic", schemes=["rps", "drill"]).seed_rule is None
    assert build_plan("lb-classic-quick").seed_rule is None
    with pytest.raises(PlanError, match="--seed-cap: the preset has no seed rule"):
        build_plan("lb-classic-quick", seed_cap=8)


def test_seed_rule_adds_seeds_at_the_direction_points_until_the_cap(tmp_path):
    """Wide per-seed ratios (the constructed noise) keep every direction
    point below the width: the sweep adds seeds there one at a time, every
    scheme, up to the cap, and nowhere else; seeds.json records them, and
    the summary says the cap stopped each point."""
    from experiments.sweep.kinds import finish
    from experiments.sweep.runner import run_sweep
    from experiments.sweep.seeds import with_recorded

    def noisy(spec, path):
        _fake(spec, path)
        res = json.loads(path.read_text())
        k = 1 + 0.5 * random.Random(f"{spec.seed} {spec.scheme} {spec.load}").random()
        for f in res["load"]["background"]["flows"]:
            if f.get("fct_s"):
                f["fct_s"] *= k
        path.write_text(json.dumps(res))

    p = build_plan("lb-classic", loads=[0.5, 0.8], seeds=2, seed_cap=4,
                   schemes=["ecmp", "drill"], cdfs=["websearch"],
                   topologies=["lb-classic-quick"])
    assert p.seed_rule.loads == (0.8,)
    ran, _ = run_sweep(p, tmp_path, run_fn=noisy, progress=False)
    seeds_at = {ld: sorted({r.seed for r in ran.runs if r.load == ld}) for ld in (0.5, 0.8)}
    assert seeds_at == {0.5: [1, 2], 0.8: [1, 2, 3, 4]}
    assert all(len([r for r in ran.runs if r.load == 0.8 and r.seed == s]) == 2 for s in (3, 4))
    rec = json.loads((tmp_path / "seeds.json").read_text())
    assert [d["status"] for d in rec["points"]] == ["cap"] and len(rec["extra_runs"]) == 4
    (pair,) = rec["points"][0]["pairs"]          # decided on the ratios, wider than 0.2
    assert (pair["a"], pair["b"], pair["n"]) == ("drill", "ecmp", 4) and pair["width"] > 0.2
    # --report-only rebuilds the same runs from the record
    again = with_recorded(build_plan("lb-classic", loads=[0.5, 0.8], seeds=2,
                                     seed_cap=4, schemes=["ecmp", "drill"], cdfs=["websearch"],
                                     topologies=["lb-classic-quick"]), tmp_path)
    assert {r.key() for r in again.runs} == {r.key() for r in ran.runs}
    # a sweep or report without load 0.8 does not pick up its recorded seeds
    other = with_recorded(build_plan("lb-classic", loads=[0.5, 0.9], seeds=2,
                                     seed_cap=4, schemes=["ecmp", "drill"], cdfs=["websearch"],
                                     topologies=["lb-classic-quick"]), tmp_path)
    assert {(r.load, r.seed) for r in other.runs} == {(ld, s) for ld in (0.5, 0.9) for s in (1, 2)}
    finish(again, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    seeds_part = md.split("## Seeds")[1].split("\n## ")[0]
    assert "(load 0.8)" in seeds_part and "drill/ecmp" in seeds_part
    assert "lb-classic-quick websearch 0.8 | 4 |" in seeds_part
    assert "cap (4) reached, still wider" in seeds_part
    # a round stopped part-way: the seeds run and the ones planned
    for r in ran.runs:
        if r.seed == 4 and r.scheme == "drill":
            (tmp_path / "runs" / f"{r.key()}.json").unlink()
    finish(again, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "lb-classic-quick websearch 0.8 | 3 (4 planned) |" in md
    assert "One RTO (the kernel's minimum, 200 ms)" in seeds_part


def test_seed_rule_adds_seeds_only_where_a_direction_is_tested(tmp_path):
    """At the light load only the symmetric fabric carries a direction: the
    rule adds seeds there and leaves the asymmetric fabric's light-load
    point at its first seeds; the summary names the points it watched."""
    from experiments.sweep.kinds import finish
    from experiments.sweep.runner import run_sweep

    def noisy(spec, path):      # DRILL/ECMP 1.8 at odd seeds, 1 at even: wide at every point
        _fake(spec, path)
        res = json.loads(path.read_text())
        k = 1.8 if spec.scheme == "drill" and spec.seed % 2 else 1.0
        for f in res["load"]["background"]["flows"]:
            if f.get("fct_s"):
                f["fct_s"] *= k
        path.write_text(json.dumps(res))

    p = build_plan("lb-classic", loads=[0.3], seeds=2, seed_cap=3,
                   schemes=["ecmp", "drill"], cdfs=["websearch"],
                   topologies=["lb-classic-sym", "lb-classic-asym"])
    ran, _ = run_sweep(p, tmp_path, run_fn=noisy, progress=False)
    seeds_on = {t: sorted({r.seed for r in ran.runs if t in r.topology}) for t in ("-sym", "-asym")}
    assert seeds_on == {"-sym": [1, 2, 3], "-asym": [1, 2]}
    rec = json.loads((tmp_path / "seeds.json").read_text())
    assert [d["point"]["topology"] for d in rec["points"]] == ["topologies/lb-classic-sym.yaml"]
    assert rec["rule"]["where"] == [[0.3, "topologies/lb-classic-sym.yaml"]]
    finish(ran, tmp_path)
    seeds_part = (tmp_path / "summary.md").read_text().split("## Seeds")[1].split("\n## ")[0]
    assert "(load 0.3 on lb-classic-sym)" in seeds_part
    assert "lb-classic-asym websearch 0.3" not in seeds_part


def test_training_sweeps_refuse_background_options():
    with pytest.raises(PlanError, match="--cdfs"):
        build_plan("fig10", cdfs=["datamining"])
    with pytest.raises(PlanError, match="--models"):
        build_plan("fig10", models=["none"])


# --- the report on constructed runs -------------------------------------------------------
#: each scheme's slowdown factor per fabric kind (constructed: DRILL fastest on the
#: symmetric fabric, ECMP slow on the asymmetric one, TaLB = ECMP, WCMP = ECMP where the
#: ports weigh alike and half ECMP's where they do not)
FACTOR = {"symmetric": {"ecmp": 1.6, "rps": 1.3, "letflow": 1.25, "drill": 1.0, "conga": 1.2,
                        "presto": 1.35,
                        "talb": 1.6, "wcmp": 1.6},
          "asymmetric": {"ecmp": 4.0, "rps": 3.0, "letflow": 1.3, "drill": 1.4, "conga": 1.2,
                         "presto": 3.1,
                         "talb": 4.0, "wcmp": 2.0},
          # the failed link: CONGA 6x below ECMP, LetFlow 10% above CONGA, RPS like ECMP
          "failed": {"ecmp": 6.0, "rps": 5.8, "letflow": 1.1, "drill": 3.0, "conga": 1.0,
                     "presto": 5.9,
                     "talb": 6.0, "wcmp": 4.0}}


def _fake(spec, path):
    """A results file shaped like background_only.run's, FCTs made up."""
    from experiments.sweep.lbclassic import fabric_kind

    kind = fabric_kind(spec.topology)
    # crc32, not hash(): hash() of a str is salted per process, so the made-up
    # FCTs (and the 3-seed verdicts on them) would change from run to run
    ecmp_like = spec.scheme == "talb" or (spec.scheme == "wcmp" and kind == "symmetric")
    like = "ecmp" if ecmp_like else spec.scheme
    rng = random.Random(zlib.crc32(f"{spec.seed}/{spec.load}/{spec.background_cdf}/{like}".encode()))
    noise = 1 + 0.01 * rng.random()
    if ecmp_like:        # TaLB forwards untagged packets by ECMP (and WCMP on equal weights
        #                 decides as ECMP): ECMP's run ±0.2%
        noise *= 1 + 0.002 * (-1) ** spec.seed
    f = FACTOR[kind][spec.scheme] * (1 + spec.load) * noise
    seed_rng = random.Random(spec.seed)          # same flows for every scheme of a seed
    raw = []
    for i in range(60):
        size = seed_rng.choice([2_000, 15_000, 250_000])
        serial = 8 * size / 50e6
        raw.append(_flow(i, size, start_s=2.0 + i * 0.1, fct_s=f * (serial + MS)))
    flows = bo.flow_rows(raw, t0_ns=10**12, warmup_s=2.0, window_s=10.0,
                         size_scale=spec.background_size_scale, host_rate_bps=RATES,
                         base_s=MS * (1 + 0.05 * seed_rng.random()))
    classes = bo.class_summary(flows)

    class Cfg:
        background_cdf, load, seed = spec.background_cdf, spec.load, spec.seed
    head = bo.headline(spec.scheme, Cfg, classes, {
        "base_latency_s": MS, "offered_realised": 0.1 * spec.seed, "delivered_load": spec.load,
        "reorder_per_kseg": {"rps": 5.0, "drill": 0.5, "presto": 1.0}.get(spec.scheme, 0.1) * noise,
        "retrans_pct": 0.1, "timeouts": 0, "window_s": 10.0, "cpu_bound": False})
    path.write_text(json.dumps({
        "format": "talb-run/1", "config": {"model": "none", "workers": 0}, "model": None,
        "software": {"commit": "abc"},
        "headline": head, "flags": {"cpu_bound": False},
        "load": {"flows_per_s": 6.0, "background": {"flows": flows}},
        "summary": {"background": classes, "cpu_guard": {"cpu_busy_mean": 0.3, "reason": "ok"}}}))


def _report(tmp_path, **over):
    from experiments.sweep.kinds import finish
    from experiments.sweep.runner import run_plan

    p = build_plan("lb-classic", loads=[0.3, 0.8], seeds=3, **over)
    run_plan(p, tmp_path, run_fn=_fake, progress=False)
    return p, finish(p, tmp_path)


def test_report_gives_every_direction_a_paired_verdict(tmp_path):
    from experiments.sweep.lbclassic import DIRECTIONS

    p, res = _report(tmp_path)
    dirs = res["directions"]
    # each direction on each fabric of its kind, for both CDFs
    assert len(dirs) == 2 * sum(2 if d.fabric == "both" else 1 for d in DIRECTIONS
                                if d.fabric != "failed")       # no failed link in lb-classic
    by = {(r["direction"].id, r["kind"], r["cdf"]): r for r in dirs}
    for r in dirs:
        assert r["verdict"] in ("holds here", "does not hold", "inconclusive"), r
        assert all(t["pair"].n == 3 for t in r["tests"])          # paired by seed, 3 seeds
    # the constructed data decide these beyond doubt
    assert by[("sym-drill", "symmetric", "websearch")]["verdict"] == "holds here"
    assert by[("asym-conga", "asymmetric", "datamining")]["verdict"] == "holds here"
    assert by[("asym-letflow-conga", "asymmetric", "websearch")]["verdict"] == "holds here"
    assert by[("sym-drill-reorder", "symmetric", "websearch")]["verdict"] == "holds here"
    # Presto: 1.35 against ECMP's 1.6, one reordering event a kseg against RPS's 5
    assert by[("sym-presto", "symmetric", "datamining")]["verdict"] == "holds here"
    assert by[("sym-presto-reorder", "symmetric", "websearch")]["verdict"] == "holds here"
    assert by[("asym-presto-reorder", "asymmetric", "datamining")]["verdict"] == "holds here"
    assert by[("talb-fallback", "asymmetric", "websearch")]["verdict"] == "holds here"
    assert by[("asym-wcmp", "asymmetric", "datamining")]["verdict"] == "holds here"
    assert by[("sym-wcmp-ecmp", "symmetric", "websearch")]["verdict"] == "holds here"
    # ECMP 60% slower at light load: "about as good" does not hold
    assert by[("sym-low-equal", "symmetric", "websearch")]["verdict"] == "does not hold"
    # RPS 30% slower than ECMP? no: faster (1.3 vs 1.6): not worse holds
    assert by[("sym-rps", "symmetric", "websearch")]["verdict"] == "holds here"
    md = (tmp_path / "summary.md").read_text()
    assert "## Published directions" in md and md.count("**holds here**") >= 5
    for d in DIRECTIONS:       # the failed link's are lb-classic-fail's (no such fabric here)
        assert (d.claim in md) == (d.fabric != "failed"), d.id
    # the normalisation divides every run of a fabric by one pooled B
    rows = res["rows"]
    assert {r["base_latency_s"] for r in rows if "lb-classic-sym" in r["topology"]} == \
        {res["base_latency"]["topologies/lb-classic-sym.yaml"]["base_s"]}
    # pairing: the same flows for every scheme at a seed
    for seed in (1, 2, 3):
        assert len({r["offered_realised"] for r in rows if r["seed"] == seed}) == 1
    # figures: one per fabric and CDF, six panels, a line per scheme; on the
    # asymmetric fabric DRILL's line says what it lacks (issue 36, item 6)
    assert len(res["plots"]) == 4
    drill_asym = f"drill ({DRILL_ASYMMETRIC})"
    for name, panels in res["plots"].items():
        want = [drill_asym if s == "drill" and "asym" in name else s for s in ALL]
        assert len(panels) == 6 and all(sorted(v) == sorted(want) for v in panels.values()), name
    # ... and so do the summary's tables: every DRILL row on that fabric, none on the other
    drill_rows = [line for line in md.splitlines() if line.startswith("| lb-classic-")
                  and "| drill" in line]
    assert drill_rows and all((drill_asym in line) == line.startswith("| lb-classic-asym")
                              for line in drill_rows)
    assert f"**{DRILL_ASYMMETRIC}** on lb-classic-asym" in md
    assert (tmp_path / "paired.csv").read_text().count("\n") > 100


def test_report_is_reproducible_and_says_what_was_not_run(tmp_path):
    from experiments.sweep.kinds import finish

    p, res = _report(tmp_path, schemes=["ecmp", "drill"], cdfs=["websearch"])
    csv1 = (tmp_path / "runs.csv").read_text()
    table1 = (tmp_path / "summary.md").read_text().split("## Published directions")[1]
    res2 = finish(p, tmp_path)                     # what --report-only does
    assert (tmp_path / "runs.csv").read_text() == csv1
    assert (tmp_path / "summary.md").read_text().split("## Published directions")[1] == table1
    assert [r["verdict"] for r in res2["directions"]] == [r["verdict"] for r in res["directions"]]
    by = {(r["direction"].id, r["kind"]): r["verdict"] for r in res["directions"]}
    assert by[("asym-conga", "asymmetric")] == "not run"
    assert by[("sym-low-equal", "symmetric")].endswith("(partly not run)")


def test_within_margin_test_both_ways():
    from experiments.sweep.lbclassic import _outcome, _test_pvalues
    from experiments.sweep.stats import paired

    def verdict(ratios):
        a = [r * 10 for r in ratios]
        b = [10.0] * len(ratios)
        pr = paired(a, b)
        p, p_eq = _test_pvalues(pr, [math.log(x / y) for x, y in zip(a, b)], "within")
        return _outcome("within", pr, p, p_eq)
    assert verdict([1.05, 1.06, 1.04, 1.05, 1.07]) == "holds"
    assert verdict([1.5, 1.52, 1.49, 1.51, 1.5]) == "does not hold"
    assert verdict([1.0, 1.6, 0.9, 1.5, 1.2]) == "inconclusive"


def test_failed_link_preset_tests_congas_and_letflows_failure_claims(tmp_path):
    """lb-classic-fail (issue 36, item 3): one fabric, a link built down
    (kind "failed"), every scheme; its directions are the failure claims,
    paired by seed, and DRILL there is labelled as lacking its asymmetry
    handling."""
    from experiments.sweep.kinds import finish
    from experiments.sweep.lbclassic import DIRECTIONS, fabric_kind
    from experiments.sweep.runner import run_plan
    from netns_topology import load_topology

    topo = load_topology(REPO / "topologies/lb-classic-fail.yaml")
    pairs = Counter((link.a, link.b) for link in topo.links if link.kind == "fabric")
    assert pairs == {("leaf0", "spine0"): 2, ("leaf0", "spine1"): 1, ("leaf1", "spine0"): 2,
                     ("leaf1", "spine1"): 2} and all(link.up for link in topo.links)
    # leaf1 still reaches leaf0 over all 4 uplinks; spine1 then over its one link left
    assert len(topo.forwarding_groups("leaf1")["198.18.0.1"]) == 4
    assert topo.forwarding_groups("spine1")["198.18.0.1"] == ["leaf0"]
    topo_path = "topologies/lb-classic-fail.yaml"
    assert bo.even_capacity_bps(topo) == 150e6 and fabric_kind(topo_path) == "failed"
    p = build_plan("lb-classic-fail", seeds=3, fixed_seeds=True)
    assert {r.topology for r in p.runs} == {topo_path} and {r.load for r in p.runs} == {0.3, 0.5, 0.8}
    assert len(p.runs) == len(ALL) * 2 * 3 * 3 and {r.scheme for r in p.runs} == ALL
    full = build_plan("lb-classic-fail")
    assert len(full.runs) == len(ALL) * 2 * 3 * 5 and full.seed_rule.where == ((0.8, topo_path),)
    run_plan(p, tmp_path, run_fn=_fake, progress=False)
    res = finish(p, tmp_path)
    by = {(r["direction"].id, r["cdf"]): r for r in res["directions"]}
    failed = {d.id for d in DIRECTIONS if d.fabric == "failed"}
    assert {i for i, _ in by} == failed | {"talb-fallback"}
    for cdf in ("websearch", "datamining"):
        assert all(by[(i, cdf)]["load"] == 0.8 for i in failed)
        assert by[("fail-conga", cdf)]["verdict"] == "holds here"
        assert by[("fail-conga-5x", cdf)]["verdict"] == "holds here"       # 1/6 < 1/5
        assert by[("fail-letflow-conga", cdf)]["verdict"] == "holds here"  # 1.1 < 1.2
        assert by[("fail-letflow", cdf)]["verdict"] == "holds here"
        assert by[("fail-rps", cdf)]["verdict"] == "holds here"
    md = (tmp_path / "summary.md").read_text()
    assert "conga at most 0.2× (5× better than) ecmp" in md and "p(ratio > 0.2)" in md
    assert f"drill ({DRILL_ASYMMETRIC})" in md


def test_fifth_test_says_when_the_published_factor_is_missed():
    """CONGA 2x below ECMP at every seed: better, but not 5x: does not hold."""
    from experiments.sweep.lbclassic import _outcome, _test_pvalues
    from experiments.sweep.stats import paired

    a, b = [1.0, 1.1, 0.9, 1.05, 0.95], [2.0, 2.3, 1.7, 2.1, 1.9]
    pr = paired(a, b)
    logs = [math.log(x / y) for x, y in zip(a, b)]
    p, p_eq = _test_pvalues(pr, logs, "fifth")
    assert p < 0.05 and p_eq > 0.5
    assert _outcome("fifth", pr, p, p_eq) == "does not hold"
    assert _outcome("better", pr, pr.p, pr.p_equiv) == "holds"


def test_failed_link_preset_dry_run_from_the_command_line(tmp_path):
    """`talb bench --preset lb-classic-fail --dry-run`, as a user runs it: the
    plan (30 runs a scheme of the registry on the failed fabric), its wall-time estimate and the
    seed rule at 0.8, nothing built and nothing written."""
    import subprocess
    import sys

    from experiments.sweep.plan import ALL_SCHEMES

    n = 30 * len(ALL_SCHEMES)

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "--preset", "lb-classic-fail",
                        "--out", str(out), "--dry-run"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    n = 30 * len(ALL_SCHEMES)           # 2 CDFs x 3 loads x 5 seeds, every scheme
    assert f"{n} runs" in r.stdout and "estimated wall time here: " in r.stdout, r.stdout[:600]
    assert "headline points (load 0.8)" in r.stdout
    runs = [line for line in r.stdout.splitlines() if " lb-classic-fail " in line]
    assert len(runs) == n and all("load 0.3" in x or "load 0.5" in x or "load 0.8" in x
                                    for x in runs)
    # every scheme of the registry (its "all schemes"), each in 30 runs
    assert {s: sum(x.split()[3] == s for x in runs) for s in ALL_SCHEMES} == \
        {s: 30 for s in ALL_SCHEMES}
    assert not out.exists()
