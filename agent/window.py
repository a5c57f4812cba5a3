"""Per-window deltas of the data path's cumulative counters.

The kernel's counters only grow (u64, per CPU, summed by the reader), so a
window's traffic is the difference between two readings, over the real
time between them (monotonic clock): a late window is measured over its
true length, never assumed to be T. A counter that goes backwards means
the map was recreated (data path reloaded): the new value is the traffic
since then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence


@dataclass(frozen=True)
class Window:
    dt_s: float                                   # real length of the window
    deltas: dict[Hashable, tuple[int, ...]]       # key -> per-field increase


class CounterWindow:
    """Keeps the previous reading; :meth:`advance` returns the window since it."""

    def __init__(self):
        self._t: float | None = None
        self._last: dict[Hashable, tuple[int, ...]] = {}

    @property
    def primed(self) -> bool:
        return self._t is not None

    def reset(self) -> None:
        self._t = None
        self._last = {}

    def advance(self, t: float, values: Mapping[Hashable, Sequence[int]]) -> Window | None:
        """Record a reading taken at monotonic time ``t``; the window since the
        previous reading, or None for the first reading (or a clock that did
        not move). A key new since the last reading has no window yet (zeros)."""
        values = {k: tuple(v) for k, v in values.items()}
        last, last_t = self._last, self._t
        self._t, self._last = t, values
        if last_t is None or t <= last_t:
            return None
        deltas = {}
        for k, now in values.items():
            before = last.get(k, now)
            deltas[k] = tuple(n - b if n >= b else n for n, b in zip(now, before))
        return Window(t - last_t, deltas)


class ColumnWindow:
    """:class:`CounterWindow` for readings given as columns: one list per
    counter, one entry per key, keys in a fixed order (the agent's ports).
    :meth:`advance` returns ``(dt, [delta column, ...])`` -- the same
    deltas CounterWindow gives, without a dict or tuple per key -- or None."""

    def __init__(self):
        self._t: float | None = None
        self._keys: tuple = ()
        self._last: list[list[int]] = []

    def reset(self) -> None:
        self._t, self._keys, self._last = None, (), []

    def advance(self, t: float, keys: tuple,
                columns: list[list[int]]) -> tuple[float, list[list[int]]] | None:
        """Record the reading ``columns`` (``columns[f][i]``: counter f of
        ``keys[i]``) taken at monotonic time ``t``. A key new since the last
        reading has no window yet (zeros)."""
        last, last_t, last_keys = self._last, self._t, self._keys
        self._t, self._keys, self._last = t, keys, columns
        if last_t is None or t <= last_t:
            return None
        if keys != last_keys:  # keys changed (ports rebound): line the old reading up
            where = {k: i for i, k in enumerate(last_keys)}
            last = [[before[where[k]] if k in where else now[j] for j, k in enumerate(keys)]
                    for before, now in zip(last, columns)]
        return t - last_t, [[0] * len(now) if now == before else
                            [n - b if n >= b else n for n, b in zip(now, before)]
                            for now, before in zip(columns, last)]
