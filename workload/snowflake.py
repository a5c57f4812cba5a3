"""Snowflake tensor ids (the paper's tensor_id, Hu et al. IWQoS 2024, section IV).

A 32-bit id, most significant field first::

    | timestamp (20 bits) | sequence (8 bits) | worker (4 bits) |

* timestamp: the clock in ``unit_ns`` ticks (default 1 ms), modulo
  2^timestamp_bits: with the defaults it wraps every 2^20 ms ~ 17.5 min, so
  an id can come back after that long; the switches' tensor table ages its
  entries out long before (docs/design.md §5).
* sequence: ids made within one tick; when it runs out the generator waits
  for the next tick (at most 2^sequence_bits ids per tick and worker: 256 per
  ms with the defaults).
* worker: which worker made the id, so that ids of different workers never
  collide. TensorSender takes it from a worker slot its process claims on
  the host (workload/id_slots.py: one slot per process and host, shared by
  the process's senders), so ids never repeat across the processes and
  connections of a host; at most 2^worker_bits (16) processes per host make
  ids at once. A worker id given by hand bypasses that: two generators of
  one worker id make the same ids.

Widths are configurable (each >= 1, sum 32: the option's tensor_id field).
Generators are thread-safe.

    ids = Snowflake(worker_id=3)
    tid = ids.next_id()
    ids.parse(tid)          # SnowflakeId(timestamp=..., sequence=0, worker=3)
"""
from __future__ import annotations

import operator
import threading
import time
from dataclasses import dataclass
from typing import Callable

from common.excerpt import shown

__all__ = ["ID_BITS", "Snowflake", "SnowflakeId"]

ID_BITS = 32  # the TaLB option's tensor_id field (docs/design.md §4)
DEFAULT_TIMESTAMP_BITS = 20
DEFAULT_SEQUENCE_BITS = 8
DEFAULT_WORKER_BITS = 4
DEFAULT_UNIT_NS = 1_000_000  # 1 ms


def _positive_int(field: str, value) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{field}: must be an integer >= 1, got {shown(value)}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{field}: must be an integer >= 1, got {shown(value)}") from None
    if value < 1:
        raise ValueError(f"{field}: must be an integer >= 1, got {shown(value)}")
    return value


@dataclass(frozen=True)
class SnowflakeId:
    timestamp: int  # clock ticks modulo 2^timestamp_bits
    sequence: int
    worker: int


class Snowflake:
    """Thread-safe generator of unique 32-bit ids for one worker.

    ``clock``: a function returning nanoseconds (default
    ``time.monotonic_ns``: it never goes back; all processes of a machine
    share it). ``sleep``: how to wait for the next tick (tests replace both).
    """

    def __init__(self, worker_id: int = 0, *, timestamp_bits: int = DEFAULT_TIMESTAMP_BITS,
                 sequence_bits: int = DEFAULT_SEQUENCE_BITS,
                 worker_bits: int = DEFAULT_WORKER_BITS, unit_ns: int = DEFAULT_UNIT_NS,
                 clock: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep):
        self.timestamp_bits = _positive_int("timestamp_bits", timestamp_bits)
        self.sequence_bits = _positive_int("sequence_bits", sequence_bits)
        self.worker_bits = _positive_int("worker_bits", worker_bits)
        total = self.timestamp_bits + self.sequence_bits + self.worker_bits
        if total != ID_BITS:
            raise ValueError(
                f"timestamp_bits + sequence_bits + worker_bits: must sum to {ID_BITS} (the "
                f"tensor_id field), got {self.timestamp_bits} + {self.sequence_bits} + "
                f"{self.worker_bits} = {total}")
        self.unit_ns = _positive_int("unit_ns", unit_ns)
        if isinstance(worker_id, bool) or not isinstance(worker_id, int) \
                or not 0 <= worker_id <= self.max_worker_id:
            raise ValueError(f"worker_id: must be an integer 0..{self.max_worker_id} for "
                             f"worker_bits={self.worker_bits}, got {shown(worker_id)}")
        self.worker_id = worker_id
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._last_tick = -1
        self._sequence = 0

    @property
    def max_worker_id(self) -> int:
        return (1 << self.worker_bits) - 1

    @property
    def max_sequence(self) -> int:
        return (1 << self.sequence_bits) - 1

    def _tick(self) -> int:
        return self._clock() // self.unit_ns

    def next_id(self) -> int:
        """A new id, unique among this generator's ids until the timestamp
        wraps (2^timestamp_bits ticks), and across generators of other
        worker ids."""
        with self._lock:
            tick = self._tick()
            if tick > self._last_tick:
                self._last_tick, self._sequence = tick, 0
            elif self._sequence < self.max_sequence:
                # Same tick (or a clock that went back): next sequence number.
                self._sequence += 1
            else:
                # Sequence exhausted: wait for a tick after the last one used.
                while (tick := self._tick()) <= self._last_tick:
                    self._sleep(max((self._last_tick + 1) * self.unit_ns - self._clock(), 0) / 1e9)
                self._last_tick, self._sequence = tick, 0
            return self._compose(self._last_tick, self._sequence)

    def _compose(self, tick: int, sequence: int) -> int:
        ts = tick & ((1 << self.timestamp_bits) - 1)
        return (((ts << self.sequence_bits) | sequence) << self.worker_bits) | self.worker_id

    def parse(self, tensor_id: int) -> SnowflakeId:
        """The fields of an id made with this generator's widths."""
        if isinstance(tensor_id, bool) or not isinstance(tensor_id, int) \
                or not 0 <= tensor_id < 1 << ID_BITS:
            raise ValueError(f"tensor_id: must be an integer 0..{(1 << ID_BITS) - 1}, "
                             f"got {shown(tensor_id)}")
        return SnowflakeId(
            timestamp=tensor_id >> (self.sequence_bits + self.worker_bits),
            sequence=(tensor_id >> self.worker_bits) & self.max_sequence,
            worker=tensor_id & self.max_worker_id,
        )

    def __repr__(self) -> str:
        return (f"Snowflake(worker_id={self.worker_id}, timestamp_bits={self.timestamp_bits}, "
                f"sequence_bits={self.sequence_bits}, worker_bits={self.worker_bits}, "
                f"unit_ns={self.unit_ns})")
