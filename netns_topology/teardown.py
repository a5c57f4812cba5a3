"""Remove every namespace of a prefix, and the processes living in them.

Works from nothing but /run/netns, so it also cleans up after a build or a
run that was killed: prefixes contain no '-', hence "<prefix>-" matches only
this prefix's namespaces.
"""
from __future__ import annotations

import os

from pyroute2 import netns

from common.kill import kill_until_gone
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
    kill_until_gone(lambda: _pids_in(names), rounds=_KILL_ROUNDS)
    removed = []
    for name in names:
        try:
            netns.remove(name)
        except FileNotFoundError:  # removed concurrently: the goal is met
            continue
        removed.append(name)
    return removed
