"""Scaling a target cluster's training traffic onto the testbed.

A run models a *target* cluster (its host link rate, its GPU) on a testbed
whose links are far slower (100 Mbit/s against 10-100 Gbit/s). What must
carry over is the target's communication-to-computation ratio: a tensor of
B bytes takes 8B / target_link_bps on the target and compute step takes C s,
so on the testbed

    8 * (B * byte_scale) / testbed_link_bps  :  C * time_scale

is the target's ratio exactly when

    byte_scale / testbed_link_bps == time_scale / target_link_bps.

Three ways to get there (docs/workload.md, "Scaling"):

* ``bytes`` (the default, docs/design.md §8): byte_scale = testbed/target,
  time_scale = 1. Compute times stay the target's, so iteration times and
  samples/s read directly at target scale; tensors shrink by the link ratio.
* ``time``: byte_scale = 1, time_scale = target/testbed. Tensors keep their
  real sizes (packet counts, short/long classes on the wire); compute
  stretches, so an iteration takes target/testbed times longer.
* ``both``: a byte_scale in between, time_scale = byte_scale *
  target/testbed. The byte_scale is given, or the smallest that keeps the
  smallest tensor at ``min_tensor_bytes`` (``smallest_bytes``), or the
  smallest whose size floor inflates the iteration's total bytes by at most
  ``max_inflation`` (``sizes``).

No tensor or partition is made smaller than ``min_tensor_bytes`` (a few
full-size segments) by scaling; one that was already smaller at the target
keeps its own size. Where that floor applies the tensor is larger than the
exact scale, so its communication takes longer than the target's ratio says:
``describe(sizes)`` reports how many tensors and bytes that touches, and the
resulting inflation of total communication.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from common.excerpt import shown

MSS_BYTES = 1448                     # TCP payload of a 1500-byte MTU segment with timestamps
MIN_PACKETS = 4
DEFAULT_MIN_TENSOR_BYTES = MIN_PACKETS * MSS_BYTES
MODES = ("bytes", "time", "both", "fit")


def _positive(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"{field}: must be a positive number, got {shown(value)}")
    return float(value)


@dataclass(frozen=True)
class Scaling:
    target_link_bps: float          # the cluster being modelled, e.g. 10e9
    testbed_link_bps: float         # this fabric's host link rate, e.g. 100e6
    byte_scale: float               # multiply target bytes by this
    time_scale: float               # multiply target compute times by this
    min_tensor_bytes: int           # no tensor/partition smaller than this after scaling
    mode: str = "bytes"
    target_gpu: str = "V100"

    def __post_init__(self):
        for f in ("target_link_bps", "testbed_link_bps", "byte_scale", "time_scale"):
            _positive(f, getattr(self, f))
        if isinstance(self.min_tensor_bytes, bool) or not isinstance(self.min_tensor_bytes, int) \
                or self.min_tensor_bytes < 1:
            raise ValueError(f"min_tensor_bytes: must be a positive integer, got {shown(self.min_tensor_bytes)}")
        if self.mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {shown(self.mode)}")

    def tensor_bytes(self, target_bytes: int) -> int:
        """The testbed size of a tensor (or partition) of ``target_bytes``."""
        if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes < 1:
            raise ValueError(f"target_bytes: must be a positive integer, got {shown(target_bytes)}")
        return max(round(target_bytes * self.byte_scale), min(target_bytes, self.min_tensor_bytes))

    def compute_s(self, target_s: float) -> float:
        """The testbed duration of a compute step of ``target_s`` on the target GPU."""
        if target_s < 0:
            raise ValueError(f"target_s: must be >= 0, got {target_s}")
        return target_s * self.time_scale

    def target_s(self, testbed_s: float) -> float:
        """A testbed duration (iteration time, FCT) read at target scale."""
        return testbed_s / self.time_scale

    @property
    def ratio_factor(self) -> float:
        """Testbed comm/compute ratio over the target's for an unclamped tensor (1.0 = preserved)."""
        return self.byte_scale * self.target_link_bps / (self.testbed_link_bps * self.time_scale)

    def describe(self, sizes: Iterable[int] | None = None) -> dict:
        """Every effective number, for the results file and the summary; with
        ``sizes`` (the target sizes of every tensor or partition sent in one
        iteration) also the totals and what the size floor did to them."""
        out = {"mode": self.mode, "target_link_bps": self.target_link_bps,
               "testbed_link_bps": self.testbed_link_bps, "target_gpu": self.target_gpu,
               "byte_scale": self.byte_scale, "time_scale": self.time_scale,
               "min_tensor_bytes": self.min_tensor_bytes, "ratio_factor": self.ratio_factor}
        if sizes is not None:
            sizes = list(sizes)
            scaled = [self.tensor_bytes(s) for s in sizes]
            exact = sum(s * self.byte_scale for s in sizes)
            floored = [(s, b) for s, b in zip(sizes, scaled) if b > round(s * self.byte_scale)]
            target_total, testbed_total = sum(sizes), sum(scaled)
            out.update({
                "tensors": len(sizes),
                "target_total_bytes": target_total,
                "testbed_total_bytes": testbed_total,
                "exact_testbed_total_bytes": exact,
                "floored_tensors": len(floored),
                "floored_extra_bytes": sum(b - s * self.byte_scale for s, b in floored),
                "effective_byte_scale": testbed_total / target_total if target_total else None,
                # total communication time on the testbed over what the target's ratio asks for
                "comm_inflation": testbed_total / exact if exact else None,
                "target_comm_s": 8 * target_total / self.target_link_bps,
                "testbed_comm_s": 8 * testbed_total / self.testbed_link_bps,
            })
        return out


def _inflation(sizes: list[int], b: float, floor: int) -> float:
    # as Scaling.tensor_bytes and describe() count it
    exact = sum(s * b for s in sizes)
    return sum(max(round(s * b), min(s, floor)) for s in sizes) / exact


def scaling_for(target_link_bps: float, testbed_link_bps: float, *, mode: str = "bytes",
                byte_scale: float | None = None, smallest_bytes: int | None = None,
                sizes: Iterable[int] | None = None, max_inflation: float = 1.05,
                min_tensor_bytes: int = DEFAULT_MIN_TENSOR_BYTES, target_gpu: str = "V100") -> Scaling:
    """The scaling that preserves the target's communication-to-computation
    ratio. ``mode="both"`` needs one of: ``byte_scale``; ``smallest_bytes``
    (the smallest target tensor/partition: byte_scale is then the smallest
    that keeps it at ``min_tensor_bytes``); ``sizes`` (every target
    tensor/partition of an iteration: byte_scale is then the smallest whose
    floor adds at most ``max_inflation`` - 1 to the iteration's bytes).
    ``mode="fit"`` is ``both`` by the ``sizes`` rule, which it requires."""
    target = _positive("target_link_bps", target_link_bps)
    testbed = _positive("testbed_link_bps", testbed_link_bps)
    link_ratio = testbed / target
    if mode == "bytes":
        b = link_ratio
    elif mode == "time":
        b = 1.0
    elif mode == "fit" and (sizes is None or byte_scale is not None or smallest_bytes is not None):
        raise ValueError("sizes: mode 'fit' takes the target size of every tensor/partition "
                         "and nothing else (byte_scale, smallest_bytes: mode 'both')")
    elif mode in ("both", "fit"):
        lo, hi = sorted((link_ratio, 1.0))      # between pure byte scaling and none
        if byte_scale is not None:
            b = _positive("byte_scale", byte_scale)
            if not lo <= b <= hi:
                raise ValueError(f"byte_scale: must be within [{lo:g}, {hi:g}] (testbed/target "
                                 f"link rate .. 1), got {shown(byte_scale)}")
        elif smallest_bytes is not None:
            b = min(max(min_tensor_bytes / _positive("smallest_bytes", smallest_bytes), lo), hi)
        elif sizes is not None:
            sizes = list(sizes)
            if not sizes or min(sizes) < 1:
                raise ValueError("sizes: must be a non-empty list of positive byte counts")
            if _positive("max_inflation", max_inflation) < 1:
                raise ValueError(f"max_inflation: must be >= 1, got {shown(max_inflation)}")
            # the inflation falls as byte_scale grows: bisect on a log scale
            b = hi
            if _inflation(sizes, lo, min_tensor_bytes) <= max_inflation:
                b = lo
            else:
                a, z = math.log(lo), math.log(hi)
                for _ in range(60):
                    mid = (a + z) / 2
                    if _inflation(sizes, math.exp(mid), min_tensor_bytes) <= max_inflation:
                        z = mid
                    else:
                        a = mid
                b = math.exp(z)
        else:
            raise ValueError("byte_scale: mode 'both' needs byte_scale, smallest_bytes or sizes")
    else:
        raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {shown(mode)}")
    return Scaling(target, testbed, b, b / link_ratio, min_tensor_bytes, mode, target_gpu)
