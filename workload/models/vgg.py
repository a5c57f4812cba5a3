"""VGG19 as torchvision defines it (torchvision.models.vgg19, no batch norm;
224x224 input).

19 layers with parameters (16 convolutions, 3 linear), 38 tensors,
143,667,240 parameters. Layer = one Conv2d or Linear module.
"""
from __future__ import annotations

from workload.compute import conv_flops, linear_flops
from workload.models.base import LayerSpec, ModelProfile, build_profile

BATCH_SIZE = 32     # TaLB sec. IV-A
# torchvision's configuration "E": channels of each 3x3 conv, "M" a 2x2 max pool.
CFG_E = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
         512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


def specs() -> list[LayerSpec]:
    out: list[LayerSpec] = []
    c_in, hw, index = 3, 224, 0
    for v in CFG_E:
        if v == "M":
            hw //= 2
            index += 1
            continue
        name = f"features.{index}"
        out.append(LayerSpec(name, fwd_flops=conv_flops(c_in, v, 3, hw, hw))
                   .add(f"{name}.weight", v, c_in, 3, 3).add(f"{name}.bias", v))
        c_in = v
        index += 2          # Conv2d, ReLU
    for name, n_in, n_out in (("classifier.0", 512 * 7 * 7, 4096),
                              ("classifier.3", 4096, 4096),
                              ("classifier.6", 4096, 1000)):
        out.append(LayerSpec(name, fwd_flops=linear_flops(n_in, n_out), fully_connected=True)
                   .add(f"{name}.weight", n_out, n_in).add(f"{name}.bias", n_out))
    return out


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0) -> ModelProfile:
    return build_profile("vgg19", specs(), batch_size=batch_size or BATCH_SIZE, gpu=gpu,
                         gpu_speed=gpu_speed, notes="torchvision vgg19 (no batch norm), 224x224 input",
                         sample_unit="images")
