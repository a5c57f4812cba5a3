"""The agent's window in one C call (agent/pcm_native.py SwitchWindowC,
agent/pcm_window.c talb_window: the counter read, the sums over CPUs, the
deltas, the port model and the groups' PCMs) gives what the Python path
gives (statsread.PerCpuArrayReader, window.ColumnWindow, pcm.PortModel,
pcm.GroupPcm), number for number: two monitors of one switch, one on each
path, read the same counters at the same instants, loaded, still, after a
counter went backwards and with a counter past the C code's exact range."""
from __future__ import annotations

import time

import pytest

from conftest import new_prefix, skip_or_fail
from common import native


@pytest.fixture
def twins(root):
    """A 64-port bench switch (pinned maps, real veths; bench/agent_loop.py)
    and two monitors of it: C window and Python window."""
    from agent.config import AgentConfig
    from bench.agent_loop import BenchFabric, SyntheticTraffic

    if native.compiler() is None or native.disabled():
        skip_or_fail("no C compiler: the agent runs the Python window only")
    fabric = BenchFabric(64, new_prefix())
    agents, traffic = [], None
    try:
        traffic = SyntheticTraffic(fabric, seed=3)
        for _ in range(2):
            agents.append(fabric.agent(AgentConfig(window_s=0.001)))
        (c_side,) = agents[0].monitors.values()
        (py_side,) = agents[1].monitors.values()
        assert c_side._native is not None, "the C window was not used"
        py_side._native = None
        for m in (c_side, py_side):
            m.publishes = False      # one switch, two monitors: compare, don't write
        yield fabric, traffic, c_side, py_side
    finally:
        for a in agents:
            a.close()
        if traffic is not None:
            traffic.close()
        fabric.close()


def _same_window(c_side, py_side, now: float) -> tuple:
    c_side.window(now, read_qdiscs=False)
    py_side.window(now, read_qdiscs=False)
    c_raw, py_raw = c_side.latest_numbers(), py_side.latest_numbers()
    # (now, dt, ports, totals, util, d_model, qdiscs, up, groups, slow)
    assert c_raw[1] == py_raw[1]
    assert c_raw[3] == py_raw[3], "totals"
    assert c_raw[4] == py_raw[4], "utilisation"
    assert c_raw[5] == py_raw[5], "model delay"
    assert [list(p) for _g, p in c_raw[8]] == [list(p) for _g, p in py_raw[8]], "PCMs"
    return c_raw


def _set_counter(traffic, port: int, tx_bytes: int, tx_packets: int) -> None:
    """Port ``port``'s tx counters on CPU 0 (the only CPU the traffic writes)."""
    _fd, batch, values, n, ncpu = traffic._switches[0]
    base = port * ncpu * traffic.FIELDS
    values[base + 2], values[base + 3] = tx_packets, tx_bytes
    batch.update(n)


def test_c_window_matches_the_python_window(twins):
    _fabric, traffic, c_side, py_side = twins
    assert c_side._buffered, "the C window does not feed the C publication (the lists are made)"
    now = time.monotonic()
    first = _same_window(c_side, py_side, now)
    assert first[1] is None                       # the first reading: no window
    busy = []
    for k in range(40):
        if k < 30:
            traffic.step()                        # loaded; then still
        now += 0.001 + k * 1e-5
        raw = _same_window(c_side, py_side, now)
        busy.append(sum(u > 0 for u in raw[4]))
    assert min(busy[1:30]) > 10 and busy[30:] == [0] * 10, busy
    # the clock did not move: no window on either path
    assert _same_window(c_side, py_side, now)[1] is None


def test_c_window_counter_backwards_and_huge_counters(twins):
    _fabric, traffic, c_side, py_side = twins
    now = time.monotonic()
    traffic.step()
    _set_counter(traffic, 3, 10 * 1514, 10)
    _same_window(c_side, py_side, now)
    # the map made anew: port 3's counters restart below their last value
    _set_counter(traffic, 3, 1514, 1)
    now += 0.001
    raw = _same_window(c_side, py_side, now)
    assert raw[4][3] > 0
    # past 2^50 bytes in one window: the maths goes the Python way, same result
    _set_counter(traffic, 5, 2 ** 51, 2 ** 40)
    now += 0.001
    raw = _same_window(c_side, py_side, now)
    assert raw[4][5] == 1.0
    # packets of no byte: Python's division by zero on both paths
    _set_counter(traffic, 7, 0, 5)
    _set_counter(traffic, 5, 0, 0)
    now += 0.001
    with pytest.raises(ZeroDivisionError):
        c_side.window(now, read_qdiscs=False)
    with pytest.raises(ZeroDivisionError):
        py_side.window(now, read_qdiscs=False)


@pytest.mark.parametrize("threshold", [None, 0.7], ids=["S=1", "S=0.7"])
def test_c_window_feeds_the_c_publication_what_the_lists_would_publish(root, threshold):
    """The loaded window hands its PCMs from the C window to the C
    publication without a Python list (SwitchMonitor._gather): after every
    window the groups map is what one publish_pcm per group writes for the
    PCMs the window reports -- including groups that list a port twice
    (weighting it), whose PCMs go out in member order -- and a window whose
    PCMs did not change rewrites nothing."""
    from agent.config import AgentConfig
    from bench.agent_loop import BenchFabric, SyntheticTraffic
    from datapath.control import program_switch, publish_pcm
    from datapath.maps import SwitchMaps

    if native.compiler() is None or native.disabled():
        skip_or_fail("no C compiler: the agent runs the Python window only")
    fabric = BenchFabric(16, new_prefix())
    traffic = agent = None
    try:
        with SwitchMaps(fabric.pin_dir("sw0")) as maps:
            # port i is p{i} (BenchFabric installs them in order): its ifindex
            by_id = {info.port_id: ifindex for ifindex, info in maps.ports.items()}
            p = [by_id[i] for i in range(16)]
            program_switch(maps, [(f"p{i}", p[i], False, True) for i in range(16)],
                           {"198.18.0.1": [p[0], p[0], p[1], p[2]],
                            "198.18.0.2": [p[3], p[4], p[3], p[5], p[6]],
                            "198.18.0.3": p[7:15],
                            "198.18.0.4": [p[15], p[1]]})
        traffic = SyntheticTraffic(fabric, seed=11)
        agent = fabric.agent(AgentConfig(window_s=0.001, threshold=threshold))
        (m,) = agent.monitors.values()
        assert m._buffered, "the C window does not feed the C publication"
        assert sorted(len(g.members) for g in m._groups) == [2, 4, 5, 8]
        assert sum(g.positions is not None for g in m._groups) == 2
        now = time.monotonic()
        m.window(now, read_qdiscs=False)   # the first reading: no window
        written = []
        for k in range(10):
            if k < 7:
                traffic.step()             # loaded; then still
            now += 0.001
            m.window(now, read_qdiscs=False)
            after = {gid: bytes(g) for gid, g in m.maps.groups.items()}
            reading = m.latest
            assert len(reading.groups) == 4
            for g, r in zip(m._groups, reading.groups):
                publish_pcm(m.maps, g.members, dict(zip(g.distinct, r.pcm)), threshold,
                            group_id=g.gid)
            assert {gid: bytes(g) for gid, g in m.maps.groups.items()} == after, f"window {k}"
            written.append(m._publisher.written)
        moved = [b - a for a, b in zip(written, written[1:])]
        assert all(n > 0 for n in moved[:6]), moved      # PCMs changed: rewritten
        assert moved[7:] == [0, 0], moved                # unchanged: left alone
    finally:
        if agent is not None:
            agent.close()
        if traffic is not None:
            traffic.close()
        fabric.close()
