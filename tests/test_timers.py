"""Timers that follow the link rate (datapath/timers.py, docs/schemes.md):
known answers on constructed rates, the topologies' slowest multipath link,
and explicit values winning over derived ones. No namespaces, no BPF."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import DEFAULT_WINDOW_S
from common.c_constants import CONST
from datapath import timers
from netns_topology import LeafSpine, load_topology, topology_from_dict

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

#: (rate bit/s, MTU) -> (frame us, slot, flowlet, T_dre, tau, age, window us), by hand:
#: frame = (MTU + 14) * 8 / rate; slot = frame rounded up to 5 us; flowlet =
#: 4 max(slot, 90); T_dre = slot; tau = 8 slots; age = 160 slots; window =
#: max(40 slots, 5000)
KNOWN = {
    (100_000_000, 1500): (121.12, 125, 500, 125, 1000, 20_000, 5_000),
    (50_000_000, 1500): (242.24, 245, 980, 245, 1960, 39_200, 9_800),
    (25_000_000, 1500): (484.48, 485, 1940, 485, 3880, 77_600, 19_400),
    (12_500_000, 1500): (968.96, 970, 3880, 970, 7760, 155_200, 38_800),
    (100_000_000, 1600): (129.12, 130, 520, 130, 1040, 20_800, 5_200),
    (50_000_000, 1600): (258.24, 260, 1040, 260, 2080, 41_600, 10_400),
    (25_000_000, 1600): (516.48, 520, 2080, 520, 4160, 83_200, 20_800),
    # fast links: the flowlet gap stays above the base RTT, the window at its floor
    (1_000_000_000, 1500): (12.112, 15, 360, 15, 120, 2_400, 5_000),
    (200_000_000, 1500): (60.56, 65, 360, 65, 520, 10_400, 5_000),
}


@pytest.mark.parametrize("rate, mtu", list(KNOWN), ids=[f"{r // 10**6}M-{m}" for r, m in KNOWN])
def test_known_answers(rate, mtu):
    frame, slot, flowlet, dre, tau, age, window = KNOWN[(rate, mtu)]
    t = timers.derive(rate, mtu)
    assert t.frame_us == pytest.approx(frame)
    assert (t.slot_us, t.flowlet_us, t.conga_dre_us, t.conga_tau_us, t.conga_age_us,
            t.window_us) == (slot, flowlet, dre, tau, age, window)
    assert t.conga_alpha_shift == 3 and t.frame_bytes == mtu + 14
    assert t.window_s == pytest.approx(window / 1e6)


def test_100mbit_keeps_the_values_the_fabric_had():
    """At 100 Mbit/s and MTU 1500 every derived timer is the data path's
    compiled-in default (constants.h) and the agent's old 5 ms window."""
    t = timers.derive(100_000_000, 1500)
    assert t.flowlet_us == CONST["TALB_DEFAULT_FLOWLET_US"]
    assert t.conga_dre_us == CONST["TALB_DEFAULT_CONGA_DRE_US"]
    assert t.conga_alpha_shift == CONST["TALB_DEFAULT_CONGA_ALPHA_SHIFT"]
    assert t.conga_age_us == CONST["TALB_DEFAULT_CONGA_AGE_US"]
    assert t.window_s == DEFAULT_WINDOW_S


def test_timers_scale_with_the_frame_time():
    """Slower links, longer timers, in proportion (up to the slot's rounding)."""
    rates = [12_500_000, 25_000_000, 50_000_000, 100_000_000]
    slots = [timers.derive(r).slot_us for r in rates]
    assert slots == sorted(slots, reverse=True)
    for r in rates:
        t = timers.derive(r)
        assert t.frame_us <= t.slot_us < t.frame_us + timers.SLOT_GRID_US
        assert t.flowlet_us == 4 * t.slot_us and t.conga_tau_us == 8 * t.slot_us
        assert t.conga_age_us == 160 * t.slot_us


def test_very_slow_links_are_clamped_into_the_parameter_ranges():
    t = timers.derive(1_000)        # 1 kbit/s: a frame takes 12 s
    assert t.flowlet_us == timers.FLOWLET_MAX_US and t.conga_dre_us == timers.DRE_MAX_US
    assert t.conga_age_us == timers.AGE_MAX_US and t.window_us == timers.WINDOW_MAX_US
    with pytest.raises(ValueError, match="rate"):
        timers.derive(0)


@pytest.mark.parametrize("name, rate", [
    ("leafspine.yaml", 100_000_000), ("talb.yaml", 100_000_000),
    ("asymmetric.yaml", 50_000_000),      # leaf0's uplinks: 100 and 50 Mbit/s
    ("linkdown.yaml", 100_000_000),
    ("fig10.yaml", 25_000_000), ("fig10-fifo.yaml", 25_000_000),
    ("fig11.yaml", 12_500_000),           # leaf0 <-> spine1 at half of 25 Mbit/s
    ("testbed4x4.yaml", 25_000_000),
    ("fig10-4spine.yaml", 25_000_000), ("fig11-4spine.yaml", 12_500_000),
])
def test_slowest_multipath_link_of_each_topology(name, rate):
    topo = load_topology(TOPOLOGIES / name)
    assert timers.slowest_multipath_rate(topo) == rate
    assert timers.for_topology(topo) == timers.derive(rate, topo.mtu)


def test_multipath_means_a_choice():
    # a fast host link is not a choice; a slow single-path uplink is not either
    topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1, host_link_rate="10mbit",
                     link_rate="100mbit")
    assert timers.slowest_multipath_rate(topo) == 100_000_000   # no multipath: fabric links
    topo = LeafSpine(spines=2, leaves=2, hosts_per_leaf=1, host_link_rate="10mbit",
                     link_rate="100mbit")
    topo.set_link("leaf1", "spine1", rate="20mbit")
    assert timers.slowest_multipath_rate(topo) == 20_000_000
    topo.set_link("leaf1", "spine1", up=False)   # down: leaf0 has one path left to leaf1
    assert timers.slowest_multipath_rate(topo) == 100_000_000
    one = topology_from_dict({"switches": ["s0"], "hosts": ["h0", "h1"],
                              "links": [{"between": ["h0", "s0"], "rate": "30mbit"},
                                        {"between": ["h1", "s0"]}]})
    assert timers.slowest_multipath_rate(one) == 30_000_000


def test_to_dict_says_what_and_how():
    d = timers.derive(25_000_000).to_dict()
    assert d["rate_bps"] == 25_000_000 and d["slot_us"] == 485 and d["window_s"] == 0.0194
    assert d["conga_tau_us"] == 3880 and set(d["rules"]) >= {"flowlet_us", "window_us"}


# --- explicit values win -----------------------------------------------------------------
def test_agent_window_derived_unless_given(monkeypatch):
    from agent import daemon
    from agent.config import AgentConfig

    monkeypatch.setattr(timers, "for_prefix", lambda prefix: timers.derive(25_000_000))
    assert daemon.derived_window("p", {}) == {"window_s": 0.0194}
    assert daemon.derived_window("p", {"window_s": None, "w1": 2.0}) == {
        "window_s": 0.0194, "w1": 2.0}
    assert daemon.derived_window("p", {"window_s": 0.002}) == {"window_s": 0.002}
    AgentConfig(**daemon.derived_window("p", {}))
    # a window past the counters' interval takes the interval along, unless it is given
    monkeypatch.setattr(timers, "for_prefix", lambda prefix: timers.derive(1_000_000))
    slow = daemon.derived_window("p", {})
    assert slow["window_s"] == pytest.approx(0.4846) and slow["stats_interval_s"] == slow["window_s"]
    AgentConfig(**slow)
    assert daemon.derived_window("p", {"stats_interval_s": 1.0})["stats_interval_s"] == 1.0
    # no testbed: AgentConfig's defaults
    monkeypatch.setattr(timers, "for_prefix", lambda prefix: None)
    assert daemon.derived_window("p", {}) == {}
    assert AgentConfig(**daemon.derived_window("p", {})).window_s == DEFAULT_WINDOW_S


def test_for_prefix_without_a_testbed_is_none():
    assert timers.for_prefix("tnosuchbed") is None


def test_cli_timer_notes():
    from talb.cli import _timers_line, _timers_set

    d = timers.derive(25_000_000).to_dict()
    line = _timers_line(d)
    assert "frame slot 485 us" in line and "25mbit" in line and "flowlet 1940 us" in line
    assert "agent window 19.4 ms" in line and "set" not in line
    assert "(the running agent's: 5 ms, set)" in _timers_line(d, 0.005)
    in_force = {"flowlet_timeout_us": 1940, "conga_dre_us": 485, "conga_alpha_shift": 3,
                "conga_age_us": 77_600}
    assert _timers_set(d, in_force) == []
    assert _timers_set(d, {**in_force, "flowlet_timeout_us": 500}) == [
        "flowlet_us=500 (derived 1940)"]
