"""`talb bench --cluster` on a real Dask LocalCluster (worker processes, one
worker with the resource testbed=1) and real fabrics: the same plan run
locally and on the cluster gives the same runs.csv but for times and machine;
a worker killed mid-run has its run re-queued (the nanny restarts the worker
and the run completes there); the workers' fabrics are removed at the end."""
from __future__ import annotations

import csv
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import new_prefix

pytestmark = pytest.mark.live  # builds fabrics and runs traffic: `-m live` selects it

#: a small plan: lb-classic-quick's fabric, two schemes, one load, one seed (2 runs)
ARGS = ["bench", "--preset", "lb-classic-quick", "--schemes", "ecmp,drill", "--loads", "0.3",
        "--seeds", "1"]
#: runs.csv columns left out of the comparison local vs cluster. Measured
#: ones: every number timed on the fabric (FCTs, latencies, reordering,
#: retransmissions, timeouts, the load the uplinks delivered, censored flows,
#: CPU) differs between two runs of one plan on one machine, and ``status``
#: with them (the CPU guard reads the CPU); ``machine``/``machine_kind`` say
#: where it ran. Everything else -- the run's parameters, key, the scheme in
#: effect, the commit, the results file's path, the planned flows -- must match.
MEASURED = ("fct", "latency", "reorder", "retrans", "timeouts", "delivered", "censored", "cpu",
            "status", "machine", "_n")
REPO = Path(__file__).resolve().parent.parent


def _excluded(col: str) -> bool:
    return any(m in col for m in MEASURED) or col.endswith("_p99") or col.endswith("_mean")


@pytest.fixture
def local_cluster(root, monkeypatch):
    from distributed import Client, LocalCluster

    monkeypatch.setenv("PYTHONPATH", str(REPO))        # the workers import this checkout
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                      resources={"testbed": 1}, dashboard_address=None) as lc, \
            Client(lc) as client:
        where = client.run(lambda: __import__("experiments").__file__)
        assert all(str(REPO) in f for f in where.values()), where
        yield lc, client


def test_cluster_sweep_matches_local_run(local_cluster, tmp_path):
    from netns_topology.teardown import namespaces
    from talb.cli import main

    lc, _ = local_cluster
    times, outs = {}, {}
    for how in ("local", "cluster"):
        prefix = new_prefix()
        outs[how] = tmp_path / how
        args = ARGS + ["--out", str(outs[how]), "--prefix", prefix]
        if how == "cluster":
            args += ["--cluster", lc.scheduler_address]
        t0 = time.monotonic()
        r = CliRunner().invoke(main, args)
        times[how] = time.monotonic() - t0
        assert r.exit_code == 0, r.output
        assert not namespaces(prefix), how                  # every fabric removed
        assert not (outs[how] / "failed.json").exists(), (outs[how] / "failed.json").read_text()
    rows = {how: list(csv.DictReader(open(outs[how] / "runs.csv"))) for how in outs}
    assert len(rows["local"]) == len(rows["cluster"]) == 2
    assert list(rows["local"][0]) == list(rows["cluster"][0])       # the same columns
    compared = [c for c in rows["local"][0] if not _excluded(c)]
    assert {"key", "scheme", "load", "seed", "scheme_in_effect", "commit", "results"} <= set(compared)
    for a, b in zip(rows["local"], rows["cluster"]):
        assert {c: a[c] for c in compared} == {c: b[c] for c in compared}
        assert a["machine"] == b["machine"] and a["machine_kind"] and a["status"] in ("ok", "cpu_bound")
    # each results file records its machine, and the plan is the same
    for f in (outs["cluster"] / "runs").glob("*.json"):
        assert json.loads(f.read_text())["machine"]["cores"] >= 1
    assert json.loads((outs["local"] / "plan.json").read_text()) == \
        json.loads((outs["cluster"] / "plan.json").read_text())
    # the local directory resumed on the cluster: nothing left to run, nothing sent
    before = {f: f.stat().st_mtime_ns for f in (outs["local"] / "runs").glob("*.json")}
    r = CliRunner().invoke(main, ARGS + ["--out", str(outs["local"]), "--prefix", new_prefix(),
                                         "--cluster", lc.scheduler_address])
    assert r.exit_code == 0 and "resuming: 2 of 2 runs" in r.output, r.output
    assert before == {f: f.stat().st_mtime_ns for f in (outs["local"] / "runs").glob("*.json")}
    overhead = (times["cluster"] - times["local"]) / 2
    print(f"\nlocal {times['local']:.1f} s, cluster {times['cluster']:.1f} s for 2 runs: "
          f"overhead {overhead:+.1f} s per run")
    Path("/tmp/talb-cluster-overhead.json").write_text(json.dumps({**times, "per_run": overhead}))


def test_worker_killed_mid_run_is_requeued(local_cluster, tmp_path):
    from agent.daemon import running_pid
    from experiments.sweep.cluster import Cluster
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.runner import run_sweep
    from netns_topology.teardown import namespaces

    _, client = local_cluster
    prefix = new_prefix()
    plan = build_plan("lb-classic-quick", schemes=["ecmp"], loads=[0.3], seeds=[1])
    assert len(plan.runs) == 1
    out = tmp_path / "killed"
    got = {}

    def sweep():
        try:
            got["report"] = run_sweep(plan, out, prefix=prefix, progress=False,
                                      cluster=Cluster(client, prefix))[1]
        except BaseException as exc:  # noqa: BLE001 - reported below
            got["error"] = exc

    t = threading.Thread(target=sweep)
    t.start()
    try:
        deadline = time.monotonic() + 120
        while running_pid(prefix) is None:          # the worker's fabric up, the run prepared
            assert time.monotonic() < deadline and t.is_alive(), got
            time.sleep(0.2)
        time.sleep(2)                               # into the run
        (pid,) = client.run(os.getpid).values()
        os.kill(pid, signal.SIGKILL)
        t.join(timeout=300)
        assert not t.is_alive()
        assert "error" not in got, got
        rep = got["report"]
        # the run was re-queued on the restarted worker and completed there
        assert rep["done"] == 1 and not rep["failed"], rep
        assert (pid,) != tuple(client.run(os.getpid).values())
        res = json.loads((out / "runs" / f"{plan.runs[0].key()}.json").read_text())
        assert res["headline"]["scheme"] == "ecmp" and res["machine"]["hostname"]
        assert not (out / "failed.json").exists()
        assert not namespaces(prefix)               # the dead worker's fabric too
    finally:
        t.join(timeout=300)
        from netns_topology.state import exists
        from testbed import lifecycle

        if exists(prefix) or namespaces(prefix):
            lifecycle.down(prefix)
