"""Per-layer compute times: FLOPs over a named GPU's sustained throughput.

    fwd_s = batch_size * fwd_flops_per_sample / (peak_flops * efficiency * gpu_speed)
    bwd_s = 2 * fwd_s

Backward = 2 x forward: each weight layer computes the gradient with respect
to its input and the one with respect to its weights, each costing about as
much as the forward product (the usual 1:2 split of the ~3x forward cost of a
training step). FLOPs count a multiply-add as 2 and include only the
products (convolutions, linear layers, attention's two batched products);
ReLU, pooling and normalisation are a few percent and left out.

The sustained efficiency is calibrated on one published number per GPU (see
``GPUS`` and docs/workload.md, "Compute model"); it is one figure for every
model, so the *relative* times of layers and models come from their FLOPs
alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.excerpt import shown

BWD_PER_FWD = 2.0


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_fp32_flops: float      # the vendor's fp32 peak (FLOP/s)
    efficiency: float           # sustained fraction of the peak in training
    source: str                 # where the numbers come from

    @property
    def sustained_flops(self) -> float:
        return self.peak_fp32_flops * self.efficiency


GPUS: dict[str, Gpu] = {g.name: g for g in (
    # V100 SXM2 fp32 peak 15.7 TFLOPS (NVIDIA V100 datasheet). 0.60: torchvision
    # ResNet50 (v1.5) trains at 380 img/s fp32 on one V100 16G (NVIDIA
    # DeepLearningExamples, PyTorch ResNet50 v1.5 README) = 3 * 8.18 GFLOP * 380
    # = 9.3 TFLOP/s sustained.
    Gpu("V100", 15.7e12, 0.60, "NVIDIA V100 datasheet; efficiency from NVIDIA "
        "DeepLearningExamples ResNet50 v1.5 fp32 (380 img/s, 1x V100 16G)"),
    # A100 fp32 without TF32: 19.5 TFLOPS peak (A100 datasheet); same efficiency
    # as V100 assumed (not calibrated).
    Gpu("A100", 19.5e12, 0.60, "NVIDIA A100 datasheet (fp32, no TF32); efficiency "
        "assumed equal to V100's"),
    # The TaLB testbed's GPU (sec. IV-A). Its 35.6 TFLOPS peak counts Ampere's
    # dual-issue fp32, which convolutions rarely reach: 0.35 assumed (~12.5
    # TFLOP/s, ~1.3x a V100), not calibrated.
    Gpu("RTX3090", 35.6e12, 0.35, "NVIDIA GeForce RTX 3090 spec (fp32); efficiency "
        "assumed"),
)}


def lookup_gpu(name: str) -> Gpu:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"gpu: unknown GPU {name!r}; known: {', '.join(GPUS)}") from None


def check_gpu_speed(gpu_speed) -> float:
    if not isinstance(gpu_speed, (int, float)) or isinstance(gpu_speed, bool) or not gpu_speed > 0:
        raise ValueError(f"gpu_speed: must be a positive number, got {shown(gpu_speed)}")
    return float(gpu_speed)


def layer_times(fwd_flops_per_sample: float, *, batch_size: int, gpu: str = "V100",
                gpu_speed: float = 1.0) -> tuple[float, float]:
    """(forward, backward) seconds of one layer for one iteration (the whole batch)."""
    if fwd_flops_per_sample < 0:
        raise ValueError(f"fwd_flops: must be >= 0, got {fwd_flops_per_sample}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size: must be a positive integer, got {shown(batch_size)}")
    rate = lookup_gpu(gpu).sustained_flops * check_gpu_speed(gpu_speed)
    fwd = batch_size * fwd_flops_per_sample / rate
    return fwd, BWD_PER_FWD * fwd


# --- FLOPs of the building blocks (per sample, forward) ---------------------------------
def conv_flops(c_in: int, c_out: int, k: int, h_out: int, w_out: int, groups: int = 1) -> float:
    return 2.0 * (c_in // groups) * k * k * c_out * h_out * w_out


def linear_flops(n_in: int, n_out: int, tokens: int = 1) -> float:
    return 2.0 * n_in * n_out * tokens


def attention_flops(seq: int, d_model: int) -> float:
    """Q K^T and (softmax) V for one sequence: two seq x seq x d products."""
    return 2 * 2.0 * seq * seq * d_model
