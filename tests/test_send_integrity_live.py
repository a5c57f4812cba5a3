"""`talb send`'s split check on the XDP data path (issue 41): no capture
sees an XDP-redirected frame, so the check runs on the leaves' own record
of the ports each tagged tensor left by (tensor_egress); where nothing saw
a tensor it says "not checked" and never "0 split".

Fabric: `talb testbed up --datapath xdp --scheme talb` (2 spines x 2
leaves x 2 hosts, unshaped, the agent on), built by the command as
docs/architecture.md shows it. `talb send` runs as a user runs it (its own
process), but for the reuse of ids, which only send.run can force.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

pytestmark = [pytest.mark.live, pytest.mark.bpf]

SPINES = {"spine0", "spine1"}


@pytest.fixture(scope="module")
def fabric(request, bcc):
    from conftest import new_prefix
    from helpers import LiveFabric
    from netns_topology.state import load_topology_of
    from testbed import lifecycle

    prefix = new_prefix()
    request.addfinalizer(lambda: lifecycle.down(prefix))
    r = subprocess.run([sys.executable, "-m", "talb.cli", "testbed", "up", "--datapath", "xdp",
                        "--scheme", "talb", "--prefix", prefix],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return LiveFabric(prefix, load_topology_of(prefix))


def talb_send(prefix, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "talb.cli", "send", "--prefix", prefix, *args],
                          capture_output=True, text=True, timeout=timeout)


def split_counter(prefix, switch):
    from common import paths
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps

    with SwitchMaps(paths.pin_dir(prefix, switch)) as maps:
        return read_counters(maps)["tensor_split"]


def test_xdp_send_names_each_tensors_uplink_from_the_record(fabric):
    """h0, h1 (leaf0) -> h2 (leaf1): every tensor is named on one spine's
    uplink, both uplinks carry some, and the summary counts 0 split over
    tensors the record saw -- not over tensors nobody looked at."""
    prefix = fabric.prefix
    before = split_counter(prefix, "leaf0")
    r = talb_send(prefix, "--src", "h0,h1", "--dst", "h2", "--tensors", "10", "--size", "100kb",
                  "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert "no capture sees a redirected frame" in r.stderr
    tensors = out["tensors"]
    assert len(tensors) == 20 and all(t["ok"] for t in tensors)
    assert out["integrity"] == {"tensors": 20, "checked": 20, "split": 0, "not_checked": 0,
                                "disagree": 0, "seen_by": {"record": 20}, "captured": False,
                                "no_record": {}}
    for t in tensors:
        assert t["uplinks"] == {} and len(t["recorded"]) == 1, t
        assert t["recorded"][0] in SPINES and t["recorded_packets"] >= t["len_pkts"], t
    assert {t["recorded"][0] for t in tensors} == SPINES
    assert split_counter(prefix, "leaf0") == before
    # the table a user reads: the uplink per tensor, the summary over what was seen
    r = talb_send(prefix, "--src", "h0,h1", "--dst", "h2", "--tensors", "4", "--size", "50kb")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "8/8 tensors verified; 0 split across uplinks (seen by: record 8)" in r.stdout
    assert "not checked" not in r.stdout and "spine" in r.stdout


@contextmanager
def record_unpinned(prefix, switch):
    """The switch's tensor_egress pin removed for the block, as on a data
    path built before the record existed (the program keeps the map; it is
    pinned again afterwards)."""
    from common import paths
    from datapath.maps import Map
    from datapath.structs import TensorEgress, TensorKey

    pin = paths.pin_dir(prefix, switch) / "tensor_egress"
    m = Map.from_pin(pin, TensorKey, TensorEgress)
    os.unlink(pin)
    try:
        yield
    finally:
        m.pin(pin)
        m.close()


def test_nothing_observed_is_not_checked_never_zero_split(fabric):
    """No capture (XDP) and no record on the senders' leaf: `talb send`
    verifies the bytes and says the split check was not done -- it names
    the leaf and why, and claims no "0 split"."""
    prefix = fabric.prefix
    with record_unpinned(prefix, "leaf0"):
        text = talb_send(prefix, "--src", "h0", "--dst", "h3", "--tensors", "5", "--size", "50kb")
        js = talb_send(prefix, "--src", "h0", "--dst", "h3", "--tensors", "5", "--size", "50kb",
                       "--json")
    assert text.returncode == 0, text.stdout[-2000:] + text.stderr[-2000:]
    assert "5/5 tensors verified; split across uplinks not checked" in text.stdout
    assert "leaf0 has no record of its tensors' uplinks" in text.stdout
    assert "0 split" not in text.stdout and "spine" not in text.stdout
    assert js.returncode == 0, js.stderr[-2000:]
    n = json.loads(js.stdout)["integrity"]
    assert (n["checked"], n["not_checked"], n["split"], n["seen_by"]) == (0, 5, 0, {}), n
    assert "leaf0" in n["no_record"]
    # the record back: the same command checks again
    r = talb_send(prefix, "--src", "h0", "--dst", "h3", "--tensors", "5", "--size", "50kb",
                  "--json")
    assert json.loads(r.stdout)["integrity"]["checked"] == 5


def test_an_entry_shared_with_an_earlier_tensor_is_not_checked(fabric):
    """Two runs forcing the same ids from h1: the second run's tensors find
    entries that began with the first run's -- whose ports are not theirs
    alone -- and are reported not checked, with the reason."""
    from talb import send

    prefix = fabric.prefix
    kw = dict(tensors=6, layers=2, size=30_000, port=7210, fixed_ids=0x5A5A0000,
              say=lambda _m: None, timeout=120)
    first = send.run(prefix, ["h1"], "h2", **kw)
    assert first.integrity()["checked"] == 6 and not first.unchecked
    again = send.run(prefix, ["h1"], "h2", **kw)
    assert all(t.ok for t in again.tensors)
    assert [t.key for t in again.unchecked] == [t.key for t in again.tensors]
    assert all("earlier tensor of the same (source, id)" in t.unrecorded for t in again.tensors)
    assert not again.split


def test_pcap_dir_is_refused_on_xdp(fabric, tmp_path):
    """--pcap-dir would stay empty under XDP: refused before anything runs,
    naming the option."""
    where = tmp_path / "pcaps"
    r = talb_send(fabric.prefix, "--src", "h0", "--dst", "h2", "--pcap-dir", str(where))
    assert r.returncode != 0 and "--pcap-dir" in r.stdout + r.stderr
    assert not where.exists()
    from helpers import processes_in_hosts

    assert not any(processes_in_hosts(fabric.prefix).values())
