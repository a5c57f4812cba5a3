"""`talb bench shaped` (bench/shaped_fabric.py): its flows, its variants and
its table; the measurement itself is a benchmark, run by hand
(docs/performance.md (f))."""
from __future__ import annotations

import subprocess
import sys


def test_flows_cross_the_leaves_both_ways():
    from bench.shaped_fabric import pairs

    assert pairs(2) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    # with 4 hosts per leaf every host sends one flow and receives one
    assert sorted(s for s, _ in pairs(4)) == sorted(d for _, d in pairs(4)) == list(range(8))


def test_exact_is_what_the_builder_installs_and_batched_keeps_the_burst_after_idle():
    from bench.shaped_fabric import VARIANTS

    exact = VARIANTS["exact"]
    assert (exact.kind, exact.hysteresis, exact.burst_scale, exact.host_gro) == ("htb", False, 1.0, False)
    # with hysteresis a class overdraws by cburst: half burst + half cburst = the topology's burst
    assert VARIANTS["batched"].hysteresis and VARIANTS["batched"].burst_scale == 0.5


def test_summary_compares_each_variant_with_the_first_without_the_profiled_runs():
    from bench.shaped_fabric import summarise

    def row(v, goodput, cpu, perf=False):
        return {"rate_bps": 400e6, "variant": v, "round": 0, "perf": perf, "goodput_bps": goodput,
                "retransmits": 0, "cpu": cpu, "link_pps": goodput / 2000, "pkts_per_cpu_s": goodput / cpu}

    lines = summarise([row("exact", 1e9, 0.9, perf=True), row("exact", 400e6, 1.0),
                       row("batched", 1e9, 0.1, perf=True), row("batched", 800e6, 1.0)])
    exact, batched = lines[1].split(), lines[2].split()
    assert exact[2:4] == ["exact", "1"] and exact[4] == "400.0" and exact[-2:] == ["1.00", "1.00"]
    assert batched[2] == "batched" and batched[-2:] == ["2.00", "2.00"]


def test_cli_names_the_flag_of_a_bad_value():
    for args, flag in ((["--variants", "exact,fast"], "--variants"), (["--rates", "100"], "--rates"),
                       (["--queue", "1b"], "--queue")):
        proc = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "shaped", *args],
                              capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert flag in proc.stderr, proc.stderr
