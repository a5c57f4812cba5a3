"""Pairing on a live fabric (issue 17, item 2): two runs of different schemes
at one seed, with background load, see the same background flows at the
same times relative to the start of training, receive the same background
bytes, and start training at the same offset into the plan; a run whose
training ends early still lasts its planned background; one whose training
outlasts the plan says so. Real namespaces, real TCP.

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts).
"""
from __future__ import annotations

import pytest

from common import paths
from experiments.sweep import pairing as pc
from experiments.sweep.results import CELL_FIELDS
from workload.experiment import GO_LEAD_S, RunConfig, run
from workload.scaling import scaling_for
from helpers import processes_in_hosts, up_fabric
from tiny_model import tiny_profile

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
PLAN_S = 4.0          # the background's planned seconds: training takes ~1 s


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY, agent=True).prefix


def _run(fabric, tmp_path, scheme, **kw):
    opts = dict(model="tiny", arch="ps", workers=2, servers=1, iterations=3, warmup=1,
                partition_bytes=100_000, credit_bytes=200_000, target_link_bps=100e6,
                prefix=fabric, out=str(tmp_path / f"{scheme}.json"), timeout_s=240, load=0.1,
                seed=7, background_size_scale=0.2, background_s=PLAN_S, scheme=scheme)
    return run(RunConfig(**{**opts, **kw}), profile=tiny_profile(),
               scaling=scaling_for(100e6, 100e6))


def _relative_plan(r) -> list[tuple]:
    """Every background flow: id, endpoints, size, planned start relative to
    the run's start instant (ns)."""
    t0 = r["pairing"]["t0_ns"]
    return [(f["flow_id"], f["src"], f["dst"], f["size_bytes"], f["planned_start_ns"] - t0)
            for f in r["load"]["background"]["flows"]]


@pytest.fixture(scope="module")
def two_schemes(fabric, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pairing")
    return {s: _run(fabric, tmp, s) for s in ("ecmp", "talb")}


def test_two_schemes_at_one_seed_see_the_same_background(two_schemes, fabric):
    a, b = two_schemes["ecmp"], two_schemes["talb"]
    assert {c["scheme"] for c in a["fabric"]["switch_config"].values()} == {"ecmp"}
    assert {c["scheme"] for c in b["fabric"]["switch_config"].values()} == {"talb"}
    pa, pb = a["pairing"], b["pairing"]
    # the same plan, at the same times relative to the start of training
    assert pa["background"]["plan_sha256"] == pb["background"]["plan_sha256"]
    assert _relative_plan(a) == _relative_plan(b) and len(_relative_plan(a)) >= 5
    for r in (a, b):
        p = r["pairing"]
        # the background's time origin is the run's start instant
        assert r["load"]["background"]["params"]["t0_ns"] == p["t0_ns"]
        assert p["background"]["t0_offset_s"] == 0
        # every node had its "go" ahead of the instant and woke on time (a few ms:
        # what decides the pairing is the start offset, below)
        assert p["nodes_go"] == 3
        assert 0 < p["go_received_ahead_min_s"] <= GO_LEAD_S
        assert 0 <= p["go_woke_late_max_s"] < 0.02, p
        # the sources opened each flow close to its planned time
        assert p["background"]["start_lag_max_s"] < 0.05, p["background"]
        # every planned flow completed: every planned byte arrived
        bg = p["background"]
        assert bg["started"] == bg["done"] == bg["planned_flows"], bg
        assert bg["delivered_bytes"] == bg["planned_bytes"]
        assert r["summary"]["background"]["failed"] == 0
    assert pa["background"]["delivered_bytes"] == pb["background"]["delivered_bytes"]
    # training starts at the same offset into the plan: the first tensor admitted
    # after the tiny model's forward pass and last backward step (~10 ms)
    assert 0.005 < pa["start_offset_s"] < 0.1 and 0.005 < pb["start_offset_s"] < 0.1
    assert abs(pa["start_offset_s"] - pb["start_offset_s"]) <= pc.OFFSET_TOL_S, \
        (pa["start_offset_s"], pb["start_offset_s"])
    print(f"\nstart offsets: ecmp {1e3 * pa['start_offset_s']:.2f} ms, "
          f"talb {1e3 * pb['start_offset_s']:.2f} ms; woke late at most "
          f"{1e3 * pa['go_woke_late_max_s']:.2f} / {1e3 * pb['go_woke_late_max_s']:.2f} ms; "
          f"background {pa['background']['planned_flows']} flows, "
          f"{pa['background']['delivered_bytes']} B each")
    # the summary's check calls this pair paired
    rows = [{**{f: r["config"].get(f) for f in CELL_FIELDS}, "scheme": s, "agent": "default",
             "seed": 7, "status": "ok", **pc.fields(r)} for s, r in two_schemes.items()]
    (g,) = pc.check(rows, CELL_FIELDS)
    assert g["status"] == "held", g["problems"]
    assert not processes_in_hosts(fabric)


def test_training_that_ends_early_waits_for_the_planned_background(two_schemes):
    for r in two_schemes.values():
        p = r["pairing"]
        assert p["training_end_s"] < PLAN_S / 2, "training took too long to test this"
        assert r["load"]["background_covered"] is True and p["background"]["covered"] is True
        # never cut at training's end: flows planned after it started and finished
        late = [f for f in r["load"]["background"]["flows"]
                if f["planned_start_ns"] - p["t0_ns"] > 1e9 * p["training_end_s"]]
        assert late and all(f["status"] == "done" for f in late)
        assert r["summary"]["background"]["not_started"] == 0
        # the run lasted its planned background, and ended once its last flow was done
        assert p["end_s"] >= p["background"]["last_done_s"] > p["training_end_s"]
        assert p["background"]["last_done_s"] > max(f["planned_start_ns"] - p["t0_ns"]
                                                    for f in late) / 1e9
        assert p["end_s"] < PLAN_S + 2.0, "the run waited on after its last flow"


def test_training_that_outlasts_the_plan_says_so(fabric, tmp_path):
    r = _run(fabric, tmp_path, "ecmp", background_s=0.3, iterations=8)
    p = r["pairing"]
    assert p["training_end_s"] > 0.3, "training ended within the plan: nothing to test"
    assert r["load"]["background_covered"] is False and p["background"]["covered"] is False
    # flows planned within 0.3 s of the start, every one of them run
    assert p["background"]["not_started"] == 0
    assert all(f["planned_start_ns"] - p["t0_ns"] < 0.3e9 for f in r["load"]["background"]["flows"])
    # the run ends with its training, not a drain later
    assert p["end_s"] - p["nodes_done_s"] < 1.0
    assert not processes_in_hosts(fabric)
