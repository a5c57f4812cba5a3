"""`talb bench --cluster` as a user runs it: `dask scheduler` and `dask worker`
started as processes of their own (the commands of docs/experiments.md),
`talb bench` as a process of its own, no Dask client in the test's process.

* The same plan run locally, on one worker and on two workers gives the same
  runs.csv but for what is measured and where; two workers on one machine
  build two testbeds (the sweep's prefix and the prefix + "1"), each run
  lands once, and every fabric is removed at the end.
* A worker killed mid-run (SIGKILL by pid) has its run re-queued: the
  nanny restarts the worker, which removes what its predecessor left, and
  every run of the sweep lands once; nothing is left on the machine.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import new_prefix, record_prefix
from dask_procs import TEST_ROOT, DaskCluster, remove_stale_runs

pytestmark = pytest.mark.live  # builds fabrics and runs traffic: `-m live` selects it

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent            # the venv's `dask` and `talb`
#: a small plan: lb-classic-quick's fabric, one load, one seed
ARGS = ["bench", "--preset", "lb-classic-quick", "--loads", "0.3", "--seeds", "1"]
#: runs.csv columns left out of the comparison local vs cluster. Measured
#: ones: every number timed on the fabric (FCTs, latencies, reordering,
#: retransmissions, timeouts, the load the uplinks delivered, censored flows,
#: CPU) differs between two runs of one plan on one machine, and ``status``
#: with them (the CPU guard reads the CPU); ``machine``/``machine_kind`` say
#: where it ran. Everything else -- the run's parameters, key, the scheme in
#: effect, the commit, the results file's path, the planned flows -- must match.
MEASURED = ("fct", "latency", "reorder", "retrans", "timeouts", "delivered", "censored", "cpu",
            "status", "machine", "_n")
#: a testbed worker's resource (docs/experiments.md, "Sweeps on a cluster")
TESTBED_WORKER = ("--resources", "testbed=1")
BENCH_S = 600           # a `talb bench` of a few runs ends within this


def _excluded(col: str) -> bool:
    return any(m in col for m in MEASURED) or col.endswith("_p99") or col.endswith("_mean")


@pytest.fixture
def dask_procs(root):
    """A scheduler; the tests add `dask worker ADDR --nworkers 1 --nthreads 1
    --resources testbed=1` workers (docs/experiments.md) as they need them."""
    removed = remove_stale_runs()
    if removed:
        print(f"removed what killed runs of a cluster test left: {', '.join(removed)}")
    procs = DaskCluster(TEST_ROOT / new_prefix())
    try:
        yield procs
    finally:
        procs.stop()


def _add_worker(procs: DaskCluster) -> subprocess.Popen:
    """One more testbed worker, registered; its nanny's process."""
    return procs.start_worker(f"worker{len(procs.procs)}", args=TESTBED_WORKER, run_dir=False)


def _prefixes() -> tuple[str, str]:
    """A sweep prefix and its second slot's testbed prefix, both recorded, so a
    crashed test's fabrics are removed by the next test session."""
    prefix = new_prefix()
    record_prefix(prefix + "1")
    return prefix, prefix + "1"


def _talb_bench(args: list[str], log: Path) -> tuple[float, str]:
    """`talb bench ...` in its own process: (seconds, output); fails on exit != 0."""
    t0 = time.monotonic()
    proc = subprocess.run([str(BIN / "talb"), *args], capture_output=True, text=True,
                          timeout=BENCH_S, stdin=subprocess.DEVNULL)
    log.write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    return time.monotonic() - t0, proc.stdout + proc.stderr


def _left_nothing(*prefixes: str) -> None:
    from netns_topology.state import exists
    from netns_topology.teardown import namespaces

    for p in prefixes:
        assert not namespaces(p) and not exists(p), f"testbed {p} left behind"


def _rows(out: Path) -> list[dict]:
    return list(csv.DictReader(open(out / "runs.csv")))


def _landed_once(out: Path, n: int) -> None:
    rows = _rows(out)
    assert len(rows) == n and len({r["key"] for r in rows}) == n
    assert all(r["status"] in ("ok", "cpu_bound") for r in rows), [r["status"] for r in rows]
    assert sorted(f.stem for f in (out / "runs").glob("*.json")) == sorted(r["key"] for r in rows)
    assert not (out / "failed.json").exists(), (out / "failed.json").read_text()


def _same_but_measured(local: Path, other: Path) -> None:
    a_rows, b_rows = _rows(local), _rows(other)
    assert list(a_rows[0]) == list(b_rows[0])                       # the same columns
    compared = [c for c in a_rows[0] if not _excluded(c)]
    assert {"key", "scheme", "load", "seed", "scheme_in_effect", "commit", "results"} <= set(compared)
    for a, b in zip(sorted(a_rows, key=lambda r: r["key"]), sorted(b_rows, key=lambda r: r["key"])):
        assert {c: a[c] for c in compared} == {c: b[c] for c in compared}
        assert a["machine"] == b["machine"] and b["machine_kind"]
    assert json.loads((local / "plan.json").read_text()) == \
        json.loads((other / "plan.json").read_text())


def test_cluster_sweep_as_a_user_runs_it(dask_procs, tmp_path):
    args = ARGS + ["--schemes", "ecmp,drill"]           # 2 runs
    times, outs = {}, {}
    local_prefix = new_prefix()
    outs["local"] = tmp_path / "local"
    times["local"], _ = _talb_bench(args + ["--out", str(outs["local"]), "--prefix", local_prefix],
                                    tmp_path / "bench-local.log")
    _left_nothing(local_prefix)
    _landed_once(outs["local"], 2)

    for workers in (1, 2):
        _add_worker(dask_procs)
        prefix, second = _prefixes()
        how = f"{workers} worker(s)"
        outs[how] = tmp_path / f"cluster{workers}"
        times[how], output = _talb_bench(
            args + ["--out", str(outs[how]), "--prefix", prefix, "--cluster", dask_procs.address],
            tmp_path / f"bench-{workers}.log")
        _left_nothing(prefix, second)                   # every worker's fabric removed
        _landed_once(outs[how], 2)
        _same_but_measured(outs["local"], outs[how])
        for f in (outs[how] / "runs").glob("*.json"):
            assert json.loads(f.read_text())["machine"]["cores"] >= 1
        # the workers' testbeds: one per worker, named in the progress lines
        testbeds = {t for t in (prefix, second) if f"({t})" in output}
        assert testbeds == ({prefix} if workers == 1 else {prefix, second}), output

    # the local directory resumed on the cluster: nothing left to run, nothing sent
    before = {f: f.stat().st_mtime_ns for f in (outs["local"] / "runs").glob("*.json")}
    _, output = _talb_bench(args + ["--out", str(outs["local"]), "--prefix", new_prefix(),
                                    "--cluster", dask_procs.address], tmp_path / "resume.log")
    assert "resuming: 2 of 2 runs" in output, output
    assert before == {f: f.stat().st_mtime_ns for f in (outs["local"] / "runs").glob("*.json")}
    print("\n" + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()) + " for 2 runs")
    Path("/tmp/talb-cluster-times.json").write_text(json.dumps(times))


def _workers(nannies: list[subprocess.Popen]) -> list[int]:
    """The worker processes: the nannies' children (started from any of their threads)."""
    pids = []
    for nanny in nannies:
        for task in Path(f"/proc/{nanny.pid}/task").glob("*"):
            try:
                pids += map(int, (task / "children").read_text().split())
            except FileNotFoundError:
                continue
    return pids


def _worker_holding(lock: Path, nannies: list[subprocess.Popen]) -> int | None:
    """The pid of the worker process that holds ``lock`` open (its slot)."""
    for pid in _workers(nannies):
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except (FileNotFoundError, PermissionError):
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == str(lock):
                    return pid
            except OSError:
                continue
    return None


def test_worker_killed_mid_run_is_requeued(dask_procs, tmp_path):
    from agent.daemon import running_pid
    from common import paths

    nannies = [_add_worker(dask_procs), _add_worker(dask_procs)]
    prefix, second = _prefixes()
    out = tmp_path / "killed"
    log = tmp_path / "bench.log"
    bench = subprocess.Popen(
        [str(BIN / "talb"), *ARGS, "--schemes", "ecmp,drill,letflow", "--out", str(out),
         "--prefix", prefix, "--cluster", dask_procs.address],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while running_pid(prefix) is None:      # slot 0's fabric up, a run prepared on it
            assert time.monotonic() < deadline and bench.poll() is None, log.read_text()
            time.sleep(0.2)
        time.sleep(2)                           # into the run
        victim = _worker_holding(paths.RUN_DIR / "cluster" / f"{prefix}.0.lock", nannies)
        assert victim is not None
        before = _workers(nannies)
        os.kill(victim, signal.SIGKILL)
        assert bench.wait(timeout=BENCH_S) == 0, log.read_text()[-3000:]
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    output = log.read_text()
    assert "Traceback" not in output, output
    _landed_once(out, 3)                       # the killed run made again, each run once
    _left_nothing(prefix, second)              # the dead worker's fabric too
    # the nanny restarted its worker: a new process in the dead one's place
    assert all(n.poll() is None for n in nannies)
    workers = _workers(nannies)
    assert len(workers) == len(before) and victim not in workers, (victim, before, workers)
    # the sweep's end freed both slots
    assert _worker_holding(paths.RUN_DIR / "cluster" / f"{prefix}.0.lock", nannies) is None
