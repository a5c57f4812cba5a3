"""Building fabrics in real namespaces, read back with pyroute2 (needs root)."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyroute2 import IPRoute, netns

from common.paths import netns_name
from netns_topology import BuildError, LeafSpine, TopologyError, build, load_topology, teardown
from netns_topology import builder, qdisc
from netns_topology.teardown import namespaces
from conftest import new_prefix
from helpers import ping

REPO = Path(__file__).resolve().parent.parent
IFF_UP = 0x1
NUD_PERMANENT = 0x80
pytestmark = pytest.mark.live


@pytest.fixture
def prefix(root):
    """A prefix of the test's own, torn down afterwards whatever happened."""
    name = new_prefix()
    yield name
    teardown(name)


@pytest.fixture(scope="module")
def fabric(root):
    """Default 2x2x2 fabric, leaf0-spine1 at half rate (asymmetric.yaml), leaf1-spine0 down."""
    name = new_prefix()
    topo = load_topology(REPO / "topologies" / "asymmetric.yaml")
    topo.set_link("leaf1", "spine0", up=False)
    with IPRoute() as ipr:
        root_links_before = sorted(link.get("ifname") for link in ipr.get_links())
    messages = []
    start = time.monotonic()
    try:
        build(topo, name, progress=messages.append)
        elapsed = time.monotonic() - start
        print(f"\nbuilt the default fabric in {elapsed:.2f} s")
        yield {"prefix": name, "topo": topo, "messages": messages, "elapsed": elapsed,
               "root_links_before": root_links_before}
    finally:
        teardown(name)


def ipr_in(prefix: str, node: str) -> IPRoute:
    return IPRoute(netns=netns_name(prefix, node), flags=0)


def link_by_name(ipr: IPRoute, ifname: str):
    return ipr.get_links(ipr.link_lookup(ifname=ifname)[0])[0]


def htb_classes(ipr: IPRoute, ifname: str) -> dict[int, dict]:
    index = ipr.link_lookup(ifname=ifname)[0]
    return {c["handle"]: c.get("TCA_OPTIONS").get("TCA_HTB_PARMS") for c in ipr.get_classes(index=index)}


def read_sysctl(prefix: str, node: str, key: str) -> str:
    netns.pushns(netns_name(prefix, node))
    try:
        return Path("/proc/sys", key.replace(".", "/")).read_text().strip()
    finally:
        netns.popns()


def wait_for_ping(prefix: str, node: str, dst: str, limit: float = 15.0) -> float:
    """Seconds until `dst` answers; STP makes ports forward after 2 x forward_delay."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if ping(netns_name(prefix, node), dst, count=1, timeout=0.5):
            return time.monotonic() - start
        time.sleep(0.2)
    pytest.fail(f"{node} could not ping {dst} within {limit} s")


# -- the default fabric, read back -------------------------------------------------

def test_build_is_fast_and_reports_progress(fabric):
    assert fabric["elapsed"] < 5
    messages = fabric["messages"]
    for final in ("namespaces 8/8", "links 8/8", "switches 4/4", "hosts 4/4", "offloads 16/16",
                  "queues 16/16", "up 8/8"):
        assert final in messages
    assert messages[-1] == "up 8/8"


def test_namespaces(fabric):
    expected = {netns_name(fabric["prefix"], n) for n in
                ("h0", "h1", "h2", "h3", "leaf0", "leaf1", "spine0", "spine1")}
    assert set(namespaces(fabric["prefix"])) == expected
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert expected <= {line.split()[0] for line in listed.splitlines() if line.strip()}


def test_nothing_in_root_namespace(fabric):
    with IPRoute() as ipr:
        assert sorted(link.get("ifname") for link in ipr.get_links()) == fabric["root_links_before"]


def test_veth_peers(fabric):
    for link in fabric["topo"].links:
        with ipr_in(fabric["prefix"], link.a) as ipa, ipr_in(fabric["prefix"], link.b) as ipb:
            end_a, end_b = link_by_name(ipa, link.a_port), link_by_name(ipb, link.b_port)
            assert end_a.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) == "veth"
            assert end_a.get("IFLA_LINK") == end_b["index"] and end_b.get("IFLA_LINK") == end_a["index"]


def test_hosts(fabric):
    for host in fabric["topo"].hosts:
        with ipr_in(fabric["prefix"], host.name) as ipr:
            eth0 = link_by_name(ipr, "eth0")
            assert eth0.get("IFLA_MTU") == 1500
            assert eth0.get("IFLA_GSO_MAX_SEGS") == 1
            assert eth0.get("IFLA_ADDRESS") == host.mac
            addrs = [(a.get("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=eth0["index"])]
            assert addrs == [(host.ip, 15)]
            neighbours = {n.get("NDA_DST"): (n.get("NDA_LLADDR"), n["state"])
                          for n in ipr.get_neighbours(ifindex=eth0["index"])}
            others = {h.ip: (h.mac, NUD_PERMANENT) for h in fabric["topo"].hosts if h.name != host.name}
            assert neighbours == others
        assert read_sysctl(fabric["prefix"], host.name, "net.ipv4.tcp_congestion_control") == "cubic"
        # runs are independent: no TCP metrics carried from one connection to the next
        assert read_sysctl(fabric["prefix"], host.name, "net.ipv4.tcp_no_metrics_save") == "1"


def test_ipv6_off_everywhere(fabric):
    for node in ("h0", "leaf1", "spine0"):
        for key in ("all", "default"):
            assert read_sysctl(fabric["prefix"], node, f"net.ipv6.conf.{key}.disable_ipv6") == "1"


def test_switches(fabric):
    topo = fabric["topo"]
    for switch in topo.switches:
        with ipr_in(fabric["prefix"], switch.name) as ipr:
            br0 = link_by_name(ipr, "br0")
            assert br0.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) == "bridge"
            data = br0.get(("IFLA_LINKINFO", "IFLA_INFO_DATA"))
            assert (data.get("IFLA_BR_STP_STATE"), data.get("IFLA_BR_FORWARD_DELAY")) == (1, 200)
            assert br0.get("IFLA_MTU") == 1600 and br0["flags"] & IFF_UP
            for port in topo.ports(switch.name):
                dev = link_by_name(ipr, port.name)
                assert dev.get("IFLA_MASTER") == br0["index"]
                assert dev.get("IFLA_MTU") == 1600


def test_link_down_stays_down(fabric):
    with ipr_in(fabric["prefix"], "leaf1") as leaf1, ipr_in(fabric["prefix"], "spine0") as spine0:
        assert not link_by_name(leaf1, "spine0")["flags"] & IFF_UP
        assert not link_by_name(spine0, "leaf1")["flags"] & IFF_UP
        assert link_by_name(leaf1, "spine1")["flags"] & IFF_UP
        assert link_by_name(spine0, "leaf0")["flags"] & IFF_UP


def test_offloads_off(fabric):
    for node, ifname in (("h0", "eth0"), ("leaf0", "h0"), ("leaf0", "spine1"), ("spine1", "leaf1")):
        out = subprocess.run(["ip", "netns", "exec", netns_name(fabric["prefix"], node), "ethtool", "-k", ifname],
                             capture_output=True, text=True, check=True).stdout
        features = dict(line.split(": ", 1) for line in out.splitlines()[1:] if ": " in line)
        for feature in ("tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload"):
            assert features[feature].startswith("off"), (node, ifname, feature)


@pytest.mark.parametrize("node, ifname, mbit", [
    ("h0", "eth0", 100), ("leaf0", "h0", 100), ("h3", "eth0", 100), ("leaf1", "h3", 100),  # host links
    ("leaf0", "spine0", 100), ("spine0", "leaf0", 100), ("leaf1", "spine1", 100),  # fabric links
    ("leaf0", "spine1", 50), ("spine1", "leaf0", 50),  # the asymmetric one, both ends
    ("leaf1", "spine0", 100),  # down, but shaped all the same
])
def test_link_emulation(fabric, node, ifname, mbit):
    frame = (1500 if node.startswith("h") else 1600) + 14
    with ipr_in(fabric["prefix"], node) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        qdiscs = {q["handle"]: q for q in ipr.get_qdiscs(index=index)}
        root = qdiscs[qdisc.ROOT]
        assert root.get("TCA_KIND") == "htb" and root["parent"] == 0xFFFFFFFF
        assert root.get("TCA_OPTIONS").get("TCA_HTB_INIT")["defcls"] == 0x10
        fifo = qdiscs[qdisc.band_qdisc_handle(0)]
        assert fifo.get("TCA_KIND") == "bfifo" and fifo["parent"] == qdisc.band_classid(0)
        assert fifo.get("TCA_OPTIONS")["limit"] == 150_000
        classes = htb_classes(ipr, ifname)
    assert set(classes) == {qdisc.PARENT_CLASS, qdisc.band_classid(0)}
    for params in classes.values():
        assert params["rate"] == params["ceil"] == mbit * 1_000_000 // 8
        assert params["quantum"] == frame


def test_bands_share_the_link_by_weight(prefix):
    topo = LeafSpine(spines=1, leaves=1, hosts_per_leaf=1, host_link_rate="80mbit",
                     queue={"limit": "100kb", "bands": [3, 1]})
    build(topo, prefix)
    with ipr_in(prefix, "leaf0") as ipr:
        classes = htb_classes(ipr, "h0")
        index = ipr.link_lookup(ifname="h0")[0]
        limits = {q["handle"]: q.get("TCA_OPTIONS")["limit"] for q in ipr.get_qdiscs(index=index)
                  if q.get("TCA_KIND") == "bfifo"}
    band0, band1 = classes[qdisc.band_classid(0)], classes[qdisc.band_classid(1)]
    assert (band0["rate"], band1["rate"]) == (7_500_000, 2_500_000)  # 60 and 20 Mbit/s
    assert band0["ceil"] == band1["ceil"] == 10_000_000
    assert (band0["quantum"], band1["quantum"]) == (3 * 1614, 1614)
    assert limits == {qdisc.band_qdisc_handle(0): 100_000, qdisc.band_qdisc_handle(1): 100_000}


def test_high_rate_uses_64_bit_rates(prefix):
    topo = LeafSpine(spines=1, leaves=1, hosts_per_leaf=1, host_link_rate="40gbit", mtu=9000, switch_mtu=9100)
    build(topo, prefix)
    with ipr_in(prefix, "h0") as ipr:
        index = ipr.link_lookup(ifname="eth0")[0]
        (parent,) = [c for c in ipr.get_classes(index=index) if c["handle"] == qdisc.PARENT_CLASS]
    assert parent.get("TCA_OPTIONS").get("TCA_HTB_RATE64") == 5_000_000_000


def bridge_port_states(prefix: str, node: str) -> dict[str, str]:
    """STP state of every bridge port of ``node`` (forwarding, blocking, disabled, ...)."""
    out = subprocess.run(["ip", "netns", "exec", netns_name(prefix, node), "bridge", "-j", "link", "show"],
                         capture_output=True, text=True, check=True).stdout
    return {p["ifname"]: p["state"] for p in json.loads(out)}


def tx_packets(prefix: str, node: str, ifname: str) -> int:
    with ipr_in(prefix, node) as ipr:
        return link_by_name(ipr, ifname).get("IFLA_STATS64")["tx_packets"]


def test_hosts_ping_through_the_bridges(fabric):
    prefix = fabric["prefix"]
    waited = wait_for_ping(prefix, "h0", "198.18.0.2")
    print(f"\nSTP let h0 reach h1 after {waited:.1f} s")
    assert ping(netns_name(prefix, "h1"), "198.18.0.1", count=1, timeout=0.5)
    assert ping(netns_name(prefix, "h3"), "198.18.1.1", count=1, timeout=0.5)

    # Across the fabric: with leaf1-spine0 down the leaf-spine links form a
    # tree, so the spanning tree settles with every live port forwarding
    # (a link that should be down but is up closes a loop: one port blocks)
    # and the down link's ends disabled.
    wait_for_ping(prefix, "h0", "198.18.1.2")
    want = {node: {port.name: "disabled" if {node, port.peer} == {"leaf1", "spine0"} else "forwarding"
                   for port in fabric["topo"].ports(node)}
            for node in ("leaf0", "leaf1", "spine0", "spine1")}
    deadline = time.monotonic() + 15
    while (states := {node: bridge_port_states(prefix, node) for node in want}) != want:
        assert time.monotonic() < deadline, f"STP did not settle: {states}, want {want}"
        time.sleep(0.5)
    # and the echoes took the one path left, through spine1
    before = tx_packets(prefix, "spine1", "leaf1"), tx_packets(prefix, "spine1", "leaf0")
    assert ping(netns_name(prefix, "h0"), "198.18.1.2", count=5, timeout=1.0) == 5
    after = tx_packets(prefix, "spine1", "leaf1"), tx_packets(prefix, "spine1", "leaf0")
    assert after[0] - before[0] >= 5 and after[1] - before[1] >= 5, (before, after)


# -- refusal, failure and clean-up ---------------------------------------------------

def test_build_refuses_an_existing_prefix(fabric):
    prefix = fabric["prefix"]
    before = {name: os.stat(f"/run/netns/{name}").st_ino for name in namespaces(prefix)}
    with pytest.raises(BuildError, match="already exist") as info:
        build(LeafSpine(), prefix)
    assert info.value.step == "check"
    assert {name: os.stat(f"/run/netns/{name}").st_ino for name in namespaces(prefix)} == before
    with ipr_in(prefix, "h0") as ipr:
        assert [a.get("IFA_ADDRESS") for a in ipr.get_addr(label="eth0")] == ["198.18.0.1"]


def test_teardown_is_idempotent(prefix):
    build(LeafSpine(spines=1, leaves=1, hosts_per_leaf=2), prefix)
    assert sorted(teardown(prefix)) == [f"{prefix}-{n}" for n in ("h0", "h1", "leaf0", "spine0")]
    assert namespaces(prefix) == []
    assert teardown(prefix) == []


def test_teardown_kills_processes_inside(prefix):
    build(LeafSpine(spines=1, leaves=1, hosts_per_leaf=1), prefix)
    sleeper = subprocess.Popen(["ip", "netns", "exec", netns_name(prefix, "h0"), "sleep", "60"])
    try:
        deadline = time.monotonic() + 5
        while sleeper.pid not in netns.ns_pids().get(netns_name(prefix, "h0"), []):
            assert time.monotonic() < deadline, "sleep never showed up in the namespace"
            time.sleep(0.02)
        assert len(teardown(prefix)) == 3
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_tcp_cc_unavailable_is_a_spec_error(prefix):
    topo = LeafSpine(tcp_cc="dctcp")
    with pytest.raises(TopologyError, match="tcp_cc: 'dctcp' is not available in this kernel"):
        build(topo, prefix)
    assert namespaces(prefix) == []


def test_failure_the_kernel_rejects_leaves_nothing(prefix, monkeypatch):
    # The kernel refuses an STP max age under 6 s: the build fails at its first switch.
    monkeypatch.setitem(builder.STP, "br_max_age", 100)
    with pytest.raises(BuildError) as info:
        build(LeafSpine(), prefix)
    assert (info.value.step, info.value.node) == ("switches", "spine0")
    assert namespaces(prefix) == []


def test_failure_in_a_later_step_leaves_nothing(prefix, monkeypatch):
    calls = []

    def broken_apply(ipr, index, *args):
        calls.append(index)
        if len(calls) == 5:
            raise OSError("injected failure")
        return real_apply(ipr, index, *args)

    real_apply = qdisc.apply
    monkeypatch.setattr(qdisc, "apply", broken_apply)
    with pytest.raises(BuildError, match="injected failure") as info:
        build(LeafSpine(), prefix)
    # the 5th egress is h2's end of the h2-leaf1 link
    assert (info.value.step, info.value.node) == ("queues", "h2")
    assert "step 'queues', node 'h2'" in str(info.value)
    assert namespaces(prefix) == []


def test_teardown_after_a_killed_build(prefix):
    # The build process stops after its third namespace, then is SIGKILLed.
    script = (f"import time\nfrom netns_topology import LeafSpine, build\n"
              f"def progress(msg):\n    print(msg, flush=True)\n"
              f"    if msg == 'namespaces 3/8':\n        time.sleep(60)\n"
              f"build(LeafSpine(), {prefix!r}, progress)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE)
    try:
        deadline, output = time.monotonic() + 20, b""
        while b"namespaces 3/8" not in output:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"build did not reach its third namespace in time: {output!r}"
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"build process ended early: {output!r}"
            output += chunk
        assert len(namespaces(prefix)) == 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert sorted(teardown(prefix)) == [f"{prefix}-{n}" for n in ("leaf0", "spine0", "spine1")]
    assert namespaces(prefix) == []
