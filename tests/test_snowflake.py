"""Snowflake tensor ids (workload/snowflake.py): layout, uniqueness, errors."""
from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.snowflake import ID_BITS, Snowflake, SnowflakeId


class FakeClock:
    """A clock that moves only when told to (or by `sleep`)."""

    def __init__(self, ns: int = 0):
        self.ns = ns
        self.sleeps = []

    def __call__(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ns += max(int(seconds * 1e9), 1)


def test_default_layout_is_the_papers():
    clock = FakeClock(1234 * 1_000_000 + 17)  # 1234 ms
    g = Snowflake(worker_id=9, clock=clock, sleep=clock.sleep)
    assert (g.timestamp_bits, g.sequence_bits, g.worker_bits, g.unit_ns) == (20, 8, 4, 1_000_000)
    tid = g.next_id()
    assert tid == (1234 << 12) | (0 << 4) | 9
    assert g.parse(tid) == SnowflakeId(timestamp=1234, sequence=0, worker=9)
    assert g.parse(g.next_id()) == SnowflakeId(1234, 1, 9)
    clock.ns += 1_000_000
    assert g.parse(g.next_id()) == SnowflakeId(1235, 0, 9)


def test_timestamp_wraps():
    clock = FakeClock(((1 << 20) + 5) * 1_000_000)
    g = Snowflake(clock=clock, sleep=clock.sleep)
    assert g.parse(g.next_id()).timestamp == 5
    assert 0 <= g.next_id() < 1 << ID_BITS


def test_sequence_exhausted_waits_for_the_next_tick():
    clock = FakeClock(10 * 1_000_000)
    g = Snowflake(worker_id=1, clock=clock, sleep=clock.sleep)
    ids = [g.next_id() for _ in range(256)]
    assert {g.parse(i).timestamp for i in ids} == {10}
    assert not clock.sleeps
    nxt = g.parse(g.next_id())
    assert clock.sleeps and nxt == SnowflakeId(11, 0, 1)
    assert len(set(ids)) == 256


def test_clock_going_back_never_repeats_an_id():
    clock = FakeClock(50 * 1_000_000)
    g = Snowflake(clock=clock, sleep=clock.sleep)
    first = g.next_id()
    clock.ns = 40 * 1_000_000
    later = [g.next_id() for _ in range(300)]  # continues tick 50, then waits past it
    assert first not in later and len(set(later)) == 300
    assert all(g.parse(i).timestamp >= 50 for i in later)


def test_unit_is_configurable():
    clock = FakeClock(7_000_000_123)  # 7 s
    g = Snowflake(unit_ns=1_000_000_000, clock=clock, sleep=clock.sleep)
    assert g.parse(g.next_id()).timestamp == 7


@settings(max_examples=200, deadline=None)
@given(t=st.integers(1, 30), s=st.integers(1, 30), worker=st.integers(0, 2**20), data=st.data())
def test_configurable_widths_round_trip(t, s, worker, data):
    w = ID_BITS - t - s
    if w < 1:
        with pytest.raises(ValueError, match="must sum to 32"):
            Snowflake(timestamp_bits=t, sequence_bits=s, worker_bits=1)
        return
    worker %= 1 << w
    tick = data.draw(st.integers(0, 2**40))
    clock = FakeClock(tick)
    g = Snowflake(worker, timestamp_bits=t, sequence_bits=s, worker_bits=w, unit_ns=1,
                  clock=clock, sleep=clock.sleep)
    n = data.draw(st.integers(1, min(1 << s, 50)))
    ids = [g.next_id() for _ in range(n)]
    assert len(set(ids)) == n
    for i, tid in enumerate(ids):
        assert 0 <= tid < 1 << ID_BITS
        assert g.parse(tid) == SnowflakeId(tick % (1 << t), i, worker)


def test_unique_across_workers_and_threads():
    """8 workers, 4 threads each, on the real clock: no id twice."""
    gens = [Snowflake(worker_id=w) for w in range(8)]
    out: list[list[int]] = []
    lock = threading.Lock()

    def make(g):
        ids = [g.next_id() for _ in range(2000)]
        with lock:
            out.append(ids)

    threads = [threading.Thread(target=make, args=(g,)) for g in gens for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids in out for i in ids]
    assert len(every) == 8 * 4 * 2000
    assert len(set(every)) == len(every)
    for g in gens:
        mine = [i for i in every if i & 0xF == g.worker_id]
        assert len(mine) == 4 * 2000


@pytest.mark.parametrize("kwargs, field", [
    ({"timestamp_bits": 0, "sequence_bits": 8, "worker_bits": 24}, "timestamp_bits"),
    ({"timestamp_bits": 20, "sequence_bits": 0, "worker_bits": 12}, "sequence_bits"),
    ({"timestamp_bits": 28, "sequence_bits": 4, "worker_bits": 0}, "worker_bits"),
    ({"timestamp_bits": 20, "sequence_bits": 8, "worker_bits": -1}, "worker_bits"),
    ({"timestamp_bits": 20.0}, "timestamp_bits"),
    ({"sequence_bits": True}, "sequence_bits"),
    ({"timestamp_bits": 20, "sequence_bits": 8, "worker_bits": 5}, "must sum to 32"),
    ({"timestamp_bits": 16, "sequence_bits": 8, "worker_bits": 4}, "must sum to 32"),
    ({"unit_ns": 0}, "unit_ns"),
    ({"worker_id": 16}, "worker_id: must be an integer 0..15 for worker_bits=4, got 16"),
    ({"worker_id": -1}, "worker_id"),
    ({"worker_id": "3"}, "worker_id"),
    ({"worker_id": 2, "timestamp_bits": 23, "sequence_bits": 8, "worker_bits": 1}, "0..1"),
])
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ValueError) as ei:
        Snowflake(**kwargs)
    assert field in str(ei.value)


def test_parse_rejects_non_ids():
    g = Snowflake()
    for bad in (-1, 1 << 32, "7", 1.0):
        with pytest.raises(ValueError, match="tensor_id"):
            g.parse(bad)
