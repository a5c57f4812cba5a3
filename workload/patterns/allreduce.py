"""Ring all-reduce: N workers in a ring, each sends to its successor.

A partition is cut into N chunks; reduce-scatter takes N-1 steps, all-gather
N-1 more: 2(N-1) steps, and each step's send is a tensor of its own (a fresh
tensor id). At step s worker i sends chunk (i - s) mod N; its step s >= 1 can
go only once step s-1 arrived from its predecessor (the emulated reduction
is not computed, the bytes are checked). A worker's partition is done when
the last step arrives: it then holds the whole reduced partition.

Chunks: ceil(partition bytes / N), at least the scaling's minimum tensor
size; so a worker sends 2(N-1) chunks per partition, 2(N-1)/N of the model
when N divides each partition.

Connections (workload/patterns/connections.py): a worker's connections to
its successor follow the run's model -- one (``pair``), one per priority
class, or a pool -- and it reads every connection its predecessor opened.
Over a pool a later step of a partition may arrive before an earlier one;
the partition is done when all its steps are in.

Starting a partition. ByteScheduler orders each worker's partitions, but
the ring needs every worker in the same collective: were each worker to
start partitions by its own scheduler alone, two workers could each hold
their credit for a different partition and wait for the other forever
(Horovod negotiates the order through a coordinator for the same reason).
Here a worker starts a partition when its own scheduler admits it *or* when
its predecessor's first chunk of it arrives and its own gradients are ready
(it joins, counted against its credit); so the earliest worker's priority
order leads, and no worker waits on credit another one holds.
"""
from __future__ import annotations

import heapq
import math
import socket
import time

from common.excerpt import shown
from workload.patterns import connections
from workload.patterns.common import (
    WorkerLoop, accept_indexed, connect, emit, recv_message, send_message, thread, wait_for_go)
from workload.scheduler import Partition

ROLES = ("worker",)


def steps(n_workers: int) -> int:
    return 2 * (n_workers - 1)


def chunk_bytes(p: Partition, n_workers: int, min_bytes: int = 1) -> int:
    return max(math.ceil(p.nbytes / n_workers), min_bytes)


def bytes_per_iteration(parts: list[Partition], workers: int, min_bytes: int = 1) -> dict:
    per_worker = sum(steps(workers) * chunk_bytes(p, workers, min_bytes) for p in parts)
    return {"send_per_worker": per_worker, "recv_per_worker": per_worker,
            "total": workers * per_worker}


def nodes(plan: dict) -> list[tuple[str, int]]:
    return [("worker", r) for r in range(len(plan["workers"]))]


def run(plan: dict, role: str, rank: int) -> None:
    if role != "worker":
        raise ValueError(f"role: allreduce has {', '.join(ROLES)}, got {shown(role)}")
    _worker(plan, rank)


class _Ring:
    def __init__(self, loop: WorkerLoop, n: int, rank: int, min_bytes: int):
        self.loop, self.n, self.rank = loop, n, rank
        self.last = steps(n) - 1
        self.min_bytes = min_bytes
        self.started: set[tuple[int, int]] = set()
        self.grad_ready: set[tuple[int, int]] = set()
        self.pending: dict[tuple[int, int], list[int]] = {}   # steps that may go once started
        self.outq: list[tuple] = []                           # (it, priority, pid, step)
        self.admit_ns: dict[tuple[int, int], int] = {}        # when each partition started here
        self.got: dict[tuple[int, int], int] = {}             # steps received of each partition
        self.queued_ns: dict[tuple[int, int, int], int] = {}  # when each send could go
        self.received_total = 0
        loop.on_ready = self._ready

    # all under loop.cv
    def _queue(self, it: int, p: Partition, step: int) -> None:
        heapq.heappush(self.outq, (it, p.priority, p.pid, step))
        self.queued_ns[(it, p.pid, step)] = time.monotonic_ns()
        self.loop.cv.notify_all()

    def _start(self, it: int, p: Partition) -> None:
        key = (it, p.pid)
        self.started.add(key)
        self._queue(it, p, 0)
        for s in self.pending.pop(key, []):
            self._queue(it, p, s)

    def _join(self, it: int, p: Partition) -> None:
        """Start a partition a peer began (outside the scheduler's order)."""
        self.loop.sched.start(it, p)
        self.admit_ns[(it, p.pid)] = time.monotonic_ns()
        self._start(it, p)

    def _ready(self, it: int, parts) -> None:
        for p in parts:
            key = (it, p.pid)
            self.grad_ready.add(key)
            if key in self.pending:     # the predecessor began it already: join
                self._join(it, p)

    def admitted(self, it: int, p: Partition, t_admit_ns: int) -> None:
        with self.loop.cv:
            if (it, p.pid) not in self.started:
                self.admit_ns[(it, p.pid)] = t_admit_ns
                self._start(it, p)

    def received(self, m: dict) -> None:
        it, p, step = m["it"], self.loop.parts[m["pid"]], m["step"]
        key = (it, p.pid)
        with self.loop.cv:
            self.received_total += 1
            if step < self.last:
                if key in self.started:
                    self._queue(it, p, step + 1)
                else:
                    self.pending.setdefault(key, []).append(step + 1)
                    if key in self.grad_ready:   # join the collective a peer began
                        self._join(it, p)
            # Done once every step is in: on one connection the last step
            # arrives last; over a pool a later step may overtake an earlier one.
            self.got[key] = self.got.get(key, 0) + 1
            if self.got[key] == self.last + 1:
                del self.got[key]
                self.loop.partition_done(it, p)

    def next_send(self):
        """(iteration, partition, step, when it could go) of the next send."""
        with self.loop.cv:
            self.loop.cv.wait_for(lambda: self.outq)
            it, _prio, pid, step = heapq.heappop(self.outq)
            t = self.queued_ns.pop((it, pid, step))
        return it, self.loop.parts[pid], step, t


def _worker(plan: dict, rank: int) -> None:
    from workload.tensor_sender import TensorSender

    n = len(plan["workers"])
    if n < 2:
        raise ValueError(f"workers: ring all-reduce needs at least 2, got {n}")
    loop = WorkerLoop(plan, rank)
    ring = _Ring(loop, n, rank, plan.get("min_tensor_bytes", 1))
    succ, pred = (rank + 1) % n, (rank - 1) % n
    me = plan["workers"][rank]
    # the connection model per neighbour: k connections to the successor (and
    # as many from the predecessor), every partition crossing each
    model = connections.of_plan(plan)["model"]
    pids = [p.pid for p in loop.parts]
    k = connections.count(plan, pids)
    with socket.create_server(("0.0.0.0", me["port"]), backlog=k + 1) as srv:
        emit({"ev": "ready", "node": rank})
        outs = [connect(plan["workers"][succ]["ip"], plan["workers"][succ]["port"], rank, i)
                for i in range(k)]
        incs: dict[int, socket.socket] = {}
        for _ in range(k):
            inc, peer, index = accept_indexed(srv)
            if peer != pred:
                raise RuntimeError(f"worker {rank}: expected node {pred} as predecessor, got {peer}")
            incs[index] = inc
    # pair: the transmitting thread writes (as ever)
    lanes = connections.Lanes(model, outs, [TensorSender(o) for o in outs],
                              classes=connections.lane_classes(plan, pids), inline=model == "pair")
    expected = plan["iterations"] * len(loop.parts) * steps(n)
    wait_for_go(rank)              # training starts at the run's start instant

    def reader(inc: socket.socket) -> None:
        while (m := recv_message(inc)) is not None:
            connections.quickack(inc, plan)
            ring.received(m)

    def admitter() -> None:
        for it, p, t_admit in loop.admissions():
            ring.admitted(it, p, t_admit)

    def transmitter() -> None:
        for _ in range(expected):
            it, p, step, t_queued = ring.next_send()
            kind = "reduce" if step < n - 1 else "gather"
            t_admit = ring.admit_ns.get((it, p.pid)) if step == 0 else None
            lanes.send((it, p.priority, p.pid, step),
                       lambda c, it=it, p=p, step=step, kind=kind, t_admit=t_admit, t_q=t_queued:
                       send_message(c.sender, kind, rank, succ, it, p, step,
                                    chunk_bytes(p, n, ring.min_bytes), t_admit, conn=c,
                                    t_queued_ns=t_q),
                       connections.class_of(plan, p.pid))

    readers = [thread(reader, inc) for inc in incs.values()]
    workers = [thread(admitter), thread(transmitter)]
    loop.run()
    for t in workers:
        t.join()
    lanes.close()
    for c in lanes.conns:
        c.sender.close()
        c.sock.shutdown(socket.SHUT_WR)
    for t in readers:
        t.join()      # the predecessor closes once it is done too
    if ring.received_total != expected:
        raise RuntimeError(f"worker {rank}: predecessor {pred} closed the ring after "
                           f"{ring.received_total} of {expected} chunks")
    for c in lanes.conns:
        c.sock.close()
    for inc in incs.values():
        inc.close()
