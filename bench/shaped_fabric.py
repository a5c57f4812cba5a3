"""Benchmark: goodput and CPU through a shaped fabric, link-emulation
variants back to back on the same fabric (A B A B ...).

Shape: 1 spine x 2 leaves x 2 hosts per leaf, every link shaped at RATE,
one queue of QUEUE bytes per egress; 8 cubic iperf3 flows across the leaves,
4 each way (h0->h2, h1->h3, h2->h0, h3->h1, 2 streams each). The spine's
two links are the bottleneck: at most 2 x RATE of goodput in all.

For each rate one fabric is built (BPF data path, ECMP, no agent); each
variant reinstalls every interface's root qdisc and the flows run; the
variants alternate for ``rounds`` rounds. Reported per run: goodput (sum of
the receivers, first second omitted), retransmits, the CPUs' busy share
while the flows ran (/proc/stat, all CPUs: 100% = every CPU busy), the
packets sent over every link (tx_packets of every veth end, i.e. packets x
hops, data and ACKs) and packets per CPU-second.

What it showed (docs/performance.md (f)), on the 2-core VM: exact shaping
carries 185 / 369 / 732 Mbit/s at 100 / 200 / 400 Mbit/s links using 30 /
67 / 88% of the CPUs, ~1.15 Gbit/s when CPU-bound; nearly a third of the
CPU is HTB arming a watchdog hrtimer per paced packet (a VM exit each).
``batched`` (sch_htb's hysteresis, topology ``shaping: batched``) needs
1.5-1.6x less CPU for the same goodput and carries 1.55x more when
CPU-bound, at the price of clumps of burst/2 bytes on a backlogged link.
Rates for the experiment presets (docs/experiments.md, "Link rates the
presets could use"): at the 2 CPUs, ~0.16% CPU per Mbit/s of cross-leaf
goodput exact (0.11% batched); the presets' fabrics carry at most 175-400
Mbit/s across the leaves, so their rates have ~1.5x headroom exact, 2x
only batched and only for arms whose timers are longer than a clump.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from dataclasses import dataclass

from common import paths
from netns_topology import LeafSpine, qdisc
from netns_topology.params import Queue
from testbed import lifecycle
from workload.netexec import finish, ns_popen, stop

PREFIX = "benchshp"
FLOWS = 8  # cubic flows in all, half each way across the leaves
BASE_PORT = 5301
STAT_EVENTS = ("timer:hrtimer_start,timer:hrtimer_expire_entry,irq_vectors:local_timer_entry,"
               "net:net_dev_xmit,irq:softirq_entry,irq_vectors:call_function_single_entry,"
               "sched:sched_switch,skb:consume_skb")


@dataclass(frozen=True)
class Variant:
    """One way of emulating every link's egress (all interfaces alike)."""
    name: str
    kind: str = "htb"          # "htb": netns_topology/qdisc.py's tree; "tbf": one TBF
    hysteresis: bool = False   # sch_htb's htb_hysteresis (machine-wide) during the run
    burst_scale: float = 1.0   # burst and cburst x this
    host_gro: bool = False     # GRO on at the hosts' interfaces (their receive path)
    about: str = ""


VARIANTS = {v.name: v for v in (
    Variant("exact", about="the builder's link emulation: HTB + bfifo, one hrtimer per throttled dequeue"),
    Variant("batched", hysteresis=True, burst_scale=0.5,
            about="what `shaping: batched` builds: HTB with htb_hysteresis=1 and half burst/cburst, "
                  "clumps of <= burst/2 bytes, the largest burst after idle as the topology's"),
    Variant("batched-full", hysteresis=True,
            about="HTB with htb_hysteresis=1, the topology's burst/cburst (after idle up to burst+cburst)"),
    Variant("batched-small", hysteresis=True, burst_scale=0.3,
            about="htb_hysteresis=1, burst/cburst x0.3: clumps of <= 0.3 burst (3 frames at 15 KB), "
                  "shorter than a 4-frame flowlet gap"),
    Variant("tbf", kind="tbf", about="one TBF per egress: rate, burst = queue.burst, limit = queue.limit bytes"),
    Variant("gro", host_gro=True, about="exact, and GRO on at the hosts' interfaces (fewer ACKs)"),
    Variant("batched+gro", hysteresis=True, burst_scale=0.5, host_gro=True, about="batched and gro"),
)}
def _install(ipr, index: int, rate_bps: int, mtu: int, queue: Queue, variant: Variant) -> None:
    queue = dataclasses.replace(queue, burst=int(queue.burst * variant.burst_scale),
                                cburst=int(queue.cburst * variant.burst_scale))
    if variant.kind == "htb":
        qdisc.reinstall(ipr, index, rate_bps, mtu, queue)
        return
    try:
        ipr.tc("del", index=index, handle=qdisc.ROOT, parent=qdisc.TC_H_ROOT)
    except Exception as exc:  # noqa: BLE001 - only "no root qdisc to delete" is fine
        if getattr(exc, "code", None) not in (2, 22):
            raise
    ipr.tc("add", "tbf", index, qdisc.ROOT, rate=rate_bps // 8, burst=queue.burst, limit=queue.limit)


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])       # guest time is counted in user already
    return total - idle, total


def _interfaces(topo, prefix):
    for link in topo.links:
        yield paths.netns_name(prefix, link.a), link.a_port, link, link.a in {h.name for h in topo.hosts}
        yield paths.netns_name(prefix, link.b), link.b_port, link, link.b in {h.name for h in topo.hosts}


def _tx_packets(topo, prefix) -> int:
    total = 0
    for ns, ifname, _, _ in _interfaces(topo, prefix):
        out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", ifname],
                             capture_output=True, text=True, check=True).stdout
        total += json.loads(out)[0]["stats64"]["tx"]["packets"]
    return total


def apply_variant(topo, prefix: str, variant: Variant) -> None:
    from pyroute2 import IPRoute

    qdisc.set_hysteresis(variant.hysteresis)
    by_ns: dict[str, list] = {}
    for ns, ifname, link, host in _interfaces(topo, prefix):
        by_ns.setdefault(ns, []).append((ifname, link, host))
    for ns, ports in by_ns.items():
        with IPRoute(netns=ns, flags=0) as ipr:
            for ifname, link, host in ports:
                mtu = topo.mtu if host else topo.switch_mtu
                _install(ipr, ipr.link_lookup(ifname=ifname)[0], link.rate_bps, mtu, topo.queue, variant)
                if host:
                    subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "gro",
                                    "on" if variant.host_gro else "off"], check=True)


def pairs(hosts_per_leaf: int) -> list[tuple[int, int]]:
    """Host i of leaf 0 with host i of leaf 1, both ways."""
    n = hosts_per_leaf
    return [(i, n + i) for i in range(n)] + [(n + i, i) for i in range(n)]


def run_flows(topo, prefix: str, duration: float, omit: float = 1.0, perf: str | None = None) -> dict:
    hosts = topo.hosts
    todo = pairs(topo.hosts_per_leaf)
    streams = max(1, FLOWS // len(todo))
    servers, clients = [], []
    try:
        for k, (s, d) in enumerate(todo):
            servers.append(ns_popen(paths.netns_name(prefix, hosts[d].name),
                                    ["iperf3", "-s", "-1", "-p", str(BASE_PORT + k)],
                                    stdout=subprocess.DEVNULL))
        time.sleep(0.3)
        for k, (s, d) in enumerate(todo):
            clients.append(ns_popen(paths.netns_name(prefix, hosts[s].name),
                                    ["iperf3", "-c", hosts[d].ip, "-p", str(BASE_PORT + k),
                                     "-t", f"{duration + omit:g}", "-O", f"{omit:g}", "-P", str(streams),
                                     "-C", "cubic", "-J"]))
        time.sleep(omit + 0.2)
        busy0, total0 = _cpu_times()
        pkts0, t0 = _tx_packets(topo, prefix), time.monotonic()
        if perf and perf.endswith(".stat"):  # events counted while the flows run
            subprocess.run(["perf", "stat", "-a", "-x,", "-o", perf, "-e", STAT_EVENTS, "--", "sleep",
                            f"{duration - 0.4:g}"], check=True, stdout=subprocess.DEVNULL)
        elif perf:  # the CPUs' profile while the flows run (perf record -a -g)
            subprocess.run(["perf", "record", "-a", "-g", "-q", "-o", perf, "--", "sleep",
                            f"{duration - 0.4:g}"], check=True, stdout=subprocess.DEVNULL)
        else:
            time.sleep(duration - 0.4)
        busy1, total1 = _cpu_times()
        pkts1, t1 = _tx_packets(topo, prefix), time.monotonic()
        goodput, retrans = 0.0, 0
        for c in clients:
            out, _ = finish(c, duration + omit + 30)
            end = json.loads(out)["end"]
            goodput += end["sum_received"]["bits_per_second"]
            retrans += int(end["sum_sent"].get("retransmits", 0))
    finally:
        for p in clients + servers:
            stop(p)
    cpu = (busy1 - busy0) / max(1, total1 - total0)
    pps = (pkts1 - pkts0) / (t1 - t0)
    ncpu = os.cpu_count() or 1
    return {"goodput_bps": goodput, "retransmits": retrans, "cpu": cpu, "link_pps": pps,
            "pkts_per_cpu_s": pps / max(1e-9, cpu * ncpu)}


def run(*, rates=(100e6, 200e6, 400e6), variants=("exact", "batched"), rounds: int = 2, duration: float = 8.0,
        queue_limit: int = 300_000, hosts_per_leaf: int = 2, perf_dir: str | None = None, perf_round: int = 0, perf_stat: bool = False,
        say=print) -> list[dict]:
    rows, hysteresis_was = [], qdisc.hysteresis()
    for rate in rates:
        topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=hosts_per_leaf, link_rate=int(rate),
                         host_link_rate=int(rate), queue=Queue(limit=queue_limit))
        say(f"rate {rate / 1e6:g} Mbit/s: building 1x2x{hosts_per_leaf} (prefix {PREFIX})")
        lifecycle.up(topo, PREFIX, datapath="bpf", replace=True)
        try:
            for r in range(rounds):
                for name in variants:
                    v = VARIANTS[name]
                    apply_variant(topo, PREFIX, v)
                    if r == 0:
                        ns = paths.netns_name(PREFIX, topo.hosts[0].name)
                        shown = subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", topo.hosts[0].iface],
                                               capture_output=True, text=True).stdout
                        say(f"  {name}: {ns} {topo.hosts[0].iface}: " + shown.strip().replace("\n", " | "))
                    time.sleep(0.5)
                    perf = (f"{perf_dir}/perf-{rate / 1e6:g}-{name}.{'stat' if perf_stat else 'data'}"
                            if perf_dir and r == perf_round else None)
                    m = run_flows(topo, PREFIX, duration, perf=perf)
                    row = {"rate_bps": rate, "variant": name, "round": r, "perf": bool(perf), **m}
                    rows.append(row)
                    say(f"  {rate / 1e6:>4g} Mbit/s {name:<12} round {r}: goodput "
                        f"{m['goodput_bps'] / 1e6:6.1f} Mbit/s, CPU {m['cpu'] * 100:5.1f}%, "
                        f"{m['link_pps'] / 1e3:6.1f}k link pkts/s, "
                        f"{m['pkts_per_cpu_s'] / 1e3:6.1f}k per CPU-s, {m['retransmits']} retr{' (perf on)' if perf else ''}")
        finally:
            qdisc.set_hysteresis(hysteresis_was)  # machine-wide: as it was before the benchmark
            lifecycle.down(PREFIX)
    return rows


def summarise(rows: list[dict]) -> list[str]:
    """Lines of a table: per rate and variant the means over the runs
    without perf, and goodput and packets per CPU-second against the first
    variant's at that rate."""
    lines = [f"{'rate':>9} {'variant':<13} {'runs':>4} {'goodput':>13} {'CPU':>6} {'link pkts/s':>11} "
             f"{'per CPU-s':>9} {'x goodput':>9} {'x per CPU-s':>11}"]
    for rate in dict.fromkeys(r["rate_bps"] for r in rows):
        base = None
        for name in dict.fromkeys(r["variant"] for r in rows if r["rate_bps"] == rate):
            runs = [r for r in rows if r["rate_bps"] == rate and r["variant"] == name and not r["perf"]]
            if not runs:
                continue
            mean = {k: sum(r[k] for r in runs) / len(runs)
                    for k in ("goodput_bps", "cpu", "link_pps", "pkts_per_cpu_s")}
            base = base or mean
            lines.append(f"{rate / 1e6:>5g} Mb/s {name:<13} {len(runs):>4} "
                         f"{mean['goodput_bps'] / 1e6:>8.1f} Mb/s {mean['cpu'] * 100:>5.1f}% "
                         f"{mean['link_pps'] / 1e3:>10.1f}k {mean['pkts_per_cpu_s'] / 1e3:>8.1f}k "
                         f"{mean['goodput_bps'] / base['goodput_bps']:>9.2f} "
                         f"{mean['pkts_per_cpu_s'] / base['pkts_per_cpu_s']:>11.2f}")
    return lines


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,200,400", help="Mbit/s, comma-separated")
    ap.add_argument("--variants", default="exact,batched")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--json")
    ap.add_argument("--perf-stat", action="store_true", help="perf stat (events) instead of record")
    ap.add_argument("--hosts-per-leaf", type=int, default=2)
    ap.add_argument("--perf-dir", help="perf record -a -g each run into this directory")
    a = ap.parse_args()
    out = run(rates=[float(x) * 1e6 for x in a.rates.split(",")], variants=a.variants.split(","),
              rounds=a.rounds, duration=a.duration, hosts_per_leaf=a.hosts_per_leaf, perf_dir=a.perf_dir, perf_stat=a.perf_stat)
    print("\n".join(summarise(out)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
