"""agent/pcm.py's per-window maths in C (agent/pcm_window.c), for
:class:`agent.pcm.PortModel` and :class:`agent.pcm.GroupPcm`: the same
floats, bit for bit (tests/test_pcm.py compares the two), ~5x cheaper for
64 ports. Built by common.native; None where it cannot be (the callers then
compute in Python)."""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Sequence

from common import native

SOURCE = Path(__file__).resolve().parent / "pcm_window.c"
#: counters at or above this (in absolute value) go the Python way: below
#: it, bytes * 8 and every int -> double conversion are exact, as the C
#: code's reading of Python's int arithmetic needs
EXACT = 2 ** 50

_D, _Q, _I = ctypes.c_double, ctypes.c_int64, ctypes.c_int32
_P = ctypes.POINTER


def _lib():
    lib = native.load(SOURCE)
    if lib is not None and not getattr(lib, "_talb_typed", False):
        lib.talb_port_model.restype = ctypes.c_int
        lib.talb_port_model.argtypes = [ctypes.c_int, _P(_Q), _P(_Q), _D, _P(_D), _P(_D),
                                        _P(_D), _D, _P(_D), _P(_D)]
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
