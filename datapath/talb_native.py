"""The TaLB part of forwarding groups computed in C (datapath/talb_parts.c),
many groups in one call: what ``datapath.control._talb_part`` packs, the
same bytes (tests/test_talb_native.py compares the two), at a fraction of
the cost -- in Python a smooth-WRR schedule of 64 picks is ~40 us, and an
agent window publishing 8 changed groups paid ~0.45 ms for them.

Built by common.native (the system's C compiler, once, cached in the run
directory). No compiler, a failed build or ``TALB_NATIVE=off``: :func:`parts`
is None and callers keep the Python path.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from common import native
from common.c_constants import TALB_MAX_GROUP_PORTS, TALB_PCM_ONE, TALB_SCHED_MAX

SOURCE = Path(__file__).resolve().parent / "talb_parts.c"
#: bytes of one group's TaLB part (threshold .. sched[])
PART_SIZE = 8 + 3 * TALB_MAX_GROUP_PORTS + TALB_SCHED_MAX
#: bytes of one struct fwd_group (n_ports, flags, ifindex[], the TaLB part)
GROUP_SIZE = 8 + 4 * TALB_MAX_GROUP_PORTS + PART_SIZE
_DEFINES = (f"-DMAXP={TALB_MAX_GROUP_PORTS}", f"-DSCHED={TALB_SCHED_MAX}",
            f"-DONE={TALB_PCM_ONE}")


_V = ctypes.c_void_p
#: talb_publish's result for a NaN P_i, and the base of "group k cannot be encoded"
PUBLISH_NAN, PUBLISH_BAD_GROUP = -1000000, -2000000
#: talb_publish's status per group
PUB_UNCHANGED, PUB_WRITTEN, PUB_MOVED = 0, 1, 2


class _PublishArgs(ctypes.Structure):
    """struct talb_publish_args (datapath/talb_parts.c), field for field."""

    _fields_ = [("fd", ctypes.c_int32), ("capacity", ctypes.c_int32),
                ("rkeys", _V), ("rvalues", _V), ("wkeys", _V), ("wvalues", _V),
                ("count", ctypes.c_int32), ("pad", ctypes.c_int32),
                ("gid", _V), ("n_ports", _V), ("ifx", _V), ("pcm", _V), ("thr", _V),
                ("slot", _V), ("last_pcm", _V), ("last_thr", _V), ("have", _V),
                ("parts", _V), ("changed", _V), ("status", _V)]


class Publication:
    """GroupPublisher's batched publication in one C call (``talb_publish``):
    read the groups map, make the TaLB parts, write the changed groups. Uses
    ``parts``'s per-slot state (slot k: group k); ``read`` and ``write``:
    the publisher's datapath.bpf_syscall.MapBatch buffers."""

    def __init__(self, lib, parts: "TalbParts", fd: int, read, write,
                 groups: list[tuple[int, list[int]]]):
        m, count = TALB_MAX_GROUP_PORTS, len(groups)
        cap = max(1, count)
        self.count = count
        # inputs of its own; the per-slot state (last fixed PCMs, parts) shared
        # with ``parts.refresh``, which numbers slots the same way
        self._pcm, self._thr = (ctypes.c_double * (cap * m))(), (ctypes.c_uint32 * cap)()
        self._status = (ctypes.c_uint8 * cap)()
        gid = (ctypes.c_uint32 * cap)(*(g for g, _ in groups))
        n_ports = (ctypes.c_uint8 * cap)(*(len(p) for _g, p in groups))
        ifx = (ctypes.c_uint32 * (cap * m))()
        for k, (_g, members) in enumerate(groups):
            ifx[k * m:k * m + len(members)] = members
        slot, changed = (ctypes.c_int32 * cap)(), (ctypes.c_uint8 * cap)()
        self._keep = (gid, n_ports, ifx, slot, changed)
        addr = ctypes.addressof
        self._args = _PublishArgs(
            fd=fd, capacity=read.capacity, rkeys=addr(read.keys), rvalues=addr(read.values),
            wkeys=addr(write.keys), wvalues=addr(write.values), count=count, gid=addr(gid),
            n_ports=addr(n_ports), ifx=addr(ifx), pcm=addr(self._pcm), thr=addr(self._thr),
            slot=addr(slot), last_pcm=addr(parts._last_pcm), last_thr=addr(parts._last_thr),
            have=addr(parts._have), parts=addr(parts._parts), changed=addr(changed),
            status=addr(self._status))
        self._fn, self._ref = lib.talb_publish, ctypes.byref(self._args)
        self._thr_set: list = []   # the thresholds in _thr (set only when they change)

    def __call__(self, pcms, thresholds) -> tuple[int, list[int]]:
        """``pcms[k]``: group k's P_i in group order (its port count, checked
        by the caller); ``thresholds[k]``: its fixed-point S. (talb_publish's
        result, each group's status)."""
        dbl, m = self._pcm, TALB_MAX_GROUP_PORTS
        for k, pcm in enumerate(pcms):
            dbl[k * m:k * m + len(pcm)] = pcm
        return self.buffered(thresholds)

    @property
    def pcm_buffer(self):
        """The P_i input: group k's P_i in group order at doubles
        ``k * TALB_MAX_GROUP_PORTS ...`` (a ctypes array), for a caller that
        fills it itself and then calls :meth:`buffered`."""
        return self._pcm

    def buffered(self, thresholds) -> tuple[int, list[int]]:
        """talb_publish on the P_i already in :attr:`pcm_buffer`;
        ``thresholds[k]``: group k's fixed-point S."""
        if thresholds != self._thr_set:
            self._thr[:len(thresholds)] = thresholds
            self._thr_set = list(thresholds)
        rc = self._fn(self._ref)
        return rc, self._status[:self.count]


class TalbParts:
    """``compute(n_ports, fixed, thresholds)`` for up to ``capacity`` groups at a
    time: the buffers are made once, per user (not thread-safe)."""

    def __init__(self, lib: ctypes.CDLL, capacity: int):
        self._fn = lib.talb_parts
        self.capacity = capacity
        self._n = (ctypes.c_uint8 * max(1, capacity))()
        self._pcm = (ctypes.c_uint16 * (max(1, capacity) * TALB_MAX_GROUP_PORTS))()
        self._s = (ctypes.c_uint32 * max(1, capacity))()
        self._out = (ctypes.c_uint8 * (max(1, capacity) * PART_SIZE))()
        self._out_view = memoryview(self._out).cast("B")
        self._call = lambda count: self._fn(count, self._n, self._pcm, self._s, self._out)
        # refresh(): per call, up to ``capacity`` groups' slots and float PCMs; per
        # slot, the fixed PCMs and threshold last seen and the TaLB part
        cap, m = max(1, capacity), TALB_MAX_GROUP_PORTS
        self._slot = (ctypes.c_int32 * cap)()
        self._dbl = (ctypes.c_double * (cap * m))()
        self._changed = (ctypes.c_uint8 * cap)()
        self._last_pcm = (ctypes.c_uint16 * (cap * m))()
        self._last_thr = (ctypes.c_uint32 * cap)()
        self._have = (ctypes.c_uint8 * cap)()
        self._parts = (ctypes.c_uint8 * (cap * PART_SIZE))()
        self._parts_view = memoryview(self._parts).cast("B")
        refresh = lib.talb_refresh
        args = (self._slot, self._n, self._dbl, self._s, self._last_pcm, self._last_thr,
                self._have, self._parts, self._changed)
        self._refresh = lambda count: refresh(count, *args)
        self._lib = lib

    def forget(self) -> None:
        """Forget every slot's last fixed PCMs: the next refresh remakes each part."""
        ctypes.memset(self._have, 0, ctypes.sizeof(self._have))

    def publication(self, fd: int, read, write, groups) -> Publication | None:
        """talb_publish for ``groups`` ([(group id, ports)], at most
        ``capacity``), None if they do not fit these buffers."""
        if len(groups) > self.capacity or any(not 0 < len(p) <= TALB_MAX_GROUP_PORTS
                                              for _g, p in groups):
            return None
        return Publication(self._lib, self, fd, read, write, groups)

    def compute(self, groups: list[tuple[list[int], int]]) -> list[bytes]:
        """``groups``: (fixed PCMs in group order, fixed threshold) each; their
        TaLB parts, as ``datapath.control._talb_part`` packs them."""
        count = len(groups)
        if count > self.capacity:
            raise ValueError(f"{count} groups, buffers for {self.capacity}")
        pcm, ns, ss, m = self._pcm, self._n, self._s, TALB_MAX_GROUP_PORTS
        for k, (fixed, s) in enumerate(groups):
            ns[k] = len(fixed)
            pcm[k * m:k * m + len(fixed)] = fixed
            ss[k] = s
        rc = self._call(count)
        if rc != 0:
            k = -1 - rc
            raise ValueError(f"talb_parts: group {k} cannot be encoded: {groups[k]}")
        view = self._out_view
        return [bytes(view[k * PART_SIZE:(k + 1) * PART_SIZE]) for k in range(count)]


    def refresh(self, groups: list[tuple[int, list[float], int]]) -> list[bytes | None] | None:
        """``groups``: (slot 0..capacity-1, P_i floats in group order, fixed
        threshold) each. Per group its new TaLB part, or None where its fixed
        PCMs and threshold are those last given for its slot (the part made
        then still holds). None when a P_i is NaN (nothing changed: the
        caller's Python path raises for it)."""
        count = len(groups)
        if count > self.capacity:
            raise ValueError(f"{count} groups, buffers for {self.capacity}")
        slot, ns, dbl, ss, m = self._slot, self._n, self._dbl, self._s, TALB_MAX_GROUP_PORTS
        for k, (where, pcm, s) in enumerate(groups):
            if not 0 <= where < self.capacity:
                raise ValueError(f"slot {where} outside 0..{self.capacity - 1}")
            slot[k] = where
            ns[k] = len(pcm)
            dbl[k * m:k * m + len(pcm)] = pcm
            ss[k] = s
        rc = self._refresh(count)
        if rc == -1000000:
            return None
        if rc != 0:
            k = -1 - rc
            raise ValueError(f"talb_refresh: group {k} cannot be encoded: {groups[k]}")
        view, changed = self._parts_view, self._changed
        return [bytes(view[w * PART_SIZE:(w + 1) * PART_SIZE]) if changed[k] else None
                for k, (w, _p, _s) in enumerate(groups)]


def parts(capacity: int) -> TalbParts | None:
    """A :class:`TalbParts` for ``capacity`` groups, or None when the C code
    cannot be had (common.native: no compiler, ``TALB_NATIVE=off``): use the
    Python path."""
    lib = native.load(SOURCE, _DEFINES)
    if lib is None:
        return None
    if not getattr(lib, "_talb_checked", False):
        lib.talb_parts.restype = ctypes.c_int
        lib.talb_parts.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_void_p]
        lib.talb_publish.restype = ctypes.c_int
        lib.talb_publish.argtypes = [ctypes.c_void_p]
        if lib.talb_group_size() != GROUP_SIZE:
            raise RuntimeError(f"talb_parts.c: group of {lib.talb_group_size()} bytes, "
                               f"expected {GROUP_SIZE}")
        lib.talb_refresh.restype = ctypes.c_int
        lib.talb_refresh.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 9
        if lib.talb_part_size() != PART_SIZE:
            raise RuntimeError(f"talb_parts.c: part of {lib.talb_part_size()} bytes, "
                               f"expected {PART_SIZE}")
        lib._talb_checked = True
    return TalbParts(lib, capacity)
