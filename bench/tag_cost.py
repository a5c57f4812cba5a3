"""Tagging cost per message: a plain socket untagged, the same socket tagged
by the transparent tagger (workload/transparent_tag.py), and TensorSender's
send (workload/tensor_sender.py), in one run, the arms in turn round after
round; also the plain socket while the tagger tags another port
(docs/workload.md, "Tagging unmodified applications").

    sudo flock /tmp/talb-live.lock .venv/bin/python -m bench.tag_cost \\
        [--sizes 64,65536,1048576] [--count 300] [--rounds 5] [--prefix benchtag]

A testbed of its own: two hosts h0, h1 on one switch, 10 Gbit/s links (the
links are not what is measured), the host programs attached as by `talb
testbed up`; removed at exit. h1 runs a receiver (a process of its own)
that reads each message whole and answers one byte; h0, this process,
writes messages of each size one at a time on a fresh TCP connection per
arm and round (TCP_NODELAY):

* ``plain``: ``sock.sendall(message)``, no tagger loaded;
* ``tagged``: the same call, the transparent tagger loaded and selecting
  the connection's port (one tensor per write);
* ``other``: the same call, the tagger loaded but selecting another port
  (what tagging costs a process it does not tag);
* ``sender``: ``TensorSender(sock).send(message, layer=0)``.

Per message two times, CLOCK_MONOTONIC: the **call** (the write, or
``send``, from entry to return: the tagger's tracepoints, TensorSender's
ring and id work, the kernel's copy and the segments sent within the call,
tagged on their way out) and the **round trip** (from the call's entry to
the receiver's one-byte answer: every segment of the message, each through
the host's TC program, plus the network and the answer). The socket is
idle (everything acknowledged) before every message, so each call starts
alike, and h0's send buffer holds the largest message (tcp_wmem). On veth
links a segment sent within the call is delivered and acknowledged within
it too (the receiving side runs in the sender's softirq): from 64 KiB up
the call returns with every byte acknowledged (``unacked_at_return``), so
there the call is the message's whole cost on this machine, both hosts
and the switch included. Per round the median of ``--count`` messages
(after ``--warmup``); reported: the median over rounds (and the rounds'
range), and the ratios to ``plain``. Each arm's packets are checked
against the host program's counters (tagged by the tagger's descriptors,
by TensorSender's, or not at all). A benchmark, not a pass/fail test.
"""
from __future__ import annotations

import argparse
import array
import fcntl
import json
import socket
import statistics
import subprocess
import sys
import termios
import time
from contextlib import contextmanager

from common import paths
from common.excerpt import shown
from netns_topology.spec import topology_from_dict
from testbed import lifecycle
from workload.netexec import ns_popen, ns_run, stop

ARMS = ("plain", "tagged", "other", "sender")
DEFAULT_SIZES = (64, 65536, 1 << 20)
SRC, DST = "h0", "h1"
#: the receiver's ports: one per arm (the tagger selects its arm's by port)
PORT0 = 5400

#: h1's receiver: one thread per connection, each reads the plan's messages
#: whole and answers one byte after each; prints "ready" once listening
RECEIVER = r"""
import json, socket, sys, threading
ip, ports, plan = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
def serve(conn):
    with conn:
        buf = bytearray(max(plan) if plan else 1)
        view = memoryview(buf)
        while True:
            for size in plan:
                left = size
                while left:
                    n = conn.recv_into(view[:min(left, len(buf))])
                    if not n:
                        return
                    left -= n
                conn.sendall(b"k")
def listen(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(16)
    return s
socks = [listen(p) for p in ports]
def accept(s):
    while True:
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for s in socks:
    threading.Thread(target=accept, args=(s,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def bench_topology(rate: str = "10gbit"):
    return topology_from_dict({"switches": ["s0"], "hosts": [SRC, DST],
                               "links": [{"between": [SRC, "s0"]}, {"between": [DST, "s0"]}],
                               "link_rate": rate, "host_link_rate": rate, "scheme": "ecmp"})


def _socket_in(netns: str) -> socket.socket:
    from pyroute2 import netns as pns

    pns.pushns(netns)
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    finally:
        pns.popns()


def _host_counters(prefix: str) -> dict[str, int]:
    from datapath.host_maps import HostMaps

    with HostMaps(paths.pin_dir(prefix, SRC)) as maps:
        return maps.read_counters()


@contextmanager
def _receiver(prefix: str, ip: str, plan: list[int]):
    ports = [PORT0 + i for i in range(len(ARMS))]
    proc = ns_popen(paths.netns_name(prefix, DST),
                    [sys.executable, "-c", RECEIVER, ip, json.dumps(ports), json.dumps(plan)],
                    stdin=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"receiver on {DST} did not start: {line}{proc.stderr.read()}")
        yield dict(zip(ARMS, ports))
    finally:
        stop(proc)


def _one_arm(prefix: str, arm: str, dst_ip: str, port: int, sizes, count: int,
             warmup: int) -> dict:
    """One connection, every size: {size: (call µs, round-trip µs, bytes
    unacknowledged when the call returned: lists)},
    with the tagger's counters and the host program's counter deltas."""
    from workload.tensor_sender import TensorSender
    from workload.transparent_tag import TransparentTagger

    selected = {"tagged": port, "other": PORT0 - 1}.get(arm)
    tagger = TransparentTagger(prefix, [SRC], ports=(selected, selected)) if selected else None
    sock = _socket_in(paths.netns_name(prefix, SRC))
    before = _host_counters(prefix)
    times: dict[int, tuple[list[float], list[float], list[int]]] = {}
    outq = array.array("i", [0])
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect((dst_ip, port))
        tx = TensorSender(sock) if arm == "sender" else None
        try:
            for size in sizes:
                msg = b"\x5a" * size
                calls, rts, left = [], [], []
                for i in range(warmup + count):
                    t0 = time.perf_counter_ns()
                    if tx is not None:
                        tx.send(msg, layer=0)
                    else:
                        sock.sendall(msg)
                    t1 = time.perf_counter_ns()
                    fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, outq)
                    if sock.recv(1) != b"k":
                        raise RuntimeError(f"receiver on {DST} closed the connection")
                    t2 = time.perf_counter_ns()
                    if i >= warmup:
                        calls.append((t1 - t0) / 1e3)
                        rts.append((t2 - t0) / 1e3)
                        left.append(outq[0])
                times[size] = (calls, rts, left)
        finally:
            if tx is not None:
                tx.close()
        counters = tagger.counters() if tagger else None
    finally:
        sock.close()
        if tagger:
            tagger.close()
    after = _host_counters(prefix)
    delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    return {"times": times, "tagger": counters, "host_program": delta}


def _check(arm: str, r: dict, messages: int) -> None:
    """The arm did what it says: its packets tagged by the right path, or not at all."""
    hp = r["host_program"]
    want = {"plain": (0, 0), "tagged": (0, 1), "other": (0, 0), "sender": (1, 0)}[arm]
    got = (hp.get("tagged", 0) > 0, hp.get("tagged_sendmsg", 0) > 0)
    if got != want:
        raise RuntimeError(f"arm {arm}: host program counters {hp} (tagged, tagged_sendmsg "
                           f"> 0: {got}, expected {want})")
    if arm == "tagged" and r["tagger"]["started"] < messages:
        raise RuntimeError(f"arm tagged: {r['tagger']['started']} tensors started for "
                           f"{messages} writes: {r['tagger']}")
    if arm == "other" and (r["tagger"]["started"] or r["tagger"]["not_selected"] < messages):
        raise RuntimeError(f"arm other: the tagger should have seen and passed over "
                           f"{messages} writes: {r['tagger']}")


def measure(prefix: str, sizes, count: int, rounds: int, warmup: int, say=print) -> dict:
    from netns_topology.state import load_topology_of

    topo = load_topology_of(prefix)
    dst_ip = next(h.ip for h in topo.hosts if h.name == DST)
    # the largest message fits h0's send buffer: a call never waits for ACKs
    wmem = max(4 << 20, 4 * max(sizes))
    ns_run(paths.netns_name(prefix, SRC), ["sysctl", "-qw", f"net.ipv4.tcp_wmem=4096 {wmem} {wmem}"],
           check=True)
    plan = [s for s in sizes for _ in range(warmup + count)]
    per_round: dict = {arm: {s: {"call": [], "rt": [], "unacked": []} for s in sizes}
                       for arm in ARMS}
    checks: dict = {arm: [] for arm in ARMS}
    with _receiver(prefix, dst_ip, plan) as ports:
        for rnd in range(rounds):
            for arm in ARMS:
                r = _one_arm(prefix, arm, dst_ip, ports[arm], sizes, count, warmup)
                _check(arm, r, len(plan))
                checks[arm].append({"tagger": r["tagger"], "host_program": r["host_program"]})
                for s, (calls, rts, left) in r["times"].items():
                    per_round[arm][s]["call"].append(statistics.median(calls))
                    per_round[arm][s]["rt"].append(statistics.median(rts))
                    per_round[arm][s]["unacked"].append(statistics.median(left))
                say(f"round {rnd + 1}/{rounds} {arm:7} " + "  ".join(
                    f"{s} B: {per_round[arm][s]['call'][-1]:.1f}/{per_round[arm][s]['rt'][-1]:.1f} us"
                    f" ({per_round[arm][s]['unacked'][-1]:.0f} B unacked)" for s in sizes))
    summary = {}
    for s in sizes:
        row = {}
        for arm in ARMS:
            for what in ("call", "rt"):
                v = per_round[arm][s][what]
                row[f"{arm}_{what}_us"] = statistics.median(v)
                row[f"{arm}_{what}_range_us"] = [min(v), max(v)]
            row[f"{arm}_unacked_at_return_bytes"] = statistics.median(per_round[arm][s]["unacked"])
        for what in ("call", "rt"):
            base = row[f"plain_{what}_us"]
            for arm in ARMS[1:]:
                row[f"{arm}_{what}_ratio"] = row[f"{arm}_{what}_us"] / base
        summary[s] = row
    return {"sizes": list(sizes), "count": count, "rounds": rounds, "warmup": warmup,
            "per_round": per_round, "summary": summary, "checks": checks}


def table(res: dict) -> str:
    """Markdown: per size, each arm's median call and round trip (us), x plain."""
    head = "| message | " + " | ".join(f"{arm} call" for arm in ARMS) + " | " + \
        " | ".join(f"{arm} round trip" for arm in ARMS) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(ARMS))]
    for s in res["sizes"]:
        r = res["summary"][s]
        cells = []
        for what in ("call", "rt"):
            for arm in ARMS:
                v = r[f"{arm}_{what}_us"]
                cells.append(f"{v:.1f}" if arm == "plain" else
                             f"{v:.1f} ({r[f'{arm}_{what}_ratio']:.2f}x)")
        lines.append(f"| {_size_name(s)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _size_name(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 or s > 64 << 20 for s in sizes):
        raise argparse.ArgumentTypeError(f"comma-separated message sizes in bytes, "
                                         f"1..{64 << 20}, got {shown(text)}")
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tag_cost", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--prefix", default="benchtag", help="the bench's own testbed (default %(default)s)")
    ap.add_argument("--sizes", type=_sizes, default=list(DEFAULT_SIZES),
                    help="message sizes in bytes (default 64,65536,1048576)")
    ap.add_argument("--count", type=int, default=300, help="measured messages per size, arm "
                                                           "and round (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=20, help="messages per size before the "
                                                            "measured ones (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, each arm once per round in turn (default %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="also write every number there")
    args = ap.parse_args(argv)
    for flag, v, lo in (("--count", args.count, 1), ("--warmup", args.warmup, 0),
                        ("--rounds", args.rounds, 1)):
        if v < lo:
            ap.error(f"{flag}: at least {lo}, got {v}")
    lifecycle.up(bench_topology(), args.prefix)
    try:
        res = measure(args.prefix, args.sizes, args.count, args.rounds, args.warmup)
    finally:
        lifecycle.down(args.prefix)
    res["command"] = " ".join(["python -m bench.tag_cost", *(argv if argv is not None
                                                              else sys.argv[1:])])
    print(table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
