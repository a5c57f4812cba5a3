"""Processes the tools start are ended and reaped on every path
(workload/netexec.py stop, finish)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from workload.netexec import finish, stop


def _gone(pid: int) -> bool:
    """Neither running nor an unreaped zombie of ours."""
    return not os.path.exists(f"/proc/{pid}")


def test_finish_ends_and_reaps_on_timeout():
    proc = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.raises(subprocess.TimeoutExpired):
        finish(proc, 0.2)
    assert proc.returncode is not None and _gone(proc.pid)


def test_finish_returns_output():
    proc = subprocess.Popen(["echo", "hi"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert finish(proc, 10) == ("hi\n", "")


def test_stop_kills_what_ignores_sigterm_after_the_grace():
    proc = subprocess.Popen([sys.executable, "-c",
                             "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(30)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    stop(proc, grace=0.3)
    assert time.monotonic() - t0 >= 0.3
    assert proc.returncode == -9 and _gone(proc.pid) and proc.stdout.closed
    stop(proc)  # idempotent
