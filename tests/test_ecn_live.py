"""ECN from the switches on a live fabric (issue 36; docs/experiments.md
"Regime"): a TCP flow through a bottleneck port, with the regime switched
on the running testbed (testbed/regime.py).

Fabric: two leaves of one host each over one spine; hosts 40 Mbit/s,
uplinks 10 Mbit/s, fig10's bands (40 KB each): h0 -> h1 queues at leaf0's
uplink. K is the floor, two full frames (3,228 B): no time scale here.

* ECN on, cubic: CE marks on the wire at the receiver, the receiver's ECE
  and the sender's CWR, the switch's marked counter; the real queue
  stays far shorter than with ECN off (cubic fills its 40 KB band).
* ECN off: no CE anywhere, nothing counted, SYNs without ECE.
* dctcp-bpf: the sender's socket runs it (`ss -i`), its window stays far
  smaller with marks than without, and nothing is left registered after.
* `talb run --tcp-cc dctcp` on this kernel: refused, naming the option
  and what the kernel offers (a process of its own).
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common import paths
from netns_topology import LeafSpine
from testbed import regime
from helpers import up_fabric

pytestmark = pytest.mark.live

TOPO = dict(spines=1, leaves=2, hosts_per_leaf=1, host_link_rate="40mbit", link_rate="10mbit",
            queue={"limit": "40kb", "burst": "15k", "cburst": "15k", "bands": [1, 4, 2, 1]})
K = 2 * (1600 + 14)
FLOW_S = 5.0
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fabric(request, bcc):
    from netns_topology.state import exists

    fab = up_fabric(request, LeafSpine(**TOPO))

    def back():         # before the testbed goes: nothing registered left behind
        if exists(fab.prefix):
            regime.set_regime(fab.prefix)
    request.addfinalizer(back)
    return fab


def _ns(prefix, node):
    return paths.netns_name(prefix, node)


def _uplink(topo) -> str:
    return next(p.name for p in topo.ports("leaf0") if p.kind == "fabric")


def _counters(prefix) -> dict:
    from datapath import control
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        return control.read_counters(maps)


class Capture:
    """tcpdump of TCP on a host's eth0 into a file, ended by pid."""

    def __init__(self, prefix, host, path):
        from workload.netexec import ns_popen

        self.path = path
        self.proc = ns_popen(_ns(prefix, host), ["tcpdump", "-i", "eth0", "-U", "-s", "96",
                                                 "-w", str(path), "tcp"])
        time.sleep(0.5)

    def packets(self):
        import scapy.layers.inet  # noqa: F401 - Ether/IP/TCP bound before reading (else Raw)
        import scapy.layers.l2  # noqa: F401
        from scapy.utils import rdpcap

        self.proc.terminate()
        self.proc.wait(timeout=10)
        return rdpcap(str(self.path))


def _flow(fab, *, sample=None, congestion=None):
    """An iperf3 flow h0 -> h1 for FLOW_S; ``sample()`` called every 20 ms
    meanwhile, its values returned with the iperf3 result."""
    from workload.iperf import run_iperf3

    h1 = next(h for h in fab.topo.hosts if h.name == "h1")
    out, stop = [], threading.Event()

    def sampler():
        while not stop.wait(0.02):
            out.append(sample())
    t = threading.Thread(target=sampler, daemon=True) if sample else None
    if t:
        t.start()
    try:
        res = run_iperf3(_ns(fab.prefix, "h0"), _ns(fab.prefix, "h1"), h1.ip, duration=FLOW_S,
                         congestion=congestion)
    finally:
        stop.set()
        if t:
            t.join()
    return res, out


def _backlog_sampler(fab):
    from datapath.qdisc_stats import QdiscReader

    reader = QdiscReader(_ns(fab.prefix, "leaf0"))
    port = _uplink(fab.topo)
    return reader, lambda: reader.read(port).backlog_bytes


def _ecn_bits(pkts):
    from scapy.layers.inet import IP, TCP

    ce = sum(1 for p in pkts if IP in p and p[IP].tos & 3 == 3)
    ece = sum(1 for p in pkts if TCP in p and p[TCP].flags & 0x40 and not p[TCP].flags & 0x02)
    cwr = sum(1 for p in pkts if TCP in p and p[TCP].flags & 0x80 and not p[TCP].flags & 0x02)
    syn_ece = sum(1 for p in pkts if TCP in p and p[TCP].flags & 0x02 and p[TCP].flags & 0x40)
    return ce, ece, cwr, syn_ece


def test_ecn_on_marks_on_the_wire_the_hosts_answer_and_the_queue_stays_short(fabric, tmp_path):
    rec = regime.set_regime(fabric.prefix, ecn=True)
    assert rec["ecn"] and rec["ports"]["leaf0"][_uplink(fabric.topo)]["k"] == K
    before = _counters(fabric.prefix)
    rx, tx = Capture(fabric.prefix, "h1", tmp_path / "rx.pcap"), \
        Capture(fabric.prefix, "h0", tmp_path / "tx.pcap")
    reader, sample = _backlog_sampler(fabric)
    with reader:
        res, on = _flow(fabric, sample=sample)
    rx_pkts, tx_pkts = rx.packets(), tx.packets()
    ce_rx, ece_rx, _, _ = _ecn_bits(rx_pkts)
    ce_tx, ece_tx, cwr_tx, syn_ece = _ecn_bits(tx_pkts)
    after = _counters(fabric.prefix)
    marked = after["ecn_marked"] - before["ecn_marked"]
    assert res.received_bps > 5e6, res            # the flow ran through the bottleneck
    assert ce_rx > 0 and marked > 0, (ce_rx, marked, len(rx_pkts), len(tx_pkts))
    assert ce_tx == 0                              # marked after the sender, not before
    assert ece_tx > 0 and cwr_tx > 0, (ece_tx, cwr_tx)   # receiver echoes, sender reduces
    assert syn_ece > 0                             # ECN negotiated
    assert after["ecn_not_ect"] - before["ecn_not_ect"] >= 0

    regime.set_regime(fabric.prefix, ecn=False)
    reader, sample = _backlog_sampler(fabric)
    with reader:
        _res, off = _flow(fabric, sample=sample)
    # cubic fills its 40 KB band without marks; with them it backs off near K
    assert statistics.median(on) < statistics.median(off) / 2, \
        (statistics.median(on), statistics.median(off))
    print(f"backlog median: ECN on {statistics.median(on):.0f} B, off "
          f"{statistics.median(off):.0f} B (K {K} B); CE {ce_rx}, marked {marked}")


def test_ecn_off_no_marks_anywhere(fabric, tmp_path):
    regime.set_regime(fabric.prefix, ecn=False)
    before = _counters(fabric.prefix)
    rx = Capture(fabric.prefix, "h1", tmp_path / "rx.pcap")
    res, _ = _flow(fabric)
    ce, ece, cwr, syn_ece = _ecn_bits(rx.packets())
    after = _counters(fabric.prefix)
    assert res.received_bps > 5e6
    assert (ce, ece, cwr, syn_ece) == (0, 0, 0, 0)
    assert after["ecn_marked"] == before["ecn_marked"]


def _data_conn(prefix) -> tuple[str, int | None]:
    """h0's iperf3 connections now (ss -tin): the text, and the cwnd of the
    one that has sent the most (the data connection, not iperf3's control)."""
    import re

    out = subprocess.run(["ip", "netns", "exec", _ns(prefix, "h0"), "ss", "-tin",
                          "dport", "=", ":5201"], capture_output=True, text=True).stdout
    best = (-1, None)
    for block in re.split(r"\n(?=\S)", out):
        acked = re.search(r"bytes_acked:(\d+)", block)
        cwnd = re.search(r"cwnd:(\d+)", block)
        if acked and cwnd and int(acked.group(1)) > best[0]:
            best = (int(acked.group(1)), int(cwnd.group(1)))
    return out, best[1]


def test_dctcp_bpf_runs_per_namespace_and_backs_off_on_marks(fabric):
    from datapath import tcp_cc

    rec = regime.set_regime(fabric.prefix, ecn=True, tcp_cc="dctcp-bpf")
    assert rec["tcp_cc"] == "dctcp-bpf" and tcp_cc.registered()
    for h in ("h0", "h1"):
        r = subprocess.run(["ip", "netns", "exec", _ns(fabric.prefix, h), "sysctl", "-n",
                            "net.ipv4.tcp_congestion_control"], capture_output=True, text=True)
        assert r.stdout.strip() == "dctcp_bpf"
    # the initial namespace keeps its own default
    assert Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip() != "dctcp_bpf"

    def cwnd_sampler(seen):
        def sample():
            text, cwnd = _data_conn(fabric.prefix)
            if "dctcp_bpf" in text:
                seen.append(True)
            return [cwnd] if cwnd is not None else []
        return sample

    seen_on, seen_off = [], []
    before = _counters(fabric.prefix)
    res_on, on = _flow(fabric, sample=cwnd_sampler(seen_on))
    marked = _counters(fabric.prefix)["ecn_marked"] - before["ecn_marked"]
    regime.set_regime(fabric.prefix, ecn=False, tcp_cc="dctcp-bpf")
    res_off, off = _flow(fabric, sample=cwnd_sampler(seen_off))
    won = [w for s in on for w in s]
    woff = [w for s in off for w in s]
    assert seen_on and seen_off, "ss -i never showed dctcp_bpf on h0's connection"
    assert marked > 0 and res_on.received_bps > 5e6
    # no marks: DCTCP grows like Reno until its band overflows; marks hold it near K
    assert statistics.median(won) < statistics.median(woff) / 2, (won[-20:], woff[-20:])
    print(f"cwnd median: marks {statistics.median(won)}, none {statistics.median(woff)}")

    regime.set_regime(fabric.prefix)
    assert not tcp_cc.registered(), "dctcp_bpf left registered"
    assert "dctcp_bpf" not in tcp_cc.available()


def test_talb_run_refuses_a_tcp_cc_the_kernel_lacks():
    from datapath import tcp_cc

    if "dctcp" in tcp_cc.available():
        pytest.skip("this kernel has dctcp")
    talb = Path(sys.executable).parent / "talb"
    r = subprocess.run([str(talb), "run", "--model", "threelayer", "--arch", "ps", "--workers",
                        "2", "--tcp-cc", "dctcp", "--prefix", "ecnnone"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "--tcp-cc: 'dctcp' is not available in this kernel" in r.stderr + r.stdout
    assert "dctcp-bpf" in r.stderr + r.stdout


def _bfifos(prefix, node, ifname) -> dict:
    from pyroute2 import IPRoute

    with IPRoute(netns=_ns(prefix, node), flags=0) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        return {q["handle"]: q.get_attr("TCA_OPTIONS")["limit"] for q in ipr.get_qdiscs(index=index)
                if q.get_attr("TCA_KIND") == "bfifo"}


def test_scaled_buffers_installed_per_port_follow_the_queueing_and_go_back(fabric):
    """The bfifos hold what the record says, port by port (uplink 10 Mbit/s,
    host port 40 Mbit/s), under bands and under fifo; deep again after."""
    from netns_topology import qdisc
    from netns_topology.state import read_state, regime_of
    from testbed import lifecycle

    up = _uplink(fabric.topo)
    host = next(p.name for p in fabric.topo.ports("leaf0") if p.kind == "host")
    rec = regime.set_regime(fabric.prefix, buffer="scaled", time_scale=200.0)
    try:
        ports = rec["ports"]["leaf0"]
        # 10 Mbit/s: 512 KB's 41.9 us x 200 = 10.5 KB a port, 2.6 KB a band: floored
        assert ports[up]["per_band"] == 4 * (1600 + 14) and ports[up]["bands"] == 4
        # 40 Mbit/s: 41.9 KB a port, 10.5 KB a band: over the floor
        assert ports[host]["per_band"] == int(512 * 1024 * 8 / 100e9 * 200 * 40e6 / 8) // 4 \
            > 4 * (1600 + 14)
        for port in (up, host):
            assert _bfifos(fabric.prefix, "leaf0", port) == {
                qdisc.band_qdisc_handle(b): ports[port]["per_band"] for b in range(4)}
        st = subprocess.run([str(Path(sys.executable).parent / "talb"), "testbed", "status",
                             "--prefix", fabric.prefix], capture_output=True, text=True,
                            timeout=120)
        assert "regime (set since up): buffers scaled, ECN off" in st.stdout, st.stdout[-500:]
        lifecycle.set_queueing(fabric.prefix, "fifo")
        rec = regime_of(fabric.prefix)
        assert rec["buffer"] == "scaled" and rec["queueing"] == "fifo"
        assert _bfifos(fabric.prefix, "leaf0", up) == {
            qdisc.band_qdisc_handle(0): 4 * 4 * (1600 + 14)}
    finally:
        lifecycle.set_queueing(fabric.prefix, "bands")
        regime.set_regime(fabric.prefix)
    assert _bfifos(fabric.prefix, "leaf0", up) == {qdisc.band_qdisc_handle(b): 40_000
                                                  for b in range(4)}
    assert "regime" not in read_state(fabric.prefix)
