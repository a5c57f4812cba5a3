"""Presto on a live fabric, as a user runs it: `talb testbed up --scheme
presto` (two leaves, two spines, a host a leaf, in a process of its own),
`talb scheme` showing and changing its flowcell size. A long TCP flow
(h0 -> h1, ~20 MB: hundreds of 64 KB flowcells) is spread over both of the
source leaf's uplinks; a short one (20 KB, under one flowcell) stays on
one uplink, whole; every packet leaf0 sends up is a Presto decision."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parent.parent
TALB = Path(sys.executable).parent / "talb"
SHORT = 20_000          # bytes of a short flow: under a 64 KB flowcell with its headers


def talb(*args, timeout: float = 120):
    return subprocess.run([str(TALB), *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "COLUMNS": "200"}, timeout=timeout)


@pytest.fixture(scope="module")
def fabric(bcc, request):
    from conftest import new_prefix
    from testbed import lifecycle

    prefix = new_prefix()
    request.addfinalizer(lambda: (talb("testbed", "down", "--prefix", prefix),
                                  lifecycle.down(prefix)))
    up = talb("testbed", "up", "--prefix", prefix, "--spines", "2", "--leaves", "2",
              "--hosts-per-leaf", "1", "--no-agent", "--scheme", "presto", timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    return prefix


def _ns(prefix, host):
    from common import paths

    return paths.netns_name(prefix, host)


def _ip(prefix, host):
    from netns_topology.state import load_topology_of

    return next(h.ip for h in load_topology_of(prefix).hosts if h.name == host)


def _short_flow(prefix, port: int) -> None:
    """One TCP connection h0 -> h1 carrying SHORT bytes, whole (sockets made
    in the hosts' namespaces by this process)."""
    from helpers import socket_in

    server = socket_in(_ns(prefix, "h1"), socket.AF_INET, socket.SOCK_STREAM)
    client = socket_in(_ns(prefix, "h0"), socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((_ip(prefix, "h1"), port))
        server.listen(1)
        server.settimeout(20)
        client.settimeout(20)
        client.connect((_ip(prefix, "h1"), port))
        conn, _ = server.accept()
        with conn:
            client.sendall(b"p" * SHORT)
            client.shutdown(socket.SHUT_WR)
            got = 0
            while chunk := conn.recv(65536):
                got += len(chunk)
        assert got == SHORT
    finally:
        client.close()
        server.close()


def test_every_switch_runs_presto_and_its_parameter_is_checked(fabric):
    shown = talb("scheme", "--prefix", fabric)
    assert shown.returncode == 0, shown.stderr
    rows = [ln for ln in shown.stdout.splitlines() if ": presto (cell_bytes=65536)" in ln]
    assert len(rows) == 4, shown.stdout
    refused = talb("scheme", "presto", "--param", "cell_bytes=100", "--prefix", fabric)
    assert refused.returncode == 1
    assert "--param cell_bytes=100: must be 1500..1073741824" in refused.stdout + refused.stderr
    changed = talb("scheme", "presto", "--param", "cell_bytes=9000", "--prefix", fabric)
    assert changed.returncode == 0 and "presto (cell_bytes=9000)" in changed.stdout, changed.stdout
    back = talb("scheme", "presto", "--param", "cell_bytes=65536", "--prefix", fabric)
    assert back.returncode == 0, back.stderr


def test_a_long_flow_is_spread_and_a_short_one_stays_on_one_uplink(fabric):
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps
    from common import paths
    from talb.demo import uplink_tx
    from workload.iperf import run_iperf3

    def counters():
        with SwitchMaps(paths.pin_dir(fabric, "leaf0")) as maps:
            return read_counters(maps)

    # a long flow: one TCP stream for 2 s, flowcells in turn on both uplinks
    before, c0 = uplink_tx(fabric, "leaf0"), counters()
    run_iperf3(_ns(fabric, "h0"), _ns(fabric, "h1"), _ip(fabric, "h1"), duration=2.0)
    after, c1 = uplink_tx(fabric, "leaf0"), counters()
    delta = {p: after[p] - before[p] for p in after}
    total = sum(delta.values())
    print(f"\n    Presto, one TCP flow h0 -> h1 for 2 s: leaf0 uplink bytes {delta}")
    assert len(delta) == 2 and total > 5_000_000, delta
    # round-robin flowcells: even halves, give or take a few flowcells
    assert all(v > 0.35 * total for v in delta.values()), delta
    assert c1["decision_presto"] - c0["decision_presto"] > total // 1600, (c0, c1)
    assert c1["scheme_fallback"] == 0
    # short flows: each under one flowcell, each whole on one uplink
    for i in range(3):
        before = uplink_tx(fabric, "leaf0")
        _short_flow(fabric, 7400 + i)
        after = uplink_tx(fabric, "leaf0")
        delta = {p: after[p] - before[p] for p in after}
        used = [p for p, v in delta.items() if v]
        assert len(used) == 1 and delta[used[0]] >= SHORT, (i, delta)
