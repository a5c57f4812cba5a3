"""What every communication pattern shares: the wire format of a message,
verifiable payloads, the JSON-lines records a node prints, and the worker's
training loop (compute emulation, back-propagation overlap, forward wait).

A node (one process in one host namespace) prints one JSON object per line
on stdout; workload/experiment.py joins them. Times are
``time.monotonic_ns()``: CLOCK_MONOTONIC is one clock for every namespace of
the machine, so a sender's and a receiver's stamps compare directly.

Records:
  {"ev": "ready", "node": n}                          listening
  {"ev": "set", "node": n, "t_ns"}                    connected to every peer; waits for "go"
  {"ev": "go", "node": n, "t0_ns", "t_recv_ns", "t_ns"}
                                                      the run's start instant t0 came (on stdin
                                                      at t_recv_ns); the node goes on at t_ns
  {"ev": "tx", "k": key, "kind", "src", "dst", "it", "pid", "step", "layer",
   "bytes", "tensor_id", "t_ns", "t_admit_ns", "t_queued_ns", "t_kernel_ns", "conn", "ports"}
                                                      a message handed to the socket: t_ns
                                                      just before TensorSender.send, t_admit_ns
                                                      when the scheduler let it start,
                                                      t_queued_ns when it could go (admitted,
                                                      aggregated, the ring step before it in)
                                                      and waited for its connection from,
                                                      t_kernel_ns its first byte to the kernel;
                                                      conn: the connection's index in its pair
                                                      (connection models), ports: its [local,
                                                      remote] TCP ports
  {"ev": "rx", "k": key, "ok", "t_ns"}                the receiver's application has its last byte
  {"ev": "iter", "node", "it", "t_ns"}                a worker starts iteration it's forward pass
                                                      (layer 0's parameters of it-1 are back)
  {"ev": "layer", "node", "it", "layer", "t_ready_ns", "t_done_ns"}
                                                      gradients ready -> parameters back
  {"ev": "end", "node", "t_ns"}                       a worker has every parameter of the last iteration
  {"ev": "cost", "node", "cpu_s", "threads"}          the node is done: its CPU seconds (user +
                                                      system) and the most threads it ran at once
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import traceback
from collections import defaultdict
from functools import lru_cache

from workload.scheduler import ByteScheduler, Partition

# magic, kind, layer, src node, dst node, step, iteration, partition, length, sha256
HEADER = struct.Struct("!4sBBHHHIIQ32s")
MAGIC = b"TLBw"
KINDS = {1: "push", 2: "pull", 3: "reduce", 4: "gather", 5: "ack",
         6: "sfb"}      # a worker's sufficient factors to another worker (patterns/ps.py)
KIND_IDS = {v: k for k, v in KINDS.items()}
# a connection's first bytes: magic, the connecting node, the connection's index
# among its pair's (workload/patterns/connections.py; 0 with one connection a pair)
HELLO = struct.Struct("!4sHH")
CONNECT_TIMEOUT_S = 30.0

_out_lock = threading.Lock()


def emit(obj: dict) -> None:
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def fail(exc: BaseException) -> None:
    """A node's thread failed: say why on stderr and end the whole process
    at once (the experiment sees the exit status and tears the run down)."""
    sys.stderr.write(f"node failed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    sys.stderr.flush()
    os._exit(3)


_peak_threads = 1


def thread(target, *args) -> threading.Thread:
    global _peak_threads

    def body():
        try:
            target(*args)
        except BaseException as exc:  # noqa: BLE001 - every failure ends the node
            fail(exc)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    _peak_threads = max(_peak_threads, threading.active_count())
    return t


def peak_threads() -> int:
    """The most threads this process ran at once (counted as :func:`thread` starts them)."""
    return max(_peak_threads, threading.active_count())


def msg_key(kind: str, src: int, dst: int, it: int, pid: int, step: int) -> str:
    return f"{kind}/{src}/{dst}/{it}/{pid}/{step}"


@lru_cache(maxsize=64)
def _block(nbytes: int) -> bytes:
    return os.urandom(nbytes)


def payload(key: str, nbytes: int) -> bytearray:
    """Random bytes whose head names the message, so a payload delivered to
    the wrong place or garbled fails its check."""
    body = bytearray(_block(nbytes))
    head = hashlib.sha256(key.encode()).digest()[:min(32, nbytes)]
    body[:len(head)] = head
    return body


def recv_exact(conn: socket.socket, buf: bytearray) -> bool:
    """Fill all of ``buf`` from ``conn``; False at EOF before it is full.
    Into the caller's buffer, so a receive loop can reuse one (the tensor
    receivers here and in workload/tensor_app.py)."""
    view = memoryview(buf)
    n, got = len(view), 0
    while got < n:
        k = conn.recv_into(view[got:], n - got)
        if k == 0:
            return False
        got += k
    return True


def send_message(sender, kind: str, src: int, dst: int, it: int, p: Partition, step: int,
                 nbytes: int, t_admit_ns: int | None = None, conn=None,
                 t_queued_ns: int | None = None) -> None:
    """One tensor: header + payload in one TensorSender.send (one TaLB tensor).
    ``t_admit_ns``: when the scheduler let the partition start (a worker's
    first send of it), for the record; ``conn``: the connections.Conn it
    goes on (its index and ports are recorded), None: the pair's one;
    ``t_queued_ns``: when it was ready to go and began waiting for its
    connection (the connection model's wait ends at the hand-off)."""
    key = msg_key(kind, src, dst, it, p.pid, step)
    body = payload(key, nbytes)
    head = HEADER.pack(MAGIC, KIND_IDS[kind], p.layer, src, dst, step, it, p.pid, nbytes,
                       hashlib.sha256(body).digest())
    t = time.monotonic_ns()
    rec = sender.send(head + body, layer=p.layer)
    emit({"ev": "tx", "k": key, "kind": kind, "src": src, "dst": dst, "it": it, "pid": p.pid,
          "step": step, "layer": p.layer, "bytes": HEADER.size + nbytes,
          "tensor_id": rec.tensor_id, "t_ns": t, "t_admit_ns": t_admit_ns,
          "t_queued_ns": t_queued_ns, "t_kernel_ns": rec.t_kernel_ns, "conn": conn.index if conn is not None else 0,
          "ports": list(conn.ports) if conn is not None else None})


def send_ack(sock: socket.socket, src: int, dst: int, it: int, p: Partition) -> None:
    """A server's receipt of a PUSH (ps-lite answers every push the same
    way): a bare header, no payload, untagged, not a tensor. Written with
    MSG_EOR so that it shares no segment with the next tensor (see
    workload/tensor_sender.py); only from the thread that owns the socket's
    TensorSender."""
    data = memoryview(HEADER.pack(MAGIC, KIND_IDS["ack"], p.layer, src, dst, 0, it, p.pid, 0,
                                  bytes(32)))
    sent = 0
    while sent < len(data):
        sent += sock.send(data[sent:], socket.MSG_EOR)


def recv_message(conn: socket.socket) -> dict | None:
    """The next message on ``conn`` (None at EOF), with its check done and
    the time its last byte reached the application."""
    head = bytearray(HEADER.size)
    if not recv_exact(conn, head):
        return None
    magic, kind, layer, src, dst, step, it, pid, length, digest = HEADER.unpack(head)
    if magic != MAGIC:
        raise RuntimeError(f"bad magic {bytes(magic)!r}: the stream is out of step")
    if KINDS.get(kind) == "ack":
        return {"kind": "ack", "layer": layer, "src": src, "dst": dst, "step": step, "it": it,
                "pid": pid, "ok": True}
    body = bytearray(length)
    complete = recv_exact(conn, body)
    t = time.monotonic_ns()
    if not complete:
        raise RuntimeError(f"connection closed inside a {KINDS.get(kind)} message "
                           f"(iteration {it}, partition {pid})")
    key = msg_key(KINDS[kind], src, dst, it, pid, step)
    ok = hashlib.sha256(body).digest() == digest and \
        body[:32] == hashlib.sha256(key.encode()).digest()[:min(32, length)]
    emit({"ev": "rx", "k": key, "ok": ok, "t_ns": t})
    return {"kind": KINDS[kind], "layer": layer, "src": src, "dst": dst, "step": step,
            "it": it, "pid": pid, "ok": ok}


def connect(ip: str, port: int, me: int, index: int = 0) -> socket.socket:
    """Connect (retrying until the peer listens) and say who we are and
    which of our connections to the peer this is (``index``)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            sock = socket.create_connection((ip, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    sock.settimeout(None)
    sock.sendall(HELLO.pack(MAGIC, me, index))
    return sock


def accept(srv: socket.socket) -> tuple[socket.socket, int]:
    conn, peer, _index = accept_indexed(srv)
    return conn, peer


def accept_indexed(srv: socket.socket) -> tuple[socket.socket, int, int]:
    """The next connection, the node that opened it and its index among that node's."""
    conn, _ = srv.accept()
    hello = bytearray(HELLO.size)
    if not recv_exact(conn, hello) or HELLO.unpack(hello)[0] != MAGIC:
        raise RuntimeError("a peer connected without saying who it is")
    _magic, peer, index = HELLO.unpack(hello)
    return conn, peer, index


def wait_for_go(node: int, stream=None) -> int:
    """The run's start barrier (workload/experiment.py): say this node is
    connected to all its peers, block on stdin for the run's start instant
    (a line ``go T_NS``, CLOCK_MONOTONIC: one clock for every namespace),
    sleep until then, and return it. Every worker of a run starts training
    at that one instant, and the background load's flows are planned from
    it, so every scheme at a seed sees the same flows at the same times
    relative to the start of training. A blocking read and one sleep: no
    polling."""
    emit({"ev": "set", "node": node, "t_ns": time.monotonic_ns()})
    line = (stream or sys.stdin).readline()
    t_recv = time.monotonic_ns()
    word, _, value = line.strip().partition(" ")
    if word != "go" or not value.isdigit():
        raise RuntimeError(f"node {node}: expected 'go T_NS' on stdin, got "
                           f"{line!r}{' (EOF: the run ended first)' if not line else ''}")
    t0 = int(value)
    time.sleep(max(0, t0 - time.monotonic_ns()) / 1e9)
    emit({"ev": "go", "node": node, "t0_ns": t0, "t_recv_ns": t_recv, "t_ns": time.monotonic_ns()})
    return t0


def partitions_of(plan: dict) -> list[Partition]:
    return [Partition(*p) for p in plan["partitions"]]


class WorkerLoop:
    """One worker's training iterations, with communication left to a pattern.

    Forward pass of iteration ``it``: layer k's step starts only once layer
    k's parameters of iteration ``it - 1`` are back (forward wait). Backward
    pass: last layer first; a layer's partitions go to the scheduler the
    moment its backward step ends (back-propagation overlap). Compute is
    emulated by sleeping the profile's (scaled) time. The pattern calls
    :meth:`partition_done` when a partition's synchronisation is over and
    starts what :meth:`admissions` yields."""

    def __init__(self, plan: dict, node: int):
        self.plan, self.node = plan, node
        self.parts = partitions_of(plan)
        self.layers = plan["layers"]
        self.by_layer: dict[int, list[Partition]] = defaultdict(list)
        for p in self.parts:
            self.by_layer[p.layer].append(p)
        # the layers whose gradients each partition carries: its own, or with tensor
        # fusion (plan "carries", workload/schedules.py fuse) every layer of its buffer
        self.carries = plan.get("carries") or [[p.layer] for p in self.parts]
        self.need = defaultdict(int)
        for layers in self.carries:
            for k in layers:
                self.need[k] += 1
        self.iterations = plan["iterations"]
        self.sched = ByteScheduler(plan["credit_bytes"])
        self.cv = threading.Condition()
        self.params_of = [0] * len(self.layers)  # layer k holds the parameters after iteration params_of[k]-1
        self._left: dict[tuple[int, int], int] = {}
        self._ready_ns: dict[tuple[int, int], int] = {}
        self.on_ready = None          # pattern hook, called under cv: (it, parts)
        self.finished = False

    def run(self) -> None:
        for it in range(self.iterations):
            for k, layer in enumerate(self.layers):
                with self.cv:
                    self.cv.wait_for(lambda: self.params_of[k] >= it)
                if k == 0:   # the iteration starts when its first forward step can
                    emit({"ev": "iter", "node": self.node, "it": it, "t_ns": time.monotonic_ns()})
                time.sleep(layer["fwd_s"])
            for k in reversed(range(len(self.layers))):
                time.sleep(self.layers[k]["bwd_s"])
                with self.cv:
                    parts = self.by_layer[k]
                    self._left[(it, k)] = self.need[k]
                    self._ready_ns[(it, k)] = time.monotonic_ns()
                    self.sched.enqueue(parts, it)
                    if self.on_ready:
                        self.on_ready(it, parts)
                    self.cv.notify_all()
        with self.cv:
            self.cv.wait_for(lambda: min(self.params_of) >= self.iterations)
            self.finished = True
            self.cv.notify_all()
        emit({"ev": "end", "node": self.node, "t_ns": time.monotonic_ns()})

    def release(self, it: int, p: Partition) -> None:
        """``p``'s credit comes back. Call with ``cv`` held."""
        self.sched.finish(it, p)
        self.cv.notify_all()

    def partition_done(self, it: int, p: Partition, *, release: bool = True) -> None:
        """``p`` is synchronised: its parameters are back (and, with
        ``release``, its credit too). Call with ``cv`` held."""
        if release:
            self.sched.finish(it, p)
        for layer in self.carries[p.pid]:
            key = (it, layer)
            self._left[key] -= 1
            if self._left[key] == 0:
                self.params_of[layer] = it + 1
                emit({"ev": "layer", "node": self.node, "it": it, "layer": layer,
                      "t_ready_ns": self._ready_ns[key], "t_done_ns": time.monotonic_ns()})
        self.cv.notify_all()

    def admissions(self):
        """Yield (iteration, partition, admission time in ns) as the
        scheduler admits them; ends when the last iteration is synchronised.
        The time is taken under the lock, so it orders exactly against the
        layers' ready times (``layer`` records' t_ready_ns)."""
        while True:
            with self.cv:
                nxt = None
                while not self.finished and (nxt := self.sched.next()) is None:
                    self.cv.wait()
                if nxt is None:
                    return
                t = time.monotonic_ns()
            yield (*nxt, t)
