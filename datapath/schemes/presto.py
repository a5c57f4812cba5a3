"""Model of ``bpf/include/talb/schemes/presto.h``: Presto (He et al.,
SIGCOMM 2015), a flow cut into flowcells of ``cell_bytes``, each flowcell
on the next usable port of the group, round-robin.

The paper's vSwitch at the sending edge cuts flowcells of at most 64 KB
(the largest TSO segment, sec. 3.1) and a modified GRO at the receiver
hides the reordering (sec. 3.2). Here the switch with a choice -- on a
two-tier leaf-spine fabric, the source leaf, whose uplink fixes the path --
counts whole packets (frame bytes, as port_stats does), and no receiver is
changed: reordering at a flowcell boundary reaches TCP (docs/schemes.md,
"Presto").

Beside the decision counter (decision_presto, every decision), the header
counts new and continued flowcells in a per-CPU map of its own,
``presto_cells`` (:data:`CELL_COUNTERS` names its indices); its flows'
state is ``presto_flows`` (:class:`PrestoCell` by 5-tuple).
"""
from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Sequence

from common.c_constants import SCHEME_HEADERS, parse_constants
from datapath.schemes.ecmp import flow_hash
from datapath.schemes.pick import port_index, up_mask
from datapath.schemes.spec import Param, Scheme

_HEADER = parse_constants(SCHEME_HEADERS["presto"].path)
#: the header's flowcell size when the config field is 0: the paper's 64 KB
DEFAULT_CELL_BYTES = _HEADER["TALB_PRESTO_DEFAULT_CELL_BYTES"]
#: below a full frame's payload every packet would be a flowcell of its own
#: (per-packet round-robin); 1 GiB keeps bytes + a packet inside 32 bits
MIN_CELL_BYTES, MAX_CELL_BYTES = 1500, 1 << 30
#: presto_cells index -> what it counts (per CPU; their sum is decision_presto)
CELL_COUNTERS = {_HEADER["TALB_PRESTO_CELL_NEW"]: "new_flowcell",
                 _HEADER["TALB_PRESTO_CELL_SAME"]: "same_flowcell"}


class PrestoCell(ctypes.Structure):
    """presto_flows' value (struct presto_cell): a flow's current flowcell."""

    _fields_ = [("port", ctypes.c_uint32), ("bytes", ctypes.c_uint32)]


@dataclass
class Flowcell:
    port: int           # ifindex
    bytes: int          # sent in it so far


def next_usable(mask: int, i: int) -> int:
    """presto_next: the usable index after ``i``, wrapping (mask non-zero)."""
    usable = [j for j in range(8) if mask >> j & 1]
    return usable[sum(j <= i for j in usable) % len(usable)]


def first_usable(mask: int, key: tuple, seed: int) -> int:
    """presto_first: the usable index the flow's 5-tuple hash picks."""
    usable = [j for j in range(8) if mask >> j & 1]
    return usable[flow_hash(*key, seed) % len(usable)]


@dataclass
class PrestoModel:
    """The flows' flowcells and the decision. ``cell_bytes`` 0: the
    default; ``seed``: the switch's hash seed (config hash_seed). Flows
    are keyed by (saddr, daddr, sport, dport, proto), as
    datapath.structs.FlowKey.as_tuple() gives them."""

    cell_bytes: int = 0
    seed: int = 0
    flows: dict = field(default_factory=dict)
    counters: Counter = field(default_factory=Counter)

    @property
    def cell(self) -> int:
        return self.cell_bytes or DEFAULT_CELL_BYTES

    def select(self, key: tuple, ifindexes: Sequence[int], up: Collection[int] | None,
               length: int) -> int:
        """Index of the port a packet of ``length`` bytes of flow ``key`` takes."""
        mask = up_mask(ifindexes, up)
        if not mask:
            return 0
        i = -1
        f = self.flows.get(key)
        if f is not None:
            i = port_index(ifindexes, f.port)
            if i >= 0 and mask >> i & 1 and f.bytes + length <= self.cell:
                f.bytes += length
                self.counters["same_flowcell"] += 1
                return i
        idx = next_usable(mask, i) if i >= 0 else first_usable(mask, key, self.seed)
        self.flows[key] = Flowcell(ifindexes[idx], length)
        self.counters["new_flowcell"] += 1
        return idx


CELL_PARAM = Param(
    "cell_bytes", "presto_cell_bytes", "int", MIN_CELL_BYTES, MAX_CELL_BYTES, DEFAULT_CELL_BYTES,
    "B", "a flowcell's size: a packet that would take a flow's flowcell past it starts the "
    "next flowcell, on the next usable port")

SCHEME = Scheme(
    name="presto", id=6, title="Presto",
    description="a flow's flowcells (cell_bytes each) take the group's usable ports in turn",
    paper="He et al., SIGCOMM 2015",
    decides="source leaf (any multipath hop), per flowcell",
    params=(CELL_PARAM,),
    xdp=True, xdp_why="flowcells counted in bytes, in the program",
    not_a_fallback=None,
    decisions=(("decision_presto", "flowcell"),),
    clock=False, inline=False, model=PrestoModel)
