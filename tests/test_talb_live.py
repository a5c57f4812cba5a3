"""TaLB end to end on a live fabric: tagged tensors from real TCP senders,
the switches' tensor tables, and the option removed before the receiver.

Fabric: topologies/talb.yaml (2 spines, 2 leaves, 3 hosts per leaf, scheme
talb, 4 priority bands). Workers h0, h1,
h2 (leaf0) and h3 (leaf1) send to a parameter server h5 (leaf1): h0-h2 cross
leaf0's two uplinks; h3 is local to the PS's leaf, where the first hop is
also the last (strip before the first-hop clone).
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from common import paths
from datapath.qdisc_stats import QdiscReader
from netns_topology.state import load_topology_of
from talb import send
from workload.capture import start_capture, tensor_ports
from helpers import sends_at_once, spine_captures, spines_of, up_fabric

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
WORKERS = ["h0", "h1", "h2", "h3"]
PS = "h5"


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY).prefix


@pytest.fixture(scope="module")
def exchange(fabric, tmp_path_factory):
    """4 workers x 12 tensors over 3 layers to one PS: the report, a capture
    of what reaches the PS host (there must be no TaLB option in it), and
    the workers' host-program counters right after."""
    prefix = fabric
    pcap = tmp_path_factory.mktemp("ps") / "ps-in.pcap"
    # Every TCP packet in, tagged or not: a capture that saw the tensors'
    # packets proves it ran (tensor_ports' min_packets below).
    at_ps = start_capture(paths.netns_name(prefix, PS), "eth0", pcap, direction="in",
                          bpf_filter="tcp")
    try:
        report = send.run(prefix, WORKERS, PS, tensors=12, layers=3, size=120_000,
                          pcap_dir=str(tmp_path_factory.mktemp("uplinks")), say=lambda _m: None)
    finally:
        at_ps.stop()
    return report, tensor_ports([at_ps], min_packets=4 * 12 * 80), _host_counters(prefix, WORKERS)


def _host_counters(prefix, hosts) -> dict[str, dict[str, int]]:
    from datapath.host_maps import HostMaps

    out = {}
    for h in hosts:
        with HostMaps(paths.pin_dir(prefix, h)) as maps:
            out[h] = maps.read_counters()
    return out


def test_every_tensor_arrives_intact(exchange):
    report, _, _ = exchange
    assert len(report.tensors) == 4 * 12
    bad = [(t.worker, t.seq) for t in report.tensors if not t.ok]
    assert not bad, f"tensors lost or corrupted: {bad}"


def _talb_counters(prefix) -> dict:
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        return {k: v for k, v in read_counters(maps).items() if v and (k.startswith("talb") or k.startswith("opt"))}


def test_no_tensor_is_split_across_uplinks(fabric, exchange):
    report, _, _ = exchange
    remote = [t for t in report.tensors if t.src in ("h0", "h1", "h2")]
    unseen = [t.tensor_id for t in remote if not t.uplinks]
    assert not unseen, f"tagged tensors never seen on leaf0's uplinks: {unseen[:5]}"
    split = {t.tensor_id: t.uplinks for t in remote if t.split}
    assert not split, f"tensors split across uplinks: {split}; leaf0 counters: {_talb_counters(fabric)}"


def test_tensors_of_one_flow_use_both_uplinks(exchange):
    """Integrity is per tensor, not per flow: TaLB places each new tensor, so
    one TCP connection's tensors spread over the uplinks (ECMP would pin the
    whole connection to one)."""
    report, _, _ = exchange
    used = {p for t in report.tensors if t.src in ("h0", "h1", "h2") for p in t.uplinks}
    assert used == {"spine0", "spine1"}, used


def test_the_option_never_reaches_a_host(exchange):
    _, at_ps, _ = exchange
    assert at_ps == {}, f"{sum(len(v) for v in at_ps.values())} tagged packets reached {PS}"


def test_every_data_segment_of_the_exchange_left_tagged(exchange):
    """The workers write nothing but tensors, so each data segment leaves
    with a tag, retransmissions included: a segment with no descriptor means
    a descriptor that does not cover its tensor's bytes (a tensor described
    from a wrong stream offset tags its predecessor's tail and leaves its own
    tail untagged; tests/test_host_tagging.py
    test_stream_offset_exact_while_acks_land_between_its_reads)."""
    report, _, counters = exchange
    data_pkts = {h: sum(t.len_pkts for t in report.tensors if t.src == h) for h in WORKERS}
    for h, c in counters.items():
        untagged = {k: v for k, v in c.items()
                    if v and (k.startswith("untagged_") or k == "push_failed")}
        assert not untagged, f"{h}: data segments left untagged: {untagged}"
        assert c["tagged"] >= data_pkts[h] > 0, (h, c["tagged"], data_pkts[h])


def test_tensor_tables_empty_afterwards(fabric, exchange):
    from datapath.control import read_tensor_table
    from datapath.maps import SwitchMaps

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


# --- tensors of several hosts: the key is (source, tensor_id) (issue 8) -------

SPINES = ("spine0", "spine1")
FORCED_ID = 0x5EED0000  # both hosts' tensors get ids FORCED_ID, FORCED_ID+1, ...


def _set_scheme(prefix: str, name: str) -> None:
    from datapath.control import set_scheme
    from datapath.maps import SwitchMaps

    for sw in ("leaf0", "leaf1", *SPINES):
        with SwitchMaps(paths.pin_dir(prefix, sw)) as maps:
            set_scheme(maps, name)


def _tensors_begun_at_leaf0(prefix: str) -> int:
    """Tensors leaf0's TaLB table has seen begin: each ends either completed
    (its entry placed at the first packet, done at LAST) or, its first
    packet lost before leaf0, as one midstream fallback. A tensor merged
    into another one's entry (same key) does neither."""
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, "leaf0")) as maps:
        c = read_counters(maps)
    return c["talb_completed"] + c["talb_midstream"]


@pytest.mark.parametrize("scheme", ["talb", "ecmp"])
def test_two_hosts_same_ids_side_by_side_never_merge(fabric, tmp_path, scheme):
    """Two `talb send` runs at once from the two hosts of leaf0 (h0 -> h3,
    h1 -> h4), every sender forced to the same tensor ids: each (source,
    tensor id) crosses exactly one spine, every byte arrives intact, and
    neither report sees a split. On a switch that keys tensors by id alone,
    h1's tensors follow or cut short h0's entries, and get split."""
    prefix = fabric
    _set_scheme(prefix, scheme)
    begun = _tensors_begun_at_leaf0(prefix)
    try:
        with spine_captures(prefix, tmp_path) as caps:
            reports, errors = sends_at_once(prefix, {
                src: dict(srcs=[src], dst=dst, tensors=16, layers=3, size=150_000, port=port,
                          fixed_ids=FORCED_ID, say=lambda _m: None,
                          pcap_dir=str(tmp_path / src), timeout=120)
                for src, dst, port in (("h0", "h3", 7100), ("h1", "h4", 7101))}, join_s=180)
    finally:
        _set_scheme(prefix, "talb")
    assert not errors, errors
    tensors = [t for r in reports.values() for t in r.tensors]
    assert len(tensors) == 2 * 16
    assert {t.tensor_id for t in reports["h0"].tensors} == {t.tensor_id for t in reports["h1"].tensors}
    assert all(t.ok for t in tensors), [(t.src, t.seq) for t in tensors if not t.ok]
    spines = spines_of(caps)
    wrong = {str(k): sorted(v) for k, v in spines.items() if len(v) != 1}
    assert not wrong, f"under {scheme}, tensors on no spine or on both: {wrong}"
    assert set(spines) == {t.key for t in tensors}, \
        f"seen on the spines: {sorted(map(str, spines))}, sent: {sorted(str(t.key) for t in tensors)}"
    for src, r in reports.items():
        assert not r.split, (src, [(str(t.key), t.uplinks) for t in r.split])
        assert all(len(t.uplinks) == 1 for t in r.tensors), src
    if scheme == "talb":
        # Every (source, id) got its own entry and its own decision at leaf0.
        assert _tensors_begun_at_leaf0(prefix) - begun == len(tensors), \
            "leaf0 merged tensors of h0 and h1 that share an id"


@pytest.mark.parametrize("scheme", ["talb", "ecmp"])
def test_one_run_from_two_hosts_same_ids(fabric, scheme):
    """`talb send --src h0,h1` in one run, both senders forced to the same
    ids: the report tells the two hosts' tensors apart (0 split)."""
    prefix = fabric
    _set_scheme(prefix, scheme)
    begun = _tensors_begun_at_leaf0(prefix)
    try:
        report = send.run(prefix, ["h0", "h1"], "h3", tensors=12, layers=3, size=150_000,
                          port=7102, fixed_ids=FORCED_ID, say=lambda _m: None, timeout=120)
    finally:
        _set_scheme(prefix, "talb")
    assert len(report.tensors) == 2 * 12 and all(t.ok for t in report.tensors)
    assert len({t.tensor_id for t in report.tensors}) == 12  # the ids did coincide
    assert all(len(t.uplinks) == 1 for t in report.tensors), \
        [(str(t.key), t.uplinks) for t in report.tensors if len(t.uplinks) != 1]
    assert report.ok and not report.split
    if scheme == "talb":
        assert _tensors_begun_at_leaf0(prefix) - begun == len(report.tensors), \
            "leaf0 merged tensors of h0 and h1 that share an id"


def test_one_run_from_two_hosts_unforced_ids_are_unique_per_host(fabric):
    """Without forcing, the senders of one host (3 processes here) draw ids
    from distinct slots: no (source, id) twice."""
    report = send.run(fabric, ["h0", "h1"], "h3", tensors=10, layers=2, size=30_000, senders=3,
                      port=7103, say=lambda _m: None, timeout=120)
    keys = [t.key for t in report.tensors]
    assert len(keys) == 2 * 3 * 10 and len(set(keys)) == len(keys)
    # each sender process drew all its ids under one worker slot (a slot may
    # pass to a later process of the host once its holder exited)
    fields: dict[int, set] = {}
    for t in report.tensors:
        fields.setdefault(t.worker, set()).add(t.tensor_id & 0xF)
    assert len(fields) == 6 and all(len(f) == 1 for f in fields.values()), fields
    assert report.ok, [(str(t.key), t.ok, t.uplinks) for t in report.tensors]


# --- process hygiene: nothing left behind after a failure (issue 7) -----------

def _descendants() -> set[int]:
    """Pids of every live (or unreaped) descendant of this process."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in parent.items() if pp == p}
        out |= kids
        todo += kids
    return out


@pytest.fixture
def own_tempdir(tmp_path, monkeypatch):
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_send_worker_failure_leaves_nothing_behind(fabric, own_tempdir):
    """A sender that fails (a tensor over the 16-bit tensor_len) while the
    receiver waits for it: the error names it, and afterwards no process we
    started is alive or unreaped, and no temporary directory is left."""
    from netns_topology.state import TestbedError

    before = _descendants()
    with pytest.raises(TestbedError, match=r"sender failed: sender 0 on h0: .*tensor_len"):
        send.run(fabric, ["h0"], "h3", tensors=1, size=100_000_000, port=7104,
                 say=lambda _m: None, timeout=120)
    assert _descendants() - before == set()
    assert list(own_tempdir.iterdir()) == []


def test_send_timeout_leaves_nothing_behind(fabric, own_tempdir):
    """The exchange outlasts the timeout: every sender, the receiver and
    the captures are ended and reaped, the temporary directory removed."""
    from netns_topology.state import TestbedError

    before = _descendants()
    with pytest.raises(TestbedError, match="did not finish within 3 s"):
        send.run(fabric, ["h0", "h1"], "h3", tensors=200, size=2_000_000, port=7105,
                 say=lambda _m: None, timeout=3)
    assert _descendants() - before == set()
    assert list(own_tempdir.iterdir()) == []


_BLACKHOLE = """
import socket, sys, time
s = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
conns = []
while True:  # accept and never answer: an iperf3 client waits forever
    conns.append(s.accept()[0])
"""


def test_iperf_client_timeout_ends_the_client(fabric):
    from workload.iperf import IperfError, run_iperf3
    from workload.netexec import ns_popen, stop

    prefix = fabric
    dst = next(h for h in load_topology_of(prefix).hosts if h.name == "h4")
    hole = ns_popen(paths.netns_name(prefix, "h4"), [sys.executable, "-c", _BLACKHOLE, "7106"])
    try:
        assert hole.stdout.readline().strip() == "ready"
        before = _descendants()
        with pytest.raises(IperfError, match="did not finish within 2 s"):
            run_iperf3(paths.netns_name(prefix, "h0"), paths.netns_name(prefix, "h4"), dst.ip,
                       duration=1, port=7106, timeout=2, connect_timeout=1)
        assert _descendants() - before == set()
    finally:
        stop(hole)
