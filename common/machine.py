"""The machine a run ran on: host name, kernel release, CPU model and cores.

Every results file carries it (workload/run_record.py), whether the run came
from a local sweep or from a worker of a cluster (experiments/sweep/cluster.py),
so a sweep's runs.csv says where each run was timed. Runs of two machines of
different kinds (CPU model, cores or kernel) have timings that are not
comparable: :func:`kind` is what the summary compares.
"""
from __future__ import annotations

import os
import platform
import socket


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() in ("model name", "Model", "cpu model"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine_info() -> dict:
    """``{"hostname", "kernel", "cpu_model", "cores"}`` of this machine (cores:
    the CPUs this process may run on)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"hostname": socket.gethostname(), "kernel": platform.release(),
            "cpu_model": _cpu_model(), "cores": cores}


def kind(info: dict | None) -> str | None:
    """What makes two machines' timings comparable: CPU model, cores and
    kernel (not the host name). None for a run recorded without a machine."""
    if not info:
        return None
    return f"{info.get('cpu_model') or '?'}, {info.get('cores') or '?'} cores, " \
           f"kernel {info.get('kernel') or '?'}"
