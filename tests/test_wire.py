"""The TaLB option's byte layout (docs/design.md §4) through scapy and plain struct packing."""
from hypothesis import given, strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from common.wire import OPT_LEN, OPT_TYPE, IPOption_TaLB, TaLBHeader, talb_header_of


def test_layout_matches_the_design():
    h = TaLBHeader(tensor_id=0xDEADBEEF, layer=3, tensor_len=10, pkt_idx=9, last=True)
    assert h.pack() == bytes.fromhex("9e0c deadbeef 03 05 000a 0009")
    assert bytes(h.scapy()) == h.pack()


def test_tagged_packet_has_ihl_8_and_dissects():
    h = TaLBHeader(7, 1, 4, 0)
    pkt = Ether() / IP(src="198.18.0.1", dst="198.18.1.1", options=[h.scapy()]) / TCP() / (b"x" * 10)
    raw = bytes(pkt)
    assert raw[14] & 0x0F == 8
    assert raw[34:46] == h.pack()
    again = Ether(raw)
    assert isinstance(again[IP].options[0], IPOption_TaLB)
    assert talb_header_of(again) == h


def test_untagged_packet_has_no_header():
    assert talb_header_of(Ether() / IP() / TCP()) is None


@given(st.integers(0, 2**32 - 1), st.integers(0, 255), st.integers(0, 2**16 - 1),
       st.integers(0, 2**16 - 1), st.booleans())
def test_pack_unpack_round_trip(tid, layer, tlen, idx, last):
    h = TaLBHeader(tid, layer, tlen, idx, last)
    raw = h.pack()
    assert len(raw) == OPT_LEN and raw[0] == OPT_TYPE
    assert TaLBHeader.unpack(raw) == h
