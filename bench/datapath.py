"""`talb bench datapath`: (a) the switch program's cost per packet under
BPF_PROG_TEST_RUN, (b) TCP throughput across the fabric, BPF vs kernel bridge."""
from __future__ import annotations

import os
import platform

from bench import datapath_bpf, fabric_throughput


def run_all(*, repeat: int = 1_000_000, duration: float = 5.0, say=print) -> dict:
    machine = {"kernel": platform.release(), "cpus": os.cpu_count()}
    say(f"machine: kernel {machine['kernel']}, {machine['cpus']} CPUs")
    program = datapath_bpf.measure(repeat=repeat, say=say)
    fabric = fabric_throughput.run(duration=duration, say=say)
    return {"machine": machine, "program_ns_per_packet": program, "fabric_throughput": fabric}
