"""A sweep's runs on a Dask distributed cluster (`talb bench --cluster tcp://HOST:8786`).

The client (this module's :class:`Cluster`, in `talb bench`) submits one task
per unfinished run with ``resources={"testbed": 1}``: every testbed machine
runs ``dask worker ADDR --nworkers 1 --nthreads 1 --resources testbed=1`` as
root, so a machine runs one run at a time and runs never share CPUs. The
task (:func:`run_on_worker`, in the worker process) keeps the worker's own
fabric (runner.Fabric: one per topology, reused by the worker's next runs on
it, as the local runner does), runs the run into a temporary file there and
returns the results file's text; the client writes OUT/runs/<key>.json
itself, so its --out is the one results directory and a sweep resumes across
local and cluster runs alike. Every results file records the machine it was
made on (common/machine.py).

Several workers on one machine (a big machine, or a test) each take a
*slot*: an exclusive lock on /run/talb/cluster/<prefix>.<slot>.lock held for
as long as the worker keeps its fabric; slot 0's testbed is the sweep's
``--prefix``, slot k's is that prefix with k appended, so two workers never
build one testbed. The kernel drops a dead worker's lock with its process.

A worker lost mid-run (killed, machine gone): Dask's scheduler gives its run
to another worker, or to the same one once its nanny has restarted it, up to
``distributed.scheduler.allowed-failures`` (3) times; after that the run is
recorded as failed ("KilledWorker: ..."), as any failed run, and the next
start of the sweep tries it again. A restarted worker takes the first free
slot -- the dead one's -- and first removes the fabric its predecessor left
there. The fabrics are removed (and the slots freed) when the sweep ends
(every worker) and when a worker closes (a worker plugin).

The client's Dask client is never the default one (common/dask_client.py),
so every call names it -- ``as_completed`` is given its loop.

Dask is imported here only: without --cluster nothing imports this module.
"""
from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from distributed import Client, WorkerPlugin, as_completed
from distributed.client import FutureCancelledError

from common import dask_client
from experiments.sweep.layout import result_path
from experiments.sweep.plan import Plan, RunSpec
from experiments.sweep.runner import Fabric, progress_bar, real_run, start_out
from workload.run_record import RecordError, read_record

RESOURCE = "testbed"
#: workers of one sweep on one machine at most (slot k's testbed prefix ends in k)
MAX_SLOTS = 10


class ClusterError(ValueError):
    """--cluster cannot be used: no scheduler there, or no testbed worker."""


def connect(address: str, timeout_s: float = dask_client.CONNECT_TIMEOUT_S) -> Client:
    """A client of the scheduler at ``address``, which has at least one worker
    with the ``testbed`` resource; ClusterError naming --cluster otherwise."""
    client = dask_client.connect(address, "`dask scheduler` on that machine (docs/experiments.md, "
                                 "Sweeps on a cluster)", ClusterError, timeout_s)
    workers = client.scheduler_info().get("workers", {})
    if not any((w.get("resources") or {}).get(RESOURCE) for w in workers.values()):
        client.close()
        raise ClusterError(
            f"--cluster {address}: the scheduler has {len(workers)} worker(s), none with the "
            f"resource '{RESOURCE}'; start `dask worker {address} --nworkers 1 --nthreads 1 "
            f"--resources {RESOURCE}=1` as root on each testbed machine")
    return client


# --- in the worker process ------------------------------------------------------------------
_FABRICS: dict[str, Fabric] = {}    # the sweep's prefix -> this worker's fabric
_SLOTS: dict[str, int] = {}         # the sweep's prefix -> this worker's slot lock (an fd)


def slot_prefix(prefix: str, slot: int) -> str:
    """The testbed prefix of ``slot`` for a sweep's ``prefix``: the prefix
    itself for slot 0, else the prefix with the slot appended."""
    from common import paths

    if slot == 0:
        return prefix
    try:
        return paths.check_prefix(f"{prefix}{slot}")
    except ValueError:
        raise ValueError(
            f"--prefix {prefix}: a second worker on one machine needs a prefix of at most 11 "
            f"characters (its testbed is '{prefix}{slot}')") from None


def _take_slot(prefix: str) -> int:
    """Lock this machine's first free slot of the sweep (kept until released)."""
    from common import paths

    d = paths.RUN_DIR / "cluster"
    d.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        fd = os.open(d / f"{prefix}.{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _SLOTS[prefix] = fd
        return slot
    raise RuntimeError(f"more than {MAX_SLOTS} workers of sweep '{prefix}' on this machine")


def _release_slot(prefix: str) -> None:
    fd = _SLOTS.pop(prefix, None)
    if fd is not None:
        os.close(fd)        # closing the only descriptor drops the lock


def _fabric(prefix: str) -> Fabric:
    import multiprocessing

    # A nanny starts its worker as a daemonic process, and multiprocessing
    # refuses children to those; building a fabric compiles its switches' BPF
    # in a process pool (datapath/fabric.py) that ends with the build. (The
    # same as running the worker with DASK_DISTRIBUTED__WORKER__DAEMON=False.)
    multiprocessing.current_process()._config["daemon"] = False
    if prefix not in _FABRICS:
        from netns_topology.state import exists
        from testbed import lifecycle

        mine = slot_prefix(prefix, _take_slot(prefix))
        try:
            if exists(mine):    # left by a worker of this slot before us, killed mid-run
                lifecycle.down(mine)
        except BaseException:
            _release_slot(prefix)
            raise
        _FABRICS[prefix] = Fabric(mine, say=print)
    return _FABRICS[prefix]


def close_fabrics(prefix: str | None = None) -> list[str]:
    """Remove this worker's fabric of the sweep ``prefix`` (every one when
    None) and free its slot; the testbed prefixes removed."""
    closed = []
    for p in [prefix] if prefix else list(_FABRICS):
        fab = _FABRICS.pop(p, None)
        try:
            if fab is not None:
                fab.close()
                closed.append(fab.prefix)
        finally:
            _release_slot(p)
    return closed


def run_on_worker(spec: RunSpec, prefix: str, timeout_s: float = 600.0) -> dict:
    """One run on this worker's fabric: ``{"results": text of the results
    file, "host", "run_s"}``, or ``{"error", "host"}`` when it failed."""
    from common.machine import machine_info

    host = machine_info()["hostname"]
    t0 = time.monotonic()
    try:
        fab = _fabric(prefix)
        try:
            fab.use(spec.topology)
        except BaseException:
            # a build that failed part-way: start the worker's next run from nothing
            # (the local runner stops the sweep instead; here other workers go on)
            _FABRICS.pop(prefix, None)
            from netns_topology.state import exists
            from testbed import lifecycle

            try:
                if exists(fab.prefix):
                    lifecycle.down(fab.prefix)
            finally:
                _release_slot(prefix)
            raise
        fab.prepare(spec)
        with tempfile.TemporaryDirectory(prefix="talb-run-") as d:
            path = Path(d) / f"{spec.key()}.json"
            real_run(fab.prefix, timeout_s)(spec, path)
            try:
                text = path.read_text()
                read_record(text, str(path))
            except (OSError, RecordError):
                raise RuntimeError(f"the run left no results file on {host}") from None
        return {"results": text, "host": host, "testbed": fab.prefix,
                "run_s": time.monotonic() - t0}
    except Exception as exc:  # noqa: BLE001 - recorded by the client, the sweep goes on
        return {"error": f"{type(exc).__name__} on {host}: {exc}", "host": host}


class FabricPlugin(WorkerPlugin):
    """Removes the worker's fabric when the worker closes."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def teardown(self, worker):
        close_fabrics(self.prefix)


# --- in the client ----------------------------------------------------------------------------
class Cluster:
    """What run_sweep calls instead of run_plan under --cluster: ``run_plan``
    per round, ``close`` at the end (every worker's fabric removed).
    ``task(spec, prefix, timeout_s)`` runs a run on a worker and returns what
    :func:`run_on_worker` does (tests give one that needs no fabric)."""

    def __init__(self, client: Client, prefix: str = "tbench", timeout_s: float = 600.0,
                 task=run_on_worker):
        from common import paths

        self.client = client
        self.task = task
        self.prefix = paths.check_prefix(prefix)
        self.timeout_s = timeout_s
        self.plugin = f"talb-fabric-{self.prefix}"
        client.register_plugin(FabricPlugin(self.prefix), name=self.plugin)

    def run_plan(self, plan: Plan, out: Path, *, console=None, progress: bool = True) -> dict:
        """runner.run_plan's work and report, each run on a worker."""
        from rich.console import Console

        out = Path(out)
        console = console or Console(highlight=False, soft_wrap=True)
        failed_path = out / "failed.json"
        failed: dict = {}
        # grouped by topology (a worker rebuilds on a change), earlier first
        todo, skipped = start_out(plan, out, console)
        futures = {}
        for rank, spec in enumerate(todo):
            fut = self.client.submit(self.task, spec, self.prefix, self.timeout_s,
                                     resources={RESOURCE: 1}, pure=False,
                                     priority=len(todo) - rank,
                                     key=f"talb-run-{spec.key()}-{os.urandom(4).hex()}")
            futures[fut] = spec
        done = 0
        bar = progress_bar(console, progress)
        try:
            with bar:
                task = bar.add_task(f"{plan.name} on {self.client.scheduler.address}",
                                    total=len(todo))
                for fut in as_completed(list(futures), loop=self.client.loop):
                    spec = futures[fut]
                    try:
                        rep = fut.result()
                    except FutureCancelledError:
                        rep = {"error": "cancelled on the scheduler"}
                    except Exception as exc:  # noqa: BLE001 - KilledWorker: its workers kept dying
                        rep = {"error": f"{type(exc).__name__}: {exc}"}
                    if "results" in rep:
                        path = result_path(out, spec)
                        tmp = path.with_suffix(".part")
                        tmp.write_text(rep["results"])
                        tmp.replace(path)
                        done += 1
                        bar.console.print(f"  [dim]•[/] {spec.label()}: {rep['run_s']:.0f} s "
                                          f"on {rep['host']} ({rep.get('testbed', self.prefix)})")
                    else:
                        failed[spec.key()] = {"run": spec.label(), "error": rep["error"]}
                        bar.console.print(f"  [red]failed[/] {spec.label()}: {rep['error']}")
                        failed_path.write_text(json.dumps(failed, indent=1))
                    bar.advance(task)
        finally:
            self.client.cancel([f for f in futures if not f.done()])
        if failed:
            failed_path.write_text(json.dumps(failed, indent=1))
        else:
            failed_path.unlink(missing_ok=True)
        return {"done": done, "skipped": skipped, "failed": failed}

    def close(self) -> None:
        """Remove every worker's fabric of this sweep."""
        try:
            self.client.run(close_fabrics, self.prefix)
        finally:
            try:
                self.client.unregister_worker_plugin(self.plugin)
            except Exception:  # noqa: BLE001 - a worker gone already: nothing of ours left there
                pass
