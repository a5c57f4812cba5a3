"""OSF's recursive iteration model and adaptive fusion (workload/osf.py)
against hand-worked cases."""
from __future__ import annotations

import pytest

from tiny_model import tiny_profile
from workload import osf, schedules


def test_recursion_by_hand():
    """Layers 0, 1 with backward 2 s and 1 s, forward 1 s each; 4 bytes
    each at 1 s/byte, no start-up. Layer 1 ready at 1 -> sent 1..5; layer 0
    ready at 3, channel busy -> 5..9. Forward after max(3, 9): 9 + 2 = 11."""
    m = osf.iteration_time([1, 1], [2, 1], [(0, 4), (1, 4)], a=0.0, b=1.0)
    assert m["iteration_s"] == pytest.approx(11.0)
    assert m["comm_end_s"] == pytest.approx(9.0) and m["messages"] == 2


def test_communication_hidden_under_backward():
    """Small messages: layer 1's (1 .. 1.01) is hidden under layer 0's
    backward; layer 0's is ready only when backward ends (3 .. 3.01), and
    the next forward pass waits for it: 2 + 3.01."""
    m = osf.iteration_time([1, 1], [2, 1], [(0, 1), (1, 1)], a=0.0, b=0.01)
    assert m["iteration_s"] == pytest.approx(5.01)


def test_fusion_groups_in_ready_order_as_many_as_fit():
    """Horovod's buffer holds the tensors that fit in it: 3 + 3 > 5, so
    three buffers of one; 6 holds two; a message larger than the buffer
    goes alone."""
    msgs = [(2, 3), (1, 3), (0, 3)]
    assert osf.fuse(msgs, 5) == [[(2, 3)], [(1, 3)], [(0, 3)]]
    assert osf.fuse(msgs, 6) == [[(2, 3), (1, 3)], [(0, 3)]]
    assert osf.fuse([(2, 1), (1, 9), (0, 1)], 4) == [[(2, 1)], [(1, 9)], [(0, 1)]]
    assert osf.fuse(msgs, None) == [[m] for m in msgs]
    assert osf.fuse(msgs, 100) == [msgs]


def test_fusion_trades_startup_against_overlap():
    """Three layers of 1 byte, backward 0.5 s each (ready at 0.5, 1, 1.5),
    forward 0.5 s each, 0.1 s/byte and a 1 s start-up. Unfused: 0.5-1.6,
    1.6-2.7, 2.7-3.8; one buffer of 3 bytes: 1.5-2.8; a buffer of 2 bytes:
    layers 2+1 at 1-2.2, layer 0 2.2-3.3. Adaptive takes the whole model.
    With no start-up and backward 1 s each, fusion only delays (unfused
    ends 3.1, fused 3.3): adaptive takes none."""
    t_f, t_b, msgs = [0.5] * 3, [0.5] * 3, [(0, 1), (1, 1), (2, 1)]
    assert osf.iteration_time(t_f, t_b, msgs, a=1.0, b=0.1)["iteration_s"] == pytest.approx(5.3)
    assert osf.iteration_time(t_f, t_b, msgs, a=1.0, b=0.1, buffer_bytes=3)["iteration_s"] == \
        pytest.approx(4.3)
    assert osf.iteration_time(t_f, t_b, msgs, a=1.0, b=0.1, buffer_bytes=2)["iteration_s"] == \
        pytest.approx(4.8)
    assert osf.adaptive_buffer(t_f, t_b, msgs, a=1.0, b=0.1) >= 3
    slow = [1.0] * 3
    assert osf.iteration_time(t_f, slow, msgs, a=0.0, b=0.1)["iteration_s"] == pytest.approx(4.6)
    assert osf.iteration_time(t_f, slow, msgs, a=0.0, b=0.1, buffer_bytes=3)["iteration_s"] == \
        pytest.approx(4.8)
    assert osf.adaptive_buffer(t_f, slow, msgs, a=0.0, b=0.1) is None


def test_adaptive_fusion_picks_a_buffer_when_startups_dominate():
    """Many small messages ready at once (backward of the last layer only):
    one start-up each vs one fused: adaptive fuses everything."""
    t_f, t_b = [0.1] * 4, [0.0, 0.0, 0.0, 1.0]
    msgs = [(l, 100_000) for l in range(4)]
    best = osf.adaptive_buffer(t_f, t_b, msgs, a=0.01, b=1e-9)
    assert best is not None and best >= 400_000
    fused = osf.iteration_time(t_f, t_b, msgs, a=0.01, b=1e-9, buffer_bytes=best)["iteration_s"]
    assert fused < osf.iteration_time(t_f, t_b, msgs, a=0.01, b=1e-9)["iteration_s"]


def test_prediction_beside_a_measurement():
    prof = tiny_profile()
    parts, _, _ = schedules.plan(prof, "bytescheduler", partition_bytes=40_000,
                                 credit_bytes=100_000, arch="allreduce", workers=2, servers=1,
                                 target_link_bps=10e9)
    b = schedules.seconds_per_byte("allreduce", 2, 1, 10e9)
    p = osf.prediction(prof, parts, b=b, workers=2, measured_s=1.0)
    assert p["messages"] == len(parts)
    assert p["error"] == pytest.approx(p["predicted_iteration_s"] - 1.0)
    assert p["predicted_iteration_s"] >= prof.compute_s
    assert osf.prediction(prof, parts, b=b, workers=2, measured_s=None)["error"] is None


# --- tensor fusion of a run's messages (workload/schedules.py fuse) -------------------
def _wfbp(prof):
    return schedules.plan(prof, "wfbp", partition_bytes=40_000, credit_bytes=100_000,
                          arch="allreduce", workers=2, servers=1, target_link_bps=10e9)[0]


def test_constant_fusion_fills_buffers_in_ready_order():
    prof = tiny_profile()
    parts = _wfbp(prof)
    fused, rec = schedules.fuse(prof, parts, "constant:500kb", b=1e-9)
    assert rec["mode"] == "constant" and rec["buffer_bytes"] == 500_000
    assert sum(p.target_bytes for p in fused) == prof.total_bytes
    assert sorted(l for ls in rec["layers_of_buffer"] for l in ls) == list(range(len(prof.layers)))
    for p, layers in zip(fused, rec["layers_of_buffer"]):
        assert p.layer == min(layers)         # ready when its front-most layer's backward ends
    # each buffer holds what fits; the next buffer's first message would not have
    for p, nxt in zip(fused, fused[1:]):
        first = next(q for q in parts if q.layer == max(rec["layers_of_buffer"][nxt.pid]))
        assert p.target_bytes <= 500_000 or len(rec["layers_of_buffer"][p.pid]) == 1
        assert p.target_bytes + first.target_bytes > 500_000
    assert [p.priority for p in fused] == list(range(len(fused)))


def test_adaptive_fusion_takes_osfs_choice():
    prof = tiny_profile()
    parts = _wfbp(prof)
    _, rec = schedules.fuse(prof, parts, "adaptive", b=1e-9)
    times = rec["modelled_iteration_s"]
    assert times[str(rec["buffer_bytes"])] == min(times.values())


@pytest.mark.parametrize("spec", ["constant", "constant:0", "constant:big", "always", "64mb"])
def test_bad_fusion_is_named(spec):
    with pytest.raises(ValueError, match=f"--fusion: adaptive or constant:SIZE .*{spec!r}"):
        schedules.parse_fusion(spec)


def test_sfb_messages_cost_every_peer():
    """An SFB message goes from each worker to its P1 - 1 peers over the
    worker's link: 4 workers on 10 Gbit/s, 3 x 0.8 ns a byte. One layer,
    backward 1 s, forward 1 s, a 1 GB factor message: 1 + 2.4 + 1 s
    (start-up 0); as a PS message at 4:1 it would cost 4 x 0.8 ns a byte."""
    from types import SimpleNamespace as NS

    b_sfb = schedules.sfb_seconds_per_byte(4, 10e9)
    assert b_sfb == pytest.approx(3 * 8 / 10e9)
    prof = NS(layers=[NS(fwd_s=1.0, bwd_s=1.0)])
    msg = [NS(pid=0, layer=0, target_bytes=10**9)]
    p = osf.prediction(prof, msg, b=schedules.seconds_per_byte("ps", 4, 1, 10e9), workers=4,
                       measured_s=None, a=0.0, sfb={0}, b_sfb=b_sfb)
    assert p["predicted_iteration_s"] == pytest.approx(1 + 2.4 + 1)
    assert p["sfb_seconds_per_byte"] == b_sfb
    ps = osf.prediction(prof, msg, b=schedules.seconds_per_byte("ps", 4, 1, 10e9), workers=4,
                        measured_s=None, a=0.0)
    assert ps["predicted_iteration_s"] == pytest.approx(1 + 3.2 + 1)
    # 4 workers' samples over one worker's compute-only rate: 4 x 2 s / 5.2 s
    assert ps["predicted_speedup"] == pytest.approx(4 * 2 / 5.2)
