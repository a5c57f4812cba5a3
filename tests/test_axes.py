"""Placement and the hosts' minimum RTO per run (issue 18 item 3), without a
fabric: where each placement puts the nodes and who sends background, the
values --placement and --rto-min take and the errors naming them, keys
unchanged at the defaults, plans over both axes and a sweep's report
from fake results. The fabric side: tests/test_axes_live.py."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from common import paths
from experiments.sweep import plan as plan_mod
from experiments.sweep.kinds import build_plan, finish
from experiments.sweep.plan import PlanError
from experiments.sweep.runner import run_plan
from netns_topology import LeafSpine, load_topology
from netns_topology.params import check_rto_min_setting
from talb.cli import main
from workload import placement
from workload.testbed_use import rto_min_setting

FIG10 = load_topology(paths.REPO_ROOT / "topologies" / "fig10.yaml")   # leaf0 h0-h3, leaf1 h4-h7


def _names(hosts: dict) -> tuple[list, list]:
    return [h.name for h in hosts["workers"]], [h.name for h in hosts["servers"]]


# --- placement ---------------------------------------------------------------------------
def test_spread_is_the_old_placement_and_remote_keeps_workers_off_the_servers_leaf():
    assert _names(placement.place(FIG10, "ps", 4, 1)) == (["h0", "h4", "h1", "h5"], ["h2"])
    assert _names(placement.place(FIG10, "ps", 4, 1, "spread")) == (["h0", "h4", "h1", "h5"], ["h2"])
    workers, servers = _names(placement.place(FIG10, "ps", 4, 1, "remote"))
    assert (workers, servers) == (["h0", "h1", "h2", "h3"], ["h4"])
    leaf = {h.name: h.leaf for h in FIG10.hosts}
    assert not {leaf[w] for w in workers} & {leaf[s] for s in servers}
    # more servers than the last leaf holds: the leaf before it too, in fabric order;
    # workers fill the first leaves, leaf by leaf
    topo = LeafSpine(spines=2, leaves=4, hosts_per_leaf=2)
    w, s = _names(placement.place(topo, "ps", 4, 3, "remote"))
    assert s == ["h4", "h6", "h7"] and w == ["h0", "h1", "h2", "h3"]
    # ring all-reduce has no servers: remote is spread
    assert _names(placement.place(FIG10, "allreduce", 4, 1, "remote")) == \
        _names(placement.place(FIG10, "allreduce", 4, 1, "spread"))


def test_explicit_placement_and_its_errors():
    assert _names(placement.place(FIG10, "ps", 4, 1, "h0+h1+h4+h5/h2")) == \
        (["h0", "h1", "h4", "h5"], ["h2"])
    assert _names(placement.place(FIG10, "allreduce", 3, 1, "h7+h0+h3")) == (["h7", "h0", "h3"], [])
    assert placement.canonical(" h0 + h1/h2 ") == "h0+h1/h2"
    bad = [
        ("ps", 4, 1, "h0+h9+h4+h5/h2", "--placement: no host h9 in the fabric (hosts: h0, h1"),
        ("ps", 4, 1, "h0+h1+h0+h5/h2", "--placement: each host once (h0 named twice)"),
        ("ps", 4, 1, "h0+h1+h4/h2", "--placement: 3 worker host(s) named, --workers is 4"),
        ("ps", 4, 2, "h0+h1+h4+h5/h2", "--placement: 1 server host(s) named, --servers is 2"),
        ("ps", 4, 1, "h0+h1+h4+h5", "--placement: the servers after a slash"),
        ("allreduce", 2, 1, "h0+h1/h2", "--placement: ring all-reduce has no servers"),
        ("ps", 4, 1, "sprad", "--placement: one of spread, remote, or WORKERS/SERVERS"),
        ("ps", 4, 1, "h0,h1,h4,h5/h2", "--placement: host names joined by + ('h0,h1,h4,h5' is not one)"),
        ("ps", 7, 1, "remote", "--placement: remote puts no worker on a server's leaf; the 1 "
                               "server(s) take leaf1, which leaves 4 host(s) on other leaves "
                               "for 7 workers"),
    ]
    for arch, w, s, value, msg in bad:
        with pytest.raises(ValueError) as exc:
            placement.place(FIG10, arch, w, s, value)
        assert msg in str(exc.value) and f"got {value!r}" in str(exc.value), str(exc.value)


def test_background_senders_follow_the_placement():
    spread = placement.place(FIG10, "ps", 4, 1)
    assert placement.bg_senders(FIG10, "spread", spread) == (["h0", "h4", "h1", "h5"], "workers")
    every = [h.name for h in FIG10.hosts]
    for value in ("remote", "h0+h1+h4+h5/h2"):
        hosts = placement.place(FIG10, "ps", 4, 1, value)
        assert placement.bg_senders(FIG10, value, hosts) == (every, "every host")
    assert [placement.mode_of(v) for v in ("spread", "remote", "h0+h1/h2")] == \
        ["spread", "remote", "explicit"]


# --- the minimum RTO's values -------------------------------------------------------------
def test_rto_min_values():
    assert [rto_min_setting(v) for v in ("10ms", "0.01s", " 200MS ", "kernel", "Default", None)] \
        == ["10ms", "10ms", "200ms", "kernel", "kernel", None]
    assert check_rto_min_setting("rto_min", 12) == 12
    assert check_rto_min_setting("rto_min", "kernel") is None
    for value, msg in (("10", "must be a duration like 10ms or 0.2s, or kernel"),
                       ("fast", "must be a duration like 10ms or 0.2s, or kernel"),
                       ("0.5ms", "must be whole milliseconds"),
                       ("0ms", "must be between 1ms and 120s")):
        with pytest.raises(ValueError) as exc:
            rto_min_setting(value)
        assert str(exc.value).startswith("--rto-min: " + msg) and repr(value) in str(exc.value)


def test_set_rto_min_refuses_a_bad_value_naming_it():
    from netns_topology.state import TestbedError
    from testbed import lifecycle

    with pytest.raises(TestbedError, match="rto_min: must be a duration .* got 'soon'"):
        lifecycle.set_rto_min("t0nortomin", "soon")


# --- plans -------------------------------------------------------------------------------
def test_keys_unchanged_at_the_defaults():
    r = build_plan("fig10-2spine").runs[0]
    assert (r.placement, r.rto_min) == ("spread", None)
    assert "placement" not in r.params() and "rto_min" not in r.params()
    assert r.key() == "1be7ea1a232f896f"       # results/fig10-2spine/plan.json, first run
    remote, rto = replace(r, placement="remote"), replace(r, rto_min="10ms")
    assert remote.params()["placement"] == "remote" and rto.params()["rto_min"] == "10ms"
    assert len({r.key(), remote.key(), rto.key(), replace(rto, rto_min="kernel").key()}) == 4
    assert replace(remote, placement="spread").key() == r.key()
    assert r.label().endswith("seed 1") and \
        replace(remote, rto_min="10ms").label().endswith("seed 1 placement=remote rto=10ms")


def test_plan_over_placements_and_rtos():
    p = build_plan("fig10-2spine", schemes=["ecmp", "talb"], loads=[0.8], seeds=[1],
                   placement=["spread", "remote", "remote"], rto_min=["10ms", "kernel", "0.01s"])
    assert p.counts("placement") == {"spread": 4, "remote": 4}
    assert p.counts("rto_min") == {"10ms": 4, "kernel": 4}
    # the schemes of a (placement, RTO) run back to back
    assert [(r.placement, r.rto_min, r.scheme) for r in p.runs[:4]] == [
        ("spread", "10ms", "ecmp"), ("spread", "10ms", "talb"),
        ("spread", "kernel", "ecmp"), ("spread", "kernel", "talb")]
    assert p.name == "fig10-2spine+loads+placement+rto_min+schemes+seeds"
    # the seed rule's pairs do not name the axes: they hold at each (placement, RTO) point
    q = build_plan("fig10-2spine", schemes=["ecmp", "talb"], loads=[0.8],
                   rto_min=["10ms", "kernel"])
    assert q.seed_rule.pairs == (("talb", "ecmp"),)
    from experiments.sweep import seeds

    rows = [{**{f: getattr(r, f) for f in plan_mod.RunSpec.__dataclass_fields__},
             "key": r.key(), "status": "ok", q.seed_rule.metric: 0.1 * (1 + 0.01 * r.seed) *
             (0.5 if r.scheme == "talb" else 1)} for r in q.runs]
    decided = seeds.decide(q, rows)
    assert sorted(d["point"]["rto_min"] for d in decided) == ["10ms", "kernel"]
    assert all(d["pairs"][0]["n"] == 5 and d["status"] == "narrow" for d in decided)
    # the reference of the ablation runs under each too
    a = build_plan("ablation", agents=["default"], loads=[0.8], seeds=[1],
                   rto_min=["10ms", "kernel"])
    assert {(r.scheme, r.rto_min) for r in a.runs} == {("talb", "10ms"), ("ecmp", "10ms"),
                                                       ("talb", "kernel"), ("ecmp", "kernel")}


def test_plan_errors_name_the_flag():
    for kw, msg in ((dict(placement=["h0+h1+h9+h5/h2"]), "--placement: no host h9"),
                    (dict(placement=["remote"], workers=7), "--placement: remote puts no worker"),
                    (dict(placement=[]), "--placement: at least one of"),
                    (dict(rto_min=["10"]), "--rto-min: must be a duration"),
                    (dict(rto_min=[]), "--rto-min: at least one value")):
        with pytest.raises(PlanError, match=msg):
            build_plan("fig10-2spine", **kw)
    for kw, flag in ((dict(placement=["remote"]), "--placement"), (dict(rto_min=["10ms"]),
                                                                   "--rto-min")):
        with pytest.raises(PlanError, match=f"{flag}: lb-classic-quick runs"):
            build_plan("lb-classic-quick", **kw)


def test_presets_take_the_keys(monkeypatch):
    monkeypatch.setitem(plan_mod.PRESETS, "t-axes", dict(
        plan_mod.PRESETS["quick"], placement="remote", rto_min="10ms", schemes=["ecmp"],
        seeds=1))
    p = build_plan("t-axes")
    assert {(r.placement, r.rto_min) for r in p.runs} == {("remote", "10ms")}
    # an option changes a preset's value
    p = build_plan("t-axes", rto_min=["kernel"], placement=["spread"])
    assert {(r.placement, r.rto_min) for r in p.runs} == {("spread", "kernel")}
    assert {"placement", "rto_min"} <= set(plan_mod.SWEEP_FIELDS)


# --- the command line --------------------------------------------------------------------
@pytest.mark.parametrize("args, msg", [
    (["--placement", "h0+h1+h2+h9/h4"], "--placement: no host h9 in the fabric"),
    (["--placement", "nowhere"], "--placement: one of spread, remote, or WORKERS/SERVERS"),
    (["--rto-min", "10ms,soon"], "--rto-min: must be a duration like 10ms or 0.2s, or kernel"),
])
def test_bench_cli_names_a_bad_value(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["bench", "--preset", "fig10-2spine", *args, "--dry-run", "--out",
                                  str(tmp_path)])
    assert r.exit_code == 1 and msg in r.output, r.output


def test_bench_cli_dry_run_names_the_axes(tmp_path):
    r = CliRunner().invoke(main, ["bench", "--preset", "fig10-2spine", "--schemes", "ecmp,talb",
                                  "--loads", "0.8", "--seeds", "1", "--placement",
                                  "remote,h0+h1+h4+h5/h2", "--rto-min", "10ms,kernel",
                                  "--dry-run", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "placement {'remote': 4, 'h0+h1+h4+h5/h2': 4}" in r.output
    assert "rto_min {'10ms': 4, 'kernel': 4}" in r.output
    assert "talb load 0.8 100G seed 1 placement=h0+h1+h4+h5/h2 rto=kernel" in r.output


@pytest.mark.parametrize("args, msg", [
    (["--placement", "h0+h0/h1"], "--placement: each host once (h0 named twice), got 'h0+h0/h1'"),
    (["--placement", "h0+h1"], "--placement: the servers after a slash"),
    (["--rto-min", "soon"], "--rto-min: must be a duration like 10ms or 0.2s, or kernel (no "
                            "route metric: the kernel's 200ms), got 'soon'"),
])
def test_run_cli_names_a_bad_value(args, msg):
    r = CliRunner().invoke(main, ["run", "--model", "alexnet", "--arch", "ps", "--workers", "2",
                                  "--prefix", "t0cliaxes", *args])
    assert r.exit_code != 0 and msg in r.output, r.output
    assert not paths.state_dir("t0cliaxes").exists()


def test_run_cli_background_only_refuses_placement():
    r = CliRunner().invoke(main, ["run", "--model", "none", "--load", "0.5", "--placement",
                                  "remote", "--prefix", "t0cliaxes"])
    assert r.exit_code != 0 and "--placement: --model none runs background flows only" in r.output
    r = CliRunner().invoke(main, ["run", "--model", "none", "--load", "0.5", "--rto-min", "soon",
                                  "--prefix", "t0cliaxes"])
    assert r.exit_code != 0 and "--rto-min: must be a duration" in r.output, r.output


# --- a sweep over both, from fake results -------------------------------------------------
def _fake(spec):
    """Short AFCT: ECMP 100 ms, TaLB 60; 1.5x under the kernel's RTO, 1.2x under
    remote; p99 2x the mean under the kernel's RTO, 1.2x under 10 ms."""
    fct = {"ecmp": 0.100, "talb": 0.060}[spec.scheme] * (1 + 0.01 * spec.seed)
    fct *= (1.5 if spec.rto_min == "kernel" else 1) * (1.2 if spec.placement == "remote" else 1)
    p99 = fct * (2 if spec.rto_min == "kernel" else 1.2)
    head = {"scheme": spec.scheme, "queueing": "bands", "samples_per_s": 10 / fct,
            "iteration_time_s": fct, "cpu_bound": False}
    for cls in ("short", "long", "all", "trailing"):
        head.update({f"{cls}_fct_mean_s": fct, f"{cls}_fct_p99_s": p99, f"{cls}_censored": 0,
                     f"{cls}_netfct_mean_s": fct / 2, f"{cls}_netfct_p99_s": p99 / 2})
    return {"format": "talb-run/1", "config": {"workers": 4, "servers": 1, "arch": "ps"},
            "model": {"batch_size": 32},
            "placement": {"workers": [], "servers": [], "mode": placement.mode_of(spec.placement),
                          "spec": spec.placement},
            "load": {"senders_rule": "workers" if spec.placement == "spread" else "every host"},
            "fabric": {"queueing": {"mode": "bands"},
                       "rto_min_ms": {None: None, "kernel": None, "10ms": 10}[spec.rto_min]},
            "scaling": {"time_scale": 1.0}, "flags": {"cpu_bound": False}, "headline": head,
            "software": {"commit": "c0ffee"}, "tensors": [],
            "summary": {"cpu_guard": {"flagged": False, "cpu_busy_mean": 0.5, "reason": "test"}}}


def test_sweep_report_over_placements_and_rtos(tmp_path):
    p = build_plan("fig10-2spine", schemes=["ecmp", "talb"], loads=[0.8], seeds=3,
                   fixed_seeds=True, placement=["spread", "remote"], rto_min=["10ms", "kernel"])
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake(s))), progress=False)
    res = finish(p, tmp_path)
    rows = res["rows"]
    assert {(r["placement_in_effect"], r["bg_senders"]) for r in rows} == {
        ("spread", "workers"), ("remote", "every host")}
    assert {r["rto_min_ms_in_effect"] for r in rows} == {10, None}
    # TaLB against ECMP at each (placement, RTO): four rows, each -40%
    pvo = [r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP"]
    assert sorted(r["where"] for r in pvo) == sorted(
        f"fig10, threelayer{pl}{rto}, load 0.8" for pl in ("", ", placement remote")
        for rto in (", rto_min 10ms", ", rto_min kernel"))
    assert all(r["n"] == 3 and r["ours"].startswith("-40%") for r in pvo)
    # paired.csv pairs a scheme's runs at the two RTOs by seed, within a placement
    with open(tmp_path / "paired.csv") as f:
        paired = list(csv.DictReader(f))
    rto = [r for r in paired if r["a"] == "talb/rto=10ms" and r["b"] == "talb/rto=kernel"
           and r["metric"] == "short_fct_p99_s"]
    assert sorted(r["placement"] for r in rto) == ["remote", "spread"]
    assert all(int(r["n"]) == 3 and float(r["ratio"]) == pytest.approx(1.2 / 3) for r in rto)
    assert not any("remote" in r["a"] or "remote" in r["b"] for r in paired)
    md = (tmp_path / "summary.md").read_text()
    assert "| placement | rto min |" in md.split("## Points")[1]
    # TaLB against each scheme: one group per placement and RTO, named
    assert "| fig10, threelayer, 100G, placement remote, rto_min kernel | 0.8 | ecmp |" in md
    # a figure per placement, a line per scheme and RTO
    assert {"fct_vs_load-fig10-threelayer-ps-100G-default-spread.png",
            "fct_vs_load-fig10-threelayer-ps-100G-default-remote.png"} <= set(res["plots"])
    for panels in res["plots"].values():
        for lines in panels.values():
            assert sorted(lines) == ["ecmp/rto=10ms", "ecmp/rto=kernel", "talb/rto=10ms",
                                     "talb/rto=kernel"]


def test_a_sweep_at_the_defaults_names_neither(tmp_path):
    p = build_plan("fig10-2spine", schemes=["ecmp", "talb"], loads=[0.8], seeds=2,
                   fixed_seeds=True)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake(s))), progress=False)
    res = finish(p, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "rto min" not in md.split("## Points")[1] and "placement=" not in md
    assert set(res["plots"]) == {"fct_vs_load-fig10-threelayer-ps-100G-default.png"}
    row = next(r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP")
    assert row["where"] == "fig10, threelayer, load 0.8"
