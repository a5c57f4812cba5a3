"""The PyTorch DDP client without a fabric (workload/torch_rank.py,
torch_job.py, torch_run.py; the live runs: tests/test_torch_live.py): the
models in the profiles' shape, the priority rule of DDP's bucket order,
clear errors (a model it does not build, torch missing), the presets, and
torch staying optional (nothing outside the rank program imports it)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import skip_or_fail
from workload import torch_run
from workload.experiment import RunConfig
from workload.models import MODELS


@pytest.fixture(scope="module")
def torch():
    try:
        import torch
    except ImportError:
        skip_or_fail("torch is not installed (make setup installs talb[torch])")
    return torch


@pytest.mark.parametrize("model", ["resnet50", "gpt2-small"])
def test_model_has_the_profiles_layers_and_tensors(torch, model):
    """One Timed layer per profile layer, and in each as many parameter
    tensors as the profile's layer has, front to back; the forward and
    backward run and every parameter gets a gradient."""
    from workload.torch_rank import batch_for, build_model

    spec = {"model": model, "width": 0.05, "batch": 2, "seed": 1}
    net, layers, make_batch, loss_of = build_model(spec)
    profile = MODELS[model]()
    assert len(layers) == len(profile.layers)
    assert [len(list(t.parameters())) for t in layers] == [len(x.tensors) for x in profile.layers]
    assert len(list(net.parameters())) == len(profile.tensors)
    x, y = batch_for(spec, make_batch, 0, 0)
    loss_of(net(x), y).backward()
    assert all(p.grad is not None for p in net.parameters())


def test_layer_times_are_slept_forward_and_backward(torch):
    """The emulated compute: each layer's forward time in forward, its
    backward time in backward (the profile's, as given)."""
    import time

    from workload.torch_rank import batch_for, build_model

    n = len(MODELS["gpt2-small"]().layers)
    spec = {"model": "gpt2-small", "width": 0.05, "batch": 1, "seed": 1,
            "layer_s": [[0.004, 0.008]] * n}
    net, _, make_batch, loss_of = build_model(spec)
    x, y = batch_for(spec, make_batch, 0, 0)
    t0 = time.perf_counter()
    loss = loss_of(net(x), y)
    fwd = time.perf_counter() - t0
    loss.backward()
    bwd = time.perf_counter() - t0 - fwd
    assert fwd >= 0.004 * n and bwd >= 0.008 * n


def test_bucket_order_rule_serves_the_front_layers_first():
    buckets = [{"index": i, "layers": ls} for i, ls in enumerate([[7, 8], [4, 5, 6], [0, 1, 2, 3]])]
    out = torch_run.bucket_layers(buckets)
    # the first bucket out holds the last layers: lowest priority; the last out, layer 0
    assert [b["talb_layer"] for b in out] == [2, 1, 0]
    assert out[2]["layers"][0] == 0


def _cfg(**kw):
    return RunConfig(**{"model": "resnet50", "arch": "allreduce", "workers": 2,
                        "client": "torch", **kw})


@pytest.mark.parametrize("kw, match", [
    ({"model": "alexnet"}, "--model: --client torch builds resnet50, gpt2-small"),
    ({"workers": 1}, "--workers: a DDP job across the fabric needs at least 2 ranks"),
    ({"connections": "pool:4"}, "--connections: gloo opens its own connections"),
    ({"mpi_tag": "sometimes"}, "--mpi-tag: one of auto, on, off"),
])
def test_bad_configuration_names_the_flag(kw, match):
    with pytest.raises(ValueError, match=match):
        torch_run.validate(_cfg(**kw))


def test_missing_torch_names_the_extra(tmp_path):
    """A Python without torch: the error says how to get it."""
    from workload.torch_job import TorchError, check_torch

    bare = tmp_path / "python"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S -I -c 'import sys; sys.path[:] = "
                    "[p for p in sys.path if \"packages\" not in p]; exec(sys.argv[1])' \"$2\"\n")
    bare.chmod(0o755)
    with pytest.raises(TorchError, match=r"cannot import torch; pip install 'talb\[torch\]' "
                                         r"\(torch==2\.13\.0"):
        check_torch(str(bare))


def test_torch_stays_optional():
    """The CLI, the run and the launcher import no torch: `pip install talb`
    without the extra works (only the rank program, in its own process, does)."""
    code = ("import sys, talb.cli, talb.cli_run, workload.torch_run, workload.torch_job, "
            "experiments.sweep.runner; sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_torch_presets():
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.plan import ALL_SCHEMES, PlanError

    full = build_plan("torch", implemented=frozenset(ALL_SCHEMES))
    assert {r.scheme for r in full.runs} == set(ALL_SCHEMES)
    assert {r.client for r in full.runs} == {"torch"} and {r.load for r in full.runs} == {0.3}
    assert {r.model for r in full.runs} == {"resnet50", "gpt2-small"}
    assert {r.arch for r in full.runs} == {"allreduce"} and {r.workers for r in full.runs} == {4}
    assert full.seed_rule.metric == "iteration_time_s" and full.figure == "torch"
    assert len(full.runs) == len(ALL_SCHEMES) * 2 * 5
    quick = build_plan("torch-quick", implemented=frozenset(ALL_SCHEMES))
    assert len(quick.runs) == 4 and {r.scheme for r in quick.runs} == {"ecmp", "talb"}
    assert all("client=torch" in r.label() for r in quick.runs)
    with pytest.raises(PlanError, match="--connections: gloo opens its own connections"):
        build_plan("quick-ci", implemented=frozenset(ALL_SCHEMES), clients=["torch"],
                   connections=["pool:8"])
