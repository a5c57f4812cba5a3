"""AlexNet as torchvision defines it (torchvision.models.alexnet; 224x224 input).

8 layers with parameters (5 convolutions, 3 linear), 16 tensors,
61,100,840 parameters. Layer = one Conv2d or Linear module.
"""
from __future__ import annotations

from workload.compute import conv_flops, linear_flops
from workload.models.base import LayerSpec, ModelProfile, build_profile

BATCH_SIZE = 64     # TaLB sec. IV-A


def _conv(name: str, c_in: int, c_out: int, k: int, out_hw: int) -> LayerSpec:
    return (LayerSpec(name, fwd_flops=conv_flops(c_in, c_out, k, out_hw, out_hw))
            .add(f"{name}.weight", c_out, c_in, k, k).add(f"{name}.bias", c_out))


def _linear(name: str, n_in: int, n_out: int) -> LayerSpec:
    return (LayerSpec(name, fwd_flops=linear_flops(n_in, n_out), fully_connected=True)
            .add(f"{name}.weight", n_out, n_in).add(f"{name}.bias", n_out))


def specs() -> list[LayerSpec]:
    # features: conv 11x11/4 p2 -> 55, pool -> 27, conv 5x5 p2 -> 27, pool -> 13,
    # three 3x3 p1 convs at 13, pool -> 6; classifier on 256*6*6.
    return [
        _conv("features.0", 3, 64, 11, 55),
        _conv("features.3", 64, 192, 5, 27),
        _conv("features.6", 192, 384, 3, 13),
        _conv("features.8", 384, 256, 3, 13),
        _conv("features.10", 256, 256, 3, 13),
        _linear("classifier.1", 256 * 6 * 6, 4096),
        _linear("classifier.4", 4096, 4096),
        _linear("classifier.6", 4096, 1000),
    ]


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0) -> ModelProfile:
    return build_profile("alexnet", specs(), batch_size=batch_size or BATCH_SIZE, gpu=gpu,
                         gpu_speed=gpu_speed, notes="torchvision alexnet, 224x224 input",
                         sample_unit="images")
