"""ByteScheduler: partitioning, credit, priority order (no sockets)."""
from __future__ import annotations

import pytest

from tiny_model import tiny_profile
from workload.scheduler import ByteScheduler, Partition, partition_model


def _p(pid, layer, nbytes=100):
    return Partition(pid, layer, f"t{pid}", 0, nbytes, nbytes)


def test_partitions_cover_every_byte_in_backward_order():
    prof = tiny_profile()
    parts = partition_model(prof, 40_000)
    for t in prof.backward_order():
        mine = [p for p in parts if p.tensor == t.name]
        assert sum(p.target_bytes for p in mine) == t.nbytes
        assert all(p.target_bytes <= 40_000 for p in mine)
        assert [p.index for p in mine] == list(range(len(mine)))
    # l2.t0 (400 kB) -> 10 parts of 40 kB; last layer first.
    assert [p.layer for p in parts] == sorted((p.layer for p in parts), reverse=True)
    assert len([p for p in parts if p.tensor == "l2.t0"]) == 10
    assert [p.pid for p in parts] == list(range(len(parts)))


def test_partition_scaling_applies_per_partition():
    parts = partition_model(tiny_profile(), 40_000, tensor_bytes=lambda b: max(5000, b // 10))
    assert all(p.nbytes == max(5000, p.target_bytes // 10) for p in parts)


def test_front_layer_first():
    s = ByteScheduler(credit_bytes=10_000)
    s.enqueue([_p(0, 2), _p(1, 2), _p(2, 1), _p(3, 0)])
    order = []
    while (nxt := s.next()) is not None:
        order.append(nxt[1].pid)
    assert order == [3, 2, 0, 1]


def test_higher_priority_overtakes_at_the_next_partition_boundary():
    """Layer 2's partitions go one at a time (credit = one partition); layer
    0's gradients arrive while the first is in flight: the next partition to
    start is layer 0's, before layer 2's remaining ones."""
    s = ByteScheduler(credit_bytes=100)
    s.enqueue([_p(0, 2), _p(1, 2), _p(2, 2)])
    it, first = s.next()
    assert first.pid == 0
    assert s.next() is None                    # credit full: nothing else starts
    s.enqueue([_p(3, 0), _p(4, 0)])            # layer 0 ready mid-partition
    assert s.next() is None                    # no preemption inside a partition
    s.finish(it, first)                        # partition boundary
    assert [s.next()[1].pid for _ in range(1)] == [3]
    s.finish(0, _p(3, 0))
    assert s.next()[1].pid == 4
    s.finish(0, _p(4, 0))
    assert s.next()[1].pid == 1


def test_lower_priority_never_starts_while_higher_waits():
    """Credit left fits the small layer-3 partition but not the waiting
    layer-1 one: neither starts."""
    s = ByteScheduler(credit_bytes=1000)
    s.enqueue([_p(0, 2, 600)])
    assert s.next()[1].pid == 0
    s.enqueue([_p(1, 1, 600), _p(2, 3, 100)])
    assert s.next() is None
    s.finish(0, _p(0, 2, 600))
    assert s.next()[1].pid == 1
    assert s.next()[1].pid == 2                 # now it fits: 700 <= 1000


def test_oversized_partition_starts_when_nothing_in_flight():
    s = ByteScheduler(credit_bytes=10)
    s.enqueue([_p(0, 0, 500)])
    assert s.next()[1].pid == 0
    assert s.in_flight_bytes == 500


def test_forced_start_counts_against_credit_and_leaves_the_queue():
    s = ByteScheduler(credit_bytes=100)
    a, b = _p(0, 0), _p(1, 1)
    s.enqueue([a, b])
    s.start(0, b)                               # a peer began b
    assert s.in_flight_bytes == 100 and s.waiting == 1
    assert s.next() is None                     # a waits for credit
    s.finish(0, b)
    assert s.next()[1] is a
    assert s.next() is None and s.waiting == 0


def test_misuse_is_an_error():
    s = ByteScheduler(credit_bytes=100)
    with pytest.raises(ValueError, match="never started"):
        s.finish(0, _p(0, 0))
    s.enqueue([_p(0, 0)])
    with pytest.raises(ValueError, match="twice"):
        s.enqueue([_p(0, 0)])
    with pytest.raises(ValueError, match="credit_bytes"):
        ByteScheduler(credit_bytes=0)
    with pytest.raises(ValueError, match="partition_bytes"):
        partition_model(tiny_profile(), 0)


def test_three_layer_model_keeps_the_papers_send_order():
    """TaLB sec. V-A: L2, part of L1, L0, the rest of L1 — the scheduler
    follows the model's own order when it has one, whatever the layers."""
    from workload.models import get_profile

    prof = get_profile("threelayer")
    parts = partition_model(prof, 4_000_000)
    s = ByteScheduler(credit_bytes=1)
    for layer in (2, 1, 0):                     # compute 0: every layer ready at once
        s.enqueue([p for p in parts if p.layer == layer])
    order = []
    while (nxt := s.next()) is not None:
        order.append(nxt[1])
        s.finish(*nxt)
    names = [p.tensor for p in order]
    assert names == list(prof.send_order)
    layers = [p.layer for p in order]
    first_l0 = layers.index(0)
    assert set(layers[:first_l0]) == {2, 1} and layers[-1] == 1   # L1 on both sides of L0


def test_real_model_partitions_total():
    from workload.models import get_profile

    prof = get_profile("alexnet")
    parts = partition_model(prof, 4_000_000)
    assert sum(p.target_bytes for p in parts) == prof.total_bytes == 4 * 61_100_840
    assert all(p.priority == p.layer for p in parts)
