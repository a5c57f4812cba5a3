"""WCMP on a live asymmetric fabric (topologies/asymmetric.yaml: leaf0's
uplink to spine1 at half the rate of the one to spine0), brought up with
`talb testbed up --scheme wcmp`'s machinery: it forwards real TCP, keeps
each flow on one uplink, and puts more flows on the faster uplink than on
the slower one (weights 2:1 from the ports' rates).

Which uplink a flow took is read off the wire: every packet h0 sends to
h3 is captured leaving each of leaf0's uplinks (tcpdump, no tags needed).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from common import paths
from helpers import up_fabric

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "topologies" / "asymmetric.yaml"
#: TCP streams of the one iperf3 run (its control connection is one flow more)
STREAMS = 100


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY, scheme="wcmp")


def _flows_by_uplink(pcaps: dict) -> dict[str, set]:
    """uplink -> the TCP flows (source port) seen leaving by it."""
    from scapy.layers.inet import TCP
    from scapy.utils import PcapReader

    out = {}
    for uplink, pcap in pcaps.items():
        with PcapReader(str(pcap)) as r:
            out[uplink] = {pkt[TCP].sport for pkt in r if TCP in pkt}
    return out


def test_wcmp_puts_more_flows_on_the_faster_uplink(fabric, tmp_path):
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps
    from workload.capture import start_capture
    from workload.iperf import run_iperf3

    prefix, topo = fabric
    h0, h3 = (next(h for h in topo.hosts if h.name == n) for n in ("h0", "h3"))
    uplinks = {p.peer: p for p in topo.ports("leaf0") if p.kind == "fabric"}
    assert {u: p.rate_bps for u, p in uplinks.items()} == {"spine0": 100_000_000,
                                                            "spine1": 50_000_000}
    leaf0 = paths.netns_name(prefix, "leaf0")
    pcaps = {u: tmp_path / f"leaf0-{u}.pcap" for u in uplinks}
    caps = [start_capture(leaf0, p.name, pcaps[u], direction="out",
                          bpf_filter=f"tcp and src host {h0.ip} and dst host {h3.ip}")
            for u, p in uplinks.items()]
    try:
        result = run_iperf3(paths.netns_name(prefix, "h0"), paths.netns_name(prefix, "h3"),
                            h3.ip, duration=1.0, parallel=STREAMS)
    finally:
        for c in caps:
            c.stop()
    assert all(c.exited_early is None for c in caps), caps
    with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        counters = read_counters(maps)
    assert counters["decision_wcmp"] > 0 and counters["scheme_fallback"] == 0, counters
    # every stream carried data to h3 (100 streams share h0's 100 Mbit/s)
    assert result.streams == STREAMS and result.received_bps > 10_000_000, result

    flows = _flows_by_uplink(pcaps)
    fast, slow = flows["spine0"], flows["spine1"]
    print(f"\n    WCMP, {STREAMS} streams h0 -> h3: {len(fast)} flows by spine0 (100 Mbit/s), "
          f"{len(slow)} by spine1 (50 Mbit/s)")
    assert not fast & slow, f"flows on both uplinks: {sorted(fast & slow)}"
    assert len(fast | slow) >= STREAMS, (len(fast), len(slow))
    # 2:1 weights: 67 of 101 flows expected on spine0; at most as many as on
    # spine1 (50) has odds of about 2e-4 for a hash that spreads like a fair draw
    assert len(fast) > len(slow), (len(fast), len(slow))
