"""A model of the switches' ECN marking (bpf/include/talb/ecn.h): the
phantom queue of one port, band by band, and the marking decision. Tests
hold the data path to it packet by packet (tests/test_ecn_switch.py); the
live test compares both with the real qdisc backlog.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.c_constants import CONST, MAX_BANDS

NS_PER_S = 1_000_000_000
DT_MAX_NS = CONST["TALB_QUEUE_DT_MAX_NS"]
ROUNDS = CONST["TALB_ECN_DRAIN_ROUNDS"]
SHARE_SHIFT = 16                # ecn.h TALB_ECN_SHARE_SHIFT: fixed-point bytes per weight
BAND_BASE = CONST["TALB_HTB_MAJOR"] | CONST["TALB_BAND_MINOR_BASE"]


@dataclass
class ModelEcnPort:
    """struct ecn_port: rate (bytes/s), K, one band's limit, burst, weights."""

    bytes_per_s: int
    k_bytes: int
    limit_bytes: int
    burst_bytes: int
    weight: list[int]

    def band_of(self, priority: int) -> int:
        b = (priority - BAND_BASE) & 0xFFFFFFFF
        w = self.weight + [0] * (MAX_BANDS - len(self.weight))
        return b if b < MAX_BANDS and w[b] else 0


@dataclass
class ModelEcnQueue:
    """struct ecn_queue: each band's bytes and the bucket's credit at last_ns."""

    last_ns: int = 0
    credit: int = 0
    bytes: list[int] = field(default_factory=lambda: [0] * MAX_BANDS)

    def advance(self, p: ModelEcnPort, now: int) -> None:
        dt = now - self.last_ns
        self.last_ns = now
        if dt <= 0:
            return
        dt = min(dt, DT_MAX_NS)        # long idle: t covers any backlog
        w = p.weight + [0] * (MAX_BANDS - len(p.weight))
        t = dt * p.bytes_per_s // NS_PER_S
        for _ in range(ROUNDS):
            wsum = sum(w[b] for b in range(MAX_BANDS) if self.bytes[b])
            if not wsum or not t:
                break
            per_w = (t << SHARE_SHIFT) // wsum
            used = 0
            for b in range(MAX_BANDS):
                if not self.bytes[b] or not w[b]:
                    continue
                d = min(self.bytes[b], (per_w * w[b]) >> SHARE_SHIFT)
                self.bytes[b] -= d
                used += d
            if not used:
                break
            t -= used
        if any(self.bytes):
            return
        self.credit = min(self.credit + t, p.burst_bytes)

    def arrive(self, p: ModelEcnPort, priority: int, length: int, now: int) -> bool:
        """A packet into the port at ``now``: whether it found its band above K."""
        self.advance(p, now)
        band = p.band_of(priority)
        above = self.bytes[band] > p.k_bytes
        if not any(self.bytes) and self.credit >= length:
            self.credit -= length
        else:
            nb = self.bytes[band] + length
            self.bytes[band] = min(nb, p.limit_bytes) if p.limit_bytes else nb
        return above
