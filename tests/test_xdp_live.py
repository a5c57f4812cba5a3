"""`--datapath xdp` on a live fabric: 2 spines x 2 leaves x 2 hosts, unshaped.

Every switch port runs talb_switch_xdp, every host's interface
talb_host_xdp (XDP_PASS: veth delivers an XDP_REDIRECT only to an end
with an XDP program). Pings and TCP cross the fabric under each scheme XDP
runs, the per-port counters move, tagged tensors arrive stripped; what XDP
cannot run is refused with an error naming option and value.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from datapath.xdp import XDP_SCHEMES
from helpers import up_fabric

pytestmark = [pytest.mark.live, pytest.mark.bpf]


def topology(**extra):
    from netns_topology import topology_from_dict

    return topology_from_dict({"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                               "shaping": False, **extra})


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, topology(), datapath="xdp")


def ns(fabric, node):
    from common import paths

    return paths.netns_name(fabric.prefix, node)


def counters(fabric):
    from testbed import lifecycle

    return {sw["name"]: sw for sw in lifecycle.status(fabric.prefix)["switches"]}


def test_xdp_programs_on_every_port(fabric):
    from datapath.xdp import xdp_prog_name

    for sw in fabric.topo.switches:
        for p in fabric.topo.ports(sw.name):
            assert xdp_prog_name(ns(fabric, sw.name), p.name) == "talb_switch_xdp", (sw, p)
    for h in fabric.topo.hosts:
        assert xdp_prog_name(ns(fabric, h.name), h.iface) == "talb_host_xdp"
    from netns_topology.state import read_state

    assert read_state(fabric.prefix)["datapath"] == "xdp"


def test_ping_all_pairs(fabric):
    hosts = fabric.topo.hosts
    for a in hosts:
        for b in hosts:
            if a is b:
                continue
            r = subprocess.run(["ip", "netns", "exec", ns(fabric, a.name), "ping", "-c", "2",
                                "-i", "0.2", "-W", "1", b.ip], capture_output=True, text=True)
            assert r.returncode == 0, (a.name, b.name, r.stdout[-300:])


@pytest.mark.parametrize("scheme", list(XDP_SCHEMES))
def test_tcp_across_leaves_under_each_scheme(fabric, scheme):
    from datapath.fabric import switch_configs
    from workload.iperf import run_iperf3

    switch_configs(fabric.topo, fabric.prefix, scheme)
    src, dst = fabric.topo.hosts[0], fabric.topo.hosts[2]
    assert src.leaf != dst.leaf
    before = counters(fabric)
    res = run_iperf3(ns(fabric, src.name), ns(fabric, dst.name), dst.ip, duration=2,
                     parallel=4)
    after = counters(fabric)
    assert res.received_bps > 50e6, res      # unshaped: far above any emulated rate
    leaf = src.leaf
    up = {p["name"]: (p["tx_bytes"] or 0) - (b["tx_bytes"] or 0)
          for p, b in zip(after[leaf]["ports"], before[leaf]["ports"]) if p["kind"] == "fabric"}
    assert sum(up.values()) > res.received_bps * 2 / 8 * 0.9, up
    c = {k: after[leaf]["counters"][k] - before[leaf]["counters"].get(k, 0)
         for k in after[leaf]["counters"]}
    assert c["redirected"] > 1000 and c["released"] == 0
    if scheme == "rps":                       # per packet: every uplink carries some
        assert len(up) == 2 and all(v > 0 for v in up.values()), up
    if scheme == "conga":
        assert c["conga_pushed"] > 0
        far = after[dst.leaf]["counters"]
        assert far["conga_stripped"] - before[dst.leaf]["counters"]["conga_stripped"] > 0
    else:
        assert c[f"decision_{scheme}" if scheme != "talb" else "decision_ecmp"] > 0


def test_tagged_tensors_arrive_stripped(fabric):
    """TaLB: hosts tag (TC egress), the source leaf decides from the table,
    the destination leaf strips the option in XDP (talb/ipopt_xdp.h)."""
    from datapath.fabric import switch_configs

    switch_configs(fabric.topo, fabric.prefix, "talb")
    before = counters(fabric)
    r = subprocess.run([sys.executable, "-m", "talb.cli", "send", "--src", "h0", "--dst", "h2",
                        "--tensors", "6", "--prefix", fabric.prefix],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    after = counters(fabric)
    dst_leaf = fabric.topo.hosts[2].leaf
    src_leaf = fabric.topo.hosts[0].leaf
    stripped = after[dst_leaf]["counters"]["stripped"] - before[dst_leaf]["counters"]["stripped"]
    talb = (after[src_leaf]["counters"]["decision_talb"]
            - before[src_leaf]["counters"]["decision_talb"])
    assert stripped > 0 and talb > 0, (stripped, talb)
    assert after[dst_leaf]["counters"]["drop_strip_fail"] == 0


def test_what_xdp_cannot_run_is_refused(fabric):
    from datapath.fabric import switch_configs
    from datapath.xdp import XdpError

    with pytest.raises(XdpError, match="--datapath xdp cannot run --scheme drill"):
        switch_configs(fabric.topo, fabric.prefix, "drill")
    assert all(c["scheme"] != "drill" for c in switch_configs(fabric.topo, fabric.prefix).values())
    r = subprocess.run([sys.executable, "-m", "talb.cli", "scheme", "drill", "--prefix",
                        fabric.prefix], capture_output=True, text=True)
    assert r.returncode != 0 and "cannot run scheme drill" in (r.stdout + r.stderr)
    r = subprocess.run([sys.executable, "-m", "talb.cli", "scheme", "talb", "--param",
                        "fallback=drill", "--prefix", fabric.prefix],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "fallback drill" in (r.stdout + r.stderr)


def test_up_refuses_shaping_and_drill_before_building(root):
    from conftest import new_prefix
    from netns_topology.state import TestbedError, exists
    from testbed import lifecycle

    for topo, match in ((topology(shaping=True), "shaping: true"),
                        (topology(scheme="drill"), "--scheme drill")):
        prefix = new_prefix()
        with pytest.raises(TestbedError, match=match):
            lifecycle.up(topo, prefix, datapath="xdp")
        assert not exists(prefix)


def test_agent_runs_on_an_xdp_fabric(request, bcc):
    """`up --datapath xdp` starts the agent by default: it reads the same
    maps (PCM from the program's counters and the M/D/1 model)."""
    import time

    from testbed import lifecycle

    fab = up_fabric(request, topology(spines=2, leaves=2, hosts_per_leaf=1, scheme="talb"),
                    datapath="xdp", agent=True)
    deadline = time.monotonic() + 15
    st = lifecycle.status(fab.prefix)
    while st["agent_window_s"] is None and time.monotonic() < deadline:
        time.sleep(0.5)
        st = lifecycle.status(fab.prefix)
    assert st["agent_pid"] and st["agent_window_s"], st
