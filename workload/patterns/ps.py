"""Parameter server: N workers, K servers, partitions sharded over the servers.

Every worker has one TCP connection to every server. A worker PUSHes each
partition's gradients to the partition's server as the scheduler admits it;
the server acknowledges each PUSH as it arrives and counts the copies of
that partition; once every worker's copy is in (aggregation: the sum itself
is not computed, the bytes are checked), PULLs go back to every worker,
front layers first. A worker's partition is done (its layer's forward step
may go) when its PULL is in.

Credit: a PUSH holds its bytes of credit until the server's acknowledgement
(a ps-lite push completes the same way). Holding it until the PULL instead
deadlocks: a worker whose credit is full of partitions waiting for another
worker's PUSH, while that worker's credit is full of partitions waiting for
this one's, waits forever (priority arrival times differ between workers).

Sharding: partitions go to servers largest first, each to the server with
the fewest bytes so far (ties: lowest rank), so that servers carry equal
loads (ByteScheduler's partitions make this even; MXNet's kvstore does the
same by key hashing).
"""
from __future__ import annotations

import heapq
import socket
import threading
from collections import defaultdict

from workload.patterns.common import (
    WorkerLoop, accept, connect, emit, partitions_of, recv_message, send_ack, send_message, thread,
    wait_for_go)
from workload.scheduler import Partition

ROLES = ("worker", "server")


def shard(parts: list[Partition], servers: int) -> dict[int, int]:
    """{partition id: server index}."""
    load = [(0, s) for s in range(servers)]
    heapq.heapify(load)
    out = {}
    for p in sorted(parts, key=lambda p: (-p.nbytes, p.pid)):
        nbytes, s = heapq.heappop(load)
        out[p.pid] = s
        heapq.heappush(load, (nbytes + p.nbytes, s))
    return out


def bytes_per_iteration(parts: list[Partition], workers: int, servers: int) -> dict:
    """Payload bytes one iteration moves (message headers not counted):
    every worker pushes and pulls every partition once."""
    model = sum(p.nbytes for p in parts)
    return {"push_per_worker": model, "pull_per_worker": model,
            "total": 2 * workers * model}


def nodes(plan: dict) -> list[tuple[str, int]]:
    """(role, rank) of every process the pattern runs; node id = position."""
    return [("worker", r) for r in range(len(plan["workers"]))] + \
           [("server", r) for r in range(len(plan["servers"]))]


def run(plan: dict, role: str, rank: int) -> None:
    if role == "server":
        _server(plan, rank)
    elif role == "worker":
        _worker(plan, rank)
    else:
        raise ValueError(f"role: ps has {', '.join(ROLES)}, got {role!r}")


def _server(plan: dict, rank: int) -> None:
    from workload.tensor_sender import TensorSender

    n_workers = len(plan["workers"])
    me = n_workers + rank
    parts = {p.pid: p for p in partitions_of(plan)}
    owner = shard(list(parts.values()), len(plan["servers"]))
    mine = [pid for pid, s in owner.items() if s == rank]
    expected = plan["iterations"] * len(mine)
    with socket.create_server(("0.0.0.0", plan["servers"][rank]["port"]),
                              backlog=n_workers) as srv:
        emit({"ev": "ready", "node": me})
        conns = {}
        for _ in range(n_workers):
            conn, peer = accept(srv)
            conns[peer] = conn
    wait_for_go(me)
    lock = threading.Condition()
    copies: dict[tuple[int, int], int] = defaultdict(int)
    queues: dict[int, list] = {w: [] for w in conns}

    def reader(w: int, conn: socket.socket) -> None:
        while (m := recv_message(conn)) is not None:
            if m["kind"] != "push" or owner.get(m["pid"]) != rank:
                raise RuntimeError(f"server {rank}: unexpected {m['kind']} of partition {m['pid']} "
                                   f"from node {w}")
            with lock:
                key = (m["it"], m["pid"])
                heapq.heappush(queues[w], (0, m["it"], 0, m["pid"]))   # the ack goes first
                copies[key] += 1
                if copies[key] == n_workers:   # aggregated: every worker's copy is here
                    for q in queues.values():
                        heapq.heappush(q, (1, m["it"], parts[m["pid"]].priority, m["pid"]))
                lock.notify_all()

    def writer(w: int, conn: socket.socket) -> None:
        with TensorSender(conn) as tx:
            for _ in range(2 * expected):    # an ack and a pull per partition and iteration
                with lock:
                    lock.wait_for(lambda: queues[w])
                    what, it, _prio, pid = heapq.heappop(queues[w])
                p = parts[pid]
                if what == 0:
                    send_ack(conn, me, w, it, p)
                else:
                    send_message(tx, "pull", me, w, it, p, 0, p.nbytes)

    readers = [thread(reader, w, c) for w, c in conns.items()]
    writers = [thread(writer, w, c) for w, c in conns.items()]
    for t in writers:
        t.join()
    for t in readers:
        t.join()           # workers close once they have every PULL
    for c in conns.values():
        c.close()


def _worker(plan: dict, rank: int) -> None:
    from workload.tensor_sender import TensorSender

    loop = WorkerLoop(plan, rank)
    n_workers = len(plan["workers"])
    owner = shard(loop.parts, len(plan["servers"]))
    socks = [connect(s["ip"], s["port"], rank) for s in plan["servers"]]
    senders = [TensorSender(s) for s in socks]
    wait_for_go(rank)              # training starts at the run's start instant

    def reader(s: int, sock: socket.socket) -> None:
        expected = plan["iterations"] * sum(1 for o in owner.values() if o == s)
        for _ in range(2 * expected):
            m = recv_message(sock)
            if m is None:
                raise RuntimeError(f"worker {rank}: server {s} closed the connection early")
            with loop.cv:
                if m["kind"] == "ack":
                    loop.release(m["it"], loop.parts[m["pid"]])
                else:
                    loop.partition_done(m["it"], loop.parts[m["pid"]], release=False)

    def pusher() -> None:
        for it, p, t_admit in loop.admissions():
            s = owner[p.pid]
            send_message(senders[s], "push", rank, n_workers + s, it, p, 0, p.nbytes, t_admit)

    readers = [thread(reader, s, sock) for s, sock in enumerate(socks)]
    push = thread(pusher)
    loop.run()
    push.join()
    for t in readers:
        t.join()
    for tx in senders:
        tx.close()
    for sock in socks:
        sock.close()
