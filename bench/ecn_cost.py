#!/usr/bin/env python3
"""What ECN marking costs and how well its phantom queue tracks the real
one (issue 36; docs/experiments.md "ECN"). Not a pass/fail test.

1. ns/packet under BPF_PROG_TEST_RUN of the switch program, ECMP, a
   1514 B ECT(0) TCP packet through a single-port group, in one process
   and one run: ECN off; ECN on with the band below K (queue updated,
   no mark); ECN on above K (the TOS rewritten and its checksum). The
   best of ``--rounds`` means over ``--repeat``.
2. Tracking (``--live``): a fabric of two one-host leaves over one spine
   (hosts 40 Mbit/s, uplinks 10 Mbit/s, fig10's bands), ECN on, an iperf3
   flow h0 -> h1 (cubic, then dctcp-bpf); every ~2 ms the real backlog of
   leaf0's uplink qdisc beside the phantom queue (every band, advanced to
   the same instant by datapath/ecn.py's model): the mean and median
   absolute difference, the correlation, and how often the two agree on
   "above K" (the marking decision).

    sudo .venv/bin/python -m bench.ecn_cost [--repeat 200000] [--rounds 3] [--live]
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RATE_BPS = 25_000_000
K = 3228
LIMIT = 6456
BURST = 15_000


def _packet() -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src="198.18.0.1", dst="198.18.1.1", tos=2)
                 / TCP(sport=40000, dport=5201, flags="A") / (b"x" * 1460))


def cost(repeat: int, rounds: int, say=print) -> dict:
    import ctypes

    from pyroute2 import netns

    from bench.datapath_bpf import veth_ports
    from common.c_constants import MAX_BANDS
    from datapath import bpf_syscall as sc
    from datapath import control
    from datapath.loader import SwitchDatapath
    from datapath.structs import EcnQueue
    from netns_topology import create_namespace

    ns = f"ecnb{int(time.time()) % 100000}"
    create_namespace(ns)
    dp = None
    try:
        ports = veth_ports(ns, 2)
        dp = SwitchDatapath(ns, "/tmp/unused-pins")
        dp.load()
        names = sorted(n for n in ports if n.startswith("p"))
        control.program_switch(dp.maps, [(n, ports[n], n == names[0], True) for n in names],
                               {"198.18.1.1": [ports[names[1]]]}, scheme="ecmp", hash_seed=1)
        control.set_release(dp.maps, False)
        out_id = 1
        setup = {ports[names[1]]: {"rate_bps": RATE_BPS, "k_bytes": K, "limit_bytes": LIMIT,
                                   "burst_bytes": BURST, "weights": [1, 4, 2, 1]}}
        data = _packet()
        far = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 3600 * 10**9   # frozen: no drain

        def run(label, ecn, backlog, credit=0):
            # the queue is frozen (no drain); its limit holds it where the row wants it:
            # 1 byte (never above K) or the starting backlog; a bucket of `credit` lets
            # every packet through an empty queue
            setup[ports[names[1]]]["limit_bytes"] = max(1, backlog)
            setup[ports[names[1]]]["burst_bytes"] = credit or BURST
            control.set_ecn(dp.maps, setup if ecn else None)
            best = None
            for _ in range(rounds):
                dp.maps.ecn_queue[out_id] = EcnQueue(
                    far, credit,
                    (ctypes.c_uint32 * MAX_BANDS)(*([backlog] + [0] * (MAX_BANDS - 1))))
                netns.pushns(ns)
                try:
                    _ret, _out, dur, _ctx = sc.prog_test_run(
                        dp.prog_fd, data, ctx=sc.SkBuff(ifindex=ports[names[0]]), repeat=repeat)
                finally:
                    netns.popns()
                best = dur if best is None else min(best, dur)
            say(f"  {label:<34} {best:6.1f} ns/packet")
            return best
        say(f"switch program, ECMP, single-port group, 1514 B ECT(0) TCP, best of {rounds} x "
            f"{repeat}:")
        res = {"off": run("ECN off", False, 0),
               "on_empty": run("ECN on, queue empty", True, 0, credit=2**32 - 1),
               "on_below": run("ECN on, band below K", True, 0),
               "on_above": run("ECN on, band above K (marks)", True, 10 * K)}
        c = control.read_counters(dp.maps)
        say(f"  (marked {c['ecn_marked']}: the above-K runs)")
        return res
    finally:
        if dp is not None:
            dp.close()
        netns.remove(ns)


def _tracking(seconds: float, say=print) -> dict:
    import numpy as np

    from common import paths
    from datapath.ecn import ModelEcnPort, ModelEcnQueue
    from datapath.maps import SwitchMaps
    from datapath.qdisc_stats import QdiscReader
    from netns_topology import LeafSpine
    from testbed import lifecycle, regime
    from workload.iperf import run_iperf3

    topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1, host_link_rate="40mbit",
                     link_rate="10mbit", queue={"limit": "40kb", "burst": "15k", "cburst": "15k",
                                                "bands": [1, 4, 2, 1]})
    prefix = f"ecnt{int(time.time()) % 10000}"
    lifecycle.up(topo, prefix, agent=None)
    out = {}
    try:
        up = next(p.name for p in topo.ports("leaf0") if p.kind == "fabric")
        h1 = next(h for h in topo.hosts if h.name == "h1")
        for cc in ("cubic", "dctcp-bpf"):
            rec = regime.set_regime(prefix, ecn=True, tcp_cc=None if cc == "cubic" else cc)
            k = rec["ports"]["leaf0"][up]["k"]
            real, phantom = [], []
            stop = threading.Event()
            with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps, \
                    QdiscReader(paths.netns_name(prefix, "leaf0")) as reader:
                from datapath import control
                pid = next(p["port_id"] for ix, p in control.read_ports(maps).items()
                           if ix == reader._ifindex(up))
                e = maps.ecn_port[pid]
                port = ModelEcnPort(e.bytes_per_s, e.k_bytes, e.limit_bytes, e.burst_bytes,
                                    list(e.weight))

                def sample():
                    while not stop.wait(0.002):
                        q = maps.ecn_queue[pid]
                        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                        b = reader.read(up).backlog_bytes
                        m = ModelEcnQueue(q.last_ns, q.credit, list(q.bytes))
                        m.advance(port, now)
                        real.append(b)
                        phantom.append(sum(m.bytes))
                t = threading.Thread(target=sample, daemon=True)
                t.start()
                try:
                    res = run_iperf3(paths.netns_name(prefix, "h0"), paths.netns_name(prefix, "h1"),
                                     h1.ip, duration=seconds)
                finally:
                    stop.set()
                    t.join()
            r, p = np.array(real[50:], float), np.array(phantom[50:], float)
            diff = np.abs(r - p)
            agree = float(np.mean((r > k) == (p > k)))
            out[cc] = {"samples": len(r), "real_mean": r.mean(), "phantom_mean": p.mean(),
                       "abs_err_mean": diff.mean(), "abs_err_median": float(np.median(diff)),
                       "corr": float(np.corrcoef(r, p)[0, 1]) if r.std() and p.std() else None,
                       "agree_above_k": agree, "mbps": res.received_bps / 1e6, "k": k}
            o = out[cc]
            say(f"  {cc:<10} {o['samples']} samples, {o['mbps']:.2f} Mbit/s: real backlog mean "
                f"{o['real_mean']:.0f} B, phantom {o['phantom_mean']:.0f} B; |diff| mean "
                f"{o['abs_err_mean']:.0f} B, median {o['abs_err_median']:.0f} B; corr "
                f"{o['corr']:.2f}; same side of K ({k} B) {100 * agree:.1f}%")
    finally:
        try:
            regime.set_regime(prefix)
        finally:
            lifecycle.down(prefix)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--live", action="store_true", help="also the tracking measurement")
    ap.add_argument("--seconds", type=float, default=6.0)
    a = ap.parse_args(argv)
    cost(a.repeat, a.rounds)
    if a.live:
        print("phantom queue against the real backlog, leaf0's 10 Mbit/s uplink, ECN on:")
        _tracking(a.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
