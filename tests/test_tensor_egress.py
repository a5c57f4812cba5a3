"""The switch's own record of tensor integrity (map ``tensor_egress``,
bpf/include/talb/tensor_egress.h) under BPF_PROG_TEST_RUN, for the TC and
the XDP entry point alike: every tagged packet forwarded into the fabric
marks the port its tensor left by, whatever the scheme; a tensor that
leaves by two ports is seen split (its mask, CNT_TENSOR_SPLIT); untagged
packets and the last hop (a host port) leave no entry; an entry idle past
TALB_EGRESS_STALE_NS starts afresh. datapath/egress_record.py reads it as
`talb send` does.

Ports: p0 a host port (tagged traffic comes in), p1..p4 the uplinks of
DST4's group, p5 a host port (DST_HOST, the last hop), DST_SPINE a
single uplink (p2: a spine's forwarding).
"""
from __future__ import annotations

import time

import pytest

from datapath.egress_record import CLOCK_SLACK_NS
from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

N_PORTS = 6
SRC, SRC2 = "198.18.0.1", "198.18.0.2"
DST4 = "198.18.1.4"
DST_HOST = "198.18.0.9"
DST_SPINE = "198.18.2.7"
UPLINKS = ("p1", "p2", "p3", "p4")
HOST_PORTS = ("p0", "p5")
REDIRECT = {"tc": 7, "xdp": 4}


def pkt(tensor=None, *, src=SRC, dst=DST4, sport=40000):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    opts = [tensor.scapy()] if tensor is not None else []
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst, options=opts) / TCP(sport=sport, dport=5201, flags="A")
                 / (b"p" * 40))


def hdr(tensor_id, pkt_idx=0, tensor_len=8, layer=0):
    from common.wire import TaLBHeader

    return TaLBHeader(tensor_id, layer, tensor_len, pkt_idx, pkt_idx == tensor_len - 1, 1)


class Switch(ProgTestSwitch):
    def reset(self, scheme="ecmp", down=()):
        from datapath import control

        for name in ("counters", "port_stats", "tensor_egress", "flowlets"):
            getattr(self.maps, name).clear()
        control.clear_tensor_table(self.maps)
        self.program(scheme, down)
        control.set_release(self.maps, False)
        control.set_talb_config(self.maps, fallback="ecmp", tensor_limit=8192,
                                tensor_idle_us=0xFFFFFFFF, n_bands=1, layers_per_band=8)
        self.maps.rng[0] = 0x1234567

    def program(self, scheme="ecmp", down=()):
        from datapath import control

        control.program_switch(
            self.maps, [(n, self.ifindex[n], n in HOST_PORTS, n not in down)
                        for n in self.port_names],
            {DST4: [self.ifindex[p] for p in UPLINKS], DST_HOST: [self.ifindex["p5"]],
             DST_SPINE: [self.ifindex["p2"]]}, scheme=scheme, hash_seed=4242)
        control.set_scheme(self.maps, scheme)

    def forward(self, data, ingress="p0") -> str | None:
        """Run ``data``; the port it was redirected out of (None: not)."""
        before = self.tx()
        ret, _ = self.run(data, ingress)
        moved = [k for k, v in self.tx().items() if v != before[k]]
        if ret != REDIRECT[self.kind]:
            return None
        assert len(moved) == 1, moved
        return moved[0]

    def record(self):
        """{WireTensorKey: Recorded} of every entry (egress_record.read_egress)."""
        from common.wire import WireTensorKey
        from datapath.egress_record import port_names, read_egress

        keys = {WireTensorKey(*k.as_tuple()): 0 for k in self.maps.tensor_egress.keys()}
        return read_egress(self.maps, keys, port_names(self.maps, self.netns))


@pytest.fixture(scope="module", params=["tc", "xdp"])
def switch(request, bcc):
    """The switch program of one entry point in a namespace of its own."""
    from datapath.loader import SwitchDatapath
    from datapath.xdp import XdpSwitchDatapath

    cls = XdpSwitchDatapath if request.param == "xdp" else SwitchDatapath
    with loaded_switch("eg", N_PORTS, datapath_cls=cls) as (name, dp, ifindex):
        sw = Switch(name, dp, ifindex, N_PORTS)
        sw.kind = request.param
        yield sw


def key(tid, src=SRC):
    from common.wire import WireTensorKey

    return WireTensorKey(src, tid)


@pytest.mark.parametrize("scheme", ["ecmp", "letflow", "talb", "conga"])
def test_every_tagged_packet_marks_its_port(switch, scheme):
    """Three tensors of 8 packets each: each entry names exactly the ports
    its packets left by (what the program sent, from port_stats), its first
    packet's first, and counts them all; a port new to a tensor is counted
    as a split. Per flow (ECMP) and per tensor (TaLB): one port each.
    LetFlow and CONGA may move a flow after a flowlet gap (a test run's
    packets are some 100 us apart): the record then says so."""
    switch.reset(scheme)
    t0 = time.monotonic_ns()
    went = {}
    for tid, sport in ((0x100, 40001), (0x200, 40002), (0x300, 40003)):
        for i in range(8):
            went.setdefault(tid, []).append(switch.forward(pkt(hdr(tid, i), sport=sport)))
    rec = switch.record()
    assert set(rec) == {key(t) for t in went}
    for tid, ports in went.items():
        r = rec[key(tid)]
        assert set(ports) <= set(UPLINKS), ports
        assert set(r.ports) == set(ports) and r.ports[0] == ports[0] and r.packets == 8, (tid, r)
        # ECMP reads no clock: the record's is the coarse one, a tick behind
        assert t0 - CLOCK_SLACK_NS <= r.first_ns <= r.latest_ns <= time.monotonic_ns()
        if scheme in ("ecmp", "talb"):
            assert len(r.ports) == 1, (tid, r)
    assert switch.counters()["tensor_split"] == sum(len(set(p)) - 1 for p in went.values())


def test_a_tensor_leaving_by_two_ports_is_split(switch):
    """TaLB places a tensor on one uplink; that uplink goes down midway and
    the rest of the tensor is rerouted: the entry holds both ports, the
    first one first, and the packet that found the new port is counted."""
    switch.reset("talb")
    first = {switch.forward(pkt(hdr(0x4242, i))) for i in range(3)}
    assert len(first) == 1
    (first,) = first
    switch.program("talb", down=(first,))
    rest = {switch.forward(pkt(hdr(0x4242, i))) for i in range(3, 8)}
    assert len(rest) == 1 and first not in rest
    r = switch.record()[key(0x4242)]
    assert r.ports == (first, *rest) and r.packets == 8
    assert switch.counters()["tensor_split"] == 1
    assert switch.counters()["talb_reroute"] >= 1


def test_per_packet_spraying_is_seen_split(switch):
    """RPS sprays one tensor's packets over the group: the record shows
    every port they took (what the data path sent, from port_stats)."""
    switch.reset("rps")
    ports = [switch.forward(pkt(hdr(0x77, i, tensor_len=32))) for i in range(32)]
    r = switch.record()[key(0x77)]
    assert set(r.ports) == set(ports) and len(r.ports) > 1 and r.ports[0] == ports[0]
    assert r.packets == 32
    assert switch.counters()["tensor_split"] == len(set(ports)) - 1


def test_what_leaves_no_entry(switch):
    """Untagged packets, and tagged ones leaving by a host port (the last
    hop strips the option there), are not recorded; a tagged packet on a
    single-port group (a spine's forwarding) is."""
    switch.reset("ecmp")
    assert switch.forward(pkt()) in UPLINKS
    assert switch.forward(pkt(hdr(0x5), dst=DST_HOST), ingress="p1") == "p5"
    assert switch.record() == {}
    assert switch.forward(pkt(hdr(0x6), dst=DST_SPINE), ingress="p1") == "p2"
    assert list(switch.record()) == [key(0x6)] and switch.record()[key(0x6)].ports == ("p2",)


def test_two_sources_of_one_id_are_two_tensors(switch):
    """(source, id) keys the record, as it keys the tensor table: one id
    from two hosts on two ports is no split."""
    switch.reset("ecmp")
    a = {switch.forward(pkt(hdr(0x99, i), src=SRC, sport=40000)) for i in range(4)}
    b = set()
    for sport in range(40001, 40100):       # a flow of SRC2 that hashes elsewhere
        b = {switch.forward(pkt(hdr(0x99, 0), src=SRC2, sport=sport))}
        if b != a:
            break
        switch.maps.tensor_egress.clear()
        a = {switch.forward(pkt(hdr(0x99, i), src=SRC, sport=40000)) for i in range(4)}
    assert a != b
    rec = switch.record()
    assert rec[key(0x99, SRC)].ports == tuple(a) and rec[key(0x99, SRC2)].ports == tuple(b)
    assert switch.counters()["tensor_split"] == 0


def test_stale_entry_starts_afresh_and_a_later_stamp_does_not(switch):
    """An entry idle past TALB_EGRESS_STALE_NS is an earlier tensor of the
    id: the next packet replaces it (its ports forgotten, no split). One
    stamped after this CPU read its clock (another CPU) is kept and joined."""
    from common.c_constants import CONST
    from datapath.structs import TensorEgress

    switch.reset("ecmp")
    port = switch.forward(pkt(hdr(0x31)))
    pid = switch.maps.ports[switch.ifindex[port]].port_id
    other = next(n for n in UPLINKS if n != port)
    oid = switch.maps.ports[switch.ifindex[other]].port_id
    now = time.monotonic_ns()
    stale = now - CONST["TALB_EGRESS_STALE_NS"] - 10**9
    switch.maps.tensor_egress[(SRC, 0x31)] = TensorEgress(stale, stale, 1 << oid, 50, oid)
    switch.forward(pkt(hdr(0x31, 1)))
    e = switch.maps.tensor_egress[(SRC, 0x31)]
    assert (e.port_mask, e.packets, e.first_port) == (1 << pid, 1, pid)
    assert e.first_ns > now - CLOCK_SLACK_NS
    ahead = time.monotonic_ns() + 10**9           # stamped "later" by another CPU
    switch.maps.tensor_egress[(SRC, 0x31)] = TensorEgress(now, ahead, 1 << oid, 5, oid)
    switch.forward(pkt(hdr(0x31, 2)))
    e = switch.maps.tensor_egress[(SRC, 0x31)]
    assert e.port_mask == (1 << oid) | (1 << pid) and e.packets == 6 and e.first_port == oid
    assert switch.counters()["tensor_split"] == 1


def test_read_egress_flags_an_entry_older_than_its_tensor(switch):
    """`talb send` asks for its tensors with their start times: an entry
    that began before the tensor holds an earlier tensor of the same id."""
    from datapath.egress_record import read_egress

    switch.reset("ecmp")
    switch.forward(pkt(hdr(0x55)))
    names = {switch.maps.ports[switch.ifindex[n]].port_id: n for n in switch.port_names}
    later = time.monotonic_ns() + CLOCK_SLACK_NS
    assert not read_egress(switch.maps, {key(0x55): 0}, names)[key(0x55)].older
    assert read_egress(switch.maps, {key(0x55): later}, names)[key(0x55)].older
    assert read_egress(switch.maps, {key(0x56): 0}, names) == {}
