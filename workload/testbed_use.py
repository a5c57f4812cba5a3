"""The testbed a run uses: the one up under its prefix, or one built from
its topology for the run and removed afterwards (training runs and
background-only runs alike)."""
from __future__ import annotations

import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from common import paths
from common.excerpt import shown
from netns_topology.state import exists, queueing_of, require_root, rto_min_of
from testbed import lifecycle


def free_port() -> int:
    """A free TCP port on loopback (for a run's own agent /metrics)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def testbed_for(prefix: str, topology: str | None, default_topology: Path,
                check: Callable = lambda _topo: None, say=lambda _m: None) -> Iterator[bool]:
    """Yields whether the testbed was built for this run. ``topology`` with a
    testbed already up is an error (the run would silently ignore it);
    ``check(topo)`` runs before anything is built (enough hosts? names?)."""
    require_root()
    paths.check_prefix(prefix)
    if exists(prefix):
        if topology:
            raise ValueError(f"--topology: testbed '{prefix}' is already up; the run uses it "
                             f"(drop --topology, or pick another --prefix), got {shown(topology)}")
        yield False
        return
    from netns_topology import load_topology

    topo_file = Path(topology) if topology else default_topology
    if not topo_file.is_file():
        raise ValueError(f"--topology: no such file {str(topo_file)!r}")
    topo = load_topology(topo_file)
    check(topo)
    say(f"building testbed '{prefix}' from {topo_file}")
    # The agent's /metrics on a free port: another testbed's agent may hold the default.
    lifecycle.up(topo, prefix, agent={"metrics_port": free_port()})
    try:
        yield True
    finally:
        say(f"removing testbed '{prefix}'")
        lifecycle.down(prefix)


def rto_min_setting(value) -> str | None:
    """--rto-min's value as runs record it: ``10ms``, ``kernel`` (no route
    metric: the kernel's 200 ms; ``default`` says the same), None (as the
    fabric is); ValueError naming --rto-min and the value."""
    if value is None:
        return None
    from netns_topology.params import check_rto_min_setting, format_rto_min_setting

    return format_rto_min_setting(check_rto_min_setting("--rto-min", value))


def _rto_text(ms: int | None) -> str:
    return "the kernel's 200 ms" if ms is None else f"{ms} ms"


@contextmanager
def rto_min_for_run(prefix: str, value: str | None, built: bool,
                    say=lambda _m: None) -> Iterator[None]:
    """The hosts' minimum RTO ``value`` (``10ms``, ``kernel``; None: as the
    fabric is) in force while the block runs (testbed.lifecycle.set_rto_min);
    on a testbed the run did not build (``built`` False) the one before is
    put back after it, also on failure."""
    if value is None:
        yield
        return
    before = rto_min_of(prefix)
    now = lifecycle.set_rto_min(prefix, value)
    if now != before:
        say(f"hosts' minimum RTO: {_rto_text(now)} (was {_rto_text(before)})")
    try:
        yield
    finally:
        if now != before and not built:
            say(f"hosts' minimum RTO: back to {_rto_text(before)}")
            lifecycle.set_rto_min(prefix, before)


@contextmanager
def queueing_for_run(prefix: str, value: str | None, built: bool,
                     say=lambda _m: None) -> Iterator[None]:
    """The switch ports' queueing ``value`` (``bands``, ``fifo``; None: as the
    fabric is now) in force while the block runs (testbed.lifecycle.set_queueing);
    on a testbed the run did not build the one before is put back after it,
    also on failure."""
    if value is None:
        yield
        return
    before = queueing_of(prefix)["mode"]
    if before != value:
        say(f"switch ports: {value} queueing (was {before})")
    lifecycle.set_queueing(prefix, value)
    try:
        yield
    finally:
        if before != value and not built:
            say(f"switch ports: back to {before} queueing")
            lifecycle.set_queueing(prefix, before)
