"""A short demonstration that a testbed works, run by `sudo make testbed`.

Three checks a user can repeat by hand: every host reaches every other host;
one TCP transfer crosses leaf-spine-leaf at about the link rate; eight
parallel flows spread over the first leaf's uplinks (per-port byte counters
from the switch program's maps).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common import paths
from netns_topology.state import PROGRAM_DATAPATHS, load_topology_of, read_state
from testbed import lifecycle
from workload.iperf import run_iperf3
from workload.netexec import ping_all_pairs

# TCP payload per wire frame at MTU 1500 with timestamps: HTB shapes the
# 1514-byte frame, iperf3 counts the 1448-byte payload (docs/design.md §3).
GOODPUT_PER_RATE = 1448 / 1514


@dataclass
class DemoReport:
    pairs_ok: int = 0
    pairs_total: int = 0
    failed_pairs: list = field(default_factory=list)
    single_flow: dict | None = None
    spread: dict | None = None
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every pair reached, and the parallel flows used more than one uplink."""
        spread_ok = self.spread is None or self.spread["uplinks_used"] >= min(2, self.spread["uplinks"])
        return self.pairs_ok == self.pairs_total and spread_ok


def uplink_tx(prefix: str, leaf: str) -> dict[str, int]:
    """Bytes the switch program has sent out of each fabric port of `leaf`."""
    st = lifecycle.status(prefix)
    sw = next(s for s in st["switches"] if s["name"] == leaf)
    return {p["name"]: p["tx_bytes"] or 0 for p in sw["ports"] if p["kind"] == "fabric"}


def run(prefix: str = paths.DEFAULT_PREFIX, *, duration: float = 3.0,
        parallel: int = 8, say=print) -> DemoReport:
    topo = load_topology_of(prefix)
    state = read_state(prefix)
    report = DemoReport()
    hosts = list(topo.hosts)
    ns = {h.name: paths.netns_name(prefix, h.name) for h in hosts}

    say(f"1/3 ping: every host to every other host ({len(hosts) * (len(hosts) - 1)} pairs)")
    pairs = [(f"{a.name}->{b.name}", ns[a.name], b.ip) for a in hosts for b in hosts if a is not b]
    results = ping_all_pairs(pairs, count=2)
    report.pairs_total = len(pairs)
    report.pairs_ok = sum(results.values())
    report.failed_pairs = [label for label, n, ip in pairs if not results[(n, ip)]]
    say(f"    {report.pairs_ok}/{report.pairs_total} pairs answered"
        + (f"; failed: {', '.join(report.failed_pairs)}" if report.failed_pairs else ""))

    src = hosts[0]
    remote = [h for h in hosts if h.leaf != src.leaf]
    if not remote:
        report.notes.append("one leaf only: no leaf-spine-leaf path to demonstrate")
        return report
    dst = remote[-1]
    host_rate = next(l.rate_bps for l in topo.links if src.name in (l.a, l.b))
    expected = host_rate * GOODPUT_PER_RATE

    say(f"2/3 iperf3: one TCP flow {src.name} -> {dst.name} across leaf-spine-leaf, {duration:g} s")
    one = run_iperf3(ns[src.name], ns[dst.name], dst.ip, duration=duration)
    report.single_flow = {"src": src.name, "dst": dst.name, "goodput_bps": one.received_bps,
                          "expected_bps": expected, "retransmits": one.retransmits}
    link = (f"link {host_rate / 1e6:g} Mbit/s, TCP at most {expected / 1e6:.1f}"
            if topo.shaping else "links unshaped: as fast as the CPU forwards")
    say(f"    {one.received_mbps:.1f} Mbit/s goodput ({link}), {one.retransmits} retransmits")

    if state.get("datapath") not in PROGRAM_DATAPATHS:
        report.notes.append("kernel-bridge data path: no per-port program counters")
        return report
    say(f"3/3 iperf3: {parallel} parallel flows {src.name} -> {dst.name}; "
        f"bytes each uplink of {src.leaf} carried")
    before = uplink_tx(prefix, src.leaf)
    many = run_iperf3(ns[src.name], ns[dst.name], dst.ip, duration=duration, parallel=parallel)
    after = uplink_tx(prefix, src.leaf)
    delta = {port: after[port] - before.get(port, 0) for port in after}
    total = sum(delta.values()) or 1
    report.spread = {"uplinks": len(delta), "uplinks_used": sum(1 for v in delta.values() if v > total * 0.05),
                     "bytes": delta, "goodput_bps": many.received_bps}
    for port, nbytes in sorted(delta.items()):
        bar = "#" * round(40 * nbytes / total)
        say(f"    {src.leaf}:{port:<8} {nbytes / 1e6:8.1f} MB  {100 * nbytes / total:5.1f}%  {bar}")
    say(f"    aggregate {many.received_mbps:.1f} Mbit/s over {many.streams} flows")
    return report
