"""Model of ``bpf/include/talb/schemes/conga.h``: CONGA (Alizadeh et al.,
SIGCOMM 2014) leaf to leaf -- the DRE, its quantised metric, the source
leaf's choice for a new flowlet, and the two tables the option feeds. The
flowlet step is LetFlow's (``bpf/include/talb/schemes/flowlet.h``, modelled
by letflow.py's flowlet_keep and flowlet_start). Also its control plane: the
leaf table a switch is given when installed, and reading the two tables."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Mapping, Sequence

from common.c_constants import CONST, TALB_MAX_GROUP_PORTS
from datapath.schemes.letflow import FLOWLET_PARAM, flowlet_keep, flowlet_start, signed64
from datapath.schemes.pick import Rng, up_mask
from datapath.schemes.spec import Param, Scheme, SwitchView

DEFAULT_DRE_US = CONST["TALB_DEFAULT_CONGA_DRE_US"]
DEFAULT_AGE_US = CONST["TALB_DEFAULT_CONGA_AGE_US"]
DEFAULT_ALPHA_SHIFT = CONST["TALB_DEFAULT_CONGA_ALPHA_SHIFT"]
DEFAULT_Q_BITS = CONST["TALB_DEFAULT_CONGA_Q_BITS"]
DEFAULT_FLOWLET_US = CONST["TALB_DEFAULT_FLOWLET_US"]
DECAY_MAX = CONST["TALB_CONGA_DECAY_MAX"]
Q16 = CONST["TALB_CONGA_Q16"]
MAX_LEAVES = CONST["TALB_CONGA_MAX_LEAVES"]
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class CongaParams:
    dre_us: int = DEFAULT_DRE_US
    age_us: int = DEFAULT_AGE_US
    alpha_shift: int = DEFAULT_ALPHA_SHIFT
    q_bits: int = DEFAULT_Q_BITS
    flowlet_us: int = DEFAULT_FLOWLET_US

    @property
    def period_ns(self) -> int:
        return self.dre_us * 1000


def decay(x: int, shift: int, n: int) -> int:
    """X * (1 - 2^-shift)^n, n < 64, in Q16 steps (conga_decay)."""
    f = Q16 - (Q16 >> shift)
    for j in range(6):
        if n >> j & 1:
            x = (x * f) >> 16
        f = (f * f) >> 16
    return x


@dataclass
class Dre:
    """A port's DRE as stored (struct conga_dre)."""

    x: int = 0
    last_ns: int = 0

    def at(self, p: CongaParams, now_ns: int) -> tuple[int, int]:
        """(X, last) decayed to ``now_ns`` (conga_dre_at)."""
        dt = signed64(now_ns - self.last_ns)
        if dt <= 0:
            return self.x, self.last_ns
        n = dt // p.period_ns
        if n >= DECAY_MAX:
            return 0, now_ns
        return decay(self.x, p.alpha_shift, n), self.last_ns + n * p.period_ns

    def account(self, p: CongaParams, length: int, now_ns: int) -> None:
        x, last = self.at(p, now_ns)
        self.x, self.last_ns = x + length, last


def metric(x: int, bytes_per_s: int, p: CongaParams) -> int:
    """X against C * tau, quantised to q_bits (conga_port_metric)."""
    top = (1 << p.q_bits) - 1
    if bytes_per_s == 0:
        return 0
    full = bytes_per_s * (p.period_ns << p.alpha_shift) // NS_PER_S
    if full == 0:
        return top
    return min(top, (x << p.q_bits) // full)


@dataclass
class Entry:
    metric: int
    updated_ns: int


@dataclass
class CongaModel:
    """One leaf's flowlets and tables, and its decisions."""

    params: CongaParams = field(default_factory=CongaParams)
    flowlets: dict = field(default_factory=dict)
    to_leaf: dict = field(default_factory=dict)     # (leaf, lbtag) -> Entry
    from_leaf: dict = field(default_factory=dict)   # (leaf, lbtag) -> Entry
    fb_cursor: dict = field(default_factory=dict)   # leaf -> next lbtag
    counters: Counter = field(default_factory=Counter)

    def remote(self, leaf: int, tag: int, now_ns: int) -> int:
        e = self.to_leaf.get((leaf, tag))
        if leaf >= MAX_LEAVES or e is None or signed64(now_ns - e.updated_ns) > \
                self.params.age_us * 1000:
            return 0
        return e.metric

    def best(self, ifindexes: Sequence[int], up: Collection[int] | None, dst_leaf: int,
             local: Sequence[int], rng: Rng, now_ns: int) -> int:
        """The usable index of least max(local, remote), ties at random
        (conga_best). ``local[i]``: port i's metric now."""
        mask = up_mask(ifindexes, up)
        cost = [max(local[i], self.remote(dst_leaf, i, now_ns)) & 0xFF
                for i in range(len(ifindexes))]
        low = min(cost[i] for i in range(len(ifindexes)) if mask >> i & 1)
        ties = [i for i in range(len(ifindexes)) if mask >> i & 1 and cost[i] == low]
        return ties[rng.next() % len(ties)]

    def select(self, key, ifindexes: Sequence[int], up: Collection[int] | None, dst_leaf: int,
               local: Sequence[int], rng: Rng, now_ns: int) -> int:
        """conga_select: the flowlet's port within the gap, else best."""
        mask = up_mask(ifindexes, up)
        i = flowlet_keep(self.flowlets, self.counters, key, ifindexes, mask,
                         self.params.flowlet_us * 1000, now_ns)
        if i >= 0:
            return i
        if not mask:
            return 0
        idx = self.best(ifindexes, up, dst_leaf, local, rng, now_ns)
        flowlet_start(self.flowlets, self.counters, key, ifindexes[idx], now_ns)
        return idx

    def record(self, src_leaf: int, lbtag: int, ce: int, fb: tuple[int, int] | None,
               now_ns: int) -> None:
        """Destination leaf: an option arrived (conga_record)."""
        if src_leaf >= MAX_LEAVES:
            return
        self.from_leaf[(src_leaf, lbtag & 7)] = Entry(ce, now_ns)
        if fb is not None:
            self.to_leaf[(src_leaf, fb[0] & 7)] = Entry(fb[1], now_ns)
            self.counters["conga_fb_received"] += 1

    def feedback(self, leaf: int, now_ns: int) -> tuple[int, int] | None:
        """Source leaf sending to ``leaf``: (fb_lbtag, fb_metric) or None
        (conga_feedback)."""
        if leaf >= MAX_LEAVES:
            return None
        c = self.fb_cursor.get(leaf, 0)
        for j in range(8):
            tag = (c + j) & 7
            e = self.from_leaf.get((leaf, tag))
            if e is None or signed64(now_ns - e.updated_ns) > self.params.age_us * 1000:
                continue
            self.fb_cursor[leaf] = (tag + 1) & 0xFFFFFFFF
            self.counters["conga_fb_sent"] += 1
            return tag, e.metric
        return None


# --- control plane: CONGA's view of the fabric and its tables on a switch ---------------
def set_conga_leaves(maps, leaf: int | None, host_leaf: Mapping[str, int]) -> None:
    """CONGA's view of the fabric: this switch's leaf id (None: a spine) and
    every host's leaf (``{"198.18.0.1": 0, ...}``): the source leaf pushes
    its id, and keys its congestion-to-leaf table by the destination's."""
    from datapath.control import config_update
    from datapath.structs import IPv4Key

    top = MAX_LEAVES
    for ip, lid in host_leaf.items():
        if not 0 <= int(lid) < top:
            raise ValueError(f"set_conga_leaves: host {ip}: leaf id {lid} not in 0..{top - 1}")
    if leaf is not None and not 0 <= int(leaf) < top:
        raise ValueError(f"set_conga_leaves: leaf id {leaf} not in 0..{top - 1}")
    for ip, lid in host_leaf.items():
        maps.conga_leaf_of[IPv4Key.of(ip)] = int(lid)
    with config_update(maps) as cfg:
        cfg.conga_leaf = 0 if leaf is None else int(leaf) + 1


def read_conga_tables(maps, now_ns: int | None = None) -> dict:
    """``{"to_leaf": {(leaf, lbtag): (metric, age_s)}, "from_leaf": {...}}``:
    the entries written so far (CONGA's congestion-to-leaf and -from-leaf)."""
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if now_ns is None else now_ns
    width = TALB_MAX_GROUP_PORTS
    out: dict = {"to_leaf": {}, "from_leaf": {}}
    for name in out:
        for k, e in getattr(maps, f"conga_{name}").items():
            if e.valid:
                out[name][(k // width, k % width)] = (e.metric, max(0, now - e.updated_ns) / 1e9)
    return out


def _install(maps, view: SwitchView) -> None:
    set_conga_leaves(maps, view.leaf_id, view.host_leaves)


def _config_view(cfg) -> dict:
    """read_config's ``conga_leaf``: this switch's leaf, None on a spine."""
    return {"conga_leaf": cfg.conga_leaf - 1 if cfg.conga_leaf else None}


SCHEME = Scheme(
    name="conga", id=4, title="CONGA",
    description="a new flowlet takes the uplink least congested to the destination leaf "
                "(DRE metrics carried leaf to leaf in an IPv4 option)",
    paper="Alizadeh et al., SIGCOMM 2014",
    decides="source leaf, per flowlet",
    params=(FLOWLET_PARAM,
            Param("dre_us", "conga_dre_us", "int", 1, 1_000_000, DEFAULT_DRE_US, "us",
                  "T_dre, the DRE's decay period", timer="conga_dre_us"),
            Param("alpha_shift", "conga_alpha_shift", "int", 1, 4, DEFAULT_ALPHA_SHIFT, "",
                  "alpha = 2^-k: the DRE's decay per T_dre", timer="conga_alpha_shift"),
            Param("q_bits", "conga_q_bits", "int", 1, 8, DEFAULT_Q_BITS, "",
                  "bits of the quantised congestion metric"),
            Param("age_us", "conga_age_us", "int", 1, 100_000_000, DEFAULT_AGE_US, "us",
                  "a remote metric older than this counts as 0", timer="conga_age_us")),
    xdp=True, xdp_why="its DRE counts the bytes the program sends (no qdisc read)",
    not_a_fallback="CONGA cannot be TaLB's fallback (it needs every packet of the fabric, "
                   "to carry its option leaf to leaf)",
    decisions=(("decision_conga", "flowlet"),),
    clock=True, inline=False, model=CongaModel,
    install=_install, config_view=_config_view, control=(set_conga_leaves, read_conga_tables))
