"""``shaping: batched`` (netns_topology/qdisc.py, docs/performance.md (f)):
the same HTB tree with half burst and cburst under sch_htb's machine-wide
hysteresis; the link rate and the queue's byte limit as the topology says;
an exactly shaped fabric refused while a batched one is up, and a leftover
hysteresis (no batched testbed up) turned off by it; the last
batched testbed's `down` turning it off.

Fabric: 1 spine, 2 leaves, 1 host per leaf, every link at 100 Mbit/s.
"""
from __future__ import annotations

import pytest
from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime

from common import paths
from netns_topology import LeafSpine, TopologyError, qdisc
from netns_topology.builder import build
from netns_topology.teardown import namespaces
from talb.demo import GOODPUT_PER_RATE
from testbed import lifecycle
from workload.iperf import run_iperf3
from helpers import up_fabric
from conftest import new_prefix, skip_or_fail

pytestmark = pytest.mark.live

RATE = 100_000_000
TOPO = dict(spines=1, leaves=2, hosts_per_leaf=1, link_rate="100mbit", host_link_rate="100mbit",
            queue={"limit": "60kb", "burst": "15k", "cburst": "15k"})


@pytest.fixture(scope="module")
def batched(request, bcc):
    if qdisc.hysteresis():
        skip_or_fail("sch_htb's htb_hysteresis is already on (another batched testbed?)")
    return up_fabric(request, LeafSpine(shaping="batched", **TOPO))


def test_a_leftover_hysteresis_is_turned_off_by_an_exact_build(request, bcc):
    """A batched testbed killed before its `down` leaves the machine-wide
    setting on; the next exact fabric turns it off rather than be batched
    silently or refused. (First in this file: no batched testbed is up yet.)"""
    if qdisc.hysteresis():
        skip_or_fail("sch_htb's htb_hysteresis is already on (another batched testbed?)")
    qdisc.set_hysteresis(True)
    request.addfinalizer(lambda: qdisc.set_hysteresis(False))
    up_fabric(request, LeafSpine(**TOPO))
    assert not qdisc.hysteresis()


def _htb_and_fifo(prefix, node, ifname):
    with IPRoute(netns=paths.netns_name(prefix, node), flags=0) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        classes = {c["handle"]: c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
                   for c in ipr.get_classes(index=index)}
        limits = [q.get_attr("TCA_OPTIONS")["limit"] for q in ipr.get_qdiscs(index=index)
                  if q.get_attr("TCA_KIND") == "bfifo"]
    return classes, limits


def test_batched_links_keep_the_rate_and_the_byte_limit(batched):
    prefix, topo = batched
    assert qdisc.hysteresis()
    classes, limits = _htb_and_fifo(prefix, "leaf0", "spine0")
    leaf = classes[qdisc.band_classid(0)]
    assert leaf["rate"] == leaf["ceil"] == RATE // 8 and limits == [60_000]
    # HTB keeps burst and cburst as transmit times at the rate: half the topology's 15k
    assert (leaf["buffer"], leaf["cbuffer"]) == (calc_xmittime(RATE // 8, 7_500),) * 2
    assert topo.queue.burst == 15_000  # the topology itself says what it said
    src, dst = topo.hosts
    expected = RATE * GOODPUT_PER_RATE
    runs = []
    for _ in range(3):
        got = run_iperf3(paths.netns_name(prefix, src.name), paths.netns_name(prefix, dst.name),
                         dst.ip, duration=4).received_bps
        runs.append(got / 1e6)
        assert got <= 1.10 * expected, f"goodput {got / 1e6:.1f} Mbit/s above the link's"
        if abs(got - expected) <= 0.10 * expected:
            break
    assert abs(max(runs) * 1e6 - expected) <= 0.10 * expected, runs


def test_an_exact_fabric_is_refused_while_a_batched_one_is_up(batched):
    prefix = new_prefix()
    with pytest.raises(TopologyError, match="shaping.*htb_hysteresis.*" + batched.prefix):
        build(LeafSpine(**TOPO), prefix)
    assert namespaces(prefix) == []


def test_the_last_batched_testbed_down_turns_the_hysteresis_off(request, batched):
    """(Last in this file: it takes the module's fabric down.)"""
    second = up_fabric(request, LeafSpine(shaping="batched", **TOPO))
    lifecycle.down(second.prefix)
    assert qdisc.hysteresis()  # the module's batched fabric is still up
    lifecycle.down(batched.prefix)
    assert not qdisc.hysteresis()
