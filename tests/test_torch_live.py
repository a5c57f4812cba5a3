"""PyTorch DDP jobs on a live fabric (`talb run --client torch`,
workload/torch_run.py, torch_job.py, torch_rank.py), run as a user runs
them (`talb run` in its own process): the ranks' parameters identical and
equal to a single-process run; under talb, gloo's connections (picked by
the job's cgroup) captured at the senders' links and the leaves' uplinks:
every data packet tagged, no tensor split, one LAST each
(tests/tag_captures.py, the MPI job's check); a rank that dies ends the job,
names itself and leaves nothing behind.

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, 100 Mbit/s).
Needs torch in the venv (`make setup`: talb[torch]). Small: 2 ranks, 2-3
iterations of the width-0.1 models (about 0.1 s of CPU a rank).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from common import paths
from netns_topology.state import load_topology_of
from conftest import skip_or_fail
from helpers import processes_in_hosts, up_fabric
import tag_captures

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"


@pytest.fixture(scope="module")
def torch_installed():
    from workload.torch_job import TorchError, check_torch

    try:
        check_torch()
    except TorchError as exc:
        skip_or_fail(str(exc))


@pytest.fixture(scope="module")
def fabric(request, bcc, torch_installed):
    return up_fabric(request, TOPOLOGY)


def _talb() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "talb")
    return here if os.path.exists(here) else shutil.which("talb")


def _job_leftovers(prefix: str) -> tuple[list, list]:
    from workload.torch_job import CGROUP_PARENT, cgroup_root

    parent = cgroup_root() / CGROUP_PARENT
    # our cgroups (other engineers' jobs may hold theirs in the parent meanwhile)
    cgroups = sorted(p.name for p in parent.glob(f"{prefix}-*") if p.is_dir()) \
        if parent.exists() else []
    return cgroups, sorted(p for p in os.listdir("/tmp") if p.startswith("talb-torch-"))


def _talb_run(fabric, tmp_path, *args, timeout=600):
    out = tmp_path / "torch.json"
    p = subprocess.run([_talb(), "run", "--client", "torch", "--prefix", fabric.prefix,
                        "--out", str(out), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=str(paths.REPO_ROOT))
    assert p.returncode == 0, p.stdout + p.stderr
    return p, json.loads(out.read_text())


@pytest.mark.parametrize("model", ["resnet50", "gpt2-small"])
def test_cli_run_client_torch_is_correct_and_leaves_nothing(fabric, tmp_path, model):
    """`talb run --client torch` under ECMP (untagged: --mpi-tag auto),
    with background load: DDP's parameters the same on every rank and
    equal to the single-process run's; its buckets recorded; nothing left."""
    before = _job_leftovers(fabric.prefix)
    p, r = _talb_run(fabric, tmp_path, "--model", model, "--workers", "2", "--scheme", "ecmp",
                     "--iterations", "3", "--warmup", "1", "--load", "0.2",
                     "--background-size-scale", "0.1", "--seed", "4")
    t = r["torch"]
    assert "PyTorch DDP (gloo) x2 ranks" in p.stdout and "single-process run" in p.stdout, p.stdout
    assert r["client"] == "torch" and r["headline"]["client"] == "torch"
    assert t["correct"] is True and t["errors"] == [], t["errors"]
    assert len(set(t["checksums"])) == 1 and t["reference"]["equal"] is True
    assert t["backend"] == "gloo" and t["hosts"] == ["h0", "h3"] and t["ranks"] == 2
    # the model in the profile's shape: its layers and tensors
    assert t["model"]["layers"] == r["model"]["layers"]
    assert t["model"]["tensors"] == r["model"]["tensors"]
    # DDP's buckets: every layer in one, the first out holds the model's last layer
    assert t["bucket_cap_mb"] == pytest.approx(25 * r["scaling"]["byte_scale"])
    layers = [x for b in t["buckets"] for x in b["layers"]]
    assert set(layers) == set(range(r["model"]["layers"]))
    assert max(t["buckets"][0]["layers"]) == r["model"]["layers"] - 1
    assert [b["talb_layer"] for b in t["buckets"]] == list(range(len(t["buckets"])))[::-1]
    assert t["tagging"]["on"] is False and "ecmp" in t["tagging"]["why"]
    assert len(t["rank_cpu_s"]) == 2 and all(x > 0 for x in t["rank_cpu_s"])
    assert t["compute"]["emulated_s_per_iteration"] > 0
    sp = r["summary"]["speed"]
    assert sp["iterations"] == 2 and r["headline"]["iteration_time_s"] == sp["iteration_time_s"] > 0
    assert r["pairing"]["background"]["planned_flows"] > 0
    assert "flagged" in r["summary"]["cpu_guard"]
    assert processes_in_hosts(fabric.prefix) == {}
    assert _job_leftovers(fabric.prefix) == before


def test_cli_run_client_torch_tagged_every_packet(fabric, tmp_path):
    """Under talb the tagger selects the job's cgroup: captured at the rank
    hosts' links and the leaves' uplinks, every data packet of gloo's
    connections carries the TaLB option, no tensor split, one LAST each;
    the parameters still correct. The rendezvous store's connection (port
    29500: an IPv6 dual-stack socket, which the tagger, IPv4 only, leaves
    alone; keys, no gradients) is left out of the capture."""
    from workload.torch_job import DEFAULT_MASTER_PORT

    topo = load_topology_of(fabric.prefix)
    ip = {h.name: h.ip for h in topo.hosts}
    leaf_of_ip = {h.ip: topo.ports(h.name)[0].peer for h in topo.hosts}
    hosts = ["h0", "h3"]
    caps = tag_captures.start(fabric.prefix, topo, hosts, tmp_path,
                              f"tcp and host {ip['h0']} and host {ip['h3']} and not port "
                              f"{DEFAULT_MASTER_PORT}")
    try:
        p, r = _talb_run(fabric, tmp_path, "--model", "resnet50", "--workers", "2",
                         "--scheme", "talb", "--iterations", "2", "--warmup", "0")
        time.sleep(0.3)                  # the last ACKs and FINs reach the captures
    finally:
        for c in caps:
            c.stop()
    t = r["torch"]
    assert t["correct"] is True, t["errors"]
    tg = t["tagging"]
    assert tg["on"] is True and tg["rule"] and tg["why"] == "--mpi-tag auto: scheme talb"
    assert tg["counters"]["selected"] > 0 and tg["counters"]["not_selected"] == 0, tg
    for c in caps:
        assert c.exited_early is None, str(c)
    at_host = {h: tag_captures.data_packets(tmp_path / f"{h}-eth0.pcap") for h in hosts}
    at_uplink = {c.netns.rsplit("-", 1)[1] + ":" + c.ifname: tag_captures.data_packets(c.pcap)
                 for c in caps if c.ifname != "eth0"}
    assert all(at_host.values()) and any(at_uplink.values())
    cover = tag_captures.check_every_packet_tagged(at_host, at_uplink, ip, leaf_of_ip,
                                                   tg["workers"], tg["counters"])
    print(f"\ntag coverage: {cover}")
    assert cover["tagged"] == cover["packets"] > 0 and cover["split"] == 0
    assert processes_in_hosts(fabric.prefix) == {}


def test_a_dying_rank_ends_the_job_and_leaves_nothing(fabric):
    """Rank 1 exits mid-training: the job fails at once (not at gloo's
    timeout), naming rank 1, its host and why; no process, cgroup or job
    directory is left."""
    from workload.torch_job import TorchError, run_job

    before = _job_leftovers(fabric.prefix)
    spec = {"model": "resnet50", "width": 0.1, "batch": 2, "iterations": 50, "seed": 1,
            "lr": 0.01, "bucket_cap_mb": 0.25, "die": {"rank": 1, "iteration": 1}}
    t0 = time.monotonic()
    with pytest.raises(TorchError) as err:
        run_job(fabric.prefix, fabric.topo, ["h0", "h3"], spec, timeout_s=240)
    msg = str(err.value)
    assert msg.startswith("rank 1 on h3 exited with status 17 first"), msg
    assert "exiting with 17 at iteration 1" in msg, msg
    assert time.monotonic() - t0 < 200
    assert processes_in_hosts(fabric.prefix) == {}
    assert _job_leftovers(fabric.prefix) == before
