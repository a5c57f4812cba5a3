"""Scaling a target cluster onto the testbed: the communication-to-computation
ratio is preserved, no tensor is scaled below a few packets, and describe()
states every effective number (docs/workload.md, "Scaling")."""
from __future__ import annotations

import pytest

from workload.models import get_profile
from workload.scaling import DEFAULT_MIN_TENSOR_BYTES, MSS_BYTES, Scaling, scaling_for

TARGET, TESTBED = 10e9, 100e6


def _ratio(s: Scaling, target_bytes: int, target_compute_s: float) -> float:
    """Testbed comm/compute over the target's, for one tensor and one step."""
    testbed = (8 * s.tensor_bytes(target_bytes) / s.testbed_link_bps) / s.compute_s(target_compute_s)
    target = (8 * target_bytes / s.target_link_bps) / target_compute_s
    return testbed / target


@pytest.mark.parametrize("mode,extra", [("bytes", {}), ("time", {}),
                                        ("both", {"byte_scale": 0.1}),
                                        ("both", {"smallest_bytes": 40_000})])
def test_ratio_preserved_for_tensors_above_the_floor(mode, extra):
    s = scaling_for(TARGET, TESTBED, mode=mode, **extra)
    assert s.ratio_factor == pytest.approx(1.0)
    for nbytes in (4_000_000, 16_777_216, 102_760_448):
        assert _ratio(s, nbytes, 0.05) == pytest.approx(1.0, rel=1e-5)


def test_modes_scale_what_they_say():
    b = scaling_for(TARGET, TESTBED)
    assert (b.byte_scale, b.time_scale) == (pytest.approx(0.01), 1.0)
    t = scaling_for(TARGET, TESTBED, mode="time")
    assert (t.byte_scale, t.time_scale) == (1.0, pytest.approx(100.0))
    assert t.tensor_bytes(1234) == 1234
    both = scaling_for(TARGET, TESTBED, mode="both", smallest_bytes=40_000)
    # the smallest tensor lands exactly on the floor, nothing is clamped
    assert both.tensor_bytes(40_000) == DEFAULT_MIN_TENSOR_BYTES
    assert both.byte_scale == pytest.approx(DEFAULT_MIN_TENSOR_BYTES / 40_000)
    assert both.time_scale == pytest.approx(both.byte_scale * 100)


def test_floor_keeps_a_few_packets_and_never_inflates_a_small_tensor():
    s = scaling_for(100e9, TESTBED)                  # byte_scale 1e-3
    assert s.min_tensor_bytes >= 3 * MSS_BYTES
    assert s.tensor_bytes(400_000) == s.min_tensor_bytes     # 400 B exact -> floored
    assert s.tensor_bytes(1_000) == 1_000            # already below the floor at target: kept
    assert s.tensor_bytes(50_000_000) == 50_000
    # the floor makes that tensor's communication slower than the target's ratio
    assert _ratio(s, 400_000, 0.01) == pytest.approx(s.min_tensor_bytes / 400.0)


def test_describe_states_every_number_and_the_floor_effect():
    p = get_profile("resnet50")
    sizes = [t.nbytes for t in p.backward_order()]
    s = scaling_for(TARGET, TESTBED)
    d = s.describe(sizes)
    for key in ("mode", "target_link_bps", "testbed_link_bps", "target_gpu", "byte_scale",
                "time_scale", "min_tensor_bytes", "ratio_factor", "tensors",
                "target_total_bytes", "testbed_total_bytes", "floored_tensors",
                "floored_extra_bytes", "effective_byte_scale", "comm_inflation",
                "target_comm_s", "testbed_comm_s"):
        assert key in d, key
    assert d["target_total_bytes"] == p.total_bytes
    assert d["testbed_total_bytes"] == sum(s.tensor_bytes(n) for n in sizes)
    floored = [n for n in sizes if s.tensor_bytes(n) > round(n * s.byte_scale)]
    assert d["floored_tensors"] == len(floored) > 0     # ResNet50's BatchNorm vectors
    assert d["comm_inflation"] > 1.0
    assert d["effective_byte_scale"] > s.byte_scale
    assert d["testbed_comm_s"] == pytest.approx(d["comm_inflation"] * d["target_comm_s"])
    assert set(s.describe()) < set(d)


def test_target_time_inverts_compute_scaling():
    s = scaling_for(TARGET, TESTBED, mode="time")
    assert s.target_s(s.compute_s(0.25)) == pytest.approx(0.25)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="target_link_bps"):
        scaling_for(0, TESTBED)
    with pytest.raises(ValueError, match="mode"):
        scaling_for(TARGET, TESTBED, mode="packets")
    with pytest.raises(ValueError, match="byte_scale"):
        scaling_for(TARGET, TESTBED, mode="both")
    with pytest.raises(ValueError, match="byte_scale"):
        scaling_for(TARGET, TESTBED, mode="both", byte_scale=2.0)
    with pytest.raises(ValueError, match="target_bytes"):
        scaling_for(TARGET, TESTBED).tensor_bytes(0)
    with pytest.raises(ValueError, match="min_tensor_bytes"):
        scaling_for(TARGET, TESTBED, min_tensor_bytes=0)


def test_both_mode_from_sizes_bounds_the_floor_inflation():
    sizes = [t.nbytes for t in get_profile("resnet50").backward_order()]
    pure = scaling_for(100e9, TESTBED).describe(sizes)
    assert pure["comm_inflation"] > 2        # per-tensor floor on ResNet50's BatchNorm vectors
    s = scaling_for(100e9, TESTBED, mode="both", sizes=sizes, max_inflation=1.05)
    d = s.describe(sizes)
    assert d["comm_inflation"] <= 1.05 + 1e-9
    assert s.ratio_factor == pytest.approx(1.0)
    assert s.time_scale == pytest.approx(s.byte_scale * 1000)
    # the smallest such scale: 1% less and the floor inflates more than allowed
    smaller = scaling_for(100e9, TESTBED, mode="both", byte_scale=s.byte_scale * 0.99)
    assert smaller.describe(sizes)["comm_inflation"] > 1.05
    with pytest.raises(ValueError, match="max_inflation"):
        scaling_for(100e9, TESTBED, mode="both", sizes=sizes, max_inflation=0.5)


def test_fit_mode_is_both_by_every_size():
    """`fit` picks the byte scale from every partition (what `talb run
    --scaling fit` and the fig9/fig4 presets use): the floor inflates VGG19's
    bytes by <= 5% at a 100G target, where pure byte scaling inflates them
    6.5x on a 25 Mbit/s fabric."""
    from workload.scheduler import partition_model

    sizes = [p.target_bytes for p in partition_model(get_profile("vgg19"), 4_000_000)]
    assert scaling_for(100e9, 25e6).describe(sizes)["comm_inflation"] > 6
    fit = scaling_for(100e9, 25e6, mode="fit", sizes=sizes)
    both = scaling_for(100e9, 25e6, mode="both", sizes=sizes)
    assert fit.mode == "fit" and fit.byte_scale == both.byte_scale
    assert fit.describe(sizes)["comm_inflation"] <= 1.05 + 1e-9
    assert fit.ratio_factor == pytest.approx(1.0)
    with pytest.raises(ValueError, match="sizes"):
        scaling_for(100e9, 25e6, mode="fit", smallest_bytes=256)
