#!/usr/bin/env python3
"""Packets/s per core: the XDP entry point against the TC one and an empty
XDP_REDIRECT, in one run (`talb bench xdp`). Not a pass/fail test.

Two measurements, in a namespace of its own with veth ports (p0 the
ingress, p1..p4 the uplinks of a 4-port ECMP group):

(a) program cost, BPF_PROG_TEST_RUN without executing the redirect: the
    kernel's mean ns per run of talb_switch_tc, talb_switch_xdp (ECMP,
    4-port group) and an empty XDP_REDIRECT / empty TC redirect program;
    packets/s per core = 1e9 / ns.
(b) forwarding, the redirect executed, this process pinned to one CPU,
    wall clock over ``--frames`` frames (the receiving veth end runs
    XDP_DROP, so every frame ends alike):
      - XDP entry and empty XDP_REDIRECT: BPF_F_TEST_XDP_LIVE_FRAMES (each
        frame a fresh xdp_frame from the page pool, redirected for real by
        bpf_redirect through veth's ndo_xdp_xmit);
      - TC entry: a test run with first-hop release on, whose
        bpf_clone_redirect transmits a clone through the egress veth for
        every repeat (the TC path's cost per forwarded packet: skb clone,
        dev_queue_xmit, the peer's receive); the test run's skb is built
        once, so a real receive's skb allocation is not in it.
    The peer's NAPI runs on the same CPU (the redirecting CPU schedules
    it), so the wall time holds the whole forwarding work of one core.
    Beside them the floor (XDP_FLOORS): XDP programs doing one part of the
    switch's work each (the parse; the parse and the route lookup; the
    parse, route and group lookups and the 5-tuple hash), redirected the
    same way. Every forwarding row runs once per round, the rounds
    interleaved; the median is printed (the program cost: the best).

    sudo .venv/bin/python -m bench.datapath_xdp [--frames 2000000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.datapath_bpf import FLOOR_PARSE_C  # noqa: E402

EMPTY_XDP_REDIRECT = b"""
int empty_xdp_redirect(struct xdp_md *ctx) { return bpf_redirect(IFINDEX, 0); }
int xdp_drop(struct xdp_md *ctx) { return XDP_DROP; }
"""
EMPTY_TC_REDIRECT = b"""
#include <uapi/linux/pkt_cls.h>
int empty_tc_redirect(struct __sk_buff *skb) { return bpf_redirect(IFINDEX, 0); }
"""
#: XDP floors, redirect executed like the rows: what each step of the
#: switch's XDP path costs alone -- the parse, then one hash lookup (the
#: route), then two and the 5-tuple hash (an ECMP switch's skeleton: fwd,
#: groups, the hash), each ending in the same bpf_redirect.
XDP_FLOOR_SRC = b"""
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/tcp.h>

struct grp { u32 n; u32 ifindex[8]; };
BPF_HASH(fwd, u32, u32, 4096);
BPF_HASH(groups, u32, struct grp, 1024);

#define CTX struct xdp_md
""" + FLOOR_PARSE_C + b"""

int xdp_floor_parse(struct xdp_md *ctx)
{
	u32 sa, da, ports;

	if (!parse(ctx, &sa, &da, &ports))
		return XDP_PASS;
	return bpf_redirect(IFINDEX, 0);
}

int xdp_floor_route(struct xdp_md *ctx)
{
	u32 sa, da, ports, *gid;

	if (!parse(ctx, &sa, &da, &ports))
		return XDP_PASS;
	gid = fwd.lookup(&da);
	if (!gid)
		return XDP_PASS;
	return bpf_redirect(IFINDEX + (*gid & 0), 0);
}

static __always_inline u32 rotl(u32 x, int r) { return (x << r) | (x >> (32 - r)); }
static __always_inline u32 mix(u32 h, u32 k)
{
	k *= 0xcc9e2d51U; k = rotl(k, 15); k *= 0x1b873593U;
	h ^= k; h = rotl(h, 13); return h * 5 + 0xe6546b64U;
}

int xdp_floor_ecmp(struct xdp_md *ctx)
{
	u32 sa, da, ports, *gid, h = 1;
	struct grp *g;

	if (!parse(ctx, &sa, &da, &ports))
		return XDP_PASS;
	gid = fwd.lookup(&da);
	if (!gid)
		return XDP_PASS;
	g = groups.lookup(gid);
	if (!g || g->n == 0 || g->n > 8)
		return XDP_PASS;
	h = mix(mix(mix(mix(h, sa), da), ports), 6) ^ 16;
	h ^= h >> 16; h *= 0x85ebca6bU; h ^= h >> 13; h *= 0xc2b2ae35U; h ^= h >> 16;
	h %= g->n;
	asm volatile("" : "+r"(h));     /* keep the mask for the verifier */
	return bpf_redirect(g->ifindex[h & 7], 0);
}
"""
XDP_FLOORS = {"xdp_floor_parse": "floor: parse Eth/IPv4/TCP + XDP_REDIRECT",
              "xdp_floor_route": "floor: parse + route lookup + XDP_REDIRECT",
              "xdp_floor_ecmp": "floor: parse + route + group + hash + XDP_REDIRECT"}
ROWS = ("TC entry (ECMP, 4-port group)", "XDP entry (ECMP, 4-port group)",
        "empty XDP_REDIRECT", "empty TC redirect")


def tcp_packet(size: int, dst: str = "198.18.1.4") -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(
        src="198.18.0.1", dst=dst) / TCP(sport=40000, dport=5201, flags="A")
    return bytes(base / (b"\0" * max(0, size - len(base))))


def _best(fn, rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def measure(*, repeat: int = 1_000_000, frames: int = 2_000_000, rounds: int = 3,
            size: int = 64, cpu: int | None = None, say=print) -> dict:
    from pyroute2 import IPRoute, netns

    from common.bcc_bindings import import_bcc
    from datapath import bpf_syscall as sc
    from datapath import control
    from datapath.loader import SwitchDatapath
    from datapath.xdp import XDP_FLAGS_DRV_MODE, XdpSwitchDatapath
    from bench.datapath_bpf import close_quietly, veth_ports
    from netns_topology import create_namespace

    BPF = import_bcc().BPF
    ns = f"tb{os.getpid()}-xdpb"
    create_namespace(ns)
    keep = []
    affinity = os.sched_getaffinity(0)
    try:
        ifindex = veth_ports(ns, mtu=1600)
        b_x = BPF(text=EMPTY_XDP_REDIRECT, cflags=[f"-DIFINDEX={ifindex['p1']}"])
        b_t = BPF(text=EMPTY_TC_REDIRECT, cflags=[f"-DIFINDEX={ifindex['p1']}"])
        keep += [b_x, b_t]
        empty_xdp = b_x.load_func(b"empty_xdp_redirect", BPF.XDP).fd
        drop = b_x.load_func(b"xdp_drop", BPF.XDP).fd
        empty_tc = b_t.load_func(b"empty_tc_redirect", BPF.SCHED_CLS).fd
        b_f = BPF(text=XDP_FLOOR_SRC, cflags=[f"-DIFINDEX={ifindex['p1']}"])
        keep.append(b_f)
        import ctypes

        daddr = int.from_bytes(bytes([198, 18, 1, 4]), "little")    # as the program reads it
        b_f[b"fwd"][ctypes.c_uint32(daddr)] = ctypes.c_uint32(1)
        grp = b_f[b"groups"].Leaf()
        grp.n = 4
        for i in range(4):
            grp.ifindex[i] = ifindex[f"p{i + 1}"]
        b_f[b"groups"][ctypes.c_uint32(1)] = grp
        floors = {row: b_f.load_func(fn.encode(), BPF.XDP).fd for fn, row in XDP_FLOORS.items()}
        tc = SwitchDatapath(ns, "/nonexistent").load(release_sk=False)
        xdp = XdpSwitchDatapath(ns, "/nonexistent").load()
        keep += [tc, xdp]
        for dp in (tc, xdp):
            control.program_switch(
                dp.maps, [(f"p{i}", ifindex[f"p{i}"], i == 0, True) for i in range(5)],
                {"198.18.1.4": [ifindex[f"p{i}"] for i in (1, 2, 3, 4)]}, hash_seed=1)
            control.set_release(dp.maps, False)
        with IPRoute(netns=ns, flags=0) as ipr:
            # every receiving end drops in XDP; p1..p4 need an XDP program of
            # their own to take XDP_REDIRECTed frames (ndo_xdp_xmit)
            for i in range(5):
                for n in (f"p{i}", f"q{i}"):
                    if n != "p0":
                        ipr.link("set", index=ifindex[n], xdp={"attrs": [
                            ("IFLA_XDP_FD", drop), ("IFLA_XDP_FLAGS", XDP_FLAGS_DRV_MODE)]})
        data = tcp_packet(size)
        xctx = sc.XdpMd(data_end=len(data), ingress_ifindex=ifindex["p0"])
        tctx = sc.SkBuff(ifindex=ifindex["p0"])
        fds = {ROWS[0]: (tc.prog_fd, tctx), ROWS[1]: (xdp.prog_fd, xctx),
               ROWS[2]: (empty_xdp, xctx), ROWS[3]: (empty_tc, tctx)}
        if cpu is None:
            cpu = min(affinity)
        os.sched_setaffinity(0, {cpu})
        netns.pushns(ns)
        try:
            # (a) program cost
            cost = {}
            for name, (fd, ctx) in fds.items():
                cost[name] = _best(lambda: sc.prog_test_run(fd, data, ctx=ctx,
                                                            repeat=repeat)[2], rounds)

            # (b) forwarding, redirect executed
            def rx_dropped():
                with IPRoute(flags=0) as ipr:
                    return sum(ipr.get_links(ifindex[f"q{i}"])[0].get_attr("IFLA_STATS64")
                               ["rx_packets"] for i in (1, 2, 3, 4))

            def live_xdp(fd):
                def one():
                    t = time.perf_counter()
                    sc.prog_test_run(fd, data, ctx=xctx, repeat=frames,
                                     flags=sc.BPF_F_TEST_XDP_LIVE_FRAMES)
                    return (time.perf_counter() - t) / frames * 1e9
                return one

            def live_tc():
                control.set_release(tc.maps, True)
                try:
                    t = time.perf_counter()
                    sc.prog_test_run(tc.prog_fd, data, ctx=tctx, repeat=frames)
                    return (time.perf_counter() - t) / frames * 1e9
                finally:
                    control.set_release(tc.maps, False)

            # rows interleaved, once per round; the median is kept
            live = [(ROWS[0], live_tc), (ROWS[1], live_xdp(xdp.prog_fd)),
                    (ROWS[2], live_xdp(empty_xdp)),
                    *((row, live_xdp(fd)) for row, fd in floors.items())]
            samples = {name: [] for name, _ in live}
            got = {name: 0 for name, _ in live}
            for _ in range(rounds):
                for name, fn in live:
                    before = rx_dropped()
                    samples[name].append(fn())
                    got[name] += rx_dropped() - before
            fwd = {name: statistics.median(v) for name, v in samples.items()}
            delivered = {name: got[name] / (frames * rounds) for name in got}
        finally:
            netns.popns()
            os.sched_setaffinity(0, affinity)
        tc_counters = control.read_counters(tc.maps)
        x_counters = control.read_counters(xdp.maps)
        if not x_counters["redirected"] or not tc_counters["released"]:
            raise RuntimeError(f"the forwarding runs did not redirect: TC {tc_counters}, "
                               f"XDP {x_counters}")
    finally:
        close_quietly(keep)
        netns.remove(ns)

    say(f"{size} B TCP frames, kernel {os.uname().release}, one CPU ({cpu}), best of {rounds}")
    say(f"(a) program cost, BPF_PROG_TEST_RUN x {repeat:,}, redirect not executed")
    width = max(len(r) for r in ROWS)
    for name in ROWS:
        say(f"    {name:<{width}}  {cost[name]:>6.0f} ns  {1e3 / max(cost[name], 1e-9):>7.2f} "
            f"Mpps/core")
    say(f"(b) forwarding, redirect executed, {frames:,} frames, wall clock on one CPU, "
        f"median of {rounds} interleaved rounds")
    width = max(width, *(len(r) for r in XDP_FLOORS.values()))
    for name in (*ROWS[:3], *XDP_FLOORS.values()):
        say(f"    {name:<{width}}  {fwd[name]:>6.0f} ns  {1e3 / fwd[name]:>7.2f} Mpps/core"
            f"  ({delivered[name]:.0%} reached the peer)")
    ratios = {
        "cost: xdp_entry/tc_entry": cost[ROWS[1]] / cost[ROWS[0]],
        "cost: xdp_entry/empty_xdp_redirect": cost[ROWS[1]] / cost[ROWS[2]],
        "fwd pps: xdp_entry/tc_entry": fwd[ROWS[0]] / fwd[ROWS[1]],
        "fwd pps: xdp_entry/empty_xdp_redirect": fwd[ROWS[2]] / fwd[ROWS[1]],
        **{f"fwd pps: {fn}/empty_xdp_redirect": fwd[ROWS[2]] / fwd[row]
           for fn, row in XDP_FLOORS.items()},
    }
    say("    ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    return {"size": size, "cpu": cpu, "repeat": repeat, "frames": frames,
            "cost_ns": cost, "forward_ns": fwd, "delivered": delivered,
            "mpps_per_core": {k: 1e3 / v for k, v in fwd.items()}, "ratios": ratios}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1_000_000)
    ap.add_argument("--frames", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 1
    out = measure(repeat=args.repeat, frames=args.frames, rounds=args.rounds, size=args.size,
                  cpu=args.cpu)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
