"""The PCM loop: every window T, for every managed switch, follow link state,
read counters, compute and publish PCMs.

Timing runs on the monotonic clock against a fixed schedule
``t0 + k*T``: a late window does not shift the ones after it. Each window
reports its duration and its lag (start - scheduled start); a window that
takes longer than T counts as slow. When the loop falls a whole period or
more behind, the slots it can no longer meet are counted as missed and the
next window starts at once on the grid. Nothing is lost by missing a slot:
U and E[W] are computed over the real time between two readings.

Each switch's work in a window is isolated: a switch that fails is counted
(``LoopObserver.switch_failed``) and logged, rate-limited, and the others
are still read and published.

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
from agent.switch import SwitchMonitor, SwitchReading
from datapath.control import sweep_tensors

log = logging.getLogger("talb.agent")

SWEEP_INTERVAL_S = 1.0  # idle tensor entries (datapath/control.py sweep_tensors)
ERROR_LOG_INTERVAL_S = 10.0  # a persistent fault is logged again at most this often


class LoopObserver(Protocol):
    def window_done(self, duration_s: float, lag_s: float, slow: bool, missed: int) -> None: ...

    def window_failed(self, exc: BaseException) -> None: ...

    def switch_failed(self, switch: str, exc: BaseException) -> None: ...


class Routing(Protocol):
    def sync(self, watchers: dict, maps: dict,
             on_error: Callable[[str, Exception], None] | None = None) -> list[str]: ...


class _ErrorLog:
    """Logs a failure when it is new (another error than the last one of its
    source) or, while it persists, once every ``interval`` seconds with the
    number of repeats in between: a switch failing 200 times a second must
    not flood the log."""

    def __init__(self, clock: Callable[[], float], interval: float = ERROR_LOG_INTERVAL_S):
        self.clock, self.interval = clock, interval
        self._last: dict[str, tuple[str, float, int]] = {}  # source -> (msg, logged at, repeats)

    def report(self, source: str, what: str, exc: BaseException) -> None:
        msg = f"{type(exc).__name__}: {exc}"
        now = self.clock()
        last = self._last.get(source)
        if last is not None and last[0] == msg and now - last[1] < self.interval:
            self._last[source] = (msg, last[1], last[2] + 1)
            return
        repeats = f" (failed {last[2]} more times since it was last logged)" \
            if last is not None and last[0] == msg and last[2] else ""
        log.error("%s failed: %s%s", what, msg, repeats, exc_info=exc)
        self._last[source] = (msg, now, 0)


class Agent:
    """Runs the loop over a set of :class:`SwitchMonitor` (bound to their ports)."""

    def __init__(self, monitors: dict[str, SwitchMonitor], routing: Routing,
                 config: AgentConfig, observer: LoopObserver | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.monitors, self.routing, self.config = monitors, routing, config
        self.observer = observer
        self.clock = clock
        self._next_stats = self._next_sweep = 0.0
        self._errors = _ErrorLog(clock)
        #: the wait's last select() found no link notification pending (step skips its poll)
        self._links_checked = False

    @property
    def latest(self) -> dict[str, SwitchReading]:
        return {name: m.latest for name, m in self.monitors.items() if m.latest is not None}

    def sync_links(self) -> list[str]:
        """Make the installed groups follow link state; the switches reprogrammed.
        A switch that cannot be reprogrammed is reported; the others are."""
        done = self.routing.sync({n: m.links for n, m in self.monitors.items()},
                                 {n: m.maps for n, m in self.monitors.items()},
                                 on_error=self._switch_failed)
        for name in done:
            self._on_switch(name, self.monitors[name].refresh_groups)
        if done:
            down = sorted(f"{n}:{port}" for n, m in self.monitors.items() for port in m.down_ports())
            log.info("link state changed (down: %s): reprogrammed %s",
                     ", ".join(down) or "none", ", ".join(done))
        return done

    def follow_links(self) -> None:
        """Apply pending link notifications; regroup if a port changed."""
        changed = False
        for name, m in self.monitors.items():
            changed |= bool(self._on_switch(name, m.poll_links))
        if changed:
            self.sync_links()

    def _wait(self, deadline: float, stop: threading.Event, watchers: list) -> bool:
        """Sleep until ``deadline``, handling link changes meanwhile; False if stopped.

        It normally returns right after a ``select()`` that found no notification
        pending -- the one that slept until the deadline, or one with a zero
        timeout when the loop is late -- so the window that follows need not
        poll the sockets again (:meth:`step`). A notification arriving during
        that window is handled by the next wait, as soon as the window ends."""
        while not stop.is_set():
            wait = max(0.0, deadline - self.clock())
            # A signal (SIGTERM) interrupts nothing here: the wait is at most one
            # window, and the loop checks ``stop`` after it.
            ready, _, _ = select.select(watchers, [], [], wait)
            if not ready:
                if wait == 0.0 or self.clock() >= deadline:
                    self._links_checked = True
                    return True
                continue
            try:
                self.follow_links()
            except Exception as exc:
                self._report(exc)
            if self.clock() >= deadline:
                # a socket that stays readable (a fault follow_links reports)
                # must not hold the window back: it runs, and polls them itself
                return True
        return False

    def step(self, now: float) -> None:
        """One window. Each switch's work is isolated: one that fails (its
        maps gone, its namespace deleted, a bad reading) is reported and the
        others are still read and published. Pending link notifications are
        applied first, unless the loop's wait has just found none (a
        ``recv`` per switch saved every window)."""
        checked, self._links_checked = self._links_checked, False
        if not checked:
            try:
                self.follow_links()
            except Exception as exc:  # routing as a whole: the windows still run
                self._report(exc)
        measured = self.config.pcm_delay == "measured"
        stats_due = now >= self._next_stats
        if stats_due:
            self._next_stats = now + self.config.stats_interval_s
        sweep_due = now >= self._next_sweep
        if sweep_due:
            self._next_sweep = now + SWEEP_INTERVAL_S
        for name, m in self.monitors.items():
            self._on_switch(name, self._switch_window, m, now, measured, stats_due, sweep_due)

    @staticmethod
    def _switch_window(m: SwitchMonitor, now: float, measured: bool, stats_due: bool,
                       sweep_due: bool) -> None:
        if stats_due:
            m.housekeeping(read_qdiscs=not measured)
        m.window(now, read_qdiscs=measured)
        if sweep_due and m.latest.scheme == "talb":
            sweep_tensors(m.maps)

    def _on_switch(self, name: str, fn: Callable, *args):
        """``fn(*args)`` for switch ``name``; an error is reported, not raised (None)."""
        try:
            return fn(*args)
        except Exception as exc:
            self._switch_failed(name, exc)
            return None

    def _switch_failed(self, name: str, exc: Exception) -> None:
        if self.observer is not None:
            self.observer.switch_failed(name, exc)
        self._errors.report(f"switch:{name}", f"switch {name}", exc)

    def run(self, stop: threading.Event, tick: Callable[[], None] | None = None,
            tick_interval_s: float = 1.0) -> None:
        """Windows until ``stop`` is set; ``tick`` every ``tick_interval_s``
        (between windows, on the loop's thread)."""
        period = self.config.window_s
        # the link sockets' descriptors, asked once (not by select() at every wait)
        watchers = [m.links.fileno() for m in self.monitors.values()]
        t0 = self.clock()
        k = 0
        next_tick = t0 + tick_interval_s
        while not stop.is_set():
            deadline = t0 + k * period
            if not self._wait(deadline, stop, watchers):
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
        self._errors.report("window", "window", exc)

    def close(self) -> None:
        for m in self.monitors.values():
            m.close()
