"""US-Byte's schedule (workload/usbyte.py) against hand-worked cases and a
brute force over every block schedule of small models, and the schedulers'
partitions (workload/schedules.py)."""
from __future__ import annotations

import itertools
import random

import pytest

from tiny_model import tiny_profile
from workload import schedules, usbyte


def simulate(seq, t_b, t_f, a, b):
    """Iteration time of sending ``seq`` ((layer, bytes) blocks) strictly in
    that order on one channel, each block when its layer is ready; forward
    layer by layer once backward ended and the layer's last block is in."""
    ready = usbyte.ready_times(t_b)
    t, arrived = ready[-1], [0.0] * len(t_b)
    for layer, nbytes in seq:
        t = max(t, ready[layer]) + a + b * nbytes
        arrived[layer] = t
    fwd = ready[0]
    for l in range(len(t_b)):
        fwd = max(fwd, arrived[l]) + t_f[l]
    return fwd


def splits(units):
    """Every way to cut ``units`` units into contiguous blocks (compositions)."""
    if units == 0:
        yield ()
        return
    for first in range(1, units + 1):
        for rest in splits(units - first):
            yield (first,) + rest


def brute_force(M, t_b, t_f, a, b, unit):
    """The best iteration time over every split of every layer into blocks
    of whole units and every order of the blocks (each layer's in order)."""
    L = len(M)
    units = [-(-m // unit) for m in M]
    best = float("inf")
    for cut in itertools.product(*(list(splits(u)) for u in units)):
        blocks = []
        for l, c in enumerate(cut):
            left = M[l]
            for k in c:
                n = min(k * unit, left)
                blocks.append((l, n))
                left -= n
        idx = list(range(len(blocks)))
        for order in set(itertools.permutations(idx)):
            # each layer's blocks in their own order: skip the rest (same schedules)
            pos = {}
            ok = True
            for i in order:
                l = blocks[i][0]
                if pos.get(l, -1) > i:
                    ok = False
                    break
                pos[l] = i
            if ok:
                best = min(best, simulate([blocks[i] for i in order], t_b, t_f, a, b))
    return best


def bytescheduler_model(M, t_b, t_f, a, b, unit):
    """ByteScheduler under the same model: equal partitions of ``unit``,
    the ready partition of the front-most layer first."""
    ready = usbyte.ready_times(t_b)
    left = [0] * len(M)
    order = sorted(range(len(M)), key=lambda l: ready[l])
    seq, t, k = [], ready[-1], 0
    while True:
        while k < len(order) and ready[order[k]] <= t:
            left[order[k]] = M[order[k]]
            k += 1
        cand = [l for l in range(len(M)) if left[l]]
        if not cand:
            if k == len(order):
                break
            t = ready[order[k]]
            continue
        l = min(cand)
        n = min(unit, left[l])
        left[l] -= n
        seq.append((l, n))
        t = max(t, ready[l]) + a + b * n
    return simulate(seq, t_b, t_f, a, b)


def test_one_layer_is_one_block_after_backward():
    s = usbyte.schedule([10], [2.0], [1.0], a=0.5, b=0.1, unit=3)
    assert [(blk.layer, blk.nbytes, blk.phase) for blk in s.blocks] == [(0, 10, 2)]
    assert s.iteration_s == pytest.approx(2.0 + 0.5 + 1.0 + 1.0)


def test_hand_worked_no_startup_cost():
    """Layers 0 and 1 of 4 units, backward 2 s and 1 s, forward 1 s each,
    a 1 s/unit channel: layer 1 is ready at 1, layer 0 at 3. Phase 1 fills
    1..3 with 2 units of layer 1; phase 2 sends layer 0 (3..7), then the
    rest of layer 1 (7..9); forward 7..8 and 9..10. 10 s is the optimum:
    the channel needs 8 s from t=1, and the last layer to arrive still has
    its forward step to run."""
    s = usbyte.schedule([4, 4], [2, 1], [1, 1], a=0.0, b=1.0, unit=1)
    assert [(blk.layer, blk.nbytes, blk.phase) for blk in s.blocks] == [(1, 2, 1), (0, 4, 2), (1, 2, 2)]
    assert s.iteration_s == pytest.approx(10.0)
    assert brute_force([4, 4], [2, 1], [1, 1], 0.0, 1.0, 1) == pytest.approx(10.0)


def test_hand_worked_startup_cost_makes_blocks_unequal():
    """The same layers with a 1 s start-up per block: the 2 s gap before
    layer 0 is ready holds one unit (1 s start-up + 1 s), then layer 0 and
    the rest of layer 1 go as one block each: 13 s, the optimum (two blocks
    at least: 1 + 2 x 1 + 8 = 11 s on the channel, then the forward steps).
    ByteScheduler's equal 1-unit partitions pay the start-up eight times."""
    M, t_b, t_f = [4, 4], [2, 1], [1, 1]
    s = usbyte.schedule(M, t_b, t_f, a=1.0, b=1.0, unit=1)
    assert [(blk.layer, blk.nbytes) for blk in s.blocks] == [(1, 1), (0, 4), (1, 3)]
    assert s.iteration_s == pytest.approx(13.0)
    assert brute_force(M, t_b, t_f, 1.0, 1.0, 1) == pytest.approx(13.0)
    assert bytescheduler_model(M, t_b, t_f, 1.0, 1.0, 1) == pytest.approx(18.0)


def test_priority_search_raises_a_layer_that_would_finish_in_time():
    """Three layers; the search of algorithm 3 never makes the schedule
    worse than the front-first priorities it starts from."""
    M, t_b, t_f = [2, 3, 2], [1.0, 2.0, 0.5], [0.5, 0.5, 2.0]
    start = usbyte.evaluate(M, t_b, t_f, [0, 1, 2], 0.2, 1.0, 1)
    s = usbyte.schedule(M, t_b, t_f, a=0.2, b=1.0, unit=1)
    assert s.iteration_s <= start.iteration_s + 1e-12


@pytest.mark.parametrize("seed", range(12))
def test_small_models_between_the_optimum_and_bytescheduler(seed):
    """Random 2-3 layer models of 1-3 units: US-Byte's model time is what
    its blocks take when sent in order, never below the brute-force optimum
    and never above ByteScheduler's equal partitions under the same model."""
    rnd = random.Random(seed)
    L = rnd.choice([2, 3])
    unit = 4
    M = [rnd.randint(1, 3 * unit) for _ in range(L)]
    t_b = [round(rnd.uniform(0.5, 4), 2) for _ in range(L)]
    t_f = [round(rnd.uniform(0.5, 4), 2) for _ in range(L)]
    a, b = rnd.choice([0.0, 0.5, 2.0]), round(rnd.uniform(0.2, 1.0), 2)
    s = usbyte.schedule(M, t_b, t_f, a=a, b=b, unit=unit)
    assert sum(blk.nbytes for blk in s.blocks if blk.layer == 0) == M[0]
    for l in range(L):
        assert sum(blk.nbytes for blk in s.blocks if blk.layer == l) == M[l]
    assert simulate([(blk.layer, blk.nbytes) for blk in s.blocks], t_b, t_f, a, b) == \
        pytest.approx(s.iteration_s)
    assert brute_force(M, t_b, t_f, a, b, unit) <= s.iteration_s + 1e-9
    assert s.iteration_s <= bytescheduler_model(M, t_b, t_f, a, b, unit) + 1e-9


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="sizes"):
        usbyte.schedule([0, 4], [1, 1], [1, 1], b=1.0, unit=1)
    with pytest.raises(ValueError, match="one entry per layer"):
        usbyte.schedule([4, 4], [1], [1, 1], b=1.0, unit=1)


# --- the schedulers' partitions -------------------------------------------------------
def _plan(name, **kw):
    args = dict(partition_bytes=40_000, credit_bytes=100_000, arch="ps", workers=2, servers=1,
                target_link_bps=10e9)
    args.update(kw)
    return schedules.plan(tiny_profile(), name, **args)


@pytest.mark.parametrize("name", schedules.SCHEDULERS)
def test_every_scheduler_sends_every_byte_once(name):
    prof = tiny_profile()
    parts, credit, rec = _plan(name)
    assert rec["name"] == name and credit >= 1
    for layer in prof.layers:
        assert sum(p.target_bytes for p in parts if p.layer == layer.index) == layer.nbytes
    assert [p.pid for p in parts] == list(range(len(parts)))


def test_bytescheduler_record_is_the_earlier_runs():
    parts, credit, rec = _plan("bytescheduler")
    assert rec == {"name": "bytescheduler", "partition_bytes": 40_000, "credit_bytes": 100_000,
                   "priority": "layer index, front first"}
    assert credit == 100_000 and all(p.priority == p.layer for p in parts)


def test_wfbp_one_message_per_layer_in_backward_order_no_credit_limit():
    prof = tiny_profile()
    parts, credit, rec = _plan("wfbp")
    assert [p.layer for p in parts] == list(reversed(range(len(prof.layers))))
    assert [p.priority for p in parts] == list(range(len(parts)))   # the order they are ready
    assert credit >= prof.total_bytes


def test_fifo_is_bytescheduler_partitions_in_ready_order():
    bs, _, _ = _plan("bytescheduler")
    ff, credit, _ = _plan("fifo")
    assert [(p.layer, p.target_bytes) for p in ff] == [(p.layer, p.target_bytes) for p in bs]
    assert [p.priority for p in ff] == list(range(len(ff))) and credit == 100_000


def test_usbyte_blocks_are_whole_units_in_the_recorded_order():
    parts, _, rec = _plan("usbyte")
    assert [[p.layer, p.target_bytes] for p in parts] == [b[:2] for b in rec["blocks"]]
    assert [p.priority for p in parts] == list(range(len(parts)))
    prof = tiny_profile()
    for p in parts:
        rest = prof.layers[p.layer].nbytes % 40_000
        assert p.target_bytes % 40_000 == 0 or p.target_bytes % 40_000 == rest
    assert rec["model"]["iteration_s"] > prof.compute_s


def test_unknown_scheduler_names_the_flag():
    with pytest.raises(ValueError, match="--scheduler: one of bytescheduler, usbyte, wfbp, fifo"):
        _plan("pfabric")


def test_hand_worked_block_grows_when_its_layer_keeps_the_priority():
    """Layers of 1, 1 and 10 bytes, backward 2, 3, 1 s (ready: layer 2 at
    1, layer 1 at 4, layer 0 at 6), 1 s/byte, start-up 1 s, and layer 2
    given the top priority (as algorithm 3 can raise a layer): the 3 s gap
    before layer 1 is ready holds 1 s start-up + 2 bytes (1..4); before
    layer 0, layer 2 keeps the channel and its block grows by 2 bytes with
    no second start-up (4..6). Phase 2 from 6: layer 0 (6..8), layer 1
    (8..10), the 6 bytes left of layer 2 (10..17); forward 8..9, 10..11,
    17..18."""
    s = usbyte.evaluate([1, 1, 10], [2, 3, 1], [1, 1, 1], [1, 2, 0], 1.0, 1.0, 1)
    assert [(blk.layer, blk.nbytes, blk.start_s, blk.end_s, blk.phase) for blk in s.blocks] == [
        (2, 4, 1.0, 6.0, 1), (0, 1, 6.0, 8.0, 2), (1, 1, 8.0, 10.0, 2), (2, 6, 10.0, 17.0, 2)]
    assert s.iteration_s == pytest.approx(18.0)
    assert simulate([(2, 4), (0, 1), (1, 1), (2, 6)], [2, 3, 1], [1, 1, 1], 1.0, 1.0) == \
        pytest.approx(18.0)
