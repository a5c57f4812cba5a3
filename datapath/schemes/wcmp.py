"""Model of ``bpf/include/talb/schemes/wcmp.h``: WCMP (Zhou et al., EuroSys
2014), ECMP with each port weighted by its link rate.

A flow's hash (ECMP's, :func:`datapath.schemes.ecmp.flow_hash`) modulo the
usable ports' total weight picks the port whose cumulative weight range
holds it -- the paper's replicated group table, walked instead of stored;
when every usable port weighs alike, hash mod k over them (ECMP's own
index with every port up). Weights: the port's rate (the ``port_rate``
map's bytes/s, as ``datapath.control.set_port_rates`` writes it) in units
of 2^RATE_SHIFT bytes/s rounded up, capped; 0 for a port that is down.
"""
from __future__ import annotations

from typing import Collection, Mapping, Sequence

from common.c_constants import SCHEME_HEADERS, parse_constants
from datapath.schemes.ecmp import flow_hash
from datapath.schemes.spec import Scheme

__all__ = ["RATE_SHIFT", "WEIGHT_MAX", "weight", "weights", "wcmp_select", "wcmp_index"]

_H = parse_constants(SCHEME_HEADERS["wcmp"].path)     # its header's own #defines
#: a weight's unit, 2^RATE_SHIFT bytes/s (TALB_WCMP_RATE_SHIFT)
RATE_SHIFT = _H["TALB_WCMP_RATE_SHIFT"]
#: a port's weight at most (TALB_WCMP_WEIGHT_MAX)
WEIGHT_MAX = _H["TALB_WCMP_WEIGHT_MAX"]


def weight(bytes_per_s: int) -> int:
    """A port's weight from its rate in bytes/s (0: unknown)."""
    unit = 1 << RATE_SHIFT
    return min(-(-int(bytes_per_s) // unit), WEIGHT_MAX)


def weights(ifindexes: Sequence[int], up: Collection[int] | None,
            rates: Mapping[int, int]) -> list[int]:
    """Each port's weight: its rate's (``rates``: ifindex -> bytes/s, absent
    0) if it is usable (``up``: the usable ifindexes, None: all), else 0."""
    return [weight(rates.get(x, 0)) if up is None or x in up else 0 for x in ifindexes]


def wcmp_select(ifindexes: Sequence[int], up: Collection[int] | None,
                rates: Mapping[int, int], h: int) -> int:
    """Index of the port a flow of hash ``h`` takes (0 when none is usable)."""
    usable = [i for i, x in enumerate(ifindexes) if up is None or x in up]
    if not usable:
        return 0
    w = weights(ifindexes, up, rates)
    total = sum(w)
    if total == 0 or len({w[i] for i in usable}) == 1:
        return usable[h % len(usable)]
    slot, cum = h % total, 0
    for i, wi in enumerate(w):
        cum += wi
        if slot < cum:
            return i
    raise AssertionError("unreachable: slot < total")


def wcmp_index(ifindexes: Sequence[int], up: Collection[int] | None, rates: Mapping[int, int],
               saddr, daddr, sport: int, dport: int, proto: int, seed: int) -> int:
    """:func:`wcmp_select` for a flow's 5-tuple and the switch's hash seed."""
    return wcmp_select(ifindexes, up, rates, flow_hash(saddr, daddr, sport, dport, proto, seed))


SCHEME = Scheme(
    name="wcmp", id=7, title="WCMP",
    description="ECMP weighted by each port's link rate: a flow keeps one path, "
                "flows split in proportion to the rates",
    paper="Zhou et al., EuroSys 2014",
    decides="every switch, per flow",
    params=(),
    xdp=True, xdp_why="a hash of the 5-tuple and the ports' rates",
    not_a_fallback=None,
    decisions=(("decision_wcmp", "weighted_hash"),),
    clock=False, inline=False, model=wcmp_index)
