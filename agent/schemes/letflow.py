"""Model of ``bpf/include/talb/schemes/letflow.h``: LetFlow (Vanini et al.,
NSDI 2017), flowlets on random ports."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Sequence

from agent.maps import CONST
from agent.schemes.pick import Rng, pick_up, port_index, up_mask

DEFAULT_FLOWLET_US = CONST["TALB_DEFAULT_FLOWLET_US"]

FlowKey = tuple  # (saddr, daddr, sport, dport, proto)


@dataclass
class Flowlet:
    port: int           # ifindex
    last_seen_ns: int


@dataclass
class LetFlowModel:
    """The flowlet table and the decision. ``timeout_us`` 0: the default."""

    timeout_us: int = 0
    flowlets: dict = field(default_factory=dict)
    counters: Counter = field(default_factory=Counter)

    @property
    def timeout_ns(self) -> int:
        return (self.timeout_us or DEFAULT_FLOWLET_US) * 1000

    def select(self, key: FlowKey, ifindexes: Sequence[int], up: Collection[int] | None,
               rng: Rng, now_ns: int) -> int:
        mask = up_mask(ifindexes, up)
        f = self.flowlets.get(key)
        if f is not None and now_ns - f.last_seen_ns <= self.timeout_ns:
            i = port_index(ifindexes, f.port)
            if i >= 0 and mask >> i & 1:
                f.last_seen_ns = now_ns
                self.counters["flowlet_same"] += 1
                return i
        if not mask:
            return 0
        idx = pick_up(mask, rng)
        self.flowlets[key] = Flowlet(ifindexes[idx], now_ns)
        self.counters["flowlet_new"] += 1
        return idx
