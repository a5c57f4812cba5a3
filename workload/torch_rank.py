"""One rank of a PyTorch DistributedDataParallel job (workload/torch_job.py
starts one per host, in the host's namespace: `talb run --client torch`).

Self-contained on purpose, like workload/mpi_rank.py: it imports the
standard library and torch only, and takes everything from the JSON file
named by its first argument (its rank is the second). It writes its result
as JSON to ``<job dir>/rank-<r>.json``.

What it runs, unmodified PyTorch: ``torch.distributed`` with backend gloo,
rendezvous by a TCP store at rank 0's fabric address (``init_method
tcp://IP:PORT``), a real ``torch.nn`` model built here in the shape of a
model profile (:func:`build_model`: a ResNet-50-shaped convnet or a
GPT-2-small-shaped transformer, widths scaled by ``spec["width"]``), wrapped
in ``DistributedDataParallel`` with ``bucket_cap_mb`` from the spec, trained
with SGD on data drawn from a seed per (iteration, rank).

Compute: the forward and backward arithmetic is real (the scaled model on
a small batch); the profile's layer times (the target GPU's, for the
profile's batch) are added as sleeps by :class:`LayerTime`, an autograd
function after each layer: its forward sleeps the layer's forward time, its
backward the layer's backward time, so DDP's bucket hooks fire between the
layers' backward steps as on a GPU (overlap of communication and compute).

Correct, or it failed: the ranks' parameters are hashed (sha256) after
training, and rank 0 replays the same iterations in one process on the
ranks' batches concatenated, no DDP, no sleeps (:func:`reference_params`):
DDP's averaged gradient equals the full batch's mean-loss gradient, so the
parameters must agree within :data:`RTOL`/:data:`ATOL` (float32 sums in
another order).

A failure injection for tests: ``spec["die"] = {"rank": r, "iteration": i}``
makes rank r exit with :data:`DIE_CODE` at iteration i, saying so on stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

#: parameters agree with the single-process run when |a - b| <= ATOL + RTOL |b|
RTOL, ATOL = 1e-4, 1e-6
DIE_CODE = 17
#: ResNet-50's stages (workload/models/resnet.py): width, blocks, stride
RESNET_STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))
#: GPT-2 small (workload/models/gpt2.py)
GPT2 = {"hidden": 768, "mlp": 3072, "blocks": 12, "vocab": 50257, "positions": 1024, "heads": 12}
MODELS = ("resnet50", "gpt2-small")


def _scaled(n: int, width: float, multiple: int = 1) -> int:
    return max(multiple, int(round(n * width / multiple)) * multiple)


def build_model(spec: dict):
    """(model, layers, make_batch): the torch.nn model of ``spec["model"]``,
    its layers front to back (what LayerTime follows, one per profile
    layer), and ``make_batch(generator, n) -> (inputs, targets)``."""
    import torch
    from torch import nn

    width = float(spec["width"])
    times = spec.get("layer_s") or None

    class LayerTime(torch.autograd.Function):
        """Sleep the layer's forward time going forward, its backward time going back."""

        @staticmethod
        def forward(ctx, x, fwd_s, bwd_s):
            ctx.bwd_s = bwd_s
            if fwd_s > 0:
                time.sleep(fwd_s)
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            if ctx.bwd_s > 0:
                time.sleep(ctx.bwd_s)
            return grad, None, None

    class Timed(nn.Module):
        """A profile layer: its module, then its compute time (LayerTime)."""

        def __init__(self, module, index):
            super().__init__()
            self.module, self.index = module, index
            self.emulate = True

        def forward(self, x):
            y = self.module(x)
            if times and self.emulate:
                fwd, bwd = times[self.index]
                y = LayerTime.apply(y, fwd, bwd)
            return y

    class Affine(nn.Module):
        """BatchNorm's weight and bias without its batch statistics: one
        profile tensor each, and a rank's result independent of the others'
        batches (the single-process check stays exact)."""

        def __init__(self, c):
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

        def forward(self, x):
            return x * self.weight[None, :, None, None] + self.bias[None, :, None, None]

    layers: list = []

    def timed(module):
        t = Timed(module, len(layers))
        layers.append(t)
        return t

    if spec["model"] == "resnet50":
        def conv(c_in, c_out, k, stride=1):
            return timed(nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False),
                                       Affine(c_out)))

        class Bottleneck(nn.Module):
            def __init__(self, c_in, w, stride):
                super().__init__()
                self.conv1, self.conv2 = conv(c_in, w, 1), conv(w, w, 3, stride)
                self.conv3 = conv(w, 4 * w, 1)
                self.down = conv(c_in, 4 * w, 1, stride) if stride != 1 or c_in != 4 * w else None

            def forward(self, x):
                y = self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x)))))
                return torch.relu(y + (self.down(x) if self.down is not None else x))

        c0 = _scaled(64, width)
        mods = [conv(3, c0, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        c_in = c0
        for w, blocks, stride in RESNET_STAGES:
            w = _scaled(w, width)
            for b in range(blocks):
                mods.append(Bottleneck(c_in, w, stride if b == 0 else 1))
                c_in = 4 * w
        classes = _scaled(1000, width)
        mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), timed(nn.Linear(c_in, classes))]
        model = nn.Sequential(*mods)
        hw = int(spec.get("image_hw", 32))

        def make_batch(g, n):
            return (torch.randn(n, 3, hw, hw, generator=g),
                    torch.randint(0, classes, (n,), generator=g))
        loss_of = nn.functional.cross_entropy
    elif spec["model"] == "gpt2-small":
        heads = GPT2["heads"]
        hid = _scaled(GPT2["hidden"], width, heads)
        mlp, vocab = 4 * hid, _scaled(GPT2["vocab"], width)
        seq = int(spec.get("seq_len", 16))
        positions = max(seq, _scaled(GPT2["positions"], width))

        class Conv1D(nn.Module):
            """GPT-2's Conv1D: weight (in, out)."""

            def __init__(self, n_in, n_out):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
                self.bias = nn.Parameter(torch.zeros(n_out))

            def forward(self, x):
                return x @ self.weight + self.bias

        class Embeddings(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.wpe = nn.Embedding(vocab, hid), nn.Embedding(positions, hid)

            def forward(self, ids):
                return self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))[None]

        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_1, self.c_attn, self.c_proj = nn.LayerNorm(hid), Conv1D(hid, 3 * hid), Conv1D(hid, hid)

            def forward(self, x):
                b, t, _ = x.shape
                q, k, v = self.c_attn(self.ln_1(x)).split(hid, dim=2)
                q, k, v = (z.view(b, t, heads, hid // heads).transpose(1, 2) for z in (q, k, v))
                y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                return x + self.c_proj(y.transpose(1, 2).reshape(b, t, hid))

        class Mlp(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln_2, self.c_fc, self.c_proj = nn.LayerNorm(hid), Conv1D(hid, mlp), Conv1D(mlp, hid)

            def forward(self, x):
                return x + self.c_proj(nn.functional.gelu(self.c_fc(self.ln_2(x))))

        emb = Embeddings()
        mods = [timed(emb)]
        for _ in range(GPT2["blocks"]):
            mods += [timed(Attention()), timed(Mlp())]
        ln_f = nn.LayerNorm(hid)

        class Head(nn.Module):
            """ln_f and the LM head tied to wte (its compute, no tensor of its own)."""

            def __init__(self):
                super().__init__()
                self.ln_f = ln_f

            def forward(self, x):
                return self.ln_f(x) @ emb.wte.weight.t()

        mods.append(timed(Head()))
        model = nn.Sequential(*mods)

        def make_batch(g, n):
            ids = torch.randint(0, vocab, (n, seq + 1), generator=g)
            return ids[:, :-1], ids[:, 1:]

        def loss_of(logits, target):
            return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    else:
        raise ValueError(f"--model: the torch client builds {', '.join(MODELS)}, got "
                         f"{spec['model']!r}")
    if times is not None and len(times) != len(layers):
        raise ValueError(f"layer_s: {len(times)} layer times for {len(layers)} layers of "
                         f"{spec['model']}")
    return model, layers, make_batch, loss_of


def batch_for(spec: dict, make_batch, it: int, rank: int):
    import torch

    g = torch.Generator().manual_seed(int(spec["seed"]) * 1_000_003 + it * 1009 + rank)
    return make_batch(g, int(spec["batch"]))


def _fresh(spec: dict):
    import torch

    torch.manual_seed(int(spec["seed"]))        # every rank, and the reference: one init
    return build_model(spec)


def _checksum(model) -> str:
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def reference_params(spec: dict, world: int) -> dict:
    """The parameters after a single-process run of the same iterations on
    every rank's batch at once (no DDP, no sleeps)."""
    import torch

    model, layers, make_batch, loss_of = _fresh(spec)
    for t in layers:
        t.emulate = False
    opt = torch.optim.SGD(model.parameters(), lr=float(spec["lr"]))
    for it in range(int(spec["iterations"])):
        parts = [batch_for(spec, make_batch, it, r) for r in range(world)]
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        opt.zero_grad()
        loss_of(model(x), y).backward()
        opt.step()
    return {n: p.detach() for n, p in model.named_parameters()}


def _await_go(spec: dict, rank: int) -> float | None:
    """Say ready (``ready-<rank>`` beside the spec), then wait for the
    launcher's go (``spec["go_file"]``: the instant training starts, so that
    a run's clock starts after torch's seconds of import and rendezvous)."""
    go = spec.get("go_file")
    if not go:
        return spec.get("start_at")
    Path(go).with_name(f"ready-{rank}").touch()
    deadline = time.monotonic() + float(spec.get("go_timeout_s", 600))
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: no go from the launcher ({go})")
        time.sleep(0.01)
    return json.loads(Path(go).read_text()).get("start_at")


def train(spec: dict, rank: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(int(spec.get("threads", 1)))
    world = int(spec["world"])
    dist.init_process_group("gloo", init_method=f"tcp://{spec['master_addr']}:{spec['master_port']}",
                            rank=rank, world_size=world,
                            timeout=__import__("datetime").timedelta(seconds=float(spec.get("pg_timeout_s", 120))))
    model, layers, make_batch, loss_of = _fresh(spec)
    index_of = {id(p): t.index for t in layers for p in t.parameters()}
    ddp = DDP(model, bucket_cap_mb=float(spec["bucket_cap_mb"]))
    buckets: dict[int, list] = {}

    def record(state, bucket):
        """DDP's own all-reduce (torch's allreduce_hook), the buckets' order recorded."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        it = state["it"]
        if it in (0, 1) and rank == 0:
            buf = bucket.buffer()
            buckets.setdefault(it, []).append(
                {"index": bucket.index(), "bytes": buf.numel() * buf.element_size(),
                 "layers": sorted({index_of[id(p)] for p in bucket.parameters()})})
        return allreduce_hook(None, bucket)

    state = {"it": 0}
    ddp.register_comm_hook(state, record)
    opt = torch.optim.SGD(ddp.parameters(), lr=float(spec["lr"]))
    dist.barrier()
    ready = time.monotonic()
    start_at = _await_go(spec, rank)
    if start_at and start_at > time.monotonic():
        time.sleep(start_at - time.monotonic())
    start, cpu0 = time.monotonic(), time.process_time()
    its = []
    die = spec.get("die") or {}
    for it in range(int(spec["iterations"])):
        if die.get("rank") == rank and die.get("iteration") == it:
            print(f"rank {rank}: exiting with {DIE_CODE} at iteration {it} (spec die: a "
                  "failure injected by a test)", file=sys.stderr, flush=True)
            os._exit(DIE_CODE)
        state["it"] = it
        x, y = batch_for(spec, make_batch, it, rank)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss = loss_of(ddp(x), y)
        loss.backward()                 # returns when DDP's all-reduces are done
        opt.step()
        its.append({"it": it, "warmup": it < int(spec.get("warmup", 0)),
                    "time_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                    "loss": float(loss.detach())})
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    dist.barrier()
    out = {"rank": rank, "iterations": its, "checksum": _checksum(model), "cpu_s": cpu,
           "t_ready_s": ready, "t_start_s": start, "t_end_s": end,
           "params": sum(p.numel() for p in model.parameters()),
           "tensors": len(list(model.parameters())), "layers": len(layers),
           "buckets": buckets.get(1) or buckets.get(0) or [],
           "buckets_first_iteration": buckets.get(0) or [],
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    dist.destroy_process_group()
    if rank == 0:
        ref = reference_params(spec, world)
        worst, ok = 0.0, True
        for name, p in model.named_parameters():
            a, b = p.detach(), ref[name]
            worst = max(worst, float((a - b).abs().max()))
            ok = ok and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL))
        out["reference"] = {"equal": ok, "max_abs_diff": worst, "rtol": RTOL, "atol": ATOL,
                            "how": "one process, the ranks' batches concatenated, the same "
                                   "SGD steps, no DDP, no sleeps"}
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    rank = int(argv[2])
    out = train(spec, rank)
    path = Path(argv[1]).parent / f"rank-{rank}.json"
    path.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
