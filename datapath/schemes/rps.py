"""Model of ``bpf/include/talb/schemes/rps.h``: Random Packet Spraying."""
from __future__ import annotations

from typing import Collection, Sequence

from datapath.schemes.pick import Rng, pick_up, up_mask
from datapath.schemes.spec import Scheme


def rps_select(ifindexes: Sequence[int], up: Collection[int] | None, rng: Rng) -> int:
    """Index of the port a packet takes: uniform among the usable ones."""
    return pick_up(up_mask(ifindexes, up), rng)


SCHEME = Scheme(
    name="rps", id=1, title="RPS",
    description="Random Packet Spraying: a random usable port for every packet",
    paper="Dixit et al., INFOCOM 2013",
    decides="every switch, per packet",
    params=(),
    xdp=True, xdp_why="a random port per packet",
    not_a_fallback=None,
    decisions=(("decision_rps", "random"),),
    clock=False, inline=False, model=rps_select)
