"""A host that sends TaLB options it should not (the forged-options fault).

    ip netns exec talb-h2 python -m workload.forge --dst 198.18.1.2 --rate 500 \\
        --spoof 198.18.0.2,198.18.1.3

Sends UDP datagrams (port 9, discard) to ``--dst`` through a raw socket
(IP_HDRINCL), each with a TaLB option its host's program never wrote,
cycling through these forgeries (templates built with scapy and
workload's IPOption_TaLB, then a fresh random tensor id patched in per packet):

  new-unfinished   valid option, pkt_idx 0, tensor_len 65535: a table entry
                   that never completes (held until it idles out)
  spoofed          the same, from a run host's address (--spoof): keys in
                   that host's id space
  last             pkt_idx 0 with LAST set
  midstream        pkt_idx 7 of an unknown tensor
  bad-version      version 0, 2 or 3
  zero-len         tensor_len 0
  idx-past-len     pkt_idx >= tensor_len
  bad-length       option length byte 8 / 40 (the IHL still says 12 bytes)
  truncated        IHL of 24 bytes: the option cut after 4 bytes
  not-first        a NOP before the option

``--only new-unfinished`` sends live-looking new tensors only: every one
takes a tensor-table entry on the sender's leaf until it idles out
(the table-full fault fills the tables this way).

Runs until SIGTERM/SIGINT (or ``--duration``), then prints one JSON line:
``{"packets": N, "by_kind": {...}, "errors": N}``.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import struct
import sys
import time

DPORT = 9


def templates(dst: str, spoof: list[str]) -> list[tuple[str, bytes, int | None]]:
    """(kind, IP packet bytes, offset of the tensor id to randomise or None)."""
    from scapy.layers.inet import IP, UDP

    from common.wire import OPT_TYPE, IPOption_TaLB

    body = bytes(64)

    def opt(**kw):
        return bytes(IP(dst=dst, src="0.0.0.0", options=[IPOption_TaLB(**kw)]) / UDP(
            sport=4242, dport=DPORT, chksum=0) / body)

    out = [("new-unfinished", opt(tensor_len=65535, pkt_idx=0, layer=0), 22),
           ("last", opt(tensor_len=100, pkt_idx=0, last=1, layer=1), 22),
           ("midstream", opt(tensor_len=100, pkt_idx=7, layer=2), 22),
           ("zero-len", opt(tensor_len=0, pkt_idx=0), 22),
           ("idx-past-len", opt(tensor_len=3, pkt_idx=9, layer=255), 22)]
    for v in (0, 2, 3):
        out.append(("bad-version", opt(tensor_len=10, version=v), 22))
    for src in spoof:
        pkt = bytearray(opt(tensor_len=65535, pkt_idx=0, layer=0))
        pkt[12:16] = socket.inet_aton(src)
        out.append(("spoofed", bytes(pkt), 22))
    good = opt(tensor_len=100)
    for length in (8, 40):
        pkt = bytearray(good)
        pkt[21] = length
        out.append(("bad-length", bytes(pkt), 22))
    # truncated: IHL 6 (24 bytes), the option's first 4 bytes only
    head = bytearray(good[:20])
    head[0] = 0x46
    out.append(("truncated", bytes(head) + good[20:24] + good[32:], None))
    # not first: NOP, the option, 3 bytes of end-of-options padding (IHL 9)
    head = bytearray(good[:20])
    head[0] = 0x49
    out.append(("not-first", bytes(head) + b"\x01" + good[20:32] + b"\x00" * 3 + good[32:], 23))
    assert all(p[20 if k != "not-first" else 21] == OPT_TYPE for k, p, _ in out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dst", required=True)
    ap.add_argument("--rate", type=int, default=500, help="packets per second")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spoof", default="", help="source addresses to forge, comma-separated")
    ap.add_argument("--duration", type=float, help="seconds [until SIGTERM]")
    ap.add_argument("--wait-stdin", action="store_true",
                    help="get ready (imports, templates, socket), print {\"ready\": true}, "
                         "then start at the first line on stdin")
    ap.add_argument("--only", help="send only these kinds, comma-separated (new-unfinished: "
                                   "fill the tensor tables) [all]")
    args = ap.parse_args(argv)
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.append(1))
    rng = random.Random(args.seed)
    pool = templates(args.dst, [x for x in args.spoof.split(",") if x])
    if args.only:
        pool = [p for p in pool if p[0] in args.only.split(",")]
        if not pool:
            ap.error(f"--only: no such kind in {args.only!r}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    counts: dict[str, int] = {}
    errors = sent = 0
    if args.wait_stdin:
        print(json.dumps({"ready": True}), flush=True)
        if not sys.stdin.readline():
            return 0          # stdin closed: never started
    t0 = time.monotonic()
    end = t0 + args.duration if args.duration else None
    while not stop and (end is None or time.monotonic() < end):
        kind, pkt, at = pool[sent % len(pool)]
        if at is not None:
            pkt = pkt[:at] + struct.pack("!I", rng.getrandbits(32)) + pkt[at + 4:]
        try:
            sock.sendto(pkt, (args.dst, 0))
            counts[kind] = counts.get(kind, 0) + 1
        except OSError:
            errors += 1
        sent += 1
        ahead = t0 + sent / args.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    sock.close()
    print(json.dumps({"packets": sum(counts.values()), "by_kind": counts, "errors": errors,
                      "seconds": time.monotonic() - t0}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
