"""--scheduler as a `talb bench` axis (--schedulers): run keys at the
default stay as they were, each scheduler's runs pair by seed, bad values
are named, and `talb bench --dry-run` shows the axis (its own process)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from experiments.sweep.kinds import build_plan
from experiments.sweep.plan import PlanError


def test_default_scheduler_leaves_the_keys_alone():
    plain = build_plan("quick")
    same = build_plan("quick", schedulers=["bytescheduler"])
    assert [r.key() for r in plain.runs] == [r.key() for r in same.runs]
    assert all("scheduler" not in r.params() for r in plain.runs)


def test_each_scheduler_runs_every_scheme_at_every_point():
    plain = build_plan("quick")
    both = build_plan("quick", schedulers=["bytescheduler", "usbyte"])
    assert len(both.runs) == 2 * len(plain.runs)
    assert {r.key() for r in plain.runs} <= {r.key() for r in both.runs}
    us = [r for r in both.runs if r.scheduler == "usbyte"]
    assert len(us) == len(plain.runs)
    assert all(r.params()["scheduler"] == "usbyte" and "scheduler=usbyte" in r.label() for r in us)
    assert {r.scheme for r in us} == {r.scheme for r in plain.runs}


def test_bad_scheduler_is_named():
    with pytest.raises(PlanError, match="--schedulers: one of bytescheduler, usbyte, wfbp, fifo, "
                                        "got 'pfabric'"):
        build_plan("quick", schedulers=["pfabric"])


def test_real_jobs_take_no_scheduler():
    with pytest.raises(PlanError, match="--schedulers: our own nodes' axis"):
        build_plan("mpi-quick", schedulers=["wfbp"])


def test_bench_dry_run_shows_the_axis(tmp_path):
    out = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "--preset", "quick",
                          "--schedulers", "bytescheduler,wfbp", "--dry-run",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "schedulers" in out.stdout and "wfbp" in out.stdout


def test_comms_apply_to_ps_runs_and_fusions_to_allreduce_runs():
    plain = build_plan("quick", archs=["ps", "allreduce"])
    both = build_plan("quick", archs=["ps", "allreduce"],
                      comms=["ps", "hybrid"], fusions=["none", "adaptive"])
    ps_runs = [r for r in plain.runs if r.arch == "ps"]
    ar_runs = [r for r in plain.runs if r.arch == "allreduce"]
    assert len(both.runs) == 2 * len(ps_runs) + 2 * len(ar_runs)
    assert {r.key() for r in plain.runs} <= {r.key() for r in both.runs}
    assert {(r.arch, r.comm) for r in both.runs} == {("ps", "ps"), ("ps", "hybrid"),
                                                      ("allreduce", "ps")}
    assert {(r.arch, r.fusion) for r in both.runs} == {("ps", None), ("allreduce", None),
                                                        ("allreduce", "adaptive")}
    hy = next(r for r in both.runs if r.comm == "hybrid")
    assert hy.params()["comm"] == "hybrid" and "comm=hybrid" in hy.label()


@pytest.mark.parametrize("field,value,msg", [
    ("comms", ["mesh"], "--comms: one of ps, sfb, hybrid, got 'mesh'"),
    ("fusions", ["constant:big"], "--fusions: adaptive or constant:SIZE"),
])
def test_bad_comm_and_fusion_named(field, value, msg):
    with pytest.raises(PlanError, match=msg):
        build_plan("quick", **{field: value})


@pytest.mark.parametrize("preset,runs,axis,values", [
    ("papers-schedulers", 120, "scheduler", {"bytescheduler", "usbyte", "wfbp"}),
    ("papers-hybrid", 40, "comm", {"ps", "hybrid"}),
    ("papers-fusion", 60, "fusion", {None, "adaptive", "constant:64mb"}),
    ("papers-quick", 8, "comm", {"ps", "hybrid"}),
])
def test_issue42_presets(preset, runs, axis, values):
    """The presets' sizes as docs/experiments.md states them; their
    ByteScheduler PS and WFBP all-reduce runs are shared (same keys)."""
    plan = build_plan(preset)
    assert len(plan.runs) == runs
    assert set(plan.counts(axis)) == values
    assert set(plan.counts("scheme")) == {"ecmp", "talb"}


def test_issue42_presets_share_runs():
    sched = {r.key() for r in build_plan("papers-schedulers").runs}
    hyb = {r.key() for r in build_plan("papers-hybrid").runs}
    fus = {r.key() for r in build_plan("papers-fusion").runs}
    assert len(hyb & sched) == 20 and len(fus & sched) == 20


def test_runs_csv_carries_the_settings_in_effect_and_osfs_error():
    """runs.csv's issue-42 columns from a results file, and a file from
    before the options (ByteScheduler, no SFB, no fusion, no OSF)."""
    from experiments.sweep.results import papers_fields

    res = {"scheduler": {"name": "usbyte", "comm": {"sfb_layers": ["classifier.0", "classifier.3"]},
                         "fusion": {"mode": "adaptive", "buffer_bytes": 262144}},
           "osf": {"predicted_iteration_s": 0.8, "error": -0.2}}
    assert papers_fields(res) == {
        "scheduler_in_effect": "usbyte", "sfb_layers": "classifier.0 classifier.3",
        "fusion_buffer_bytes_in_effect": 262144, "osf_predicted_iteration_s": 0.8,
        "osf_error": -0.2}
    assert papers_fields({}) == {
        "scheduler_in_effect": "bytescheduler", "sfb_layers": None,
        "fusion_buffer_bytes_in_effect": None, "osf_predicted_iteration_s": None,
        "osf_error": None}
