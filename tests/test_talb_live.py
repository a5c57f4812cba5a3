"""TaLB end to end on a live fabric: tagged tensors from real TCP senders,
the switches' tensor tables, and the option removed before the receiver.

Fabric: topologies/talb.yaml (2 spines, 2 leaves, 3 hosts per leaf, scheme
talb, 4 priority bands). Workers h0, h1,
h2 (leaf0) and h3 (leaf1) send to a parameter server h5 (leaf1): h0-h2 cross
leaf0's two uplinks; h3 is local to the PS's leaf, where the first hop is
also the last (strip before the first-hop clone).
"""
from __future__ import annotations

import time

import pytest

from conftest import new_prefix
from agent.qdisc_stats import QdiscReader
from netns_topology import load_topology
from talb import paths, send, testbed
from workload.capture import start_capture, tensor_ports

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
WORKERS = ["h0", "h1", "h2", "h3"]
PS = "h5"


@pytest.fixture(scope="module")
def fabric(request, bcc):
    prefix = new_prefix()
    request.addfinalizer(lambda: testbed.down(prefix))
    testbed.up(load_topology(TOPOLOGY), prefix)
    return prefix


@pytest.fixture(scope="module")
def exchange(fabric, tmp_path_factory):
    """4 workers x 12 tensors over 3 layers to one PS, with a capture of what
    reaches the PS host (there must be no TaLB option in it)."""
    prefix = fabric
    pcap = tmp_path_factory.mktemp("ps") / "ps-in.pcap"
    at_ps = start_capture(paths.netns_name(prefix, PS), "eth0", pcap, direction="in")
    try:
        report = send.run(prefix, WORKERS, PS, tensors=12, layers=3, size=120_000,
                          pcap_dir=str(tmp_path_factory.mktemp("uplinks")), say=lambda _m: None)
    finally:
        at_ps.stop()
    return report, tensor_ports([at_ps])


def test_every_tensor_arrives_intact(exchange):
    report, _ = exchange
    assert len(report.tensors) == 4 * 12
    bad = [(t.worker, t.seq) for t in report.tensors if not t.ok]
    assert not bad, f"tensors lost or corrupted: {bad}"


def _talb_counters(prefix) -> dict:
    from agent.control import read_counters
    from agent.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        return {k: v for k, v in read_counters(maps).items() if v and (k.startswith("talb") or k.startswith("opt"))}


def test_no_tensor_is_split_across_uplinks(fabric, exchange):
    report, _ = exchange
    remote = [t for t in report.tensors if t.src in ("h0", "h1", "h2")]
    unseen = [t.tensor_id for t in remote if not t.uplinks]
    assert not unseen, f"tagged tensors never seen on leaf0's uplinks: {unseen[:5]}"
    split = {t.tensor_id: t.uplinks for t in remote if t.split}
    assert not split, f"tensors split across uplinks: {split}; leaf0 counters: {_talb_counters(fabric)}"


def test_tensors_of_one_flow_use_both_uplinks(exchange):
    """Integrity is per tensor, not per flow: TaLB places each new tensor, so
    one TCP connection's tensors spread over the uplinks (ECMP would pin the
    whole connection to one)."""
    report, _ = exchange
    used = {p for t in report.tensors if t.src in ("h0", "h1", "h2") for p in t.uplinks}
    assert used == {"spine0", "spine1"}, used


def test_the_option_never_reaches_a_host(exchange):
    _, at_ps = exchange
    assert at_ps == {}, f"{sum(len(v) for v in at_ps.values())} tagged packets reached {PS}"


def test_tensor_tables_empty_afterwards(fabric, exchange):
    from agent.maps import SwitchMaps
    from agent.control import read_tensor_table

    prefix = fabric
    deadline = time.monotonic() + 5
    while True:
        left = {}
        for sw in ("leaf0", "leaf1", "spine0", "spine1"):
            with SwitchMaps(paths.pin_dir(prefix, sw)) as maps:
                rows = read_tensor_table(maps)
            if rows:
                left[sw] = rows
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, f"tensor entries left behind: {left}"


def test_tensors_queue_in_their_layers_band(fabric, exchange):
    """Layer 0, 1, 2 tensors are marked into bands 1, 2, 3 (HTB classes
    1:11, 1:12, 1:13) of every port they leave through."""
    prefix = fabric
    band = {layer: 0x10011 + layer for layer in range(3)}
    with QdiscReader(paths.netns_name(prefix, "leaf0")) as reader:
        sent = [reader.class_bytes(p) for p in ("spine0", "spine1")]
    per_band = {cid: sum(s.get(cid, 0) for s in sent) for cid in band.values()}
    # h0-h2 each sent 4 tensors of 120 kB per layer across these uplinks.
    assert all(nbytes > 3 * 4 * 120_000 for nbytes in per_band.values()), per_band
    with QdiscReader(paths.netns_name(prefix, "leaf1")) as reader:
        to_ps = reader.class_bytes(PS)
    assert all(to_ps.get(cid, 0) > 4 * 4 * 120_000 for cid in band.values()), to_ps
