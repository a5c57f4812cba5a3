"""The XDP entry point (bpf/switch_xdp.c) under BPF_PROG_TEST_RUN, against
the TC one (bpf/switch_tc.c): one decision core, two entry points.

Both programs are loaded in one namespace with maps of their own and
programmed alike; each packet goes through both, and the XDP verdict, the
bytes out, the counters and the egress port must be the TC program's
(TC_ACT_OK = XDP_PASS, TC_ACT_REDIRECT = XDP_REDIRECT, TC_ACT_SHOT =
XDP_DROP). A test run executes no redirect: the egress port is read from
``port_stats``. Plus what XDP mode refuses (datapath/xdp.py).

Ports: p0 a host port (tagged traffic comes in), p1..p4 the uplinks of
DST4's group, p5 a host port (the single port of DST_HOST: the last hop,
where the TaLB option is stripped), p6 a switch port in no group.
"""
from __future__ import annotations

import pytest

from datapath.xdp import XDP_SCHEMES
from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC = {"ok": 0, "drop": 2, "redirect": 7}
XDP = {"ok": 2, "drop": 1, "redirect": 4}

N_PORTS = 7
SRC = "198.18.0.1"
DST4 = "198.18.1.4"         # group p1..p4, a host of leaf 1
DST_HOST = "198.18.0.9"     # group p5 (host port of this leaf)
DST_SPINE = "198.18.2.7"    # single uplink p2 (a spine's forwarding)
UPLINKS = ("p1", "p2", "p3", "p4")
HOST_PORTS = ("p0", "p5")
SEED = 4242


def pkt(tensor=None, *, src=SRC, dst=DST4, sport=40000, options=b"", payload=b"p" * 40,
        ip_id=1):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    raw = options + (bytes(tensor.scapy()) if tensor is not None else b"")
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst, id=ip_id, options=[Raw(raw)] if raw else [])
                 / TCP(sport=sport, dport=5201, flags="A") / payload)


def hdr(tensor_id, layer=0, tensor_len=10, pkt_idx=0, last=False):
    from common.wire import TaLBHeader

    return TaLBHeader(tensor_id, layer, tensor_len, pkt_idx, last, 1)


def ip_checksum_ok(frame: bytes) -> bool:
    from scapy.utils import checksum

    return checksum(frame[14:14 + (frame[14] & 0x0F) * 4]) == 0


def conga_opt(src_leaf=1, lbtag=2, ce=5):
    from common.c_constants import CONST

    return bytes([CONST["TALB_CONGA_IPOPT_TYPE"], 8, src_leaf, lbtag, ce, 0, 0,
                  CONST["TALB_CONGA_VERSION"]])


class Switch(ProgTestSwitch):
    def reset(self, scheme="ecmp", release=False):
        from datapath import control

        for name in ("counters", "port_stats", "conga_dre", "conga_to_leaf", "conga_from_leaf",
                     "conga_fb_cursor", "flowlets"):
            getattr(self.maps, name).clear()
        control.clear_tensor_table(self.maps)
        control.program_switch(
            self.maps, [(n, self.ifindex[n], n in HOST_PORTS, True) for n in self.port_names],
            {DST4: [self.ifindex[p] for p in UPLINKS], DST_HOST: [self.ifindex["p5"]],
             DST_SPINE: [self.ifindex["p2"]]}, scheme="ecmp", hash_seed=SEED)
        control.set_release(self.maps, release)
        control.set_talb_config(self.maps, fallback="ecmp", tensor_limit=8192,
                                tensor_idle_us=0xFFFFFFFF, n_bands=1, layers_per_band=8)
        control.set_conga_leaves(self.maps, 0, {SRC: 0, DST_HOST: 0, DST4: 1})
        control.set_port_rates(self.maps, {self.ifindex[n]: (100_000_000, 150_000, 15_000)
                                           for n in self.port_names})
        self.maps.rng[0] = 0x1234567      # both programs draw alike (on CPU 0)
        if scheme == "conga":
            control.set_scheme(self.maps, "conga", {"flowlet_us": 500, "dre_us": 125,
                                                    "alpha_shift": 3, "q_bits": 3,
                                                    "age_us": 20_000})
        else:
            control.set_scheme(self.maps, scheme)

    def send(self, data, ingress):
        """(verdict name, bytes out, egress port or None, counters that moved)."""
        names = {v: k for k, v in (XDP if self.xdp else TC).items()}
        before, cbefore = self.tx(), self.counters()
        ret, out = self.run(data, ingress)
        moved = [k for k, v in self.tx().items() if v != before[k]]
        counters = {k: v - cbefore.get(k, 0) for k, v in self.counters().items()
                    if v != cbefore.get(k, 0)}
        return names.get(ret, ret), out, (moved[0] if moved else None), counters

    @property
    def xdp(self) -> bool:
        from datapath import bpf_syscall as sc

        return self.dp.PROG_TYPE == sc.BPF_PROG_TYPE_XDP


@pytest.fixture(scope="module")
def pair(bcc):
    """(TC switch, XDP switch) in one namespace; test runs on CPU 0 (the
    random schemes' per-CPU state is seeded alike in both)."""
    import os

    from datapath.loader import SwitchDatapath
    from datapath.xdp import XdpSwitchDatapath

    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    with loaded_switch("xdp", N_PORTS, datapath_cls=XdpSwitchDatapath) as (name, xdp, ifindex):
        import tempfile

        tc = SwitchDatapath(name, tempfile.gettempdir() + "/unused-pins").load()
        try:
            yield (Switch(name, tc, ifindex, N_PORTS), Switch(name, xdp, ifindex, N_PORTS))
        finally:
            tc.close()
            os.sched_setaffinity(0, cpus)


def both(pair, data, ingress="p0"):
    tc, xdp = pair
    a, b = tc.send(data, ingress), xdp.send(data, ingress)
    return a, b


# --- the programs ------------------------------------------------------------------------
def test_programs_load_as_xdp(pair):
    from datapath import bpf_syscall as sc
    from datapath.loader import SCHEME_PROGS

    _, xdp = pair
    progs = xdp.dp.programs()
    assert list(progs) == ["talb_switch_xdp", *SCHEME_PROGS.values()]
    assert all(p.type == sc.BPF_PROG_TYPE_XDP for p in progs.values())


# --- the same verdicts, bytes and counters as TC -------------------------------------------------
#: every scheme XDP runs (the registry's), but CONGA: its option's push and strip
#: have a test of their own (test_conga_push_and_strip)
@pytest.mark.parametrize("scheme", [s for s in XDP_SCHEMES if s != "conga"])
def test_forwarding_matches_tc(pair, scheme):
    """Many flows, tagged and not, to a 4-port group and a host port: the
    XDP program redirects each packet where the TC program does, with the
    same bytes and counters (the last hop's strip included)."""
    for sw in pair:
        sw.reset(scheme)
    for i in range(40):
        tensor = hdr(100 + i // 4, layer=i % 3, tensor_len=4, pkt_idx=i % 4) if i % 2 else None
        for dst, ingress in ((DST4, "p0"), (DST_HOST, "p1")):
            data = pkt(tensor, dst=dst, sport=40000 + i, ip_id=i)
            a, b = both(pair, data, ingress)
            assert b[0] == "redirect" and a == b, (i, dst, a, b)
            if dst == DST_HOST and tensor is not None:
                assert b[1] == pkt(dst=dst, sport=40000 + i, ip_id=i)   # stripped
                assert ip_checksum_ok(b[1]) and b[3]["stripped"] == 1
    tc, xdp = pair
    assert tc.tx() == xdp.tx()
    assert tc.counters() == xdp.counters()


@pytest.mark.parametrize("case", ["arp", "unknown-dst", "unknown-ingress", "malformed"])
def test_passes_match_tc(pair, case):
    from scapy.layers.l2 import ARP, Ether

    for sw in pair:
        sw.reset()
    data, ingress = {
        "arp": (bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=DST4)), "p0"),
        "unknown-dst": (pkt(dst="203.0.113.9"), "p0"),
        "unknown-ingress": (pkt(), "q0"),
        "malformed": (bytes(pkt()[:14]) + b"\x44" + pkt()[15:], "p0"),    # IHL 4
    }[case]
    a, b = both(pair, data, ingress)
    assert b[0] == "ok" and a == b


@pytest.mark.parametrize("ingress,dst", [("p0", DST4), ("p6", DST_HOST)])
def test_unstrippable_option_dropped_at_host_edges_as_tc(pair, ingress, dst):
    from common.wire import TaLBHeader

    for sw in pair:
        sw.reset()
    opts = b"\x01\x01\x01\x01" + bytes(TaLBHeader(53, 0, 4, 0, False, 1).scapy())  # not first
    a, b = both(pair, pkt(dst=dst, options=opts), ingress)
    assert b[0] == "drop" and a == b and b[3]["drop_opt_position"] == 1


def test_no_first_hop_release_in_xdp(pair):
    """With release on, TC clones and shoots the socket-owned original;
    an XDP frame has no socket: it is redirected as it is."""
    tc, xdp = pair
    for sw in pair:
        sw.reset(release=True)
    data = pkt()
    assert tc.send(data, "p0")[0] == "drop"            # clone-redirected, original freed
    verdict, out, port, counters = xdp.send(data, "p0")
    assert verdict == "redirect" and out == data and port in UPLINKS
    assert counters.get("released", 0) == 0 and counters["redirected"] == 1


def test_conga_push_and_strip(pair):
    """CONGA's option goes in at the source leaf and out at the destination
    leaf (talb/ipopt_xdp.h): the XDP frame is the TC packet, byte for byte."""
    for sw in pair:
        sw.reset("conga")
    data = pkt(hdr(7, layer=1))
    a, b = both(pair, data, "p0")
    assert b[0] == "redirect" and a == b
    out = b[1]
    assert len(out) == len(data) + 8 and ip_checksum_ok(out)
    assert out[34] == conga_opt()[0] and out[42] == 0x9E and b[3]["conga_pushed"] == 1
    # destination leaf: CONGA's option then TaLB's arrive from an uplink for
    # a local host: both stripped, checksum right
    arriving = pkt(hdr(8), dst=DST_HOST, options=conga_opt())
    a, b = both(pair, arriving, "p3")
    assert b[0] == "redirect" and a == b
    assert b[1] == pkt(dst=DST_HOST) and ip_checksum_ok(b[1])
    assert b[3]["conga_stripped"] == 1 and b[3]["stripped"] == 1
    # a hop raising CE (spine-like forwarding, loaded egress port)
    from datapath.structs import CongaDre
    import time

    far = time.monotonic_ns() + 10**9
    for sw in pair:
        sw.maps.conga_dre[sw.maps.ports[sw.ifindex["p2"]].port_id] = \
            CongaDre(12_500_000 * 1_000_000 // 10**9, far)
    a, b = both(pair, pkt(dst=DST_SPINE, options=conga_opt(ce=2)), "p1")
    assert b[0] == "redirect" and a == b and b[1][38] > 2 and ip_checksum_ok(b[1])


# --- what XDP mode refuses -------------------------------------------------------------------------
def test_refusals_name_option_and_value():
    from datapath.xdp import XdpError, check_pcm_delay, check_scheme, check_topology
    from netns_topology import topology_from_dict

    with pytest.raises(XdpError, match="--datapath xdp cannot run --scheme drill: .*egress"):
        check_scheme("drill")
    with pytest.raises(XdpError, match="talb with fallback drill"):
        check_scheme("talb", "drill")
    for ok in XDP_SCHEMES:      # every scheme but the refused, from the registry
        check_scheme(ok, "ecmp")
    with pytest.raises(XdpError, match="--pcm-delay measured"):
        check_pcm_delay("measured")
    check_pcm_delay("model")
    with pytest.raises(XdpError, match=r"shaping: true"):
        check_topology(topology_from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1}))
    with pytest.raises(XdpError, match="drill"):
        check_topology(topology_from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1,
                                           "shaping": False, "scheme": "drill"}))
    check_topology(topology_from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1,
                                       "shaping": False, "scheme": "talb"}))
