"""Reading a per-CPU array of u64 counters (``port_stats``, ``counters``) in
one go, summed over CPUs.

Two strategies, measured by ``bench/agent_loop.py``:

* ``batch``: one ``BPF_MAP_LOOKUP_BATCH`` syscall for the first n entries
  (kernel >= 5.6 for arrays);
* ``per_key``: one ``BPF_MAP_LOOKUP_ELEM`` per entry, buffers prepared once.

Both return the same numbers; ``auto`` (the default) uses batch where the
kernel has it and falls back to per-key lookups where it does not.
Values are summed with slices of a ``memoryview`` (no numpy on the
project's machines): the per-CPU values of entry i, field f sit at
``[(i * ncpu + cpu) * fields + f]``.
"""
from __future__ import annotations

import ctypes
import errno
from operator import add

from common.excerpt import shown
from datapath import bpf_syscall as sc
from datapath.maps import Map, possible_cpus

STRATEGIES = ("auto", "batch", "per_key")
_ENOTSUPP = 524  # the kernel's internal "operation not supported" (no errno name)


class PerCpuArrayReader:
    """Entries ``0..n-1`` of a per-CPU array whose value is ``fields`` u64s.
    :meth:`read` -> ``[(field0, field1, ...), ...]`` summed over CPUs."""

    def __init__(self, m: Map, n: int, strategy: str = "auto"):
        if not m.percpu or m.info.type != sc.BPF_MAP_TYPE_PERCPU_ARRAY:
            raise TypeError(f"map {m.name!r} is not a per-CPU array")
        if m.value_size % 8:
            raise TypeError(f"map {m.name!r}: value of {m.value_size} bytes is not u64s")
        if not 0 < n <= m.info.max_entries:
            raise ValueError(f"map {m.name!r}: read {n} of {m.info.max_entries} entries")
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy: one of {', '.join(STRATEGIES)}, got {shown(strategy)}")
        self.map, self.n = m, n
        self.fields = m.value_size // 8
        self.ncpu = possible_cpus()
        self._stride = self.fields * 8 * self.ncpu  # bytes per entry, all CPUs
        self._batch = sc.MapBatch(m.fd, 4, self._stride, n, m.name)
        self._values = self._batch.values
        self._q = memoryview(self._values).cast("B").cast("Q")
        if strategy == "auto":
            strategy = "batch" if self._batch_works() else "per_key"
        self.strategy = strategy
        if strategy == "per_key":
            self._key = ctypes.c_uint32()
            self._value = ctypes.create_string_buffer(self._stride)
            self._lookup = sc.PreparedCall(
                sc.BPF_MAP_LOOKUP_ELEM,
                sc._ElemAttrPage(map_fd=m.fd, key=ctypes.addressof(self._key),
                                 value=ctypes.addressof(self._value)),
                f"BPF_MAP_LOOKUP_ELEM {m.name}")

    def _batch_works(self) -> bool:
        try:
            self._read_batch()
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP):
                return False
            raise
        return True

    def _read_batch(self) -> memoryview:
        self._batch.lookup(self.n)
        return self._q

    def _read_per_key(self) -> memoryview:
        out = memoryview(self._values).cast("B")
        for i in range(self.n):
            self._key.value = i
            self._lookup()
            out[i * self._stride:(i + 1) * self._stride] = self._value.raw
        return self._q

    def _raw(self) -> memoryview:
        return self._read_batch() if self.strategy == "batch" else self._read_per_key()

    def read(self) -> list[tuple[int, ...]]:
        q = self._raw()
        f, ncpu, n = self.fields, self.ncpu, self.n
        per_field = []
        for field in range(f):
            col = q[field::f][: n * ncpu]  # (entry, cpu) order
            if ncpu == 1:
                per_field.append(col.tolist())
            else:
                per_field.append(list(map(sum, zip(*(col[c::ncpu] for c in range(ncpu))))))
        return list(zip(*per_field))

    def columns(self, fields: tuple[int, ...]) -> list[list[int]]:
        """One read; for each of ``fields`` (indices into the value's u64s)
        the list of entries 0..n-1, summed over CPUs: ``read()`` transposed,
        without a tuple per entry."""
        q = self._raw()
        f, ncpu, n = self.fields, self.ncpu, self.n
        step = f * ncpu
        out = []
        for field in fields:
            col = q[field:field + step * n:step].tolist()  # CPU 0 of every entry
            for c in range(1, ncpu):
                col = list(map(add, col, q[c * f + field:c * f + field + step * n:step]))
            out.append(col)
        return out
