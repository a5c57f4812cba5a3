"""A PyTorch DDP job on the testbed's hosts (`talb run --client torch`,
docs/workload.md "PyTorch DDP jobs").

How it launches: one rank per host, each ``ip netns exec <ns> python
workload/torch_rank.py SPEC RANK`` (the venv's Python, where torch is:
``pip install talb[torch]``), in a session of its own, every rank in one
cgroup v2 made for the job: that cgroup is what the transparent tagger
selects (gloo's connections use ephemeral ports, so no port range picks
them; workload/transparent_tag.py) and what ends the job (``cgroup.kill``).
Rendezvous: a TCP store at rank 0's fabric address, gloo bound to eth0
(``GLOO_SOCKET_IFNAME``), so every byte of the job crosses the fabric.

A rank that exits non-zero ends the job: the first one to exit (by the
time its wait returned) is named with its host, exit status and the tail of
its stderr; every rank's session and the cgroup are ended (SIGTERM, then
SIGKILL; mpi_job.end_session) and the cgroup removed: nothing left behind.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from workload.mpi_job import MpiHost, end_session, rank_hosts

RANK_PROGRAM = Path(__file__).resolve().parent / "torch_rank.py"
#: rank 0's TCP store (the rendezvous) listens here, on its fabric address
DEFAULT_MASTER_PORT = 29500
INSTALL_HINT = ("pip install 'talb[torch]' (torch==2.13.0, PyTorch's CPU build; `make setup` "
                "installs it; elsewhere from PyTorch's CPU index, docs/training.md)")
#: where the jobs' cgroups go, under the cgroup v2 mount
CGROUP_PARENT = "talb-torch"


class TorchError(RuntimeError):
    """The PyTorch job could not start or failed; the message says why."""


@dataclass
class TorchResult:
    """Every rank's JSON (rank order) and how the job ran."""

    ranks: list[dict]
    hosts: list[str]
    cgroup: str
    argv: list[list[str]]
    wall_s: float
    params: dict = field(default_factory=dict)


def check_torch(python: str = sys.executable) -> str:
    """torch's version in ``python``; TorchError naming the extra when it is missing."""
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise TorchError(f"--client torch: {python} cannot import torch; {INSTALL_HINT}")
    return p.stdout.strip()


def cgroup_root() -> Path:
    from workload.transparent_tag import _cgroup2_root

    return _cgroup2_root()


def make_cgroup(tag: str) -> Path:
    """A new cgroup v2 directory for one job, under CGROUP_PARENT."""
    parent = cgroup_root() / CGROUP_PARENT
    path = parent / f"{tag}-{os.getpid()}-{time.monotonic_ns()}"
    for _ in range(3):      # another job's remove_cgroup may take the parent away meanwhile
        parent.mkdir(exist_ok=True)
        try:
            path.mkdir()
            return path
        except FileNotFoundError:
            continue
    raise TorchError(f"cannot make the job's cgroup {path}")


def cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def remove_cgroup(path: Path, grace_s: float = 5.0) -> None:
    """Kill whatever is still in the cgroup (cgroup.kill) and remove it."""
    if not path.exists():
        return
    if cgroup_pids(path):
        try:
            (path / "cgroup.kill").write_text("1")
        except OSError:
            for pid in cgroup_pids(path):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
    deadline = time.monotonic() + grace_s
    while True:
        try:
            path.rmdir()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise TorchError(f"cgroup {path} still holds {cgroup_pids(path)}") from None
            time.sleep(0.05)
    try:
        path.parent.rmdir()     # the last job's: nothing of ours stays in the hierarchy
    except OSError:
        pass                    # another job's cgroup is in it


def rank_argv(host: MpiHost, cgroup: Path, spec_file: Path, rank: int, python: str) -> list[str]:
    """The rank's command: join the job's cgroup, then run the rank program
    in the host's namespace (``ip netns exec`` execs: the rank keeps the pid)."""
    return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup),
            "ip", "netns", "exec", host.netns, python, str(RANK_PROGRAM), str(spec_file), str(rank)]


class DdpJob:
    """One job's ranks: :meth:`start` launches them and returns when every
    rank is ready (torch imported, rendezvous done, DDP built: seconds on a
    busy machine, so before the run's clock starts), :meth:`go` gives them
    the instant to start training (CLOCK_MONOTONIC s, or None: now),
    :meth:`wait` their results. :meth:`close` ends everything, on every path."""

    def __init__(self, prefix: str, topo, host_names: Sequence[str], spec: dict, *,
                 master_port: int = DEFAULT_MASTER_PORT, timeout_s: float = 600.0,
                 python: str = sys.executable):
        self.hosts = rank_hosts(prefix, topo, host_names)
        self.torch = check_torch(python)
        self.timeout_s, self.python = timeout_s, python
        self.procs: list[subprocess.Popen] = []
        self.exits: list[tuple[float, int, int]] = []
        self._done = threading.Condition()
        self.work = Path(tempfile.mkdtemp(prefix="talb-torch-"))
        self.cgroup: Path | None = None
        try:
            os.chmod(self.work, 0o755)
            self.cgroup = make_cgroup(paths_safe(prefix))
            self.spec = {**spec, "world": len(self.hosts), "master_addr": self.hosts[0].ip,
                         "master_port": master_port, "go_file": str(self.work / "go.json")}
            self.spec_file = self.work / "spec.json"
            self.spec_file.write_text(json.dumps(self.spec))
            self.argv = [rank_argv(h, self.cgroup, self.spec_file, r, python)
                         for r, h in enumerate(self.hosts)]
        except BaseException:
            self.close()
            raise

    @property
    def cgroup_path(self) -> str:
        """The job's cgroup, relative to the cgroup v2 mount (TransparentTagger's cgroup=)."""
        return str(self.cgroup.relative_to(cgroup_root()))

    def start(self) -> None:
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        self.t0 = time.monotonic()
        for r, argv in enumerate(self.argv):
            with open(self.work / f"rank-{r}.stderr", "w") as err:
                self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                                   start_new_session=True, cwd=str(self.work),
                                                   env=env))
        for r, p in enumerate(self.procs):
            threading.Thread(target=self._waiter, args=(r, p), daemon=True).start()
        self._until(lambda: all((self.work / f"ready-{r}").exists()
                                for r in range(len(self.procs))), "ready")

    def _waiter(self, r: int, p: subprocess.Popen) -> None:
        rc = p.wait()
        with self._done:
            self.exits.append((time.monotonic(), r, rc))
            self._done.notify_all()

    def _until(self, cond, what: str) -> None:
        """Wait for ``cond`` (checked every 50 ms); TorchError naming the
        first rank that failed, or the timeout."""
        deadline = self.t0 + self.timeout_s
        with self._done:
            while not cond():
                failed = sorted(x for x in self.exits if x[2] != 0)
                if failed:
                    raise TorchError(self._failure(failed))
                if len(self.exits) == len(self.procs) and what == "ready":
                    raise TorchError("every rank exited before it was ready")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TorchError(f"the PyTorch job took longer than {self.timeout_s:g} s and "
                                     f"was ended ({len(self.exits)} of {len(self.procs)} ranks "
                                     f"had finished; waiting for: {what})")
                self._done.wait(min(left, 0.05))

    def _failure(self, failed) -> str:
        _, r, rc = failed[0]
        tail = _tail(self.work / f"rank-{r}.stderr")
        others = ", ".join(f"rank {x} ({self.hosts[x].name}) exited {_status(c)}"
                           for _, x, c in failed[1:])
        return (f"rank {r} on {self.hosts[r].name} exited {_status(rc)} first; the job was "
                f"ended ({others or 'the other ranks were ended'}): {tail or 'no output'}")

    def go(self, start_at: float | None) -> None:
        tmp = self.work / "go.json.tmp"
        tmp.write_text(json.dumps({"start_at": start_at}))
        tmp.rename(self.work / "go.json")

    def wait(self) -> TorchResult:
        self._until(lambda: len(self.exits) == len(self.procs), "the ranks' end")
        failed = sorted(x for x in self.exits if x[2] != 0)
        if failed:
            raise TorchError(self._failure(failed))
        outs = []
        for r, h in enumerate(self.hosts):
            f = self.work / f"rank-{r}.json"
            if not f.exists():
                raise TorchError(f"rank {r} on {h.name} exited 0 without a result: "
                                 f"{_tail(self.work / f'rank-{r}.stderr') or 'no output'}")
            outs.append(json.loads(f.read_text()))
        return TorchResult(outs, [h.name for h in self.hosts], self.cgroup_path, self.argv,
                           time.monotonic() - self.t0)

    def close(self) -> None:
        for p in self.procs:
            end_session(p, grace_s=2.0)
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
            self.cgroup = None
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> "DdpJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_job(prefix: str, topo, host_names: Sequence[str], spec: dict, *,
            master_port: int = DEFAULT_MASTER_PORT, timeout_s: float = 600.0,
            on_cgroup=None, on_start=None) -> TorchResult:
    """Run workload/torch_rank.py with ``spec`` on every host of
    ``host_names`` (rank i on host i; the store on host 0), training at once.
    ``on_cgroup(relative path)``: before any rank starts (to tag it);
    ``on_start(procs)``: once every rank is ready. TorchError when a rank
    fails or the job passes ``timeout_s``; every process ended on every path."""
    with DdpJob(prefix, topo, host_names, spec, master_port=master_port,
                timeout_s=timeout_s) as job:
        if on_cgroup:
            on_cgroup(job.cgroup_path)
        job.start()
        if on_start:
            on_start(job.procs)
        job.go(None)
        return job.wait()


def paths_safe(prefix: str) -> str:
    from common import paths

    return paths.check_prefix(prefix)


def _status(rc: int) -> str:
    return f"on signal {-rc}" if rc < 0 else f"with status {rc}"


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    keep = [x for x in text.strip().splitlines() if "UserWarning" not in x]
    return "\n".join(keep[-lines:])
