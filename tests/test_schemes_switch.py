"""RPS, LetFlow, DRILL and Presto in the switch data path (bpf/include/talb/schemes/)
under BPF_PROG_TEST_RUN, against their Python models (datapath/schemes/).

Same set-up as test_bpf_datapath.py: the program is loaded (not attached),
veth ports live in a namespace of this module, the chosen egress port is
read from ``port_stats`` tx deltas. The schemes draw from a per-CPU
xorshift32 state and DRILL remembers per CPU: the test process is pinned to
CPU 0, where BPF_PROG_TEST_RUN then runs the program, and the models replay
CPU 0's state. Clocks: the data path writes the ``now`` it decided with
into the flowlet entry (LetFlow) and the chosen port's queue estimate
(DRILL), so a model learns it after the packet and decides with the same
instant.

Ports: p0 is a host port (ingress); p1..p4 the uplinks of DST4's group; p5
the single port of DST1.
"""
from __future__ import annotations

import os
import time

import pytest
import hypothesis
from hypothesis import strategies as st

from datapath.schemes import registry as scheme_registry
from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC_ACT_OK = 0
TC_ACT_REDIRECT = 7

N_PORTS = 6
SRC = "198.18.0.1"
DST4 = "198.18.1.4"
DST1 = "198.18.1.1"
UPLINKS = ("p1", "p2", "p3", "p4")
SEED = 777
RATE_BPS = 100_000_000          # the fabric's links
LIMIT = 150_000                 # and their queues
BURST = 15_000                  # and their HTB bucket


def tcp(sport=40000, dport=5201, src=SRC, dst=DST4, payload=b"x" * 64):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags="A") / payload)


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Switch(ProgTestSwitch):
    def __init__(self, netns_name, dp, ifindex):
        super().__init__(netns_name, dp, ifindex, N_PORTS)
        self.group = [ifindex[p] for p in UPLINKS]
        self.gid = None

    def port_rows(self, down=()):
        return [(n, self.ifindex[n], n == "p0", n not in down) for n in self.port_names]

    def reset(self, scheme, params=None, *, down=(), rng=0x1234567, rates=True):
        from datapath import control
        from datapath.structs import IPv4Key

        self.maps.counters.clear()
        self.maps.port_stats.clear()
        self.maps.flowlets.clear()
        self.maps.port_queue.clear()
        self.maps.drill_mem.clear()
        self.maps.port_rate.clear()
        control.program_switch(self.maps, self.port_rows(down),
                               {DST4: self.group, DST1: [self.ifindex["p5"]]},
                               scheme="ecmp", hash_seed=SEED)
        control.set_release(self.maps, False)
        if rates:
            control.set_port_rates(self.maps, {self.ifindex[n]: (RATE_BPS, LIMIT, BURST)
                                               for n in self.port_names})
        control.set_scheme(self.maps, scheme, params or {})
        self.set_rng(rng)
        self.gid = self.maps.fwd[IPv4Key.of(DST4)]

    def set_down(self, down) -> None:
        """Mark ports down in `ports` (the groups keep them, as in the moment
        before the agent regroups); scheme and parameters stay."""
        from datapath import control

        control.program_switch(self.maps, self.port_rows(down),
                               {DST4: self.group, DST1: [self.ifindex["p5"]]},
                               scheme=control.read_config(self.maps)["scheme"])

    def set_rng(self, state: int) -> None:
        self.maps.rng[0] = state

    def rng(self) -> int:
        return self.maps.rng.get_percpu(0)[0]   # CPU 0: where the test runs execute

    def send(self, data: bytes, ingress: str = "p0") -> str | None:
        """Run one packet; the port it went out of (None: not forwarded)."""
        before = self.tx()
        ret, _ = self.run(data, ingress)
        moved = {k: v - before[k] for k, v in self.tx().items() if v != before[k]}
        if ret != TC_ACT_REDIRECT:
            assert not moved, moved
            return None
        (port, n), = moved.items()
        assert n == 1
        return port

    def port_id(self, name: str) -> int:
        return self.port_names.index(name)


@pytest.fixture(scope="module")
def sw(bcc):
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        with loaded_switch("schemes", N_PORTS) as (name, dp, ifindex):
            yield Switch(name, dp, ifindex)
    finally:
        os.sched_setaffinity(0, cpus)


def up_set(sw, down=()):
    return {sw.ifindex[p] for p in UPLINKS if p not in down}


# --- RPS ----------------------------------------------------------------------------------
def test_rps_sprays_one_flow_over_every_port(sw):
    sw.reset("rps")
    seen = {p: 0 for p in UPLINKS}
    for _ in range(400):
        seen[sw.send(tcp())] += 1
    # uniform: 100 each; a port below 50 of 400 has odds < 1e-9 for a fair draw
    assert all(n >= 50 for n in seen.values()), seen
    c = sw.counters()
    assert c["decision_rps"] == 400 and c["scheme_fallback"] == 0


def test_rps_matches_model_draw_for_draw(sw):
    from datapath.schemes.pick import Rng
    from datapath.schemes.rps import rps_select

    for state, down in ((1, ()), (0xDEADBEEF, ("p2",)), (42, ("p1", "p3", "p4"))):
        sw.reset("rps", down=down, rng=state)
        model = Rng(state)
        for i in range(60):
            want = sw.group[rps_select(sw.group, up_set(sw, down), model)]
            assert sw.send(tcp(sport=40000 + i % 3)) == sw.port_of(want), (state, i)
            assert sw.rng() == model.state


# --- LetFlow -------------------------------------------------------------------------------
def _flowlet(sw, sport=40000):
    from datapath.structs import FlowKey

    return sw.maps.flowlets.get(FlowKey.of(SRC, DST4, sport, 5201, 6))


def _set_flowlet(sw, port: str, last_seen_ns: int, sport=40000):
    from datapath.structs import FlowKey, Flowlet

    sw.maps.flowlets[FlowKey.of(SRC, DST4, sport, 5201, 6)] = Flowlet(
        last_seen_ns, sw.ifindex[port])


def _rng_state_away_from(sw, port: str, down=()) -> int:
    """An rng state whose next draw picks a port other than ``port``."""
    from datapath.schemes.pick import Rng, pick_up, up_mask

    for s in range(1, 1000):
        idx = pick_up(up_mask(sw.group, up_set(sw, down)), Rng(s))
        if UPLINKS[idx] != port:
            return s
    raise AssertionError("no state found")


def test_letflow_keeps_port_within_gap_and_moves_after_it(sw):
    timeout_us = 100_000
    sw.reset("letflow", {"flowlet_us": timeout_us})
    first = sw.send(tcp())
    for _ in range(30):                 # back to back: one flowlet
        assert sw.send(tcp()) == first
    c = sw.counters()
    assert c["flowlet_new"] == 1 and c["flowlet_same"] == 30
    # a gap longer than the timeout: a new flowlet, here forced elsewhere
    sw.set_rng(_rng_state_away_from(sw, first))
    _set_flowlet(sw, first, mono_ns() - timeout_us * 1000 - 5_000_000)
    moved = sw.send(tcp())
    assert moved != first
    assert sw.counters()["flowlet_new"] == 2
    assert _flowlet(sw).port == sw.ifindex[moved]


def test_letflow_boundary_is_exactly_the_timeout(sw):
    """gap <= timeout keeps the flowlet, gap > timeout starts a new one, at
    the nanosecond: the data path records the instant it decided with (the
    entry's last_seen_ns), so each packet's true gap is known afterwards."""
    timeout_us = 20_000
    t_ns = timeout_us * 1000
    sw.reset("letflow", {"flowlet_us": timeout_us})
    first = sw.send(tcp())
    kept = moved = 0
    closest = {"kept": None, "moved": None}
    away = _rng_state_away_from(sw, first)
    lag = []            # clock read -> the data path's now, as measured
    for i in range(400):
        sw.set_rng(away)
        # aim the gap at the timeout: the run follows this clock read by
        # the median lag so far, give or take the sweep
        read = mono_ns()
        aim = sorted(lag)[len(lag) // 2] if lag else 0
        last = read - t_ns + aim + ((i % 21) - 10) * 5_000
        _set_flowlet(sw, first, last)
        port = sw.send(tcp())
        now = _flowlet(sw).last_seen_ns
        lag.append(now - read)
        gap = now - last
        if gap <= t_ns:
            assert port == first, (gap, t_ns)
            kept += 1
            d = t_ns - gap
            closest["kept"] = d if closest["kept"] is None else min(closest["kept"], d)
        else:
            assert port != first, (gap, t_ns)
            moved += 1
            d = gap - t_ns
            closest["moved"] = d if closest["moved"] is None else min(closest["moved"], d)
            _set_flowlet(sw, first, now)     # back on the first port
    assert kept >= 20 and moved >= 20, (kept, moved)
    # both sides met within 50 us of the boundary
    assert closest["kept"] < 50_000 and closest["moved"] < 50_000, closest


def test_letflow_matches_model(sw):
    from datapath.schemes.letflow import LetFlowModel
    from datapath.schemes.pick import Rng

    timeout_us = 5_000
    step = st.one_of(
        st.tuples(st.just("pkt"), st.integers(40000, 40003)),
        st.tuples(st.just("pkt"), st.integers(40000, 40003)),
        st.tuples(st.just("age"), st.integers(40000, 40003), st.integers(0, 2 * timeout_us)),
        st.tuples(st.just("down"), st.sets(st.sampled_from(UPLINKS), max_size=3)),
    )

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.integers(1, 2**32 - 1), st.lists(step, min_size=1, max_size=30))
    def check(state, steps):
        sw.reset("letflow", {"flowlet_us": timeout_us}, rng=state)
        model = LetFlowModel(timeout_us)
        rng = Rng(state)
        down: set = set()
        for s in steps:
            if s[0] == "down":
                down = set(s[1])
                sw.set_down(down)
                continue
            key = (SRC, DST4, s[1], 5201, 6)
            if s[0] == "age":           # the flow's last packet, s[2] us before now
                f = model.flowlets.get(key)
                if f is not None:
                    f.last_seen_ns = mono_ns() - s[2] * 1000
                    _set_flowlet(sw, sw.port_of(f.port), f.last_seen_ns, s[1])
                continue
            port = sw.send(tcp(sport=s[1]))
            f = _flowlet(sw, s[1])
            now = f.last_seen_ns if f is not None else mono_ns()
            want = model.select(key, sw.group, up_set(sw, down), rng, now)
            if not up_set(sw, down):
                assert port is None
            else:
                assert port == sw.port_of(sw.group[want]), s
            assert sw.rng() == rng.state
        c = sw.counters()
        assert (c["flowlet_new"], c["flowlet_same"]) == (model.counters["flowlet_new"],
                                                         model.counters["flowlet_same"])
        assert {k.as_tuple(): (v.port, v.last_seen_ns) for k, v in sw.maps.flowlets.items()} \
            == {k: (f.port, f.last_seen_ns) for k, f in model.flowlets.items()}

    check()


# --- DRILL ---------------------------------------------------------------------------------
def _queues(sw) -> dict[str, tuple[int, int, int]]:
    return {p: (q.bytes, q.last_ns, q.credit) for p in UPLINKS
            for q in [sw.maps.port_queue[sw.port_id(p)]]}


def _set_queue(sw, port: str, nbytes: int, last_ns: int, credit: int = 0) -> None:
    from datapath.structs import PortQueue

    sw.maps.port_queue[sw.port_id(port)] = PortQueue(nbytes, last_ns, credit)


def test_drill_takes_the_shorter_estimated_queue(sw):
    """Unequal estimates at the start, rate 0 (never drained): DRILL(2, 1)
    sends every packet to a shortest queue until they are level."""
    sw.reset("drill", {"d": 2, "m": 1}, rates=False)
    start = {"p1": 6000, "p2": 0, "p3": 3000, "p4": 9000}
    for p, b in start.items():
        _set_queue(sw, p, b, 0)
    data = tcp()
    for _ in range(200):
        port = sw.send(data)
        assert port is not None
    q = {p: b for p, (b, _, _) in _queues(sw).items()}
    assert sum(q.values()) == sum(start.values()) + 200 * len(data)
    # with one remembered port and two samples a queue can lag by a few packets
    assert max(q.values()) - min(q.values()) <= 4 * len(data), q
    assert sw.counters()["decision_drill"] == 200


def test_drill_estimate_drains_at_link_rate_and_caps_at_limit(sw):
    """The shaper model alone: p1 the only usable port, so every packet is
    accounted to it."""
    from datapath import control

    sw.reset("drill", {"d": 1, "m": 0}, down=("p2", "p3", "p4"))
    now = mono_ns()
    _set_queue(sw, "p1", 100_000, now - 4_000_000)   # 4 ms at 12.5 MB/s: 50 kB gone
    est = control.read_queue_estimates(sw.maps, now_ns=now)[sw.ifindex["p1"]]
    assert est == 50_000
    # a full bucket: a burst's worth leaves at once (the bucket's filling is
    # in test_drill_matches_model). At 8 kbit/s from here on, so that the
    # test's own pace refills nothing.
    control.set_port_rates(sw.maps, {sw.ifindex["p1"]: (8_000, LIMIT, BURST)})
    _set_queue(sw, "p1", 0, mono_ns(), BURST)
    data = tcp(payload=b"b" * 1000)
    for _ in range(BURST // len(data)):
        assert sw.send(data) == "p1"
    q = sw.maps.port_queue[sw.port_id("p1")]
    assert q.bytes == 0 and q.credit < len(data), (q.bytes, q.credit)
    assert sw.send(data) == "p1"        # the bucket spent: this one queues
    assert sw.maps.port_queue[sw.port_id("p1")].bytes > 0
    # a full queue stays at the port's limit (the qdisc drops past it)
    _set_queue(sw, "p1", LIMIT - 10, mono_ns() + 10**9)   # "in the future": not drained
    for _ in range(5):
        assert sw.send(data) == "p1"
    assert sw.maps.port_queue[sw.port_id("p1")].bytes == LIMIT


def test_drill_matches_model(sw):
    from datapath.schemes.drill import ModelPortQueue, drill_select
    from datapath.schemes.pick import Rng

    step = st.one_of(
        st.tuples(st.just("pkt"), st.integers(64, 1400)),
        st.tuples(st.just("pkt"), st.integers(64, 1400)),
        st.tuples(st.just("pkt"), st.integers(64, 1400)),
        st.tuples(st.just("queue"), st.sampled_from(UPLINKS), st.integers(0, LIMIT),
                  st.integers(0, 20_000), st.integers(0, BURST)),
        st.tuples(st.just("down"), st.sets(st.sampled_from(UPLINKS), max_size=3)),
    )

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.integers(1, 2**32 - 1), st.integers(1, 4), st.integers(0, 2),
                      st.lists(step, min_size=1, max_size=30))
    def check(state, d, m, steps):
        sw.reset("drill", {"d": d, "m": m}, rng=state)
        rng = Rng(state)
        memory = [0, 0]
        down: set = set()
        for s in steps:
            if s[0] == "down":
                down = set(s[1])
                sw.set_down(down)
                continue
            if s[0] == "queue":         # an estimate set s[3] us ago, credit s[4]
                _set_queue(sw, s[1], s[2], mono_ns() - s[3] * 1000, s[4])
                continue
            before = {p: ModelPortQueue(b, t, RATE_BPS // 8, LIMIT, c, BURST)
                      for p, (b, t, c) in _queues(sw).items()}
            data = tcp(payload=b"z" * s[1])
            port = sw.send(data)
            if not up_set(sw, down):
                assert port is None
                continue
            now = sw.maps.port_queue[sw.port_id(port)].last_ns
            want = drill_select(sw.group, up_set(sw, down), rng, memory,
                                lambda i: before[UPLINKS[i]].at(now), d, m)
            assert port == UPLINKS[want], (s, port, UPLINKS[want])
            before[port].account(len(data), now)
            assert _queues(sw) == {p: (q.bytes, q.last_ns, q.credit) for p, q in before.items()}
            assert list(sw.maps.drill_mem.get_percpu(sw.gid)[0].port) == memory
            assert sw.rng() == rng.state

    check()


# --- Presto ---------------------------------------------------------------------------------
def presto_reset(sw, cell_bytes: int, down=()):
    """Presto on every port group, flowcells of ``cell_bytes``; its own maps
    (not a SwitchMaps': a scheme's header declares them) emptied. Returns
    (presto_flows, presto_cells) as typed maps of the loaded program."""
    import ctypes

    from datapath.maps import Map
    from datapath.schemes.presto import PrestoCell
    from datapath.structs import FlowKey

    sw.reset("presto", {"cell_bytes": cell_bytes}, down=down)
    flows = Map(os.dup(sw.dp.map_fd("presto_flows")), FlowKey, PrestoCell)
    cells = Map(os.dup(sw.dp.map_fd("presto_cells")), ctypes.c_uint32, ctypes.c_uint64)
    flows.clear()
    cells.clear()
    return flows, cells


#: a packet for Presto's tests: 1054 B, so that flowcells of a few packets are
#: inside cell_bytes' range (1500 B and up)
PRESTO_PAYLOAD = b"f" * 1000


def presto_cells(cells) -> dict[str, int]:
    from datapath.schemes.presto import CELL_COUNTERS

    return {name: cells.get(i) for i, name in CELL_COUNTERS.items()}


def test_presto_one_flowcell_one_port_then_the_next_port_in_turn(sw):
    """Flowcells of five packets: packets 1-5 of the flow leave by one port
    (the one its 5-tuple hash picks, as the model says), 6-10 by the next
    port of the group, and so on round the four uplinks; a flow shorter
    than a flowcell never moves."""
    from datapath.schemes.presto import first_usable
    from datapath.schemes.pick import up_mask

    data = tcp(payload=PRESTO_PAYLOAD)
    flows, cells = presto_reset(sw, 5 * len(data))
    key = (SRC, DST4, 40000, 5201, 6)
    start = first_usable(up_mask(sw.group, None), key, SEED)
    got = [sw.send(data) for _ in range(40)]
    assert got == [UPLINKS[(start + k // 5) % 4] for k in range(40)], got
    assert presto_cells(cells) == {"new_flowcell": 8, "same_flowcell": 32}
    c = sw.counters()
    assert c["decision_presto"] == 40 and c["scheme_fallback"] == 0
    (fk, cell), = flows.items()
    assert fk.as_tuple() == key and (cell.port, cell.bytes) == (sw.group[(start + 7) % 4],
                                                                5 * len(data))
    # a short flow (4 packets, less than a flowcell) stays on its hash's port
    short = (SRC, DST4, 40001, 5201, 6)
    ports = {sw.send(tcp(sport=40001, payload=PRESTO_PAYLOAD)) for _ in range(4)}
    assert ports == {UPLINKS[first_usable(up_mask(sw.group, None), short, SEED)]}, ports


def test_presto_a_packet_that_would_overflow_the_flowcell_starts_the_next(sw):
    """The boundary in bytes: a flowcell of exactly 3 packets' bytes takes 3;
    one byte less takes 2 (the third would overflow it)."""
    data = tcp(payload=PRESTO_PAYLOAD)
    for cell, per in ((3 * len(data), 3), (3 * len(data) - 1, 2)):
        presto_reset(sw, cell)
        got = [sw.send(data) for _ in range(4 * per)]
        runs = [got[k:k + per] for k in range(0, len(got), per)]
        assert all(len(set(r)) == 1 for r in runs), (cell, got)
        assert all(a[0] != b[0] for a, b in zip(runs, runs[1:])), (cell, got)


def test_presto_skips_a_down_port(sw):
    """p2 down (still in the group, before the agent regroups): flowcells
    go round p1, p3, p4 only. A port going down in the middle of a
    flowcell: the next packet starts a new flowcell on the next usable port."""
    from datapath.schemes.presto import first_usable
    from datapath.schemes.pick import up_mask

    data = tcp(payload=PRESTO_PAYLOAD)
    flows, cells = presto_reset(sw, 2 * len(data), down=("p2",))
    usable = ["p1", "p3", "p4"]
    key = (SRC, DST4, 40000, 5201, 6)
    start = usable.index(UPLINKS[first_usable(up_mask(sw.group, up_set(sw, ("p2",))), key, SEED)])
    got = [sw.send(data) for _ in range(12)]
    assert got == [usable[(start + k // 2) % 3] for k in range(12)], got
    # the flowcell's port goes down after its first packet
    sw.set_down(())
    flows, cells = presto_reset(sw, 4 * len(data))
    first = sw.send(data)
    sw.set_down((first,))
    after = sw.send(data)
    assert after == UPLINKS[(UPLINKS.index(first) + 1) % 4], (first, after)
    assert presto_cells(cells) == {"new_flowcell": 2, "same_flowcell": 0}


def test_presto_matches_model(sw):
    """Packets of four flows, of any size, under flowcell sizes from one
    frame to 64 KB, with ports going down and up: every packet's port, the
    new/same counts and every flow's flowcell as the model has them."""
    from datapath.schemes.presto import PrestoModel

    step = st.one_of(
        st.tuples(st.just("pkt"), st.integers(40000, 40003), st.integers(0, 1400)),
        st.tuples(st.just("pkt"), st.integers(40000, 40003), st.integers(0, 1400)),
        st.tuples(st.just("pkt"), st.integers(40000, 40003), st.integers(0, 1400)),
        st.tuples(st.just("down"), st.sets(st.sampled_from(UPLINKS), max_size=4)),
    )

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.sampled_from([1500, 3000, 9000, 65536]),
                      st.lists(step, min_size=1, max_size=40))
    def check(cell_bytes, steps):
        flows, cells = presto_reset(sw, cell_bytes)
        model = PrestoModel(cell_bytes, seed=SEED)
        down: set = set()
        for s in steps:
            if s[0] == "down":
                down = set(s[1])
                sw.set_down(down)
                continue
            data = tcp(sport=s[1], payload=b"p" * s[2])
            port = sw.send(data)
            want = model.select((SRC, DST4, s[1], 5201, 6), sw.group, up_set(sw, down), len(data))
            if not up_set(sw, down):
                assert port is None
            else:
                assert port == sw.port_of(sw.group[want]), (s, port)
        assert presto_cells(cells) == {k: model.counters[k] for k in ("new_flowcell",
                                                                      "same_flowcell")}
        assert {k.as_tuple(): (v.port, v.bytes) for k, v in flows.items()} == \
            {k: (f.port, f.bytes) for k, f in model.flows.items()}


# --- WCMP ----------------------------------------------------------------------------------
def _wcmp_reset(sw, rates: dict, down=()) -> dict:
    """WCMP on the uplinks at ``rates`` (port -> bit/s); the model's rates
    (ifindex -> bytes/s, as set_port_rates writes them)."""
    from datapath import control

    sw.reset("wcmp", down=down)
    control.set_port_rates(sw.maps, {sw.ifindex[p]: (r, LIMIT, BURST) for p, r in rates.items()})
    return {sw.ifindex[p]: r // 8 for p, r in rates.items()}


def _wcmp_flows(n: int):
    """n distinct flows to DST4: (source address, source port)."""
    return [(f"198.18.0.{1 + i % 200}", 1024 + i // 200) for i in range(n)]


def _shares_within(counts: dict, want: dict, n: int, sds: float = 5.0) -> None:
    """Each port's flow count within ``sds`` binomial standard deviations of
    n * its share (a flow hash is not random, but over thousands of flows
    it spreads like a fair draw: a bound, not the hash's exact result)."""
    for p, share in want.items():
        sd = (n * share * (1 - share)) ** 0.5
        assert abs(counts.get(p, 0) - n * share) <= sds * sd + 1, (p, counts, want)


def test_wcmp_matches_model(sw):
    """Port for port against datapath/schemes/wcmp.py: rates unknown, tiny
    (rounded up), equal, unequal and past the cap; any ports down."""
    from datapath.schemes.wcmp import wcmp_index

    rate = st.sampled_from([0, 8_000, 25_000_000, 50_000_000, 100_000_000, 10_000_000_000,
                            400_000_000_000])
    flow = st.tuples(st.integers(1, 254), st.integers(1024, 65535))

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.tuples(rate, rate, rate, rate),
                      st.sets(st.sampled_from(UPLINKS), max_size=4),
                      st.lists(flow, min_size=1, max_size=20))
    def check(rates, down, flows):
        bps = _wcmp_reset(sw, dict(zip(UPLINKS, rates)), down)
        up = up_set(sw, down)
        for host, sport in flows:
            src = f"198.18.0.{host}"
            port = sw.send(tcp(sport=sport, src=src))
            if not up:
                assert port is None
                continue
            want = wcmp_index(sw.group, up, bps, src, DST4, sport, 5201, 6, SEED)
            assert port == sw.port_of(sw.group[want]), (rates, down, host, sport)
        assert sw.counters()["decision_wcmp"] == len(flows)

    check()




def test_wcmp_flows_follow_the_rates(sw):
    """Flows split in proportion to the link rates: 2:1 on two ports, and
    4:2:1:1 on four (3000 flows each, within 5 standard deviations)."""
    n = 3000
    flows = _wcmp_flows(n)
    for rates, want in (({"p1": 200_000_000, "p2": 100_000_000}, {"p1": 2 / 3, "p2": 1 / 3}),
                        ({"p1": 400_000_000, "p2": 200_000_000, "p3": 100_000_000,
                          "p4": 100_000_000},
                         {"p1": 0.5, "p2": 0.25, "p3": 0.125, "p4": 0.125})):
        down = tuple(p for p in UPLINKS if p not in rates)
        _wcmp_reset(sw, rates, down)
        counts: dict = {}
        for src, sport in flows:
            port = sw.send(tcp(sport=sport, src=src))
            counts[port] = counts.get(port, 0) + 1
        assert set(counts) == set(rates), counts
        _shares_within(counts, want, n)


def test_wcmp_keeps_a_flow_on_one_port(sw):
    """Per flow: every packet of a flow (any size) leaves by one port."""
    _wcmp_reset(sw, {"p1": 100_000_000, "p2": 50_000_000, "p3": 25_000_000, "p4": 25_000_000})
    seen = set()
    for src, sport in _wcmp_flows(40):
        ports = {sw.send(tcp(sport=sport, src=src, payload=b"w" * size))
                 for size in (0, 64, 700, 1400, 64)}
        assert len(ports) == 1 and None not in ports, (src, sport, ports)
        seen |= ports
    assert len(seen) >= 2, seen          # and the flows did not all take one


def test_wcmp_down_port_gets_nothing(sw):
    """A port that goes down weighs 0 at once (before the agent regroups):
    the heaviest port down, its flows go to the others by their weights; all
    down, nothing is forwarded."""
    n = 2000
    flows = _wcmp_flows(n)
    rates = {"p1": 400_000_000, "p2": 200_000_000, "p3": 100_000_000, "p4": 100_000_000}
    _wcmp_reset(sw, rates, down=("p1",))
    counts: dict = {}
    for src, sport in flows:
        port = sw.send(tcp(sport=sport, src=src))
        counts[port] = counts.get(port, 0) + 1
    assert "p1" not in counts and None not in counts, counts
    _shares_within(counts, {"p2": 0.5, "p3": 0.25, "p4": 0.25}, n)
    _wcmp_reset(sw, rates, down=UPLINKS)
    assert all(sw.send(tcp(sport=sport, src=src)) is None for src, sport in flows[:50])


def test_wcmp_with_equal_rates_is_ecmp_flow_for_flow(sw):
    """Equal weights reduce to each port once: every flow takes ECMP's port
    (the same program run under ECMP, same seed) -- what lb-classic's
    symmetric-fabric check relies on."""
    flows = _wcmp_flows(500)
    _wcmp_reset(sw, {p: 100_000_000 for p in UPLINKS})
    wcmp = [sw.send(tcp(sport=sport, src=src)) for src, sport in flows]
    sw.reset("ecmp")
    ecmp = [sw.send(tcp(sport=sport, src=src)) for src, sport in flows]
    assert wcmp == ecmp
    assert set(ecmp) == set(UPLINKS)


# --- every scheme ---------------------------------------------------------------------------
#: parameters that make a scheme choose anew for every packet here (flowlet_us
#: 1: each packet a new flowlet; DRILL sampling every port it may remember)
PER_PACKET = {"letflow": {"flowlet_us": 1}, "conga": {"flowlet_us": 1}, "drill": {"d": 4, "m": 2},
              "presto": {"cell_bytes": 1500}}


#: every scheme with a program of its own (the registry's; ECMP hashes a flow
#: to one port and TaLB places tensors: test_bpf_datapath, test_talb_switch)
@pytest.mark.parametrize("scheme", [s.name for s in scheme_registry.SCHEMES if not s.inline])
def test_down_ports_are_never_chosen(sw, scheme):
    """Down ports still in the group (before the agent regroups): never
    chosen, and every usable one still is (flowlet_us 1: each packet a new
    flowlet; DRILL without rates: the estimates never drain, so it spreads)."""
    sw.reset(scheme, PER_PACKET.get(scheme, {}), down=("p2", "p4"), rates=scheme != "drill")
    seen = set()
    for i in range(200):
        seen.add(sw.send(tcp(sport=40000 + i % 7)))
    assert seen == {"p1", "p3"}, seen


def test_scheme_params_validated_and_shown(sw):
    from datapath import control

    sw.reset("ecmp")
    assert control.set_scheme(sw.maps, "drill", {"d": "3", "m": "0"}) == {"d": 3, "m": 0}
    assert control.scheme_params(sw.maps) == {"d": 3, "m": 0}
    for params, msg in (({"d": "9"}, r"--param d=9: must be 1\.\.4"),
                        ({"m": "x"}, r"--param m=x: not an integer"),
                        ({"flowlet_us": "5"}, r"--param flowlet_us=5: drill takes d, m"),
                        ({"fallback": "rps"}, r"--param fallback=rps: only TaLB")):
        with pytest.raises(control.SchemeError, match=msg):
            control.set_scheme(sw.maps, "drill", params)
    assert control.read_config(sw.maps)["scheme"] == "drill"   # refused: nothing written
    assert control.scheme_params(sw.maps) == {"d": 3, "m": 0}
    with pytest.raises(control.SchemeError, match="fallback=talb: TaLB cannot"):
        control.set_scheme(sw.maps, "talb", {"fallback": "talb"})
    with pytest.raises(control.SchemeError, match="fallback=conga: CONGA cannot"):
        control.set_scheme(sw.maps, "talb", {"fallback": "conga"})
    assert control.set_scheme(sw.maps, "conga", {"alpha_shift": "2", "q_bits": "4",
                                                 "flowlet_us": "500"}) == {
        "flowlet_us": 500, "dre_us": 125, "alpha_shift": 2, "q_bits": 4, "age_us": 20000}
    with pytest.raises(control.SchemeError, match=r"--param alpha_shift=5: must be 1\.\.4"):
        control.set_scheme(sw.maps, "conga", {"alpha_shift": "5"})
    control.set_scheme(sw.maps, "drill", {"d": "3", "m": "0"})
    got = control.set_scheme(sw.maps, "talb", {"fallback": "letflow", "flowlet_us": "300"})
    assert got["fallback"] == "letflow" and got["flowlet_us"] == 300
    assert control.set_scheme(sw.maps, "letflow") == {"flowlet_us": 300}


def test_derived_timers_are_written_and_explicit_values_win(sw):
    """set_timers (talb testbed up: the timers of the link rate, datapath/timers.py)
    writes the flowlet gap and CONGA's T_dre, alpha and age in one config
    write; a --param given later wins, and a scheme switch without one keeps
    what is in force."""
    from datapath import control, timers

    sw.reset("ecmp")
    try:
        assert control.set_timers(sw.maps, timers.derive(25_000_000)) == {}   # ECMP: none
        cfg = control.read_config(sw.maps)
        assert (cfg["flowlet_timeout_us"], cfg["conga_dre_us"], cfg["conga_alpha_shift"],
                cfg["conga_age_us"]) == (1940, 485, 3, 77_600)
        assert control.set_scheme(sw.maps, "conga", {"q_bits": "3"}) == {  # not a timer
            "flowlet_us": 1940, "dre_us": 485, "alpha_shift": 3, "q_bits": 3, "age_us": 77_600}
        assert control.set_scheme(sw.maps, "letflow", {"flowlet_us": "500"}) == {"flowlet_us": 500}
        assert control.set_scheme(sw.maps, "conga", {"age_us": "20000"}) == {
            "flowlet_us": 500, "dre_us": 485, "alpha_shift": 3, "q_bits": 3, "age_us": 20_000}
        # (the data path follows the gap in force: test_letflow_boundary_is_exactly_the_timeout)
    finally:   # the loader's values (= the timers at 100 Mbit/s) for the tests after
        control.set_timers(sw.maps, timers.derive(100_000_000))


def test_talb_fallback_letflow_places_untagged_flowlets(sw):
    from datapath import control

    sw.reset("talb", {"fallback": "letflow", "flowlet_us": 100_000})
    first = sw.send(tcp())
    for _ in range(10):
        assert sw.send(tcp()) == first
    c = sw.counters()
    assert c["talb_fallback"] == 11 and c["decision_letflow"] == 11
    assert c["flowlet_new"] == 1 and c["flowlet_same"] == 10
    assert c["decision_ecmp"] == 0 and c["scheme_fallback"] == 0
    assert _flowlet(sw).port == sw.ifindex[first]
    control.set_scheme(sw.maps, "talb", {"fallback": "rps"})
    seen = {sw.send(tcp()) for _ in range(100)}
    assert seen == set(UPLINKS)
    assert sw.counters()["decision_rps"] == 100


def test_talb_with_a_random_fallback_matches_model(sw):
    """TaLB hands untagged packets, full-table and midway tensors to RPS (a
    tail call from TaLB's program to RPS's), and remembers the port RPS
    chose for a tensor met midway: model and program agree packet by packet."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from common.wire import TaLBHeader
    from datapath import control
    from datapath.schemes import talb as tm
    from datapath.schemes.pick import Rng
    from datapath.schemes.rps import rps_select

    packet = st.tuples(st.sampled_from([True, True, False]), st.integers(0, 7),
                       st.integers(0, 3), st.integers(2, 5), st.sampled_from([False, False, True]),
                       st.sampled_from([0, 0, 0, 1, 3]))
    seen = {"talb_fallback": 0, "talb_midstream": 0, "talb_table_full": 0}

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.integers(1, 2**32 - 1), st.integers(1, 2),
                      st.lists(packet, min_size=1, max_size=25))
    def check(state, limit, packets):
        sw.reset("talb", {"fallback": "rps", "tensor_limit": limit}, rng=state)
        control.clear_tensor_table(sw.maps)
        control.set_talb_config(sw.maps, tensor_idle_us=0xFFFFFFFF)
        sw.maps.counters.clear()
        rng = Rng(state)
        model = tm.TalbModel(tensor_limit=limit)
        group = tm.ModelGroup(list(sw.group))
        for tagged, tid, layer, tlen, last, idx in packets:
            mp = tm.ModelPacket(tagged, tid, layer, tlen, last, idx, src=SRC,
                                fallback_index=lambda: rps_select(sw.group, None, rng),
                                fallback_counter="decision_rps")
            want = sw.group[model.decide(sw.gid, group, mp)]
            opts = [TaLBHeader(tid, layer, tlen, idx, last).scapy()] if tagged else []
            data = bytes(Ether() / IP(src=SRC, dst=DST4, options=opts)
                         / TCP(sport=40000, dport=5201, flags="A") / b"t")
            assert sw.send(data, "p5") == sw.port_of(want), (tagged, tid, idx)
            assert sw.rng() == rng.state
        table = {(r["src"], r["tensor_id"]): (r["tensor_len"], r["received"], r["prev_port"],
                                              r["layer"], r["group_id"])
                 for r in control.read_tensor_table(sw.maps, include_done=True)}
        assert table == model.table(include_done=True)
        c = sw.counters()
        for k in ("talb_fallback", "talb_midstream", "talb_table_full", "talb_inserted",
                  "decision_rps", "decision_talb"):
            assert c[k] == model.counters[k], k
        assert c["decision_ecmp"] == 0 and c["scheme_fallback"] == 0
        for k in seen:
            seen[k] += c[k]

    check()
    assert all(n >= 10 for n in seen.values()), seen    # every way to the fallback ran


# --- CONGA -----------------------------------------------------------------------------------
# This switch is leaf 0 (SRC behind p0, DST1 behind p5, both host ports
# here); DST4 is a host of leaf 1, reached over the uplinks p1..p4 (LBTag =
# group index); DST_SPINE stands for a spine's single-port forwarding.
LEAF = 0
DST_LEAF = 1
DST_SPINE = "198.18.2.7"


def conga_reset(sw, params=None, rng=0x1234567):
    from datapath import control

    sw.reset("ecmp", rng=rng)
    sw.maps.conga_dre.clear()
    sw.maps.conga_to_leaf.clear()
    sw.maps.conga_from_leaf.clear()
    sw.maps.conga_fb_cursor.clear()
    control.program_switch(sw.maps, [(n, sw.ifindex[n], n in ("p0", "p5"), True)
                                     for n in sw.port_names],
                           {DST4: sw.group, DST1: [sw.ifindex["p5"]],
                            DST_SPINE: [sw.ifindex["p2"]]}, scheme="ecmp")
    control.set_conga_leaves(sw.maps, LEAF, {SRC: LEAF, DST1: LEAF, DST4: DST_LEAF})
    # every parameter given: earlier tests leave theirs in the config
    defaults = {"flowlet_us": 500, "dre_us": 125, "alpha_shift": 3, "q_bits": 3,
                "age_us": 20_000}
    control.set_scheme(sw.maps, "conga", {**defaults, **(params or {})})


def conga_opt(src_leaf=DST_LEAF, lbtag=2, ce=5, fb=None):
    """The option's 8 bytes (bpf/include/talb/conga_option.h)."""
    from common.c_constants import CONST

    flags = CONST["TALB_CONGA_VERSION"] | (CONST["TALB_CONGA_F_FB"] if fb else 0)
    fb_tag, fb_metric = fb or (0, 0)
    return bytes([CONST["TALB_CONGA_IPOPT_TYPE"], 8, src_leaf, lbtag, ce, fb_tag, fb_metric, flags])


def ip_pkt(src=SRC, dst=DST4, sport=40000, options=b"", talb=None, payload=b"c" * 40):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    opts = []
    if options or talb is not None:
        raw = options + (bytes(talb.scapy()) if talb is not None else b"")
        opts = [Raw(raw)]
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=src, dst=dst, options=opts)
                 / TCP(sport=sport, dport=5201, flags="A") / payload)


def ip_checksum_ok(frame: bytes) -> bool:
    from scapy.utils import checksum

    return checksum(frame[14:14 + (frame[14] & 0x0F) * 4]) == 0


def _run_out(sw, data, ingress):
    """(egress port, the frame as it leaves)."""
    before = sw.tx()
    ret, out = sw.run(data, ingress)
    moved = {k: v - before[k] for k, v in sw.tx().items() if v != before[k]}
    assert ret == TC_ACT_REDIRECT, ret
    (port, n), = moved.items()
    return port, out


def test_conga_source_leaf_pushes_its_option_before_talbs(sw):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from common.wire import TaLBHeader

    conga_reset(sw)
    data = ip_pkt(talb=TaLBHeader(7, 1, 10, 0, False))
    port, out = _run_out(sw, data, "p0")
    assert len(out) == len(data) + 8 and out[14] & 0x0F == 5 + 3 + 2
    assert ip_checksum_ok(out)
    opt = out[34:42]
    assert opt[:4] == bytes([0x9F, 8, LEAF, UPLINKS.index(port)]), opt.hex()
    assert opt[7] & 0x03 == 1 and not opt[7] & 0x04       # version 1, no feedback yet
    assert out[42] == 0x9E                                 # TaLB's option next, unchanged
    assert out[42:54] == data[34:46]
    assert bytes(Ether(out)[TCP].payload) == b"c" * 40
    assert IP(out[14:]).len == IP(data[14:]).len + 8
    c = sw.counters()
    assert c["conga_pushed"] == 1 and c["decision_conga"] == 1 and c["flowlet_new"] == 1


def test_conga_hop_raises_ce_to_its_egress_metric(sw):
    from datapath.structs import CongaDre

    conga_reset(sw)
    # p2 loaded: X = C * tau at this instant (metric 7 of 3 bits), clock ahead
    far = mono_ns() + 10**9
    sw.maps.conga_dre[sw.port_id("p2")] = CongaDre(12_500_000 * 1_000_000 // 10**9, far)
    port, out = _run_out(sw, ip_pkt(dst=DST_SPINE, options=conga_opt(ce=2)), "p1")
    assert port == "p2" and out[34 + 4] == 7 and ip_checksum_ok(out)
    assert sw.counters()["conga_ce_raised"] == 1
    # a lower egress metric leaves CE alone
    sw.maps.conga_dre.clear()
    port, out = _run_out(sw, ip_pkt(dst=DST_SPINE, options=conga_opt(ce=2)), "p1")
    assert out[34 + 4] == 2 and sw.counters()["conga_ce_raised"] == 1


def test_conga_destination_leaf_records_strips_and_the_host_sees_neither(sw):
    from common.wire import TaLBHeader
    from datapath import control

    conga_reset(sw)
    data = ip_pkt(dst=DST1, options=conga_opt(lbtag=2, ce=5, fb=(1, 6)),
                  talb=TaLBHeader(9, 0, 10, 3, False))
    port, out = _run_out(sw, data, "p1")
    assert port == "p5"
    assert out[14] & 0x0F == 5 and len(out) == len(data) - 8 - 12 and ip_checksum_ok(out)
    assert out[34:] == data[54:]                            # TCP onwards untouched
    t = control.read_conga_tables(sw.maps)
    assert {k: m for k, (m, _) in t["from_leaf"].items()} == {(DST_LEAF, 2): 5}
    assert {k: m for k, (m, _) in t["to_leaf"].items()} == {(DST_LEAF, 1): 6}
    c = sw.counters()
    assert c["conga_stripped"] == 1 and c["conga_fb_received"] == 1 and c["stripped"] == 1


def test_conga_feedback_round_trip_moves_new_flowlets(sw):
    """Leaf 1's feedback says LBTag 1 (p2) is congested: new flowlets to
    leaf 1 leave p2 alone until that metric ages out; and what this leaf
    saw from leaf 1 goes back to it on the next packet there."""
    from datapath.structs import CongaMetric

    conga_reset(sw, {"age_us": 2_000_000})     # 2 s: longer than this test's 60 packets
    _run_out(sw, ip_pkt(dst=DST1, options=conga_opt(lbtag=3, ce=4, fb=(1, 6))), "p1")
    seen = {}
    for i in range(60):
        port, out = _run_out(sw, ip_pkt(sport=41000 + i), "p0")   # 60 new flowlets
        seen[port] = seen.get(port, 0) + 1
        if i == 0:      # the feedback for leaf 1: LBTag 3 at 4
            assert out[34 + 5:34 + 8] == bytes([3, 4, 0x05]), out[34:42].hex()
    assert "p2" not in seen and set(seen) == {"p1", "p3", "p4"}, seen
    # aged out: p2 is as good as the others again
    k = DST_LEAF * 8 + 1
    e = sw.maps.conga_to_leaf[k]
    sw.maps.conga_to_leaf[k] = CongaMetric(e.metric, 1, mono_ns() - 2_100_000_000)
    seen = {_run_out(sw, ip_pkt(sport=42000 + i), "p0")[0] for i in range(60)}
    assert seen == set(UPLINKS), seen


def test_conga_matches_model(sw):
    """New flowlets against the model: local metrics from each uplink's DRE
    (decayed to the instant the program decided: the chosen port's DRE
    update records it), remote metrics with aging, random ties."""
    from datapath.schemes.conga import CongaModel, CongaParams, Dre, Entry, metric
    from datapath.schemes.pick import Rng
    from datapath.structs import CongaDre, CongaMetric

    params = CongaParams(age_us=5_000)
    dre_st = st.tuples(st.integers(0, 40_000), st.integers(0, 3_000))     # bytes, us ago
    remote_st = st.tuples(st.integers(0, 7), st.integers(0, 8_000))      # metric, us ago

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True)
    @hypothesis.given(st.integers(1, 2**32 - 1), st.lists(dre_st, min_size=4, max_size=4),
                      st.lists(remote_st, min_size=4, max_size=4),
                      st.sets(st.sampled_from(UPLINKS), max_size=3), st.integers(1, 6))
    def check(state, dres, remotes, down, packets):
        conga_reset(sw, {"age_us": params.age_us}, rng=state)
        if down:
            sw.set_down(down)
        model = CongaModel(params)
        rng = Rng(state)
        now0 = mono_ns()
        dre = {}
        for p, (x, ago) in zip(UPLINKS, dres):
            dre[p] = Dre(x, now0 - ago * 1000)
            sw.maps.conga_dre[sw.port_id(p)] = CongaDre(dre[p].x, dre[p].last_ns)
        for i, (m, ago) in enumerate(remotes):
            sw.maps.conga_to_leaf[DST_LEAF * 8 + i] = CongaMetric(m, 1, now0 - ago * 1000)
            model.to_leaf[(DST_LEAF, i)] = Entry(m, now0 - ago * 1000)
        rate = sw.maps.port_rate[sw.port_id("p1")].bytes_per_s
        up = up_set(sw, down)
        for j in range(packets):
            data = ip_pkt(sport=43000 + j)
            before = sw.tx()
            ret, out = sw.run(data, "p0")
            moved = [k for k, v in sw.tx().items() if v != before[k]]
            if not up:
                assert ret == TC_ACT_OK and not moved
                continue
            (port,) = moved
            now = _flowlet_of(sw, 43000 + j).last_seen_ns
            local = [metric(dre[p].at(params, now)[0], rate, params) for p in UPLINKS]
            want = model.select((SRC, DST4, 43000 + j, 5201, 6), sw.group, up, DST_LEAF,
                                local, rng, now)
            assert port == UPLINKS[want], (port, UPLINKS[want], local)
            dre[port].account(params, len(data), now)    # as it arrived
            for p in UPLINKS:
                d = sw.maps.conga_dre[sw.port_id(p)]
                assert (d.x, d.last_ns) == (dre[p].x, dre[p].last_ns), p
            assert sw.rng() == rng.state

    check()


def _flowlet_of(sw, sport):
    from datapath.structs import FlowKey

    return sw.maps.flowlets.get(FlowKey.of(SRC, DST4, sport, 5201, 6))
