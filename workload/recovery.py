"""Recovery time of a training run from a fault (docs/faults.md).

Definition. t_f is the moment the fault is injected (just before its
command runs); times are CLOCK_MONOTONIC, the clock of the tensors' records.

* Reference: the tensors of measured iterations (warm-up excluded)
  delivered before t_f. Each (kind, layer) class -- push, pull, reduce,
  gather of one layer: messages of one size -- gives a reference FCT, its
  median (the median of every tensor before the fault when the class has
  fewer than ``MIN_CLASS_SAMPLES``). A tensor's *slowdown* is its FCT over
  its class's reference.
* After the fault: every tensor not delivered at t_f (in flight then or
  sent later), binned by its completion time into windows of ``WINDOW_S``
  from t_f on. A window is *degraded* when the median slowdown of the
  tensors completing in it exceeds ``1 + TOLERANCE``, or when nothing
  completes in it while a tensor is in flight throughout (a stall). The
  window of the run's last completion, cut short by the end of the run, is
  left out.
* The fault's *episode*: every window up to the fault's undoing (t_r; a
  control, ``none``, is given the duration of the fault it controls), and
  after it every degraded window that follows the fault's end, or a degraded
  window of the episode, by fewer than ``SETTLE_WINDOWS`` healthy windows.
  ``SETTLE_WINDOWS`` healthy windows in a row after t_r (0.5 s) end it.
* **Recovery time = end of the episode's last degraded window - t_f** (0
  when none is degraded): from the fault to the first moment after which the
  typical tensor again completes within 2x its pre-fault FCT and goes on
  doing so for ``SETTLE_WINDOWS`` windows. ``last_degraded_s``: the end of
  the last degraded window anywhere after t_f (``settle_windows=None`` makes
  that the recovery time: the first fault table's rule).

Why an episode: a degraded window seconds after the training is back to
speed is the background's, not the fault's -- on the 4-spine design a
window of 14 tensors at 7.5 s, 5.5 s after a blackhole was undone and 4.5 s
after every tensor was back at speed, read 4.6x (a run before the design's
matrix, seed 99); the rule "last degraded window anywhere" read it as 8 s
of recovery.

The median, not the tail, decides: with background load the tail of the
FCTs comes and goes with the heavy-tailed background flows (an undisturbed
run has tensors at several times its pre-fault p99), while the median moves
when the fabric as a whole is slower or stalled. The tail is reported
beside it: ``slow`` (tensors after the fault over 2x their class's pre-fault
p99), ``last_slow_s`` (the last of them completed this long after the
fault), ``worst_slowdown`` (the largest FCT over its class's p99), and the
fault's stragglers: ``stuck`` (the slow ones sent before the fault was
undone) and ``last_stuck_s`` (when the last of them completed, after t_f):
a tensor held up by the fault (a retransmission backoff) while the others
went on at speed shows here, not in the median. A tensor never delivered makes the recovery
infinite (None). ``after_restore_s`` is the part after the fault was
undone. ``--fault none@AT`` gives the same numbers for an undisturbed run:
the noise floor.
"""
from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict

TOLERANCE = 1.0
#: 0.25 s: on the 4-spine design (docs/faults.md) ~70 tensors complete in a
#: window and the slowest class's median FCT (~90 ms) is well inside one, so a
#: window's median means something and a stall of a quarter second registers.
#: The first fault table (2 spines, AlexNet) used 0.5 s (its design passes it).
WINDOW_S = 0.25
#: a window is degraded when the median slowdown over SPAN_S centred on it exceeds
#: THRESHOLD (or when it is a stall). Calibrated on results/fig10's 150 undisturbed
#: runs (the same fabric and training, every scheme, loads 0.1-0.4; a pseudo-fault
#: 0.8 s into the measured iterations), before the fault matrix was read: 0.25 s
#: windows alone, 2x, flagged 6.8% of windows and 24% of runs, 3x still 2.5% and 8%
#: (a window catching a push burst reads 2x); a 0.5 s span at 3x flagged 5 of 803
#: windows (0.6%), 4 of 150 runs; no 0.25 s window was a stall in any of them.
THRESHOLD = 3.0
SPAN_S = 0.5
#: healthy windows in a row after the fault's end that end its episode (0.5 s)
SETTLE_WINDOWS = 2
MIN_CLASS_SAMPLES = 5

def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]

def _references(before: list[dict], stat) -> tuple[float, dict]:
    overall = stat([t["fct_s"] for t in before])
    by_class = defaultdict(list)
    for t in before:
        by_class[(t["kind"], t["layer"])].append(t["fct_s"])
    return overall, {k: stat(v) for k, v in by_class.items() if len(v) >= MIN_CLASS_SAMPLES}

def _episode(degraded: list[int], t_restore_ns: int | None, t_fault_ns: int, w_ns: int,
             settle: int) -> list[int]:
    """The degraded windows of the fault's episode: those starting before the
    fault is undone, then each one that follows the last (or the undoing)
    by fewer than ``settle`` healthy windows."""
    restore = 0 if t_restore_ns is None else max(0, t_restore_ns - t_fault_ns)
    first_after = -(-restore // w_ns)   # the first window starting at or after the undoing
    out = [b for b in degraded if b < first_after]
    last = first_after - 1              # the fault's own windows count as "not healthy"
    for b in degraded:
        if b < first_after:
            continue
        if b - last - 1 >= settle:
            break
        out.append(b)
        last = b
    return out


def recovery(tensors: list[dict], t_fault_ns: int, t_restore_ns: int | None = None,
             tolerance: float = TOLERANCE, window_s: float = WINDOW_S,
             settle_windows: int | None = SETTLE_WINDOWS, threshold: float = THRESHOLD,
             span_s: float | None = SPAN_S) -> dict:
    """The recovery from a fault at ``t_fault_ns``, undone at ``t_restore_ns``
    (None: at once), of a run's tensor records (workload/measure.join_tensors:
    kind, layer, warmup, censored, t_start_ns, t_done_ns, fct_s)."""
    before = [t for t in tensors if not t["warmup"] and not t["censored"]
              and t["t_done_ns"] < t_fault_ns]
    after = [t for t in tensors if t["censored"] or t["t_done_ns"] >= t_fault_ns]
    out = {"tolerance": tolerance, "window_s": window_s, "settle_windows": settle_windows,
           "threshold": threshold, "span_s": span_s,
           "before": len(before),
           "after": len(after), "degraded_windows": None, "slow": None, "lost": None,
           "recovery_s": None, "after_restore_s": None, "worst_slowdown": None,
           "reference_median_s": None, "worst_window": None, "stalled_windows": None,
           "last_degraded_s": None}
    if not before:
        out["reason"] = "no measured tensor was delivered before the fault"
        return out
    med_all, med = _references(before, statistics.median)
    p99_all, p99 = _references(before, _p99)
    out["reference_median_s"] = med_all
    out["reference_p99_s"] = p99_all
    lost = sum(1 for t in after if t["censored"])
    done = [t for t in after if not t["censored"]]
    out["lost"] = lost
    out["slow"] = sum(1 for t in done if t["fct_s"] > (1 + tolerance) *
                      p99.get((t["kind"], t["layer"]), p99_all))
    slow_done = [t["t_done_ns"] for t in done if t["fct_s"] > (1 + tolerance) *
                 p99.get((t["kind"], t["layer"]), p99_all)]
    out["last_slow_s"] = (max(slow_done) - t_fault_ns) / 1e9 if slow_done else 0.0
    out["worst_slowdown"] = max((t["fct_s"] / p99.get((t["kind"], t["layer"]), p99_all)
                                 for t in done), default=None)
    # the fault's stragglers: slow tensors sent before it was undone (in flight through it)
    t_end = t_fault_ns if t_restore_ns is None else max(t_fault_ns, t_restore_ns)
    stuck = [t["t_done_ns"] for t in done if t["t_start_ns"] < t_end and t["fct_s"] >
             (1 + tolerance) * p99.get((t["kind"], t["layer"]), p99_all)]
    out["stuck"] = len(stuck)
    out["last_stuck_s"] = (max(stuck) - t_fault_ns) / 1e9 if stuck else 0.0
    if lost:
        out["reason"] = f"{lost} tensors after the fault were never delivered"
        return out
    w_ns = int(window_s * 1e9)
    span_ns = int((span_s if span_s is not None else window_s) * 1e9)
    bins = defaultdict(list)
    timed = sorted((t["t_done_ns"], t["fct_s"] / med.get((t["kind"], t["layer"]), med_all))
                   for t in done)
    for t_done, slowdown in timed:
        bins[(t_done - t_fault_ns) // w_ns].append(slowdown)
    # The window of the run's last completion is cut short by the end of the
    # run and holds the stragglers of the last iteration: left out.
    last_bin = max(bins, default=-1)
    done_at = [x[0] for x in timed]
    degraded, stalled, medians = [], 0, []
    for b in range(last_bin):
        lo, hi = t_fault_ns + b * w_ns, t_fault_ns + (b + 1) * w_ns
        if b in bins:
            # the median over a span centred on the window (from the fault on, up
            # to the cut-short last window): more tensors than one window holds
            mid = (lo + hi) // 2
            a = bisect.bisect_left(done_at, max(t_fault_ns, mid - span_ns // 2))
            z = bisect.bisect_left(done_at, min(t_fault_ns + last_bin * w_ns, mid + span_ns // 2))
            medians.append(statistics.median(x[1] for x in timed[a:max(z, a + 1)]))
            if medians[-1] > threshold:
                degraded.append(b)
        elif any(t["t_start_ns"] <= lo and t["t_done_ns"] >= hi for t in done):
            degraded.append(b)       # a stall: in flight, nothing delivered
            stalled += 1
    # how close the windows came to the threshold: the noise floor's margin
    out["worst_window"] = max(medians, default=None)
    out["last_degraded_s"] = (degraded[-1] + 1) * window_s if degraded else 0.0
    if settle_windows is not None:
        degraded = _episode(degraded, t_restore_ns, t_fault_ns, w_ns, settle_windows)
        stalled = sum(1 for b in degraded if b not in bins)
    out["degraded_windows"] = len(degraded)
    out["stalled_windows"] = stalled
    end = t_fault_ns + (degraded[-1] + 1) * w_ns if degraded else None
    out["recovery_s"] = 0.0 if end is None else (end - t_fault_ns) / 1e9
    if t_restore_ns is not None:
        out["after_restore_s"] = 0.0 if end is None else max(0.0, (end - t_restore_ns) / 1e9)
    return out
