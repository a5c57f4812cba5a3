"""PCM maths (agent/pcm.py, docs/design.md §6, paper Eq. 1-5) against hand-computed
cases, and properties over random inputs (hypothesis). No kernel needed."""
from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import pcm
from common import native
from agent.pcm import PortLoad
from datapath.schemes.talb import pcm_to_fixed, smooth_wrr_schedule, fixed_wrr_weights

C = 100e6          # bit/s
FRAME = 1500       # bytes
T = 0.005          # s


def load(fraction: float, frame: int = FRAME, capacity: float = C, dt: float = T) -> PortLoad:
    """A window carrying ``fraction`` of the link's capacity in ``frame``-byte packets."""
    packets = round(fraction * capacity * dt / (8 * frame))
    return PortLoad(packets * frame, packets, capacity, dt)


# --- Eq. 1 ---------------------------------------------------------------------------
def test_utilization_is_bytes_over_capacity_times_window():
    # 20 packets of 1500 B in 5 ms on 100 Mbit/s: 240 kbit of 500 kbit
    assert pcm.utilization(PortLoad(30_000, 20, C, T)) == pytest.approx(0.48)


def test_utilization_uses_the_real_window_length():
    # the same bytes over a window twice as long (a late window): half the utilisation
    assert pcm.utilization(PortLoad(30_000, 20, C, 2 * T)) == pytest.approx(0.24)


def test_offered_load_above_capacity_reads_as_full():
    # counted at enqueue: 150% offered (the queue drops the excess) is U = 1, rho = 1.5
    over = PortLoad(93_750, 62, C, T)
    assert pcm.load_ratio(over) == pytest.approx(1.5)
    assert pcm.utilization(over) == 1.0


def test_idle_port():
    idle = PortLoad(0, 0, C, T)
    assert pcm.utilization(idle) == 0.0
    # nothing queued: a full frame's service time, 1514 B at 100 Mbit/s
    assert pcm.md1_delay(idle, max_wait_s=0.012) == pytest.approx(1514 * 8 / C)


@pytest.mark.parametrize("bad", [PortLoad(1, 1, 0, T), PortLoad(1, 1, C, 0)])
def test_zero_capacity_or_window_is_refused(bad):
    with pytest.raises(ValueError):
        pcm.utilization(bad)


# --- Eq. 3/4 --------------------------------------------------------------------------
def test_md1_half_load_by_hand():
    # rho = 0.5, 1500 B frames: C = 100e6 / 12000 = 8333.3 pkt/s, lambda = 4166.7 pkt/s
    # E[W] = 0.25 / (2 * 0.5 * 4166.7) + 1 / 8333.3 = 60 us + 120 us
    lam_c = C / (8 * FRAME)
    dt = 0.012  # 0.5 * 8333.33 pkt/s * 12 ms = 50 packets exactly
    d = pcm.md1_delay(PortLoad(50 * FRAME, 50, C, dt), max_wait_s=1.0)
    rho, lam = 0.5, 0.5 * lam_c
    assert d == pytest.approx(rho ** 2 / (2 * (1 - rho) * lam) + 1 / lam_c)
    assert d == pytest.approx(180e-6)


def test_md1_near_saturation_follows_the_model_until_the_buffer_cap():
    lam_c = C / (8 * FRAME)
    service = 1 / lam_c
    # rho = 0.99: model wait = 0.9801 / (2 * 0.01 * 8250) = 5.94 ms, below a 12 ms buffer
    l99 = PortLoad(99 * FRAME, 99, C, 99 / (0.99 * lam_c))
    assert pcm.load_ratio(l99) == pytest.approx(0.99)
    assert pcm.md1_delay(l99, max_wait_s=0.012) == pytest.approx(0.9801 / (2 * 0.01 * 0.99 * lam_c)
                                                                + service)
    # rho = 0.999: the model says 60 ms, the 12 ms buffer cannot hold that
    l999 = PortLoad(999 * FRAME, 999, C, 999 / (0.999 * lam_c))
    assert pcm.md1_delay(l999, max_wait_s=0.012) == pytest.approx(0.012 + service)


@pytest.mark.parametrize("rho", [1.0, 1.2, 3.0])
def test_md1_at_and_above_saturation_is_the_full_buffer(rho):
    lam_c = C / (8 * FRAME)
    n = 100
    d = pcm.md1_delay(PortLoad(n * FRAME, n, C, n / (rho * lam_c)), max_wait_s=0.012)
    assert d == pytest.approx(0.012 + 1 / lam_c)


def test_md1_delay_grows_with_load():
    delays = [pcm.md1_delay(load(f), max_wait_s=0.012) for f in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)]
    assert delays == sorted(delays) and len(set(delays)) == len(delays)


def test_md1_service_time_uses_the_window_mean_packet_size():
    small = pcm.md1_delay(PortLoad(64 * 10, 10, C, 1.0), max_wait_s=1.0)
    assert small == pytest.approx(64 * 8 / C, rel=1e-3)  # rho ~ 0: service time only


def test_measured_delay_is_backlog_drain_time():
    assert pcm.measured_delay(150_000, C) == pytest.approx(0.012)
    assert pcm.measured_delay(0, C) == 0.0


# --- Eq. 5 ---------------------------------------------------------------------------
def test_pcm_by_hand():
    # U: 0.2, 0.6, 1.0 -> 0, 0.5, 1; E: 3, 1, 2 ms -> 1, 0, 0.5
    p = pcm.group_pcm([0.2, 0.6, 1.0], [0.003, 0.001, 0.002], w1=1, w2=1)
    assert p == pytest.approx([0.5, 0.25, 0.75])
    # W1 = 3, W2 = 1: (3*U' + E') / 4
    p = pcm.group_pcm([0.2, 0.6, 1.0], [0.003, 0.001, 0.002], w1=3, w2=1)
    assert p == pytest.approx([0.25, 0.375, 0.875])


def test_all_ports_equal_gives_zero_everywhere():
    assert pcm.group_pcm([0.7, 0.7, 0.7], [0.004] * 3) == [0.0, 0.0, 0.0]


def test_one_idle_port_is_the_least_congested():
    idle = PortLoad(0, 0, C, T)
    busy = load(0.8)
    u = [pcm.utilization(busy), pcm.utilization(idle)]
    e = [pcm.md1_delay(busy, 0.012), pcm.md1_delay(idle, 0.012)]
    assert pcm.group_pcm(u, e) == [1.0, 0.0]
    assert pcm.wrr_weights([1.0, 0.0]) == [0.0, 1.0]


def test_a_term_with_max_equal_min_is_zero():
    # utilisation equal (both saturated), delays differ: only W2's term counts
    assert pcm.group_pcm([1.0, 1.0], [0.012, 0.024], w1=1, w2=1) == [0.0, 0.5]
    # W2 = 0: delay ignored, utilisation equal -> everything 0
    assert pcm.group_pcm([1.0, 1.0], [0.012, 0.024], w1=1, w2=0) == [0.0, 0.0]


def test_half_rate_port_under_saturation_has_the_higher_pcm():
    # Both ports saturated, one at half the rate: its buffer drains half as fast.
    full = PortLoad(125_000, 83, 100e6, 0.01)
    half = PortLoad(62_500, 42, 50e6, 0.01)
    u = [pcm.utilization(full), pcm.utilization(half)]
    e = [pcm.md1_delay(full, 150_000 * 8 / 100e6), pcm.md1_delay(half, 150_000 * 8 / 50e6)]
    p = pcm.group_pcm(u, e)
    assert p[1] > p[0]
    assert pcm.pcm_order(p) == [0, 1]


@pytest.mark.parametrize("args", [([0.1], [0.1, 0.2], 1, 1), ([0.1], [0.1], -1, 1),
                                  ([0.1], [0.1], 0, 0), ([math.nan], [0.1], 1, 1)])
def test_group_pcm_refuses_bad_input(args):
    with pytest.raises(ValueError):
        pcm.group_pcm(*args)


def test_weights_when_every_port_is_at_one():
    assert pcm.wrr_weights([1.0, 1.0]) == [0.5, 0.5]


# --- properties ---------------------------------------------------------------------------
ratios = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
delays = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
weights = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@st.composite
def groups(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    u = draw(st.lists(ratios, min_size=n, max_size=n))
    e = draw(st.lists(delays, min_size=n, max_size=n))
    w1 = draw(weights)
    w2 = draw(weights.filter(lambda w: w + w1 > 0))
    return u, e, w1, w2


@settings(max_examples=300, deadline=None)
@given(groups())
def test_pcm_in_unit_interval_with_extremes(g):
    u, e, w1, w2 = g
    p = pcm.group_pcm(u, e, w1, w2)
    assert len(p) == len(u)
    assert all(0.0 <= x <= 1.0 for x in p)
    # the port that is worst on both counts (if any) has P = 1, the best on both P = 0
    for i in range(len(u)):
        if u[i] == max(u) and e[i] == max(e) and (max(u) > min(u) or max(e) > min(e)):
            if (w1 > 0 and max(u) > min(u)) and (w2 > 0 and max(e) > min(e)):
                assert p[i] == pytest.approx(1.0)
        if u[i] == min(u) and e[i] == min(e):
            assert p[i] == 0.0


@settings(max_examples=300, deadline=None)
@given(groups())
def test_order_is_consistent_with_pcm(g):
    p = pcm.group_pcm(*g)
    order = pcm.pcm_order(p)
    assert sorted(order) == list(range(len(p)))
    assert all(p[a] <= p[b] for a, b in zip(order, order[1:]))


@settings(max_examples=300, deadline=None)
@given(groups())
def test_wrr_weights_are_normalised_residuals(g):
    p = pcm.group_pcm(*g)
    w = pcm.wrr_weights(p)
    assert sum(w) == pytest.approx(1.0)
    assert all(x >= 0 for x in w)
    resid = [1 - x for x in p]
    if sum(resid) > 0:
        assert w == pytest.approx([r / sum(resid) for r in resid])
        # less congested never gets less weight
        for i in range(len(p)):
            for j in range(len(p)):
                if p[i] < p[j]:
                    assert w[i] >= w[j]


@settings(max_examples=300, deadline=None)
@given(groups())
def test_published_schedule_follows_the_weights(g):
    """What publish_pcm writes (datapath.schemes.talb: fixed point, integer weights,
    smooth WRR): over one schedule each port appears its share of 1 - P_i,
    within one slot."""
    p = pcm.group_pcm(*g)
    fixed = [pcm_to_fixed(x) for x in p]
    schedule = smooth_wrr_schedule(fixed_wrr_weights(fixed))
    counts = Counter(schedule)
    share = pcm.wrr_weights(p)
    for i in range(len(p)):
        assert abs(counts.get(i, 0) - share[i] * len(schedule)) <= 1.0 + 1e-9, (p, schedule)


# --- a whole window at once (what the agent runs) ------------------------------------
@st.composite
def port_windows(draw):
    """Ports (capacity, buffer drain time) and one window's traffic on each,
    idle, light, saturated or above capacity, over a window of any length."""
    n = draw(st.integers(min_value=1, max_value=16))
    caps = draw(st.lists(st.sampled_from([10e6, 50_000_000, 100_000_000, 1e9, 25e9]),
                         min_size=n, max_size=n))
    waits = draw(st.lists(st.floats(min_value=0.0, max_value=0.1, allow_nan=False),
                          min_size=n, max_size=n))
    dt = draw(st.floats(min_value=1e-4, max_value=1.0, allow_nan=False))
    packets = draw(st.lists(st.integers(min_value=0, max_value=20_000), min_size=n, max_size=n))
    sizes = draw(st.lists(st.integers(min_value=64, max_value=9000), min_size=n, max_size=n))
    return caps, waits, dt, [k * s for k, s in zip(packets, sizes)], packets


HAVE_CC = native.compiler() is not None and not native.disabled()


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
@settings(max_examples=400, deadline=None)
@given(w=port_windows())
def test_port_model_gives_the_per_port_functions_floats_exactly(in_c, w):
    """In C (agent/pcm_window.c, where it builds) and in Python alike."""
    caps, waits, dt, tx_bytes, tx_packets = w
    model = pcm.PortModel(caps, waits, native=in_c)
    assert (model._native is not None) == (in_c and HAVE_CC)
    utils, delays = model.window(tx_bytes, tx_packets, dt)
    for i, c in enumerate(caps):
        load = PortLoad(tx_bytes[i], tx_packets[i], c, dt)
        assert utils[i] == pcm.utilization(load)      # the same float, not approximately
        assert delays[i] == pcm.md1_delay(load, waits[i])


def test_port_model_refuses_what_the_per_port_functions_refuse():
    with pytest.raises(ValueError, match="capacity"):
        pcm.PortModel([C, 0], [0.01, 0.01])
    with pytest.raises(ValueError, match="max_wait_s"):
        pcm.PortModel([C], [-1.0])
    with pytest.raises(ValueError, match="window"):
        pcm.PortModel([C], [0.01]).window([1500], [1], 0.0)


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
@settings(max_examples=300, deadline=None)
@given(gs=st.lists(groups(), min_size=1, max_size=6), data=st.data())
def test_group_pcm_of_a_window_is_group_pcm_per_group(in_c, gs, data):
    """GroupPcm over one list of ports: each group's P_i exactly group_pcm's,
    in the next window too (unchanged inputs reuse the result, changed ones
    are recomputed); in C (agent/pcm_window.c, where it builds) and in
    Python alike."""
    w1, w2 = gs[0][2], gs[0][3]
    utils = [x for u, _e, _, _ in gs for x in u]
    delays = [x for _u, e, _, _ in gs for x in e]
    idx, at = [], 0
    for u, _e, _, _ in gs:
        idx.append(list(range(at, at + len(u))))
        at += len(u)
    model = pcm.GroupPcm(idx, w1, w2, n_ports=len(utils), native=in_c)
    assert (model._native is not None) == (in_c and HAVE_CC)
    for _window in range(2):
        got = model.window(utils, delays)
        assert got == [pcm.group_pcm([utils[i] for i in g], [delays[i] for i in g], w1, w2)
                       for g in idx]
        changed = data.draw(st.integers(min_value=0, max_value=len(utils) - 1))
        utils = [*utils[:changed], data.draw(ratios), *utils[changed + 1:]]


def test_port_model_in_c_at_the_edges():
    """Idle ports, zero-byte packets, rho at and above 1, counters past the
    exact range (those go the Python way): C and Python agree exactly."""
    caps, waits = [C, C, C, C, C, 25e6], [0.012, 0.012, 0.0, 0.012, 0.012, 0.048]
    cases = [([0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1]),
             ([62_500, 125_000, 3000, 0, 10**6, 1514], [42, 83, 2, 0, 1, 1]),
             ([2 ** 50, 1, 2, 3, 4, 5], [1, 1, 1, 1, 1, 1]),
             ([62_499, 62_500, 62_501, 1, 1, 1], [1, 1, 1, 1, 0, 1])]
    c_model = pcm.PortModel(caps, waits)
    py_model = pcm.PortModel(caps, waits, native=False)
    for b, k in cases:
        assert c_model.window(b, k, T) == py_model.window(b, k, T)
    # packets of no byte: Python divides by zero; so does the model with C built
    for model in (c_model, py_model):
        with pytest.raises(ZeroDivisionError):
            model.window([0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], T)


def test_group_pcm_in_c_with_ties_and_repeated_ports():
    utils = [0.5, 0.5, 0.25, 1.0, 0.0, 0.0]
    delays = [1e-3, 2e-3, 1e-3, 1e-3, 12e-3, 12e-3]
    idx = [[0, 1], [2, 3, 4], [4, 5], [0, 1, 2, 3, 4, 5], [], [3, 0]]
    for w1, w2 in ((1.0, 1.0), (1, 3), (0.0, 2.0), (0.3, 0.7)):
        c_pcm = pcm.GroupPcm(idx, w1, w2, n_ports=6)
        py_pcm = pcm.GroupPcm(idx, w1, w2, native=False)
        assert c_pcm.window(utils, delays) == py_pcm.window(utils, delays)


def test_group_pcm_of_a_window_refuses_nan_and_bad_weights():
    with pytest.raises(ValueError, match="weights"):
        pcm.GroupPcm([[0, 1]], 0.0, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        pcm.GroupPcm([[0, 1]]).window([0.1, math.nan], [0.0, 0.0])
