"""The testbed a run uses: the one up under its prefix, or one built from
its topology for the run and removed afterwards (training runs and
background-only runs alike)."""
from __future__ import annotations

import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from common import paths
from netns_topology.state import exists, require_root
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
                             f"(drop --topology, or pick another --prefix), got {topology!r}")
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
