"""The TaLB part of a forwarding group computed in C (datapath/talb_parts.c,
built by datapath.talb_native) is byte for byte what the Python reference
packs (datapath.control._talb_part: fixed_wrr_weights, smooth_wrr_schedule,
the PCM order), for random and edge-case inputs; and GroupPublisher without
it publishes the same. Builds the C code with the system's compiler."""
from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import skip_or_fail
from common.c_constants import TALB_MAX_GROUP_PORTS, TALB_PCM_ONE, TALB_SCHED_MAX
from datapath import talb_native
from datapath.control import _talb_part

ONE = TALB_PCM_ONE


@pytest.fixture(scope="module")
def native():
    parts = talb_native.parts(64)
    if parts is None:
        skip_or_fail("no C compiler: the publisher uses the Python path")
    return parts


def _check(native, groups):
    got = native.compute(groups)
    want = [_talb_part(fixed, s) for fixed, s in groups]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"group {k} {groups[k]}: C and Python differ"


def test_part_size_matches_the_struct_layout():
    assert talb_native.PART_SIZE == len(_talb_part([0, 0], ONE))


EDGES = [
    [0, 0], [ONE, ONE], [0, ONE], [ONE, 0], [ONE] * TALB_MAX_GROUP_PORTS,
    [0] * TALB_MAX_GROUP_PORTS, [1, 2, 3], [ONE - 1, ONE, 0, 1],
    [ONE // 2, ONE // 3, ONE // 5, ONE // 7, 0, 11, 13, ONE],
    [32768] * 8, [100, 200, 300, 400, 500, 600, 700, 800],
    [ONE - k for k in range(8)],  # residuals 0..7: exact weights
    [0, ONE - 1],                 # weights 65535:1 -> largest remainder
]


def test_edge_cases(native):
    _check(native, [(e, ONE) for e in EDGES] + [(e, 0) for e in EDGES]
           + [(e, 12345) for e in EDGES])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.integers(0, ONE), min_size=1, max_size=TALB_MAX_GROUP_PORTS),
                min_size=1, max_size=16),
       st.integers(0, ONE))
def test_random_groups_match_python(native, pcms, s):
    _check(native, [(p, s) for p in pcms])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0, 1, ONE // 4, ONE // 2, ONE - 1, ONE]), min_size=2,
                max_size=TALB_MAX_GROUP_PORTS))
def test_ties_match_python(native, pcm):
    # ties: equal PCMs (order, schedule ties go to the lowest index), equal remainders
    _check(native, [(pcm, ONE)])


def test_many_random_vectors(native):
    rng = random.Random(7)
    for _ in range(200):
        groups = []
        for _ in range(64):
            n = rng.randint(1, TALB_MAX_GROUP_PORTS)
            groups.append(([rng.choice((rng.randint(0, ONE), rng.randint(ONE - 64, ONE)))
                            for _ in range(n)], rng.randint(0, ONE)))
        _check(native, groups)


def test_schedules_fill_at_most_the_table(native):
    parts = native.compute([([rng_v] * 3, ONE) for rng_v in (0, 7, ONE)])
    for p in parts:
        length = struct.unpack_from("=H", p, 4)[0]
        assert 1 <= length <= TALB_SCHED_MAX


def test_too_many_groups_is_an_error(native):
    with pytest.raises(ValueError, match="65 groups, buffers for 64"):
        native.compute([([0, 0], ONE)] * 65)


def test_refresh_remakes_a_part_only_when_its_fixed_point_changes(native):
    """The agent's path (TalbParts.refresh): float PCMs to fixed point as
    pcm_to_fixed does, the part remade where the fixed PCMs or S changed."""
    from datapath.schemes.talb import pcm_to_fixed

    fresh = talb_native.parts(4)
    pcms = [[0.1, 0.7, 0.7, 1.0], [0.0, 0.5], [0.3, 0.3, 0.9], [0.5 / ONE, 1.5 / ONE, -0.2]]
    groups = [(k, p, ONE) for k, p in enumerate(pcms)]
    first = fresh.refresh(groups)
    assert first == [_talb_part([pcm_to_fixed(x) for x in p], ONE) for p in pcms]
    # the same fixed point (a change below 1/ONE), the same S: nothing remade
    assert fresh.refresh([(0, [0.1, 0.7, 0.7, 1.0000001], ONE), (1, [0.0, 0.5], ONE)]) \
        == [None, None]
    # S changed for slot 2, the PCMs of slot 3
    again = fresh.refresh([(2, pcms[2], 12), (3, [1.0, 0.0, 0.0], ONE)])
    assert again == [_talb_part([pcm_to_fixed(x) for x in pcms[2]], 12),
                     _talb_part([ONE, 0, 0], ONE)]
    # a NaN: nothing changes, the caller raises
    assert fresh.refresh([(0, [float("nan"), 0.0, 0.0, 0.0], ONE)]) is None
    assert fresh.refresh([(0, pcms[0], ONE)]) == [None]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-0.5, 1.5, allow_nan=False), min_size=1,
                max_size=TALB_MAX_GROUP_PORTS))
def test_refresh_fixed_point_is_pcm_to_fixed(pcm):
    from datapath.schemes.talb import pcm_to_fixed

    fresh = talb_native.parts(1)
    if fresh is None:
        skip_or_fail("no C compiler (make setup installs gcc)")
    (part,) = fresh.refresh([(0, pcm, ONE)])
    assert part == _talb_part([pcm_to_fixed(x) for x in pcm], ONE)
