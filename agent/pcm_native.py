"""agent/pcm.py's per-window maths in C (agent/pcm_window.c), for
:class:`agent.pcm.PortModel` and :class:`agent.pcm.GroupPcm`: the same
floats, bit for bit (tests/test_pcm.py compares the two), ~5x cheaper for
64 ports; and :class:`SwitchWindowC`, a whole switch window -- the counter
read (one BPF_MAP_LOOKUP_BATCH), the sums over CPUs, the deltas, the model
and the groups' PCMs -- in one call. Built by common.native; None where it
cannot be (the callers then compute in Python)."""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

from common import native

SOURCE = Path(__file__).resolve().parent / "pcm_window.c"
#: counters at or above this (in absolute value) go the Python way: below
#: it, bytes * 8 and every int -> double conversion are exact, as the C
#: code's reading of Python's int arithmetic needs
EXACT = 2 ** 50

_D, _Q, _I, _U = ctypes.c_double, ctypes.c_int64, ctypes.c_int32, ctypes.c_uint64
_P = ctypes.POINTER


def _lib():
    lib = native.load(SOURCE)
    if lib is not None and not getattr(lib, "_talb_typed", False):
        lib.talb_port_model.restype = ctypes.c_int
        lib.talb_port_model.argtypes = [ctypes.c_int, _P(_Q), _P(_Q), _D, _P(_D), _P(_D),
                                        _P(_D), _D, _P(_D), _P(_D)]
        lib.talb_window.restype = ctypes.c_int
        lib.talb_window.argtypes = [ctypes.c_void_p]
        lib.talb_group_pcm.restype = None
        lib.talb_group_pcm.argtypes = [ctypes.c_int, _P(_I), _P(_I), _P(_D), _P(_D), _D, _D,
                                       _P(_D), _P(_D)]
        lib._talb_typed = True
    return lib


class PortModelC:
    """``(utils, delays) = model(tx_bytes, tx_packets, dt_s)`` for a fixed
    list of ports; the caller checks lengths and :data:`EXACT`."""

    def __init__(self, lib, capacities: Sequence[float], max_waits: Sequence[float],
                 idle_delays: Sequence[float], full_frame: int):
        n = self.n = len(capacities)
        self._b, self._k = (_Q * n)(), (_Q * n)()
        self._u, self._d = (_D * n)(), (_D * n)()
        fixed = ((_D * n)(*capacities), (_D * n)(*max_waits), (_D * n)(*idle_delays),
                 float(full_frame), self._u, self._d)
        fn = lib.talb_port_model
        b, k = self._b, self._k
        self._call = lambda dt: fn(n, b, k, dt, *fixed)

    def __call__(self, tx_bytes, tx_packets,
                 dt_s: float) -> tuple[list[float], list[float]] | None:
        """None: a port counted packets of no byte (the Python code raises)."""
        self._b[:] = tx_bytes
        self._k[:] = tx_packets
        if self._call(dt_s):
            return None
        return self._u[:], self._d[:]


class GroupPcmC:
    """Eq. 5 for fixed groups (positions into per-port lists of ``n_ports``)."""

    def __init__(self, lib, groups: Sequence[Sequence[int]], n_ports: int, w1: float,
                 w2: float):
        flat = [i for g in groups for i in g]
        starts = [0]
        for g in groups:
            starts.append(starts[-1] + len(g))
        self.n_ports = n_ports
        self._spans = list(zip(starts, starts[1:]))
        m = max(1, len(flat))
        self._u, self._d = (_D * n_ports)(), (_D * n_ports)()
        self._out, scratch = (_D * m)(), (_D * m)()
        args = (len(groups), (_I * len(starts))(*starts), (_I * m)(*flat), self._u, self._d,
                float(w1), float(w2), self._out, scratch)
        fn = lib.talb_group_pcm
        self._call = lambda: fn(*args)
        self._m = len(flat)

    def __call__(self, utils, delays) -> list[list[float]]:
        self._u[:] = utils
        self._d[:] = delays
        self._call()
        flat = self._out[:self._m]
        return [flat[s:e] for s, e in self._spans]


def port_model(capacities, max_waits, idle_delays, full_frame) -> PortModelC | None:
    lib = _lib()
    return None if lib is None or not capacities else PortModelC(
        lib, capacities, max_waits, idle_delays, full_frame)


def group_pcm(groups, n_ports: int, w1: float, w2: float) -> GroupPcmC | None:
    """None without the C code, or when a group names a port outside
    ``0..n_ports-1`` (the Python code raises for it)."""
    lib = _lib()
    if lib is None or n_ports <= 0 or any(not 0 <= i < n_ports for g in groups for i in g):
        return None
    return GroupPcmC(lib, groups, n_ports, w1, w2)


_V = ctypes.c_void_p
#: SwitchWindowC.read's results (talb_window's return values)
MATHS_DONE, NO_WINDOW, PYTHON_MATHS = 0, 1, 2


class _WindowArgs(ctypes.Structure):
    """struct talb_window_args (agent/pcm_window.c), field for field."""

    _fields_ = [("fd", _I), ("n_entries", _I), ("ncpu", _I), ("fields", _I),
                ("keys", _V), ("values", _V),
                ("n", _I), ("fb", _I), ("fk", _I), ("have_prev", _I),
                ("pid", _V), ("tot_b", _V), ("tot_k", _V), ("prev_b", _V), ("prev_k", _V),
                ("d_b", _V), ("d_k", _V),
                ("dt", _D), ("full", _D), ("w1", _D), ("w2", _D),
                ("cap", _V), ("max_wait", _V), ("idle", _V), ("util", _V), ("delay", _V),
                ("groups", _I), ("pad", _I), ("start", _V), ("idx", _V),
                ("pcm", _V), ("scratch", _V), ("n_out", _I), ("pad2", _I), ("out_idx", _V),
                ("out", _V)]


class SwitchWindowC:
    """One switch's window in one C call (``talb_window``): what
    statsread.PerCpuArrayReader.columns, window.ColumnWindow.advance,
    PortModel.window and (``groups`` given) GroupPcm.window do in Python,
    the same numbers (tests/test_agent_window_native.py compares them).

    ``map_fd``: the per-CPU ``port_stats`` array, ``n_entries`` of it read,
    ``fields`` u64 per value per CPU; port i is entry ``pids[i]``, its
    bytes field ``fb`` and packets field ``fk``. ``groups``: each group's
    ports as positions (None: no group maths, the caller's). The fd must
    stay open while this is used."""

    def __init__(self, lib, map_fd: int, n_entries: int, ncpu: int, fields: int,
                 pids: Sequence[int], fb: int, fk: int, capacities: Sequence[float],
                 max_waits: Sequence[float], idle_delays: Sequence[float], full_frame: int,
                 groups: Sequence[Sequence[int]] | None, w1: float, w2: float):
        n = self.n = len(pids)
        self._keys = (ctypes.c_uint32 * n_entries)()
        self._values = (_U * (n_entries * ncpu * fields))()
        self._tot_b, self._tot_k = (_U * n)(), (_U * n)()
        self._prev_b, self._prev_k = (_U * n)(), (_U * n)()
        self._d_b, self._d_k = (_U * n)(), (_U * n)()
        self._u, self._d = (_D * n)(), (_D * n)()
        self._with_groups = groups is not None
        groups = list(groups or ())
        flat = [i for g in groups for i in g]
        starts = [0]
        for g in groups:
            starts.append(starts[-1] + len(g))
        m = max(1, len(flat))
        self._pcm, scratch = (_D * m)(), (_D * m)()
        self._spans = list(zip(starts, starts[1:]))
        self._m = len(flat)
        self._keep = [(_I * n)(*pids), (_D * n)(*capacities), (_D * n)(*max_waits),
                      (_D * n)(*idle_delays), (_I * len(starts))(*starts),
                      (_I * m)(*(flat or [0])), scratch]
        pid_arr, caps, waits, idles, start_arr, idx_arr, _ = self._keep
        addr = ctypes.addressof
        args = self._args = _WindowArgs(
            fd=map_fd, n_entries=n_entries, ncpu=ncpu, fields=fields, keys=addr(self._keys),
            values=addr(self._values), n=n, fb=fb, fk=fk, pid=addr(pid_arr),
            tot_b=addr(self._tot_b), tot_k=addr(self._tot_k), prev_b=addr(self._prev_b),
            prev_k=addr(self._prev_k), d_b=addr(self._d_b), d_k=addr(self._d_k),
            full=float(full_frame), w1=float(w1), w2=float(w2), cap=addr(caps),
            max_wait=addr(waits), idle=addr(idles), util=addr(self._u), delay=addr(self._d),
            groups=len(groups), start=addr(start_arr), idx=addr(idx_arr),
            pcm=addr(self._pcm), scratch=addr(scratch))
        fn, ref = lib.talb_window, ctypes.byref(args)

        def view(arr, fmt):   # a copy as a list is one tolist() of a cast view
            return memoryview(arr).cast("B").cast(fmt)
        self._views = [view(a, "Q") for a in (self._tot_b, self._tot_k, self._d_b, self._d_k)]
        self._views += [view(self._u, "d"), view(self._d, "d"), view(self._pcm, "d")]

        def call(have_prev: bool, dt: float) -> int:
            args.have_prev, args.dt = have_prev, dt
            return fn(ref)
        self._call = call
        self._t: float | None = None
        self.dt = 0.0                        # the last window's length (read)
        self._out = None                     # gather's buffers, kept alive

    def carry_over(self, other: "SwitchWindowC") -> None:
        """Take ``other``'s last reading (same ports; other groups): the
        next window is measured from it."""
        if other.n != self.n:
            raise ValueError(f"carry_over: {other.n} ports, this window has {self.n}")
        for name in ("_prev_b", "_prev_k"):
            ctypes.memmove(getattr(self, name), getattr(other, name), ctypes.sizeof(_U) * self.n)
        self._t = other._t

    def gather(self, out, idx: Sequence[int]) -> None:
        """After every window whose maths is done (:meth:`read` gives
        :data:`MATHS_DONE`), ``out[i]`` = PCM entry ``idx[i]`` of the flat
        list (-1: ``out[i]`` left alone): the publication's input buffer
        (datapath.control.GroupPublisher.input_buffer) filled by the C call,
        no Python list between. ``out``: a ctypes double array (kept alive
        here) of at least ``len(idx)`` entries."""
        if not self._with_groups:
            raise ValueError("gather: this window computes no group PCMs")
        if len(idx) > len(out) or any(not -1 <= i < self._m for i in idx):
            raise ValueError(f"gather: {len(idx)} entries into {len(out)}, each -1 or an "
                             f"entry below {self._m}")
        arr = (_I * max(1, len(idx)))(*(idx or [-1]))
        self._out = (out, arr)
        args = self._args
        args.n_out, args.out_idx, args.out = len(idx), ctypes.addressof(arr), ctypes.addressof(out)

    def read(self, t: float) -> int:
        """Read at monotonic time ``t`` (the window's length: :attr:`dt`):
        :data:`NO_WINDOW` (the first reading, or a clock that did not move),
        :data:`PYTHON_MATHS` (the maths must go the Python way: a huge
        counter, packets of no byte; the deltas are in the buffers) or
        :data:`MATHS_DONE` (U, E[W] and the groups' PCMs in the buffers; see
        :meth:`result`, :meth:`frozen`). OSError if the read fails."""
        last, self._t = self._t, t
        dt = 0.0 if last is None else t - last
        rc = self._call(last is not None, dt)
        if rc < 0:
            self._t = last
            raise OSError(-rc, f"BPF_MAP_LOOKUP_BATCH port_stats: {os.strerror(-rc)}")
        self.dt = dt
        return rc

    def frozen(self) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The last reading after :data:`MATHS_DONE`, as bytes (one copy
        each, no Python number made): totals of bytes and packets (u64), U
        and E[W] (double) per port, the flat PCMs (double); :meth:`thaw`
        turns them into :meth:`result`'s lists."""
        tb, tk, _db, _dk, u, d, pcm = self._views
        return bytes(tb), bytes(tk), bytes(u), bytes(d), bytes(pcm)

    def thaw(self, frozen) -> tuple[list, list, list, list[list[float]] | None]:
        """``frozen`` (:meth:`frozen`) as ``(totals, utils, delays, pcms)``,
        the lists :meth:`result` gives for that window."""
        tb, tk, u, d, pcm = (memoryview(b).cast(f).tolist() for b, f in zip(frozen, "QQddd"))
        pcms = [pcm[s:e] for s, e in self._spans] if self._with_groups else None
        return [tb, tk], u, d, pcms

    def result(self, rc: int):
        """The last reading (:meth:`read` gave ``rc``) as ``(totals, window)``.
        ``totals``: [bytes list, packets list]; ``window``: None (no window),
        or ``(dt, deltas, utils, delays, pcms)``: either the maths done
        (deltas None: not needed) or, where it must go the Python way, the
        deltas ([bytes list, packets list]) with utils/delays/pcms None;
        pcms is None without ``groups``."""
        tb, tk, db, dk, u, d, pcm = self._views
        totals = [tb.tolist(), tk.tolist()]
        if rc == NO_WINDOW:
            return totals, None
        if rc == PYTHON_MATHS:
            return totals, (self.dt, [db.tolist(), dk.tolist()], None, None, None)
        pcms = None
        if self._with_groups:
            flat = pcm.tolist()
            pcms = [flat[s:e] for s, e in self._spans]
        return totals, (self.dt, None, u.tolist(), d.tolist(), pcms)

    def __call__(self, t: float):
        """:meth:`read` then :meth:`result`. OSError if the read fails."""
        return self.result(self.read(t))


def switch_window(map_fd: int, n_entries: int, ncpu: int, fields: int, pids, fb: int,
                  fk: int, capacities, max_waits, idle_delays, full_frame, groups,
                  w1: float, w2: float) -> SwitchWindowC | None:
    """None without the C code or for inputs the C code does not take
    (no port; a group position outside the ports)."""
    lib = _lib()
    n = len(pids)
    if lib is None or n == 0 or any(not 0 <= p < n_entries for p in pids) or (
            groups and any(not 0 <= i < n for g in groups for i in g)):
        return None
    return SwitchWindowC(lib, map_fd, n_entries, ncpu, fields, pids, fb, fk, capacities,
                         max_waits, idle_delays, full_frame, groups, w1, w2)
