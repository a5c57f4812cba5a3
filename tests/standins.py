"""Stand-ins for part a's interfaces (workload.models, workload.scaling)
with the same fields, until that branch is merged (ISSUE10_CONTRACT.md).
Tests only."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParamTensor:
    name: str
    layer: int
    numel: int

    @property
    def nbytes(self) -> int:
        return 4 * self.numel


@dataclass(frozen=True)
class Layer:
    index: int
    name: str
    tensors: tuple
    fwd_s: float
    bwd_s: float


@dataclass(frozen=True)
class ModelProfile:
    name: str
    batch_size: int
    gpu: str
    layers: tuple

    @property
    def total_params(self) -> int:
        return sum(t.numel for layer in self.layers for t in layer.tensors)

    @property
    def total_bytes(self) -> int:
        return 4 * self.total_params

    def backward_order(self):
        return [t for layer in reversed(self.layers) for t in layer.tensors]


def tiny_profile(numels=((2_500, 500), (50_000, 250), (100_000,)), fwd_s=0.002, bwd_s=0.004):
    layers = tuple(
        Layer(i, f"l{i}", tuple(ParamTensor(f"l{i}.t{j}", i, n) for j, n in enumerate(ns)),
              fwd_s, bwd_s)
        for i, ns in enumerate(numels))
    return ModelProfile("tiny", 8, "V100", layers)


@dataclass(frozen=True)
class Scaling:
    target_link_bps: float = 100e6
    testbed_link_bps: float = 100e6
    byte_scale: float = 1.0
    time_scale: float = 1.0
    min_tensor_bytes: int = 4 * 1448

    def tensor_bytes(self, target_bytes: int) -> int:
        return max(self.min_tensor_bytes, round(target_bytes * self.byte_scale))

    def compute_s(self, target_s: float) -> float:
        return target_s * self.time_scale

    def describe(self) -> dict:
        return {"target_link_bps": self.target_link_bps, "testbed_link_bps": self.testbed_link_bps,
                "byte_scale": self.byte_scale, "time_scale": self.time_scale,
                "min_tensor_bytes": self.min_tensor_bytes, "mode": "standin"}
