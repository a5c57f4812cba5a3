"""One fabric file over several machines: `talb attach --cluster ADDR`,
`talb scheme --cluster`, `talb detach --cluster` (docs/attach.md).

Every switch of the file names its ``machine:``. A Dask worker answers for
the machine of its ``--name`` (``dask worker ADDR --name srv1``), or, started
without one, for its host name. For each machine the client here sends that
machine's part of the file (AttachFabric.part: the other machines' switches
remote, their hosts untagged) to the machine's worker, which attaches it with
testbed/attach.py as `talb attach --fabric PART` would there, recording under
its own /run/talb/<name>/. When one machine's part fails (that machine's
attach has undone itself), the parts attached on the others are detached
again: nothing is left anywhere. Which worker of which machine attached which
switches is kept here in /run/talb/attach-cluster/<name>.json, written before
the attaches start; `--cluster` detach and scheme send their work to the
workers of the same machines (by machine: a restarted worker has a new
address) and refuse a worker of that name on another host.

The client never becomes Dask's default client: futures are waited on with
``future.result()`` (distributed.as_completed without a client asks for the
default one). Dask is imported only under --cluster.
"""
from __future__ import annotations

import json
import os
import socket
import time
from typing import Callable

from distributed import Client

from common import dask_client, paths
from netns_topology.state import TestbedError, read_record, require_root

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


# --- in the worker process ------------------------------------------------------------------
def _who(dask_worker) -> dict:
    """This worker: its address, name, host and the machine it answers for
    (its --name; without one its address is its name: the host name)."""
    host = socket.gethostname()
    name = str(dask_worker.name)
    return {"address": dask_worker.address, "name": name, "hostname": host,
            "machine": host if name == dask_worker.address else name,
            "root": os.geteuid() == 0}


def _on_worker(fn) -> dict:
    """``fn()``'s answer with the host and seconds, ``{"error": ...}`` when it
    raised (sent back whole: the client decides what to undo)."""
    t0 = time.monotonic()
    log: list[str] = []
    try:
        out = {"ok": True, **fn(log.append)}
    except Exception as exc:  # noqa: BLE001 - reported by the client, which undoes the others
        out = {"ok": False, "error": str(exc) if str(exc) else type(exc).__name__}
    return {**out, "log": log, "host": socket.gethostname(), "seconds": time.monotonic() - t0}


def attach_part(fabric: dict, machine: str, scheme: str | None, agent: dict | None) -> dict:
    """Attach ``machine``'s part of ``fabric`` here (testbed.attach.attach:
    a failure undoes itself)."""
    def run(say):
        from netns_topology.attach_spec import fabric_from_dict
        from testbed.attach import attach

        state = attach(fabric_from_dict(fabric).part(machine), scheme=scheme, agent=agent,
                       progress=say)
        return {"switches": sorted(state["switches"]), "hosts": sorted(state["hosts"]),
                "scheme": state["scheme"], "agent": state["agent"]}
    return _on_worker(run)


def detach_part(name: str) -> dict:
    """Detach what is attached here under ``name``; nothing there: done
    already (a part whose attach failed, or detached by hand)."""
    def run(say):
        from testbed.attach import attached, detach

        if not attached(name):
            return {"nothing": True}
        done = detach(name, progress=say)
        return {"switches": done["switches"], "hosts": done["hosts"], "agent": done["agent"]}
    return _on_worker(run)


def scheme_part(name: str, scheme: str | None, params: dict) -> dict:
    def run(_say):
        from testbed.attach import set_scheme

        return set_scheme(name, scheme, params)
    return _on_worker(run)


def restore_part(name: str, saved: dict) -> dict:
    def run(_say):
        from testbed.attach import restore_scheme

        restore_scheme(name, saved)
        return {}
    return _on_worker(run)


# --- in the client ----------------------------------------------------------------------------
def connect(address: str) -> Client:
    """A client of the scheduler at ``address`` (never the default client)."""
    return dask_client.connect(address, "`dask scheduler` and a worker per machine "
                               "(docs/attach.md)", TestbedError)


def workers(client: Client) -> dict[str, list[dict]]:
    """{machine: its workers' _who, by address}."""
    by_machine: dict[str, list[dict]] = {}
    for info in sorted(client.run(_who).values(), key=lambda w: w["address"]):
        by_machine.setdefault(info["machine"], []).append(info)
    return by_machine


def _worker_of(by_machine: dict, machine: str, where: str, address: str,
               host: str | None = None) -> dict:
    """The worker answering for ``machine`` (the first by address when
    several do); TestbedError naming ``where`` when none does, or when the
    one that does is not on ``host`` (where the part was attached)."""
    found = by_machine.get(machine)
    if not found:
        known = ", ".join(f"{m} ({', '.join(w['address'] for w in ws)})"
                          for m, ws in sorted(by_machine.items())) or "none"
        raise TestbedError(
            f"{where}: no worker for machine {machine!r} at {address} (workers' machines: "
            f"{known}); start one there: `dask worker {address} --name {machine} --nworkers 1 "
            f"--nthreads 1` as root")
    worker = found[0]
    if not worker["root"]:
        raise TestbedError(f"{where}: the worker for machine {machine!r} ({worker['address']}) "
                           f"does not run as root; attaching needs root")
    if host is not None and worker["hostname"] != host:
        raise TestbedError(
            f"{where}: the worker for machine {machine!r} ({worker['address']}) runs on host "
            f"{worker['hostname']}, but the part was attached on {host}: start the worker on "
            f"{host} again")
    return worker


def _write(record: dict) -> None:
    path = paths.cluster_attach_file(record["name"])
    paths.private_dir(path.parent)
    paths.write_private(path, json.dumps(record, indent=2))


def read_cluster(name: str) -> dict:
    return read_record(paths.cluster_attach_file(name),
                       f"nothing is attached over a cluster under the name '{name}' "
                       f"(`talb attach --cluster ADDR --fabric FILE` attaches)", "")


def cluster_attached(name: str) -> bool:
    return paths.cluster_attach_file(name).exists()


def _run(client: Client, calls: dict[str, tuple], progress: Progress) -> dict[str, dict]:
    """``{machine: (worker address, fn, *args)}`` run at once, one task on
    each machine's worker; ``{machine: fn's answer}``, in submission order
    (a lost worker: an error answer)."""
    futures = {m: client.submit(fn, *args, workers=[addr], allow_other_workers=False, pure=False)
               for m, (addr, fn, *args) in calls.items()}
    out = {}
    for machine, fut in futures.items():
        try:
            out[machine] = fut.result()
        except Exception as exc:  # noqa: BLE001 - KilledWorker, a worker gone: its state unknown
            out[machine] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "log": [],
                            "host": "?", "seconds": 0.0}
        for line in out[machine]["log"]:
            progress(f"[{machine}] {line}")
    return out


def attach(address: str, fabric, *, scheme: str | None = None, agent: dict | None = None,
           progress: Progress = _quiet) -> dict:
    """Attach every machine's part of ``fabric`` through the workers at
    ``address``; returns the cluster record. A part that fails undoes the
    others (TestbedError naming the machine and the part's error)."""
    name = fabric.name
    machines = fabric.machines()
    require_root()  # the record is root's, as every machine's own
    if cluster_attached(name):
        raise TestbedError(f"name: '{name}' is attached over a cluster already; "
                           f"`talb detach --name {name} --cluster {address}` first")
    client = connect(address)
    try:
        by_machine = workers(client)
        first = {s.machine: i for i, s in reversed(list(enumerate(fabric.switches)))}
        placed = {m: _worker_of(by_machine, m, f"switches[{first[m]}].machine", address)
                  for m in machines}
        record = {"name": name, "scheduler": address, "status": "attaching",
                  "parts": {m: {"address": w["address"], "worker": w["name"],
                                "hostname": w["hostname"],
                                "switches": [s.name for s in fabric.switches if s.machine == m]}
                            for m, w in placed.items()}}
        _write(record)  # first: a crash from here on is undone by `talb detach --cluster`
        for m, part in record["parts"].items():
            progress(f"{m}: switches {', '.join(part['switches'])} on worker {part['address']} "
                     f"(host {part['hostname']})")
        wanted = fabric.to_dict()
        try:
            got = _run(client, {m: (w["address"], attach_part, wanted, m, scheme, agent)
                                for m, w in placed.items()}, progress)
        except BaseException:
            progress("interrupted; undoing every machine's part")
            _undo(client, record, progress)
            raise
        failed = {m: r for m, r in got.items() if not r["ok"]}
        if failed:
            for m, r in failed.items():
                progress(f"{m} failed ({r['error']})")
            undone = _undo(client, record, progress)
            m, r = next(iter(failed.items()))
            raise TestbedError(f"machine {m} (worker {placed[m]['address']}, host {r['host']}): "
                               f"{r['error']}; " + undone)
        for m, r in got.items():
            record["parts"][m].update(scheme=r["scheme"], hosts=r["hosts"], agent=r["agent"],
                                      seconds=round(r["seconds"], 2))
        record["status"] = "up"
        _write(record)
        return record
    finally:
        client.close()


def _undo(client: Client, record: dict, progress: Progress) -> str:
    """Detach every part of ``record`` (the failed one's undid itself: its
    worker finds nothing); what was undone, for the error message."""
    where = {m: (p["address"], detach_part, record["name"]) for m, p in record["parts"].items()}
    got = _run(client, where, progress)
    left = {m: r["error"] for m, r in got.items() if not r["ok"]}
    if left:
        return ("could not undo on " + "; ".join(f"{m}: {e}" for m, e in left.items())
                + f" (the record is kept: `talb detach --name {record['name']} --cluster "
                  f"{record['scheduler']}` retries)")
    paths.cluster_attach_file(record["name"]).unlink(missing_ok=True)
    undone = [m for m, r in got.items() if not r.get("nothing")]
    return f"undone on {', '.join(undone)}" if undone else "nothing was attached elsewhere"


def _placed(client: Client, record: dict, address: str) -> dict[str, dict]:
    """{machine: its worker now}, on the host where its part was attached."""
    by_machine = workers(client)
    return {m: _worker_of(by_machine, m, f"machine {m}", address, host=p["hostname"])
            for m, p in record["parts"].items()}


def detach(name: str, address: str | None = None, *, progress: Progress = _quiet) -> dict:
    """Detach every machine's part of ``name`` through the workers of the
    machines that attached them; ``{machine: what its worker detached}``.
    A machine whose detach fails (or that has no worker now) keeps its
    entry in the record, the others are detached and leave it."""
    require_root()
    record = read_cluster(name)
    address = address or record["scheduler"]
    client = connect(address)
    try:
        by_machine = workers(client)
        calls, errors = {}, {}
        for m, p in record["parts"].items():
            try:
                w = _worker_of(by_machine, m, f"machine {m}", address, host=p["hostname"])
                calls[m] = (w["address"], detach_part, name)
            except TestbedError as exc:
                errors[m] = str(exc)
        got = _run(client, calls, progress)
    finally:
        client.close()
    errors.update({m: r["error"] for m, r in got.items() if not r["ok"]})
    if errors:
        record["parts"] = {m: p for m, p in record["parts"].items() if m in errors}
        _write(record)
        raise TestbedError(f"detach '{name}': " + "; ".join(f"{m}: {e}" for m, e in errors.items())
                           + f" (detached on: {', '.join(m for m in got if m not in errors) or 'none'};"
                             f" fix and run `talb detach --name {name} --cluster {address}` again)")
    paths.cluster_attach_file(name).unlink(missing_ok=True)
    return got


def set_scheme(name: str, scheme: str | None, params: dict, address: str | None = None, *,
               progress: Progress = _quiet) -> dict[str, dict[str, str]]:
    """Show or switch the scheme of every machine's switches; ``{machine:
    {switch: scheme}}``. One machine refusing puts the others' schemes back."""
    require_root()
    record = read_cluster(name)
    address = address or record["scheduler"]
    client = connect(address)
    try:
        placed = _placed(client, record, address)
        got = _run(client, {m: (w["address"], scheme_part, name, scheme, params)
                            for m, w in placed.items()}, progress)
        failed = {m: r["error"] for m, r in got.items() if not r["ok"]}
        if failed:
            back = {m: (placed[m]["address"], restore_part, name, r["saved"])
                    for m, r in got.items() if r["ok"] and r["saved"]}
            restored = _run(client, back, progress)
            left = [f"{m}: {r['error']}" for m, r in restored.items() if not r["ok"]]
            raise TestbedError(
                "; ".join(f"machine {m}: {e}" for m, e in failed.items())
                + (f"; the scheme is back on {', '.join(m for m, r in restored.items() if r['ok'])}"
                   if any(r["ok"] for r in restored.values()) else "")
                + (f"; could not put it back on {'; '.join(left)}" if left else ""))
    finally:
        client.close()
    return {m: r["schemes"] for m, r in got.items()}
