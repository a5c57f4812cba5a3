"""Model of ``bpf/include/talb/schemes/letflow.h``: LetFlow (Vanini et al.,
NSDI 2017), flowlets on random ports; and of the flowlet step it shares with
CONGA, ``bpf/include/talb/schemes/flowlet.h`` (flowlet_keep, flowlet_start)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Sequence

from common.c_constants import CONST
from datapath.schemes.pick import Rng, pick_up, port_index, up_mask
from datapath.schemes.spec import Param, Scheme

DEFAULT_FLOWLET_US = CONST["TALB_DEFAULT_FLOWLET_US"]


@dataclass
class Flowlet:
    port: int           # ifindex
    last_seen_ns: int


def signed64(x: int) -> int:
    """x as the data path's (__s64) cast sees it."""
    return (x + 2**63) % 2**64 - 2**63


def flowlet_keep(flowlets: dict, counters: Counter, key, ifindexes: Sequence[int], mask: int,
                 timeout_ns: int, now_ns: int) -> int:
    """talb_flowlet_step (schemes/flowlet.h) up to its new-flowlet decision,
    the step LetFlow and CONGA share: the index of the flow's flowlet port
    when its last packet came at most the gap ago and the port is usable
    (last seen refreshed), else -1 (a new flowlet)."""
    f = flowlets.get(key)
    if f is None or signed64(now_ns - f.last_seen_ns) > timeout_ns:
        return -1
    i = port_index(ifindexes, f.port)
    if i < 0 or not mask >> i & 1:
        return -1
    f.last_seen_ns = now_ns
    counters["flowlet_same"] += 1
    return i


def flowlet_start(flowlets: dict, counters: Counter, key, ifindex: int, now_ns: int) -> None:
    """talb_flowlet_start (schemes/flowlet.h): record a new flowlet on ``ifindex``."""
    flowlets[key] = Flowlet(ifindex, now_ns)
    counters["flowlet_new"] += 1


@dataclass
class LetFlowModel:
    """The flowlet table and the decision. ``timeout_us`` 0: the default.
    Flows are keyed by (saddr, daddr, sport, dport, proto), as
    datapath.structs.FlowKey.as_tuple() gives them."""

    timeout_us: int = 0
    flowlets: dict = field(default_factory=dict)
    counters: Counter = field(default_factory=Counter)

    @property
    def timeout_ns(self) -> int:
        return (self.timeout_us or DEFAULT_FLOWLET_US) * 1000

    def select(self, key: tuple, ifindexes: Sequence[int], up: Collection[int] | None,
               rng: Rng, now_ns: int) -> int:
        mask = up_mask(ifindexes, up)
        i = flowlet_keep(self.flowlets, self.counters, key, ifindexes, mask, self.timeout_ns, now_ns)
        if i >= 0:
            return i
        if not mask:
            return 0
        idx = pick_up(mask, rng)
        flowlet_start(self.flowlets, self.counters, key, ifindexes[idx], now_ns)
        return idx


#: the flowlet gap LetFlow and CONGA share (one config field, one flowlet table)
FLOWLET_PARAM = Param(
    "flowlet_us", "flowlet_timeout_us", "int", 1, 10_000_000, DEFAULT_FLOWLET_US, "us",
    "a gap longer than this between a flow's packets starts a new flowlet",
    timer="flowlet_us")

SCHEME = Scheme(
    name="letflow", id=2, title="LetFlow",
    description="a new flowlet (a gap longer than flowlet_us) takes a random usable port",
    paper="Vanini et al., NSDI 2017",
    decides="every switch, per flowlet",
    params=(FLOWLET_PARAM,),
    xdp=True, xdp_why="flowlets by time gaps, in the program",
    not_a_fallback=None,
    decisions=(("decision_letflow", "flowlet"),),
    clock=True, inline=False, model=LetFlowModel)
