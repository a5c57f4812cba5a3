"""Model of ``bpf/include/talb/schemes/pick.h``: usable ports and the random
draw the randomised schemes share.

The data path draws from a per-CPU xorshift32 state (the ``rng`` map); a
model given the state read before a packet replays the same draws. A
:class:`Rng` is that state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

_M32 = 0xFFFFFFFF


def xorshift32(x: int) -> int:
    """One step of the data path's generator (talb_xorshift32)."""
    x ^= (x << 13) & _M32
    x ^= x >> 17
    x ^= (x << 5) & _M32
    return x & _M32


@dataclass
class Rng:
    """One CPU's generator state (never 0: the data path seeds a 0 itself)."""

    state: int

    def next(self) -> int:
        if self.state == 0:
            raise ValueError("Rng state 0: the data path would seed it from "
                             "bpf_get_prandom_u32, which no model can replay")
        self.state = xorshift32(self.state)
        return self.state


def up_mask(ifindexes: Sequence[int], up: Collection[int] | None) -> int:
    """Bit i set: the group's port i is usable (``up`` None: all are)."""
    return sum(1 << i for i, x in enumerate(ifindexes) if up is None or x in up)


def pick_up(mask: int, rng: Rng) -> int:
    """A uniformly random set bit of ``mask``: the (draw mod k)-th lowest of
    its k bits (talb_pick_up); 0, without a draw, for an empty mask."""
    bits = [i for i in range(8) if mask >> i & 1]
    if not bits:
        return 0
    return bits[rng.next() % len(bits)]


def port_index(ifindexes: Sequence[int], ifindex: int) -> int:
    """Index of ``ifindex`` in the group, or -1 (talb_port_index: the last
    one when a group repeats a port to weight it)."""
    found = [i for i, x in enumerate(ifindexes) if x == ifindex]
    return found[-1] if found else -1
