"""The schedulers, tensor fusion and OSF's prediction on a live fabric
(issue 42): each option's run completes every iteration over real TCP
between host namespaces, sends what its record says, and carries OSF's
modelled iteration beside the measured one; `talb run` in its own process
prints them.

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, scheme talb).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from common import paths
from workload.experiment import RunConfig, run
from workload.scaling import scaling_for
from helpers import up_fabric
from tiny_model import tiny_profile

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
ITERATIONS = 3


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY).prefix


def _run(fabric, tmp_path, arch, workers, **kw):
    opts = dict(iterations=ITERATIONS, warmup=1, partition_bytes=100_000, credit_bytes=200_000,
                target_link_bps=100e6, prefix=fabric, out=str(tmp_path / f"{arch}.json"),
                timeout_s=240)
    cfg = RunConfig(model="tiny", arch=arch, workers=workers, **{**opts, **kw})
    return run(cfg, profile=tiny_profile(), scaling=scaling_for(100e6, 100e6))


def _complete(r):
    assert all(i["complete"] for i in r["iterations"]), r["iterations"]
    assert len(r["iterations"]) == ITERATIONS
    o = r["osf"]
    assert o["predicted_iteration_s"] > 0 and o["measured_iteration_s"] > 0
    assert o["error"] == pytest.approx(o["predicted_iteration_s"] / o["measured_iteration_s"] - 1)
    assert r["summary"]["osf"]["error"] == o["error"]


def test_usbyte_sends_its_blocks(fabric, tmp_path):
    r = _run(fabric, tmp_path, "ps", 2, scheduler="usbyte")
    _complete(r)
    s = r["scheduler"]
    assert s["name"] == "usbyte" and r["headline"]["scheduler"] == "usbyte"
    prof = tiny_profile()
    assert sum(b[1] for b in s["blocks"]) == prof.total_bytes
    assert r["model"]["partitions"] == len(s["blocks"])
    pids = {t["partition"] for t in r["tensors"] if t["kind"] == "push"}
    assert pids == set(range(len(s["blocks"])))


def test_wfbp_one_message_per_layer(fabric, tmp_path):
    r = _run(fabric, tmp_path, "ps", 2, scheduler="wfbp")
    _complete(r)
    prof = tiny_profile()
    assert [b[0] for b in r["scheduler"]["blocks"]] == list(reversed(range(len(prof.layers))))
    pushes = [t for t in r["tensors"] if t["kind"] == "push" and t["src"] == 0]
    assert len(pushes) == ITERATIONS * len(prof.layers)        # warm-up included, flagged
    assert sorted(t["target_bytes"] for t in pushes if t["iteration"] == 1) == \
        sorted(layer.nbytes for layer in prof.layers)


@pytest.mark.parametrize("fusion", ["constant:300kb", "adaptive"])
def test_fusion_on_ring_allreduce(fabric, tmp_path, fusion):
    r = _run(fabric, tmp_path, "allreduce", 2, scheduler="wfbp", fusion=fusion)
    _complete(r)
    fu = r["scheduler"]["fusion"]
    assert r["model"]["partitions"] == fu["buffers"]
    assert sum(fu["buffer_target_bytes"]) == tiny_profile().total_bytes
    if fusion.startswith("constant"):
        assert fu["buffer_bytes"] == 300_000 and fu["buffers"] < len(tiny_profile().layers)
    else:
        times = fu["modelled_iteration_s"]
        assert times[str(fu["buffer_bytes"])] == min(times.values())


def test_fifo_on_ring_allreduce(fabric, tmp_path):
    r = _run(fabric, tmp_path, "allreduce", 2, scheduler="fifo")
    _complete(r)
    assert r["scheduler"]["priority"].startswith("first come first served")


def test_talb_run_prints_scheduler_and_osf(fabric, tmp_path):
    out = tmp_path / "cli.json"
    p = subprocess.run([sys.executable, "-m", "talb.cli", "run", "--model", "threelayer",
                        "--arch", "allreduce", "--workers", "2", "--iterations", "2",
                        "--warmup", "0", "--scheduler", "wfbp", "--fusion", "constant:4mb",
                        "--target-link-rate", "100gbit", "--scaling", "both",
                        "--prefix", fabric, "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "scheduler wfbp" in p.stdout and "fusion constant" in p.stdout
    assert "OSF model: iteration" in p.stdout and "error" in p.stdout
    r = json.loads(out.read_text())
    assert r["config"]["scheduler"] == "wfbp" and r["config"]["fusion"] == "constant:4mb"


def _fc_profile():
    """Two layers: 50,000 values, then a fully connected 200 -> 100 (weight
    100 x 200 + bias), batch 4: its factors are 4 x 300 values (4,800 B)
    against 80,400 B of gradients."""
    from workload.models.base import Layer, ModelProfile, ParamTensor

    conv = Layer(0, "conv", (ParamTensor("conv.weight", 0, 50_000),), 0.002, 0.004)
    fc = Layer(1, "fc", (ParamTensor("fc.weight", 1, 20_000, (100, 200)),
                         ParamTensor("fc.bias", 1, 100, (100,))), 0.001, 0.002,
               fully_connected=True)
    return ModelProfile("tinyfc", 4, "V100", (conv, fc), notes="test model with an fc layer")


@pytest.mark.parametrize("comm", ["sfb", "hybrid"])
def test_sfb_factors_go_worker_to_worker(fabric, tmp_path, comm):
    prof = _fc_profile()
    cfg = RunConfig(model="tiny", arch="ps", workers=3, iterations=ITERATIONS, warmup=1,
                    partition_bytes=100_000, credit_bytes=200_000, target_link_bps=100e6,
                    prefix=fabric, out=str(tmp_path / f"{comm}.json"), timeout_s=240, comm=comm)
    r = run(cfg, profile=prof, scaling=scaling_for(100e6, 100e6))
    _complete(r)
    cm = r["scheduler"]["comm"]
    assert cm["sfb_layers"] == ["fc"] and r["headline"]["comm"] == comm
    sfb = [t for t in r["tensors"] if t["kind"] == "sfb"]
    # every worker to each of the two others, every iteration, the factors' size
    assert {(t["src"], t["dst"]) for t in sfb} == {(a, b) for a in range(3) for b in range(3) if a != b}
    assert len(sfb) == 3 * 2 * ITERATIONS
    assert {t["target_bytes"] for t in sfb} == {4 * 4 * 300}
    assert all(t["ok"] for t in sfb)
    pushes = [t for t in r["tensors"] if t["kind"] == "push"]
    assert {t["layer"] for t in pushes} == {0}             # only the conv layer via the server
    exp = r["summary"]["bytes"]["expected_per_iteration"]
    assert exp["sfb_per_worker"] == 2 * 4 * 4 * 300
