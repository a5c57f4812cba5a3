#!/usr/bin/env python3
"""ns/packet of the switch data path under BPF_PROG_TEST_RUN.

Compares bpf/switch_tc.c (a single-port group, and a 4-port group under
each scheme: ECMP, RPS, LetFlow, DRILL, CONGA and TaLB -- an untagged
packet, through its ECMP fallback; a tagged packet whose tensor is in the
tensor table (a hit); the first packet of a new tensor (a miss: the CASE
1/2 decision; one of length 1, so that every repeat decides again and
none inserts) -- with an empty program and an empty redirect program, for
64 B and 1514 B TCP packets, release flag off (a test run does not execute the
redirect, so this is the program's own cost: parse, lookups, decision,
counters). Also prints each program's instructions verified. The kernel
reports the mean over ``--repeat`` runs; the best of ``--rounds`` is
printed. Not a pass/fail test.

Each step alone, in the same run: one-helper programs (FLOOR_ROWS: the
parse, the 5-tuple hash, one array / hash / tensor-table / LRU lookup, a
per-CPU counter, the clock), each ending in the same redirect -- the floor
under the rows above. Every (program, size) runs once per round, the
rounds interleaved; the median of ``--rounds`` is printed.

    sudo .venv/bin/python -m bench.datapath_bpf [--repeat 1000000] [--rounds 3]

Needs root and bcc; works in a namespace of its own (veth ports), removed
at exit.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datapath.schemes import registry as scheme_registry  # noqa: E402

EMPTY_OK = b"int empty_ok(struct __sk_buff *skb) { return TC_ACT_OK; }"
EMPTY_REDIRECT = b"""
int empty_redirect(struct __sk_buff *skb) { return bpf_redirect(IFINDEX, 0); }
"""


#: One-helper programs, in the same run: the floor under the switch's rows
#: -- what one step of theirs costs alone (each ends in the same redirect,
#: so "- empty redirect" is the step). The maps are sized and filled like
#: the switch's (fwd 4096 routes, groups, the tensor table, tensor_egress's
#: LRU), the lookups hit.
#: Ethernet, IPv4 (IHL checked), TCP ports: the parse every floor row does,
#: TC's and XDP's alike (CTX: the program's context, both have data/data_end)
FLOOR_PARSE_C = b"""
static __always_inline int parse(CTX *ctx, u32 *sa, u32 *da, u32 *ports)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tcphdr *tcp;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl < 5)
		return 0;
	tcp = (void *)ip + ip->ihl * 4;
	if ((void *)(tcp + 1) > end)
		return 0;
	*sa = ip->saddr; *da = ip->daddr;
	*ports = ((u32)tcp->source << 16) | tcp->dest;
	return 1;
}
"""
FLOOR_SRC = b"""
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/tcp.h>

struct tkey { u32 saddr; u32 tensor_id; };
struct tval { u64 a, b, c; u32 d, e, f; u16 g; u8 h, i; };
BPF_ARRAY(arr, u64, 4096);
BPF_HASH(hash4, u32, u64, 4096);
BPF_HASH(tensors, struct tkey, struct tval, 131072);
BPF_TABLE("lru_hash", struct tkey, struct tval, lru, 65536);
BPF_PERCPU_ARRAY(pcpu, u64, 64);

static __always_inline u32 rotl(u32 x, int r) { return (x << r) | (x >> (32 - r)); }
static __always_inline u32 mix(u32 h, u32 k)
{
	k *= 0xcc9e2d51U; k = rotl(k, 15); k *= 0x1b873593U;
	h ^= k; h = rotl(h, 13); return h * 5 + 0xe6546b64U;
}

#define CTX struct __sk_buff
""" + FLOOR_PARSE_C + b"""

int floor_parse(struct __sk_buff *skb)
{
	u32 sa, da, ports;

	if (!parse(skb, &sa, &da, &ports))
		return TC_ACT_OK;
	return bpf_redirect(IFINDEX + (sa & 0), 0);
}

int floor_hash(struct __sk_buff *skb)
{
	u32 sa, da, ports, h = 1;

	if (!parse(skb, &sa, &da, &ports))
		return TC_ACT_OK;
	h = mix(mix(mix(mix(h, sa), da), ports), 6) ^ 16;
	h ^= h >> 16; h *= 0x85ebca6bU; h ^= h >> 13; h *= 0xc2b2ae35U; h ^= h >> 16;
	return bpf_redirect(IFINDEX + (h % 4) * 0, 0);
}

int floor_array(struct __sk_buff *skb)
{
	u32 k = skb->ifindex & 4095;
	u64 *v = arr.lookup(&k);

	return bpf_redirect(IFINDEX + (v ? *v : 0), 0);
}

int floor_hashmap(struct __sk_buff *skb)
{
	u32 k = skb->ifindex;
	u64 *v = hash4.lookup(&k);

	return bpf_redirect(IFINDEX + (v ? *v : 0), 0);
}

int floor_percpu(struct __sk_buff *skb)
{
	u32 k = 3;
	u64 *v = pcpu.lookup(&k);

	if (v)
		*v += 1;
	return bpf_redirect(IFINDEX, 0);
}

int floor_clock(struct __sk_buff *skb)
{
	return bpf_redirect(IFINDEX + (bpf_ktime_get_ns() & 0), 0);
}

int floor_tensor(struct __sk_buff *skb)
{
	struct tkey k = { .saddr = skb->ifindex, .tensor_id = 7 };
	struct tval *v = tensors.lookup(&k);

	if (v)
		v->b = 1;
	return bpf_redirect(IFINDEX, 0);
}

int floor_lru_atomic(struct __sk_buff *skb)
{
	struct tkey k = { .saddr = skb->ifindex, .tensor_id = 7 };
	struct tval *v = lru.lookup(&k);

	if (v) {
		__sync_fetch_and_add(&v->d, 1);
		v->b = 1;
	}
	return bpf_redirect(IFINDEX, 0);
}
"""
#: floor program -> its row
FLOOR_ROWS = {
    "floor_parse": "floor: parse Eth/IPv4/TCP + redirect",
    "floor_hash": "floor: parse + 5-tuple hash + redirect",
    "floor_array": "floor: one array lookup + redirect",
    "floor_hashmap": "floor: one hash lookup (4 B key) + redirect",
    "floor_percpu": "floor: one per-CPU counter + redirect",
    "floor_clock": "floor: bpf_ktime_get_ns + redirect",
    "floor_tensor": "floor: tensor-table hash lookup + redirect",
    "floor_lru_atomic": "floor: LRU lookup + atomic add + redirect",
}


def _fill_floor_maps(b, ifindex: int) -> None:
    """Entries for the floor programs' lookups to hit (the key each uses)."""
    import ctypes

    b[b"arr"][ctypes.c_int(ifindex & 4095)] = ctypes.c_uint64(0)
    hash4 = b[b"hash4"]
    for k in range(1, 4096):            # as full as a fabric's fwd map can be
        hash4[ctypes.c_uint32(k)] = ctypes.c_uint64(0)
    for name in (b"tensors", b"lru"):
        t = b[name]
        key = t.Key(saddr=ifindex, tensor_id=7)
        t[key] = t.Leaf()


#: the schemes with a row of their own, 4-port group: every scheme of the registry
SCHEME_ROWS = tuple(s.name for s in scheme_registry.SCHEMES)


#: tagged rows: row key -> (scheme, TaLBHeader fields of the measured
#: packet). TaLB -- a hit: pkt_idx 1 of a long tensor whose first packet
#: went before (its entry is in the table; the tensor never completes); a
#: miss: a tensor of one packet (decided by CASE 1/2, never inserted, so
#: each repeat misses). ECMP tagged: the same packet as the hit under ECMP,
#: beside the untagged ECMP row: what a tagged packet costs a scheme that
#: ignores the tag (the option's parse and the tensor_egress record).
TAGGED_ROWS = {"talb_hit": ("talb", dict(layer=0, tensor_len=65535, pkt_idx=1)),
               "talb_miss": ("talb", dict(layer=0, tensor_len=1, pkt_idx=0)),
               "ecmp_tagged": ("ecmp", dict(layer=0, tensor_len=65535, pkt_idx=1))}

#: a row's label: the scheme's title, but where the title alone does not say
#: what is measured -- DRILL at its default (d, m), TaLB's untagged packet
#: through its default fallback (the rows' names the committed results use)
_ROW_NAMES = {**{s.name: s.title for s in scheme_registry.SCHEMES},
              "drill": "DRILL(2,1)", "talb": "TaLB (untagged -> ECMP)",
              "talb_hit": "TaLB tagged, table hit", "talb_miss": "TaLB tagged, new tensor",
              "ecmp_tagged": "ECMP tagged"}


def scheme_row(scheme: str) -> str:
    return f"switch {_ROW_NAMES[scheme]}, 4-port group"


def tcp_packet(size: int, tensor=None) -> bytes:
    """An Ether/IPv4/TCP frame of ``size`` bytes; ``tensor``: a
    common.wire.TaLBHeader as its IPv4 option (as a host tags it), the
    frame then at least 66 B (its headers: the "64 B" column's tagged
    rows)."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    opts = [tensor.scapy()] if tensor is not None else []
    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(
        src="198.18.0.1", dst="198.18.1.4", options=opts) / TCP(sport=40000, dport=5201,
                                                                flags="A")
    pad = size - len(base)
    if tensor is not None:
        pad = max(pad, 0)
    if pad < 0:
        raise ValueError(f"packet size {size} < headers {len(base)}")
    return bytes(base / (b"\0" * pad))


def veth_ports(ns: str, pairs: int = 5, mtu: int | None = None) -> dict[str, int]:
    """veth pairs p<i>/q<i> up in namespace ``ns`` (the benches' ports):
    {name: ifindex}."""
    from pyroute2 import IPRoute

    ifindex = {}
    with IPRoute(netns=ns, flags=0) as ipr:
        for i in range(pairs):
            ipr.link("add", ifname=f"p{i}", kind="veth", peer={"ifname": f"q{i}"})
        for i in range(pairs):
            for n in (f"p{i}", f"q{i}"):
                ifindex[n] = ipr.link_lookup(ifname=n)[0]
                ipr.link("set", index=ifindex[n], state="up", **({"mtu": mtu} if mtu else {}))
    return ifindex


def close_quietly(programs) -> None:
    """Close the benches' data paths and bcc objects, whatever state a failed
    run left them in (the namespace goes right after)."""
    for p in programs:
        try:
            p.close() if hasattr(p, "close") else p.cleanup()
        except Exception:
            pass


def measure(*, repeat: int = 1_000_000, rounds: int = 3, sizes=(64, 1514), say=print) -> dict:
    """ns/packet per program and size; returns {"ns": {program: {size: ns}}, "ratios": {...}}."""
    from pyroute2 import netns

    from common.bcc_bindings import import_bcc
    from common.wire import TaLBHeader
    from datapath import bpf_syscall as sc
    from datapath import control
    from datapath.loader import SwitchDatapath
    from netns_topology import create_namespace

    BPF = import_bcc().BPF
    ns = f"tb{os.getpid()}-bench"
    create_namespace(ns)
    progs = []
    try:
        ifindex = veth_ports(ns)

        dp = SwitchDatapath(ns, "/nonexistent").load(release_sk=False)
        progs.append(dp)
        # p0, the ingress, faces a host: under CONGA this switch is the
        # source leaf and pushes its option on the first run; the repeats
        # reuse the packet, which then carries it (a hop raising CE: the
        # decision, the DRE and the option's checksum update each time)
        control.program_switch(
            dp.maps, [(f"p{i}", ifindex[f"p{i}"], i == 0, True) for i in range(5)],
            {"198.18.1.4": [ifindex[f"p{i}"] for i in (1, 2, 3, 4)],
             "198.18.1.1": [ifindex["p1"]]}, hash_seed=1)
        control.set_release(dp.maps, False)

        b_ok = BPF(text=b"#include <uapi/linux/pkt_cls.h>\n" + EMPTY_OK)
        b_rd = BPF(text=b"#include <uapi/linux/pkt_cls.h>\n" + EMPTY_REDIRECT,
                   cflags=[f"-DIFINDEX={ifindex['p1']}"])
        b_fl = BPF(text=FLOOR_SRC, cflags=[f"-DIFINDEX={ifindex['p1']}"])
        _fill_floor_maps(b_fl, ifindex["p0"])
        progs += [b_ok, b_rd, b_fl]
        # name: (program fd, destination, scheme set before the run, TaLB
        # option fields of the packet or None)
        fds = {
            "empty (TC_ACT_OK)": (b_ok.load_func(b"empty_ok", BPF.SCHED_CLS).fd, "198.18.1.4",
                                  None, None),
            "empty redirect": (b_rd.load_func(b"empty_redirect", BPF.SCHED_CLS).fd, "198.18.1.4",
                               None, None),
            "switch, single-port group": (dp.prog_fd, "198.18.1.1", "ecmp", None),
        }
        for fn, row in FLOOR_ROWS.items():
            fds[row] = (b_fl.load_func(fn.encode(), BPF.SCHED_CLS).fd, "198.18.1.4", None, None)
        for scheme in SCHEME_ROWS:
            fds[scheme_row(scheme)] = (dp.prog_fd, "198.18.1.4", scheme, None)
        for row, (scheme, fields) in TAGGED_ROWS.items():
            fds[scheme_row(row)] = (dp.prog_fd, "198.18.1.4", scheme, fields)
        control.set_port_rates(dp.maps, {ifindex[f"p{i}"]: (100_000_000, 150_000, 15_000)
                                         for i in range(5)})
        control.set_conga_leaves(dp.maps, 0, {"198.18.1.4": 1, "198.18.1.1": 1})
        ctx = sc.SkBuff(ifindex=ifindex["p0"])
        results: dict[tuple[str, int], float] = {}
        netns.pushns(ns)
        try:
            # every (program, size) once per round, the rounds one after
            # the other: a slow spell of the machine hits all rows alike
            runs: dict[tuple[str, int], tuple] = {}
            for size in sizes:
                for name, (fd, dst, scheme, fields) in fds.items():
                    tensor = first = None
                    if fields:
                        # a tensor of its own per row and size
                        tensor = TaLBHeader(0x7A1B0000 + 4 * size + list(fds).index(name),
                                            **fields)
                        if fields["pkt_idx"]:       # its first packet: the entry
                            first = tcp_packet(size, TaLBHeader(tensor.tensor_id, tensor.layer,
                                                                tensor.tensor_len, 0))
                    data = bytearray(tcp_packet(size, tensor))
                    data[30:34] = bytes(int(x) for x in dst.split("."))   # IPv4 daddr
                    runs[(name, size)] = (fd, scheme, first, bytes(data))
            samples: dict[tuple[str, int], list] = {k: [] for k in runs}
            for _ in range(rounds):
                for key, (fd, scheme, first, data) in runs.items():
                    if scheme:
                        control.set_scheme(dp.maps, scheme)
                    if first is not None:   # (again: the entry may have aged meanwhile)
                        sc.prog_test_run(fd, first, ctx=ctx, repeat=1)
                    samples[key].append(sc.prog_test_run(fd, data, ctx=ctx, repeat=repeat)[2])
            results = {k: statistics.median(v) for k, v in samples.items()}
        finally:
            netns.popns()

        say("    instructions verified (bpf_prog_info.verified_insns, of the verifier's "
            f"{sc.VERIFIER_INSN_LIMIT:,}):")
        verified = {}
        for pname, info in dp.programs().items():
            verified[pname] = info.verified_insns
            say(f"      {pname:<24} {info.verified_insns:>9,}  ({info.verifier_share:.1%})")
        say(f"(a) BPF_PROG_TEST_RUN, {repeat:,} repeats, median of {rounds} interleaved rounds, "
            f"kernel {os.uname().release}, {os.cpu_count()} CPUs")
        width = max(len(n) for n in fds)
        say(f"    {'program':<{width}}  " + "  ".join(f"{s:>7} B" for s in sizes))
        for name in fds:
            say(f"    {name:<{width}}  "
                + "  ".join(f"{results[(name, s)]:>6.0f} ns" for s in sizes))
        ratios = {}
        for scheme in (*SCHEME_ROWS, *TAGGED_ROWS):
            for s in sizes:
                e, r = results[(scheme_row(scheme), s)], results[("empty redirect", s)]
                ratios[f"{scheme}/empty_redirect {s}B"] = e / max(r, 1)
            say(f"    {scheme:<9} / empty redirect = "
                + ", ".join(f"{results[(scheme_row(scheme), s)] / max(results[('empty redirect', s)], 1):.2f}x"
                            f" at {s} B" for s in sizes))
        # issue 43's targets: a TaLB table hit at most 1.5x ECMP, ECMP at
        # most 1.5x the single-port path (same packet size, same run)
        single, ecmp = "switch, single-port group", scheme_row("ecmp")
        for label, num, den in (("ECMP / single-port", ecmp, single),
                                ("TaLB hit / ECMP", scheme_row("talb_hit"), ecmp),
                                ("TaLB hit / ECMP tagged", scheme_row("talb_hit"),
                                 scheme_row("ecmp_tagged")),
                                ("TaLB untagged / ECMP", scheme_row("talb"), ecmp)):
            for s in sizes:
                ratios[f"{label} {s}B"] = results[(num, s)] / max(results[(den, s)], 1)
            say(f"    {label:<24} = " + ", ".join(
                f"{results[(num, s)] / max(results[(den, s)], 1):.2f}x at {s} B" for s in sizes))
        counters = control.read_counters(dp.maps)
        if not counters["conga_pushed"]:
            raise RuntimeError(f"benchmark did not push CONGA's option: {counters}")
        if not counters["redirected"] or counters["released"]:
            raise RuntimeError(f"benchmark did not exercise the redirect path: {counters}")
        for scheme in SCHEME_ROWS:
            # an untagged packet under a scheme with a fallback (TaLB) is the fallback's
            decided = ("talb_fallback" if scheme_registry.get(scheme).has_fallback
                       else f"decision_{scheme}")
            if not counters[decided]:
                raise RuntimeError(f"benchmark did not run {scheme}'s decision: {counters}")
        runs = repeat * rounds * len(sizes)
        if counters["talb_hit"] < runs or counters["talb_case2"] + counters["talb_case1"] < runs:
            raise RuntimeError(f"benchmark did not run TaLB's hit and new-tensor paths: {counters}")
        if counters["scheme_fallback"]:
            raise RuntimeError(f"a scheme had no program (fell back to ECMP): {counters}")
    finally:
        close_quietly(progs)
        netns.remove(ns)
    return {"ns": {name: {s: results[(name, s)] for s in sizes} for name in fds}, "ratios": ratios,
            "verified_insns": verified}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 1514])
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespace, BPF)", file=sys.stderr)
        return 2
    measure(repeat=args.repeat, rounds=args.rounds, sizes=tuple(args.sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
