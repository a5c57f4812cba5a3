"""The switch data path (bpf/switch_tc.c) under BPF_PROG_TEST_RUN.

The program is compiled by bcc and loaded and verified by the kernel; each
packet is run with ``struct __sk_buff.ifindex`` naming its ingress port. The
ports are veth devices in a namespace of this module (a test run needs the
device to exist in the caller's namespace). A test run does not execute a
redirect, so the chosen egress port is observed through ``port_stats``.
"""
from __future__ import annotations

import ctypes
import errno
import os
import random

import pytest
import hypothesis
from hypothesis import strategies as st

from conftest import new_prefix
from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC_ACT_OK = 0
TC_ACT_SHOT = 2
TC_ACT_REDIRECT = 7

N_PORTS = 6  # p0 (ingress of most tests) + p1..p5
SRC = "198.18.0.1"
DST4 = "198.18.1.4"     # group of 4 ports p1..p4
DST1 = "198.18.1.1"     # group of 1 port p5
DST_DOWN = "198.18.1.9"  # group whose only port is down (p5 marked down in a test)


# --- fixtures ------------------------------------------------------------------------
class Switch(ProgTestSwitch):
    """A loaded (not attached) data path and veth ports in a namespace."""

    def __init__(self, netns_name, dp, ifindex):
        super().__init__(netns_name, dp, ifindex, N_PORTS)
        self.ports = [(n, ifindex[n], False, True) for n in self.port_names]
        self.groups = {
            DST4: [ifindex[f"p{i}"] for i in (1, 2, 3, 4)],
            DST1: [ifindex["p5"]],
        }

    def reset(self, *, release=False, seed=12345, ports=None, groups=None):
        from datapath import control

        self.maps.counters.clear()
        self.maps.port_stats.clear()
        control.program_switch(self.maps, ports or self.ports,
                               self.groups if groups is None else groups,
                               scheme="ecmp", hash_seed=seed)
        control.set_release(self.maps, release)


@pytest.fixture(scope="module")
def switch(bcc):
    with loaded_switch("dp", N_PORTS) as (name, dp, ifindex):
        yield Switch(name, dp, ifindex)


def tcp(src=SRC, dst=DST4, sport=40000, dport=5201, **ip):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst, **ip) / TCP(sport=sport, dport=dport, flags="A"))


def udp(src=SRC, dst=DST4, sport=40000, dport=4791, payload=b"x" * 32):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / payload)


def delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


# --- the syscall layer and the maps ------------------------------------------------
def test_test_run_attaches_a_socket(switch, bcc):
    """The release tests rely on test runs setting skb->sk (a dummy socket)."""
    from pyroute2 import netns

    from datapath import bpf_syscall as sc

    b = bcc.BPF(text=b"int f(struct __sk_buff *skb) { return skb->sk ? 1 : 0; }")
    try:
        fn = b.load_func(b"f", bcc.BPF.SCHED_CLS)
        netns.pushns(switch.netns)
        try:
            ret, out, _, ctx = sc.prog_test_run(
                fn.fd, tcp(), ctx=sc.SkBuff(ifindex=switch.ifindex["p0"]))
        finally:
            netns.popns()
    finally:
        b.cleanup()
    assert ret == 1
    assert out == tcp()
    assert ctx.ifindex == switch.ifindex["p0"]


def test_test_run_errors_name_the_operation(switch):
    from datapath import bpf_syscall as sc

    with pytest.raises(OSError) as ei:
        sc.prog_test_run(switch.dp.prog_fd, b"\0" * 10)  # shorter than Ethernet
    assert ei.value.errno == errno.EINVAL
    assert "BPF_PROG_TEST_RUN" in str(ei.value)
    with pytest.raises(OSError) as ei:
        sc.obj_get("/nonexistent/pin")
    assert ei.value.errno == errno.ENOENT and "BPF_OBJ_GET /nonexistent/pin" in str(ei.value)


def test_map_info_matches_structs(switch):
    from common.c_constants import CONST
    from datapath import maps

    for name, (kt, vt, mtype) in maps.MAP_SPECS.items():
        info = switch.maps[name].info
        assert info.name == name
        assert info.type == mtype
        assert (info.key_size, info.value_size) == (ctypes.sizeof(kt), ctypes.sizeof(vt))
    assert switch.maps.port_stats.info.max_entries == CONST["TALB_MAX_PORTS"]
    assert switch.maps.counters.info.max_entries == CONST["TALB_NR_COUNTERS"]
    assert switch.maps.tensors.info.max_entries == CONST["TALB_TENSOR_MAP_SIZE"]


def test_constants_come_from_the_header():
    from common import c_constants as C

    assert C.SCHEMES["ecmp"] == 0 and C.SCHEMES["talb"] == 5
    assert C.COUNTER_NAMES[C.CONST["CNT_RELEASED"]] == "released"
    assert C.COUNTER_NAMES[C.CONST["CNT_DECISION_BASE"]] == "decision_ecmp"
    assert C.COUNTER_NAMES[C.CONST["CNT_DECISION_BASE"] + 5] == "decision_talb"
    assert C.PORT_UP and C.PORT_HOST and C.PORT_UP != C.PORT_HOST


def test_pinned_map_with_wrong_layout_is_refused(root):
    from datapath import bpf_syscall as sc
    from datapath import maps, structs
    from datapath.loader import ensure_bpffs

    d = ensure_bpffs() / new_prefix()
    d.mkdir()
    fd = sc.map_create(sc.BPF_MAP_TYPE_HASH, 4, 12, 8, name="groups")
    try:
        sc.obj_pin(fd, d / "groups")
        with pytest.raises(maps.MapLayoutError,
                           match=rf"value size 12 != {ctypes.sizeof(structs.FwdGroup)}"):
            maps.Map.from_pin(d / "groups", ctypes.c_uint32, structs.FwdGroup)
        with pytest.raises(FileNotFoundError, match="no pinned map"):
            maps.SwitchMaps(d)
    finally:
        os.close(fd)
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_maps_pinned_before_the_counters_grew_are_refused_by_name(switch):
    """Issue 37 moved the decision counters to CNT_DECISION_BASE + id (64..79)
    and sized scheme_progs for 16 schemes: a switch pinned by an older build
    (counters of 64 entries) is refused naming the map and both sizes, not
    read with its decision counters missing."""
    from common.c_constants import TALB_NR_COUNTERS
    from datapath import bpf_syscall as sc
    from datapath import maps
    from datapath.loader import ensure_bpffs

    d = ensure_bpffs() / new_prefix()
    d.mkdir()
    old = sc.map_create(sc.BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 64, name="counters")
    try:
        for name in maps.SwitchMaps.SPECS:
            sc.obj_pin(old if name == "counters" else switch.dp.map_fd(name), d / name)
        with pytest.raises(maps.MapLayoutError) as ei:
            maps.SwitchMaps(d)
        assert f"{d / 'counters'}: kernel map layout does not match" in str(ei.value)
        assert f"max_entries 64 != {TALB_NR_COUNTERS}" in str(ei.value)
        (d / "counters").unlink()
        sc.obj_pin(switch.dp.map_fd("counters"), d / "counters")
        maps.SwitchMaps(d).close()          # this build's own pins open
    finally:
        os.close(old)
        for p in d.iterdir():
            p.unlink()
        d.rmdir()


def test_percpu_values_summed_and_per_cpu(switch):
    from datapath import maps

    c = switch.maps.counters
    c.set(30, 7)  # the same value on every CPU
    try:
        assert c.get_percpu(30) == [7] * maps.possible_cpus()
        assert c.get(30) == 7 * maps.possible_cpus()
    finally:
        c.set(30, 0)


# --- forwarding ------------------------------------------------------------------------
@pytest.mark.parametrize("make", [tcp, udp], ids=["tcp", "udp"])
def test_multiport_group_redirects_and_counts_tx(switch, make):
    from datapath import control

    switch.reset(release=False)
    data = make()
    ret, out = switch.run(data)
    assert ret == TC_ACT_REDIRECT
    assert out == data  # ECMP does not rewrite the packet
    tx = {k: v for k, v in switch.tx().items() if v}
    assert len(tx) == 1
    (port, n), = tx.items()
    assert n == 1 and port in ("p1", "p2", "p3", "p4")
    c = switch.counters()
    assert c["redirected"] == 1 and c["decision_ecmp"] == 1 and c["released"] == 0
    stats = control.read_port_stats(switch.maps)
    assert stats[0]["rx_packets"] == 1 and stats[0]["rx_bytes"] == len(data)
    assert sum(s["tx_bytes"] for s in stats.values()) == len(data)


def test_release_clones_and_shoots_owned_packets(switch):
    from pyroute2 import IPRoute

    switch.reset(release=True)
    data = tcp()
    ret, out = switch.run(data)
    assert ret == TC_ACT_SHOT  # original freed; the clone went out unowned
    c = switch.counters()
    assert c["released"] == 1 and c["redirected"] == 0 and c["clone_fail"] == 0
    (port, n), = {k: v for k, v in switch.tx().items() if v}.items()
    # the clone really left through the chosen port: its peer received it
    peer = "q" + port[1:]
    with IPRoute(netns=switch.netns) as ipr:
        before = ipr.get_links(switch.ifindex[peer])[0].get_attr("IFLA_STATS64")["rx_packets"]
        switch.run(data)
        after = ipr.get_links(switch.ifindex[peer])[0].get_attr("IFLA_STATS64")["rx_packets"]
    assert after - before >= 1
    assert switch.counters()["released"] == 2


def test_same_flow_same_port_and_matches_reference_hash(switch):
    from datapath import control

    seed = 0xC0FFEE
    switch.reset(seed=seed)
    group = switch.groups[DST4]
    rng = random.Random(1)
    for _ in range(100):
        sport, dport = rng.randrange(1, 65536), rng.randrange(1, 65536)
        proto_make = rng.choice([tcp, udp])
        data = proto_make(sport=sport, dport=dport)
        chosen = set()
        for _ in range(3):
            before = switch.tx()
            assert switch.run(data)[0] == TC_ACT_REDIRECT
            (port, _), = delta(before, switch.tx()).items()
            chosen.add(port)
        assert len(chosen) == 1
        proto = 6 if proto_make is tcp else 17
        want = group[control.ecmp_index(len(group), SRC, DST4, sport, dport, proto, seed)]
        assert chosen == {switch.port_of(want)}


def test_random_flows_spread_over_all_ports(switch):
    switch.reset(seed=7)
    rng = random.Random(2)
    n = 1000
    for _ in range(n):
        src = f"198.18.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
        assert switch.run(tcp(src=src, sport=rng.randrange(1024, 65536)))[0] == TC_ACT_REDIRECT
    tx = switch.tx()
    used = [tx[f"p{i}"] for i in (1, 2, 3, 4)]
    assert sum(used) == n
    # expected 250 each; P(any < 150) for a fair hash is ~1e-12
    assert min(used) >= 0.15 * n, used


def test_hash_seed_changes_the_mapping(switch):
    flows = [tcp(sport=10000 + i) for i in range(64)]

    def mapping(seed):
        switch.reset(seed=seed)
        out = []
        for data in flows:
            before = switch.tx()
            switch.run(data)
            (port, _), = delta(before, switch.tx()).items()
            out.append(port)
        return out

    a, b, a2 = mapping(1), mapping(2), mapping(1)
    assert a == a2
    assert sum(x != y for x, y in zip(a, b)) >= 16  # ~48 expected


def test_single_port_group(switch):
    switch.reset()
    for sport in range(20):
        assert switch.run(tcp(dst=DST1, sport=sport))[0] == TC_ACT_REDIRECT
    assert switch.tx()["p5"] == 20
    c = switch.counters()
    assert c["decision_single"] == 20 and c["decision_ecmp"] == 0


def _colliding_addresses(base: str = "198.18.2.0") -> tuple[str, str]:
    """Two addresses whose route_slots index is the same (talb_route)."""
    import ipaddress

    from datapath.control import route_slot_of

    start, seen = int(ipaddress.IPv4Address(base)), {}
    for i in range(1 << 16):
        slot = route_slot_of(start + i)[0]
        if slot in seen:
            return str(ipaddress.IPv4Address(seen[slot])), str(ipaddress.IPv4Address(start + i))
        seen[slot] = start + i
    raise AssertionError("no collision in 65536 addresses")


def test_routes_found_in_their_slot_and_past_a_collision(switch):
    """route_slots holds most routes (the data path's first lookup); two
    destinations sharing a slot: the first keeps it, the other is found in
    fwd -- each packet reaches its own group; the slot's owner removed, the
    other takes the slot; a removed route's slot is emptied."""
    import ipaddress

    from datapath.control import route_slot_of

    a, b = _colliding_addresses()
    groups = {**switch.groups, a: [switch.ifindex["p5"]], b: [switch.ifindex["p1"]]}
    switch.reset(groups=groups)
    slot, wire_a = route_slot_of(int(ipaddress.IPv4Address(a)))
    assert switch.maps.route_slots[slot].daddr == wire_a      # the first (sorted) holds it
    for dst, port in ((a, "p5"), (b, "p1"), (DST1, "p5")):
        before = switch.tx()[port]
        assert switch.run(tcp(dst=dst))[0] == TC_ACT_REDIRECT, dst
        assert switch.tx()[port] == before + 1, dst
    # a's route goes: b takes the slot, a has no route
    switch.reset(groups={**switch.groups, b: [switch.ifindex["p1"]]})
    assert switch.maps.route_slots[slot].daddr == route_slot_of(int(ipaddress.IPv4Address(b)))[1]
    # and when b goes too, the slot is emptied
    switch.reset(groups={**switch.groups})
    assert switch.maps.route_slots[slot].flags == 0
    switch.reset(groups={**switch.groups, b: [switch.ifindex["p1"]]})
    before = switch.tx()["p1"]
    assert switch.run(tcp(dst=b))[0] == TC_ACT_REDIRECT
    assert switch.tx()["p1"] == before + 1
    assert switch.run(tcp(dst=a))[0] == TC_ACT_OK
    assert switch.counters()["pass_no_route"] == 1
    # every route of a table is in fwd; the slots hold exactly the ones they name
    held = {rs.daddr for _, rs in switch.maps.route_slots.items() if rs.flags}
    assert held <= {route_slot_of(k.addr)[1] for k in switch.maps.fwd.keys()}


def test_icmp_and_fragments_hash_without_ports(switch):
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.l2 import Ether

    switch.reset()
    icmp = bytes(Ether() / IP(src=SRC, dst=DST4) / ICMP())
    assert switch.run(icmp)[0] == TC_ACT_REDIRECT
    # the first fragment carries ports, later ones not: all take one path
    frags = [bytes(Ether() / f) for f in
             (IP(src=SRC, dst=DST4, id=7, flags="MF", frag=0) / UDP(sport=1, dport=2) / (b"a" * 64),
              IP(src=SRC, dst=DST4, id=7, flags="MF", frag=9, proto=17) / (b"b" * 64),
              IP(src=SRC, dst=DST4, id=7, frag=18, proto=17) / (b"c" * 8))]
    ports = set()
    for f in frags:
        before = switch.tx()
        assert switch.run(f)[0] == TC_ACT_REDIRECT
        ports |= set(delta(before, switch.tx()))
    assert len(ports) == 1
    assert switch.counters()["ip_fragment"] == 3


# --- what is passed to the bridge --------------------------------------------------------
def _assert_passed_only(switch, reason: str, n: int):
    c = switch.counters()
    assert c[reason] == n, c
    assert c["redirected"] == 0 and c["released"] == 0
    assert not any(switch.tx().values())
    passes = {k: v for k, v in c.items() if k.startswith("pass_") and v}
    assert passes == {reason: n}


def test_arp_and_ipv6_pass(switch):
    from scapy.layers.inet import TCP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import ARP, Ether

    switch.reset(release=True)
    for data in (bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=DST4)),
                 bytes(Ether() / IPv6(dst="2001:db8::1") / TCP())):
        assert switch.run(data)[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_not_ipv4", 2)


@pytest.mark.parametrize("make", [tcp, udp], ids=["tcp", "udp"])
def test_truncated_frames_pass(switch, make):
    """Every prefix of a packet, 0 to 54 bytes, under a test run. The kernel
    refuses some (EINVAL): below 14 bytes, and (6.x) an IPv4 frame without a
    whole 20-byte IP header; those lengths are covered live in
    test_truncated_frames_pass_live."""
    switch.reset(release=True)
    full = make(**({} if make is tcp else {"payload": b""}))
    hdrs = 14 + 20 + (20 if make is tcp else 8)
    assert len(full) == hdrs
    ran = forwarded = 0
    for n in range(0, 55):
        data = full[:n]
        try:
            ret, _ = switch.run(data)
        except OSError as exc:
            assert exc.errno == errno.EINVAL and n < 34, (n, exc)
            continue
        if n < hdrs:
            assert ret == TC_ACT_OK, n
            ran += 1
        else:
            assert ret == TC_ACT_SHOT, n  # complete headers: forwarded (released)
            forwarded += 1
    assert ran >= hdrs - 34 and forwarded == 55 - hdrs
    c = switch.counters()
    assert c["pass_malformed"] == ran
    assert c["released"] == forwarded
    assert sum(v for k, v in c.items() if k.startswith("pass_")) == ran


def test_truncated_frames_pass_live(switch):
    """Frames of 14..53 bytes sent from a packet socket through veth q0 ->
    p0, where the program is attached: the real ingress hook, no test-run
    restrictions."""
    import socket
    import time

    from pyroute2 import netns

    switch.reset(release=True)
    full = tcp()
    switch.dp.attach(["p0"])
    try:
        netns.pushns(switch.netns)
        try:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        finally:
            netns.popns()
        with s:
            s.bind(("q0", 0))
            for n in range(14, 55):
                s.send(full[:n])
        for _ in range(100):  # delivery is synchronous on veth; be safe
            c = switch.counters()
            if c["pass_malformed"] + c["released"] + c["redirected"] >= 41:
                break
            time.sleep(0.01)
    finally:
        switch.dp.detach(["p0"])
    assert c["pass_malformed"] == 40, c
    assert c["released"] + c["redirected"] == 1, c  # the complete 54-byte one
    assert sum(v for k, v in c.items() if k.startswith("pass_")) == 40


@pytest.mark.parametrize("ip", [dict(ihl=4), dict(ihl=0), dict(ihl=15), dict(version=6),
                                dict(len=10)],
                         ids=["ihl4", "ihl0", "ihl15-beyond-frame", "version6", "totlen<hdr"])
def test_bad_ipv4_header_passes(switch, ip):
    switch.reset()
    assert switch.run(tcp(**ip))[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_malformed", 1)


def test_ip_options_are_skipped_not_rejected(switch):
    from scapy.layers.inet import IPOption_NOP

    switch.reset()
    data = tcp(options=[IPOption_NOP()] * 12)  # IHL 8, like the TaLB option
    assert switch.run(data)[0] == TC_ACT_REDIRECT
    c = switch.counters()
    assert c["ip_options"] == 1 and c["redirected"] == 1


def test_unknown_destination_passes(switch):
    switch.reset(release=True)
    assert switch.run(tcp(dst="198.19.255.1"))[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_no_route", 1)


def test_port_down_passes(switch):
    switch.reset(ports=[(n, i, h, n != "p5") for n, i, h, _ in switch.ports], release=True)
    assert switch.run(tcp(dst=DST1))[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_egress_down", 1)


def test_group_pointing_back_to_ingress_passes(switch):
    switch.reset(release=True)
    assert switch.run(tcp(dst=DST1), ingress="p5")[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_hairpin", 1)


def test_group_with_unknown_ifindex_or_empty_passes(switch):
    from datapath.structs import FwdGroup, IPv4Key

    switch.reset()
    gid = switch.maps.fwd[IPv4Key.of(DST1)]
    switch.maps.groups[gid] = FwdGroup.of([999999])  # bypassing program_switch's check
    assert switch.run(tcp(dst=DST1))[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_egress_down", 1)
    switch.maps.counters.clear()
    switch.maps.groups[gid] = FwdGroup.of([])
    assert switch.run(tcp(dst=DST1))[0] == TC_ACT_OK
    _assert_passed_only(switch, "pass_group_empty", 1)


def test_unknown_ingress_device_passes(switch):
    switch.reset()
    assert switch.run(tcp(), ingress="q0")[0] == TC_ACT_OK
    assert switch.counters()["pass_unknown_ingress"] == 1
    assert not any(switch.tx().values())


# --- control plane ----------------------------------------------------------------------
def test_program_switch_groups_by_port_tuple_and_removes_stale_routes(switch):
    from datapath import control
    from datapath.structs import IPv4Key

    i = switch.ifindex
    groups = {"198.18.2.1": [i["p1"], i["p2"]], "198.18.2.2": [i["p1"], i["p2"]],
              "198.18.2.3": [i["p3"]]}
    res = control.program_switch(switch.maps, switch.ports, groups)
    assert res["routes"] == 3 and len(res["groups"]) == 2
    g1 = switch.maps.fwd[IPv4Key.of("198.18.2.1")]
    assert switch.maps.fwd[IPv4Key.of("198.18.2.2")] == g1
    assert switch.maps.groups[g1].ports() == [i["p1"], i["p2"]]
    # reprogram: one route gone, tuple ids stable
    del groups["198.18.2.2"]
    groups["198.18.2.4"] = [i["p4"], i["p5"]]
    control.program_switch(switch.maps, switch.ports, groups)
    assert switch.maps.fwd.get(IPv4Key.of("198.18.2.2")) is None
    assert switch.maps.fwd[IPv4Key.of("198.18.2.1")] == g1
    assert {str(k) for k in switch.maps.fwd.keys()} == set(groups)
    assert len(list(switch.maps.groups.keys())) == 3
    ports = control.read_ports(switch.maps)
    assert sorted(p["port_id"] for p in ports.values()) == list(range(N_PORTS))
    with pytest.raises(ValueError, match="not among the switch's ports"):
        control.program_switch(switch.maps, switch.ports, {"198.18.2.9": [424242]})
    with pytest.raises(ValueError, match="not an IPv4 address"):
        control.program_switch(switch.maps, switch.ports, {"fe80::1": []})
    # the data path's copy of the ports (port_slots, at ifindex % slots with
    # their ifindex): every port, and nothing else
    from common.c_constants import CONST

    n_slots = CONST["TALB_PORT_SLOTS"]
    slots = {s: switch.maps.port_slots[s] for s in range(n_slots)}
    assert {s.ifindex: (s.port_id, s.flags) for s in slots.values() if s.ifindex} == \
        {ifx: (p["port_id"], control.port_flags(p["host"], p["up"])) for ifx, p in ports.items()}
    assert all(slot == s.ifindex % n_slots for slot, s in slots.items() if s.ifindex)
    control.program_switch(switch.maps, switch.ports[1:], {})
    assert not switch.maps.port_slots[switch.ports[0][1] % n_slots].ifindex
    control.program_switch(switch.maps, switch.ports, groups)
    # two ports in one slot are refused, naming both
    twin = switch.ports[1][1] + n_slots
    with pytest.raises(ValueError, match=rf"ports\[6\] \(far\): ifindex {twin} and port p1 "
                                         rf"\(ifindex {switch.ports[1][1]}\) differ by a "
                                         rf"multiple of {n_slots}"):
        control.program_switch(switch.maps, [*switch.ports, ("far", twin, False, True)], groups)
    with pytest.raises(ValueError, match=r"ports\[6\] \(bad\): ifindex 0 is not a device"):
        control.program_switch(switch.maps, [*switch.ports, ("bad", 0, False, True)], groups)
    # a refused call left the ports as they were
    assert {s.ifindex for s in (switch.maps.port_slots[s] for s in range(n_slots)) if s.ifindex} \
        == {p[1] for p in switch.ports}


#: p0's ifindex in the far switch: past TALB_PORT_SLOTS, as a long-lived
#: root namespace's devices (Mininet's switch ports) get them
FAR_INDEX = 4996


@pytest.fixture(scope="module")
def far_switch(bcc):
    """The switch with its ports at ifindex 4996.. and a device "t0" at 900,
    the slot p0 is kept in (4996 % 4096)."""
    from pyroute2 import IPRoute

    with loaded_switch("far", N_PORTS, first_index=FAR_INDEX) as (name, dp, ifindex):
        with IPRoute(netns=name) as ipr:
            ipr.link("add", ifname="t0", index=FAR_INDEX % 4096, kind="veth",
                     peer={"ifname": "u0"})
            ifindex["t0"] = ipr.link_lookup(ifname="t0")[0]
            ipr.link("set", index=ifindex["t0"], state="up")
        yield Switch(name, dp, ifindex)


def test_ports_past_the_slot_count_forward_and_their_slot_twin_is_not_a_port(far_switch):
    """Ports at ifindex >= TALB_PORT_SLOTS forward as any others; a device
    whose ifindex shares p0's slot is an unknown ingress (a lookup by slot
    alone would take it for p0)."""
    from common.c_constants import CONST

    sw = far_switch
    assert sw.ifindex["p0"] == FAR_INDEX and sw.ifindex["t0"] == FAR_INDEX % CONST["TALB_PORT_SLOTS"]
    sw.reset()
    ret, _ = sw.run(tcp(dst=DST1))
    assert ret == TC_ACT_REDIRECT
    assert sw.tx()["p5"] == 1
    sw.reset()
    assert sw.run(tcp(dst=DST1), ingress="t0")[0] == TC_ACT_OK
    assert sw.counters()["pass_unknown_ingress"] == 1
    assert not any(sw.tx().values())


def test_set_scheme_errors(switch):
    from datapath import control

    with pytest.raises(control.SchemeError, match="unknown scheme 'nope'"):
        control.set_scheme(switch.maps, "nope")
    with pytest.raises(control.SchemeError, match="unknown scheme 'hula'"):
        control.set_scheme(switch.maps, "hula")
    control.set_scheme(switch.maps, "ECMP")
    assert control.read_config(switch.maps)["scheme"] == "ecmp"


def test_unimplemented_scheme_in_map_falls_back_to_ecmp(switch):
    from common.c_constants import SCHEMES, TALB_MAX_SCHEMES

    switch.reset()
    cfg = switch.maps.config[0]
    # an id no scheme has (no program), written behind control.set_scheme's back
    cfg.scheme = max(set(range(TALB_MAX_SCHEMES)) - set(SCHEMES.values()))
    switch.maps.config[0] = cfg
    assert switch.run(tcp())[0] == TC_ACT_REDIRECT
    c = switch.counters()
    assert c["scheme_fallback"] == 1 and c["decision_ecmp"] == 1


def test_random_frames_never_misforwarded(switch):
    """Mutated frames: passed, or forwarded to a port of the group of the
    destination they carry, never anything else."""

    from datapath.structs import IPv4Key

    switch.reset()
    base = tcp()
    valid = {switch.ifindex[n] for n in ("p1", "p2", "p3", "p4", "p5")}

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(st.lists(st.tuples(st.integers(0, len(base) - 1), st.integers(0, 255)),
                               max_size=6),
                      st.integers(14, len(base) + 8))
    def check(edits, length):
        data = bytearray(base.ljust(length, b"\0")[:length])
        for pos, val in edits:
            if pos < length:
                data[pos] = val
        before = switch.tx()
        try:
            ret, out = switch.run(bytes(data))
        except OSError as exc:  # frames a test run refuses (short IPv4/IPv6)
            assert exc.errno == errno.EINVAL
            return
        assert ret in (TC_ACT_OK, TC_ACT_REDIRECT)
        assert out == bytes(data)
        moved = delta(before, switch.tx())
        if ret == TC_ACT_OK:
            assert not moved
        else:
            (port, n), = moved.items()
            dst = int.from_bytes(data[30:34], "big")
            gid = switch.maps.fwd.get(IPv4Key(dst))
            assert gid is not None
            assert switch.ifindex[port] in switch.maps.groups[gid].ports()
            assert switch.ifindex[port] in valid

    check()


def test_source_expansion_for_bcc():
    """bcc rewrites map operations in its main file only: the loader inlines
    the project's headers, each once, with #line markers to the real files."""
    from datapath.loader import INCLUDE_DIR, SWITCH_SRC, expand_source

    text = expand_source()
    assert not any(line.lstrip().startswith('#include "') for line in text.splitlines())
    for h in ("constants.h", "structs.h", "maps.h", "parsing_helpers.h", "hash.h",
              "pkt.h", "decision.h", "schemes/ecmp.h", "schemes/talb.h", "talb_option.h",
              "scheme_api.h", "scheme_dispatch.h"):
        assert text.count(f'#line 1 "{INCLUDE_DIR / "talb" / h}"') == 1, h
    assert text.startswith(f'#line 1 "{SWITCH_SRC}"')
