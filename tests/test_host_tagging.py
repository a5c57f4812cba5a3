"""The sending host's tagging (bpf/host_tc.c, workload/tensor_sender.py).

Part 1, BPF_PROG_TEST_RUN: the program compiled by bcc, loaded and verified
by the kernel (not attached), fed hand-made frames; its maps set and read
through datapath.host_maps.

Part 2, live: two host namespaces joined by one veth pair (no switch, so
nothing strips the option: both ends take MTU 1600 to receive it, and a
route with advmss 1460 keeps TCP's packets at 1500 bytes before the push,
as on the fabric's hosts), the program attached at egress of both eth0s,
real TCP. A raw packet socket on the sender's eth0 sees what leaves the
host (taps run after TC egress).

Part 3: ``talb testbed up`` attaches the program on every host and a
TensorSender finds the pins by itself, also under ``ip netns exec``.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib
import json
import os
import random
import re
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import new_prefix, skip_or_fail
from helpers import run_in, socket_in

pytestmark = pytest.mark.bpf

REPO = Path(__file__).resolve().parent.parent
TC_ACT_OK = 0
SRC, DST = "198.18.0.1", "198.18.0.2"
SPORT, DPORT = 40000, 5001
MSS = 1448
M32 = 0xFFFFFFFF


# ====================================================================================
# Part 1: test runs
# ====================================================================================
class Host:
    """A loaded (not attached) host program, and helpers to drive it."""

    def __init__(self, dp):
        self.dp = dp
        self.maps = dp.maps

    def reset(self):
        for name in ("flow_isn", "flow_rings", "sendmsg_rings", "tensor_wire", "counters"):
            self.maps[name].clear()

    def run(self, frame: bytes, ctx=None, repeat: int = 1):
        from datapath import bpf_syscall as sc

        ret, out, dur, _ = sc.prog_test_run(self.dp.prog_fd, frame, ctx=ctx, repeat=repeat)
        return ret, out, dur

    def counters(self) -> dict[str, int]:
        return {k: v for k, v in self.maps.read_counters().items() if v}

    def key(self, src=SRC, sport=SPORT, dst=DST, dport=DPORT):
        from datapath.host_maps import HostFlowKey

        return HostFlowKey.of(src, sport, dst, dport)

    def set_isn(self, isn: int, active: bool = True, **key):
        from datapath.host_maps import HOST_ISN_ACTIVE, HostIsn

        self.maps.flow_isn[self.key(**key)] = HostIsn(isn, HOST_ISN_ACTIVE if active else 0)

    def set_ring(self, descs: dict[int, tuple], **key):
        """descs: slot -> (start, end, tensor_id, layer, len_pkts, mss)"""
        from datapath.host_maps import HostDesc, HostRing

        ring = HostRing()
        for slot, (start, end, tid, layer, len_pkts, mss) in descs.items():
            ring.desc[slot] = HostDesc(start & M32, end & M32, tid, len_pkts, mss, layer)
        self.maps.flow_rings[self.key(**key)] = ring


@pytest.fixture(scope="module")
def host_dp(bcc, tmp_path_factory):
    from datapath.host_loader import HostDatapath

    dp = HostDatapath(None, tmp_path_factory.mktemp("unused-pins")).load()
    try:
        yield Host(dp)
    finally:
        dp.close()


@pytest.fixture
def host(host_dp):
    host_dp.reset()
    return host_dp


def frame(seq: int = 1, payload: bytes = b"", flags: str = "PA", src=SRC, dst=DST,
          sport=SPORT, dport=DPORT, ip_options=None, ip_flags="DF", **ip) -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    ipl = IP(src=src, dst=dst, flags=ip_flags, **ip)
    if ip_options is not None:
        ipl.options = ip_options
    pkt = (Ether(src="02:74:6c:00:00:01", dst="02:74:6c:00:00:02") / ipl
           / TCP(sport=sport, dport=dport, seq=seq & M32, ack=1, flags=flags,
                 options=[("Timestamp", (1, 2))]))
    return bytes(pkt / Raw(payload) if payload else pkt)


def ip_checksum_ok(frame: bytes) -> bool:
    """The IPv4 header checksum of an Ethernet frame is the one scapy computes."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    importlib.import_module("common.wire")  # registers IPOption_TaLB: the option parses as itself

    ip = Ether(frame)[IP]
    fresh = ip.copy()
    del fresh.chksum
    return IP(bytes(fresh)).chksum == ip.chksum


def assert_tagged(inp: bytes, out: bytes, *, tensor_id, layer, tensor_len, pkt_idx, last):
    """``out`` is ``inp`` with the option pushed right after the base header."""
    from common.wire import FLAG_LAST, OPT_LEN, TaLBHeader

    assert len(out) == len(inp) + OPT_LEN
    assert out[:14] == inp[:14]                           # Ethernet untouched
    assert out[14] >> 4 == 4 and out[14] & 0x0F == 8      # IHL 8
    assert struct.unpack("!H", out[16:18])[0] == struct.unpack("!H", inp[16:18])[0] + OPT_LEN
    # the rest of the base header is unchanged (except length and checksum)
    assert out[15] == inp[15] and out[18:24] == inp[18:24] and out[26:34] == inp[26:34]
    assert ip_checksum_ok(out)
    assert out[14 + 32:] == inp[14 + 20:]                 # TCP header + payload, byte for byte
    hdr = TaLBHeader.unpack(out[34:46])
    assert hdr == TaLBHeader(tensor_id, layer, tensor_len, pkt_idx, last), hdr
    assert bool(out[41] & FLAG_LAST) == last


def test_map_layouts_match_the_mirrors(host):
    from datapath import host_maps as H

    for name, (kt, vt, mtype) in H.HOST_MAP_SPECS.items():
        info = host.maps[name].info
        assert info.name == name and info.type == mtype
        assert (info.key_size, info.value_size) == (ctypes.sizeof(kt), ctypes.sizeof(vt))
    assert host.maps.flow_rings.info.max_entries == H.HOST_MAX_TAGGED_FLOWS
    assert host.maps.flow_isn.info.max_entries == H.HOST_MAX_FLOWS
    assert host.maps.counters.info.max_entries == H.HOST_NR_COUNTERS
    assert host.maps.tensor_wire.info.max_entries == H.HOST_MAX_WIRE_TENSORS
    assert ctypes.sizeof(H.HostRing) == 20 * H.HOST_RING_SLOTS
    assert H.HOST_COUNTER_NAMES[H.HOST_CONST["HOST_CNT_TAGGED"]] == "tagged"


def test_option_flags_agree_with_wire_format():
    from common import wire
    from datapath import host_maps as H

    assert H.HOST_OPT_VERSION == wire.VERSION and H.HOST_OPT_F_LAST == wire.FLAG_LAST


def test_syn_learns_isn_active_and_synack_passive(host):
    syn = frame(seq=0xFFFFFFF0, flags="S")
    ret, out, _ = host.run(syn)
    assert ret == TC_ACT_OK and out == syn
    isn = host.maps.flow_isn[host.key()]
    assert (isn.isn, isn.active) == (0xFFFFFFF0, True)

    synack = frame(seq=777, flags="SA", src=DST, dst=SRC, sport=DPORT, dport=SPORT)
    ret, out, _ = host.run(synack)
    assert ret == TC_ACT_OK and out == synack
    isn = host.maps.flow_isn[host.key(src=DST, sport=DPORT, dst=SRC, dport=SPORT)]
    assert (isn.isn, isn.active) == (777, False)
    assert host.counters() == {"isn_learned": 2}

    # simultaneous open: our SYN-ACK repeats our SYN's ISN, the SYN still counts
    host.run(frame(seq=0xFFFFFFF0, flags="SA"))
    assert host.maps.flow_isn[host.key()].active
    # a new connection on the 4-tuple (another ISN) replaces the entry
    host.run(frame(seq=5, flags="SA"))
    isn = host.maps.flow_isn[host.key()]
    assert (isn.isn, isn.active) == (5, False)


def test_syn_drops_a_stale_ring_of_the_4_tuple(host):
    host.set_ring({0: (0, 100, 1, 0, 1, MSS)})
    host.run(frame(seq=10, flags="S"))
    assert host.maps.flow_rings.get(host.key()) is None
    host.run(frame(seq=11, payload=b"x" * 10))
    assert host.counters() == {"isn_learned": 1, "untagged_no_ring": 1}


# tensor A: [0, 3000) in slot 5; tensor B: [3000, 3100) in slot 17 (ring order is free)
A = (0, 3000, 0xA0A0A0A1, 3, 3, MSS)
B = (3000, 3100, 0xB0B0B0B2, 7, 1, MSS)


@pytest.mark.parametrize("off, n, want", [
    (0, MSS, (A, 0, False)),
    (MSS, MSS, (A, 1, False)),
    (2 * MSS, 3000 - 2 * MSS, (A, 2, True)),      # exactly to the end of A
    (2 * MSS, MSS, (A, 2, True)),                 # straddles A|B: A's, LAST
    (2999, 1, (A, 2, True)),                      # A's last byte alone
    (3000, 100, (B, 0, True)),
    (3000, 50, (B, 0, False)),
    (3050, 50, (B, 0, True)),                     # pkt_idx = 50 // MSS
    (100, 500, (A, 0, False)),                    # not MSS-aligned
], ids=lambda v: str(v) if not isinstance(v, tuple) else None)
def test_data_segment_gets_the_owning_tensors_tag(host, off, n, want):
    isn = 0xFFFFFFFF - 2000  # the stream wraps 2^32 inside tensor A
    host.set_isn(isn)
    host.set_ring({5: A, 17: B})
    (start, end, tid, layer, len_pkts, _), idx, last = want
    inp = frame(seq=isn + 1 + off, payload=bytes(random.Random(off).randbytes(n)))
    ret, out, _ = host.run(inp)
    assert ret == TC_ACT_OK
    assert_tagged(inp, out, tensor_id=tid, layer=layer, tensor_len=len_pkts, pkt_idx=idx, last=last)
    assert host.counters() == {"tagged": 1}


def test_tagged_output_dissects_with_scapy(host):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from common.wire import TaLBHeader, talb_header_of

    host.set_isn(1000)
    host.set_ring({0: A})
    _, out, _ = host.run(frame(seq=1001 + MSS, payload=b"y" * MSS))
    pkt = Ether(out)
    assert talb_header_of(pkt) == TaLBHeader(A[2], A[3], A[4], 1, False)
    assert pkt[IP].ihl == 8 and pkt[IP].len == 20 + 12 + 32 + MSS
    assert bytes(pkt[TCP].payload) == b"y" * MSS


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(isn=st.integers(0, M32), sizes=st.lists(st.integers(1, 20_000), min_size=1, max_size=6),
       base=st.integers(0, M32), mss=st.integers(500, 9000), data=st.data())
def test_tag_matches_reference_anywhere_in_the_stream(host, isn, sizes, base, mss, data):
    """Random ISNs, stream positions (wrap-around included), tensor sizes,
    MSS and segments: the tag is the reference's."""
    host.reset()
    host.set_isn(isn)
    descs, start = {}, base
    slots = data.draw(st.permutations(range(32)))
    for i, size in enumerate(sizes):
        descs[slots[i]] = (start, start + size, 0x1000 + i, i, -(-size // mss), mss)
        start += size
    host.set_ring(descs)
    off = data.draw(st.integers(base, start - 1))
    n = data.draw(st.integers(1, 1448))
    inp = frame(seq=isn + 1 + off, payload=b"z" * n)
    _, out, _ = host.run(inp)
    (s, e, tid, layer, len_pkts, m), = [d for d in descs.values() if d[0] <= off < d[1]]
    assert_tagged(inp, out, tensor_id=tid, layer=layer, tensor_len=len_pkts,
                  pkt_idx=(off - s) // m, last=off + n >= e)


def _wire(host, tid):
    w = host.maps.tensor_wire.get(tid)
    return None if w is None else (w.first_ns, w.last_ns, w.latest_ns, w.packets)


def test_tagged_packets_stamp_their_tensors_egress_times(host):
    """tensor_wire: the first tagged packet of a tensor starts its entry
    (first = latest = now), each later one moves latest and counts, the
    first pass of the LAST packet sets last, a retransmission (of the LAST
    packet too) counts and moves latest only; each tensor has its own entry.
    Times are CLOCK_MONOTONIC, the clock of time.monotonic_ns()."""
    host.set_isn(1000)
    host.set_ring({5: A, 17: B})
    a_id, b_id = A[2], B[2]
    t0 = time.monotonic_ns()
    host.run(frame(seq=1001, payload=b"a" * MSS))                  # A pkt 0
    t1 = time.monotonic_ns()
    first, last, latest, packets = _wire(host, a_id)
    assert t0 <= first == latest <= t1 and (last, packets) == (0, 1)
    assert _wire(host, b_id) is None
    host.run(frame(seq=1001 + MSS, payload=b"a" * MSS))            # A pkt 1
    host.run(frame(seq=1001 + 2 * MSS, payload=b"a" * (3000 - 2 * MSS)))   # A pkt 2, LAST
    t2 = time.monotonic_ns()
    f2, l2, latest2, packets = _wire(host, a_id)
    assert f2 == first and t1 <= l2 == latest2 <= t2 and packets == 3
    host.run(frame(seq=1001, payload=b"a" * MSS))                  # A pkt 0 again: retransmitted
    host.run(frame(seq=1001 + 2 * MSS, payload=b"a" * (3000 - 2 * MSS)))   # LAST again (a probe)
    f3, l3, latest3, packets = _wire(host, a_id)
    assert (f3, l3) == (first, l2) and latest3 >= latest2 and packets == 5
    host.run(frame(seq=1001 + 3000, payload=b"b" * 100))           # B: one packet, LAST
    bf, bl, blatest, bp = _wire(host, b_id)
    assert bf == bl == blatest >= latest3 and bp == 1
    assert host.counters() == {"tagged": 6}
    assert host.maps.tensor_wire[a_id].last_seen and host.maps.tensor_wire[b_id].last_seen


def test_untagged_packets_stamp_nothing(host):
    host.set_isn(1000)
    host.set_ring({0: A, 1: B})
    host.set_ring({0: A}, sport=SPORT + 2)  # a ring, but no ISN
    for make in UNTAGGED.values():
        host.run(make())
    assert list(host.maps.tensor_wire.keys()) == []


def test_a_stale_entry_of_the_same_id_starts_afresh(host):
    """Ids come back after ~17.5 min (Snowflake's 20-bit ms clock): an entry
    idle longer than HOST_WIRE_STALE_NS belongs to an earlier tensor and is
    replaced, not continued; one idle for less is continued (a retransmission
    after a long RTO backoff)."""
    from datapath.host_maps import HOST_WIRE_STALE_NS, HostWire

    host.set_isn(1000)
    host.set_ring({0: A})
    now = time.monotonic_ns()
    ancient = now - HOST_WIRE_STALE_NS - 10**9
    host.maps.tensor_wire[A[2]] = HostWire(ancient - 5, ancient, ancient, 9)
    host.run(frame(seq=1001 + MSS, payload=b"a" * MSS))
    first, last, latest, packets = _wire(host, A[2])
    assert now <= first == latest and (last, packets) == (0, 1)
    # idle for a minute only: the same tensor still
    recent = time.monotonic_ns() - 60 * 10**9
    host.maps.tensor_wire[A[2]] = HostWire(recent - 5, 0, recent, 9)
    host.run(frame(seq=1001 + 2 * MSS, payload=b"a" * (3000 - 2 * MSS)))
    first, last, latest, packets = _wire(host, A[2])
    assert first == recent - 5 and last == latest > recent and packets == 10
    # an entry stamped in the future (not this clock's) is not continued either
    host.maps.tensor_wire[A[2]] = HostWire(2**63, 2**63, 2**63, 3)
    t = time.monotonic_ns()
    host.run(frame(seq=1001, payload=b"a" * MSS))
    first, last, latest, packets = _wire(host, A[2])
    assert t <= first == latest < 2**63 and (last, packets) == (0, 1)


def test_wire_times_reads_only_the_ids_asked_for(host):
    host.set_isn(1000)
    host.set_ring({5: A, 17: B})
    host.run(frame(seq=1001, payload=b"a" * MSS))
    host.run(frame(seq=1001 + 3000, payload=b"b" * 100))
    got = host.maps.wire_times([A[2], 0x12345678])
    assert list(got) == [A[2]] and got[A[2]].packets == 1 and not got[A[2]].last_seen


def _arp() -> bytes:
    from scapy.layers.l2 import ARP, Ether

    return bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=SRC, pdst=DST))


def _udp() -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return bytes(Ether() / IP(src=SRC, dst=DST) / UDP(sport=SPORT, dport=DPORT) / (b"u" * 40))


def _with_ip_options() -> bytes:
    from scapy.layers.inet import IPOption_NOP

    return frame(seq=1001, payload=b"x" * 100, ip_options=[IPOption_NOP()] * 4)


def _fragment() -> bytes:
    return frame(seq=1001, payload=b"x" * 100, ip_flags="MF")


UNTAGGED = {
    "pure_ack": lambda: frame(seq=1001 + 500),
    "fin": lambda: frame(seq=1001 + 3000, flags="FA"),
    "rst": lambda: frame(seq=1001 + 3000, flags="R"),
    "no_ring": lambda: frame(seq=1001, payload=b"x" * 100, sport=SPORT + 1),
    "no_isn": lambda: frame(seq=1001, payload=b"x" * 100, sport=SPORT + 2),
    "no_descriptor": lambda: frame(seq=1001 + 3100, payload=b"x" * 100),
    "before_descriptors": lambda: frame(seq=1000 - 50, payload=b"x" * 40),
    "ip_options": _with_ip_options,
    "not_tcp_udp": _udp,
    "not_tcp_arp": _arp,
    "malformed_tcp": lambda: frame(seq=1001, payload=b"x" * 100)[:14 + 20 + 10],
    "malformed_ip_len": lambda: frame(seq=1001, payload=b"x" * 100, len=30),
    "fragment": _fragment,
}
REASON = {
    "pure_ack": "pure_ack", "fin": "pure_ack", "rst": "pure_ack",
    "no_ring": "untagged_no_ring", "no_isn": "untagged_no_isn",
    "no_descriptor": "untagged_no_descriptor", "before_descriptors": "untagged_no_descriptor",
    "ip_options": "untagged_ip_options", "not_tcp_udp": "not_tcp", "not_tcp_arp": "not_tcp",
    "malformed_tcp": "malformed", "malformed_ip_len": "malformed",
    "fragment": "untagged_fragment",
}


@pytest.mark.parametrize("case", list(UNTAGGED))
def test_untagged_packets_pass_unchanged_counted_by_reason(host, case):
    host.set_isn(1000)
    host.set_ring({0: A, 1: B})
    host.set_ring({0: A}, sport=SPORT + 2)  # a ring, but no ISN
    inp = UNTAGGED[case]()
    ret, out, _ = host.run(inp)
    assert ret == TC_ACT_OK
    assert out == inp
    assert host.counters() == {REASON[case]: 1}


def test_gso_skb_is_not_tagged(host):
    from datapath import bpf_syscall as sc

    host.set_isn(1000)
    host.set_ring({0: A})
    inp = frame(seq=1001, payload=b"x" * 2000)
    ret, out, _ = host.run(inp, ctx=sc.SkBuff(gso_size=1000, gso_segs=2))
    assert ret == TC_ACT_OK and out == inp
    assert host.counters() == {"untagged_gso": 1}


def test_every_packet_counted_exactly_once(host):
    host.set_isn(1000)
    host.set_ring({0: A, 1: B})
    frames = [f() for f in UNTAGGED.values()] + [frame(seq=1001 + i * MSS, payload=b"q" * MSS)
                                                  for i in range(3)]
    for f in frames:
        host.run(f)
    c = host.counters()
    assert sum(c.values()) == len(frames)
    assert c["tagged"] == 3


@pytest.mark.bench
@pytest.mark.alone  # ns per packet: another process on the CPU is in the number
def test_tagging_cost(host, bcc, record_property, capsys):
    """ns per packet (BPF_PROG_TEST_RUN), against an empty program.

    A repeated test run reruns the program on the same skb, which the first
    push changes, so the push is timed with single runs (median of many, the
    empty program's median subtracted); the paths that leave the packet alone
    with repeat=100000."""
    from datapath import bpf_syscall as sc

    b = bcc.BPF(text=b"int empty(struct __sk_buff *skb) { return 0; }")
    try:
        empty_fd = b.load_func(b"empty", bcc.BPF.SCHED_CLS).fd
        host.set_isn(1000)
        full = {i: (i * 5000, i * 5000 + 5000, i, i, 4, MSS) for i in range(32)}
        host.set_ring(full)
        tagged = frame(seq=1001 + 31 * 5000 + 100, payload=b"x" * MSS)  # last slot: 32 checks
        runs = 3000

        def single(fd):
            return statistics.median(sc.prog_test_run(fd, tagged)[2] for _ in range(runs))

        empty_1, tag_1 = single(empty_fd), single(host.dp.prog_fd)
        assert host.counters()["tagged"] == runs

        def repeated(fd, f):
            return sc.prog_test_run(fd, f, repeat=100_000)[2]

        empty_r = repeated(empty_fd, tagged)
        no_ring = repeated(host.dp.prog_fd, frame(seq=1001, payload=b"x" * MSS, sport=1))
        pure_ack = repeated(host.dp.prog_fd, frame(seq=1001))
        search = repeated(host.dp.prog_fd, frame(seq=1001 + 32 * 5000, payload=b"x" * MSS))
    finally:
        b.cleanup()
    numbers = {"push_ns": tag_1 - empty_1, "single_run_empty_ns": empty_1,
               "single_run_tagged_ns": tag_1, "empty_ns": empty_r, "untagged_no_ring_ns": no_ring,
               "pure_ack_ns": pure_ack, "full_ring_search_miss_ns": search}
    record_property("host_tagging_cost", numbers)
    with capsys.disabled():
        print("\n  host tagging cost (BPF_PROG_TEST_RUN, 1514 B frames): "
              + ", ".join(f"{k} {v}" for k, v in numbers.items()))
    assert host.counters()["tagged"] >= runs  # the timed path is the tagging one


# ====================================================================================
# Part 2: live, two hosts on one veth pair
# ====================================================================================
class Pair:
    """h1 (198.18.0.1) --veth-- h2 (198.18.0.2), the host program on both."""

    IPS = {"h1": SRC, "h2": DST}

    def __init__(self):
        from common import paths

        self.prefix = new_prefix()
        self.ns = {h: paths.netns_name(self.prefix, h) for h in self.IPS}
        self.pin = {h: paths.pin_dir(self.prefix, h) for h in self.IPS}
        self.extra_bpf = []

    def build(self):
        from pyroute2 import IPRoute

        from datapath.host_loader import HostDatapath
        from datapath.loader import ensure_bpffs
        from netns_topology import create_namespace

        for ns in self.ns.values():
            create_namespace(ns)
            run_in(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                  "net.ipv6.conf.default.disable_ipv6=1", "net.ipv4.tcp_congestion_control=cubic")
        with IPRoute(netns=self.ns["h1"], flags=0) as ipr:
            ipr.link("add", ifname="eth0", kind="veth",
                     peer={"ifname": "eth0", "net_ns_fd": self.ns["h2"]})
        macs = {}
        for h, ns in self.ns.items():
            with IPRoute(netns=ns, flags=0) as ipr:
                i = ipr.link_lookup(ifname="eth0")[0]
                ipr.link("set", index=i, mtu=1600, gso_max_segs=1)
                ipr.addr("add", index=i, address=self.IPS[h], prefixlen=24)
                ipr.link("set", index=i, state="up")
                macs[h] = ipr.get_links(i)[0].get_attr("IFLA_ADDRESS")
        for h, ns in self.ns.items():
            peer = "h2" if h == "h1" else "h1"
            with IPRoute(netns=ns, flags=0) as ipr:
                i = ipr.link_lookup(ifname="eth0")[0]
                ipr.neigh("add", dst=self.IPS[peer], lladdr=macs[peer], state=0x80, ifindex=i)
                # 1500-byte packets before the push, as on the fabric's hosts
                ipr.route("add", dst=f"{self.IPS[peer]}/32", oif=i,
                          metrics={"advmss": 1460})
            # MTU-sized segments are what the tags describe: offloads off, always.
            if not shutil.which("ethtool"):
                skip_or_fail("ethtool not installed")
            run_in(ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "off")
        ensure_bpffs()
        for h, ns in self.ns.items():
            with HostDatapath(ns, self.pin[h]) as dp:
                dp.load().attach(["eth0"])
                dp.pin()

    def maps(self, h):
        from datapath.host_maps import HostMaps

        return HostMaps(self.pin[h])

    @contextmanager
    def connection(self):
        """A TCP connection from h1 to h2: yields (h1's socket, h2's accepted
        one), both closed afterwards."""
        srv = socket_in(self.ns["h2"], socket.AF_INET, socket.SOCK_STREAM)
        cli = socket_in(self.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
        with srv, cli:
            srv.bind((DST, 0))
            srv.listen(1)
            cli.connect((DST, srv.getsockname()[1]))
            conn, _ = srv.accept()
            with conn:
                yield cli, conn

    def teardown(self):
        from pyroute2 import netns

        from common import paths
        from datapath.loader import remove_pins

        for b in self.extra_bpf:
            b.cleanup()
        for ns in self.ns.values():
            try:
                netns.remove(ns)
            except Exception:
                pass
        remove_pins(paths.pin_dir(self.prefix))


@pytest.fixture
def pair(bcc):
    p = Pair()
    try:
        try:
            p.build()
        except PermissionError as exc:
            skip_or_fail(f"cannot build namespaces: {exc}")
        yield p
    finally:
        p.teardown()


PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
ETH_P_ALL = 0x0003


class Capture:
    """Every frame on ``ifname`` in namespace ``ns`` (a raw packet socket:
    taps see outgoing frames after TC egress, incoming ones before TC
    ingress)."""

    def __init__(self, ns: str, ifname: str = "eth0"):
        self.sock = socket_in(ns, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self.sock.bind((ifname, 0))
        self.frames: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while True:
            if select.select([self.sock], [], [], 0.02)[0]:
                data, addr = self.sock.recvfrom(65535)
                self.frames.append((addr[2], data))
            elif self._stop.is_set():
                return

    def stop(self) -> list[tuple[int, bytes]]:
        time.sleep(0.1)
        self._stop.set()
        self._thread.join(10)
        _, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        self.sock.close()
        assert drops == 0, f"capture dropped {drops} frames"
        return self.frames

    def outgoing(self):
        return [f for t, f in self.stop() if t == PACKET_OUTGOING]


DROP_ANY = 0xFFFFFFFF
_DROP_SRC = b"""
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
struct drop_cfg { u32 layer; u32 pkt_idx; u32 remaining; u32 dropped; };
BPF_ARRAY(cfg, struct drop_cfg, 1);
/* Drop TaLB-tagged frames of a layer / packet index, `remaining` times. */
int drop_tagged(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    struct iphdr *ip = data + sizeof(*eth);
    u8 *opt = (u8 *)(ip + 1);
    int zero = 0;
    struct drop_cfg *c;
    u32 idx;

    if ((void *)(opt + 12) > end || eth->h_proto != htons(ETH_P_IP) || ip->ihl != 8
        || opt[0] != 0x9E)
        return TC_ACT_OK;
    c = cfg.lookup(&zero);
    if (!c || !c->remaining)
        return TC_ACT_OK;
    idx = ((u32)opt[10] << 8) | opt[11];
    if ((c->layer != 0xFFFFFFFF && c->layer != opt[6])
        || (c->pkt_idx != 0xFFFFFFFF && c->pkt_idx != idx))
        return TC_ACT_OK;
    c->remaining -= 1;
    c->dropped += 1;
    return TC_ACT_SHOT;
}
"""


class Dropper:
    """A TC ingress program on a host's eth0 that drops chosen tagged frames."""

    class Cfg(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("layer", "pkt_idx", "remaining", "dropped")]

    def __init__(self, pair: Pair, h: str):
        from bcc import BPF
        from pyroute2 import IPRoute

        self.bpf = BPF(text=_DROP_SRC)
        pair.extra_bpf.append(self.bpf)
        fn = self.bpf.load_func(b"drop_tagged", BPF.SCHED_CLS)
        with IPRoute(netns=pair.ns[h], flags=0) as ipr:
            i = ipr.link_lookup(ifname="eth0")[0]
            ipr.tc("replace-filter", "bpf", i, 2, fd=fn.fd, name="drop_tagged",
                   parent="ffff:fff2", prio=2, classid=1, direct_action=True)
        self.table = self.bpf[b"cfg"]

    def set(self, layer=DROP_ANY, pkt_idx=DROP_ANY, remaining=1):
        self.table[ctypes.c_int(0)] = self.Cfg(layer, pkt_idx, remaining, self.dropped)

    @property
    def dropped(self) -> int:
        return self.table[ctypes.c_int(0)].dropped


class Receiver:
    """Accepts ``n`` connections in a namespace; reads each to EOF, then
    sends back the SHA-256 of what it read."""

    def __init__(self, ns: str, ip: str, n: int = 1):
        self.srv = socket_in(ns, socket.AF_INET, socket.SOCK_STREAM)
        self.srv.bind((ip, 0))
        self.srv.listen(n)
        self.port = self.srv.getsockname()[1]
        self.data: dict[int, bytes] = {}
        self.errors = []
        self._threads = [threading.Thread(target=self._serve, daemon=True) for _ in range(n)]
        for t in self._threads:
            t.start()

    def _serve(self):
        try:
            self.srv.settimeout(30)
            conn, (_, peer_port) = self.srv.accept()
            with conn:
                conn.settimeout(30)
                chunks = []
                while chunk := conn.recv(1 << 20):
                    chunks.append(chunk)
                self.data[peer_port] = b"".join(chunks)
                conn.sendall(hashlib.sha256(self.data[peer_port]).digest())
        except Exception as exc:
            self.errors.append(exc)

    def join(self):
        for t in self._threads:
            t.join(30)
        self.srv.close()
        assert not self.errors, self.errors


def _finish(sock: socket.socket, sent: bytes) -> None:
    """Half-close, and check the receiver's digest of what it read."""
    sock.shutdown(socket.SHUT_WR)
    got = b""
    while len(got) < 32 and (chunk := sock.recv(32 - len(got))):
        got += chunk
    assert got == hashlib.sha256(sent).digest(), "receiver got other bytes than were sent"


def _parse(frames, sport: int, dport: int):
    """TCP frames of one direction of a flow as (seq, flags, payload, tag, raw)."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from common.wire import talb_header_of

    out = []
    for raw in frames:
        pkt = Ether(raw)
        if TCP not in pkt or pkt[TCP].sport != sport or pkt[TCP].dport != dport:
            continue
        ip = pkt[IP]
        payload = bytes(pkt[TCP].payload)[: ip.len - ip.ihl * 4 - pkt[TCP].dataofs * 4]
        out.append((pkt[TCP].seq, str(pkt[TCP].flags), payload, talb_header_of(pkt), raw))
    return out


def check_stream(segments, records, stream: bytes) -> dict:
    """Every data segment tagged as its records say, pure ACKs untagged, the
    bytes on the wire the stream's; returns a summary."""
    from common.wire import OPT_LEN

    syn = [s for s in segments if "S" in s[1]]
    assert syn, "no SYN captured"
    isn = syn[0][0]
    data_pkts = pure_acks = 0
    last_seen = set()
    by_seq: dict[int, list] = {}
    offsets: dict[int, set] = {}
    for seq, flags, payload, tag, raw in segments:
        if "S" in flags:
            assert tag is None
            continue
        if not payload:
            assert tag is None, f"pure ACK/FIN tagged: {flags} {tag}"
            pure_acks += 1
            continue
        data_pkts += 1
        off = (seq - isn - 1) & M32
        assert stream[off:off + len(payload)] == payload, f"payload at {off} differs"
        rec = next(r for r in records if r.stream_start <= off < r.stream_end)
        assert tag is not None, f"data segment at stream offset {off} untagged"
        ihl = raw[14] & 0x0F
        assert ihl == 8 and ip_checksum_ok(raw)
        assert struct.unpack("!H", raw[16:18])[0] == 20 + OPT_LEN + (raw[46 + 12] >> 4) * 4 \
            + len(payload)
        last = off + len(payload) >= rec.stream_end
        assert (tag.tensor_id, tag.layer, tag.tensor_len, tag.pkt_idx, tag.last) == (
            rec.tensor_id, rec.layer, rec.len_pkts, (off - rec.stream_start) // rec.mss, last), \
            (off, rec, tag)
        if last:
            last_seen.add(rec.tensor_id)
        by_seq.setdefault(seq, []).append(tag)
        offsets.setdefault(rec.tensor_id, set()).add(off)
    assert last_seen == {r.tensor_id for r in records}, "a tensor without its LAST packet"
    # MSG_EOR: every tensor starts a segment and is cut at MSS boundaries, so
    # it leaves in exactly len_pkts packets (retransmissions aside)
    for r in records:
        assert offsets[r.tensor_id] == set(range(r.stream_start, r.stream_end, r.mss)), r
    retrans = {seq: tags for seq, tags in by_seq.items() if len(tags) > 1}
    return {"isn": isn, "data": data_pkts, "pure_acks": pure_acks, "retransmitted": retrans}


def test_kernel_counts_the_syn_in_bytes_acked_on_the_active_side_only(pair):
    """The fact the library's stream offsets rest on (tensor_sender.py), and
    the program's record of which side opened the flow."""
    from datapath.host_maps import HostFlowKey
    from workload.tensor_sender import _TCPI_BYTES_ACKED

    def acked(s):
        raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 128)
        return struct.unpack_from("=Q", raw, _TCPI_BYTES_ACKED)[0]

    with pair.connection() as (cli, conn):
        time.sleep(0.05)
        assert (acked(cli), acked(conn)) == (1, 0)
        cli.sendall(b"a" * 1000)
        conn.sendall(b"b" * 77)
        deadline = time.monotonic() + 5
        while (acked(cli), acked(conn)) != (1001, 77) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (acked(cli), acked(conn)) == (1001, 77)
        with pair.maps("h1") as m1, pair.maps("h2") as m2:
            assert m1.flow_isn[HostFlowKey.of_socket(cli)].active
            assert not m2.flow_isn[HostFlowKey.of_socket(conn)].active


def test_live_tensors_tagged_retransmission_keeps_tag_plain_flow_untagged(pair, record_property,
                                                                          capsys):
    from workload.tensor_sender import TensorSender

    drop_layer, drop_idx = 2, 3
    dropper = Dropper(pair, "h2")
    dropper.set(layer=drop_layer, pkt_idx=drop_idx, remaining=1)
    rx = Receiver(pair.ns["h2"], DST, n=2)
    cap = Capture(pair.ns["h1"])
    rng = random.Random(7)
    plan = [(0, 100), (1, 5000), (drop_layer, 40_000), (3, 1448), (1, 1449), (0, 200_000),
            (5, 3000), (4, 1), (drop_layer, 60_000), (6, 2 * 1448)]
    tensors = [(layer, rng.randbytes(n)) for layer, n in plan]
    plain_payload = rng.randbytes(300_000)

    tagged_sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    plain_sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    with tagged_sock, plain_sock:
        tagged_sock.connect((DST, rx.port))
        plain_sock.connect((DST, rx.port))
        tx = TensorSender(tagged_sock, pin_dir=pair.pin["h1"], worker_id=5)
        records = [tx.send(data, layer=layer) for layer, data in tensors]
        plain_sock.sendall(plain_payload)
        stream = b"".join(d for _, d in tensors)
        _finish(tagged_sock, stream)
        _finish(plain_sock, plain_payload)
        tx.close()
        retrans = struct.unpack_from("I", tagged_sock.getsockopt(
            socket.IPPROTO_TCP, socket.TCP_INFO, 128), 100)[0]  # tcpi_total_retrans
        tports = tagged_sock.getsockname()[1], plain_sock.getsockname()[1]
    rx.join()
    frames = cap.outgoing()

    # records: consecutive stream ranges from 0, ids of worker 5, sizes in packets
    assert [r.stream_start for r in records] == [sum(n for _, n in plan[:i]) for i in range(len(plan))]
    assert all(r.tensor_id & 0xF == 5 for r in records)
    assert len({r.tensor_id for r in records}) == len(records)
    assert [r.len_pkts for r in records] == [-(-n // MSS) for _, n in plan]
    assert {r.mss for r in records} == {MSS}

    summary = check_stream(_parse(frames, tports[0], rx.port), records, stream)
    plain = _parse(frames, tports[1], rx.port)
    assert sum(1 for s in plain if s[2]) > 200 and all(s[3] is None for s in plain)
    assert summary["pure_acks"] >= 2  # the handshake's, the digest's, the FIN's ACK

    # the dropped segment went out again, with its tensor's tag
    assert dropper.dropped == 1 and retrans >= 1
    dropped = [tags for tags in summary["retransmitted"].values()
               if tags[0].layer == drop_layer and tags[0].pkt_idx == drop_idx]
    assert dropped, f"no retransmission of layer {drop_layer} pkt {drop_idx} captured"
    same = {(t.tensor_id, t.layer, t.tensor_len, t.pkt_idx) for t in dropped[0]}
    assert len(same) == 1, dropped[0]  # a retransmission may differ in size, so in LAST only
    assert dropped[0][0].tensor_id == records[2].tensor_id

    with pair.maps("h1") as m:
        c = m.read_counters()
        rings_left = list(m.flow_rings.keys())
    assert rings_left == []  # close() removed the ring
    assert c["tagged"] == summary["data"]
    assert c["untagged_no_ring"] >= sum(1 for s in plain if s[2])
    assert c["push_failed"] == c["untagged_no_isn"] == c["untagged_no_descriptor"] == 0
    assert c["untagged_gso"] == c["untagged_ip_options"] == 0
    numbers = {"tagged_packets": summary["data"], "retransmitted_tagged": sum(
        len(t) - 1 for t in summary["retransmitted"].values()), "pure_acks": summary["pure_acks"],
        "plain_packets": len(plain), "counters": {k: v for k, v in c.items() if v}}
    record_property("live_tagging", numbers)
    with capsys.disabled():
        print(f"\n  live: {numbers}")


def test_live_accepted_socket_tags_too(pair):
    """The passive side (accept()): the SYN is not in bytes_acked there."""
    from workload.tensor_sender import TensorSender

    cap = Capture(pair.ns["h2"])
    sizes = [3000, 1, 10_000]
    payloads = [os.urandom(n) for n in sizes]
    got = bytearray()
    with pair.connection() as (cli, conn):
        with TensorSender(conn, pin_dir=pair.pin["h2"]) as tx:
            records = [tx.send(p, layer=i) for i, p in enumerate(payloads)]
            while len(got) < sum(sizes):
                got += cli.recv(1 << 16)
        ports = conn.getsockname()[1], conn.getpeername()[1]
    assert bytes(got) == b"".join(payloads)
    assert [r.stream_start for r in records] == [0, 3000, 3001]
    summary = check_stream(_parse(cap.outgoing(), *ports), records, b"".join(payloads))
    assert summary["data"] == 3 + 1 + 7


def test_live_ring_overrun_raises_then_waits(pair):
    from datapath.host_maps import HOST_RING_SLOTS
    from workload.tensor_sender import RingOverrunError, TensorSender

    dropper = Dropper(pair, "h2")
    rx = Receiver(pair.ns["h2"], DST)
    sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.connect((DST, rx.port))
        dropper.set(remaining=DROP_ANY)  # every tagged frame: nothing gets acknowledged
        tx = TensorSender(sock, pin_dir=pair.pin["h1"], overrun_timeout=0.3)
        sent = [tx.send(bytes([i]) * 100, layer=1) for i in range(HOST_RING_SLOTS)]
        t0 = time.monotonic()
        with pytest.raises(RingOverrunError) as ei:
            tx.send(b"late" * 25, layer=9)
        waited = time.monotonic() - t0
        msg = str(ei.value)
        assert 0.3 <= waited < 2, waited
        assert f"{SRC}:{sock.getsockname()[1]} -> {DST}:{rx.port}" in msg
        assert f"tensor {sent[0].tensor_id:#010x}" in msg and "layer 9" in msg
        assert "[0, 100)" in msg
        assert tx.stream_offset() == HOST_RING_SLOTS * 100  # the late tensor was not sent

        # the path heals: the next send waits for the first tensor's ACK
        dropper.set(remaining=0)
        tx.overrun_timeout = 10
        t0 = time.monotonic()
        late = tx.send(b"late" * 25, layer=9)
        assert time.monotonic() - t0 < 10
        assert late.stream_start == HOST_RING_SLOTS * 100
        tx.close()
        _finish(sock, b"".join(bytes([i]) * 100 for i in range(HOST_RING_SLOTS)) + b"late" * 25)
    rx.join()


def test_stream_offset_exact_while_acks_land_between_its_reads(pair):
    """The next tensor's stream offset is exact even when ACKs land between
    the library's system calls (its thread preempted on a loaded machine).
    acked + unacked read in two calls comes out short by the bytes an ACK
    acknowledged in between; two readings in a row short by equal ACKs
    agreed, and the tensor's descriptor began inside the bytes before it.
    On the fabric the previous tensor's last packet then left with the new
    tensor's tag, so the switch never saw that tensor end (a live entry left
    with received = tensor_len - 1; docs/talb-decisions.md). Here every read
    of the unacked queue waits for a real ACK to land first: 600 kB of plain
    data written before the tensor drain through a 20 Mbit/s egress, so ACKs
    keep coming while the tensor is described."""
    from workload.tensor_sender import TensorSender

    plain_len, tensor_len = 600_000, 30_000
    run_in(pair.ns["h1"], "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "20mbit",
           "burst", "4kb", "latency", "2s")
    rx = Receiver(pair.ns["h2"], DST)
    cap = Capture(pair.ns["h1"])
    rng = random.Random(11)
    plain, tensor = rng.randbytes(plain_len), rng.randbytes(tensor_len)
    sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, 32, 4 << 20)  # SO_SNDBUFFORCE: sendall returns at once
        sock.connect((DST, rx.port))
        tx = TensorSender(sock, pin_dir=pair.pin["h1"], worker_id=5)
        sock.sendall(plain, socket.MSG_EOR)  # untagged; MSG_EOR: the tensor starts a segment
        real_outq, landed = tx._outq, []

        def outq_after_an_ack() -> int:
            before = tx._bytes_acked()
            deadline = time.monotonic() + 5
            while tx._bytes_acked() == before < plain_len and time.monotonic() < deadline:
                time.sleep(0.0001)
            landed.append(tx._bytes_acked() - before)
            return real_outq()

        tx._outq = outq_after_an_ack
        assert tx._bytes_acked() < plain_len / 2, "the plain data drained before the test began"
        rec = tx.send(tensor, layer=1)
        tx._outq = real_outq
        tx.close()
        _finish(sock, plain + tensor)
        sport = sock.getsockname()[1]
    rx.join()
    segments = _parse(cap.outgoing(), sport, rx.port)
    assert sum(1 for n in landed if n > 0) >= 2, f"no ACK landed between the reads: {landed}"
    assert rec.stream_start == plain_len, \
        f"tensor described from stream byte {rec.stream_start}, written at {plain_len}"
    isn = next(s[0] for s in segments if "S" in s[1])
    wrong = []
    for seq, flags, payload, tag, _raw in segments:
        if not payload:
            continue
        off = (seq - isn - 1) & M32
        if off < plain_len:
            if tag is not None:
                wrong.append((off, "plain byte tagged", tag))
        elif tag is None or (tag.tensor_id, tag.pkt_idx, tag.last) != (
                rec.tensor_id, (off - plain_len) // MSS, off + len(payload) >= plain_len + tensor_len):
            wrong.append((off, tag))
    assert not wrong, wrong[:5]


def test_errors_name_the_problem(pair, tmp_path):
    from datapath.host_maps import HostFlowKey
    from workload.tensor_sender import TensorSender, TensorSenderError

    rx = Receiver(pair.ns["h2"], DST)
    sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        with pytest.raises(TensorSenderError, match="not connected"):
            TensorSender(sock, pin_dir=pair.pin["h1"])
        sock.connect((DST, rx.port))
        with pytest.raises(TensorSenderError, match=r"talb testbed up"):
            TensorSender(sock, pin_dir=tmp_path)               # no host program there
        with pytest.raises(TensorSenderError, match=r"not a host of any testbed.*pin_dir="):
            TensorSender(sock)                                  # not in a testbed: say so
        with pytest.raises(ValueError, match="worker_id: must be an integer 0..15"):
            TensorSender(sock, pin_dir=pair.pin["h1"], worker_id=16)
        with TensorSender(sock, pin_dir=pair.pin["h1"]) as tx:
            with pytest.raises(TensorSenderError, match="another TensorSender already describes"):
                TensorSender(sock, pin_dir=pair.pin["h1"])
            for bad in (-1, 256, 1.5, True, "3", None):
                with pytest.raises(ValueError, match=rf"layer: must be an integer 0\.\.255.* got "
                                                     rf"{re.escape(repr(bad))}$"):
                    tx.send(b"x", layer=bad)
            with pytest.raises(ValueError, match=r"data: empty tensor"):
                tx.send(b"", layer=0)
            with pytest.raises(TypeError, match=r"data: must be a bytes-like object.*str"):
                tx.send("text", layer=0)
            with pytest.raises(ValueError, match=r"over the 16-bit tensor_len"):
                tx.send(memoryview(bytearray(65536 * MSS)), layer=0)
            assert tx.stream_offset() == 0  # nothing was sent
        # opened before the program saw the SYN: simulated by forgetting its ISN
        with pair.maps("h1") as m:
            m.flow_isn.delete(HostFlowKey.of_socket(sock))
        with pytest.raises(TensorSenderError, match=r"never saw this connection open.*talb testbed up"):
            TensorSender(sock, pin_dir=pair.pin["h1"])
        _finish(sock, b"")
    rx.join()
    for args in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET6, socket.SOCK_STREAM)):
        with socket.socket(*args) as s, pytest.raises(TensorSenderError, match="IPv4 TCP socket"):
            TensorSender(s, pin_dir=pair.pin["h1"])


def test_untagged_when_connection_predates_the_program(pair):
    """A flow whose SYN the program never saw goes out untagged, counted."""
    from datapath.host_loader import HostDatapath, egress_filter
    from datapath.host_maps import HostDesc, HostFlowKey, HostRing

    HostDatapath(pair.ns["h1"], pair.pin["h1"]).detach(["eth0"])
    assert egress_filter(pair.ns["h1"], "eth0") is None
    rx = Receiver(pair.ns["h2"], DST)
    sock = socket_in(pair.ns["h1"], socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.connect((DST, rx.port))
        # reattach, bound to the same maps (reload keeps state)
        with HostDatapath(pair.ns["h1"], pair.pin["h1"]) as dp:
            dp.load(reuse_pins=True).attach(["eth0"])
            assert egress_filter(pair.ns["h1"], "eth0")["name"].startswith("talb_host_tc")
        with pair.maps("h1") as m:
            ring = HostRing()
            ring.desc[0] = HostDesc(0, 50_000, 1, 35, MSS, 0)
            m.flow_rings[HostFlowKey.of_socket(sock)] = ring  # a ring, but no ISN
            before = m.read_counters()
            sock.sendall(b"p" * 50_000)
            _finish(sock, b"p" * 50_000)
            after = m.read_counters()
    rx.join()
    assert after["untagged_no_isn"] - before["untagged_no_isn"] >= 35
    assert after["tagged"] == before["tagged"]


# ====================================================================================
# Part 3: the whole testbed
# ====================================================================================
_SEND_SCRIPT = """
import json, socket, sys
from workload.tensor_sender import TensorSender
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
with TensorSender(s) as tx:
    recs = [tx.send(bytes([65 + i]) * 500, layer=i) for i in range(3)]
s.shutdown(socket.SHUT_WR)
s.recv(32)
print(json.dumps({"pin": str(tx.pin_dir), "records": [r.__dict__ for r in recs]}))
"""


@pytest.mark.live
def test_testbed_up_attaches_the_host_program_everywhere(bcc):
    from common import paths
    from datapath.host_loader import egress_filter
    from datapath.host_maps import HostMaps
    from netns_topology import LeafSpine
    from testbed import lifecycle
    from workload.tensor_sender import locate_host

    prefix = new_prefix()
    topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1)
    try:
        lifecycle.up(topo, prefix)
        for h in topo.hosts:
            ns = paths.netns_name(prefix, h.name)
            assert egress_filter(ns, h.iface)["name"].startswith("talb_host_tc")
            assert sorted(p.name for p in paths.pin_dir(prefix, h.name).iterdir()) == \
                ["counters", "flow_isn", "flow_rings", "sendmsg_rings", "tensor_wire"]
        h0, h1 = topo.hosts
        rx = Receiver(paths.netns_name(prefix, h1.name), h1.ip)
        # a process started with `ip netns exec` finds its host's pins itself
        r = subprocess.run(["ip", "netns", "exec", paths.netns_name(prefix, h0.name),
                            sys.executable, "-c", _SEND_SCRIPT, h1.ip, str(rx.port)],
                           cwd=REPO, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rx.join()
        out = json.loads(r.stdout)
        assert out["pin"] == str(paths.pin_dir(prefix, h0.name))
        assert [rec["layer"] for rec in out["records"]] == [0, 1, 2]
        assert rx.data and list(rx.data.values())[0] == b"A" * 500 + b"B" * 500 + b"C" * 500
        with HostMaps(paths.pin_dir(prefix, h0.name)) as m:
            assert m.read_counters()["tagged"] >= 3
        # in-process: a socket made in a host's namespace locates that host
        s = socket_in(paths.netns_name(prefix, h1.name), socket.AF_INET, socket.SOCK_STREAM)
        with s:
            loc = locate_host(s)
        assert (loc.prefix, loc.host, loc.index) == (prefix, h1.name, 1)
    finally:
        lifecycle.down(prefix)
    assert not paths.pin_dir(prefix).exists()
