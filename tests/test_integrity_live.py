"""Tensor integrity under load from many senders at once (issue 16): on a
live fabric under TaLB, with both CPUs forwarding packets of many tensors
at the same time, every (source, tensor id) crosses exactly one spine and
every byte arrives (SHA-256, checked by the receiver).

Fabric: topologies/talb.yaml (2 spines, 2 leaves, 3 hosts per leaf). Four
hosts send both ways at once, four sender processes each: h0, h1 (leaf0)
to h3 (leaf1), and h4, h5 (leaf1) to h2 (leaf0); 16 senders, 5,008
tensors. The spines' ports are captured inbound.
"""
from __future__ import annotations

import pytest

from common import paths
from helpers import sends_at_once, spine_captures, spines_of, up_fabric

pytestmark = pytest.mark.live

SENDERS = 4                 # processes per sending host
TENSORS = 313               # per sender: 16 x 313 = 5,008 tensors
SIZE = 12_000               # bytes per tensor: 9 packets (one MSS is 1,448 B)
RUNS = ((("h0", "h1"), "h3", 7300), (("h4", "h5"), "h2", 7301))
TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY).prefix


def test_five_thousand_tensors_from_sixteen_senders_never_split(fabric, tmp_path):
    prefix = fabric
    with spine_captures(prefix, tmp_path) as caps:
        reports, errors = sends_at_once(prefix, {
            dst: dict(srcs=list(srcs), dst=dst, tensors=TENSORS, layers=4, size=SIZE,
                      senders=SENDERS, port=port, pcap_dir=str(tmp_path / dst),
                      say=lambda _m: None, timeout=400)
            for srcs, dst, port in RUNS}, join_s=450)
    assert not errors, errors
    tensors = [t for r in reports.values() for t in r.tensors]
    assert len(tensors) == 2 * 2 * SENDERS * TENSORS >= 5000
    assert len({t.key for t in tensors}) == len(tensors), "a (source, id) sent twice"
    bad = [str(t.key) for t in tensors if not t.ok]
    assert not bad, f"{len(bad)} tensors arrived damaged or incomplete: {bad[:5]}"
    spines = spines_of(caps)
    wrong = {str(k): sorted(v) for k, v in spines.items() if len(v) != 1}
    assert not wrong, f"{len(wrong)} of {len(spines)} tensors on both spines: " \
        f"{dict(list(wrong.items())[:5])}"
    missing = {t.key for t in tensors} - set(spines)
    assert not missing, f"{len(missing)} tensors seen on no spine: {sorted(map(str, missing))[:5]}"
    for dst, r in reports.items():
        assert not r.split, (dst, [(str(t.key), t.uplinks) for t in r.split][:5])
    # both uplinks of both leaves carried tensors: the decisions were real
    used = {s for v in spines.values() for s in v}
    assert used == {"spine0", "spine1"}, used
