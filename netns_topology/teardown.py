"""Remove every namespace of a prefix, and the processes living in them.

Works from nothing but /run/netns, so it also cleans up after a build or a
run that was killed: prefixes contain no '-', hence "<prefix>-" matches only
this prefix's namespaces.
"""
from __future__ import annotations

import os
import signal
import time

from pyroute2 import netns

from common.paths import check_prefix

_KILL_ROUNDS = 50  # a process may fork while we kill; rescan until none is left


def namespaces(prefix: str) -> list[str]:
    """This prefix's namespaces, sorted."""
    start = check_prefix(prefix) + "-"
    return sorted(name for name in netns.listnetns() if name.startswith(start))


def _pids_in(names: list[str]) -> list[int]:
    # ns_pids matches /proc/*/ns/net against the namespace files by (dev, inode).
    pids = netns.ns_pids()
    return [pid for name in names for pid in pids.get(name, []) if pid != os.getpid()]


def teardown(prefix: str) -> list[str]:
    """Kill the processes inside, then delete the namespaces. Idempotent; returns names removed."""
    names = namespaces(prefix)
    for _ in range(_KILL_ROUNDS):
        pids = _pids_in(names)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    removed = []
    for name in names:
        try:
            netns.remove(name)
        except FileNotFoundError:  # removed concurrently: the goal is met
            continue
        removed.append(name)
    return removed
