"""Hosts' minimum RTO (topology field ``rto_min``, netns_topology/builder.py):
the hosts' route carries it, and a real retransmission timeout on a live
fabric fires after about rto_min, not the kernel's 200 ms.

The loss: the receiver's eth0 MTU is lowered to 576 for a moment, so its
leaf's veth drops a full-size segment (veth refuses a packet larger than
its peer's MTU) while ACKs and the fabric stay as they were (no port goes
down, no STP). The sender's tail-loss probe is switched off in its
namespace (net.ipv4.tcp_early_retrans = 0), so the first retransmission is
the RTO's and is counted as TCPTimeouts.
"""
from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest
from pyroute2 import IPRoute, netns

from common.paths import netns_name
from netns_topology import LeafSpine, build, teardown
from workload.measure import read_tcp_counters
from conftest import new_prefix
from helpers import ping, run_in, socket_in

pytestmark = pytest.mark.live

PORT = 7300
SMALL_MTU = 576
# struct tcp_info (include/uapi/linux/tcp.h): __u32 tcpi_rto at byte 8 (us),
# tcpi_rtt at 68 (us), tcpi_total_retrans at 100
_TCPI_LEN, _RTO, _RTT, _TOTAL_RETRANS = 104, 8, 68, 100
JIFFY_S = 0.004          # CONFIG_HZ=250 here: the RTO timer's granularity


def _fabric(rto_min):
    prefix = new_prefix()
    topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1, rto_min=rto_min)
    try:
        build(topo, prefix)
        h1 = topo.hosts[1]
        deadline = time.monotonic() + 20     # STP: ports forward after 2 x forward_delay
        while not ping(netns_name(prefix, "h0"), h1.ip, count=1, timeout=0.5):
            assert time.monotonic() < deadline, "h1 never answered h0"
    except BaseException:
        teardown(prefix)
        raise
    return prefix, topo


@pytest.fixture(scope="module")
def fast(root):
    prefix, topo = _fabric("10ms")
    yield prefix, topo
    teardown(prefix)


@pytest.fixture(scope="module")
def kernel_default(root):
    prefix, topo = _fabric(None)
    yield prefix, topo
    teardown(prefix)


def _sysctl(ns: str, key: str, value: str) -> None:
    netns.pushns(ns)
    try:
        Path("/proc/sys", key.replace(".", "/")).write_text(value)
    finally:
        netns.popns()


def _set_mtu(ns: str, mtu: int) -> None:
    with IPRoute(netns=ns, flags=0) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], mtu=mtu)


def _tcp_info(sock) -> tuple[int, int, int]:
    """(rto us, rtt us, total retransmissions) of a connected TCP socket."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCPI_LEN)
    return (struct.unpack_from("I", raw, _RTO)[0], struct.unpack_from("I", raw, _RTT)[0],
            struct.unpack_from("I", raw, _TOTAL_RETRANS)[0])


def measure_rto(prefix: str, topo) -> dict:
    """One segment lost on its way from h0 to h1: seconds from its send to
    the sender's first retransmission (TCP_INFO polled every ~0.2 ms), the
    kernel's RTO for the connection then, and the counters it left."""
    h0, h1 = (netns_name(prefix, h.name) for h in topo.hosts)
    _sysctl(h0, "net.ipv4.tcp_early_retrans", "0")      # no tail-loss probe: the RTO fires
    listener = socket_in(h1, socket.AF_INET, socket.SOCK_STREAM)
    sender = socket_in(h0, socket.AF_INET, socket.SOCK_STREAM)
    receiver = None
    try:
        listener.bind((topo.hosts[1].ip, PORT))
        listener.listen(1)
        sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sender.connect((topo.hosts[1].ip, PORT))
        receiver, _ = listener.accept()
        receiver.settimeout(5.0)
        for _ in range(20):                              # an RTT sample or twenty
            sender.sendall(b"x" * 100)
            assert len(receiver.recv(4096)) > 0
            time.sleep(0.002)
        time.sleep(0.05)                                 # every ACK in
        rto_before, rtt, retrans0 = _tcp_info(sender)
        before = read_tcp_counters(h0)
        _set_mtu(h1, SMALL_MTU)
        try:
            t0 = time.monotonic()
            sender.sendall(b"y" * 1200)                  # one full-size segment: dropped
            first = None
            while time.monotonic() - t0 < 2.0:
                if _tcp_info(sender)[2] > retrans0:
                    first = time.monotonic() - t0
                    break
                time.sleep(0.0002)
        finally:
            _set_mtu(h1, topo.mtu)                       # the next retransmission arrives
        got = b""
        while len(got) < 1200:
            got += receiver.recv(4096)
        after = read_tcp_counters(h0)
    finally:
        for s in (receiver, sender, listener):
            if s is not None:
                s.close()
    return {"first_retransmission_s": first, "rto_us": rto_before, "rtt_us": rtt,
            "timeouts": after["timeouts"] - before["timeouts"],
            "fast_retrans": after["fast_retrans"] - before["fast_retrans"]}


def test_hosts_route_carries_rto_min(fast, kernel_default):
    for (prefix, topo), want in ((fast, True), (kernel_default, False)):
        for h in topo.hosts:
            routes = run_in(netns_name(prefix, h.name), "ip", "-4", "route", "show").stdout
            assert ("rto_min lock 10ms" in routes) is want, routes
            # the same route otherwise: the fabric's /15, on eth0, from the host's address
            assert f"198.18.0.0/15 dev eth0 proto kernel scope link src {h.ip}" in routes, routes


def test_a_real_timeout_fires_after_rto_min_not_200ms(fast, kernel_default, capsys):
    quick = measure_rto(*fast)
    slow = measure_rto(*kernel_default)
    with capsys.disabled():
        for name, m in (("rto_min 10ms", quick), ("kernel default", slow)):
            first = m["first_retransmission_s"]
            print(f"\n    [{name}] first retransmission {first * 1e3:.1f} ms after the send "
                  f"(kernel RTO {m['rto_us'] / 1e3:.1f} ms, srtt {m['rtt_us']} us; "
                  f"TCPTimeouts +{m['timeouts']}, fast retransmits +{m['fast_retrans']})")
    for m in (quick, slow):
        assert m["first_retransmission_s"] is not None, m
        assert m["timeouts"] >= 1 and m["fast_retrans"] == 0, m    # a timeout, not dupacks
    # 10 ms rounds up to whole jiffies (12 ms at HZ=250); the timer fires on a tick
    assert 10e3 <= quick["rto_us"] < 20e3, quick
    assert 0.009 <= quick["first_retransmission_s"] < 0.010 + 3 * JIFFY_S + 0.02, quick
    assert slow["rto_us"] >= 200e3, slow
    assert 0.19 <= slow["first_retransmission_s"] < 0.30, slow
