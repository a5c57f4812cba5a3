"""Model profiles: exact parameter totals and tensor counts of the published
definitions, backward order, layer numbering, the three-layer model of TaLB
sec. V-A, and the compute model (docs/workload.md)."""
from __future__ import annotations

import math

import pytest

from workload import compute
from workload.models import MAX_LAYERS, MODELS, get_profile
from workload.models import threelayer

# (parameters, tensors, layers): torchvision's / Hugging Face's published counts
# (tensors: len(list(model.parameters())) of those definitions).
PUBLISHED = {
    "alexnet": (61_100_840, 16, 8),
    "vgg19": (143_667_240, 38, 19),
    "resnet50": (25_557_032, 161, 54),
    "bert-base": (109_482_240, 199, 26),
    "gpt2-small": (124_439_808, 148, 26),
}
PAPER_BATCH = {"alexnet": 64, "resnet50": 128, "vgg19": 32}   # TaLB sec. IV-A


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_totals_and_counts_match_the_published_definitions(name):
    p = get_profile(name)
    params, tensors, layers = PUBLISHED[name]
    assert p.total_params == params
    assert p.total_bytes == 4 * params          # fp32 gradients
    assert len(p.tensors) == tensors
    assert len(p.layers) == layers
    assert all(t.numel == math.prod(t.shape) for t in p.tensors)


@pytest.mark.parametrize("name,tensor,shape", [
    ("alexnet", "features.0.weight", (64, 3, 11, 11)),
    ("alexnet", "classifier.1.weight", (4096, 9216)),
    ("vgg19", "features.34.weight", (512, 512, 3, 3)),
    ("vgg19", "classifier.0.weight", (4096, 25088)),
    ("resnet50", "layer3.0.downsample.0.weight", (1024, 512, 1, 1)),
    ("resnet50", "layer4.2.conv2.weight", (512, 512, 3, 3)),
    ("resnet50", "fc.weight", (1000, 2048)),
    ("bert-base", "embeddings.word_embeddings.weight", (30522, 768)),
    ("bert-base", "encoder.layer.11.intermediate.dense.weight", (3072, 768)),
    ("gpt2-small", "h.5.attn.c_attn.weight", (768, 2304)),
])
def test_framework_names_and_shapes(name, tensor, shape):
    shapes = {t.name: t.shape for t in get_profile(name).tensors}
    assert shapes[tensor] == shape


@pytest.mark.parametrize("name", sorted(MODELS))
def test_layers_numbered_front_to_back_within_the_option(name):
    p = get_profile(name)
    assert 1 <= len(p.layers) <= MAX_LAYERS
    for i, layer in enumerate(p.layers):
        assert layer.index == i
        assert layer.tensors, f"layer {i} ({layer.name}) has no parameters"
        assert all(t.layer == i for t in layer.tensors)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_backward_order_is_last_layer_first(name):
    p = get_profile(name)
    order = p.backward_order()
    assert sorted(t.name for t in order) == sorted(t.name for t in p.tensors)
    layers = [t.layer for t in order]
    assert layers == sorted(layers, reverse=True)
    assert layers[0] == len(p.layers) - 1 and layers[-1] == 0


def test_first_tensors_of_backward_are_the_heads():
    assert [t.name for t in get_profile("alexnet").backward_order()[:2]] == \
        ["classifier.6.bias", "classifier.6.weight"]
    # a block's shortcut projection is registered after conv3, so its gradient comes first
    r = [t.name for t in get_profile("resnet50").backward_order()]
    assert r.index("layer2.0.downsample.1.bias") < r.index("layer2.0.bn3.bias")
    # GPT-2's tied embedding completes last
    assert get_profile("gpt2-small").backward_order()[-1].name == "wte.weight"


def test_three_layer_model_ratios_classes_and_order():
    p = get_profile("threelayer")
    sizes = [layer.nbytes for layer in p.layers]
    assert sizes[1] == 2 * sizes[0] and sizes[2] == 3 * sizes[0]
    assert all(t.nbytes <= threelayer.SHORT_MAX_BYTES for t in p.layers[0].tensors)
    assert all(t.nbytes >= threelayer.LONG_MIN_BYTES
               for layer in p.layers[1:] for t in layer.tensors)
    assert len({t.nbytes for t in p.layers[0].tensors}) == 1   # one partition size per layer
    order = [t.layer for t in p.backward_order()]
    n0, n1, n2 = (len(layer.tensors) for layer in p.layers)
    first_l1 = math.ceil(n1 / 2)
    # L2, part of L1, L0, the rest of L1 (sec. V-A)
    assert order == [2] * n2 + [1] * first_l1 + [0] * n0 + [1] * (n1 - first_l1)
    assert 0 < first_l1 < n1


def test_three_layer_options_checked():
    p = get_profile("threelayer", unit_bytes=4_000_000, l1_first_fraction=0.25)
    assert [len(layer.tensors) for layer in p.layers] == [40, 8, 12]
    assert [t.layer for t in p.backward_order()][12:14] == [1, 1]
    assert [t.layer for t in p.backward_order()][14] == 0
    with pytest.raises(ValueError, match="short_bytes"):
        get_profile("threelayer", short_bytes=200_000)
    with pytest.raises(ValueError, match="long_bytes"):
        get_profile("threelayer", long_bytes=500_000)
    with pytest.raises(ValueError, match="unit_bytes"):
        get_profile("threelayer", unit_bytes=150_000)


def test_paper_batch_sizes_are_the_defaults():
    for name, batch in PAPER_BATCH.items():
        assert get_profile(name).batch_size == batch


def test_compute_times_follow_flops_batch_and_gpu_speed():
    p = get_profile("resnet50")
    for layer in p.layers:
        assert layer.fwd_s > 0 and layer.bwd_s == pytest.approx(2 * layer.fwd_s)
    half = get_profile("resnet50", batch_size=64)
    fast = get_profile("resnet50", gpu_speed=2.0)
    assert half.compute_s == pytest.approx(p.compute_s / 2)
    assert fast.compute_s == pytest.approx(p.compute_s / 2)
    assert fast.gpu_speed == 2.0
    # ResNet50's forward is 4.1 GMAC per 224x224 image (8.2 GFLOP)
    assert p.fwd_s * compute.lookup_gpu("V100").sustained_flops / p.batch_size == \
        pytest.approx(8.18e9, rel=0.01)


def test_compute_times_are_in_the_published_range():
    """One V100, fp32: torchvision ResNet50 trains at 380 img/s (NVIDIA
    DeepLearningExamples); the model is calibrated there, the others follow
    from their FLOPs (docs/workload.md)."""
    speeds = {name: get_profile(name).batch_size / get_profile(name).compute_s
              for name in PAPER_BATCH}
    assert 340 <= speeds["resnet50"] <= 420
    assert speeds["alexnet"] > speeds["resnet50"] > speeds["vgg19"]
    assert 50 <= speeds["vgg19"] <= 200


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="model: unknown model 'resnet'"):
        get_profile("resnet")
    with pytest.raises(ValueError, match="batch_size"):
        get_profile("alexnet", batch_size=0)
    with pytest.raises(ValueError, match="gpu: unknown GPU 'K80'"):
        get_profile("alexnet", gpu="K80")
    with pytest.raises(ValueError, match="gpu_speed"):
        get_profile("alexnet", gpu_speed=0)
