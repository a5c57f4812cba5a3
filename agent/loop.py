"""The PCM loop: every window T, for every managed switch, follow link state,
read counters, compute and publish PCMs.

Timing runs on the monotonic clock against a fixed schedule
``t0 + k*T``: a late window does not shift the ones after it. Each window
reports its duration and its lag (start - scheduled start); a window that
takes longer than T counts as slow. When the loop falls a whole period or
more behind, the slots it can no longer meet are counted as missed and the
next window starts at once on the grid. Nothing is lost by missing a slot:
U and E[W] are computed over the real time between two readings.

Between windows the loop waits in ``select()`` on the switches' link
notification sockets: a port going down or up is handled at once (its
groups rewritten in a few ms), not at the next window.
"""
from __future__ import annotations

import logging
import select
import threading
import time
from typing import Callable, Protocol

from agent.config import AgentConfig
from agent.control import sweep_tensors
from agent.switch import SwitchMonitor, SwitchReading

log = logging.getLogger("talb.agent")

SWEEP_INTERVAL_S = 1.0  # idle tensor entries (agent/control.py sweep_tensors)


class LoopObserver(Protocol):
    def window_done(self, duration_s: float, lag_s: float, slow: bool, missed: int) -> None: ...

    def window_failed(self, exc: BaseException) -> None: ...


class Routing(Protocol):
    def sync(self, watchers: dict, maps: dict) -> list[str]: ...


class Agent:
    """Runs the loop over a set of :class:`SwitchMonitor` (bound to their ports)."""

    def __init__(self, monitors: dict[str, SwitchMonitor], routing: Routing,
                 config: AgentConfig, observer: LoopObserver | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.monitors, self.routing, self.config = monitors, routing, config
        self.observer = observer
        self.clock = clock
        self._next_stats = self._next_sweep = 0.0
        self._last_error = None

    @property
    def latest(self) -> dict[str, SwitchReading]:
        return {name: m.latest for name, m in self.monitors.items() if m.latest is not None}

    def sync_links(self) -> list[str]:
        """Make the installed groups follow link state; the switches reprogrammed."""
        done = self.routing.sync({n: m.links for n, m in self.monitors.items()},
                                 {n: m.maps for n, m in self.monitors.items()})
        for name in done:
            self.monitors[name].refresh_groups()
        if done:
            down = sorted(f"{n}:{port}" for n, m in self.monitors.items() for port in m.down_ports())
            log.info("link state changed (down: %s): reprogrammed %s",
                     ", ".join(down) or "none", ", ".join(done))
        return done

    def follow_links(self) -> None:
        """Apply pending link notifications; regroup if a port changed."""
        changed = False
        for m in self.monitors.values():
            changed |= m.poll_links()
        if changed:
            self.sync_links()

    def _wait(self, deadline: float, stop: threading.Event) -> bool:
        """Sleep until ``deadline``, handling link changes meanwhile; False if stopped."""
        watchers = [m.links for m in self.monitors.values()]
        while not stop.is_set():
            wait = deadline - self.clock()
            if wait <= 0:
                return True
            # A signal (SIGTERM) interrupts nothing here: the wait is at most one
            # window, and the loop checks ``stop`` after it.
            ready, _, _ = select.select(watchers, [], [], wait)
            if ready:
                try:
                    self.follow_links()
                except Exception as exc:
                    self._report(exc)
        return False

    def step(self, now: float) -> None:
        """One window."""
        self.follow_links()
        measured = self.config.pcm_delay == "measured"
        stats_due = now >= self._next_stats
        if stats_due:
            self._next_stats = now + self.config.stats_interval_s
        sweep_due = now >= self._next_sweep
        if sweep_due:
            self._next_sweep = now + SWEEP_INTERVAL_S
        for m in self.monitors.values():
            if stats_due:
                m.housekeeping(read_qdiscs=not measured)
            m.window(now, read_qdiscs=measured)
            if sweep_due and m.latest.scheme == "talb":
                sweep_tensors(m.maps)

    def run(self, stop: threading.Event, tick: Callable[[], None] | None = None,
            tick_interval_s: float = 1.0) -> None:
        """Windows until ``stop`` is set; ``tick`` every ``tick_interval_s``
        (between windows, on the loop's thread)."""
        period = self.config.window_s
        t0 = self.clock()
        k = 0
        next_tick = t0 + tick_interval_s
        while not stop.is_set():
            deadline = t0 + k * period
            if not self._wait(deadline, stop):
                break
            start = self.clock()
            try:
                self.step(start)
            except Exception as exc:  # one bad window must not stop the agent
                self._report(exc)
            end = self.clock()
            k += 1
            missed = max(0, int((end - (t0 + k * period)) // period))
            k += missed
            if self.observer is not None:
                self.observer.window_done(end - start, start - deadline, end - start > period,
                                          missed)
            if tick is not None and end >= next_tick:
                next_tick = end + tick_interval_s
                tick()

    def _report(self, exc: Exception) -> None:
        if self.observer is not None:
            self.observer.window_failed(exc)
        msg = f"{type(exc).__name__}: {exc}"
        if msg != self._last_error:  # once per distinct error, not 200 times a second
            log.exception("window failed: %s", msg)
        self._last_error = msg

    def close(self) -> None:
        for m in self.monitors.values():
            m.close()
