"""Host-wide unique tensor ids: every id-making process claims a worker slot.

A Snowflake id (workload/snowflake.py) is unique only among generators of
different worker ids. The switches key a tensor by (source IPv4 address,
tensor_id) (common.wire.WireTensorKey, docs/talb-decisions.md), so the ids of one
host must never repeat across its processes and connections. Rather than
letting users number their workers, a process that makes ids on a host
*claims* one of the 2^worker_bits worker numbers of that host:

* The slots are regular files ``slot-00`` .. ``slot-15`` in a directory of
  the host's run-time state (:func:`slot_dir`: ``/run/talb/<prefix>/ids/<host>``
  for a testbed host). Claiming slot n is an exclusive, non-blocking
  ``flock`` on its file; the kernel drops the lock when the process exits,
  however it exits (SIGKILL included), so a dead holder never keeps a slot.
* A slot's previous holder may have made ids until the very tick in which we
  claim it. So after claiming, we wait until the clock has passed one more
  tick (at most ``unit_ns``, 1 ms): our ids all carry later timestamps than
  any of the previous holder's (the Snowflake never runs ahead of the clock,
  and CLOCK_MONOTONIC is one clock for every process of the machine).
* One generator per claimed slot, shared by every TensorSender of the
  process (it is thread-safe). A forked child does not inherit the claim: it
  drops its copy of the file and claims a slot of its own at its first id.
* All slots held: wait up to ``timeout`` seconds for one to free up, then
  raise :class:`IdSlotsExhausted` naming the host, the directory and the
  limit. An id is never repeated to avoid waiting.

Limits (the paper's 20|8|4 layout, section IV):

* 256 ids per millisecond per process (more: the generator waits for the
  next millisecond);
* 16 processes making ids at once per host (a 17th waits, then fails);
* an id repeats only when the 20-bit millisecond timestamp wraps, after
  2^20 ms ~ 17.5 min: far beyond the switches' idle timeout for a tensor
  entry, so no table ever holds two tensors with one key.

An explicit worker id (``TensorSender(worker_id=...)``, ``Snowflake(n)``)
bypasses the allocator: two processes given the same number make the same
ids (tests use this to force collisions).
"""
from __future__ import annotations

import fcntl
import ipaddress
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

from common import paths
from common.excerpt import shown
from workload.snowflake import (DEFAULT_SEQUENCE_BITS, DEFAULT_UNIT_NS, DEFAULT_WORKER_BITS, ID_BITS,
                                Snowflake)

__all__ = ["IdSlotsExhausted", "SlotIds", "host_ids", "slot_dir", "DEFAULT_CLAIM_TIMEOUT"]

DEFAULT_CLAIM_TIMEOUT = 10.0  # seconds to wait for a free slot
_POLL_S = 0.01


class IdSlotsExhausted(RuntimeError):
    """Every worker slot of the host is claimed by a live process."""


def slot_dir(prefix: str | None, host: str | None, address: str | None = None) -> Path:
    """Where a host's slot files live: ``<state dir of the testbed>/ids/<host>``;
    for a host set up by hand (no testbed), ``/run/talb/ids/addr-<address>``,
    keyed by the address its tensors carry as source."""
    if prefix is not None and host is not None:
        return paths.state_dir(prefix) / "ids" / paths.check_node(host, "host")
    if address is None:
        raise ValueError("slot_dir: needs prefix and host, or the host's address")
    return paths.RUN_DIR / "ids" / f"addr-{ipaddress.ip_address(address)}"  # never a path


class SlotIds:
    """Ids of one host, made under a claimed worker slot of that host.

    ``next_id()`` claims a slot the first time (in this process; again in a
    forked child) and then hands out the slot's Snowflake ids. ``label``
    names the host in errors. ``clock``/``sleep`` as for :class:`Snowflake`.
    """

    def __init__(self, directory: str | os.PathLike, *, label: str | None = None,
                 timeout: float = DEFAULT_CLAIM_TIMEOUT, worker_bits: int = DEFAULT_WORKER_BITS,
                 unit_ns: int = DEFAULT_UNIT_NS, clock: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep):
        if not timeout >= 0:
            raise ValueError(f"timeout: must be >= 0 seconds, got {shown(timeout)}")
        self.directory = Path(directory)
        self.label = label or str(self.directory)
        self.timeout = timeout
        self.worker_bits = worker_bits
        self.unit_ns = unit_ns
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._gen: Snowflake | None = None
        _live.add(self)

    @property
    def slots(self) -> int:
        return 1 << self.worker_bits

    def claim(self) -> int:
        """Claim a slot now (if this process holds none); returns its number."""
        with self._lock:
            return self._claimed().worker_id

    @property
    def worker_id(self) -> int:
        """The claimed slot (claims one if needed)."""
        return self.claim()

    def next_id(self) -> int:
        # Under our lock: a release() meanwhile must not free the slot while
        # an id of it is being made.
        with self._lock:
            return self._claimed().next_id()

    def parse(self, tensor_id: int):
        with self._lock:
            gen = self._claimed()
        return gen.parse(tensor_id)

    def release(self) -> None:
        """Give the slot back (the next id claims one again)."""
        with self._lock:
            self._drop()

    def _claimed(self) -> Snowflake:
        if self._gen is None:
            self._gen = self._claim()
        return self._gen

    def _claim(self) -> Snowflake:
        paths.private_dir(self.directory)
        deadline = time.monotonic() + self.timeout
        # Start at a pid-dependent slot so that processes starting together
        # rarely contend for the same file.
        first = os.getpid() % self.slots
        while True:
            for k in range(self.slots):
                n = (first + k) % self.slots
                fd = paths.private_file(self.directory / f"slot-{n:02d}", os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
                try:
                    self._wait_next_tick()
                    return Snowflake(n, worker_bits=self.worker_bits,
                                     timestamp_bits=ID_BITS - DEFAULT_SEQUENCE_BITS - self.worker_bits,
                                     unit_ns=self.unit_ns, clock=self._clock, sleep=self._sleep)
                except BaseException:
                    self._drop()
                    raise
            if time.monotonic() >= deadline:
                raise IdSlotsExhausted(
                    f"{self.label}: all {self.slots} tensor-id worker slots in {self.directory} are "
                    f"held by live processes (at most {self.slots} processes per host make tensor "
                    f"ids at once, one slot each); waited {self.timeout:g} s for one to free up. "
                    "End a process that sends tensors from this host, or send from fewer processes "
                    "(one process's TensorSenders share its slot)")
            time.sleep(_POLL_S)

    def _wait_next_tick(self) -> None:
        """Ids of the slot's previous holder carry ticks <= now: start after."""
        claimed = self._clock() // self.unit_ns
        while (now := self._clock()) // self.unit_ns <= claimed:
            self._sleep(max((claimed + 1) * self.unit_ns - now, 1) / 1e9)

    def _drop(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the kernel releases the flock
            self._fd = None
        self._gen = None

    def _after_fork_in_child(self) -> None:
        # The child's copy of the fd shares the parent's lock: closing the copy
        # leaves the parent's claim intact (flock is released only when every
        # copy is closed) and stops the child from keeping it after the parent
        # exits. The lock object may have been held by another thread at fork.
        self._lock = threading.Lock()
        self._drop()

    def __repr__(self) -> str:
        slot = self._gen.worker_id if self._gen is not None else None
        return f"SlotIds({str(self.directory)!r}, slot={slot})"


# Every SlotIds of this process, so that a forked child drops their claims.
_live: "weakref.WeakSet[SlotIds]" = weakref.WeakSet()
_shared: dict[Path, SlotIds] = {}
_shared_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _shared_lock
    _shared_lock = threading.Lock()
    for ids in list(_live):
        ids._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def host_ids(directory: str | os.PathLike, *, label: str | None = None,
             timeout: float = DEFAULT_CLAIM_TIMEOUT) -> SlotIds:
    """The process's one SlotIds of a host's slot directory (shared by all
    its TensorSenders: one slot per process and host)."""
    directory = Path(directory)
    with _shared_lock:
        ids = _shared.get(directory)
        if ids is None:
            ids = _shared[directory] = SlotIds(directory, label=label, timeout=timeout)
        return ids
