"""`talb run --client torch`: a PyTorch DistributedDataParallel job as the
training traffic (docs/workload.md, "PyTorch DDP jobs").

The same run as `talb run --client mpi` (workload/mpi_run.run_on_fabric:
testbed, scheme, seed, placement, background, counters, CPU guard,
pairing), with the job :class:`TorchJob`: one rank per host
(workload/torch_job.py), backend gloo, a real torch.nn model in the
profile's shape (workload/torch_rank.py) at the run's byte scale, DDP's
gradient buckets at ``bucket_cap_mb`` = 25 MiB (DDP's default) times the
byte scale, the profile's compute as sleeps inside autograd.

Tagging (``--mpi-tag``, as for an MPI job: auto = on under talb): the
ranks run in one cgroup v2 made for the job, and the transparent tagger
selects that cgroup on the ranks' hosts (gloo's connections use ephemeral
ports). Priority rule (``--mpi-priority``, default :data:`DDP_PRIORITY`):
see :func:`bucket_layers` and docs/workload.md.
"""
from __future__ import annotations

import math
import time

from common.excerpt import shown
from workload.experiment import DEFAULT_TOPOLOGY, RunError
from workload.mpi_run import TAG_MODES, JobOutcome, job_spec, run_on_fabric
from workload.testbed_use import queueing_for_run, rto_min_for_run, testbed_for
from workload.transparent_tag import TransparentTagger

#: the models the torch client builds (workload/torch_rank.py)
MODELS = ("resnet50", "gpt2-small")
#: DDP's default bucket size (torch.nn.parallel.DistributedDataParallel), MiB
DDP_BUCKET_CAP_MB = 25.0
#: per-rank batch of the real arithmetic (the profile's batch is emulated by the sleeps)
REAL_BATCH = 4
IMAGE_HW, SEQ_LEN = 32, 16
LEARNING_RATE = 0.01
#: seconds from the background's origin to training: the ranks are ready before
#: the origin (DdpJob.start), so only the go's file write and the ranks' 10 ms poll
TORCH_START_S = 0.5
#: The tagger's rule for DDP jobs (None: its default, size:64K,1M). The rule
#: that follows DDP's bucket order is :func:`bucket_layers`, recorded per run;
#: the kernel sees writes, not buckets, and neither the buckets' sizes (all
#: at the cap) nor the pauses (ResNet-50's front bucket takes longer to
#: compute than the forward pass) tell them apart (docs/workload.md).
DDP_PRIORITY = None


def validate(cfg) -> None:
    from workload.experiment import validate as validate_run

    def need(cond, flag, value, what):
        if not cond:
            raise ValueError(f"{flag}: {what}, got {shown(value)}")

    need(cfg.model in MODELS, "--model", cfg.model,
         f"--client torch builds {', '.join(MODELS)} (workload/torch_rank.py)")
    need(cfg.mpi_tag in TAG_MODES, "--mpi-tag", cfg.mpi_tag, f"one of {', '.join(TAG_MODES)}")
    need(isinstance(cfg.workers, int) and cfg.workers >= 2, "--workers", cfg.workers,
         "a DDP job across the fabric needs at least 2 ranks (one per host)")
    need(cfg.fault is None, "--fault", cfg.fault, "--client torch takes no faults")
    need(cfg.connections == "pair", "--connections", cfg.connections,
         "gloo opens its own connections; --client torch takes the default, pair")
    need(cfg.servers == 1, "--servers", cfg.servers, "a DDP all-reduce has no servers")
    cfg.arch = "allreduce"
    validate_run(cfg)


def bucket_layers(buckets: list[dict]) -> list[dict]:
    """The priority rule that follows DDP's bucket order: bucket b of B
    (b = 0 goes out first and holds the last layers) gets TaLB layer
    B - 1 - b, so the front layers' bucket, sent last and needed first by the
    next forward pass, is served first. Each bucket with its layer."""
    n = len(buckets)
    return [{**b, "talb_layer": n - 1 - i} for i, b in enumerate(buckets)]


class TorchJob:
    """workload.mpi_run.run_on_fabric's job: PyTorch DDP over gloo."""

    client = "torch"
    start_s = TORCH_START_S

    def __init__(self):
        self.job = None

    def prepare(self, cfg, profile, scaling, names, tag, why, say) -> dict:
        from workload.torch_job import DdpJob

        spec = job_spec(cfg, profile, scaling)   # tensors' bytes and compute: the background's plan
        width = math.sqrt(scaling.byte_scale)
        spec.update(model=cfg.model, width=width, batch=REAL_BATCH, image_hw=IMAGE_HW,
                    seq_len=SEQ_LEN, lr=LEARNING_RATE, seed=cfg.seed,
                    bucket_cap_mb=DDP_BUCKET_CAP_MB * scaling.byte_scale,
                    layer_s=[[scaling.compute_s(x.fwd_s), scaling.compute_s(x.bwd_s)]
                             for x in profile.layers],
                    pg_timeout_s=min(cfg.timeout_s, 300))
        self.job = DdpJob(cfg.prefix, self._topo(cfg), names, spec, timeout_s=cfg.timeout_s)
        say(f"PyTorch DDP job (torch {self.job.torch}, gloo): {len(names)} ranks on "
            f"{', '.join(names)}, {cfg.model} at width {width:.3g}, buckets of "
            f"{spec['bucket_cap_mb']:.3g} MiB, cgroup {self.job.cgroup_path}, tagging "
            f"{'on' if tag else 'off'} ({why})")
        return spec

    @staticmethod
    def _topo(cfg):
        from netns_topology.state import load_topology_of

        return load_topology_of(cfg.prefix)

    def tagger(self, cfg, names):
        return TransparentTagger(cfg.prefix, names, cgroup=self.job.cgroup_path,
                                 priority=cfg.mpi_priority or DDP_PRIORITY)

    def start(self, cfg, topo, names, spec, say) -> None:
        from workload.torch_job import TorchError

        t = time.monotonic()
        try:
            self.job.start()
        except TorchError as exc:
            raise RunError(str(exc)) from None
        say(f"ranks ready in {time.monotonic() - t:.1f} s (torch imported, rendezvous, DDP built)")

    def launch(self, cfg, topo, names, spec):
        from types import SimpleNamespace

        from workload.torch_job import TorchError

        try:
            self.job.go(spec["start_at"])
            res = self.job.wait()
        except TorchError as exc:
            raise RunError(str(exc)) from None
        r0 = res.ranks[0]
        out = {"t_ready_s": max(r["t_ready_s"] for r in res.ranks),
               "t_start_s": min(r["t_start_s"] for r in res.ranks),
               "t_end_s": max(r["t_end_s"] for r in res.ranks),
               "iterations": r0["iterations"],
               "rendezvous": f"TCP store at tcp://{self.job.spec['master_addr']}:"
                             f"{self.job.spec['master_port']} (rank 0, {names[0]})"}
        return SimpleNamespace(output=out, result=res)

    def close(self) -> None:
        if self.job is not None:
            self.job.close()

    def outcome(self, cfg, profile, hosts, job, spec: dict, tagging: dict) -> JobOutcome:
        return _outcome(cfg, profile, job, spec, tagging)


def run(cfg, *, say=lambda _m: None) -> dict:
    """One PyTorch DDP run end to end; the results (also written, ``results["path"]``)."""
    from workload.experiment import place
    from workload.torch_job import TorchError, check_torch

    validate(cfg)
    try:
        check_torch()
    except TorchError as exc:
        raise ValueError(str(exc)) from None

    def check(topo):
        place(topo, cfg.arch, cfg.workers, 1, cfg.placement)

    with testbed_for(cfg.prefix, cfg.topology, DEFAULT_TOPOLOGY, check, say) as built, \
            rto_min_for_run(cfg.prefix, cfg.rto_min, built, say), \
            queueing_for_run(cfg.prefix, cfg.queueing, built, say):
        return run_on_fabric(cfg, built, say, TorchJob(), cfg.mpi_tag)


def _outcome(cfg, profile, job, spec: dict, tagging: dict) -> JobOutcome:
    """A DDP job's outcome: its block (ranks, model, buckets, compute, checks)."""
    res, out = job.result, job.output
    ranks = res.ranks
    r0 = ranks[0]
    sums = {r["checksum"] for r in ranks}
    ref = r0["reference"]
    correct = len(sums) == 1 and ref["equal"]
    errors = ([] if len(sums) == 1 else
              [f"the ranks' parameters differ: {len(sums)} checksums"]) + \
        ([] if ref["equal"] else [f"rank 0's parameters differ from the single-process run's "
                                  f"by up to {ref['max_abs_diff']:.3g}"])
    measured = [i for i in r0["iterations"] if not i["warmup"]]
    emulated = sum(a + b for a, b in spec["layer_s"])
    buckets = bucket_layers(r0["buckets"])
    torch = {
        "ranks": len(ranks), "hosts": res.hosts, "one_rank_per_host": True,
        "torch": r0["torch"], "backend": "gloo", "rendezvous": out["rendezvous"],
        "launcher": "one process per host namespace (ip netns exec), one cgroup v2 for the job",
        "cgroup": res.cgroup, "threads_per_rank": r0["threads"],
        "model": {"name": cfg.model, "params": r0["params"], "tensors": r0["tensors"],
                  "layers": r0["layers"], "width": spec["width"],
                  "real_batch_per_rank": spec["batch"],
                  "input": (f"{spec['image_hw']}x{spec['image_hw']} images" if cfg.model == "resnet50"
                            else f"{spec['seq_len']} tokens")},
        "bucket_cap_mb": spec["bucket_cap_mb"], "buckets": buckets,
        "buckets_per_iteration": len(buckets),
        "bytes_per_iteration": sum(b["bytes"] for b in buckets),
        "compute": {
            "mode": "real forward and backward of the scaled model on a small batch, plus the "
                    "profile's layer times (target GPU, profile batch) emulated by sleeps in an "
                    "autograd function after each layer (workload/torch_rank.LayerTime)",
            "why_emulated": "the profile's compute is a V100's on the full batch and full-width "
                            "model; this machine's 2 CPUs also forward the fabric",
            "emulated_s_per_iteration": emulated,
            "real_cpu_s_per_iteration": (sum(i["cpu_s"] for i in measured) / len(measured))
            if measured else None},
        "priority": {"rule": "DDP bucket b of B (b = 0 first out: the last layers) -> TaLB layer "
                             "B-1-b: the front layers' bucket, sent last, served first",
                     "tags": tagging["rule"] if tagging["on"] else None},
        "correct": correct, "errors": errors, "checksums": [r["checksum"] for r in ranks],
        "reference": ref,
        "wall_s": res.wall_s, "tagging": tagging,
        "rank_cpu_s": [r["cpu_s"] for r in ranks],
    }
    return JobOutcome(block=torch, iterations=[{**i, "complete": True} for i in r0["iterations"]],
                      correct=correct, testbed_bytes=torch["bytes_per_iteration"],
                      tensors=len(profile.tensors), servers=[])
