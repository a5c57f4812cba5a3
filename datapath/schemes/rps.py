"""Model of ``bpf/include/talb/schemes/rps.h``: Random Packet Spraying."""
from __future__ import annotations

from typing import Collection, Sequence

from datapath.schemes.pick import Rng, pick_up, up_mask


def rps_select(ifindexes: Sequence[int], up: Collection[int] | None, rng: Rng) -> int:
    """Index of the port a packet takes: uniform among the usable ones."""
    return pick_up(up_mask(ifindexes, up), rng)
