"""The TaLB paper's three-layer simulation model (sec. V-A, "Simulation Model").

The paper's text: the model has three layers L0, L1, L2; "the tensor
partition size of each layer is same"; "the ratio of tensor packet size of
L0:L1:L2 is 1:2:3"; L0's tensors go as short flows and L1's and L2's as long
flows (short <= 100 KB, long >= 1 MB, sec. V-A "Baseline and Metrics");
L2's tensors and a portion of L1's are sent first, then L0's, then the rest
of L1's.

Our reading (docs/workload.md, "Three-layer model"): 1:2:3 is the ratio of
the layers' *total* bytes (a per-tensor ratio of 1:2 cannot make L0 short
and L1 long); within a layer all tensors are the same size: L0's
``SHORT_BYTES`` (100 KB), L1's and L2's ``LONG_BYTES`` (1 MB). With the
default unit of 2 MB: L0 = 20 x 100 KB, L1 = 4 x 1 MB, L2 = 6 x 1 MB. "A
portion" of L1 is ``l1_first_fraction`` of its tensors (default half,
rounded up). The paper simulates communication only (one iteration's FCTs),
so compute times default to 0.
"""
from __future__ import annotations

import math

from workload.models.base import Layer, ModelProfile, ParamTensor, GRAD_BYTES
from workload.compute import check_gpu_speed, lookup_gpu

SHORT_MAX_BYTES = 100_000       # sec. V-A: short flows <= 100 KB
LONG_MIN_BYTES = 1_000_000      # sec. V-A: long flows >= 1 MB
SHORT_BYTES = SHORT_MAX_BYTES   # every L0 tensor
LONG_BYTES = LONG_MIN_BYTES     # every L1 and L2 tensor
UNIT_BYTES = 2_000_000          # L0's total; L1 = 2x, L2 = 3x
RATIO = (1, 2, 3)
BATCH_SIZE = 1


def _count(total: int, each: int, field: str) -> int:
    n, rest = divmod(total, each)
    if n < 1 or rest:
        raise ValueError(f"{field}: layer total {total} B is not a whole number (>= 1) of "
                         f"{each} B tensors")
    return n


def profile(*, batch_size: int | None = None, gpu: str = "V100", gpu_speed: float = 1.0,
            unit_bytes: int = UNIT_BYTES, short_bytes: int = SHORT_BYTES,
            long_bytes: int = LONG_BYTES, l1_first_fraction: float = 0.5,
            compute_s: float = 0.0) -> ModelProfile:
    """The three-layer model at the target scale. ``compute_s``: forward time
    of every layer (backward twice that), 0 as in the paper."""
    if short_bytes > SHORT_MAX_BYTES or short_bytes % GRAD_BYTES:
        raise ValueError(f"short_bytes: must be a multiple of {GRAD_BYTES} and <= {SHORT_MAX_BYTES} "
                         f"(L0 is short, sec. V-A), got {short_bytes}")
    if long_bytes < LONG_MIN_BYTES or long_bytes % GRAD_BYTES:
        raise ValueError(f"long_bytes: must be a multiple of {GRAD_BYTES} and >= {LONG_MIN_BYTES} "
                         f"(L1, L2 are long, sec. V-A), got {long_bytes}")
    if not 0.0 <= l1_first_fraction <= 1.0:
        raise ValueError(f"l1_first_fraction: must be within [0, 1], got {l1_first_fraction}")
    if compute_s < 0:
        raise ValueError(f"compute_s: must be >= 0, got {compute_s}")
    lookup_gpu(gpu)
    speed = check_gpu_speed(gpu_speed)
    sizes = (short_bytes, long_bytes, long_bytes)
    counts = [_count(r * unit_bytes, s, f"unit_bytes (L{i})") for i, (r, s) in enumerate(zip(RATIO, sizes))]
    layers = []
    for i, (n, size) in enumerate(zip(counts, sizes)):
        tensors = tuple(ParamTensor(f"L{i}.{k}", i, size // GRAD_BYTES) for k in range(n))
        fwd = compute_s / speed
        layers.append(Layer(i, f"L{i}", tensors, fwd, 2 * fwd))
    names = [[t.name for t in layer.tensors] for layer in layers]
    first = math.ceil(l1_first_fraction * counts[1])
    order = names[2] + names[1][:first] + names[0] + names[1][first:]
    return ModelProfile("threelayer", batch_size or BATCH_SIZE, gpu, tuple(layers), gpu_speed=speed,
                        notes=f"TaLB sec. V-A three-layer model: L0:L1:L2 bytes 1:2:3 "
                              f"(unit {unit_bytes} B), L0 tensors {short_bytes} B, L1/L2 "
                              f"{long_bytes} B; order L2, {first} of L1, L0, rest of L1",
                        send_order=tuple(order))
