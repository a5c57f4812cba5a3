"""RPS, LetFlow, DRILL and CONGA on a live fabric, switched at run time.

Each topology (the default fabric and topologies/asymmetric.yaml, where
leaf0 <-> spine1 runs at half rate) is built once with the BPF data path;
every scheme is then set on every switch with `talb scheme`'s function
(datapath.control.set_scheme), without reloading anything. Per scheme:
tensors sent with `talb send`'s machinery arrive byte for byte (SHA-256
at the receiver), and the scheme's signature shows in leaf0's per-port
counters. Last, schemes switch under running TCP transfers and no
connection fails.
"""
from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

import pytest

from common import paths
from datapath.schemes import registry as scheme_registry
from netns_topology import LeafSpine
from talb.demo import uplink_tx
from testbed import lifecycle
from workload.iperf import run_iperf3
from helpers import up_fabric, wait_for_streams

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = {"default": None, "asymmetric": ROOT / "topologies" / "asymmetric.yaml"}
#: every scheme with a program of its own (the registry's; ECMP and TaLB, decided
#: in the main program, have live tests of their own)
SCHEMES = tuple(s.name for s in scheme_registry.SCHEMES if not s.inline)


@pytest.fixture(scope="module", params=list(TOPOLOGIES))
def fabric(request, bcc):
    path = TOPOLOGIES[request.param]
    # `talb testbed up --scheme drill` on the asymmetric fabric
    prefix, topo = up_fabric(request, path or LeafSpine(spines=2, leaves=2, hosts_per_leaf=2),
                             scheme="drill" if request.param == "asymmetric" else None)
    initial = {s["name"]: s["scheme"] for s in lifecycle.status(prefix)["switches"]}
    assert set(initial.values()) == {topo.scheme}, initial
    return request.param, prefix, topo


def ns(prefix, node):
    return paths.netns_name(prefix, node)


def host(topo, name):
    return next(h for h in topo.hosts if h.name == name)


def set_everywhere(prefix, topo, scheme, params=None):
    from datapath.control import set_scheme
    from datapath.maps import SwitchMaps

    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            set_scheme(maps, scheme, params or {})


def counters(prefix, switch):
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, switch)) as maps:
        return read_counters(maps)


def one_flow_uplinks(prefix, topo, duration=2.0, parallel=1):
    """Bytes on each of leaf0's uplinks while h0 sends to h3."""
    before = uplink_tx(prefix, "leaf0")
    run_iperf3(ns(prefix, "h0"), ns(prefix, "h3"), host(topo, "h3").ip, duration=duration,
               parallel=parallel)
    after = uplink_tx(prefix, "leaf0")
    return {p: after[p] - before[p] for p in after}


def two_senders_uplinks(prefix, topo, duration=5.0, measure=2.5):
    """Bytes on each of leaf0's uplinks while h0 sends to h2 and h1 to h3,
    4 flows each: counted over ``measure`` s once both senders' streams are
    established and past slow start, so the two overlap for the whole count
    (on a busy machine one client can start seconds after the other, and a
    sender alone is not the load the caller judges)."""
    errors = []

    def transfer(src, dst, port):
        try:
            run_iperf3(ns(prefix, src), ns(prefix, dst), host(topo, dst).ip, duration=duration,
                       parallel=4, port=port)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=transfer, args=a) for a in (("h0", "h2", 5331),
                                                                  ("h1", "h3", 5332))]
    for t in threads:
        t.start()
    try:
        wait_for_streams(ns(prefix, "h0"), {5331: 4})
        wait_for_streams(ns(prefix, "h1"), {5332: 4})
        time.sleep(0.5)
        before = uplink_tx(prefix, "leaf0")
        time.sleep(measure)
        after = uplink_tx(prefix, "leaf0")
        overlapped = all(t.is_alive() for t in threads)
    finally:
        for t in threads:
            t.join()
    assert not errors, errors
    assert overlapped, "a sender ended before the count did: the two did not overlap"
    return {p: after[p] - before[p] for p in after}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_scheme_carries_every_byte_and_shows_its_signature(fabric, scheme):
    from talb import send

    name, prefix, topo = fabric
    set_everywhere(prefix, topo, scheme)
    # every byte: 8 tensors from two hosts of leaf0 to one of leaf1, verified
    report = send.run(prefix, ["h0", "h1"], "h3", tensors=4, layers=2, size=300_000,
                      say=lambda *_: None)
    assert len(report.tensors) == 8 and all(t.ok for t in report.tensors), \
        [(t.tensor_id, t.ok) for t in report.tensors]
    c0 = counters(prefix, "leaf0")
    assert c0[f"decision_{scheme}"] > 0 and c0["scheme_fallback"] == 0, c0

    if scheme == "rps":
        # per packet: one TCP flow on both uplinks
        delta = one_flow_uplinks(prefix, topo)
        total = sum(delta.values())
        assert total > 5_000_000, delta
        assert all(v > 0.15 * total for v in delta.values()), (scheme, delta)
    if scheme == "drill":
        # per packet to the shorter queue: while no queue forms every port
        # ties and the remembered one keeps the traffic (a lone 100 Mbit/s
        # flow stays on one uplink); under 200 Mbit/s offered to leaf0's
        # uplinks both carry, and the half-rate one of the asymmetric
        # fabric, draining slower, less than half
        delta = two_senders_uplinks(prefix, topo)
        total = sum(delta.values())
        print(f"\n    [{name}] DRILL, h0 -> h2 and h1 -> h3 (4 flows each): leaf0 uplink "
              f"bytes {delta}, spine1 share {delta['spine1'] / total:.0%}")
        # 2.5 s of 150-200 Mbit/s offered to the uplinks: 47-62 MB; 20 MB is
        # what a badly starved sender pair still moves
        assert total > 20_000_000, delta
        assert all(v > 0.15 * total for v in delta.values()), (scheme, delta)
        if name == "asymmetric":
            assert delta["spine1"] < 0.45 * total, delta
    if scheme == "conga":
        # 8 flows h0 -> h3: flowlets on both uplinks, leaf1's feedback in
        # leaf0's congestion-to-leaf table (and leaf0's CE record of leaf1's
        # traffic back), options stripped before every host (the tensors
        # above verified byte for byte); on the asymmetric fabric the
        # half-rate uplink carries clearly less than half of the bytes
        from datapath.control import read_conga_tables
        from datapath.maps import SwitchMaps

        before = counters(prefix, "leaf0")
        delta = one_flow_uplinks(prefix, topo, duration=3.0, parallel=8)
        c0, c1 = counters(prefix, "leaf0"), counters(prefix, "leaf1")
        total = sum(delta.values())
        assert total > 10_000_000 and all(v > 0.05 * total for v in delta.values()), delta
        assert c0["conga_pushed"] - before["conga_pushed"] > 1000, c0
        assert c1["conga_stripped"] > 1000 and c1["conga_fb_sent"] > 0, c1
        assert c0["conga_fb_received"] > 0 and c0["conga_drop_strip_fail"] == 0
        with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
            tables = read_conga_tables(maps)
        assert {tag for (leaf, tag) in tables["to_leaf"] if leaf == 1} == {0, 1}, tables
        print(f"\n    [{name}] CONGA, 8 flows h0 -> h3: leaf0 uplink bytes {delta}, "
              f"spine1 share {delta['spine1'] / total:.0%}; to_leaf {tables['to_leaf']}")
        if name == "asymmetric":
            assert delta["spine1"] < 0.4 * total, delta
    if scheme == "letflow":
        # flowlets: the flows' packets leave on both uplinks and the 8
        # flows started more flowlets than flows (they moved)
        before = counters(prefix, "leaf0")["flowlet_new"]
        delta = one_flow_uplinks(prefix, topo, duration=3.0, parallel=8)
        new = counters(prefix, "leaf0")["flowlet_new"] - before
        total = sum(delta.values())
        assert total > 10_000_000 and all(v > 0.05 * total for v in delta.values()), delta
        assert new > 8, f"{new} flowlets for 8 flows: none moved"


def test_cli_scheme_sets_shows_and_refuses(fabric):
    from click.testing import CliRunner

    from talb.cli import main

    from datapath import timers

    name, prefix, topo = fabric
    derived = timers.for_topology(topo)
    run = CliRunner().invoke
    r = run(main, ["scheme", "drill", "--param", "d=3", "--param", "m=2", "--prefix", prefix])
    assert r.exit_code == 0, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    # each switch, then the timers the link rate gives (docs/schemes.md)
    assert lines[:-1] == [f"{sw.name}: drill (d=3, m=2)" for sw in topo.switches], r.output
    assert lines[-1].startswith("timers from the link rate") \
        and f"flowlet {derived.flowlet_us} us" in lines[-1], r.output
    r = run(main, ["scheme", "drill", "--param", "d=0", "--prefix", prefix])
    assert r.exit_code == 1 and "--param d=0: must be 1..4" in r.output, r.output
    r = run(main, ["scheme", "letflow", "--param", "gap=3", "--prefix", prefix])
    assert r.exit_code == 1 and "--param gap=3: letflow takes flowlet_us" in r.output, r.output
    r = run(main, ["scheme", "--prefix", prefix])           # refused: nothing changed
    assert r.exit_code == 0 and f"{topo.switches[0].name}: drill (d=3, m=2)" in r.output
    r = run(main, ["scheme", "talb", "--param", "fallback=letflow", "--prefix", prefix])
    assert r.exit_code == 0, r.output
    assert "fallback=letflow" in r.output and f"flowlet_us={derived.flowlet_us}" in r.output, r.output


def test_scheme_switch_under_running_transfers(fabric):
    """8 TCP flows run while every switch cycles through the schemes (and
    TaLB with each fallback); iperf3 fails if any connection does."""
    name, prefix, topo = fabric
    errors, results = [], []

    def transfer():
        try:
            results.append(run_iperf3(ns(prefix, "h0"), ns(prefix, "h3"), host(topo, "h3").ip,
                                      duration=6, parallel=8, port=5311))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=transfer)
    t.start()
    plan = [("ecmp", {}), ("rps", {}), ("letflow", {}), ("drill", {}), ("conga", {}),
            ("talb", {"fallback": "letflow"}), ("talb", {"fallback": "drill"}),
            ("talb", {"fallback": "rps"}), ("talb", {"fallback": "ecmp"}), ("presto", {}),
            ("talb", {"fallback": "presto"}), ("ecmp", {})]
    switched = 0
    try:  # the 8 streams run (for 6 s from here), then switching starts
        wait_for_streams(ns(prefix, "h0"), {5311: 8})
    except BaseException:
        t.join()
        raise
    started = time.monotonic()
    time.sleep(0.5)
    for scheme, params in plan * 2:
        if not t.is_alive():
            break
        set_everywhere(prefix, topo, scheme, params)
        switched += 1
        time.sleep(0.25)
    t.join()
    print(f"\n    [{name}] {switched} scheme switches in {time.monotonic() - started:.1f} s of transfer")
    assert not errors, errors
    assert switched >= len(plan), f"only {switched} switches happened during the transfer"
    (r,) = results
    assert r.received_bps > 20e6, f"goodput {r.received_mbps:.1f} Mbit/s"


@pytest.mark.bench
@pytest.mark.alone  # docs/schemes.md quotes these numbers: measured on an idle machine
def test_drill_queue_estimate_against_qdisc_backlog(fabric, capsys):
    """DRILL's per-port queue estimate next to the real qdisc backlog of
    leaf0's uplinks, sampled together every 10 ms under 8 flows: h0 -> h2
    and h1 -> h3, 200 Mbit/s offered to leaf0's uplinks (200 Mbit/s on the
    default fabric, 150 on the asymmetric one: there a queue stands).
    Numbers, printed; docs/schemes.md quotes them."""
    from datapath.control import read_queue_estimates
    from datapath.maps import SwitchMaps
    from datapath.qdisc_stats import QdiscReader

    name, prefix, topo = fabric
    set_everywhere(prefix, topo, "drill")
    uplinks = [p.name for p in topo.ports("leaf0") if p.kind == "fabric"]
    pairs = []
    errors = []

    def transfer(src, dst, port):
        try:
            run_iperf3(ns(prefix, src), ns(prefix, dst), host(topo, dst).ip, duration=5,
                       parallel=4, port=port)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=transfer, args=a) for a in (("h0", "h2", 5321),
                                                                  ("h1", "h3", 5322))]
    from datapath.program import link_ifindexes
    ifindex = link_ifindexes(ns(prefix, "leaf0"), uplinks)
    with QdiscReader(ns(prefix, "leaf0")) as reader, \
            SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        for th in threads:
            th.start()
        time.sleep(1.5)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            real = {n: reader.read(n).backlog_bytes for n in uplinks}
            est = read_queue_estimates(maps)
            pairs += [(n, real[n], est[ifindex[n]]) for n in uplinks]
            time.sleep(0.01)
        for th in threads:
            th.join()
    assert not errors, errors
    assert len(pairs) > 50
    with capsys.disabled():
        for port in uplinks:
            got = [(r, e) for n, r, e in pairs if n == port]
            err = [e - r for r, e in got]
            print(f"\n    [{name}] leaf0 {port}: DRILL estimate - qdisc backlog over "
                  f"{len(got)} samples: mean {statistics.fmean(err):+.0f} B, mean |err| "
                  f"{statistics.fmean(abs(x) for x in err):.0f} B, p95 |err| "
                  f"{sorted(abs(x) for x in err)[int(0.95 * len(err))]:.0f} B; backlog mean "
                  f"{statistics.fmean(r for r, _ in got):.0f} B, max {max(r for r, _ in got)} B; "
                  f"estimate mean {statistics.fmean(e for _, e in got):.0f} B")
