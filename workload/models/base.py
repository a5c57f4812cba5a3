"""What a model profile is: its parameter tensors, grouped into layers, with
per-layer compute times.

A model module describes its architecture once as a list of :class:`LayerSpec`
(the layer's parameter tensors with their shapes, and its forward FLOPs per
sample); :func:`build_profile` turns that into a :class:`ModelProfile` for a
batch size and a GPU (compute times from :mod:`workload.compute`).

"Layer" here is a layer *with parameters*, numbered from the front (0 = the
input side), which is also the layer a tensor carries in the TaLB option
(a u8: at most 256 layers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

GRAD_BYTES = 4          # fp32 gradients (issue 10)
MAX_LAYERS = 256        # the TaLB option's layer field is a u8


@dataclass(frozen=True)
class ParamTensor:
    name: str                       # the framework's name, e.g. "features.0.weight"
    layer: int                      # 0 = front (input) layer = highest priority
    numel: int
    shape: tuple[int, ...] = ()     # the framework's shape; () when not given

    def __post_init__(self):
        if self.numel <= 0:
            raise ValueError(f"numel: must be positive, got {self.numel} for {self.name!r}")
        if self.shape and math.prod(self.shape) != self.numel:
            raise ValueError(f"shape: {self.shape} holds {math.prod(self.shape)} values, "
                             f"not numel={self.numel} ({self.name!r})")

    @property
    def nbytes(self) -> int:
        return GRAD_BYTES * self.numel


@dataclass(frozen=True)
class Layer:
    index: int                      # == position in ModelProfile.layers, 0 = front
    name: str
    tensors: tuple[ParamTensor, ...]
    fwd_s: float                    # forward compute time per iteration (whole batch)
    bwd_s: float                    # backward compute time per iteration
    # a fully connected layer (its weight an outputs x inputs matrix): what sufficient
    # factor broadcasting can send as factors (Poseidon, ATC 2017; workload/hybrid.py)
    fully_connected: bool = False

    @property
    def fc_shape(self) -> tuple[int, int] | None:
        """(M inputs, N outputs) of a fully connected layer's weight, else None."""
        if not self.fully_connected:
            return None
        w = next(t for t in self.tensors if len(t.shape) == 2)
        return w.shape[1], w.shape[0]

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    batch_size: int
    gpu: str                        # the GPU the times are for, e.g. "V100"
    layers: tuple[Layer, ...]       # front to back
    gpu_speed: float = 1.0          # the times are the GPU table's divided by this
    notes: str = ""                 # which definition (e.g. "torchvision alexnet")
    sample_unit: str = "samples"    # what one sample is (images, sequences of 128 tokens)
    # A model whose gradients do not come out in reverse registration order
    # (the three-layer simulation model) gives its order here: names of every tensor.
    send_order: tuple[str, ...] | None = None

    def __post_init__(self):
        if not self.layers:
            raise ValueError(f"layers: a profile needs at least one layer ({self.name!r})")
        if len(self.layers) > MAX_LAYERS:
            raise ValueError(f"layers: {len(self.layers)} layers in {self.name!r}, "
                             f"the TaLB option's layer is a u8 (at most {MAX_LAYERS})")
        for i, layer in enumerate(self.layers):
            if layer.index != i:
                raise ValueError(f"layers[{i}].index: must be {i}, got {layer.index}")
            bad = [t.name for t in layer.tensors if t.layer != i]
            if bad:
                raise ValueError(f"layers[{i}]: tensors {bad} carry another layer index")
        names = [t.name for t in self.tensors]
        if len(set(names)) != len(names):
            raise ValueError(f"tensors: duplicate names in {self.name!r}")
        if self.send_order is not None and sorted(self.send_order) != sorted(names):
            raise ValueError(f"send_order: must name every tensor of {self.name!r} exactly once")

    @property
    def tensors(self) -> list[ParamTensor]:
        """Every parameter tensor in forward (registration) order."""
        return [t for layer in self.layers for t in layer.tensors]

    @property
    def total_params(self) -> int:
        return sum(layer.numel for layer in self.layers)

    @property
    def total_bytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    @property
    def fwd_s(self) -> float:
        return sum(layer.fwd_s for layer in self.layers)

    @property
    def bwd_s(self) -> float:
        return sum(layer.bwd_s for layer in self.layers)

    @property
    def compute_s(self) -> float:
        """One iteration's compute on one GPU (forward + backward, no communication)."""
        return self.fwd_s + self.bwd_s

    def backward_order(self) -> list[ParamTensor]:
        """The order back-propagation produces the gradients: the reverse of
        forward registration order, last layer first (PyTorch DDP builds its
        gradient buckets on the same assumption), unless the profile states
        its own ``send_order``."""
        if self.send_order is None:
            return list(reversed(self.tensors))
        by_name = {t.name: t for t in self.tensors}
        return [by_name[n] for n in self.send_order]

    def summary(self) -> dict:
        return {"model": self.name, "definition": self.notes, "layers": len(self.layers),
                "tensors": len(self.tensors), "params": self.total_params,
                "gradient_bytes": self.total_bytes, "batch_size": self.batch_size,
                "gpu": self.gpu, "gpu_speed": self.gpu_speed,
                "fwd_s": self.fwd_s, "bwd_s": self.bwd_s, "compute_s": self.compute_s}


# --- describing an architecture --------------------------------------------------------
@dataclass
class LayerSpec:
    """One layer as an architecture module writes it: its tensors (name,
    shape) in registration order and its forward FLOPs for one sample."""
    name: str
    params: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    fwd_flops: float = 0.0          # per sample; a multiply-add counts 2
    fully_connected: bool = False   # a Linear layer: weight (outputs, inputs) first

    def add(self, name: str, *shape: int) -> "LayerSpec":
        self.params.append((name, tuple(shape)))
        return self


def build_profile(name: str, specs: list[LayerSpec], *, batch_size: int, gpu: str,
                  gpu_speed: float, notes: str = "", sample_unit: str = "samples",
                  send_order: tuple[str, ...] | None = None) -> ModelProfile:
    from workload.compute import layer_times

    layers = []
    for i, spec in enumerate(specs):
        tensors = tuple(ParamTensor(pname, i, math.prod(shape), shape) for pname, shape in spec.params)
        fwd_s, bwd_s = layer_times(spec.fwd_flops, batch_size=batch_size, gpu=gpu, gpu_speed=gpu_speed)
        layers.append(Layer(i, spec.name, tensors, fwd_s, bwd_s, spec.fully_connected))
    return ModelProfile(name, batch_size, gpu, tuple(layers), gpu_speed=gpu_speed, notes=notes,
                        sample_unit=sample_unit, send_order=send_order)
