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
from dataclasses import asdict

from common.excerpt import shown
from common.machine import machine_info
from workload import measure
from workload.experiment import DEFAULT_TOPOLOGY, RunError, _senders_record
from workload.mpi_run import TAG_MODES, job_spec, run_on_fabric
from workload.placement import mode_of
from workload.run_record import RESULTS_FORMAT, software_versions
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

    def results(self, cfg, profile, scaling, fabric, hosts, topo, job, spec, tagging, c,
                samples, duration, background, pairing) -> dict:
        return _results(cfg, profile, scaling, fabric, hosts, topo, job, spec, tagging, c,
                        samples, duration, background, pairing)


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


def _results(cfg, profile, scaling, fabric, hosts, topo, job, spec, tagging, c, samples,
             duration, background, pairing) -> dict:
    res, out = job.result, job.output
    ranks = res.ranks
    r0 = ranks[0]
    iterations = [{**i, "complete": True} for i in r0["iterations"]]
    speed = measure.speed(iterations, cfg.workers, profile.batch_size, scaling.time_scale)
    span = (out["t_start_s"], out["t_end_s"])
    guard = measure.cpu_guard(samples, c.have_links, span)
    uplinks = measure.uplink_spread(topo, c.before, c.after, span[1] - span[0],
                                    (c.queues_before, c.queues_after)) if c.before else None
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
    schemes = sorted({x["scheme"] for x in fabric["switch_config"].values()})
    headline = {"scheme": ",".join(schemes), "queueing": fabric["queueing"]["mode"],
                "client": "torch", "connections": "torch", "placement": cfg.placement,
                "rto_min_ms": fabric.get("rto_min_ms"), "model": cfg.model, "arch": cfg.arch,
                "workers": cfg.workers, "servers": 0, "load": cfg.load, "seed": cfg.seed,
                "samples_per_s": speed["samples_per_s"],
                "iteration_time_s": speed["iteration_time_s"],
                "mpi_correct": correct, "mpi_tagged": tagging["on"], "cpu_bound": guard["flagged"]}
    return {
        "format": RESULTS_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client": "torch",
        "config": asdict(cfg),
        "software": software_versions(),
        "machine": machine_info(),
        "fabric": fabric,
        "model": {"name": profile.name, "batch_size": profile.batch_size, "gpu": profile.gpu,
                  "layers": len(profile.layers), "params": profile.total_params,
                  "target_bytes": profile.total_bytes,
                  "testbed_bytes": torch["bytes_per_iteration"],
                  "tensors": len(profile.tensors),
                  "layer_fwd_s": [x.fwd_s for x in profile.layers],
                  "layer_bwd_s": [x.bwd_s for x in profile.layers]},
        "scaling": scaling.describe([t.nbytes for t in profile.backward_order()]),
        "placement": {"workers": [h.name for h in hosts["workers"]], "servers": [],
                      "mode": mode_of(cfg.placement), "spec": cfg.placement},
        "torch": torch,
        "load": {"offered": cfg.load, "cdf": cfg.background_cdf if cfg.load else None,
                 **_senders_record(cfg, topo, hosts),
                 "background_covered": pairing["background"]["covered"]
                 if background and pairing.get("background") else None,
                 "background": background},
        "duration_s": duration,
        "training_s": span[1] - span[0],
        "pairing": pairing,
        "summary": {
            "speed": speed,
            "bytes": {"torch_per_iteration": torch["bytes_per_iteration"]},
            "tcp": measure.tcp_summary({h: measure.counter_delta(c.tcp_before[h], c.tcp_after[h])
                                        for h in c.tcp_after}),
            "uplinks": uplinks,
            "port_drops": measure.port_drops(topo, c.queues_before, c.queues_after)
            if c.queues_before and c.queues_after else None,
            "cpu_guard": guard,
            "background": background["summary"] if background else None,
        },
        "flags": {"cpu_bound": guard["flagged"], "mpi_incorrect": not correct},
        "headline": headline,
        "iterations": iterations,
        "tensors": [],
        "cpu_samples": samples,
    }

