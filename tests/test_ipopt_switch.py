"""The switch's IPv4 option edits (bpf/include/talb/ipopt.h) under
BPF_PROG_TEST_RUN, byte for byte: CONGA's option pushed at the source leaf,
CONGA's option stripped at the destination leaf, TaLB's option stripped at
the last hop (by the main program and by CONGA's).

Each fixture is an input frame and what must come out of it: the verdict,
the egress port, and the output frame, which the test builds on its own --
the option spliced in or out after the base header, IHL and total length
set, the header checksum computed from scratch (RFC 1071, here) where the
data path updates it incrementally (RFC 1624) -- with the counters and the
egress port's bytes the edit moves.

Ports: p0 is a host port (the first hop's ingress), p1..p4 the uplinks of
FAR's group (a host of leaf 1), p5 the host port of NEAR (this leaf, leaf
0: the last hop). No port rates: every DRE metric is 0, so a pushed
option's CE is 0; no feedback entries, so it carries none.
"""
from __future__ import annotations

import pytest

from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC_ACT_SHOT = 2
TC_ACT_REDIRECT = 7

N_PORTS = 6
SRC = "198.18.0.1"
NEAR = "198.18.0.2"         # behind p5: this leaf
FAR = "198.18.1.4"          # behind p1..p4: leaf 1
UPLINKS = ("p1", "p2", "p3", "p4")
LEAF, FAR_LEAF = 0, 1
NOPS = b"\x01" * 4          # a non-TaLB option list entry: 4 NOPs


class Switch(ProgTestSwitch):
    def configure(self, scheme: str) -> None:
        """Fresh counters, stats, flowlets and CONGA tables; `scheme` in force."""
        from datapath import control

        for m in (self.maps.counters, self.maps.port_stats, self.maps.flowlets,
                  self.maps.conga_dre, self.maps.conga_to_leaf, self.maps.conga_from_leaf,
                  self.maps.conga_fb_cursor):
            m.clear()
        control.program_switch(
            self.maps, [(n, self.ifindex[n], n in ("p0", "p5"), True) for n in self.port_names],
            {FAR: [self.ifindex[p] for p in UPLINKS], NEAR: [self.ifindex["p5"]]},
            scheme="ecmp", hash_seed=19)
        control.set_release(self.maps, False)
        control.set_conga_leaves(self.maps, LEAF, {SRC: LEAF, NEAR: LEAF, FAR: FAR_LEAF})
        control.set_scheme(self.maps, scheme, {})

    def forward(self, data: bytes, ingress: str):
        """(verdict, egress port name or None, output frame, counter deltas,
        egress port's tx bytes)."""
        before_c, before_t = self.counters(), self.tx()
        ret, out = self.run(data, ingress)
        moved = [n for n, v in self.tx().items() if v != before_t[n]]
        assert len(moved) <= 1, moved
        port = moved[0] if moved else None
        c = {k: v - before_c.get(k, 0) for k, v in self.counters().items()
             if v != before_c.get(k, 0)}
        tx_bytes = (self.maps.port_stats.get(self.port_names.index(port)).tx_bytes
                    if port else 0)
        return ret, port, out, c, tx_bytes


@pytest.fixture(scope="module")
def sw(bcc):
    with loaded_switch("ipopt", N_PORTS, mtu=1600) as (name, dp, ifindex):
        yield Switch(name, dp, ifindex, N_PORTS)


# --- frames, built and checked here -------------------------------------------------------
def ipv4_checksum(header: bytes) -> int:
    """RFC 1071: the complement of the ones'-complement sum of the header's
    16-bit words, the checksum field as it is (0 for a header that verifies)."""
    s = sum(header[i] << 8 | header[i + 1] for i in range(0, len(header), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def edited(frame: bytes, push: bytes = b"", strip: int = 0) -> bytes:
    """``frame`` with its first ``strip`` option bytes removed and ``push``
    put in front of the rest, IHL and total length moved, the header
    checksum computed from scratch."""
    ihl = frame[14] & 0x0F
    base = bytearray(frame[14:34])
    opts = push + frame[34:14 + 4 * ihl][strip:]
    base[0] = 0x40 | (20 + len(opts)) // 4
    base[2:4] = (int.from_bytes(base[2:4], "big") + len(push) - strip).to_bytes(2, "big")
    base[10:12] = bytes(2)
    base[10:12] = ipv4_checksum(bytes(base) + opts).to_bytes(2, "big")
    return frame[:14] + bytes(base) + opts + frame[14 + 4 * ihl:]


def frame(dst: str, opts: bytes = b"", *, udp=False, payload=b"t" * 40, tos=0, df=False,
          ttl=64, ip_id=7) -> bytes:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    l4 = UDP(sport=40001, dport=53) if udp else TCP(sport=40001, dport=5201, flags="PA")
    data = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=SRC, dst=dst, tos=tos, ttl=ttl, id=ip_id, flags="DF" if df else 0,
                      options=[Raw(opts)] if opts else [])
                 / l4 / payload)
    assert ipv4_checksum(data[14:14 + 4 * (data[14] & 0x0F)]) == 0
    return data


def talb_opt(tensor_id=0x01020304, layer=3, tensor_len=9, pkt_idx=2) -> bytes:
    """TaLB's option (bpf/include/talb/talb_option.h), version 1."""
    from common.c_constants import CONST

    return (bytes([CONST["TALB_IPOPT_TYPE"], CONST["TALB_IPOPT_LEN"]])
            + tensor_id.to_bytes(4, "big") + bytes([layer, CONST["TALB_IPOPT_VERSION"]])
            + tensor_len.to_bytes(2, "big") + pkt_idx.to_bytes(2, "big"))


def conga_opt(src_leaf: int, lbtag: int, ce: int = 0, fb=None) -> bytes:
    """CONGA's option (bpf/include/talb/conga_option.h), version 1."""
    from common.c_constants import CONST

    flags = CONST["TALB_CONGA_VERSION"] | (CONST["TALB_CONGA_F_FB"] if fb else 0)
    fb_tag, fb_metric = fb or (0, 0)
    return bytes([CONST["TALB_CONGA_IPOPT_TYPE"], CONST["TALB_CONGA_IPOPT_LEN"], src_leaf,
                  lbtag, ce, fb_tag, fb_metric, flags])


def check_header(out: bytes, data: bytes, ihl: int) -> None:
    """The edited frame on its own terms: IPv4, IHL `ihl`, the total length
    the frame's, a header that verifies, the L4 header and payload as sent."""
    assert out[14] >> 4 == 4 and out[14] & 0x0F == ihl, out[14]
    assert int.from_bytes(out[16:18], "big") == len(out) - 14
    assert ipv4_checksum(out[14:14 + 4 * ihl]) == 0
    assert out[14 + 4 * ihl:] == data[14 + 4 * (data[14] & 0x0F):]


FRAMES = {      # how the L4 part and the checksum's other words vary
    "tcp": {},
    "tcp-empty": {"payload": b""},
    "udp-odd": {"udp": True, "payload": b"u" * 333},
    "tos-df-ttl": {"tos": 0xB8, "df": True, "ttl": 1, "ip_id": 0xFFFF},
    "full-mtu": {"payload": b"m" * 1400},
}


# --- CONGA: push at the source leaf ---------------------------------------------------------
@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("opts", [b"", talb_opt(), NOPS, NOPS * 8],
                         ids=["no-options", "talb", "nops", "ihl-13"])
def test_conga_push_at_the_first_hop(sw, opts, kind):
    """A host's packet for another leaf: CONGA's option goes in first,
    whatever options follow (IHL 13 is the last with room: it becomes 15)."""
    sw.configure("conga")
    data = frame(FAR, opts, **FRAMES[kind])
    ret, port, out, c, tx_bytes = sw.forward(data, "p0")
    assert ret == TC_ACT_REDIRECT and port in UPLINKS
    opt = conga_opt(LEAF, UPLINKS.index(port))
    check_header(out, data, 5 + (len(opts) + 8) // 4)
    assert out[34:42] == opt and out[42:42 + len(opts)] == opts
    assert out == edited(data, push=opt)
    assert c["conga_pushed"] == 1 and c["decision_conga"] == 1 and "conga_push_fail" not in c
    assert tx_bytes == len(out) == len(data) + 8


@pytest.mark.parametrize("n_nops", [9, 10], ids=["ihl-14", "ihl-15"])
def test_conga_push_without_room_sends_the_packet_as_it_was(sw, n_nops):
    sw.configure("conga")
    data = frame(FAR, NOPS * n_nops)
    ret, port, out, c, tx_bytes = sw.forward(data, "p0")
    assert ret == TC_ACT_REDIRECT and port in UPLINKS
    assert out == data
    assert c["conga_push_fail"] == 1 and "conga_pushed" not in c
    assert tx_bytes == len(data)


# --- CONGA: strip at the destination leaf ---------------------------------------------------
@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("behind, strip_too", [(b"", 0), (NOPS, 0), (talb_opt(), 12)],
                         ids=["alone", "nops-behind", "talb-behind"])
def test_conga_strip_at_the_last_hop(sw, behind, strip_too, kind):
    """Leaf 1's packet for a host of this leaf: CONGA's option comes out, an
    option behind it stays -- but TaLB's, which the last hop strips too."""
    sw.configure("conga")
    data = frame(NEAR, conga_opt(FAR_LEAF, 2, ce=5, fb=(1, 6)) + behind, **FRAMES[kind])
    ret, port, out, c, tx_bytes = sw.forward(data, "p1")
    assert ret == TC_ACT_REDIRECT and port == "p5"
    check_header(out, data, 5 + (len(behind) - strip_too) // 4)
    assert out == edited(data, strip=8 + strip_too)
    assert c["conga_stripped"] == 1 and c.get("stripped", 0) == (1 if strip_too else 0)
    assert tx_bytes == len(out) == len(data) - 8 - strip_too


def test_conga_strip_then_unstrippable_talb_option_is_dropped(sw):
    """TaLB's option first once CONGA's is out, but not the only one: the
    host must not see it, and it cannot be stripped (switch_tc.c)."""
    sw.configure("conga")
    data = frame(NEAR, conga_opt(FAR_LEAF, 2) + talb_opt() + NOPS)
    ret, port, _, c, _ = sw.forward(data, "p1")
    assert ret == TC_ACT_SHOT and port is None
    assert c["conga_stripped"] == 1 and c["drop_opt_position"] == 1


# --- TaLB: strip at the last hop -------------------------------------------------------------
@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("scheme, ingress", [("ecmp", "p1"), ("ecmp", "p0"), ("conga", "p1")],
                         ids=["main-program", "first-hop-is-last", "conga-program"])
def test_talb_strip_at_the_last_hop(sw, scheme, ingress, kind):
    """A tagged packet leaving through a host port leaves untagged: IHL 5,
    12 bytes shorter, the rest as sent."""
    sw.configure(scheme)
    data = frame(NEAR, talb_opt(), **FRAMES[kind])
    ret, port, out, c, tx_bytes = sw.forward(data, ingress)
    assert ret == TC_ACT_REDIRECT and port == "p5"
    check_header(out, data, 5)
    assert out == edited(data, strip=12)
    assert c["stripped"] == 1 and c["opt_tagged"] == 1 and "drop_strip_fail" not in c
    assert tx_bytes == len(out) == len(data) - 12
