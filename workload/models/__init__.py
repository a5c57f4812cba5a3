"""Model profiles: every parameter tensor of a model, grouped into layers,
with per-layer compute times. One module per architecture; to add a model,
add a module with a ``profile(*, batch_size, gpu, gpu_speed)`` function and
register it in ``MODELS``.
"""
from __future__ import annotations

from typing import Callable

from common.excerpt import shown
from workload.compute import check_gpu_speed, lookup_gpu
from workload.models import alexnet, bert, gpt2, resnet, threelayer, vgg
from workload.models.base import GRAD_BYTES, MAX_LAYERS, Layer, ModelProfile, ParamTensor

MODELS: dict[str, Callable[..., ModelProfile]] = {
    "alexnet": alexnet.profile,
    "vgg19": vgg.profile,
    "resnet50": resnet.profile,
    "bert-base": bert.profile,
    "gpt2-small": gpt2.profile,
    "threelayer": threelayer.profile,
}

__all__ = ["MODELS", "get_profile", "ModelProfile", "Layer", "ParamTensor", "GRAD_BYTES", "MAX_LAYERS"]


def get_profile(name: str, *, batch_size: int | None = None, gpu: str = "V100",
                gpu_speed: float = 1.0, **options) -> ModelProfile:
    """The profile of model ``name`` (a key of MODELS); batch_size None = the
    model's default (the paper's for AlexNet, ResNet50, VGG19). ``options``
    go to the model's own ``profile`` (e.g. threelayer's ``unit_bytes``)."""
    try:
        make = MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"model: unknown model {name!r}; known: {', '.join(MODELS)}") from None
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or batch_size < 1):
        raise ValueError(f"batch_size: must be a positive integer, got {shown(batch_size)}")
    lookup_gpu(gpu)
    check_gpu_speed(gpu_speed)
    return make(batch_size=batch_size, gpu=gpu, gpu_speed=gpu_speed, **options)
