"""Offered uplink load (workload/measure.py offered_load, issue 18 item 3):
the arithmetic on hand-made tensor and background records and a small
leaf-spine topology object (no fabric built), the `talb run` line, and the
sweep's columns and summary mark (a results file without the block still
reports)."""
from __future__ import annotations

import pytest

from experiments.sweep import results as sweep_results
from experiments.sweep.stats import estimate
from experiments.sweep.summary import offered_cell
from netns_topology import LeafSpine, Topo
from talb.cli_run import offered_load_line
from workload import measure
from workload.background import uplink_capacity_bps

S = 1_000_000_000             # ns per second
T0 = 5_000 * S                # the span: [T0, T0 + 1 s]
T1 = T0 + S
# workers h0 (leaf0), h2 (leaf1); server h1 (leaf0): node ids 0, 1, 2
NODES = ["h0", "h2", "h1"]


def _topo(**kw):
    # 2 spines x 10 Mbit/s: each leaf's uplinks carry 20 Mbit/s = 2.5 MB in the 1 s span
    return LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, link_rate="10mbit", **kw)


def _tensor(src, dst, nbytes, t_start_ns):
    return {"src": src, "dst": dst, "bytes": nbytes, "t_start_ns": t_start_ns}


def _flow(src, dst, size, planned_ns, status="done", end_ns=None):
    return {"src": src, "dst": dst, "size_bytes": size, "planned_start_ns": planned_ns,
            "start_ns": planned_ns + 1000, "end_ns": end_ns, "status": status}


TENSORS = [
    _tensor(1, 2, 500_000, T0),              # h2 -> h1: leaf1 -> leaf0, at the span's start
    _tensor(0, 2, 1_000_000, T0 + S // 2),   # h0 -> h1: same leaf, no uplink: not counted
    _tensor(2, 1, 250_000, T1),              # h1 -> h2: leaf0 -> leaf1, at the span's end
    _tensor(2, 0, 999_999, T1 + 1),          # handed over after the span: not counted
]
FLOWS = [
    _flow("h0", "h3", 1_000_000, T0 + S // 2, end_ns=T1 + 5 * S),   # runs long past the span:
    # counted whole (planned start inside it)
    _flow("h2", "h0", 2_000_000, T0 - 1, end_ns=T0 + S // 2),        # planned before: not counted
    _flow("h3", "h1", 125_000, T0 + S // 4, status="censored"),       # no end: counted
    _flow("h0", "h1", 400_000, T0 + S // 4),                          # same leaf: not counted
]
UPLINKS = {"leaves": {"leaf0": {"tx_bytes": {"sw0-a": 1_000_000, "sw0-b": 500_000}},
                      "leaf1": {"tx_bytes": {"sw1-a": 250_000, "sw1-b": 0}}}}
DROPS = {"ports": {"leaf0": {"a": {"drops": 3, "sent_bytes": 750_000, "kind": "leaf_up"},
                             "b": {"drops": 4, "sent_bytes": 500_000, "kind": "leaf_up"},
                             "c": {"drops": 50, "sent_bytes": 9_000_000, "kind": "to_host"}},
                   "leaf1": {"a": {"drops": 0, "sent_bytes": 250_000, "kind": "leaf_up"}},
                   "spine0": {"a": {"drops": 9, "sent_bytes": 9_000_000, "kind": "spine_down"}}}}


def test_leaf_uplink_capacity_splits_the_background_capacity():
    topo = _topo()
    cap = measure.leaf_uplink_capacity_bps(topo)
    assert cap == {"leaf0": 20e6, "leaf1": 20e6}
    assert sum(cap.values()) == uplink_capacity_bps(topo)
    topo.set_link("leaf0", "spine1", up=False)            # a link down carries nothing
    assert measure.leaf_uplink_capacity_bps(topo) == {"leaf0": 10e6, "leaf1": 20e6}
    assert sum(measure.leaf_uplink_capacity_bps(topo).values()) == uplink_capacity_bps(topo)


def test_offered_load_counts_inter_leaf_demand_in_the_span():
    ol = measure.offered_load(_topo(), NODES, TENSORS, FLOWS, (T0, T1), UPLINKS, DROPS)
    assert ol["span_s"] == 1.0
    l0, l1 = ol["leaves"]["leaf0"], ol["leaves"]["leaf1"]
    assert (l0["training_bytes"], l0["background_bytes"]) == (250_000, 1_000_000)
    assert (l1["training_bytes"], l1["background_bytes"]) == (500_000, 125_000)
    # over 1 s x 20 Mbit/s = 2.5 MB
    assert (l0["training"], l0["background"], l0["total"]) == pytest.approx((0.1, 0.4, 0.5))
    assert (l1["training"], l1["background"], l1["total"]) == pytest.approx((0.2, 0.05, 0.25))
    assert l0["total"] == pytest.approx(l0["training"] + l0["background"])
    assert l0["capacity_bps"] == 20e6
    # what the data path forwarded to the uplinks, what their queues sent and dropped
    assert (l0["forwarded"], l1["forwarded"]) == pytest.approx((0.6, 0.1))
    assert (l0["sent"], l1["sent"]) == pytest.approx((0.5, 0.1))
    assert (l0["leaf_up_drops"], l1["leaf_up_drops"]) == (7, 0)
    assert (ol["max_total"], ol["max_leaf"]) == (pytest.approx(0.5), "leaf0")


def test_offered_load_scales_with_the_span_and_capacity():
    """Twice the span, half the fraction; a leaf's uplink down, twice its fraction."""
    ol = measure.offered_load(_topo(), NODES, TENSORS[:1], [], (T0, T0 + 2 * S))
    assert ol["leaves"]["leaf1"]["training"] == pytest.approx(0.1)
    topo = _topo()
    topo.set_link("leaf1", "spine0", up=False)
    ol = measure.offered_load(topo, NODES, TENSORS[:1], [], (T0, T1))
    assert ol["leaves"]["leaf1"]["training"] == pytest.approx(0.4)


def test_offered_load_without_background_or_counters():
    """Load 0 (no flows): background 0, total = training; no port counters
    (kernel-bridge fabric): forwarded, sent and drops None; no tensor: no block."""
    ol = measure.offered_load(_topo(), NODES, TENSORS, None, (T0, T1))
    assert all(v["background"] == 0 and v["total"] == v["training"]
               for v in ol["leaves"].values())
    assert all(v["forwarded"] is None and v["sent"] is None and v["leaf_up_drops"] is None
               for v in ol["leaves"].values())
    assert (ol["max_total"], ol["max_leaf"]) == (pytest.approx(0.2), "leaf1")
    assert measure.offered_load(_topo(), NODES, [], None, None) is None


def test_a_switch_without_uplinks_has_no_uplink_load():
    """One leaf under a spine: nothing leaves it (0); one switch and no
    fabric at all: no capacity, no fraction (None), no max."""
    one = measure.offered_load(LeafSpine(spines=1, leaves=1, hosts_per_leaf=2), ["h0", "h1"],
                               [_tensor(0, 1, 1000, T0)], None, (T0, T1))
    assert one["leaves"]["leaf0"]["total"] == 0 and one["max_total"] == 0
    topo = Topo()
    topo.add_switch("s0", role="leaf")
    for h in ("h0", "h1"):
        topo.add_link(topo.add_host(h), "s0")
    ol = measure.offered_load(topo, ["h0", "h1"], [_tensor(0, 1, 1000, T0)], None, (T0, T1))
    assert ol["leaves"]["s0"]["total"] is None and ol["max_total"] is None
    assert offered_load_line(ol) is None


def test_training_span_in_ns_and_s():
    events = [{"ev": "tx", "t_ns": T0 + 7}, {"ev": "rx", "t_ns": T1 + 3},
              {"ev": "tx", "t_ns": T0 + 9}, {"ev": "rx", "t_ns": T0 + 11}, {"ev": "iter", "t_ns": 1}]
    assert measure.training_span_ns(events) == (T0 + 7, T1 + 3)
    assert measure.training_span_s(events) == ((T0 + 7) / 1e9, (T1 + 3) / 1e9)
    assert measure.training_span_ns(events[:1]) is None


def test_run_summary_line():
    ol = measure.offered_load(_topo(), NODES, TENSORS, FLOWS, (T0, T1), UPLINKS, DROPS)
    assert offered_load_line(ol) == ("offered uplink load: 0.10 training + 0.40 background = "
                                     "0.50 on leaf0 (max; leaf1 0.25); its uplinks sent 0.50 and "
                                     "dropped 7 packets")
    heavy = measure.offered_load(_topo(), NODES, TENSORS, FLOWS * 3, (T0, T1))
    line = offered_load_line(heavy)
    assert line.startswith("offered uplink load: 0.10 training + 1.20 background = 1.30 on leaf0")
    assert "past saturation" in line and "sent" not in line
    assert offered_load_line(None) is None                 # a results file from before it


def test_sweep_columns_and_mark_from_runs_with_and_without_the_block():
    ol = measure.offered_load(_topo(), NODES, TENSORS, FLOWS, (T0, T1), UPLINKS, DROPS)
    new = sweep_results.offered({"summary": {"offered_load": ol}})
    assert new == {"offered_uplink_load": pytest.approx(0.5), "offered_uplink_training":
                   pytest.approx(0.1), "offered_uplink_background": pytest.approx(0.4),
                   "offered_uplink_leaf": "leaf0"}
    old = sweep_results.offered({"summary": {}})
    assert set(old.values()) == {None}
    rows = [{"status": "ok", "load": 0.8, "offered_uplink_load": v} for v in (0.9, 1.2, 1.05)]
    rows += [{"status": "cpu_bound", "load": 0.8, "offered_uplink_load": 3.0}]   # not counted
    (p,) = sweep_results.points(rows, fields=("load",))
    assert p["range"]["offered_uplink_load"] == [0.9, 1.2]
    assert p["est"]["offered_uplink_load"].mean == pytest.approx(1.05)
    assert offered_cell(p) == "1.05 [0.90–1.20] **past saturation**"
    assert offered_cell({"est": {"offered_uplink_load": estimate([0.5])},
                         "range": {"offered_uplink_load": [0.5, 0.5]}}) == "0.50"
    (q,) = sweep_results.points([{"status": "ok", "load": 0.2}], fields=("load",))
    assert q["range"]["offered_uplink_load"] is None and offered_cell(q) == "n/a"


def test_uplink_utilisation_is_what_the_link_carried_offered_what_was_sent_to_it():
    """On a half-rate uplink the balancer can send more than the link
    carries (the queue drops the rest): ``offered`` counts what the switch
    sent towards the port and passes 1, ``utilisation`` what the port's
    queue sent, at most the rate. Without queue counters (an unshaped
    fabric) utilisation falls back to the offered load, and says so."""
    topo = _topo()
    topo.set_link("leaf0", "spine1", rate="5mbit")              # half rate
    ups = {sw: [p.name for p in topo.ports(sw) if p.kind == "fabric"] for sw in ("leaf0", "leaf1")}
    zero = {(sw.name, p.name): (0, 0) for sw in topo.switches for p in topo.ports(sw.name)}
    fast, slow = ups["leaf0"]
    # 1 s: leaf0 sends 1.25 MB (10 Mbit/s) towards each uplink; the slow one carries 5 Mbit/s
    tx = {**zero, ("leaf0", fast): (0, 1_250_000), ("leaf0", slow): (0, 1_250_000)}
    sent = {**zero, ("leaf0", fast): (0, 1_250_000), ("leaf0", slow): (40, 625_000)}
    u = measure.uplink_spread(topo, zero, tx, 1.0, (zero, sent))
    leaf0 = u["leaves"]["leaf0"]
    assert leaf0["offered"] == {fast: pytest.approx(1.0), slow: pytest.approx(2.0)}
    assert leaf0["utilisation"] == {fast: pytest.approx(1.0), slow: pytest.approx(1.0)}
    assert leaf0["spread"] == 0                                   # the balancer's choice: even
    assert u["utilisation_from"] == "port queue sent bytes"
    bare = measure.uplink_spread(topo, zero, tx, 1.0)
    assert bare["leaves"]["leaf0"]["utilisation"] == leaf0["offered"]
    assert bare["utilisation_from"].startswith("switch tx counters")
