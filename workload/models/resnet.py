"""ResNet50 as torchvision defines it (torchvision.models.resnet50, i.e. v1.5:
stride 2 in the 3x3 convolution; 224x224 input).

Layer = one convolution (or the final linear layer) together with the
BatchNorm that follows it: 49 convolutions on the main path + fc = the "50"
of ResNet50, plus the 4 downsample projections = 54 layers, 161 tensors,
25,557,032 parameters (BatchNorm weight and bias are parameters; running
statistics are buffers and never sent). A downsample projection is numbered
after its block's conv3, the order torchvision registers (and runs) it, so
backward produces its gradients first within the block.
"""
from __future__ import annotations

from workload.compute import conv_flops, linear_flops
from workload.models.base import LayerSpec, ModelProfile, build_profile

BATCH_SIZE = 128    # TaLB sec. IV-A
EXPANSION = 4
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # width, blocks, stride


def _conv_bn(conv: str, bn: str, c_in: int, c_out: int, k: int, out_hw: int) -> LayerSpec:
    return (LayerSpec(conv, fwd_flops=conv_flops(c_in, c_out, k, out_hw, out_hw))
            .add(f"{conv}.weight", c_out, c_in, k, k)
            .add(f"{bn}.weight", c_out).add(f"{bn}.bias", c_out))


def specs() -> list[LayerSpec]:
    out = [_conv_bn("conv1", "bn1", 3, 64, 7, 112)]
    c_in, hw = 64, 56           # after the stride-2 7x7 conv and the 3x3/2 max pool
    for stage, (width, blocks, stride) in enumerate(STAGES, start=1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            p = f"layer{stage}.{b}"
            out_hw = hw // s
            out.append(_conv_bn(f"{p}.conv1", f"{p}.bn1", c_in, width, 1, hw))
            out.append(_conv_bn(f"{p}.conv2", f"{p}.bn2", width, width, 3, out_hw))
            out.append(_conv_bn(f"{p}.conv3", f"{p}.bn3", width, width * EXPANSION, 1, out_hw))
            if b == 0:          # the first block of a stage projects the shortcut
                out.append(_conv_bn(f"{p}.downsample.0", f"{p}.downsample.1",
                                    c_in, width * EXPANSION, 1, out_hw))
            c_in, hw = width * EXPANSION, out_hw
    out.append(LayerSpec("fc", fwd_flops=linear_flops(c_in, 1000), fully_connected=True)
               .add("fc.weight", 1000, c_in).add("fc.bias", 1000))
    return out


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0) -> ModelProfile:
    return build_profile("resnet50", specs(), batch_size=batch_size or BATCH_SIZE, gpu=gpu,
                         gpu_speed=gpu_speed, notes="torchvision resnet50 (v1.5), 224x224 input; "
                         "layer = conv + its BatchNorm", sample_unit="images")
