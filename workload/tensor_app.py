"""A minimal tensor-exchange application: workers send tensors, a receiver
verifies every byte. Run inside host namespaces by `talb send` and the tests:

    python -m workload.tensor_app receive --port 7000 --connections 4
    python -m workload.tensor_app send --dst 198.18.1.2 --port 7000 --worker 0 \\
        --tensors 12 --layers 3 --size 200000

``--worker`` labels a sender's tensors for the receiver; the tensor ids come
from a worker slot of the sending host (workload/id_slots.py).

Each tensor travels as one application message, like a training framework's
(header + payload), sent with one `TensorSender.send` call so the whole
message is one TaLB tensor. The header lets the receiver check the payload
(SHA-256) and tell tensors apart; TaLB itself never looks at it.

Both sides print one JSON object per tensor on stdout (times from
CLOCK_MONOTONIC, which all namespaces share), then {"done": ...}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import socket
import struct
import sys
import threading
import time

from workload.patterns.common import recv_exact

HEADER = struct.Struct("!4sHIB3xQ32s")  # magic, worker, seq, layer, length, sha256
MAGIC = b"TLB1"


def layer_order(tensors: int, layers: int) -> list[int]:
    """Layers for a worker's tensors: back to front, as a backward pass
    produces gradients, repeated (iteration after iteration)."""
    return [layers - 1 - (i % layers) for i in range(tensors)]


def payload(worker: int, seq: int, size: int) -> bytes:
    return random.Random(worker * 1_000_003 + seq).randbytes(size)


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _serve(conn: socket.socket, lock: threading.Lock, src: str = "") -> None:
    head = bytearray(HEADER.size)
    with conn:
        while recv_exact(conn, head):
            t_first = time.monotonic_ns()
            magic, worker, seq, layer, length, digest = HEADER.unpack(head)
            if magic != MAGIC:
                with lock:
                    _emit({"error": f"bad magic {magic!r}: stream out of step"})
                return
            body = bytearray(length)
            complete = recv_exact(conn, body)
            t_done = time.monotonic_ns()
            ok = complete and hashlib.sha256(body).digest() == digest
            with lock:
                _emit({"worker": worker, "seq": seq, "layer": layer, "bytes": length,
                       "ok": ok, "t_first_ns": t_first, "t_done_ns": t_done, "src": src})


def receive(port: int, connections: int) -> int:
    lock = threading.Lock()
    with socket.create_server(("0.0.0.0", port), backlog=connections) as srv:
        _emit({"ready": port})
        threads = []
        for _ in range(connections):
            conn, addr = srv.accept()
            t = threading.Thread(target=_serve, args=(conn, lock, addr[0]), daemon=True)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
    _emit({"done": "receive"})
    return 0


class FixedIds:
    """Tensor ids start, start+1, ...: to force two hosts' tensors to share
    ids (tests), where TensorSender would draw unique ones."""

    def __init__(self, start: int):
        self._next = start

    def next_id(self) -> int:
        tid, self._next = self._next, (self._next + 1) & 0xFFFFFFFF
        return tid


def send(dst: str, port: int, worker: int, tensors: int, layers: int, size: int,
         fixed_ids: int | None = None) -> int:
    from workload.tensor_sender import TensorSender

    with socket.create_connection((dst, port), timeout=30) as sock:
        sock.settimeout(None)
        # ids from a worker slot of this host (unique across its processes),
        # unless forced; `worker` only labels the tensors for the receiver.
        sender = TensorSender(sock, ids=None if fixed_ids is None else FixedIds(fixed_ids))
        try:
            for seq, layer in enumerate(layer_order(tensors, layers)):
                body = payload(worker, seq, size)
                head = HEADER.pack(MAGIC, worker, seq, layer, size, hashlib.sha256(body).digest())
                t_start = time.monotonic_ns()
                rec = sender.send(head + body, layer=layer)
                _emit({"worker": worker, "seq": seq, "layer": layer, "tensor_id": rec.tensor_id,
                       "bytes": len(head) + size, "len_pkts": rec.len_pkts, "t_start_ns": t_start})
        finally:
            sender.close()
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # wait for the receiver to close: every byte is in
    _emit({"done": "send"})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    r = sub.add_parser("receive")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--connections", type=int, required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--worker", type=int, required=True)
    s.add_argument("--tensors", type=int, required=True)
    s.add_argument("--layers", type=int, required=True)
    s.add_argument("--size", type=int, required=True)
    s.add_argument("--fixed-ids", type=int, metavar="START",
                   help="tensor ids START, START+1, ... (forces collisions; default: unique ids "
                        "from a worker slot of this host)")
    args = ap.parse_args(argv)
    if args.role == "receive":
        return receive(args.port, args.connections)
    return send(args.dst, args.port, args.worker, args.tensors, args.layers, args.size,
                args.fixed_ids)


if __name__ == "__main__":
    sys.exit(main())
