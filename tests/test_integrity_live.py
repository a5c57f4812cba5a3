"""Tensor integrity under load from many senders at once (issue 16), on
both data paths (issue 41): on a live fabric under TaLB, with both CPUs
forwarding packets of many tensors at the same time, every (source,
tensor id) crosses exactly one spine and every byte arrives (SHA-256,
checked by the receiver).

Fabric: topologies/talb.yaml (2 spines, 2 leaves, 3 hosts per leaf). Four
hosts send both ways at once, four sender processes each: h0, h1 (leaf0)
to h3 (leaf1), and h4, h5 (leaf1) to h2 (leaf0); 16 senders, 5,008
tensors.

Who carried each tensor is seen two ways. The switches' own record
(tensor_egress: the ports each tagged tensor left a switch by) on every
leaf (through `talb send`'s report) and every spine; and, on the TC data
path, captures -- the spines' ports inbound and the leaves' uplinks (`talb
send`'s) -- which must agree with it. Under XDP (`--datapath xdp`: the
same topology unshaped, as `talb testbed up --datapath xdp` builds it) no
capture sees a redirected frame: the record is the only view, and a check
that read nothing would pass vacuously, so every tensor must be in it.
"""
from __future__ import annotations

import time

import pytest

from common import paths
from helpers import sends_at_once, spine_captures, spines_of, spines_recorded, up_fabric

pytestmark = pytest.mark.live

SENDERS = 4                 # processes per sending host
TENSORS = 313               # per sender: 16 x 313 = 5,008 tensors
SIZE = 12_000               # bytes per tensor: 9 packets (one MSS is 1,448 B)
RUNS = ((("h0", "h1"), "h3", 7300), (("h4", "h5"), "h2", 7301))
TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"


@pytest.fixture(scope="module", params=["bpf", "xdp"])
def fabric(request, bcc):
    from netns_topology import load_topology

    topo = load_topology(TOPOLOGY)
    if request.param == "xdp":
        topo.shaping = False        # what `up --datapath xdp` makes of this file
    return up_fabric(request, topo, datapath=request.param).prefix, request.param


def test_five_thousand_tensors_from_sixteen_senders_never_split(fabric, tmp_path):
    prefix, datapath = fabric
    xdp = datapath == "xdp"
    t0 = time.monotonic()
    with spine_captures(prefix, tmp_path) as caps:
        reports, errors = sends_at_once(prefix, {
            dst: dict(srcs=list(srcs), dst=dst, tensors=TENSORS, layers=4, size=SIZE,
                      senders=SENDERS, port=port, say=lambda _m: None, timeout=400,
                      pcap_dir=None if xdp else str(tmp_path / dst))
            for srcs, dst, port in RUNS}, join_s=450)
    wall = time.monotonic() - t0
    assert not errors, errors
    tensors = [t for r in reports.values() for t in r.tensors]
    assert len(tensors) == 2 * 2 * SENDERS * TENSORS >= 5000
    assert len({t.key for t in tensors}) == len(tensors), "a (source, id) sent twice"
    bad = [str(t.key) for t in tensors if not t.ok]
    assert not bad, f"{len(bad)} tensors arrived damaged or incomplete: {bad[:5]}"
    # the spines' own records: each tensor on exactly one spine, both used
    recorded = spines_recorded(prefix, tensors)
    wrong = {str(k): sorted(v) for k, v in recorded.items() if len(v) != 1}
    assert not wrong, f"{len(wrong)} of {len(recorded)} tensors recorded by both spines: " \
        f"{dict(list(wrong.items())[:5])}"
    missing = {t.key for t in tensors} - set(recorded)
    assert not missing, f"{len(missing)} tensors in no spine's record: " \
        f"{sorted(map(str, missing))[:5]}"
    assert {s for v in recorded.values() for s in v} == {"spine0", "spine1"}
    if xdp:     # captures see nothing under XDP: the record is the only view
        assert not spines_of(caps), "a capture saw an XDP-redirected frame"
    else:       # TC: the spines' captures see what the spines recorded
        assert spines_of(caps) == recorded
    # `talb send`'s split check: every tensor checked, by the view the data
    # path allows, on the uplink named after the spine that recorded it
    seen_by = "record" if xdp else "capture+record"
    for dst, r in reports.items():
        n = r.integrity()
        assert (n["checked"], n["not_checked"], n["split"], n["disagree"]) == \
            (len(r.tensors), 0, 0, 0), (dst, n, [(str(t.key), t.ports) for t in r.split][:5])
        assert n["seen_by"] == {seen_by: len(r.tensors)} and n["captured"] is not xdp, (dst, n)
        off = [(str(t.key), t.ports) for t in r.tensors if t.ports != sorted(recorded[t.key])]
        assert not off, f"{dst}: leaf's uplink is not the spine that recorded it: {off[:5]}"
    print(f"\n[{datapath}] {len(tensors)} tensors from {2 * 2 * SENDERS} senders on 4 hosts: "
          f"{sum(len(r.split) for r in reports.values())} split, "
          f"{sum(len(r.unchecked) for r in reports.values())} not checked, "
          f"spines {sorted({s for v in recorded.values() for s in v})}, wall {wall:.1f} s")
