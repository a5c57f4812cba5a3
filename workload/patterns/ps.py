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

Sufficient factor broadcasting (``plan["sfb"]``, --comm sfb|hybrid,
workload/hybrid.py): those partitions skip the servers. A worker sends an
SFB partition's factors to every other worker (one connection per ordered
pair, opened before training); the receiver acknowledges each on the
connection it came in on. The partition's credit comes back once every
peer acknowledged; it is synchronised at a worker once that worker's own
factors are acknowledged and every peer's have arrived.

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

from common.excerpt import shown
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


def bytes_per_iteration(parts: list[Partition], workers: int, servers: int,
                        sfb=()) -> dict:
    """Payload bytes one iteration moves (message headers not counted):
    every worker pushes and pulls every partition once; an SFB partition
    (``sfb``: pids) goes from every worker to each other one instead."""
    sfb = set(sfb)
    model = sum(p.nbytes for p in parts if p.pid not in sfb)
    factors = sum(p.nbytes for p in parts if p.pid in sfb)
    out = {"push_per_worker": model, "pull_per_worker": model,
           "total": 2 * workers * model + workers * (workers - 1) * factors}
    if sfb:
        out["sfb_per_worker"] = (workers - 1) * factors
    return out


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
        raise ValueError(f"role: ps has {', '.join(ROLES)}, got {shown(role)}")


def _server(plan: dict, rank: int) -> None:
    from workload.tensor_sender import TensorSender

    n_workers = len(plan["workers"])
    me = n_workers + rank
    sfb = set(plan.get("sfb", ()))
    parts = {p.pid: p for p in partitions_of(plan) if p.pid not in sfb}
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
    sfb = set(plan.get("sfb", ()))
    owner = shard([p for p in loop.parts if p.pid not in sfb], len(plan["servers"]))
    mesh = _SfbMesh(plan, rank, loop) if sfb else None
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
            if p.pid in sfb:
                mesh.send(it, p, t_admit)
                continue
            s = owner[p.pid]
            lanes[s].send(n, lambda c, it=it, p=p, s=s, t_admit=t_admit: send_message(
                c.sender, "push", rank, n_workers + s, it, p, 0, p.nbytes, t_admit, conn=c,
                t_queued_ns=t_admit),
                connections.class_of(plan, p.pid))

    readers = [thread(reader, s, c.sock) for s, lane in enumerate(lanes) for c in lane.conns]
    if mesh:
        readers += mesh.start_readers()
    push = thread(pusher)
    loop.run()
    push.join()
    if mesh:
        mesh.close()
    for lane in lanes:
        lane.close()
        for c in lane.conns:
            c.sender.close()          # every PUSH acknowledged
            c.sock.shutdown(socket.SHUT_WR)
    for t in readers:
        t.join()                      # the servers close once they have written everything
    if mesh:
        mesh.check()
        for s in (*mesh.out.values(), *mesh.inc.values()):
            s.close()
    for s, lane in enumerate(lanes):
        want = 2 * plan["iterations"] * sum(1 for o in owner.values() if o == s)
        if received[s] != want:
            raise RuntimeError(f"worker {rank}: server {s} closed after {received[s]} of {want} "
                               "messages (acks and PULLs)")
        for c in lane.conns:
            c.sock.close()


class _SfbMesh:
    """One worker's connections to every other worker for SFB partitions:
    ``out[v]`` carries this worker's factors to v (and v's acks back),
    ``inc[v]`` v's factors to this worker (and this worker's acks)."""

    def __init__(self, plan: dict, rank: int, loop: WorkerLoop):
        from workload.tensor_sender import TensorSender

        self.rank, self.loop = rank, loop
        workers = plan["workers"]
        self.peers = [v for v in range(len(workers)) if v != rank]
        self.acks: dict[tuple[int, int], int] = defaultdict(int)
        self.got: dict[tuple[int, int], int] = defaultdict(int)
        self.received = 0
        self.expected = plan["iterations"] * len(plan.get("sfb", ())) * len(self.peers)
        with socket.create_server(("0.0.0.0", workers[rank]["port"]),
                                  backlog=len(self.peers)) as srv:
            self.out = {v: connect(workers[v]["ip"], workers[v]["port"], rank)
                        for v in self.peers}
            self.inc = {}
            for _ in self.peers:
                conn, peer, _index = accept_indexed(srv)
                self.inc[peer] = conn
        if sorted(self.inc) != self.peers:
            raise RuntimeError(f"worker {rank}: expected SFB connections from workers "
                               f"{self.peers}, got {sorted(self.inc)}")
        self.senders = {v: TensorSender(s) for v, s in self.out.items()}

    def send(self, it: int, p: Partition, t_admit: int) -> None:
        for v in self.peers:
            send_message(self.senders[v], "sfb", self.rank, v, it, p, 0, p.nbytes, t_admit,
                         t_queued_ns=t_admit)

    def _maybe_done(self, it: int, p: Partition) -> None:
        """Under loop.cv: synchronised once our factors are acknowledged and every peer's are in."""
        key = (it, p.pid)
        if self.acks[key] == len(self.peers) and self.got[key] == len(self.peers):
            self.loop.partition_done(it, p, release=False)

    def _acks(self, v: int, sock: socket.socket) -> None:
        while (m := recv_message(sock)) is not None:
            if m["kind"] != "ack":
                raise RuntimeError(f"worker {self.rank}: unexpected {m['kind']} from worker {v}")
            p = self.loop.parts[m["pid"]]
            with self.loop.cv:
                key = (m["it"], p.pid)
                self.acks[key] += 1
                if self.acks[key] == len(self.peers):
                    self.loop.release(m["it"], p)      # the credit comes back
                self._maybe_done(m["it"], p)

    def _factors(self, v: int, sock: socket.socket) -> None:
        while (m := recv_message(sock)) is not None:
            if m["kind"] != "sfb":
                raise RuntimeError(f"worker {self.rank}: unexpected {m['kind']} from worker {v}")
            p = self.loop.parts[m["pid"]]
            send_ack(sock, self.rank, v, m["it"], p)   # this thread is the socket's only writer
            with self.loop.cv:
                self.got[(m["it"], p.pid)] += 1
                self.received += 1
                self._maybe_done(m["it"], p)
        sock.shutdown(socket.SHUT_WR)                  # the peer's ack reader ends

    def start_readers(self) -> list[threading.Thread]:
        return [thread(self._acks, v, s) for v, s in self.out.items()] + \
               [thread(self._factors, v, s) for v, s in self.inc.items()]

    def close(self) -> None:
        """Every factor written and acknowledged; then our side of each pair closes."""
        for v, sender in self.senders.items():
            sender.close()
            self.out[v].shutdown(socket.SHUT_WR)

    def check(self) -> None:
        if self.received != self.expected:
            raise RuntimeError(f"worker {self.rank}: {self.received} of {self.expected} SFB "
                               "factor messages arrived")
