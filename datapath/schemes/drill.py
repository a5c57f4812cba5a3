"""Model of ``bpf/include/talb/schemes/drill.h``: DRILL(d, m) (Ghorbani et
al., SIGCOMM 2017) over the data path's per-port queue estimates."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

from common.c_constants import CONST
from datapath.schemes.pick import Rng, pick_up, port_index, up_mask
from datapath.schemes.spec import Param, Scheme

DEFAULT_D = CONST["TALB_DEFAULT_DRILL_D"]
MAX_D = CONST["TALB_DRILL_MAX_D"]
MAX_M = CONST["TALB_DRILL_MAX_M"]
DT_MAX_NS = CONST["TALB_QUEUE_DT_MAX_NS"]
NS_PER_S = 1_000_000_000
_INF = (1 << 64) - 1


@dataclass
class ModelPortQueue:
    """A port's shaper as the estimate models it (struct port_queue with its
    port_rate; datapath.structs.PortQueue is the C struct's mirror): backlog and
    bucket credit at last_ns."""

    bytes: int = 0
    last_ns: int = 0
    bytes_per_s: int = 0    # 0: never drained
    limit_bytes: int = 0    # 0: no cap
    credit: int = 0
    burst_bytes: int = 0

    def _advanced(self, now_ns: int) -> tuple[int, int]:
        """(backlog, credit) at ``now_ns`` (drill_advance)."""
        dt = (now_ns - self.last_ns + 2**63) % 2**64 - 2**63
        if self.bytes_per_s == 0 or dt <= 0:
            return self.bytes, self.credit
        if dt > DT_MAX_NS:
            return 0, self.burst_bytes
        t = dt * self.bytes_per_s // NS_PER_S
        d = min(self.bytes, t)
        return self.bytes - d, min(self.burst_bytes, self.credit + t - d)

    def at(self, now_ns: int) -> int:
        """The estimate at ``now_ns`` (drill_queue)."""
        return self._advanced(now_ns)[0]

    def account(self, length: int, now_ns: int) -> None:
        """A packet of ``length`` bytes leaves through the port (drill_account)."""
        b, c = self._advanced(now_ns)
        if b == 0 and c >= length:
            c -= length
        else:
            b += length
            if self.limit_bytes and b > self.limit_bytes:
                b = self.limit_bytes
        self.bytes, self.credit, self.last_ns = b, c, now_ns


def drill_select(ifindexes: Sequence[int], up: Collection[int] | None, rng: Rng,
                 memory: list[int], queue_of, d: int, m: int) -> int:
    """Index DRILL(d, m) picks. ``memory``: the engine's remembered
    ifindexes (updated in place, length MAX_M, 0 = none); ``queue_of(i)``:
    the estimate of group index i now."""
    mask = up_mask(ifindexes, up)
    if not mask:
        return 0
    d = d or DEFAULT_D
    best = [(_INF, 8), (_INF, 8)]   # (queue, index) best first; 8: none

    def consider(i: int, q: int) -> None:
        if i == best[0][1]:
            return
        if q < best[0][0]:
            best[1], best[0] = best[0], (q, i)
        elif q < best[1][0] and i != best[1][1]:
            best[1] = (q, i)

    for j in range(min(m, MAX_M)):
        i = port_index(ifindexes, memory[j])
        if i >= 0 and mask >> i & 1:
            consider(i, queue_of(i))
    for _ in range(min(d, MAX_D)):
        i = pick_up(mask, rng)
        consider(i, queue_of(i))
    i0, i1 = best[0][1], best[1][1]
    memory[0] = ifindexes[i0] if m >= 1 else 0
    memory[1] = ifindexes[i1] if m >= 2 and i1 < 8 else 0
    return i0


# --- control plane -----------------------------------------------------------------------
def read_queue_estimates(maps, now_ns: int | None = None) -> dict[int, int]:
    """``{ifindex: bytes}``: the data path's queue estimate of each port now
    (drained to ``now_ns`` as the data path would, :class:`ModelPortQueue`),
    from the switch's port_queue and port_rate maps. The real queues (the
    qdiscs' counters) are workload.measure.read_qdisc_counters'."""
    import time

    from datapath.control import read_ports

    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC) if now_ns is None else now_ns
    out = {}
    for ifindex, p in read_ports(maps).items():
        q, r = maps.port_queue.get(p["port_id"]), maps.port_rate.get(p["port_id"])
        out[ifindex] = ModelPortQueue(q.bytes, q.last_ns, r.bytes_per_s, r.limit_bytes,
                                      q.credit, r.burst_bytes).at(now)
    return out


SCHEME = Scheme(
    name="drill", id=3, title="DRILL",
    description="the shortest egress queue of d random and m remembered ports, every packet",
    paper="Ghorbani et al., SIGCOMM 2017",
    decides="every switch, per packet",
    params=(Param("d", "drill_d", "int", 1, MAX_D, DEFAULT_D, "",
                  "random ports sampled per packet"),
            Param("m", "drill_m", "int", 0, MAX_M, CONST["TALB_DEFAULT_DRILL_M"], "",
                  "best ports remembered from the last packet")),
    xdp=False,
    xdp_why="it picks the port with the shortest egress queue, and XDP_REDIRECT bypasses "
            "the egress qdisc: there is no queue to read",
    not_a_fallback=None,
    decisions=(("decision_drill", "shortest_queue"),),
    clock=True, inline=False, model=drill_select, control=(read_queue_estimates,))
