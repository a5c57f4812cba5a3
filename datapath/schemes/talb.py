"""TaLB's switch decision in pure Python: the reference for the data path
(the model of ``bpf/include/talb/schemes/talb.h``, one module of datapath.schemes).

``bpf/include/talb/schemes/talb.h`` is the decision in C; this module is the
same decision, step by step, with no kernel in sight. It serves three ends:

* the published data: :func:`pcm_to_fixed`, :func:`fixed_pcm_order`,
  :func:`fixed_wrr_weights` and :func:`smooth_wrr_schedule` compute what
  ``datapath.control.publish_pcm`` writes into a forwarding group (the data path
  only reads it);
* :class:`TalbModel`, a model switch (tensor table, live layers per group,
  WRR cursors, counters) that the property tests in
  ``tests/test_talb_switch.py`` run beside the BPF program, packet by packet,
  comparing the chosen port and the table after every step;
* :func:`band_of`, the layer -> priority band mapping.

Readings of the paper are listed in ``docs/talb-decisions.md``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache, reduce
from operator import add
from typing import Callable, Sequence

from common.c_constants import CONST
from datapath.schemes.spec import SCHEME_NAME, Param, Scheme

PCM_ONE = CONST["TALB_PCM_ONE"]
SCHED_MAX = CONST["TALB_SCHED_MAX"]
MAX_TENSORS = CONST["TALB_MAX_TENSORS"]
MAX_GROUP_PORTS = CONST["TALB_MAX_GROUP_PORTS"]
NR_LAYERS = CONST["TALB_NR_LAYERS"]
MAX_BANDS = CONST["TALB_MAX_BANDS"]
DEFAULT_LAYERS_PER_BAND = CONST["TALB_DEFAULT_LAYERS_PER_BAND"]
HTB_MAJOR = CONST["TALB_HTB_MAJOR"]
BAND_MINOR_BASE = CONST["TALB_BAND_MINOR_BASE"]

__all__ = [
    "PCM_ONE", "SCHED_MAX", "pcm_to_fixed", "pcm_from_fixed", "fixed_pcm_order",
    "fixed_wrr_weights", "smooth_wrr_schedule", "band_of", "band_priority", "ModelGroup", "ModelPacket",
    "TalbModel",
]


# --- what the agent publishes ----------------------------------------------------
# In the data path's fixed point (0..PCM_ONE), hence ``fixed_``: agent/pcm.py's
# pcm_order and wrr_weights are the paper's float maths on P_i in [0, 1].
def pcm_to_fixed(p: float) -> int:
    """P_i in [0, 1] -> the data path's fixed point (0..TALB_PCM_ONE)."""
    p = float(p)
    if math.isnan(p):
        raise ValueError("PCM is NaN")
    return int(round(min(1.0, max(0.0, p)) * PCM_ONE))


def pcm_from_fixed(x: int) -> float:
    return x / PCM_ONE


def fixed_pcm_order(pcm: Sequence[int]) -> list[int]:
    """Indices by fixed-point PCM, lowest first; ties keep group order (stable)."""
    return sorted(range(len(pcm)), key=lambda i: (pcm[i], i))


def fixed_wrr_weights(pcm: Sequence[int], slots: int = SCHED_MAX) -> list[int]:
    """Integer CASE 2 weights proportional to the residuals ``1 - P_i``
    (docs/design.md §5), summing to at most ``slots`` and reduced by their gcd
    so that the schedule is as short as the proportions allow.

    Exact when the reduced residuals fit in ``slots`` (equal PCMs: plain
    round-robin), else largest-remainder apportionment of ``slots``. All residuals 0 (every port
    at P = 1): equal weights -- every port is as bad, and none may starve.
    A port with P_i = 1 among others gets weight 0 (not used by CASE 2)."""
    n = len(pcm)
    if n == 0:
        return []
    resid = [PCM_ONE - min(PCM_ONE, max(0, int(p))) for p in pcm]
    total = sum(resid)
    if total == 0:
        return [1] * n
    g = reduce(math.gcd, resid)
    if total // g <= slots:          # exact proportions fit: use them
        return [r // g for r in resid]
    quotas = [r * slots / total for r in resid]
    w = [int(q) for q in quotas]
    left = slots - sum(w)
    for i in sorted(range(n), key=lambda i: (-(quotas[i] - w[i]), i))[:left]:
        w[i] += 1
    g = reduce(math.gcd, [x for x in w if x]) or 1
    return [x // g for x in w]


def smooth_wrr_schedule(weights: Sequence[int]) -> list[int]:
    """Smooth weighted round-robin (nginx): one round of ``sum(weights)``
    picks, each port ``weights[i]`` times, spread out (no run of one port
    longer than its weight needs). Ties go to the lowest index."""
    total = sum(weights)
    if total <= 0:
        return list(range(len(weights)))
    if total > SCHED_MAX:
        raise ValueError(f"weights sum to {total}, at most TALB_SCHED_MAX={SCHED_MAX}")
    weights = list(weights)
    current = [0] * len(weights)
    out = []
    for _ in range(total):
        current = list(map(add, current, weights))
        best = current.index(max(current))  # the first of the largest: lowest index
        current[best] -= total
        out.append(best)
    return out


@lru_cache(maxsize=4096)
def _cached_schedule(weights: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(smooth_wrr_schedule(weights))


def cached_schedule(weights: tuple[int, ...]) -> tuple[int, ...]:
    """:func:`smooth_wrr_schedule` of a weight tuple, remembered: the agent
    publishes the same few weight vectors window after window."""
    return _cached_schedule(weights)


def band_of(tagged: bool, layer: int, n_bands: int, layers_per_band: int = 0) -> int:
    """Priority band (schemes/talb.h talb_band): untagged -> 0; tagged ->
    1 + layer // layers_per_band, capped at the last band; one band -> 0."""
    n_bands = min(int(n_bands), MAX_BANDS)
    if n_bands <= 1 or not tagged:
        return 0
    per = layers_per_band or DEFAULT_LAYERS_PER_BAND
    return min(1 + layer // per, n_bands - 1)


def band_priority(band: int) -> int:
    """skb->priority for a band: HTB classid 1:(0x10 + band)."""
    return HTB_MAJOR | (BAND_MINOR_BASE + band)


# --- the model switch ------------------------------------------------------------
@dataclass
class ModelGroup:
    """A forwarding group as the data path reads it (fixed-point PCMs)."""

    ifindex: list[int]
    pcm: list[int] = None
    order: list[int] = None
    threshold: int = PCM_ONE
    schedule: list[int] = None

    def __post_init__(self):
        n = len(self.ifindex)
        if self.pcm is None:
            self.pcm = [0] * n
        if self.order is None:
            self.order = list(range(n))
        if self.schedule is None:
            self.schedule = list(range(n))

    @classmethod
    def published(cls, ifindex: Sequence[int], pcm: Sequence[float],
                  threshold: float | None = None) -> "ModelGroup":
        """What publish_pcm writes for these float PCMs."""
        fixed = [pcm_to_fixed(p) for p in pcm]
        return cls(list(ifindex), fixed, fixed_pcm_order(fixed),
                   PCM_ONE if threshold is None else pcm_to_fixed(threshold),
                   smooth_wrr_schedule(fixed_wrr_weights(fixed)))

    @classmethod
    def from_fwd_group(cls, g) -> "ModelGroup":
        d = g.talb()
        return cls(g.ports(), d["pcm"], d["order"], d["threshold"], d["schedule"])


@dataclass(frozen=True)
class ModelPacket:
    tagged: bool
    tensor_id: int = 0
    layer: int = 0
    tensor_len: int = 1
    last: bool = False
    pkt_idx: int = 0
    #: index the fallback scheme picks for this packet: an int (ECMP's, a
    #: function of the flow), or a callable asked only when TaLB falls back
    #: (a stateful fallback -- RPS, LetFlow, DRILL -- must not draw otherwise)
    fallback_index: "int | Callable[[], int]" = 0
    #: the fallback's decision counter (read_counters name)
    fallback_counter: str = "decision_ecmp"
    #: the sender's IPv4 address (dotted): with tensor_id, the tensor's key
    src: str | None = None

    def key(self) -> tuple[str, int]:
        """(src, tensor_id): the tensor's key in the switch's table -- ids
        are unique per sending host only (common.wire.WireTensorKey)."""
        if self.src is None:
            raise ValueError(f"ModelPacket.src: a tagged packet (tensor_id {self.tensor_id}) "
                             "needs its sender's address, None given")
        return self.src, self.tensor_id


@dataclass
class ModelEntry:
    tensor_len: int
    received: int
    prev_port: int
    layer: int
    group_id: int
    done: bool = False


@dataclass
class TalbModel:
    """The switch's TaLB state and decision, as in schemes/talb.h.

    ``up``: ifindexes of ports with PORT_UP (None: all). No clock: entries
    never age here (the tests cover ageing on the data path alone), and done
    entries stay (the data path keeps them until idle). ``tensors`` is keyed
    by (src, tensor_id), like the data path's table."""

    tensor_limit: int = MAX_TENSORS
    up: set | None = None
    tensors: dict = field(default_factory=dict)
    live: dict = field(default_factory=dict)        # gid -> Counter(layer -> n)
    cursor: dict = field(default_factory=dict)      # gid -> int
    counters: Counter = field(default_factory=Counter)

    # -- state --
    def occupancy(self) -> int:
        return sum(1 for e in self.tensors.values() if not e.done)

    def live_layers(self, gid: int) -> dict[int, int]:
        return {l: n for l, n in self.live.get(gid, {}).items() if n > 0}

    def _account(self, gid: int, layer: int, delta: int) -> None:
        self.live.setdefault(gid, Counter())[layer] += delta

    def _complete(self, key: tuple[str, int]) -> None:
        e = self.tensors[key]
        e.done = True
        self._account(e.group_id, e.layer, -1)
        self.counters["talb_completed"] += 1

    def _port_up(self, ifindex: int) -> bool:
        return self.up is None or ifindex in self.up

    # -- the decision --
    def new_tensor(self, gid: int, g: ModelGroup, layer: int) -> int:
        """CASE 1 / CASE 2 for a new tensor of ``layer``: index into g."""
        n = len(g.ifindex)
        live = self.live_layers(gid)
        other = any(l != layer for l in live)
        if other:
            rank = sum(1 for l in live if l < layer)
            r = min(rank, n - 1)

            def order(k):
                o = g.order[k] if k < len(g.order) else n
                return o if o < n else k

            idx, lo = order(r), order(0)
            if g.pcm[idx] >= g.threshold and g.pcm[idx] > g.pcm[lo]:
                self.counters["talb_threshold"] += 1
                idx = lo
            self.counters["talb_case1"] += 1
            return idx
        c = self.cursor.get(gid, 0)
        self.cursor[gid] = (c + 1) & 0xFFFFFFFF
        length = len(g.schedule)
        idx = g.schedule[c % length] if 1 <= length <= SCHED_MAX else n
        if idx >= n:
            idx = c % n
        self.counters["talb_case2"] += 1
        return idx

    def _fallback(self, p: ModelPacket) -> int:
        self.counters[p.fallback_counter] += 1
        return p.fallback_index() if callable(p.fallback_index) else p.fallback_index

    def decide(self, gid: int, g: ModelGroup, p: ModelPacket) -> int:
        """Index into group ``g`` (id ``gid``) for packet ``p``; updates the
        table, live layers, cursor and counters like the data path."""
        n = len(g.ifindex)
        if n == 1:
            self.counters["decision_single"] += 1
            return 0
        if not p.tagged:
            self.counters["talb_fallback"] += 1
            return self._fallback(p)
        key = p.key()
        e = self.tensors.get(key)
        if e is not None:
            if e.prev_port in g.ifindex and self._port_up(e.prev_port):
                idx = g.ifindex.index(e.prev_port)
                self.counters["talb_late" if e.done else "talb_hit"] += 1
            else:
                self.counters["talb_reroute"] += 1
                idx = self.new_tensor(gid, g, e.layer)
                e.prev_port = g.ifindex[idx]
            e.received += 1
            if not e.done and (p.last or p.pkt_idx + 1 >= e.tensor_len):
                self._complete(key)
            self.counters["decision_talb"] += 1
            return idx
        if p.pkt_idx != 0:
            # The fallback's choice is remembered as a done entry, so that the
            # rest of the tensor (a late first packet too) keeps that port.
            self.counters["talb_midstream"] += 1
            idx = self._fallback(p)
            self.tensors[key] = ModelEntry(p.tensor_len, 1, g.ifindex[idx], p.layer, gid,
                                           done=True)
            return idx
        if p.tensor_len <= 1 or p.last:
            self.counters["decision_talb"] += 1
            return self.new_tensor(gid, g, p.layer)
        limit = self.tensor_limit if 0 < self.tensor_limit <= MAX_TENSORS else MAX_TENSORS
        if self.occupancy() >= limit:
            self.counters["talb_table_full"] += 1
            return self._fallback(p)
        idx = self.new_tensor(gid, g, p.layer)
        self.tensors[key] = ModelEntry(p.tensor_len, 1, g.ifindex[idx], p.layer, gid)
        self._account(gid, p.layer, +1)
        self.counters["talb_inserted"] += 1
        self.counters["decision_talb"] += 1
        return idx

    def table(self, include_done: bool = False) -> dict[tuple[str, int], tuple]:
        """``{(src, tensor_id): (tensor_len, received, prev_port, layer,
        group_id)}`` of the live tensors (and the done ones), the fields the
        data path's table is compared on."""
        return {key: (e.tensor_len, e.received, e.prev_port, e.layer, e.group_id)
                for key, e in self.tensors.items() if include_done or not e.done}


def group_weights_of(schedule: Sequence[int], n: int) -> list[int]:
    """How often each index appears in a schedule."""
    c = Counter(schedule)
    return [c.get(i, 0) for i in range(n)]


def expected_counts(weights: Sequence[int], total: int) -> list[float]:
    s = sum(weights)
    return [total * w / s for w in weights]


def live_counts(state, swept=None) -> dict[int, int]:
    """``{layer: live}`` from a GroupState (and its group_swept twin)."""
    out = {}
    for layer in range(NR_LAYERS):
        n = state.live[layer] - (swept.live[layer] if swept is not None else 0)
        n = (n + 2**31) % 2**32 - 2**31  # as the data path: s32
        if n > 0:
            out[layer] = n
    return out


SCHEME = Scheme(
    name="talb", id=5, title="TaLB",
    description="a tensor's packets keep one port; a new tensor goes by layer priority and "
                "port congestion (PCM), untagged packets to the fallback scheme",
    paper="Hu et al., IWQoS 2024",
    decides="every switch, per tensor",
    params=(Param("fallback", "fallback_scheme", SCHEME_NAME, None, None, "ecmp", "",
                  "the scheme of untagged packets (and of tensors the table cannot hold)"),
            Param("tensor_limit", "tensor_limit", "int", 1, MAX_TENSORS, MAX_TENSORS, "",
                  "live entries of the tensor table"),
            Param("idle_us", "tensor_idle_us", "int", 1, 0xFFFFFFFF,
                  CONST["TALB_DEFAULT_IDLE_US"], "us",
                  "a tensor entry idle this long is stale")),
    xdp=True, xdp_why="tensor table in the program; PCM from the program's byte counters "
                      "and the M/D/1 model (--pcm-delay model)",
    not_a_fallback="TaLB cannot be its own fallback (untagged packets carry no tensor)",
    # CNT_TALB_CASE1 less the threshold's share is the agent's ("talb", "case1")
    decisions=(("talb_hit", "table_hit"), ("talb_case2", "case2"),
               ("talb_threshold", "case1_threshold")),
    clock=True, inline=True, model=TalbModel)
