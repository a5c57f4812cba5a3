"""Switch buffers and ECN thresholds on the same time scale as the bytes
(issue 36; docs/experiments.md, "Regime").

A run scales its tensors so that communication takes ``time_scale`` times
as long as at the target rate (workload/scaling.py). A buffer is a time
too -- how long the port takes to drain it -- so the testbed's buffer is
the target's drain time, times the time scale, at the testbed port's rate:

    bytes = target_bytes * 8 / target_bps  *  time_scale  *  port_bps / 8

The paper's 512 KB per port at 100 Gbit/s (TaLB sec. V-A) drains in
41.9 us; at fig10's time scale (115.8) and a 25 Mbit/s uplink that is
15.2 KB, ten full frames, against the topology's 160 KB (51 ms).

Two modes, ``BUFFERS``:

* ``deep``: the topology's queue, as every run before issue 36.
* ``scaled``: each switch port's queue from the target buffer and the
  run's time scale, split evenly over the port's bands (the bands share
  the port's buffer: TaLB's "shared buffer pool", sec. III, Fig. 7); a
  FIFO port (queueing ``fifo``) holds what its bands would together.

The floor, ``FLOOR_FRAMES`` full frames per band: a bfifo drops every packet
longer than its limit, so a band below one frame carries no full-size
packet at all; and an ACK-clocked TCP sender (delayed ACKs: one ACK per
two segments, each releasing two or three back to back) needs room for
such a pair on top of the queue it keeps standing -- with ECN that
standing queue is K (at least ``K_FLOOR_FRAMES``), so a band holds K plus a
two-frame burst: 4 frames. Below it the queue drops the pairs TCP
cannot help sending, whatever the congestion.

ECN's threshold K (DCTCP, Alizadeh et al., SIGCOMM 2010, sec. 3.4:
K > C x RTT / 7) is derived the same way: the target's K is C x RTT / 7 at
100 Gbit/s with the paper's RTT (2 us per link, sec. V-A: 4 links each
way, 16 us), i.e. ``TARGET_K_S`` = 2.29 us of drain, time-scaled at the
port's rate, floored at ``K_FLOOR_FRAMES`` frames (a threshold under one
frame marks the second packet of every back-to-back pair even with no
standing queue; two frames is the smallest that marks only a queue that
outlasts a pair). Every band (and a FIFO port's one queue) marks at the
port's K.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from common.excerpt import shown

from .params import Queue

BUFFERS = ("deep", "scaled")

#: The paper's per-port buffer and link rate (TaLB sec. V-A)
TARGET_BUFFER_BYTES = 512 * 1024
TARGET_BUFFER_BPS = 100e9
#: The paper's RTT: 2 us per link, host-leaf-spine-leaf-host and back (sec. V-A)
TARGET_RTT_S = 8 * 2e-6
#: DCTCP's K as a drain time: C x RTT / 7 bytes take RTT / 7 at C
TARGET_K_S = TARGET_RTT_S / 7
#: Floors in full frames (switch_mtu + the Ethernet header), per band: see above
FLOOR_FRAMES = 4
K_FLOOR_FRAMES = 2

ETH_HLEN = 14


def frame_bytes(switch_mtu: int) -> int:
    """A full frame on a switch port, as the bfifo counts it."""
    return switch_mtu + ETH_HLEN


def check_time_scale(time_scale) -> float:
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or \
            not time_scale > 0:
        raise ValueError(f"time_scale: a positive number (the run's, workload/scaling.py), "
                         f"got {shown(time_scale)}")
    return float(time_scale)


def scaled_bytes(target_s: float, time_scale: float, port_bps: int) -> int:
    """Bytes a port of ``port_bps`` drains in ``target_s`` x ``time_scale``."""
    return int(target_s * check_time_scale(time_scale) * port_bps / 8)


@dataclass(frozen=True)
class PortBuffer:
    """One switch port's effective queue under a buffer mode: ``per_band``
    bytes in each of ``bands`` bands (one band for a FIFO port), ``k`` the
    ECN threshold of each, and what the scaling asked before the floors."""

    port_bps: int
    bands: int
    per_band: int
    k: int
    scaled_port: int | None = None      # the time-scaled port buffer, before the floor
    scaled_k: int | None = None         # the time-scaled K, before the floor

    @property
    def total(self) -> int:
        return self.per_band * self.bands

    def to_dict(self) -> dict:
        return dataclasses.asdict(self) | {"total": self.total}


def port_buffer(queue: Queue, queueing: str, buffer: str, port_bps: int, switch_mtu: int,
                time_scale: float | None) -> PortBuffer:
    """The effective queue of one switch port: the topology's ``queue``
    under ``queueing`` (``bands``: its bands; ``fifo``: one band of all
    their bytes) and ``buffer`` (``deep``: its limit; ``scaled``: from the
    target buffer and ``time_scale``). K: the time-scaled DCTCP K (floored)
    in both modes, so that a deep run with ECN marks at the same K."""
    if buffer not in BUFFERS:
        raise ValueError(f"--buffer: one of {', '.join(BUFFERS)}, got {shown(buffer)}")
    frame = frame_bytes(switch_mtu)
    n = len(queue.bands)
    k_scaled = scaled_bytes(TARGET_K_S, time_scale, port_bps) if time_scale else None
    k = max(k_scaled or 0, K_FLOOR_FRAMES * frame)
    if buffer == "deep":
        per_band = queue.limit
        scaled_port = None
    else:
        if time_scale is None:
            raise ValueError("--buffer scaled: needs the run's time scale (a training run's "
                             "scaling); background-only runs have none")
        scaled_port = scaled_bytes(TARGET_BUFFER_BYTES * 8 / TARGET_BUFFER_BPS, time_scale,
                                   port_bps)
        per_band = max(scaled_port // n, FLOOR_FRAMES * frame)
    if queueing == "fifo":
        return PortBuffer(port_bps, 1, per_band * n, k, scaled_port, k_scaled)
    return PortBuffer(port_bps, n, per_band, k, scaled_port, k_scaled)


def queue_with(queue: Queue, queueing: str, buf: PortBuffer) -> Queue:
    """The topology's queue as installed with ``buf``'s bytes: its bands
    (or one FIFO band), each ``buf.per_band`` bytes."""
    bands = queue.bands if queueing == "bands" else (1,)
    return dataclasses.replace(queue, limit=buf.per_band, bands=bands)
