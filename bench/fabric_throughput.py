"""Benchmark (b): host-to-host TCP across leaf-spine-leaf, BPF forwarding vs
the kernel bridge alone, on the same fabric, unshaped, in the same run.

"Unshaped" means link emulation off: no HTB anywhere, so both data paths run
as fast as the 2-core machine forwards. The BPF fabric is measured under
every scheme in turn (switched at run time, same fabric). Numbers to
compare are the ratios; absolute rates depend on the machine.
"""
from __future__ import annotations

import time

from common import paths
from common.c_constants import SCHEMES
from netns_topology import LeafSpine
from testbed import lifecycle
from workload.iperf import run_iperf3
from workload.netexec import ping

BENCH_PREFIX = {"bpf": "benchbpf", "bridge": "benchbr"}
# the BPF fabric is measured under every scheme of the registry (TaLB:
# untagged iperf3 traffic, i.e. its fallback)


def _wait_reachable(src_ns: str, dst_ip: str, timeout: float = 60.0) -> float:
    """The kernel bridge forwards only once STP has moved its ports through
    listening and learning (2 x forward delay): wait for a ping to pass."""
    start = time.monotonic()
    while not ping(src_ns, dst_ip, count=1, timeout_s=1):
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{dst_ip} unreachable from {src_ns} after {timeout:.0f} s")
    return time.monotonic() - start


def _set_scheme_everywhere(prefix: str, topo, scheme: str) -> None:
    from datapath.control import set_scheme
    from datapath.maps import SwitchMaps

    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            set_scheme(maps, scheme)


def measure(datapath: str, *, duration: float, parallels=(1, 4), say=print) -> list[dict]:
    """iperf3 h0 -> h3 with each of ``parallels`` flows; for bpf once per scheme."""
    prefix = BENCH_PREFIX[datapath]
    topo = LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, shaping=False)
    src, dst = topo.hosts[0], topo.hosts[-1]
    say(f"  building an unshaped 2x2x2 fabric, datapath {datapath} (prefix {prefix})")
    lifecycle.up(topo, prefix, datapath=datapath, replace=True)
    rows = []
    try:
        src_ns, dst_ns = paths.netns_name(prefix, src.name), paths.netns_name(prefix, dst.name)
        waited = _wait_reachable(src_ns, dst.ip)
        for scheme in (SCHEMES if datapath == "bpf" else (None,)):
            if scheme:
                _set_scheme_everywhere(prefix, topo, scheme)
            for parallel in parallels:
                result = run_iperf3(src_ns, dst_ns, dst.ip, duration=duration, parallel=parallel)
                label = f"{datapath} {scheme}" if scheme else datapath
                say(f"    {label:<14} {src.name}->{dst.name} x{parallel}: "
                    f"{result.received_bps / 1e9:.2f} Gbit/s ({result.retransmits} retransmits; "
                    f"reachable after {waited:.1f} s)")
                rows.append({"datapath": datapath, "scheme": scheme, "parallel": parallel,
                             "goodput_bps": result.received_bps,
                             "retransmits": result.retransmits, "duration_s": result.duration_s})
    finally:
        lifecycle.down(prefix)
    return rows


def run(*, duration: float = 5.0, say=print) -> dict:
    say("(b) iperf3 h0 -> h3 across leaf-spine-leaf, no rate limit")
    rows = measure("bpf", duration=duration, say=say) + measure("bridge", duration=duration,
                                                                 say=say)
    ratios = {}
    for parallel in (1, 4):
        br = next(r for r in rows if r["datapath"] == "bridge" and r["parallel"] == parallel)
        for scheme in SCHEMES:
            bpf = next(r for r in rows if r["scheme"] == scheme and r["parallel"] == parallel)
            key = f"bpf {scheme}/bridge x{parallel}"
            ratios[key] = bpf["goodput_bps"] / br["goodput_bps"]
            say(f"    ratio bpf ({scheme}) / bridge with {parallel} flow(s): {ratios[key]:.2f}")
    return {"rows": rows, "ratios": ratios}
