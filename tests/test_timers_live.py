"""Timers that follow the link rate, on a live fabric at fig10's rates (25
Mbit/s uplinks): the switches, `talb scheme`, `talb testbed status`, the
agent and a run's fabric settings all carry the derived values; explicit
values win; and (``-m bench``) reordering under LetFlow and CONGA with the
old 100 Mbit/s timers and with the derived ones."""
from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

import pytest

from common import paths
from netns_topology import load_topology
from testbed import lifecycle
from helpers import free_port, up_fabric

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
#: fig10 with a datacenter minimum RTO on the hosts
DERIVED = {"flowlet_timeout_us": 1940, "conga_dre_us": 485, "conga_alpha_shift": 3,
           "conga_age_us": 77_600}


@pytest.fixture(scope="module")
def fig10(request, bcc):
    topo = load_topology(ROOT / "topologies" / "fig10.yaml")
    topo.rto_min = "10ms"
    return up_fabric(request, topo, agent=True)


def _config(prefix, switch):
    from datapath.control import read_config
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, switch)) as maps:
        return read_config(maps)


def _agent_window(prefix, timeout=10.0):
    from agent.snapshot import snapshot_path

    deadline = time.monotonic() + timeout
    while True:     # the snapshot is written about once a second
        try:
            return json.loads(snapshot_path(prefix).read_text())["config"]["window_s"]
        except (OSError, ValueError, KeyError):
            assert time.monotonic() < deadline, "the agent wrote no snapshot"
            time.sleep(0.2)


def _cli(*args):
    from click.testing import CliRunner

    from talb.cli import main

    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_a_25mbit_fabric_reports_the_derived_timers(fig10):
    from datapath import timers
    from workload.experiment import fabric_settings

    prefix, topo = fig10
    derived = timers.for_topology(topo)
    assert (derived.rate_bps, derived.slot_us, derived.window_s) == (25_000_000, 485, 0.0194)
    for sw in topo.switches:
        cfg = _config(prefix, sw.name)
        assert {k: cfg[k] for k in DERIVED} == DERIVED, (sw.name, cfg)
    assert _agent_window(prefix) == pytest.approx(0.0194)

    st = lifecycle.status(prefix)
    assert st["timers"]["flowlet_us"] == 1940 and st["timers"]["window_s"] == 0.0194
    assert st["rto_min_ms"] == 10 and st["agent_window_s"] == pytest.approx(0.0194)
    assert all(s["timers"] == DERIVED for s in st["switches"]), st["switches"]
    out = _cli("testbed", "status", "--prefix", prefix)
    assert "hosts' minimum RTO: 10 ms (route metric rto_min)" in out, out
    assert ("frame slot 485 us (1514 B at 25mbit, the slowest multipath link): flowlet 1940 us, "
            "CONGA T_dre 485 us / tau 3880 us / age 77.6 ms, agent window 19.4 ms") in out, out
    assert "set:" not in out and "the running agent's" not in out, out

    out = _cli("scheme", "conga", "--prefix", prefix)
    for sw in topo.switches:
        assert (f"{sw.name}: conga (flowlet_us=1940, dre_us=485, alpha_shift=3, q_bits=3, "
                f"age_us=77600)") in out, out
    assert "(set" not in out, out

    # what a `talb run` records (workload/experiment.py)
    fabric = fabric_settings(prefix, topo, None)
    assert fabric["timers"]["flowlet_us"] == 1940 and fabric["timers"]["window_s"] == 0.0194
    assert fabric["timers"]["rules"]["window_us"] == "max(40 slots, 5000 us)"
    assert fabric["switch_config"]["leaf0"]["flowlet_timeout_us"] == 1940
    assert fabric["rto_min_ms"] == 10 and fabric["topology"]["rto_min"] == "10ms"
    from workload.run_record import agent_settings

    assert agent_settings(prefix)["config"]["window_s"] == pytest.approx(0.0194)


def test_explicit_values_win(fig10):
    from agent.daemon import start_background, stop_background

    prefix, topo = fig10
    try:
        out = _cli("scheme", "letflow", "--param", "flowlet_us=500", "--prefix", prefix)
        assert "leaf0: letflow (flowlet_us=500 (set; derived 1940))" in out, out
        # a scheme switch without --param keeps what was set
        out = _cli("scheme", "conga", "--prefix", prefix)
        assert "flowlet_us=500 (set; derived 1940), dre_us=485" in out, out
        out = _cli("testbed", "status", "--prefix", prefix)
        assert "set: flowlet_us=500 (derived 1940)" in out, out
        out = _cli("scheme", "conga", "--param", "flowlet_us=auto", "--param", "age_us=5000",
                   "--prefix", prefix)
        assert "flowlet_us=1940, dre_us=485, alpha_shift=3, q_bits=3, age_us=5000 (set; " \
               "derived 77600)" in out, out
        assert _config(prefix, "leaf1")["conga_age_us"] == 5000

        # the agent: --window-ms wins, none follows the rate
        stop_background(prefix)
        start_background(prefix, window_s=0.005, metrics_port=free_port())
        assert _agent_window(prefix) == 0.005
        assert "(the running agent's: 5 ms, set)" in _cli("testbed", "status", "--prefix", prefix)
    finally:
        from datapath import timers
        from datapath.control import set_scheme, set_timers
        from datapath.maps import SwitchMaps

        for sw in topo.switches:     # back to the derived values for the other tests
            with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
                set_timers(maps, timers.for_topology(topo))
                set_scheme(maps, "ecmp")
        stop_background(prefix)
        start_background(prefix, metrics_port=free_port())
    assert _agent_window(prefix) == pytest.approx(0.0194)


# --- reordering before / after (bench) ---------------------------------------------------
#: the timers the fabric had before they followed the rate (100 Mbit/s values)
OLD = {"flowlet_us": 500, "dre_us": 125, "age_us": 20_000}
FLOWS = (("h0", "h4"), ("h1", "h5"), ("h2", "h6"), ("h3", "h7"))   # every one across the leaves


def _transfer(prefix, topo, seconds):
    """FLOWS as 4 cubic iperf3 flows at once; sender and receiver TCP
    counters over the transfer, goodput, and leaf0's flowlet counters."""
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps
    from workload.iperf import run_iperf3
    from workload.measure import REORDER_COUNTERS, counter_delta, read_tcp_counters

    ip = {h.name: h.ip for h in topo.hosts}
    ns = {h.name: paths.netns_name(prefix, h.name) for h in topo.hosts}
    results, errors = [], []

    def one(src, dst, port):
        try:
            results.append(run_iperf3(ns[src], ns[dst], ip[dst], duration=seconds, port=port))
        except BaseException as exc:
            errors.append(exc)

    def flowlets():
        out = {}
        for leaf in ("leaf0", "leaf1"):
            with SwitchMaps(paths.pin_dir(prefix, leaf)) as maps:
                c = read_counters(maps)
            out[leaf] = (c["flowlet_new"], c["flowlet_same"])
        return out

    hosts = [h for pair in FLOWS for h in pair]
    before = {h: read_tcp_counters(ns[h]) for h in hosts}
    f0 = flowlets()
    threads = [threading.Thread(target=one, args=(s, d, 5400 + i)) for i, (s, d) in enumerate(FLOWS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    f1 = flowlets()
    d = {h: counter_delta(before[h], read_tcp_counters(ns[h])) for h in hosts}
    senders, receivers = [s for s, _ in FLOWS], [r for _, r in FLOWS]
    return {
        "reordering": sum(d[h][k] for h in senders for k in REORDER_COUNTERS),
        "retrans": sum(d[h]["retrans_segs"] for h in senders),
        "timeouts": sum(d[h]["timeouts"] for h in senders),
        "ofo": sum(d[h]["ofo_queue"] for h in receivers),
        "goodput_mbps": sum(r.received_bps for r in results) / 1e6,
        "new_flowlets": sum(f1[leaf][0] - f0[leaf][0] for leaf in f1),
        "packets": sum(f1[leaf][0] + f1[leaf][1] - f0[leaf][0] - f0[leaf][1] for leaf in f1),
    }


@pytest.mark.bench
def test_reordering_with_old_and_derived_timers(fig10, capsys):
    """4 cubic flows across the leaves of fig10's fabric (50 Mbit/s hosts, 2
    x 25 Mbit/s uplinks), 8 s each, under ECMP (reference), LetFlow and
    CONGA with the old timers (500 us gap; CONGA 125 us / 20 ms) and the
    derived ones (1940 us; 485 us / 77.6 ms), interleaved over 3 rounds:
    the senders' reordering events (TCPSACKReorder + TSReorder + RenoReorder)
    and the receivers' out-of-order queueings (TCPOFOQueue), per run."""
    from datapath import timers
    from datapath.control import set_scheme
    from datapath.maps import SwitchMaps

    prefix, topo = fig10
    derived = timers.for_topology(topo)
    new = {"flowlet_us": derived.flowlet_us, "dre_us": derived.conga_dre_us,
           "age_us": derived.conga_age_us}
    configs = [("ecmp", "-", {}),
               ("letflow", "old", {"flowlet_us": OLD["flowlet_us"]}),
               ("letflow", "derived", {"flowlet_us": new["flowlet_us"]}),
               ("conga", "old", OLD), ("conga", "derived", new)]
    rows = {(s, which): [] for s, which, _ in configs}
    for _round in range(3):
        for scheme, which, params in configs:
            for sw in topo.switches:
                with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
                    set_scheme(maps, scheme, params)
            time.sleep(0.5)
            rows[(scheme, which)].append(_transfer(prefix, topo, 8))
    with capsys.disabled():
        print("\n    scheme   timers    reordering (per run)     OFO queued    retrans  timeouts "
              " goodput Mbit/s  new flowlets / packets at the leaves")
        for (scheme, which), runs in rows.items():
            mean = {k: statistics.mean(r[k] for r in runs) for k in runs[0]}
            print(f"    {scheme:8} {which:8} {mean['reordering']:7.0f} "
                  f"{[r['reordering'] for r in runs]!s:18} {mean['ofo']:8.0f} {mean['retrans']:10.0f} "
                  f"{mean['timeouts']:8.1f} {mean['goodput_mbps']:10.1f}     "
                  f"{mean['new_flowlets']:.0f} / {mean['packets']:.0f}")
    letflow_old = statistics.mean(r["reordering"] for r in rows[("letflow", "old")])
    letflow_new = statistics.mean(r["reordering"] for r in rows[("letflow", "derived")])
    assert letflow_new < letflow_old, (letflow_old, letflow_new)
