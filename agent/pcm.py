"""Port congestion metric (PCM), DESIGN §6 / paper Eq. 1-5: pure maths, no I/O.

Per port and window (the agent measures the window's real length ``dt``):

* Eq. 1  ``U = N*M / (C*T)``: bytes sent in the window over what the link
  could carry. The program counts a packet when it hands it to the egress
  queue, i.e. at *arrival*: offered load above capacity (what the queue
  then drops) would read U > 1, so U is clamped to [0, 1]. The unclamped
  ratio is rho, the M/D/1 load below.
* Eq. 3/4  M/D/1 (deterministic service, Var[V] = 0), rates in packets/s:
  ``E[W] = rho^2 / (2 (1 - rho) lambda) + 1/C``, ``rho = lambda / C``.
  The mean packet size of the window converts C to packets/s (a full
  frame when the port was idle). The model diverges as rho -> 1 and has no
  steady state for rho >= 1, but a real port has a finite drop-tail buffer:
  no packet waits longer than the buffer takes to drain. So the wait is
  capped at ``max_wait`` (buffer bytes * 8 / C bits): near and above
  rho = 1 the model reports a full buffer, which is what the port does.
* measured: ``backlog_bytes * 8 / C``, the wait a packet arriving now sees.
* Eq. 5  min-max over the ports of one forwarding group:
  ``P_i = (W1 (U_i-Umin)/(Umax-Umin) + W2 (E_i-Emin)/(Emax-Emin)) / (W1+W2)``,
  a term is 0 where its max == min.
* CASE 2 weights: the residuals ``1 - P_i``, normalised to sum 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

#: A full Ethernet frame at MTU 1500 (HTB counts the 14-byte header): the
#: packet size that converts C to packets/s when a window saw no packet.
FULL_FRAME_BYTES = 1514


@dataclass(frozen=True)
class PortLoad:
    """What one port did in one window."""

    tx_bytes: int
    tx_packets: int
    capacity_bps: float
    dt_s: float


def load_ratio(load: PortLoad) -> float:
    """rho: offered bits over the bits the link can carry in the window
    (Eq. 1 before clamping; equal to lambda/C in packets)."""
    if load.capacity_bps <= 0 or load.dt_s <= 0:
        raise ValueError(f"capacity and window must be > 0, got {load.capacity_bps} bit/s, "
                         f"{load.dt_s} s")
    return load.tx_bytes * 8 / (load.capacity_bps * load.dt_s)


def utilization(load: PortLoad) -> float:
    """Eq. 1, clamped to [0, 1] (see the module docstring)."""
    return min(1.0, load_ratio(load))


def md1_delay(load: PortLoad, max_wait_s: float) -> float:
    """Eq. 3/4: mean sojourn time (queueing + service) of the M/D/1 model,
    seconds; the queueing part capped at ``max_wait_s`` (the buffer's drain
    time), which also covers rho >= 1."""
    if max_wait_s < 0:
        raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
    frame = load.tx_bytes / load.tx_packets if load.tx_packets else FULL_FRAME_BYTES
    service_pps = load.capacity_bps / (8 * frame)
    rho = load_ratio(load)
    service = 1.0 / service_pps
    if rho >= 1.0:
        return max_wait_s + service
    lam = rho * service_pps
    if lam == 0.0:
        return service
    return min(rho * rho / (2.0 * (1.0 - rho) * lam), max_wait_s) + service


def measured_delay(backlog_bytes: int, capacity_bps: float) -> float:
    """The queue's drain time: what a packet arriving now waits, seconds."""
    if capacity_bps <= 0:
        raise ValueError(f"capacity must be > 0, got {capacity_bps}")
    return backlog_bytes * 8 / capacity_bps


def _minmax(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi == lo:  # Eq. 5: the term is 0 when max == min
        return [0.0] * len(values)
    span = hi - lo
    return [(v - lo) / span for v in values]


def group_pcm(utils: Sequence[float], delays: Sequence[float],
              w1: float = 1.0, w2: float = 1.0) -> list[float]:
    """Eq. 5 for the ports of one group, in group order; each P_i in [0, 1]."""
    if len(utils) != len(delays):
        raise ValueError(f"{len(utils)} utilisations but {len(delays)} delays")
    if not utils:
        return []
    if w1 < 0 or w2 < 0 or w1 + w2 <= 0:
        raise ValueError(f"weights must be >= 0 with W1 + W2 > 0, got W1={w1}, W2={w2}")
    if any(math.isnan(x) for x in (*utils, *delays)):
        raise ValueError("NaN utilisation or delay")
    u, e = _minmax(utils), _minmax(delays)
    # min() absorbs the last-bit rounding of the weighted mean.
    return [min(1.0, (w1 * a + w2 * b) / (w1 + w2)) for a, b in zip(u, e)]


def wrr_weights(pcm: Sequence[float]) -> list[float]:
    """CASE 2 weights: residuals ``1 - P_i`` normalised to sum 1. Every port
    at P = 1 (no residual anywhere): equal weights, none starves. (What the
    data path gets is datapath.schemes.talb.fixed_wrr_weights, in fixed point.)"""
    resid = [1.0 - min(1.0, max(0.0, p)) for p in pcm]
    total = sum(resid)
    if total <= 0:
        return [1.0 / len(pcm)] * len(pcm) if pcm else []
    return [r / total for r in resid]


def pcm_order(pcm: Sequence[float]) -> list[int]:
    """Group positions by PCM, lowest first; ties keep group order."""
    return sorted(range(len(pcm)), key=lambda i: (pcm[i], i))
