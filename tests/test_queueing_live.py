"""Queueing switched on a running fabric (issue 18 item 1, docs/experiments.md
"Queueing"): every switch port's qdisc tree under fifo and back, the readers
of the queues under both, what a high-priority band's traffic gets under
each, and `talb run --queueing` recording the setting and putting the
fabric back.

Fabric: one leaf with three hosts on 20 Mbit/s links (and one spine), the
switch ports queueing as fig10's: WFQ bands of weights 1, 4, 2, 1 over
40 KB each; under fifo one 160 KB FIFO.
"""
from __future__ import annotations

import threading
import time

import pytest
from pyroute2 import IPRoute

from common import paths
from netns_topology import LeafSpine, qdisc
from netns_topology.state import load_topology_of, queueing_of, read_state
from talb import send
from testbed import lifecycle
from helpers import free_port, up_fabric

pytestmark = pytest.mark.live

RATE = 20_000_000
TOPO = dict(spines=1, leaves=1, hosts_per_leaf=3, host_link_rate="20mbit", link_rate="20mbit",
            queue={"limit": "40kb", "burst": "15k", "cburst": "15k", "bands": [1, 4, 2, 1]})
BANDS = {qdisc.band_qdisc_handle(b): 40_000 for b in range(4)}
FIFO = {qdisc.band_qdisc_handle(0): 160_000}


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, LeafSpine(**TOPO)).prefix


def _tree(prefix: str, node: str, ifname: str) -> tuple[dict, dict, set]:
    """A port's bfifos {handle: byte limit}, HTB classes {classid: (rate, ceil)
    bytes/s} and the kinds of its qdiscs."""
    with IPRoute(netns=paths.netns_name(prefix, node), flags=0) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        qds = ipr.get_qdiscs(index=index)
        fifos = {q["handle"]: q.get_attr("TCA_OPTIONS")["limit"] for q in qds
                 if q.get_attr("TCA_KIND") == "bfifo"}
        classes = {}
        for c in ipr.get_classes(index=index):
            parms = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
            classes[c["handle"]] = (parms["rate"], parms["ceil"])
        kinds = {q.get_attr("TCA_KIND") for q in qds}
    return fifos, classes, kinds


def _switch_ports(prefix):
    topo = load_topology_of(prefix)
    return [(sw.name, p.name) for sw in topo.switches for p in topo.ports(sw.name)]


def _check_trees(prefix: str, mode: str) -> None:
    want = FIFO if mode == "fifo" else BANDS
    for node, port in _switch_ports(prefix):
        fifos, classes, kinds = _tree(prefix, node, port)
        assert fifos == want, (node, port, mode, fifos)
        assert set(classes) == {qdisc.PARENT_CLASS} | {qdisc.band_classid(b) for b in range(len(want))}
        assert classes[qdisc.PARENT_CLASS] == (RATE // 8, RATE // 8)
        if mode == "fifo":              # the one band has the whole link as its rate
            assert classes[qdisc.band_classid(0)] == (RATE // 8, RATE // 8)
        assert "clsact" in kinds, (node, port, kinds)     # the data path's hook is still there
    for host in ("h0", "h1", "h2"):       # hosts keep the topology's queue either way
        assert _tree(prefix, host, "eth0")[0] == BANDS, host


def test_switch_ports_go_to_fifo_and_back(fabric):
    assert queueing_of(fabric)["mode"] == "bands"
    _check_trees(fabric, "bands")
    rec = lifecycle.set_queueing(fabric, "fifo")
    try:
        assert rec["mode"] == "fifo" and rec["switch_queue"]["limit"] == "160kb"
        assert rec["switch_queue"]["bands"] == [1] and rec["topology_queue"]["bands"] == [1, 4, 2, 1]
        assert queueing_of(fabric) == rec and lifecycle.status(fabric)["queueing"] == "fifo"
        _check_trees(fabric, "fifo")
        assert lifecycle.set_queueing(fabric, "fifo") == rec          # already so: nothing done
        # the readers of the port queues: the root (1:) and its classes
        from datapath.qdisc_stats import QdiscReader
        from workload.measure import read_qdisc_counters

        with QdiscReader(paths.netns_name(fabric, "leaf0")) as reader:
            assert reader.read("h2").backlog_bytes >= 0
            assert set(reader.class_bytes("h2")) == {qdisc.PARENT_CLASS, qdisc.band_classid(0)}
        assert set(read_qdisc_counters(fabric, load_topology_of(fabric))) == \
            set(_switch_ports(fabric))
    finally:
        lifecycle.set_queueing(fabric, "bands")
    assert queueing_of(fabric)["mode"] == "bands"
    assert "queueing" not in read_state(fabric)
    _check_trees(fabric, "bands")


def _untagged_share(prefix: str) -> tuple[float, dict]:
    """The share of leaf0's port to h2 that an untagged TCP flow (iperf3 h1 -> h2:
    band 0, weight 1 of 8) gets while h0 sends layer-0 tensors to h2 (band 1,
    weight 4) as fast as TCP lets it; both senders' own links run at the rate
    of that port. Under the bands the tensors' band takes 4/5 of the port
    when both are busy (its rate 1/2 plus 4/5 of the 3/8 nobody reserved),
    the untagged flow 1/5; in one FIFO, TCP shares it about evenly."""
    from workload.iperf import run_iperf3

    out: dict = {}

    def tensors():
        try:
            out["report"] = send.run(prefix, ["h0"], "h2", tensors=40, layers=1, size=500_000,
                                     port=free_port(), say=lambda _m: None, timeout=120)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc
        out["t_end"] = time.monotonic()

    sender = threading.Thread(target=tensors)
    sender.start()
    try:
        time.sleep(2.0)                   # the tensors' connection is sending
        ip = run_iperf3(paths.netns_name(prefix, "h1"), paths.netns_name(prefix, "h2"),
                        load_topology_of(prefix).hosts[2].ip, duration=5.0,
                        port=free_port())
        t_iperf_end = time.monotonic()
    finally:
        sender.join(timeout=150)
    assert "error" not in out, out.get("error")
    report = out["report"]
    assert report.ok and all(t.layer == 0 for t in report.tensors)
    # the tensors were still being sent when the iperf3 flow ended: it always competed
    assert out["t_end"] > t_iperf_end, "the tagged transfer ended before the untagged flow did"
    return ip.received_bps / RATE, {"iperf3_mbps": ip.received_mbps, "retrans": ip.retransmits}


def test_a_high_priority_band_no_longer_takes_the_larger_share_under_fifo(fabric):
    """4/5 against 1/5 with the bands, about even in one FIFO: over 5 s at 20
    Mbit/s (12.5 MB, ~8,000 packets), with margins wide enough for TCP's
    unfairness and a busy machine (20 Mbit/s is far from what 2 CPUs forward)."""
    bands, b_info = _untagged_share(fabric)
    lifecycle.set_queueing(fabric, "fifo")
    try:
        fifo, f_info = _untagged_share(fabric)
    finally:
        lifecycle.set_queueing(fabric, "bands")
    info = f"untagged share with bands {bands:.2f} {b_info}, in one FIFO {fifo:.2f} {f_info}"
    assert bands < 0.33, info            # expected 0.20
    assert fifo > 0.36, info             # expected ~0.50
    assert fifo - bands > 0.15, info


def test_talb_run_records_the_queueing_and_puts_the_fabric_back(fabric, tmp_path):
    from workload.experiment import RunConfig, run
    from workload.scaling import scaling_for
    from tiny_model import tiny_profile

    cfg = RunConfig(model="tiny", arch="ps", workers=2, servers=1, scheme="ecmp", iterations=3,
                    warmup=1, partition_bytes=100_000, credit_bytes=200_000, target_link_bps=20e6,
                    prefix=fabric, out=str(tmp_path / "fifo.json"), timeout_s=240, queueing="fifo")
    r = run(cfg, profile=tiny_profile(), scaling=scaling_for(20e6, 20e6))
    q = r["fabric"]["queueing"]
    assert q["mode"] == "fifo" and q["switch_queue"]["limit"] == "160kb"
    assert r["headline"]["queueing"] == "fifo" and r["config"]["queueing"] == "fifo"
    assert r["summary"]["tensors"]["corrupted"] == 0
    # the testbed was up before the run: it queues as before again
    assert queueing_of(fabric)["mode"] == "bands"
    _check_trees(fabric, "bands")
    # without --queueing a run takes the fabric as it is, and says so
    cfg.queueing, cfg.out = None, str(tmp_path / "as-is.json")
    r = run(cfg, profile=tiny_profile(), scaling=scaling_for(20e6, 20e6))
    assert r["fabric"]["queueing"]["mode"] == "bands" and r["headline"]["queueing"] == "bands"
