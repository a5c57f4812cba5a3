"""`dask scheduler` and `dask worker` as processes of their own, for the live
tests that run talb's --cluster commands as a user does (no Dask client in
the test's process): tests/test_cluster_live.py, tests/test_attach_cluster.py.

Everything a cluster starts is recorded in /run/talb/test-cluster/<tag>/
(owner pid, process groups, run directories) before it starts: a test run
that was killed leaves that behind, and the next run's
:func:`remove_stale_runs` ends those processes by pid (start time checked),
unmounts their bpffs and removes the directory.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import _start_time, owner_alive
from helpers import free_port

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
TEST_ROOT = Path("/run/talb/test-cluster")


def _kill_group(pid: int, start: str | None) -> None:
    """SIGTERM then SIGKILL to the process group of ``pid``, if ``pid`` is
    still the process we started (same start time)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if start is not None and _start_time(pid) != start:
            return
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while _start_time(pid) == start and time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # our child: reap it
            except ChildProcessError:
                pass
            time.sleep(0.1)


def _remove_run_dir(run_dir: Path) -> None:
    """A machine's TALB_RUN_DIR: its agents stopped, its bpffs unmounted."""
    for pidf in run_dir.glob("*/agent.pid"):
        try:
            pid = int(pidf.read_text().split()[0])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"agent" in cmd and b"talb.cli" in cmd:  # still the agent this run started
            os.kill(pid, signal.SIGKILL)
    bpffs = run_dir / "bpffs"
    if os.path.ismount(bpffs):
        subprocess.run(["umount", str(bpffs)], check=True)
    shutil.rmtree(run_dir, ignore_errors=True)


def remove_stale_runs() -> list[str]:
    """What killed runs of this test left (their owner is gone)."""
    removed = []
    for rec in TEST_ROOT.glob("*/record.json") if TEST_ROOT.is_dir() else ():
        try:
            data = json.loads(rec.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if owner_alive(*data["owner"]):
            continue
        for pid, start in data["pids"]:
            _kill_group(pid, start)
        for d in data["run_dirs"]:
            _remove_run_dir(Path(d))
        shutil.rmtree(rec.parent, ignore_errors=True)
        removed.append(rec.parent.name)
    return removed


class DaskCluster:
    """`dask scheduler` and workers, each its own process group, recorded in
    ``base/record.json`` before it starts; every process's output in
    ``base/<name>.log``."""

    def __init__(self, base: Path, run_dirs: tuple[str, ...] = ()):
        self.base = base
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.run_dirs = {m: base / m for m in run_dirs}
        self.procs: dict[str, subprocess.Popen] = {}
        self.record = {"owner": [os.getpid(), _start_time(os.getpid())], "pids": [],
                       "run_dirs": [str(d) for d in self.run_dirs.values()]}
        base.mkdir(parents=True)
        self._save()
        self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                  "--no-dashboard"], {})
        self._wait_log("scheduler", "Scheduler at:")

    def start_worker(self, machine: str, wait: bool = True, named: bool = True,
                     args: tuple[str, ...] = (), run_dir: bool = True) -> subprocess.Popen:
        """``dask worker ADDR --nworkers 1 --nthreads 1 [--name machine] ARGS``
        (its nanny's process); ``run_dir``: its own TALB_RUN_DIR, standing for
        machine ``machine``'s /run/talb; ``named``: with ``--name machine``
        (else it answers for this host's name); ``wait``: until registered."""
        env = {}
        if run_dir:
            if machine not in self.run_dirs:
                self.run_dirs[machine] = self.base / machine
                self.record["run_dirs"].append(str(self.run_dirs[machine]))
            env["TALB_RUN_DIR"] = str(self.run_dirs[machine])
        proc = self._start(machine, ["worker", self.address,
                                     *(["--name", machine] if named else []),
                                     "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                                     *args], env)
        if wait:
            self.wait_registered(machine)
        return proc

    def wait_registered(self, machine: str) -> None:
        self._wait_log(machine, "Registered to:")

    def stop_worker(self, machine: str) -> None:
        proc = self.procs.pop(machine)
        _kill_group(proc.pid, _start_time(proc.pid))

    def _save(self):
        tmp = self.base / ".record.json"
        tmp.write_text(json.dumps(self.record))
        tmp.replace(self.base / "record.json")

    def _start(self, what: str, args: list[str], env: dict) -> subprocess.Popen:
        log = open(self.base / f"{what}.log", "w")
        proc = subprocess.Popen([str(VENV_BIN / "dask"), *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO,
                                env={**os.environ, **env})
        self.procs[what] = proc
        self.record["pids"].append([proc.pid, _start_time(proc.pid)])
        self._save()
        return proc

    def _wait_log(self, what: str, line: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        log = self.base / f"{what}.log"
        while line not in log.read_text():
            assert self.procs[what].poll() is None, f"{what} exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"{what}: no {line!r} in {timeout} s"
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):   # the workers, then the scheduler
            _kill_group(proc.pid, _start_time(proc.pid))
        for d in self.run_dirs.values():
            _remove_run_dir(d)
        shutil.rmtree(self.base, ignore_errors=True)
