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

from test_sweep import ALL, _fake_results


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

    p = build_plan(None, implemented=ALL, schemes=["ecmp", "talb"], loads=[0.2], seeds=2,
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

    p = build_plan(None, implemented=ALL, schemes=["ecmp"], loads=[0.2], seeds=2,
                   fixed_seeds=True)
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_results(s))),
             progress=False)
    finish(p, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "Machines:" not in md and "Mixed machines" not in md     # results from before


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
