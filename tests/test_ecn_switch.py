"""ECN marking in the switch data path (bpf/include/talb/ecn.h) under
BPF_PROG_TEST_RUN, against its model (datapath/ecn.py).

The program is loaded, not attached; a packet from host port p0 to DST1
leaves by p5 (one port: no choice to make), the port whose phantom queue
the tests set up and read. A phantom queue's clock: the program drains it
from last_ns to its own bpf_ktime_get_ns and writes that instant back, so
a test that sets last_ns in the future freezes the backlog (no drain: the
queue is exactly what the test wrote), and one that sets it in the past
learns the program's instant afterwards and replays it in the model.
"""
from __future__ import annotations

import time

import pytest

from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC_ACT_REDIRECT = 7
N_PORTS = 6
SRC, DST1 = "198.18.0.1", "198.18.1.1"
OUT = "p5"
RATE_BPS = 25_000_000
K = 3028                        # two 1514-byte frames (netns_topology/buffers.py's floor)
LIMIT = 6056                    # four frames a band
BURST = 15_000
WEIGHTS = [1, 4, 2, 1]          # fig10's bands
ECT0, ECT1, CE, NOT_ECT = 0x02, 0x01, 0x03, 0x00
FROZEN_S = 10                   # last_ns this far ahead: no drain during the test


def pkt(tos=ECT0, tensor=None, payload=b"d" * 100) -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    opts = [tensor.scapy()] if tensor is not None else []
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=SRC, dst=DST1, tos=tos, options=opts)
                 / TCP(sport=40000, dport=5201, flags="A") / payload)


def tos_of(frame: bytes) -> int:
    return frame[15]


def ip_checksum_ok(frame: bytes) -> bool:
    from scapy.utils import checksum

    return checksum(frame[14:14 + (frame[14] & 0x0F) * 4]) == 0


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Switch(ProgTestSwitch):
    def reset(self, *, ecn=True, weights=WEIGHTS, n_bands=4):
        from datapath import control

        self.maps.counters.clear()
        self.maps.ecn_queue.clear()
        self.maps.ecn_port.clear()
        control.program_switch(self.maps, [(n, self.ifindex[n], n == "p0", True)
                                           for n in self.port_names],
                               {DST1: [self.ifindex[OUT]]}, scheme="ecmp", hash_seed=7)
        control.set_release(self.maps, False)
        control.set_talb_config(self.maps, n_bands=n_bands, layers_per_band=8)
        control.set_ecn(self.maps, {self.ifindex[OUT]: {
            "rate_bps": RATE_BPS, "k_bytes": K, "limit_bytes": LIMIT, "burst_bytes": BURST,
            "weights": weights}})
        if not ecn:
            control.set_ecn(self.maps, None)

    @property
    def out_id(self) -> int:
        return self.port_names.index(OUT)

    def set_queue(self, band_bytes, *, credit=0, last_ns=None):
        from common.c_constants import MAX_BANDS
        from datapath.structs import EcnQueue
        import ctypes

        b = list(band_bytes) + [0] * (MAX_BANDS - len(band_bytes))
        self.maps.ecn_queue[self.out_id] = EcnQueue(
            mono_ns() + FROZEN_S * 10**9 if last_ns is None else last_ns, credit,
            (ctypes.c_uint32 * MAX_BANDS)(*b))

    def queue(self):
        return self.maps.ecn_queue[self.out_id]

    def send(self, frame: bytes) -> bytes:
        ret, out = self.run(frame, "p0")
        assert ret == TC_ACT_REDIRECT
        return out


@pytest.fixture(scope="module")
def sw(bcc):
    with loaded_switch("ecn", N_PORTS, mtu=1600) as (name, dp, ifindex):
        yield Switch(name, dp, ifindex, N_PORTS)


@pytest.mark.parametrize("tos", [ECT0, ECT1, ECT0 | 0xB8, ECT1 | 0x20])
def test_ect_packet_above_k_leaves_with_ce_and_a_valid_checksum(sw, tos):
    sw.reset()
    sw.set_queue([K + 1])
    frame = pkt(tos)
    out = sw.send(frame)
    assert tos_of(out) == (tos | CE)            # DSCP bits kept, ECN field CE
    assert ip_checksum_ok(out)
    assert out[:15] == frame[:15] and out[16:24] == frame[16:24] and out[26:] == frame[26:]
    assert sw.counters()["ecn_marked"] == 1


@pytest.mark.parametrize("backlog", [0, 1, K // 2, K])
def test_at_or_below_k_never_marked(sw, backlog):
    sw.reset()
    sw.set_queue([backlog])
    frame = pkt(ECT0)
    assert sw.send(frame) == frame
    assert sw.counters()["ecn_marked"] == 0


def test_not_ect_never_marked_even_far_above_k(sw):
    sw.reset()
    sw.set_queue([LIMIT])
    frame = pkt(NOT_ECT | 0x28)
    assert sw.send(frame) == frame
    c = sw.counters()
    assert c["ecn_marked"] == 0 and c["ecn_not_ect"] == 1


def test_ce_already_stays_ce(sw):
    sw.reset()
    sw.set_queue([K + 1])
    frame = pkt(CE)
    out = sw.send(frame)
    assert out == frame and ip_checksum_ok(out)


def test_ecn_off_never_marks_and_keeps_no_queue(sw):
    sw.reset(ecn=False)
    sw.set_queue([LIMIT])
    before = sw.queue().bytes[0]
    frame = pkt(ECT0)
    assert sw.send(frame) == frame
    assert sw.queue().bytes[0] == before           # not even counted
    assert sw.counters()["ecn_marked"] == 0


def test_marks_follow_the_packets_band_not_the_port(sw):
    """Band 2 (layers 8..15) above K, band 0 (untagged) empty: a tagged
    packet of band 2 is marked, an untagged one is not."""
    from common.wire import TaLBHeader

    sw.reset()
    sw.set_queue([0, 0, K + 500])
    tagged = pkt(ECT0, tensor=TaLBHeader(9, 8, 10, 0))
    out = sw.send(tagged)
    assert tos_of(out) == CE and ip_checksum_ok(out)
    sw.set_queue([0, 0, K + 500])
    untagged = pkt(ECT0)
    assert sw.send(untagged) == untagged
    assert sw.counters()["ecn_marked"] == 1


def test_a_fifo_port_counts_every_band_in_band_0(sw):
    """weights [1]: the port has one queue (HTB's default class takes every
    priority), so a tagged packet joins band 0's backlog and marks by it."""
    from common.wire import TaLBHeader

    sw.reset(weights=[1])
    sw.set_queue([K + 1])
    out = sw.send(pkt(ECT0, tensor=TaLBHeader(9, 20, 10, 0)))
    assert tos_of(out) == CE
    q = sw.queue()
    assert q.bytes[0] > K + 1 and all(b == 0 for b in q.bytes[1:])


def test_a_packet_adds_its_bytes_and_the_queue_stops_at_the_limit(sw):
    sw.reset()
    sw.set_queue([100])
    frame = pkt(ECT0)
    sw.send(frame)
    assert sw.queue().bytes[0] == 100 + len(frame)
    sw.set_queue([LIMIT - 10])
    sw.send(frame)
    assert sw.queue().bytes[0] == LIMIT


def test_drain_matches_the_model_over_bands_and_time(sw):
    """Several bands backlogged, a past last_ns: the program drains by
    weight at the link rate (what a band leaves unused going to the
    others) exactly as the model does for the program's own dt."""
    from datapath.ecn import ModelEcnPort, ModelEcnQueue

    port = ModelEcnPort(RATE_BPS // 8, K, LIMIT, BURST, list(WEIGHTS))
    cases = [([6000, 6000, 6000, 6000], 2_000_000), ([200, 6000, 0, 6000], 1_000_000),
             ([6000, 0, 0, 0], 500_000), ([1000, 300, 6000, 6000], 3_000_000),
             ([100, 100, 100, 100], 50_000_000), ([LIMIT] * 4, 5_000_000_000)]
    for backlog, ago in cases:
        sw.reset()
        t0 = mono_ns() - ago
        sw.set_queue(backlog, last_ns=t0)
        frame = pkt(ECT0)
        out = sw.send(frame)
        q = sw.queue()
        model = ModelEcnQueue(t0, 0, list(backlog) + [0] * 4)
        above = model.arrive(port, 0x10010, len(frame), q.last_ns)
        assert list(q.bytes) == model.bytes, (backlog, ago)
        assert q.credit == model.credit
        assert (tos_of(out) == CE) == above


def test_empty_queue_with_credit_sends_at_once(sw):
    sw.reset()
    sw.set_queue([0], credit=BURST)
    frame = pkt(ECT0)
    sw.send(frame)
    q = sw.queue()
    assert q.bytes[0] == 0 and q.credit == BURST - len(frame)


def test_set_ecn_refuses_bad_setups(sw):
    from datapath import control

    sw.reset()
    with pytest.raises(ValueError, match="weights"):
        control.set_ecn(sw.maps, {sw.ifindex[OUT]: {"rate_bps": RATE_BPS, "k_bytes": K,
                                                      "limit_bytes": LIMIT, "burst_bytes": 1,
                                                      "weights": [0]}})
    with pytest.raises(ValueError, match="not a port"):
        control.set_ecn(sw.maps, {424242: {"rate_bps": RATE_BPS, "k_bytes": K,
                                           "limit_bytes": LIMIT, "burst_bytes": 1,
                                           "weights": [1]}})
    assert control.read_ecn(sw.maps)["on"]
