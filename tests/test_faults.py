"""Fault specs (`talb run --fault`) and the recovery measure, without a fabric."""
from __future__ import annotations

import pytest

from workload.faults import KINDS, counter_delta, parse_fault
from workload.forge import templates
from workload.recovery import recovery


def test_parse_fills_defaults_and_units():
    f = parse_fault("uplink-down@2s:for=500ms,leaf=leaf1")
    assert (f.kind, f.at_s, f.for_s) == ("uplink-down", 2.0, 0.5)
    assert f.params == {"for": 0.5, "leaf": "leaf1", "spine": None, "agent": "run"}
    assert parse_fault("uplink-down@3s:agent=stop").params["agent"] == "stop"
    assert parse_fault("spine-down@3s:agent=stop,for=2s").params == \
        {"for": 2.0, "spine": None, "agent": "stop"}
    assert parse_fault("scheme@1.5").params == {"for": 1.0, "to": "ecmp"}
    assert parse_fault("table-full@3s:limit=4").params["limit"] == 4
    assert parse_fault("table-full@3s").params == {"for": 1.0, "limit": 16, "rate": 500}
    assert parse_fault("none@2s").for_s == 0.0
    assert set(KINDS) == {"none", "uplink-down", "spine-down", "agent-kill", "scheme",
                          "table-full", "forged-options"}


@pytest.mark.parametrize("text, words", [
    ("bogus@2s", ["unknown kind 'bogus'", "uplink-down"]),
    ("uplink-down", ["when?", "KIND@AT"]),
    ("uplink-down@soon", ["AT must be a time", "'soon'"]),
    ("uplink-down@2s:for=0", ["for must be > 0"]),
    ("uplink-down@2s:rate=5", ["uplink-down takes for, leaf, spine", "rate=5"]),
    ("scheme@2s:to=nope", ["to=nope", "unknown scheme"]),
    ("table-full@2s:limit=0", ["limit must be >= 1"]),
    ("table-full@2s:limit=x", ["limit must be an integer", "'x'"]),
    ("agent-kill@2s:for", ["expected key=value", "'for'"]),
    ("uplink-down@2s:agent=pause", ["agent must be one of run, stop", "'pause'"]),
    ("agent-kill@2s:agent=stop", ["agent-kill takes for", "agent=stop"]),
])
def test_parse_errors_name_the_value(text, words):
    with pytest.raises(ValueError) as exc:
        parse_fault(text)
    assert str(exc.value).startswith("--fault:")
    for w in words:
        assert w in str(exc.value)


def test_counter_delta_sums_what_moved():
    before = {"a": {"x": 1, "y": 5}, "b": {"x": 0, "y": 0}}
    after = {"a": {"x": 3, "y": 5}, "b": {"x": 1, "y": 0}}
    assert counter_delta(before, after) == {"x": 3}


def test_forged_templates_carry_the_option_where_the_kind_says():
    kinds = {k for k, _, _ in templates("198.18.1.2", ["198.18.0.2"])}
    assert {"new-unfinished", "spoofed", "bad-version", "bad-length", "truncated",
            "not-first", "zero-len", "midstream", "last", "idx-past-len"} == kinds


# --- recovery ---------------------------------------------------------------------------
MS = 1_000_000


def _t(i, start_ms, fct_ms, kind="push", layer=0, warmup=False, censored=False):
    return {"key": f"k{i}", "kind": kind, "layer": layer, "warmup": warmup, "censored": censored,
            "ok": not censored,
            "t_start_ns": start_ms * MS, "t_done_ns": None if censored else (start_ms + fct_ms) * MS,
            "fct_s": None if censored else fct_ms / 1e3}


def _steady(until_ms, fct_ms=10, every_ms=20, start=0):
    return [_t(i, s, fct_ms) for i, s in enumerate(range(start, until_ms, every_ms))]


def test_undisturbed_run_recovers_at_once():
    r = recovery(_steady(4000), 2000 * MS, 3000 * MS)
    assert r["recovery_s"] == 0.0 and r["after_restore_s"] == 0.0 and r["degraded_windows"] == 0
    assert r["before"] == 100 and r["slow"] == 0 and r["worst_slowdown"] == pytest.approx(1.0)


def test_slow_period_ends_the_recovery_at_its_last_degraded_window():
    ts = _steady(2000) + [_t(1000 + i, s, 50) for i, s in enumerate(range(2000, 3000, 20))] + \
        _steady(5000, start=3000)
    r = recovery(ts, 2000 * MS, 2500 * MS, window_s=0.5)
    # tensors completing in [2.05, 3.03] s are 5x slower: the windows [2.0, 2.5) and
    # [2.5, 3.0) are degraded; in [3.0, 3.5) two slow ones among 25 at speed are not
    assert r["recovery_s"] == pytest.approx(1.0) and r["degraded_windows"] == 2
    assert r["after_restore_s"] == pytest.approx(0.5)
    assert r["slow"] == 50 and r["worst_slowdown"] == pytest.approx(5.0)


def test_a_stall_is_degraded_even_with_nothing_completing():
    ts = _steady(2000) + [_t(999, 1990, 1200)] + _steady(5000, start=3300)
    r = recovery(ts, 2000 * MS, window_s=0.5)
    # nothing completes in [2.0, 3.0) while k999 is in flight: two stalled windows; it
    # completes at 3.19 s among tensors at speed (the median decides: not degraded)
    assert r["recovery_s"] == pytest.approx(1.0) and r["degraded_windows"] == 2


def test_a_lost_tensor_means_no_recovery():
    ts = _steady(4000) + [_t(999, 2100, 0, censored=True)]
    r = recovery(ts, 2000 * MS)
    assert r["recovery_s"] is None and r["lost"] == 1 and "never delivered" in r["reason"]


def test_references_are_per_kind_and_layer():
    # pulls take 10x as long as pushes; after the fault both keep their speed
    ts = [_t(i, s, 10) for i, s in enumerate(range(0, 4000, 20))] + \
        [_t(500 + i, s, 100, kind="pull") for i, s in enumerate(range(0, 4000, 20))]
    r = recovery(ts, 2000 * MS)
    assert r["recovery_s"] == 0.0 and r["slow"] == 0


def test_no_reference_no_number():
    r = recovery(_steady(4000), 0)
    assert r["recovery_s"] is None and "before the fault" in r["reason"]


def test_names_are_checked_against_the_topology():
    from common import paths
    from netns_topology import load_topology
    from workload.faults import check_names

    topo = load_topology(paths.REPO_ROOT / "topologies" / "talb.yaml")
    check_names(parse_fault("uplink-down@1s:leaf=leaf1,spine=spine1"), topo)
    with pytest.raises(ValueError, match=r"--fault spine=spine7: no such spine \(spines: spine0, spine1\)"):
        check_names(parse_fault("spine-down@1s:spine=spine7"), topo)
    with pytest.raises(ValueError, match=r"--fault leaf=spine0: no such leaf"):
        check_names(parse_fault("uplink-down@1s:leaf=spine0"), topo)
    with pytest.raises(ValueError, match=r"--fault from=h9: no such host"):
        check_names(parse_fault("forged-options@1s:from=h9"), topo)


# --- the measure on timelines shaped like the `uplink` design's (docs/faults.md) ------------
# PS, 4 workers, ~300 tensors/s over three classes (push/pull of a short and a long
# layer), FCTs jittered (lognormal, sigma 0.5: the undisturbed runs' spread, their max
# ~3-4x the median), one iteration's tensors depending on the previous ones'.
def _training(seed, until_ms, stall=None, slow=None):
    """Tensors every ~13 ms, round-robin over 4 workers and 4 classes; ``stall``
    (worker, t0_ms, t1_ms): that worker's tensors sent in [t0, t1) are blackholed
    and complete only after t1 plus a retransmission backoff, and every other
    worker's tensors wait for them (synchronous training: no new tensor starts
    until the stuck ones are through); ``slow`` (t0_ms, t1_ms, factor): every
    tensor sent in [t0, t1) takes ``factor`` times as long."""
    import random

    rng = random.Random(seed)
    base = {("push", 0): 20, ("pull", 0): 30, ("push", 2): 60, ("pull", 2): 80}
    classes = list(base)
    out, t, i = [], 0.0, 0
    while t < until_ms:
        kind, layer = classes[(i // 4) % 4]
        worker = i % 4
        fct = base[(kind, layer)] * rng.lognormvariate(0, 0.5)
        if slow and slow[0] <= t < slow[1]:
            fct *= slow[2]
        if stall and stall[0] <= t < stall[1] and worker == stall[2]:
            fct = stall[1] + 550 - t        # through at the next retransmission after t1
        out.append(_t(i, int(t), max(1, int(fct)), kind=kind, layer=layer,
                      warmup=t < 500))
        i += 1
        t += rng.expovariate(1 / 13)
        if stall and stall[0] + 150 <= t < stall[1] + 550:
            t = stall[1] + 550               # the others wait for the stuck worker
    return out


@pytest.mark.parametrize("seed", range(1, 11))
def test_undisturbed_training_reads_zero(seed):
    r = recovery(_training(seed, 10_000), 3000 * MS, 5000 * MS)
    assert r["window_s"] == 0.25
    assert r["recovery_s"] == 0.0 and r["degraded_windows"] == 0, r
    assert r["worst_window"] < 2.0 and r["stalled_windows"] == 0


@pytest.mark.parametrize("seed", range(1, 6))
def test_blackholed_worker_reads_the_stall(seed):
    # worker 1's tensors sent in the 2 s after the fault never get through until the
    # link is back (+ a 550 ms retransmission backoff): the others stall behind them
    r = recovery(_training(seed, 10_000, stall=(3000, 5000, 1)), 3000 * MS, 5000 * MS)
    assert r["stalled_windows"] >= 8, r
    assert 2.0 <= r["recovery_s"] <= 3.0 and r["after_restore_s"] > 0, r


@pytest.mark.parametrize("seed", range(1, 6))
def test_a_fabric_five_times_slower_reads_its_length(seed):
    r = recovery(_training(seed, 10_000, slow=(3000, 4000, 5.0)), 3000 * MS, 4000 * MS)
    assert 0.75 <= r["recovery_s"] <= 1.5 and r["stalled_windows"] == 0, r


@pytest.mark.parametrize("seed", range(1, 6))
def test_twice_as_slow_is_within_the_noise_at_the_default_threshold(seed):
    # 2x is inside what undisturbed windows reach here (a push burst): the default
    # threshold is 3x over a 0.5 s span; the first table's 2x over its window sees it
    ts = _training(seed, 10_000, slow=(3000, 4000, 2.5))
    assert recovery(ts, 3000 * MS, 4000 * MS)["recovery_s"] == 0.0
    old = recovery(ts, 3000 * MS, 4000 * MS, window_s=0.5, threshold=2.0, span_s=None,
                   settle_windows=None)
    assert old["recovery_s"] >= 1.0


def test_a_window_below_the_typical_fct_would_see_stalls_in_undisturbed_runs():
    # why the window is not shorter: at 25 ms, under the long tensors' ~70 ms, windows
    # with nothing completing but a long tensor in flight throughout come and go
    r = [recovery(_training(s, 10_000), 3000 * MS, window_s=0.025)["recovery_s"]
         for s in range(1, 6)]
    assert any(x > 0 for x in r), r


def test_a_control_is_judged_over_the_span_of_the_fault_it_controls():
    from workload.faults import report

    # a 0.5 s stall 1.5 s after the control's "fault", and another 4 s after it
    ts = _training(3, 10_000, stall=(4500, 4600, 1))
    stall2 = _training(3, 10_000, stall=(7000, 7100, 1))
    rec = {"kind": "none", "injected": True, "t_inject_ns": 3000 * MS, "t_restore_ns": None}
    spanning = report({**rec, "for_s": 2.0}, ts)["recovery"]
    assert spanning["recovery_s"] >= 2.0 and spanning["stalled_windows"] > 0, spanning
    # over no span the same stall is 1.5 s after the "fault": not its episode
    assert report({**rec, "for_s": 0.0}, ts)["recovery"]["recovery_s"] == 0.0
    # a stall 4 s in is past the span and its settling: the background's, not the fault's
    late = report({**rec, "for_s": 2.0}, stall2)["recovery"]
    assert late["recovery_s"] == 0.0 and late["last_degraded_s"] > 4.0, late
