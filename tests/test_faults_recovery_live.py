"""The recovery measure against a fault that must hurt, on a live fabric
(issue 41, item 2; docs/faults.md, design `uplink`, shortened): on the
4-spine uplink-bound fabric with the workers off the server's leaf, the
leaf0-spine0 uplink goes down while the agent is stopped, so the dead port
stays in every forwarding group and whatever the switches send to it is
lost: training stalls, and the recovery time must read > 0. The
undisturbed control, measured over the same span, must read 0.

Scheme TaLB: it spreads tensors over all four uplinks, so tensors in flight
on spine0 when the link dies stay on it (their entry's port is still
PORT_UP) and new ones land there too.
"""
from __future__ import annotations

import pytest

from agent.daemon import running_pid
from common import paths
from experiments.faults import DESIGNS
from workload.experiment import RunConfig, run
from workload.faults import _proc_state
from helpers import processes_in_hosts, up_fabric

pytestmark = pytest.mark.live

DESIGN = DESIGNS["uplink"]
TOPOLOGY = paths.REPO_ROOT / DESIGN.topology
AT, FOR = "3s", "1.5s"
ITERATIONS = 9           # ~0.8 s each: the nodes take ~1 s to start: ~2 s of reference, ~4 s after


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY, agent=True).prefix


def _run(prefix, out, fault):
    d = DESIGN
    cfg = RunConfig(model=d.model, arch="ps", workers=d.workers["ps"], servers=d.servers,
                    scheme="talb", load=d.load, seed=7, iterations=ITERATIONS,
                    target_link_bps=d.target_link_bps, scaling_mode=d.scaling_mode,
                    placement=d.placement, prefix=prefix, out=str(out), timeout_s=180,
                    fault=fault)
    r = run(cfg)
    f = r["fault"]
    rec = f["recovery"]
    print(rec, r["duration_s"], r["training_s"])
    print(f"\n{fault}: recovery {rec['recovery_s']} s (after undo {rec['after_restore_s']}), "
          f"degraded {rec['degraded_windows']} (stalled {rec['stalled_windows']}), worst window "
          f"{rec['worst_window']}x; CPU guard: {r['summary']['cpu_guard']['reason']}")
    assert rec["window_s"] == d.window_s and rec["settle_windows"] == d.settle_windows
    # nothing lost, nothing corrupted: the stall is a delay
    assert f["checksum_failed"] == 0 and f["not_delivered"] == 0
    assert f["verified"] == f["tensors"] == len(r["tensors"]) > 0
    assert all(i["complete"] for i in r["iterations"])
    assert rec["before"] > 100, "too little reference before the fault"
    return r, f, rec


def test_uplink_down_with_the_agent_stopped_reads_a_recovery(fabric, tmp_path):
    agent = running_pid(fabric)
    r, f, rec = _run(fabric, tmp_path / "hurt.json",
                     f"uplink-down@{AT}:for={FOR},leaf=leaf0,spine=spine0,agent=stop")
    assert f["injected"] and f["restored"] and not f["error"], f
    assert f["apply"]["agent_stopped"] == agent and f["apply"]["agent_state"] in ("T", "t")
    assert f["apply"]["down"] == ["leaf0:eth-spine0"] or f["apply"]["down"][0].startswith("leaf0:")
    # the measure sees it: windows with nothing delivered while tensors were stuck,
    # and the recovery lasts at least as long as the stall
    assert rec["stalled_windows"] > 0, rec
    assert rec["recovery_s"] >= rec["stalled_windows"] * rec["window_s"] > 0, rec
    # the agent runs again, the same process, continued; nothing of the run is left
    assert running_pid(fabric) == agent and _proc_state(agent) not in ("T", "t")
    assert not processes_in_hosts(fabric)


def test_the_control_over_the_same_span_reads_zero(fabric, tmp_path):
    r, f, rec = _run(fabric, tmp_path / "control.json", f"none@{AT}:for={FOR}")
    assert f["injected"] and f["apply"] == {}
    # no degraded window in the fault's span (1.5 s) and its settling (0.5 s)
    assert rec["recovery_s"] == 0.0 and rec["degraded_windows"] == 0, \
        (rec, r["summary"]["cpu_guard"])
