"""Parameter server: N workers, K servers, partitions sharded over the servers.

Every worker has one TCP connection to every server (``pair``; or one per
priority class, or a pool: workload/patterns/connections.py). A worker PUSHes each
partition's gradients to the partition's server as the scheduler admits it;
the server acknowledges each PUSH as it arrives (on the connection it came
in on) and counts the copies of
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
import time
from collections import defaultdict

from workload.patterns import connections
from workload.patterns.common import (
    WorkerLoop, accept_indexed, connect, emit, partitions_of, recv_message, send_ack,
    send_message, thread, wait_for_go)
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
    model = connections.of_plan(plan)["model"]
    k = connections.count(plan, mine)            # connections per worker
    with socket.create_server(("0.0.0.0", plan["servers"][rank]["port"]),
                              backlog=n_workers * k) as srv:
        emit({"ev": "ready", "node": me})
        conns: dict[int, dict[int, socket.socket]] = defaultdict(dict)
        for _ in range(n_workers * k):
            conn, peer, index = accept_indexed(srv)
            conns[peer][index] = conn
    if sorted(conns) != list(range(n_workers)) or any(sorted(c) != list(range(k))
                                                      for c in conns.values()):
        raise RuntimeError(f"server {rank}: expected connections 0..{k - 1} from each of workers "
                           f"0..{n_workers - 1}, got {({w: sorted(c) for w, c in conns.items()})}")
    socks = {w: [conns[w][i] for i in range(k)] for w in conns}
    lanes = {w: connections.Lanes(model, ss, [TensorSender(c) for c in ss],
                                  classes=connections.lane_classes(plan, mine))
             for w, ss in socks.items()}
    wait_for_go(me)
    lock = threading.Lock()
    copies: dict[tuple[int, int], int] = defaultdict(int)

    def ack(w: int, it: int, p: Partition):
        return lambda c: send_ack(c.sock, me, w, it, p)

    def pull(w: int, it: int, p: Partition, t_queued: int):
        return lambda c: send_message(c.sender, "pull", me, w, it, p, 0, p.nbytes, conn=c,
                                      t_queued_ns=t_queued)

    def reader(w: int, index: int, conn: socket.socket) -> None:
        while (m := recv_message(conn)) is not None:
            connections.quickack(conn, plan)
            if m["kind"] != "push" or owner.get(m["pid"]) != rank:
                raise RuntimeError(f"server {rank}: unexpected {m['kind']} of partition {m['pid']} "
                                   f"from node {w}")
            it, p = m["it"], parts[m["pid"]]
            # the ack first, on the connection the PUSH came in on
            lanes[w].send_on(index, (0, it, 0, p.pid), ack(w, it, p))
            with lock:
                copies[(it, p.pid)] += 1
                aggregated = copies[(it, p.pid)] == n_workers   # every worker's copy is here
            if aggregated:
                t = time.monotonic_ns()
                for v, lane in lanes.items():
                    lane.send((1, it, p.priority, p.pid), pull(v, it, p, t),
                              connections.class_of(plan, p.pid))

    readers = [thread(reader, w, i, c) for w, ss in socks.items() for i, c in enumerate(ss)]
    for t in readers:
        t.join()           # workers close their side once they have every PULL
    short = sorted(k for k, n in copies.items() if n != n_workers)
    if len(copies) != expected or short:
        raise RuntimeError(f"server {rank}: {len(copies)} of {expected} partitions pushed, "
                           f"{len(short)} without every worker's copy (e.g. {short[:3]})")
    for lane in lanes.values():
        lane.close()       # every ack and PULL written
    for lane in lanes.values():
        for c in lane.conns:
            c.sender.close()          # and acknowledged
            c.sock.shutdown(socket.SHUT_WR)
    for ss in socks.values():
        for c in ss:
            c.close()


def _worker(plan: dict, rank: int) -> None:
    from workload.tensor_sender import TensorSender

    loop = WorkerLoop(plan, rank)
    n_workers = len(plan["workers"])
    owner = shard(loop.parts, len(plan["servers"]))
    model = connections.of_plan(plan)["model"]
    lanes = []
    for s, server in enumerate(plan["servers"]):
        pids = [pid for pid, o in owner.items() if o == s]
        socks = [connect(server["ip"], server["port"], rank, i)
                 for i in range(connections.count(plan, pids))]
        # pair: the pushing thread writes, one connection after another (as ever)
        lanes.append(connections.Lanes(model, socks, [TensorSender(x) for x in socks],
                                       classes=connections.lane_classes(plan, pids),
                                       inline=model == "pair"))
    wait_for_go(rank)              # training starts at the run's start instant
    received = [0] * len(lanes)

    def reader(s: int, sock: socket.socket) -> None:
        while (m := recv_message(sock)) is not None:
            connections.quickack(sock, plan)
            with loop.cv:
                received[s] += 1
                if m["kind"] == "ack":
                    loop.release(m["it"], loop.parts[m["pid"]])
                else:
                    loop.partition_done(m["it"], loop.parts[m["pid"]], release=False)

    def pusher() -> None:
        for n, (it, p, t_admit) in enumerate(loop.admissions()):
            s = owner[p.pid]
            lanes[s].send(n, lambda c, it=it, p=p, s=s, t_admit=t_admit: send_message(
                c.sender, "push", rank, n_workers + s, it, p, 0, p.nbytes, t_admit, conn=c,
                t_queued_ns=t_admit),
                connections.class_of(plan, p.pid))

    readers = [thread(reader, s, c.sock) for s, lane in enumerate(lanes) for c in lane.conns]
    push = thread(pusher)
    loop.run()
    push.join()
    for lane in lanes:
        lane.close()
        for c in lane.conns:
            c.sender.close()          # every PUSH acknowledged
            c.sock.shutdown(socket.SHUT_WR)
    for t in readers:
        t.join()                      # the servers close once they have written everything
    for s, lane in enumerate(lanes):
        want = 2 * plan["iterations"] * sum(1 for o in owner.values() if o == s)
        if received[s] != want:
            raise RuntimeError(f"worker {rank}: server {s} closed after {received[s]} of {want} "
                               "messages (acks and PULLs)")
        for c in lane.conns:
            c.sock.close()
