"""Ending a set of processes that may fork while they are being killed."""
from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable


def kill_until_gone(pids_now: Callable[[], Iterable[int]], *, rounds: int = 50,
                    pause_s: float = 0.02) -> bool:
    """SIGKILL every pid ``pids_now()`` lists, and list again until it lists
    none (a process may fork while we kill), at most ``rounds`` times.
    True when nothing was left."""
    for _ in range(rounds):
        pids = list(pids_now())
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(pause_s)
    return not list(pids_now())
