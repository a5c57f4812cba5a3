"""ByteScheduler-style communication scheduling (Peng et al., SOSP 2019):
tensor partitioning, credit, and priority by layer.

A pure object, no sockets: the communication patterns (workload/patterns/)
drive it. They :meth:`ByteScheduler.enqueue` a layer's partitions as soon as
the layer's backward step ends (back-propagation overlap), ask
:meth:`~ByteScheduler.next` for the partition to start whenever they can
send, and :meth:`~ByteScheduler.finish` a partition when its credit comes back
(PS: the server acknowledged its PUSH, see patterns/ps.py; all-reduce: its
last ring step arrived).

Rules (ByteScheduler section 4):

* priority = layer index: layer 0 (the front layer, needed first by the next
  forward pass) first; ties by iteration, then by the order the partitions
  were enqueued;
* credit: the target-scale bytes of the partitions started and not yet
  finished stay within ``credit_bytes``; one partition always may start
  when nothing is in flight, so a partition larger than the credit cannot
  stall;
* a lower-priority partition never starts while a higher-priority one waits,
  even if it would fit in the credit left; a higher-priority partition
  enqueued while a lower one is being sent starts at the next partition
  boundary (the next call to :meth:`~ByteScheduler.next`): partitions are
  the preemption unit.

Partition and credit sizes are in *target-scale* bytes (the cluster being
modelled), so a run's scheduling does not change with the testbed's scale.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import Iterable

from common.excerpt import shown

# ByteScheduler tunes both by Bayesian optimisation (TaLB section IV uses its
# defaults); these are the starting points of its search space for PS.
DEFAULT_PARTITION_BYTES = 4_000_000
DEFAULT_CREDIT_BYTES = 16_000_000


@dataclass(frozen=True)
class Partition:
    """One piece of one parameter tensor: the unit of scheduling."""

    pid: int             # index in the model's partition list (same on every node)
    layer: int           # priority: 0 = front layer = first
    tensor: str          # the parameter tensor it belongs to
    index: int           # its position within that tensor
    target_bytes: int    # size in the target cluster
    nbytes: int          # size on the testbed (after scaling)
    priority: int = -1   # scheduling order, lower first; -1: the layer index

    def __post_init__(self):
        if self.priority < 0:
            object.__setattr__(self, "priority", self.layer)


def partition_model(profile, partition_bytes: int, tensor_bytes=None) -> list[Partition]:
    """Every parameter tensor of ``profile`` cut into partitions of at most
    ``partition_bytes`` target bytes (equal parts, ByteScheduler splits a
    tensor evenly), in backward order (last layer first, as
    ``profile.backward_order()`` produces them). ``tensor_bytes`` maps a
    target size to testbed bytes (``Scaling.tensor_bytes``; default: same).
    Priority: the layer, or with ``profile.send_order`` the position in it."""
    if isinstance(partition_bytes, bool) or not isinstance(partition_bytes, int) or partition_bytes < 1:
        raise ValueError(f"partition_bytes: must be a positive integer, got {shown(partition_bytes)}")
    scale = tensor_bytes or (lambda b: b)
    parts: list[Partition] = []
    fixed = getattr(profile, "send_order", None) is not None
    for t in profile.backward_order():
        n = max(1, math.ceil(t.nbytes / partition_bytes))
        base, extra = divmod(t.nbytes, n)
        for i in range(n):
            target = base + (1 if i < extra else 0)
            parts.append(Partition(len(parts), t.layer, t.name, i, target, int(scale(target)),
                                   len(parts) if fixed else t.layer))
    return parts


class ByteScheduler:
    """Priority queue of ready partitions with a credit of bytes in flight."""

    def __init__(self, credit_bytes: int = DEFAULT_CREDIT_BYTES):
        if isinstance(credit_bytes, bool) or not isinstance(credit_bytes, int) or credit_bytes < 1:
            raise ValueError(f"credit_bytes: must be a positive integer, got {shown(credit_bytes)}")
        self.credit_bytes = credit_bytes
        self._ready: list[tuple] = []           # heap of (iteration, priority, seq, partition)
        self._seq = itertools.count()
        self._queued: set[tuple[int, int]] = set()
        self._in_flight: dict[tuple[int, int], Partition] = {}
        self.in_flight_bytes = 0

    def enqueue(self, parts: Iterable[Partition], iteration: int = 0) -> None:
        """Partitions whose gradients are ready (their layer's backward ended)."""
        for p in parts:
            key = (iteration, p.pid)
            if key in self._queued or key in self._in_flight:
                raise ValueError(f"partition {p.pid} of iteration {iteration} enqueued twice")
            self._queued.add(key)
            heapq.heappush(self._ready, (iteration, p.priority, next(self._seq), p))

    @property
    def waiting(self) -> int:
        return len(self._queued)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def peek(self) -> tuple[int, Partition] | None:
        """The highest-priority waiting partition, without starting it."""
        while self._ready and (self._ready[0][0], self._ready[0][3].pid) not in self._queued:
            heapq.heappop(self._ready)  # taken by start()
        return (self._ready[0][0], self._ready[0][3]) if self._ready else None

    def next(self) -> tuple[int, Partition] | None:
        """(iteration, partition) to start now, or None: nothing waits, or
        the highest-priority one does not fit in the credit left (then
        nothing of lower priority starts either)."""
        head = self.peek()
        if head is None:
            return None
        it, p = head
        if self._in_flight and self.in_flight_bytes + p.target_bytes > self.credit_bytes:
            return None
        self.start(it, p)
        return it, p

    def start(self, iteration: int, p: Partition) -> None:
        """Mark ``p`` started outside :meth:`next` (a ring all-reduce that a
        peer began: joining it cannot wait, see patterns/allreduce.py); it
        counts against the credit like any other."""
        key = (iteration, p.pid)
        if key in self._in_flight:
            raise ValueError(f"partition {p.pid} of iteration {iteration} started twice")
        self._queued.discard(key)
        self._in_flight[key] = p
        self.in_flight_bytes += p.target_bytes

    def finish(self, iteration: int, p: Partition) -> None:
        key = (iteration, p.pid)
        if self._in_flight.pop(key, None) is None:
            raise ValueError(f"partition {p.pid} of iteration {iteration} finished but never started")
        self.in_flight_bytes -= p.target_bytes
