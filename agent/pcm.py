"""Port congestion metric (PCM), docs/design.md §6 / paper Eq. 1-5: pure maths, no I/O.

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

from agent import pcm_native
from agent.pcm_native import EXACT

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


class PortModel:
    """Eq. 1 and Eq. 3/4 for a fixed list of ports, a whole window at once:
    :meth:`window` gives what :func:`utilization` and :func:`md1_delay`
    give port by port, the same floats (the same operations in the same
    order; tests/test_pcm.py holds them equal), without a PortLoad per port.
    An idle port (no byte, no packet) costs a lookup."""

    def __init__(self, capacities_bps: Sequence[float], max_waits_s: Sequence[float],
                 native: bool = True):
        if len(capacities_bps) != len(max_waits_s):
            raise ValueError(f"{len(capacities_bps)} capacities but {len(max_waits_s)} buffers")
        for c in capacities_bps:
            if c <= 0:
                raise ValueError(f"capacity must be > 0, got {c} bit/s")
        for w in max_waits_s:
            if w < 0:
                raise ValueError(f"max_wait_s must be >= 0, got {w}")
        self.capacities = list(capacities_bps)
        self.max_waits = list(max_waits_s)
        # md1_delay of an idle port: a full frame's service time
        self.idle_delays = [1.0 / (c / (8 * FULL_FRAME_BYTES)) for c in self.capacities]
        self._idle = ([0.0] * len(self.capacities), self.idle_delays)
        # the same loop in C (agent/pcm_native.py) when it can be built; False: Python only
        self._native = pcm_native.port_model(self.capacities, self.max_waits, self.idle_delays,
                                             FULL_FRAME_BYTES) if native else None

    def window(self, tx_bytes: Sequence[int], tx_packets: Sequence[int],
               dt_s: float) -> tuple[list[float], list[float]]:
        """(U, E[W]) of every port for one window of ``dt_s`` seconds."""
        if dt_s <= 0:
            raise ValueError(f"capacity and window must be > 0, got window {dt_s} s")
        if not any(tx_bytes) and not any(tx_packets) and len(tx_bytes) == len(self.capacities):
            return self._idle  # every port idle (the same lists every time: do not modify)
        c_model = self._native
        if (c_model is not None and len(tx_bytes) == len(tx_packets) == c_model.n
                and -EXACT < min(tx_bytes) and max(tx_bytes) < EXACT
                and -EXACT < min(tx_packets) and max(tx_packets) < EXACT):
            out = c_model(tx_bytes, tx_packets, dt_s)
            if out is not None:
                return out
        utils, delays = [], []
        u_append, d_append = utils.append, delays.append
        for b, k, c, max_wait, idle in zip(tx_bytes, tx_packets, self.capacities,
                                           self.max_waits, self.idle_delays):
            if not b and not k:  # idle: U = 0, E[W] = one full frame's service time
                u_append(0.0)
                d_append(idle)
                continue
            rho = b * 8 / (c * dt_s)                 # load_ratio
            u_append(min(1.0, rho))                  # utilization
            service_pps = c / (8 * (b / k if k else FULL_FRAME_BYTES))
            service = 1.0 / service_pps
            if rho >= 1.0:
                d_append(max_wait + service)
                continue
            lam = rho * service_pps
            if lam == 0.0:
                d_append(service)
            else:
                d_append(min(rho * rho / (2.0 * (1.0 - rho) * lam), max_wait) + service)
        return utils, delays


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
    _check_weights(w1, w2)
    if any(math.isnan(x) for x in (*utils, *delays)):
        raise ValueError("NaN utilisation or delay")
    return _group_pcm(utils, delays, w1, w2)


def _check_weights(w1: float, w2: float) -> None:
    if w1 < 0 or w2 < 0 or w1 + w2 <= 0:
        raise ValueError(f"weights must be >= 0 with W1 + W2 > 0, got W1={w1}, W2={w2}")


def _group_pcm(utils: Sequence[float], delays: Sequence[float], w1: float,
               w2: float) -> list[float]:
    u, e = _minmax(utils), _minmax(delays)
    # min() absorbs the last-bit rounding of the weighted mean.
    return [min(1.0, (w1 * a + w2 * b) / (w1 + w2)) for a, b in zip(u, e)]


class GroupPcm:
    """Eq. 5 for a fixed set of groups, window after window: ``groups[k]``
    lists group k's ports as positions in the per-port lists :meth:`window`
    takes. Each group's P_i are :func:`group_pcm`'s; a group whose inputs
    are those of the last window is not recomputed (its list is returned
    again, the same object: idle ports read the same every window)."""

    def __init__(self, groups: Sequence[Sequence[int]], w1: float = 1.0, w2: float = 1.0,
                 n_ports: int | None = None, native: bool = True):
        _check_weights(w1, w2)
        self.groups = [tuple(g) for g in groups]
        self.w1, self.w2 = w1, w2
        # ``n_ports`` given (the per-port lists' length): windows with lists of
        # that length computed in C (agent/pcm_native.py) when it can be built
        self._native = pcm_native.group_pcm(self.groups, n_ports, w1, w2) \
            if native and n_ports is not None else None
        self._last: list[tuple | None] = [None] * len(self.groups)  # (utils, delays, pcm)
        self._inputs: tuple | None = None  # the last window's (utils, delays, result)

    def window(self, utils: Sequence[float], delays: Sequence[float]) -> list[list[float]]:
        if len(utils) != len(delays):
            raise ValueError(f"{len(utils)} utilisations but {len(delays)} delays")
        # a sum of values >= 0 is NaN only if one of them is
        if math.isnan(sum(utils)) or math.isnan(sum(delays)):
            raise ValueError("NaN utilisation or delay")
        if self._inputs is not None and self._inputs[0] is utils and self._inputs[1] is delays:
            return self._inputs[2]  # the same lists (PortModel's idle ones): nothing to do
        c_pcm = self._native
        if c_pcm is not None and len(utils) == c_pcm.n_ports:
            out = c_pcm(utils, delays)
            self._inputs = (utils, delays, out)
            return out
        out, last, w1, w2 = [], self._last, self.w1, self.w2
        for k, idx in enumerate(self.groups):
            u = [utils[i] for i in idx]
            e = [delays[i] for i in idx]
            before = last[k]
            if before is not None and before[0] == u and before[1] == e:
                out.append(before[2])
                continue
            pcm = _group_pcm(u, e, w1, w2) if idx else []
            last[k] = (u, e, pcm)
            out.append(pcm)
        self._inputs = (utils, delays, out)
        return out


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
