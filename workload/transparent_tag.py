"""Tag the TCP writes of unmodified processes on testbed hosts
(docs/workload.md, "Tagging unmodified applications").

    with TransparentTagger("talb", ["h0", "h1"], ports=(5001, 5001)) as tag:
        ...                      # run mpirun / any TCP client in the hosts
        tag.counters()           # {"started": ..., "continued": ...}
    # closed: detached, the rings emptied, the worker slots given back

One kernel program (datapath/sendmsg_tagger.py, bpf/host_sendmsg.c) for all
the hosts; per host it claims a Snowflake worker slot (workload/id_slots.py,
held while tagging: ids stay unique alongside TensorSender users) and a
lock file (one tagger per host at a time).
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Sequence

from common import paths
from common.excerpt import shown
from datapath.sendmsg_tagger import UNIT_NS, Selector, SendmsgTagger, parse_priority, syscall_numbers
from workload.id_slots import SlotIds, slot_dir

__all__ = ["TransparentTagger", "cgroup_selector", "CGROUP2_DEFAULTS"]

#: where cgroup v2 may be mounted (hybrid systems: .../unified)
CGROUP2_DEFAULTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")


def _cgroup2_root() -> Path:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "cgroup2":
                return Path(fields[4])
    raise ValueError("--cgroup: no cgroup v2 hierarchy is mounted on this machine "
                     f"(looked for a cgroup2 mount; tried {', '.join(CGROUP2_DEFAULTS)})")


def cgroup_selector(path: str) -> Selector:
    """The cgroup v2 at ``path`` (absolute, or relative to the cgroup2
    mount) and everything below it."""
    root = _cgroup2_root()
    p = Path(path)
    if not p.is_absolute():
        p = root / p
    p = p.resolve()
    if not p.is_relative_to(root) or not (p / "cgroup.procs").exists():
        raise ValueError(f"--cgroup: {path!r} is not a cgroup v2 directory under {root}")
    return Selector(cgroup_id=os.stat(p).st_ino, cgroup_level=len(p.relative_to(root).parts))


class TransparentTagger:
    """Tag the writes of the selected processes on ``hosts`` (testbed host
    names of testbed ``prefix``). Exactly one selector: ``ports`` (inclusive
    range, source OR destination port), ``cgroup`` (a cgroup v2 path and its
    descendants), ``pid`` (that process). ``priority``: the rule's text
    (datapath.sendmsg_tagger.parse_priority; None: the default)."""

    def __init__(self, prefix: str, hosts: Sequence[str], *, ports: tuple[int, int] | None = None,
                 cgroup: str | None = None, pid: int | None = None, priority: str | None = None):
        syscall_numbers()     # this machine's architecture is one the program knows
        given = [n for n, v in (("ports", ports), ("cgroup", cgroup), ("pid", pid)) if v is not None]
        if len(given) != 1:
            raise ValueError("TransparentTagger: exactly one of ports, cgroup, pid selects what to "
                             f"tag, got {', '.join(given) or 'none'}")
        if ports is not None:
            lo, hi = ports
            if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi <= 65535):
                raise ValueError(f"ports: a range 1 <= lo <= hi <= 65535, got {shown(ports)}")
            selector = Selector(ports=(lo, hi))
        elif cgroup is not None:
            selector = cgroup_selector(cgroup)
        else:
            if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1 \
                    or not Path(f"/proc/{pid}").exists():
                raise ValueError(f"--pid: no process {pid!r} is running")
            selector = Selector(tgid=pid)
        self._rule = parse_priority(priority)
        self.rule: str = self._rule.text
        self.prefix = paths.check_prefix(prefix)
        if not hosts:
            raise ValueError("hosts: at least one host to tag")
        self.hosts = list(dict.fromkeys(hosts))
        known = self._testbed_hosts()
        for h in self.hosts:
            if h not in known:
                raise ValueError(f"host: {h!r} is not a host of testbed '{prefix}' "
                                 f"(its hosts: {', '.join(known)})")
        self._locks: dict[str, int] = {}
        self._slots: dict[str, SlotIds] = {}
        self.workers: dict[str, int] = {}
        self._tagger: SendmsgTagger | None = None
        self._inodes: dict[str, int] = {}
        try:
            for h in self.hosts:
                self._lock(h)
                ids = self._slots[h] = SlotIds(slot_dir(self.prefix, h), label=f"host {h}")
                self.workers[h] = ids.claim()
                self._inodes[h] = os.stat(Path("/run/netns") / paths.netns_name(self.prefix, h)).st_ino
            self._tagger = SendmsgTagger()
            for h in self.hosts:
                self._tagger.add_host(self._inodes[h], paths.pin_dir(self.prefix, h),
                                      worker=self.workers[h], selector=selector, rule=self._rule)
        except BaseException:
            self.close()
            raise

    def _testbed_hosts(self) -> list[str]:
        from netns_topology.state import exists, load_topology_of

        if not exists(self.prefix):
            raise ValueError(f"--prefix: no testbed '{self.prefix}' is up (`talb testbed up`)")
        return [h.name for h in load_topology_of(self.prefix).hosts]

    def _lock(self, host: str) -> None:
        path = paths.state_dir(self.prefix) / f"tag-{paths.check_node(host, 'host')}.lock"
        fd = paths.private_file(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ValueError(f"host: {host!r} is already tagged by another `talb tag` "
                             f"(it holds {path})") from None
        self._locks[host] = fd

    def counters(self) -> dict[str, int]:
        return self._tagger.counters() if self._tagger is not None else {}

    def close(self) -> None:
        """Detach, wait for the clock past the last tick any CPU used, give
        the worker slots back. Idempotent."""
        if self._tagger is not None:
            for inode in list(self._tagger.hosts):
                self._tagger.remove_host(inode)      # no new ids from here on
            last = self._tagger.max_tick()
            self._tagger.close()
            self._tagger = None
            while time.monotonic_ns() // UNIT_NS <= last:
                time.sleep(0.0005)
        for ids in self._slots.values():
            ids.release()
        self._slots.clear()
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()

    def __enter__(self) -> "TransparentTagger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
