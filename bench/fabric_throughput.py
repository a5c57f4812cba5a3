"""Benchmark (b): host-to-host TCP across leaf-spine-leaf, BPF forwarding vs
the kernel bridge alone, on the same fabric, unshaped, in the same run.

"Unshaped" means link emulation off: no HTB anywhere, so both data paths run
as fast as the 2-core machine forwards. Numbers to compare are the ratios;
absolute rates depend on the machine.
"""
from __future__ import annotations

import time

from netns_topology import LeafSpine
from talb import paths, testbed
from workload.iperf import run_iperf3
from workload.netexec import ping

BENCH_PREFIX = {"bpf": "benchbpf", "bridge": "benchbr"}


def _wait_reachable(src_ns: str, dst_ip: str, timeout: float = 60.0) -> float:
    """The kernel bridge forwards only once STP has moved its ports through
    listening and learning (2 x forward delay): wait for a ping to pass."""
    start = time.monotonic()
    while not ping(src_ns, dst_ip, count=1, timeout_s=1):
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{dst_ip} unreachable from {src_ns} after {timeout:.0f} s")
    return time.monotonic() - start


def measure(datapath: str, *, duration: float, parallel: int = 1, say=print) -> dict:
    prefix = BENCH_PREFIX[datapath]
    topo = LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, shaping=False)
    src, dst = topo.hosts[0], topo.hosts[-1]
    say(f"  building an unshaped 2x2x2 fabric, datapath {datapath} (prefix {prefix})")
    testbed.up(topo, prefix, datapath=datapath, replace=True)
    try:
        src_ns, dst_ns = paths.netns_name(prefix, src.name), paths.netns_name(prefix, dst.name)
        waited = _wait_reachable(src_ns, dst.ip)
        result = run_iperf3(src_ns, dst_ns, dst.ip, duration=duration, parallel=parallel)
    finally:
        testbed.down(prefix)
    say(f"    {datapath:<6} {src.name}->{dst.name} x{parallel}: {result.received_bps / 1e9:.2f} Gbit/s "
        f"({result.retransmits} retransmits; reachable after {waited:.1f} s)")
    return {"datapath": datapath, "parallel": parallel, "goodput_bps": result.received_bps,
            "retransmits": result.retransmits, "duration_s": result.duration_s}


def run(*, duration: float = 5.0, say=print) -> dict:
    say("(b) iperf3 h0 -> h3 across leaf-spine-leaf, no rate limit")
    rows = []
    for parallel in (1, 4):
        for datapath in ("bpf", "bridge"):
            rows.append(measure(datapath, duration=duration, parallel=parallel, say=say))
    ratios = {}
    for parallel in (1, 4):
        bpf = next(r for r in rows if r["datapath"] == "bpf" and r["parallel"] == parallel)
        br = next(r for r in rows if r["datapath"] == "bridge" and r["parallel"] == parallel)
        ratios[f"bpf/bridge x{parallel}"] = bpf["goodput_bps"] / br["goodput_bps"]
        say(f"    ratio bpf/bridge with {parallel} flow(s): {ratios[f'bpf/bridge x{parallel}']:.2f}")
    return {"rows": rows, "ratios": ratios}
