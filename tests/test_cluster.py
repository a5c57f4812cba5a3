"""`talb bench --cluster` without a fabric: the machine record, runs.csv's
machine columns and the summary's flag for a point whose runs came from
machines of different kinds, and the errors of a --cluster that cannot be
used (no scheduler there; no worker with the testbed resource), which write
nothing to --out. The sweep on a cluster itself: tests/test_cluster_live.py."""
from __future__ import annotations

import csv
import json
import socket

from click.testing import CliRunner

from test_sweep import _fake_results


def test_machine_record():
    from common.machine import kind, machine_info

    m = machine_info()
    assert m["hostname"] == socket.gethostname()
    assert m["kernel"] and m["cpu_model"] and m["cores"] >= 1
    assert kind(m) == f"{m['cpu_model']}, {m['cores']} cores, kernel {m['kernel']}"
    assert kind({**m, "hostname": "other"}) == kind(m)       # the host name is no kind
    assert kind({**m, "cores": 64}) != kind(m)
    assert kind(None) is None


def _machine(host, cpu="Xeon A", cores=2):
    return {"hostname": host, "kernel": "6.8.0", "cpu_model": cpu, "cores": cores}


def test_runs_csv_machine_and_mixed_kinds_flagged(tmp_path):
    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.runner import run_plan

    p = build_plan(None, schemes=["ecmp", "talb"], loads=[0.2], seeds=2,
                   fixed_seeds=True)
    # talb's two seeds on two machines of different kinds; ecmp's on two of one kind
    where = {("ecmp", 1): _machine("a"), ("ecmp", 2): _machine("b"),
             ("talb", 1): _machine("a"), ("talb", 2): _machine("c", cpu="EPYC B", cores=8)}

    def fake(spec, path):
        path.write_text(json.dumps({**_fake_results(spec),
                                    "machine": where[(spec.scheme, spec.seed)]}))

    run_plan(p, tmp_path, run_fn=fake, progress=False)
    finish(p, tmp_path)
    rows = {(r["scheme"], int(r["seed"])): r for r in csv.DictReader(open(tmp_path / "runs.csv"))}
    assert rows[("ecmp", 2)]["machine"] == "b"
    assert rows[("talb", 2)]["machine_kind"] == "EPYC B, 8 cores, kernel 6.8.0"
    md = (tmp_path / "summary.md").read_text()
    assert "Machines: a (Xeon A, 2 cores, kernel 6.8.0): 2 runs" in md
    flag = md.split("**Mixed machines**: ")[1].split("\n\n")[1]
    assert flag.startswith("- ") and len(flag.splitlines()) == 1        # talb's point only
    assert " talb " in flag and "EPYC B" in flag and "Xeon A" in flag, flag


def test_summary_without_machine_records_has_no_flag(tmp_path):
    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.runner import run_plan

    p = build_plan(None, schemes=["ecmp"], loads=[0.2], seeds=2,
                   fixed_seeds=True)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    finish(p, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "Machines:" not in md and "Mixed machines" not in md     # results from before


def test_machines_line_counts_runs_without_a_record(tmp_path):
    """A sweep resumed across the change that began recording machines: the
    older runs are counted as not recorded, so the line adds up to every run."""
    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.runner import run_plan

    p = build_plan(None, schemes=["ecmp"], loads=[0.2], seeds=3,
                   fixed_seeds=True)

    def fake(spec, path):
        res = _fake_results(spec)
        if spec.seed != 1:                      # seed 1 ran before the record existed
            res["machine"] = _machine("a")
        path.write_text(json.dumps(res))

    run_plan(p, tmp_path, run_fn=fake, progress=False)
    finish(p, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert ("Machines: a (Xeon A, 2 cores, kernel 6.8.0): 2 runs; 1 run: not recorded "
            "(made before results files recorded their machine).") in md


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_scheduler_clear_error_nothing_written(tmp_path):
    from talb.cli import main

    addr = f"tcp://127.0.0.1:{_closed_port()}"
    out = tmp_path / "sweep"
    r = CliRunner().invoke(main, ["bench", "--preset", "lb-classic-quick", "--cluster", addr,
                                  "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "--cluster" in r.output and addr in r.output and "no Dask scheduler" in r.output, \
        r.output
    assert not out.exists()                      # not even plan.json


def test_no_testbed_worker_clear_error_nothing_written(tmp_path):
    from distributed import LocalCluster

    from talb.cli import main

    out = tmp_path / "sweep"
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                      dashboard_address=None) as lc:      # no `testbed` resource
        r = CliRunner().invoke(main, ["bench", "--preset", "lb-classic-quick", "--cluster",
                                      lc.scheduler_address, "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "--cluster" in r.output and "resource 'testbed'" in r.output, r.output
    assert not out.exists()


def _fake_task(spec, prefix, timeout_s):
    """A run on a worker without a fabric: the answer run_on_worker gives."""
    from test_sweep import _noisy

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "r.json"
        _noisy(lambda seed: 0.3 * (-1) ** seed)(spec, path)
        res = json.loads(path.read_text())
    return {"results": json.dumps({**res, "machine": _machine("w1")}), "host": "w1", "run_s": 0.0}


def test_cluster_seed_rule_and_resume_across_local_runs(tmp_path):
    """The client writes the workers' results into --out: a sweep started
    locally resumes on the cluster (its finished runs are not sent), and the
    seed rule's rounds run on the cluster as they do locally."""
    import dataclasses

    from distributed import Client, LocalCluster

    from experiments.sweep import plan as planmod
    from experiments.sweep.cluster import Cluster
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.runner import run_plan, run_sweep
    from test_sweep import _noisy

    p = build_plan("quick", schemes=["ecmp", "talb"], loads=[0.2, 0.8],
                   seeds=3, fixed_seeds=False)
    p = dataclasses.replace(p, seed_rule=planmod.SeedRule(
        first=3, cap=6, width=0.2, pairs=(("talb", "ecmp"),), loads=(0.8,)))
    local = p.runs[:5]                                        # 5 runs made here first
    run_plan(dataclasses.replace(p, runs=local), tmp_path,
             run_fn=_noisy(lambda seed: 0.3 * (-1) ** seed), progress=False)
    with LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                      resources={"testbed": 1}, dashboard_address=None) as lc, \
            Client(lc) as client:
        plan, rep = run_sweep(p, tmp_path, progress=False,
                              cluster=Cluster(client, "tcl", task=_fake_task))
    assert rep["skipped"] == 5 and not rep["failed"]
    assert rep["done"] == 12 - 5 + 6                           # the rest, then seeds 4-6 at 0.8
    assert {r.seed for r in plan.runs if r.seed > 3} == {4, 5, 6}
    for r in plan.runs:
        res = json.loads((tmp_path / "runs" / f"{r.key()}.json").read_text())
        assert ("machine" in res) == (r not in local)            # the cluster's carry w1
