"""`talb tag`: tag the TCP writes of unmodified processes on testbed hosts,
registered on the main command group by :func:`register` (talb/cli.py)."""
from __future__ import annotations

import signal
import time

import click

from common import paths
from common.excerpt import shown

STATUS_EVERY_S = 3.0
SHOWN = ("selected", "started", "continued", "partial", "ring_full", "too_large",
         "skipped_library_flow", "closed")


def _ports(value: str) -> tuple[int, int]:
    lo, _, hi = value.partition("-")
    try:
        lo_i, hi_i = int(lo), int(hi or lo)
    except ValueError:
        raise ValueError(f"--port: a port N or a range N-M, got {shown(value)}") from None
    if not 1 <= lo_i <= hi_i <= 65535:
        raise ValueError(f"--port: ports 1..65535, N <= M, got {shown(value)}")
    return lo_i, hi_i


@click.command("tag")
@click.option("--prefix", default=paths.DEFAULT_PREFIX, show_default=True,
              help="Name prefix of the testbed's namespaces (<prefix>-<node>).")
@click.option("--netns", "hosts", required=True, metavar="HOST[,HOST...]",
              help="Testbed hosts whose processes' writes to tag (e.g. h0,h3).")
@click.option("--cgroup", metavar="PATH",
              help="Tag the processes of this cgroup v2 (and below it); absolute, or relative "
                   "to the cgroup2 mount.")
@click.option("--pid", type=int, help="Tag the writes of this process.")
@click.option("--port", metavar="N[-M]",
              help="Tag writes on TCP connections whose source or destination port is N (or in N-M).")
@click.option("--priority", metavar="RULE",
              help="Layer (priority) of each write: size:64K,1M (size classes, small first; the "
                   "default), port:5001=0,5002=3 (destination port -> layer, others after the "
                   "largest), burst:200us (0, 1, 2, ... within a burst of writes closer than the gap).")
@click.option("--for", "duration", type=float, metavar="SECONDS",
              help="Stop after this many seconds (for scripts) [default: until Ctrl-C/SIGTERM].")
def tag_cmd(prefix, hosts, cgroup, pid, port, priority, duration):
    """Tag the TCP writes of processes that do not use TaLB's library (Open
    MPI ranks, any TCP client): each application write becomes one tensor
    (one id, its length in packets, LAST on its last packet), continued
    across partial writes of nonblocking sockets. Runs in the foreground,
    prints counters every few seconds, and on Ctrl-C/SIGTERM detaches and
    gives the hosts' id slots back. Exactly one of --cgroup, --pid, --port.
    Needs root and a testbed built with this version (`talb testbed up`).
    docs/workload.md, "Tagging unmodified applications"."""
    from netns_topology.state import require_root
    from workload.transparent_tag import TransparentTagger

    require_root()
    given = [n for n, v in (("--cgroup", cgroup), ("--pid", pid), ("--port", port)) if v is not None]
    if len(given) != 1:
        raise ValueError("--cgroup/--pid/--port: exactly one selects what to tag, got "
                         f"{' and '.join(given) or 'none'}")
    if duration is not None and not duration > 0:
        raise ValueError(f"--for: a positive number of seconds, got {shown(duration)}")
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    stop = {"now": False}

    def _stop(*_):
        stop["now"] = True

    old = signal.signal(signal.SIGTERM, _stop)
    try:
        with TransparentTagger(prefix, names, ports=_ports(port) if port else None, cgroup=cgroup,
                               pid=pid, priority=priority) as tag:
            what = (f"port {port}" if port else f"cgroup {cgroup}" if cgroup else f"pid {pid}")
            slots = ", ".join(f"{h} (worker {w})" for h, w in tag.workers.items())
            click.echo(f"tagging writes of {what} on {slots}; priority {tag.rule}")
            end = time.monotonic() + duration if duration else None
            nxt = time.monotonic() + STATUS_EVERY_S
            try:
                while not stop["now"] and (end is None or time.monotonic() < end):
                    time.sleep(0.1)
                    if time.monotonic() >= nxt:
                        c = tag.counters()
                        click.echo("  " + " ".join(f"{k}={c.get(k, 0)}" for k in SHOWN))
                        nxt += STATUS_EVERY_S
            except KeyboardInterrupt:
                pass
            c = tag.counters()
            click.echo("stopped: " + " ".join(f"{k}={c.get(k, 0)}" for k in SHOWN))
    finally:
        signal.signal(signal.SIGTERM, old)


def register(group: click.Group) -> None:
    group.add_command(tag_cmd)
