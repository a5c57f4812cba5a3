"""Each FCT definition on a live fabric, against a known answer (issue 17,
item 4; docs/workload.md, "Measurement").

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, 100 Mbit/s
everywhere, HTB burst 15 KB). Tensors go from h0 (leaf0) to h3 (leaf1) over
real TCP, tagged by the host program, whose ``tensor_wire`` map gives each
tensor's first and latest packet at the sender's TC egress.

* Idle fabric, one tensor at a time: network FCT (first packet on the wire
  -> delivered) is the tensor's bytes on the wire over the host rate plus at
  most an RTT (the last packet's way to the receiver), less at most the HTB
  burst the idle host link lets through at once (its 15 KB and the packet
  that overdraws it: veth links have no serialisation of their own, the
  HTBs are the links' rates); the FCT from the hand-off adds only the
  send() call.
* A small tensor queued behind a large one on the same connection: its wait
  is send-buffer wait (first byte to the kernel -> first packet on the
  wire), and its network FCT is the idle one.
* A whole `talb run`: every tensor has every time, in order.
* How far "on the wire" (TC egress, before the host's own qdisc) is from
  the packet leaving the host (a capture on the host's eth0, whose taps see
  a packet after the qdisc), on the idle fabric and with the host's link
  loaded by bulk flows of its own.
"""
from __future__ import annotations

import itertools
import math
import socket
import statistics
import threading
import time

import pytest

from common import paths
from workload.experiment import RunConfig, run
from workload.scaling import scaling_for
from helpers import socket_in, up_fabric
from tiny_model import tiny_profile

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
SRC, DST, OTHER = "h0", "h3", "h4"        # leaf0 -> leaf1; OTHER takes the bulk flows
#: bytes a tagged data packet adds to its payload on the host link: Ethernet 14,
#: IPv4 20 + the TaLB option 12, TCP 20 + timestamps 12
WIRE_OVERHEAD = 14 + 20 + 12 + 20 + 12
#: the receiving application's stamp comes after Python's recv returns and the
#: thread is scheduled again: on this 2-CPU machine, shared with other jobs,
#: that can take a few ms
SLACK_S = 0.004
#: a full-sized tagged frame on the host link
FRAME = 1448 + WIRE_OVERHEAD


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY, agent=True)


def _host(topo, name):
    return next(h for h in topo.hosts if h.name == name)


def _ns(prefix, host):
    return paths.netns_name(prefix, host)


class StampingReceiver:
    """Accepts one connection in a namespace and stamps
    (``time.monotonic_ns()``) the moment the application has the last byte
    of each tensor, given their sizes in order."""

    def __init__(self, ns: str, ip: str, sizes: list[int]):
        self.srv = socket_in(ns, socket.AF_INET, socket.SOCK_STREAM)
        self.srv.bind((ip, 0))
        self.srv.listen(1)
        self.port = self.srv.getsockname()[1]
        self.ends = list(itertools.accumulate(sizes))
        self.done_ns: list[int | None] = [None] * len(sizes)
        self.cv = threading.Condition()
        self.error = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            self.srv.settimeout(30)
            conn, _ = self.srv.accept()
            buf = bytearray(1 << 20)
            got = i = 0
            with conn:
                while i < len(self.ends):
                    n = conn.recv_into(buf)
                    t = time.monotonic_ns()
                    if n == 0:
                        break
                    got += n
                    with self.cv:
                        while i < len(self.ends) and got >= self.ends[i]:
                            self.done_ns[i] = t
                            i += 1
                        self.cv.notify_all()
        except Exception as exc:   # noqa: BLE001 - reported by wait()
            self.error = exc
            with self.cv:
                self.cv.notify_all()

    def wait(self, i: int, timeout: float = 30.0) -> int:
        with self.cv:
            self.cv.wait_for(lambda: self.done_ns[i] is not None or self.error, timeout)
        assert self.error is None, self.error
        assert self.done_ns[i] is not None, f"tensor {i} not delivered after {timeout} s"
        return self.done_ns[i]

    def close(self):
        self.thread.join(30)
        self.srv.close()


def _wire_bytes(nbytes: int, mss: int) -> int:
    return nbytes + math.ceil(nbytes / mss) * WIRE_OVERHEAD


def _min_rtt_s(sock) -> float:
    """TCP's minimum RTT of the connection (struct tcp_info tcpi_min_rtt, us)."""
    import struct

    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 152)
    return struct.unpack_from("=I", raw, 148)[0] / 1e6


def _send_and_time(prefix, topo, sizes, *, gap_s=0.03, sequential=True, sndbuf=None):
    """Tensors of ``sizes`` from SRC to DST on one connection: per tensor the
    five times (start = before send(), kernel, wire first/last, delivered),
    from the TensorSender's records, the sender host's tensor_wire map and
    the receiver. ``sequential``: each waits for the last one's delivery
    (and ``gap_s``); else all are handed over back to back."""
    from datapath.host_maps import HostMaps
    from workload.tensor_sender import TensorSender

    dst = _host(topo, DST)
    rx = StampingReceiver(_ns(prefix, DST), dst.ip, sizes)
    sock = socket_in(_ns(prefix, SRC), socket.AF_INET, socket.SOCK_STREAM)
    out = []
    try:
        if sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        sock.connect((dst.ip, rx.port))
        with TensorSender(sock) as tx:
            for i, n in enumerate(sizes):
                if sequential and i:
                    rx.wait(i - 1)
                    time.sleep(gap_s)
                t_start = time.monotonic_ns()
                rec = tx.send(bytes(n), layer=0)
                out.append({"bytes": n, "rec": rec, "t_start_ns": t_start})
            for i in range(len(sizes)):
                rx.wait(i)
            rtt = _min_rtt_s(sock)
    finally:
        sock.close()
        rx.close()
    with HostMaps(paths.pin_dir(prefix, SRC)) as maps:
        wire = maps.wire_times([o["rec"].tensor_id for o in out])
    for i, o in enumerate(out):
        w = wire[o["rec"].tensor_id]
        o.update(t_kernel_ns=o["rec"].t_kernel_ns, first=w.first_ns, last=w.last_ns,
                 latest=w.latest_ns, packets=w.packets, last_seen=w.last_seen,
                 done=rx.done_ns[i], mss=o["rec"].mss)
        o["netfct_s"] = (o["done"] - o["first"]) / 1e9
        o["fct_s"] = (o["done"] - o["t_start_ns"]) / 1e9
        o["sendbuf_s"] = (o["first"] - o["t_kernel_ns"]) / 1e9
    return out, rtt


def _check_order(o):
    assert o["t_start_ns"] <= o["t_kernel_ns"] <= o["first"] <= o["last"] <= o["done"], o
    assert o["last_seen"] and o["packets"] >= math.ceil(o["bytes"] / o["mss"]), o


#: sizes of the idle case: 10, 100 and 1000 full segments, three of each
IDLE_SIZES = [1448 * k for k in (10, 100, 1000)] * 3


def test_idle_network_fct_is_bytes_over_rate_plus_at_most_an_rtt(fabric, record_property,
                                                                 capsys):
    prefix, topo = fabric
    rate = topo.ports(SRC)[0].rate_bps
    burst = topo.queue.burst
    out, rtt = _send_and_time(prefix, topo, IDLE_SIZES)
    rows = []
    for o in out:
        _check_order(o)
        ideal = _wire_bytes(o["bytes"], o["mss"]) * 8 / rate
        # an idle HTB lets its burst through at once, and one packet more (a class
        # sends while its tokens are not negative: the last packet overdraws them)
        low = max(0.0, _wire_bytes(o["bytes"], o["mss"]) - burst - 2 * FRAME) * 8 / rate
        high = ideal + rtt + SLACK_S
        rows.append((o["bytes"], ideal, o["netfct_s"], o["fct_s"], o["sendbuf_s"]))
        assert low <= o["netfct_s"] <= high, (
            f"{o['bytes']} B: network FCT {o['netfct_s'] * 1e3:.2f} ms outside "
            f"[{low * 1e3:.2f}, {high * 1e3:.2f}] ms (bytes on the wire / rate "
            f"{ideal * 1e3:.2f} ms, min RTT {rtt * 1e3:.3f} ms)")
        # idle: nothing waits in the socket buffer, the hand-off adds only send()
        assert o["sendbuf_s"] < 0.002 and o["fct_s"] - o["netfct_s"] < 0.003, o
    by = {}
    for n, ideal, net, fct, buf in rows:
        by.setdefault(n, []).append((ideal, net, fct, buf))
    summary = {n: {"ideal_ms": v[0][0] * 1e3,
                   "netfct_ms": [round(x[1] * 1e3, 3) for x in v],
                   "fct_ms": [round(x[2] * 1e3, 3) for x in v],
                   "sendbuf_ms": [round(x[3] * 1e3, 3) for x in v]} for n, v in by.items()}
    record_property("idle_netfct", {"min_rtt_ms": rtt * 1e3, **summary})
    with capsys.disabled():
        print(f"\n  idle h0 -> h3, min RTT {rtt * 1e3:.3f} ms")
        for n, s in summary.items():
            print(f"  {n:>9} B: bytes/rate {s['ideal_ms']:.2f} ms; network FCT {s['netfct_ms']} "
                  f"ms; FCT from hand-off {s['fct_ms']} ms; send-buffer wait {s['sendbuf_ms']} ms")


def test_a_tensor_queued_behind_a_large_one_waits_in_the_send_buffer(fabric, record_property,
                                                                   capsys):
    """4 MB, then 10 segments on the same connection at once: the small one's
    first byte goes to the kernel once the large one is in the socket buffer,
    and its first packet leaves only after the large one's last. That wait is
    send-buffer wait; its network FCT is the idle one."""
    prefix, topo = fabric
    rate = topo.ports(SRC)[0].rate_bps
    big, small = 4_000_000, 1448 * 10
    out, rtt = _send_and_time(prefix, topo, [big, small], sequential=False, sndbuf=4 << 20)
    B, s = out
    for o in out:
        _check_order(o)
    if B["packets"] == math.ceil(big / B["mss"]):      # no retransmission of B after s
        assert s["first"] > B["latest"]                 # stream order: s after all of B
    assert s["t_kernel_ns"] < B["last"]                 # s reached the kernel while B was queued
    ideal = _wire_bytes(small, s["mss"]) * 8 / rate
    # the wait behind B: at least what of B was left to send when s reached the kernel
    assert s["sendbuf_s"] >= (B["last"] - s["t_kernel_ns"]) / 1e9 - 0.001
    assert s["sendbuf_s"] > 5 * ideal, s
    assert s["netfct_s"] <= ideal + rtt + SLACK_S, s
    assert s["fct_s"] == pytest.approx(s["netfct_s"] + s["sendbuf_s"]
                                       + (s["t_kernel_ns"] - s["t_start_ns"]) / 1e9, abs=1e-9)
    numbers = {"big_fct_ms": B["fct_s"] * 1e3, "big_netfct_ms": B["netfct_s"] * 1e3,
               "small_fct_ms": s["fct_s"] * 1e3, "small_netfct_ms": s["netfct_s"] * 1e3,
               "small_sendbuf_ms": s["sendbuf_s"] * 1e3, "small_ideal_ms": ideal * 1e3}
    record_property("queued_small_tensor", numbers)
    with capsys.disabled():
        print("\n  4 MB then 14.5 KB on one connection: "
              + ", ".join(f"{k} {v:.2f}" for k, v in numbers.items()))


def test_a_run_records_every_time_of_every_tensor_in_order(fabric, tmp_path):
    """A tiny PS run: every tensor has its admission (pushes), kernel, wire
    and delivery times, in order; the summary and headline carry network FCT
    beside today's, with no tensor missing its wire times."""
    prefix, _ = fabric
    cfg = RunConfig(model="tiny", arch="ps", workers=2, servers=1, iterations=3, warmup=1,
                    partition_bytes=100_000, credit_bytes=200_000, target_link_bps=100e6,
                    prefix=prefix, out=str(tmp_path / "ps.json"), timeout_s=240)
    r = run(cfg, profile=tiny_profile(), scaling=scaling_for(100e6, 100e6))
    tensors = r["tensors"]
    assert tensors and r["wire"]["errors"] == {}
    for t in tensors:
        assert not t["censored"] and t["ok"]
        assert t["t_start_ns"] <= t["t_kernel_ns"] <= t["t_wire_first_ns"] \
            <= t["t_wire_last_ns"] <= t["t_delivered_ns"] == t["t_done_ns"], t
        if t["kind"] == "push":
            assert t["t_admit_ns"] is not None and t["t_admit_ns"] <= t["t_start_ns"], t
        assert t["t_wire_last_ns"] <= t["t_wire_latest_ns"], t    # retransmissions: later
        assert t["wire_packets"] >= math.ceil(t["bytes"] / 1448), t
        assert t["netfct_s"] <= t["fct_s"]
        assert t["fct_s"] == pytest.approx((t["t_kernel_ns"] - t["t_start_ns"]) / 1e9
                                           + t["sendbuf_wait_s"] + t["netfct_s"], abs=1e-9)
    s = r["summary"]["tensors"]
    for block in (*s["by_class"].values(), s["trailing"]):
        assert block["wire_missing"] == 0 and block["netfct"]["n"] == block["n"]
    head = r["headline"]
    assert head["all_netfct_mean_s"] == s["by_class"]["all"]["netfct"]["mean_s"] > 0
    assert head["all_netfct_mean_s"] <= head["all_fct_mean_s"]
    assert head["all_wire_missing"] == 0 and head["all_sendbuf_wait_mean_s"] >= 0
    assert s["by_class"]["all"]["sched_wait"]["n"] == sum(t["kind"] == "push" and not t["warmup"]
                                                          for t in tensors)


# --- how far TC egress is from the packet leaving the host ---------------------------
def _capture_times(pcap) -> dict[int, tuple[int, int, int]]:
    """{tensor_id: (first, last, packets)} of the tagged packets in a
    nanosecond pcap, in CLOCK_REALTIME ns."""
    import struct

    from scapy.utils import RawPcapReader

    out: dict[int, list[int]] = {}
    with RawPcapReader(str(pcap)) as reader:
        assert reader.nano, "the capture's timestamps are not in nanoseconds"
        for data, meta in reader:
            t = meta.sec * 1_000_000_000 + meta.usec      # usec holds ns in a nano pcap
            (tid,) = struct.unpack_from("!I", data, 14 + 20 + 2)
            v = out.setdefault(tid, [t, t, 0])
            v[0], v[1], v[2] = min(v[0], t), max(v[1], t), v[2] + 1
    return {k: tuple(v) for k, v in out.items()}


def _realtime_minus_monotonic() -> int:
    best = None
    for _ in range(20):            # the pair read closest together
        a = time.monotonic_ns()
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


class Bulk:
    """``n`` untagged TCP flows from SRC to OTHER, each writing as fast as it
    can until stopped: the sender's own link (and its qdisc) loaded."""

    def __init__(self, prefix, topo, n: int):
        other = _host(topo, OTHER)
        self.stop = threading.Event()
        self.srv = socket_in(_ns(prefix, OTHER), socket.AF_INET, socket.SOCK_STREAM)
        self.srv.bind((other.ip, 0))
        self.srv.listen(n)
        port = self.srv.getsockname()[1]
        self.threads = [threading.Thread(target=self._sink, daemon=True) for _ in range(n)]
        self.socks = []
        for _ in range(n):
            s = socket_in(_ns(prefix, SRC), socket.AF_INET, socket.SOCK_STREAM)
            s.connect((other.ip, port))
            self.socks.append(s)
        self.threads += [threading.Thread(target=self._source, args=(s,), daemon=True)
                         for s in self.socks]
        for t in self.threads:
            t.start()

    def _sink(self):
        conn, _ = self.srv.accept()
        with conn:
            while conn.recv(1 << 20):
                pass

    def _source(self, s):
        block = bytes(1 << 16)
        try:
            while not self.stop.is_set():
                s.sendall(block)
        except OSError:
            pass

    def close(self):
        self.stop.set()
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(10)
        self.srv.close()


def _egress_error(prefix, topo, tmp_path, name, sizes, bulk_flows=0):
    from workload.capture import TAGGED_FILTER, start_capture

    pcap = tmp_path / f"{name}.pcap"
    cap = start_capture(_ns(prefix, SRC), _host(topo, SRC).iface, pcap, direction="out",
                        bpf_filter=TAGGED_FILTER, nano=True)
    bulk = None
    try:
        off0 = _realtime_minus_monotonic()
        if bulk_flows:
            bulk = Bulk(prefix, topo, bulk_flows)
            time.sleep(1.0)                     # the flows' windows open, the qdisc fills
        out, rtt = _send_and_time(prefix, topo, sizes)
        off1 = _realtime_minus_monotonic()
    finally:
        if bulk is not None:
            bulk.close()
        cap.stop()
    got = _capture_times(pcap)
    off = (off0 + off1) // 2
    d_first, d_last = [], []
    for o in out:
        first, last, packets = got[o["rec"].tensor_id]
        assert packets >= math.ceil(o["bytes"] / o["mss"]), (o, packets)
        d_first.append((first - off - o["first"]) / 1e6)     # ms the qdisc held the first packet
        d_last.append((last - off - o["latest"]) / 1e6)     # the latest packet, both sides
    return {"flows": bulk_flows, "tensors": len(out), "clock_drift_us": abs(off1 - off0) / 1e3,
            "first_ms_median": statistics.median(d_first), "first_ms_max": max(d_first),
            "last_ms_median": statistics.median(d_last), "last_ms_max": max(d_last),
            "netfct_ms_mean": statistics.fmean(o["netfct_s"] for o in out) * 1e3,
            "fct_ms_mean": statistics.fmean(o["fct_s"] for o in out) * 1e3,
            "min_d_ms": min(d_first + d_last)}


def test_tc_egress_vs_leaving_the_host_idle_and_loaded(fabric, tmp_path, record_property, capsys):
    """The wire times are taken at TC egress, before the host's own qdisc
    (HTB + bfifo): a capture on the host's eth0 (taps run after the qdisc)
    says how long the qdisc held each tensor's first and last packet. Idle:
    well under a millisecond. Loaded by 4 bulk flows of the same host: at
    most the host queue's limit at the link rate (150 KB, 12 ms)."""
    prefix, topo = fabric
    rate = topo.ports(SRC)[0].rate_bps
    qmax_ms = topo.queue.limit * 8 / rate * 1e3
    sizes = [1448 * k for k in (10, 100)] * 5
    idle = _egress_error(prefix, topo, tmp_path, "idle", sizes)
    loaded = _egress_error(prefix, topo, tmp_path, "loaded", sizes, bulk_flows=4)
    record_property("tc_egress_error", {"idle": idle, "loaded": loaded})
    with capsys.disabled():
        for name, e in (("idle", idle), ("loaded", loaded)):
            print(f"\n  {name}: capture on eth0 minus TC egress, first packet median "
                  f"{e['first_ms_median']:.3f} ms max {e['first_ms_max']:.3f} ms; last packet "
                  f"median {e['last_ms_median']:.3f} ms max {e['last_ms_max']:.3f} ms "
                  f"({e['tensors']} tensors, {e['flows']} bulk flows, clock drift "
                  f"{e['clock_drift_us']:.1f} us); network FCT mean {e['netfct_ms_mean']:.2f} ms, "
                  f"FCT from hand-off {e['fct_ms_mean']:.2f} ms")
    for e in (idle, loaded):
        assert e["min_d_ms"] > -0.2, e             # the capture never sees a packet before TC
    assert idle["first_ms_max"] < 1.0, idle
    assert loaded["first_ms_max"] <= qmax_ms + 2.0 and loaded["last_ms_max"] <= qmax_ms + 2.0, loaded
