"""A tiny model profile for the workload's tests: three layers, a few
hundred kB, real workload.models classes (runs in seconds on the testbed)."""
from __future__ import annotations

from workload.models.base import Layer, ModelProfile, ParamTensor


def tiny_profile(numels=((2_500, 500), (50_000, 250), (100_000,)), fwd_s=0.002, bwd_s=0.004,
                 batch_size=8) -> ModelProfile:
    layers = tuple(
        Layer(i, f"l{i}", tuple(ParamTensor(f"l{i}.t{j}", i, n) for j, n in enumerate(ns)),
              fwd_s, bwd_s)
        for i, ns in enumerate(numels))
    return ModelProfile("tiny", batch_size, "V100", layers, notes="test model")
