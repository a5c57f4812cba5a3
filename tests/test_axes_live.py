"""The hosts' minimum RTO changed on a running fabric, and a run's placement
(issue 18 item 3; docs/workload.md "Placement", "Minimum RTO"): every
host's route carries the locked RTAX_RTO_MIN metric after
testbed.lifecycle.set_rto_min and none after ``kernel`` (read back with
pyroute2 in each host's namespace), a new connection's RTO follows it, and
`talb run --rto-min 10ms --placement remote` records both, sends
background from every host and puts the fabric back.

Fabric: 2 leaves x 2 hosts, one spine, 20 Mbit/s links, built without
rto_min (the kernel's 200 ms).
"""
from __future__ import annotations

import socket
import struct
import time

import pytest
from pyroute2 import IPRoute

from common import paths
from netns_topology import LeafSpine
from netns_topology.builder import RTAX_RTO_MIN
from netns_topology.state import read_state, rto_min_of
from testbed import lifecycle
from helpers import free_port, socket_in, up_fabric

pytestmark = pytest.mark.live

TOPO = dict(spines=1, leaves=2, hosts_per_leaf=2, host_link_rate="20mbit", link_rate="20mbit")
_TCPI_LEN, _RTO = 104, 8        # struct tcp_info: __u32 tcpi_rto at byte 8 (us)


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, LeafSpine(**TOPO))


def _routes(prefix: str, topo) -> dict:
    """Per host: (rto_min ms, locked) of its route to the fabric, or None
    when the route has no such metric."""
    out = {}
    for h in topo.hosts:
        with IPRoute(netns=paths.netns_name(prefix, h.name), flags=0) as ipr:
            found = [r for r in ipr.get_routes(family=socket.AF_INET, table=254)
                     if r["dst_len"] == 15 and r.get_attr("RTA_PREFSRC") == h.ip]
        assert len(found) == 1, (h.name, found)
        metrics = found[0].get_attr("RTA_METRICS")
        rto = metrics.get_attr("RTAX_RTO_MIN") if metrics else None
        lock = (metrics.get_attr("RTAX_LOCK") or 0) if metrics else 0
        out[h.name] = None if rto is None else (rto, bool(lock & (1 << RTAX_RTO_MIN)))
    return out


def _new_connection_rto_ms(prefix: str, topo) -> float:
    """The kernel's RTO (tcpi_rto) of a fresh h0 -> h3 connection after a few exchanges."""
    src, dst = topo.hosts[0], topo.hosts[3]
    listener = socket_in(paths.netns_name(prefix, dst.name), socket.AF_INET, socket.SOCK_STREAM)
    sender = socket_in(paths.netns_name(prefix, src.name), socket.AF_INET, socket.SOCK_STREAM)
    receiver = None
    try:
        port = free_port()
        listener.bind((dst.ip, port))
        listener.listen(1)
        sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sender.connect((dst.ip, port))
        receiver, _ = listener.accept()
        receiver.settimeout(5)
        for _ in range(10):
            sender.sendall(b"x" * 100)
            assert receiver.recv(4096)
            time.sleep(0.002)
        time.sleep(0.02)
        raw = sender.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCPI_LEN)
        return struct.unpack_from("I", raw, _RTO)[0] / 1e3
    finally:
        for s in (receiver, sender, listener):
            if s is not None:
                s.close()


def test_set_rto_min_on_a_live_fabric_and_back(fabric):
    prefix, topo = fabric.prefix, fabric.topo
    assert rto_min_of(prefix) is None
    assert set(_routes(prefix, topo).values()) == {None}
    assert _new_connection_rto_ms(prefix, topo) >= 200
    try:
        assert lifecycle.set_rto_min(prefix, "10ms") == 10
        assert _routes(prefix, topo) == {h.name: (10, True) for h in topo.hosts}
        assert read_state(prefix)["rto_min"] == {"ms": 10}
        st = lifecycle.status(prefix)
        assert (st["rto_min_ms"], st["rto_min_topology_ms"]) == (10, None)
        assert lifecycle.set_rto_min(prefix, "0.01s") == 10          # in force: nothing done
        assert 10 <= _new_connection_rto_ms(prefix, topo) < 50       # 10 ms in jiffies, + RTT
        assert lifecycle.set_rto_min(prefix, 25) == 25                # another value replaces it
        assert set(_routes(prefix, topo).values()) == {(25, True)}
    finally:
        assert lifecycle.set_rto_min(prefix, "kernel") is None
    assert set(_routes(prefix, topo).values()) == {None}
    assert "rto_min" not in read_state(prefix) and lifecycle.status(prefix)["rto_min_ms"] is None
    assert _new_connection_rto_ms(prefix, topo) >= 200
    # the routes still carry the fabric's traffic as before
    assert _new_connection_rto_ms(prefix, topo) < 1000


def test_talb_run_with_rto_min_and_remote_placement(fabric, tmp_path):
    from workload.experiment import RunConfig, run
    from workload.scaling import scaling_for
    from tiny_model import tiny_profile

    prefix, topo = fabric.prefix, fabric.topo
    cfg = RunConfig(model="tiny", arch="ps", workers=2, servers=1, scheme="ecmp", iterations=3,
                    warmup=1, partition_bytes=100_000, credit_bytes=200_000, target_link_bps=20e6,
                    prefix=prefix, out=str(tmp_path / "axes.json"), timeout_s=240,
                    rto_min="10ms", placement="remote", load=0.3, background_s=2.0,
                    background_size_scale=0.05, seed=3)
    said = []
    r = run(cfg, profile=tiny_profile(), scaling=scaling_for(20e6, 20e6), say=said.append)
    assert r["fabric"]["rto_min_ms"] == 10 and r["headline"]["rto_min_ms"] == 10
    assert r["config"]["rto_min"] == "10ms" and r["config"]["placement"] == "remote"
    # remote: the server on the last leaf, the workers on the first
    assert r["placement"] == {"workers": ["h0", "h1"], "servers": ["h2"], "mode": "remote",
                              "spec": "remote"}
    every = [h.name for h in topo.hosts]
    assert r["load"]["senders"] == every and r["load"]["senders_rule"] == "every host"
    bg = r["load"]["background"]
    assert bg["params"]["senders"] == every
    assert {f["src"] for f in bg["flows"]} - {"h0", "h1"}, "no flow from a non-worker host"
    assert r["summary"]["tensors"]["corrupted"] == 0
    assert "hosts' minimum RTO: 10 ms (was the kernel's 200 ms)" in said
    # the testbed was up before the run: its hosts have the kernel's RTO again
    assert rto_min_of(prefix) is None and set(_routes(prefix, topo).values()) == {None}
