"""Connection models: how a node's tensors to one peer travel over TCP
(``talb run --connections``, docs/workload.md "Connections").

* ``pair`` (default): one connection per worker-server pair (ring
  all-reduce: per neighbour), as ps-lite and BytePS keep one. A tensor
  waits behind every earlier tensor of its pair in the socket buffer.
* ``class``: one connection per pair and priority class (the switch band
  a partition's layer is marked into, plan["connections"]["class_of"]),
  each written by its own thread: a long tensor never blocks a short one
  of another class.
* ``pool:N``: N connections per pair, opened before training starts; a
  tensor goes on an *idle* connection (every byte written on it
  acknowledged: SIOCOUTQ 0, and no write of ours pending), in admission
  (priority) order; with none idle it waits for the first to become idle.
  Each tensor is a flow of its own without a handshake: the paper's
  simulated tensors (sec. V-A).

Every connection carries a TensorSender (tagging and wire times per
tensor). :class:`Lanes` is one node's connections to one peer, in the
sending direction; replies (a server's PUSH acknowledgements) go on the
connection their request came in on (:meth:`Lanes.send_on`).
"""
from __future__ import annotations

import heapq
import itertools
import socket
import threading

from common.excerpt import shown
from workload.patterns.common import thread

MODELS = ("pair", "class", "pool")
POOL_MAX = 64
#: how often a tensor waiting for an idle pool connection looks again, s
#: (TensorSender polls its ring at the same period)
IDLE_POLL_S = 0.001


def parse(value) -> tuple[str, int | None]:
    """``pair`` -> ("pair", None), ``class`` -> ("class", None), ``pool:8``
    -> ("pool", 8); anything else: ValueError naming --connections and the
    value."""
    text = value if isinstance(value, str) else None
    if text in ("pair", "class"):
        return text, None
    if text is not None and text.startswith("pool:"):
        n = text[5:]
        if n.isdigit() and 1 <= int(n) <= POOL_MAX:
            return "pool", int(n)
        raise ValueError(f"--connections: pool:N needs N a whole number 1..{POOL_MAX} (connections "
                         f"per worker-server pair), got {shown(value)}")
    raise ValueError(f"--connections: one of pair, class, pool:N (N 1..{POOL_MAX}), got {shown(value)}")


def canonical(value) -> str:
    """The model as results and run keys name it (``pool:08`` -> ``pool:8``)."""
    mode, n = parse(value)
    return f"pool:{n}" if mode == "pool" else mode


def of_plan(plan: dict) -> dict:
    """The plan's connection model; plans without one (before the models
    existed) are ``pair``."""
    return plan.get("connections") or {"model": "pair"}


def lane_classes(plan: dict, pids) -> list[int] | None:
    """The classes the connections of a pair carry, one connection each,
    for partitions ``pids`` (those the pair exchanges): under ``class``
    the sorted classes in use; otherwise None."""
    conns = of_plan(plan)
    if conns["model"] != "class":
        return None
    return sorted({conns["class_of"][pid] for pid in pids})


def count(plan: dict, pids) -> int:
    """Connections per pair that exchanges partitions ``pids``."""
    conns = of_plan(plan)
    if conns["model"] == "pool":
        return conns["n"]
    if conns["model"] == "class":
        return len(lane_classes(plan, pids))
    return 1


def class_of(plan: dict, pid: int) -> int | None:
    conns = of_plan(plan)
    return conns["class_of"][pid] if conns["model"] == "class" else None


def quickack(sock: socket.socket, plan: dict) -> None:
    """Under ``pool``, acknowledge what was read at once: a receiver that
    also sends on the connection delays its ACKs (Linux: 40 ms and more),
    and a pool connection is idle only once its bytes are acknowledged.
    One setsockopt after each message read; other models keep the kernel's
    default."""
    if of_plan(plan)["model"] == "pool":
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass


class Conn:
    """One connection of a pair and the thread that writes on it: jobs run
    in key order (smallest first), one at a time."""

    def __init__(self, lanes: "Lanes", index: int, sock: socket.socket, sender):
        self.lanes, self.index, self.sock, self.sender = lanes, index, sock, sender
        self.ports = (sock.getsockname()[1], sock.getpeername()[1])
        self.jobs: list = []
        self.pending = 0          # jobs queued or being written
        self.thread = None
        self.cv = threading.Condition(lanes.lock)   # wakes this connection's writer only

    def idle(self) -> bool:
        """Nothing of ours pending and every byte written acknowledged.
        Call with the lanes' lock held."""
        return self.pending == 0 and self.sender.unacked_bytes() == 0

    def _write(self) -> None:
        while True:
            with self.cv:
                self.cv.wait_for(lambda: self.jobs or self.lanes.closing)
                if not self.jobs:
                    return
                _key, _seq, job = heapq.heappop(self.jobs)
            try:
                job(self)
            finally:
                with self.cv:
                    self.pending -= 1
                    self.lanes.cv.notify_all()      # the dispatcher, close()


class Lanes:
    """A node's connections to one peer, in its sending direction, and the
    model that puts each tensor on one of them.

    ``socks``/``senders``: the pair's connections in index order, each with
    its TensorSender. ``classes``: under ``class``, the class each
    connection carries. ``inline`` (``pair`` only): tensors are written by
    the caller's thread, as a worker's single sending thread does (today's
    behaviour); otherwise every connection has a writer thread. Jobs are
    ``job(conn)`` and write on ``conn`` (conn.sender for tensors); keys
    order them (smallest first)."""

    def __init__(self, model: str, socks, senders, *, classes: list[int] | None = None,
                 inline: bool = False):
        if model not in MODELS:
            raise ValueError(f"model: one of {', '.join(MODELS)}, got {shown(model)}")
        if model == "class" and (classes is None or len(classes) != len(socks)):
            raise ValueError("classes: one per connection under the class model")
        if inline and (model != "pair" or len(socks) != 1):
            raise ValueError("inline: the pair model's one connection only")
        self.model, self.inline = model, inline
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)   # the dispatcher and close() wait on it
        self.closing = False
        self.conns = [Conn(self, i, s, tx) for i, (s, tx) in enumerate(zip(socks, senders))]
        self.by_class = {c: self.conns[i] for i, c in enumerate(classes or [])}
        self._seq = itertools.count()
        self._waiting: list = []            # pool: tensors waiting for an idle connection
        self.threads: list[threading.Thread] = []
        if not inline:
            for c in self.conns:
                c.thread = thread(c._write)
                self.threads.append(c.thread)
        if model == "pool":
            self.threads.append(thread(self._dispatch))

    def send(self, key, job, cls: int | None = None) -> None:
        """A tensor: on the connection the model picks (``cls``: its class,
        under ``class``)."""
        if self.inline:
            job(self.conns[0])
            return
        with self.lock:
            if self.model == "pool":
                heapq.heappush(self._waiting, (key, next(self._seq), job))
                self.cv.notify_all()
            else:
                self._queue(self.by_class[cls] if self.model == "class" else self.conns[0],
                            key, job)

    def send_on(self, index: int, key, job) -> None:
        """A write on connection ``index`` (a reply on the connection its
        request came in on), ordered by ``key`` among that connection's."""
        if self.inline:
            job(self.conns[index])
            return
        with self.lock:
            self._queue(self.conns[index], key, job)

    def _queue(self, conn: Conn, key, job) -> None:
        """Call with the lock held."""
        conn.pending += 1
        heapq.heappush(conn.jobs, (key, next(self._seq), job))
        conn.cv.notify()

    def _dispatch(self) -> None:
        """pool: the first waiting tensor (key order) to the first idle
        connection; with none idle, look again every IDLE_POLL_S (an ACK
        wakes no one: SIOCOUTQ can only be read)."""
        with self.cv:
            while True:
                self.cv.wait_for(lambda: self._waiting or self.closing)
                if not self._waiting:
                    return
                conn = next((c for c in self.conns if c.idle()), None)
                if conn is None:
                    self.cv.wait(IDLE_POLL_S)
                    continue
                key, _seq, job = heapq.heappop(self._waiting)
                self._queue(conn, key, job)

    def close(self) -> None:
        """Once every job given is written: stop the threads."""
        if self.inline:
            return
        with self.cv:
            self.cv.wait_for(lambda: not self._waiting and all(c.pending == 0 for c in self.conns))
            self.closing = True
            self.cv.notify_all()
            for c in self.conns:
                c.cv.notify()
        for t in self.threads:
            t.join()
