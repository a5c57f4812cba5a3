"""`talb run --client mpi`: a real Open MPI job as the training traffic
(docs/workload.md, "Real MPI jobs").

The same testbed, scheme, seed, placement and background flows as a normal
run (workload/experiment.py); instead of our nodes, an MPI data-parallel
loop (workload/mpi_rank.py under mpirun, workload/mpi_job.py) with the
model profile's tensors: every iteration the forward compute, then per
parameter tensor in backward order its layer's backward compute and an
``MPI_Allreduce`` (sum) of its testbed-scale bytes as float32, a barrier at
the end; every result checked. Tensor sizes and compute times are scaled to
the fabric as a normal run scales them (``--target-link-rate``,
``--scaling``): one message per parameter tensor, no ByteScheduler
partitions (what Horovod-style all-reduce sends).

Tagging (``--mpi-tag``): ``auto`` tags under scheme talb, and not under the
other schemes (the results say why);
``on`` wraps the job in workload.transparent_tag.TransparentTagger over the
ranks' hosts and the btl's port range (the MPI data connections, never the
out-of-band ones); the results say whether it was on, its rule and its
counters. The results file has the format of every run (workload/run_record.py)
with a block ``mpi`` and a ``headline`` a sweep reads (experiments/sweep).
"""
from __future__ import annotations

import time
from contextlib import ExitStack, nullcontext
from dataclasses import asdict, dataclass, field, replace
from types import SimpleNamespace

from common.excerpt import shown
from common.machine import machine_info
from netns_topology.state import load_topology_of
from workload import measure, mpi_rank
from workload.experiment import (DEFAULT_TOPOLOGY, GO_LEAD_S, RunError, _Counters, _finish_background,
                                 _prepare_background, _profile, _results_path, _scaling,
                                 _stop_now, background_duration_s, fabric_settings, pairing_record,
                                 place)
from workload.mpi_job import MpiError, check_ports, check_tools, run_job
from workload.placement import mode_of
from workload.run_record import RunRecord, agent_settings, software_versions, write_record
from workload.testbed_use import queueing_for_run, rto_min_for_run, testbed_for
from workload.transparent_tag import TransparentTagger

CLIENTS = ("talb", "mpi")
TAG_MODES = ("auto", "on", "off")
#: --mpi-pattern -> the architecture the run records (placement, results)
PATTERNS = {"allreduce": "allreduce", "ps": "ps"}
#: flags of a normal run that mean nothing for an MPI job: refused when set
NOT_FOR_MPI = {"fault": "--fault", "connections": "--connections"}


def _need(cond: bool, flag: str, value, what: str) -> None:
    if not cond:
        raise ValueError(f"{flag}: {what}, got {shown(value)}")


def validate(cfg) -> None:
    """An MPI run's configuration; ValueError naming the flag and its value."""
    from workload.experiment import validate as validate_run

    _need(cfg.client in CLIENTS, "--client", cfg.client, f"one of {', '.join(CLIENTS)}")
    _need(cfg.mpi_tag in TAG_MODES, "--mpi-tag", cfg.mpi_tag, f"one of {', '.join(TAG_MODES)}")
    _need(cfg.mpi_pattern in PATTERNS, "--mpi-pattern", cfg.mpi_pattern,
          f"one of {', '.join(PATTERNS)}")
    ps = cfg.mpi_pattern == "ps"
    _need(isinstance(cfg.workers, int) and cfg.workers >= (1 if ps else 2), "--workers",
          cfg.workers, "at least 1 worker (and the server: 2 ranks)" if ps else
          "an MPI all-reduce across the fabric needs at least 2 ranks (one per host)")
    _need(cfg.fault is None, "--fault", cfg.fault, "faults are injected into our own nodes' "
          "runs; --client mpi takes none")
    _need(cfg.connections == "pair", "--connections", cfg.connections,
          "Open MPI opens its own connections; --client mpi takes the default, pair")
    _need(cfg.servers == 1, "--servers", cfg.servers,
          "the MPI parameter server is one rank (rank 0)" if ps else
          "an MPI all-reduce has no servers")
    check_ports(cfg.mpi_port_min, cfg.mpi_port_range, cfg.workers + ps)
    cfg.arch = PATTERNS[cfg.mpi_pattern]
    validate_run(cfg)


def tagging_decision(mode: str, schemes: set[str]) -> tuple[bool, str]:
    """``--mpi-tag``: (tag?, why). on and off as said; auto: on when every
    switch runs talb, off otherwise (the reason is recorded, and said)."""
    if mode != "auto":
        return mode == "on", f"--mpi-tag {mode}"
    if schemes != {"talb"}:
        return False, f"--mpi-tag auto: scheme {','.join(sorted(schemes))}, not talb"
    return True, "--mpi-tag auto: scheme talb"


#: When training starts, in seconds after the background's time origin.
#: mpirun launches during the origin's lead (GO_LEAD_S): 4 ranks were ready
#: 0.04-0.09 s after the origin here. A run whose ranks are later says so,
#: and its seed's pairing check shows it.
MPI_START_S = 0.5
#: An MPI job's training took 3-4 times experiment.training_estimate_s on
#: mpi-quick (2.5-3.4 s against 0.89 s): one message at a time, each in
#: 2(n-1) rounds of its own. The estimate is scaled by this factor before
#: background_duration_s doubles it (+3 s), so the plan covers 4 estimates.
MPI_ESTIMATE_FACTOR = 2


def mpi_background_s(cfg, spec: dict, link_bps: float, start_s: float = MPI_START_S) -> float:
    """The background's planned duration for an MPI run: --background-s when
    given, else experiment.background_duration_s of MPI_ESTIMATE_FACTOR times
    the job's bytes and compute, after MPI_START_S. The point's, never the
    scheme's (pairing)."""
    if cfg.background_s:
        return cfg.background_s
    plan = _estimate_plan(spec)
    plan["partitions"] = [p[:4] + [p[4] * MPI_ESTIMATE_FACTOR, p[5] * MPI_ESTIMATE_FACTOR] + p[6:]
                          for p in plan["partitions"]]
    plan["layers"] = [{k: v * MPI_ESTIMATE_FACTOR for k, v in x.items()} for x in plan["layers"]]
    return start_s + background_duration_s(cfg, plan, link_bps)


def job_spec(cfg, profile, scaling) -> dict:
    """The rank program's input: one message per parameter tensor (backward
    order) of its testbed-scale bytes as float32, each preceded by its
    layer's backward compute (at the layer's first tensor), the forward
    compute first; all scaled as a normal run's."""
    counts, compute, seen = [], [], set()
    bwd = {layer.index: layer.bwd_s for layer in profile.layers}
    for t in profile.backward_order():
        counts.append(max(1, scaling.tensor_bytes(t.nbytes) // 4))
        compute.append(0.0 if t.layer in seen else scaling.compute_s(bwd[t.layer]))
        seen.add(t.layer)
    return {"mode": "allreduce", "counts": counts, "compute_s": compute,
            "fwd_s": scaling.compute_s(sum(layer.fwd_s for layer in profile.layers)),
            "iterations": cfg.iterations, "warmup": cfg.warmup, "poll_s": mpi_rank.POLL_S}


def _estimate_plan(spec: dict) -> dict:
    """The shape experiment.background_duration_s reads (layers' compute,
    partitions' bytes), for the background's planned duration."""
    return {"layers": [{"fwd_s": spec["fwd_s"], "bwd_s": sum(spec["compute_s"])}],
            "partitions": [[i, 0, "", 0, 4 * c, 4 * c, 0] for i, c in enumerate(spec["counts"])]}


def run(cfg, *, say=lambda _m: None) -> dict:
    """One MPI run end to end; the results (also written, ``results["path"]``)."""
    validate(cfg)
    check_tools()
    if (cfg.buffer, cfg.ecn, cfg.tcp_cc) != (None, None, None):
        raise ValueError(f"--buffer/--ecn/--tcp-cc: training runs with our own nodes only "
                         f"(the scaled buffers need their time scale), got buffer {cfg.buffer!r}, "
                         f"ecn {cfg.ecn!r}, tcp_cc {cfg.tcp_cc!r}")

    def check(topo):
        place(topo, cfg.arch, cfg.workers, 1, cfg.placement)

    with testbed_for(cfg.prefix, cfg.topology, DEFAULT_TOPOLOGY, check, say) as built, \
            rto_min_for_run(cfg.prefix, cfg.rto_min, built, say), \
            queueing_for_run(cfg.prefix, cfg.queueing, built, say):
        return _run_on_fabric(cfg, built, say)


class MpiJob:
    """What differs between the real jobs one run can carry (:func:`run_on_fabric`):
    here Open MPI's; workload/torch_run.py has PyTorch's. ``prepare`` plans the
    job, ``tagger`` selects its connections for the transparent tagger,
    ``launch`` runs it (its ``output``: t_ready_s, t_start_s, t_end_s, ...),
    ``outcome`` says what the job gave (:class:`JobOutcome`)."""

    client = "mpi"

    def prepare(self, cfg, profile, scaling, names: list[str], tag: bool, why: str,
                say) -> dict:
        spec = job_spec(cfg, profile, scaling)
        spec["mode"] = cfg.mpi_pattern
        self.ports = (cfg.mpi_port_min, cfg.mpi_port_min + cfg.mpi_port_range - 1)
        say(f"MPI job ({cfg.mpi_pattern}): {len(names)} ranks on {', '.join(names)}, "
            f"{len(spec['counts'])} messages an iteration ({4 * sum(spec['counts']):,} B), "
            f"btl ports {self.ports[0]}-{self.ports[1]}, tagging {'on' if tag else 'off'} ({why})")
        return spec

    def tagger(self, cfg, names: list[str]):
        return TransparentTagger(cfg.prefix, names, ports=self.ports, priority=cfg.mpi_priority)

    def start(self, cfg, topo, names: list[str], spec: dict, say) -> None:
        pass            # mpirun launches in launch(): its ranks are ready within MPI_START_S

    def launch(self, cfg, topo, names: list[str], spec: dict):
        try:
            return run_job(cfg.prefix, topo, names, spec, port_min=cfg.mpi_port_min,
                           port_range=cfg.mpi_port_range, timeout_s=cfg.timeout_s)
        except MpiError as exc:
            raise RunError(str(exc)) from None

    def close(self) -> None:
        pass

    def outcome(self, cfg, profile, hosts, job, spec: dict, tagging: dict) -> JobOutcome:
        return _outcome(cfg, hosts, job, spec, tagging)


def _run_on_fabric(cfg, built: bool, say) -> dict:
    return run_on_fabric(cfg, built, say, MpiJob(), cfg.mpi_tag)


@dataclass
class _JobSetup:
    """A real job's run as derived from its configuration and the fabric, before anything starts."""

    topo: object
    fabric: dict                # the results' "fabric" record (fabric_settings)
    profile: object
    hosts: dict                 # {"workers": [...], "servers": [...]} (place)
    rank_hosts: list            # rank 0 first: the server under ps, then the workers
    link_bps: float             # the slowest host link the ranks use
    scaling: object
    tag: bool                   # the transparent tagger on?
    tagging: dict               # the results' tagging record, filled as the job runs

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.rank_hosts]


@dataclass
class _JobRun:
    """What the job's run gave, beside the counters."""

    job: object                 # the kind's launch() result (its ``output``)
    spec: dict                  # the job's input as launched
    samples: list               # the CPU sampler's
    duration: float             # job prepared to job done, s
    background: dict | None
    pairing: dict


@dataclass
class JobOutcome:
    """What a kind of job says of its run (``kind.outcome``), for the record
    :func:`job_record` builds."""

    block: dict                 # the results' "mpi" / "torch" block
    iterations: list            # the iterations measured (one rank's), each complete
    correct: bool               # the job's arithmetic checked
    testbed_bytes: int          # bytes an iteration sends (model.testbed_bytes)
    tensors: int                # messages an iteration (model.tensors)
    servers: list               # the placement's server names
    headline: dict = field(default_factory=dict)   # the kind's own headline fields


def run_on_fabric(cfg, built: bool, say, kind, tag_mode: str) -> dict:
    """A real job (``kind``: :class:`MpiJob`, workload/torch_run.TorchJob) on
    the fabric that is up, with a normal run's background, counters, CPU
    samples and pairing; its results written."""
    setup = _job_setup(cfg, built, tag_mode)
    counters = _Counters(cfg.prefix, SimpleNamespace(topo=setup.topo, node_hosts=setup.rank_hosts,
                                                     fabric=setup.fabric))
    try:
        ran = _run_job(cfg, setup, kind, counters, say)
    finally:
        counters.close()
    outcome = kind.outcome(cfg, setup.profile, setup.hosts, ran.job, ran.spec, setup.tagging)
    return write_record(job_record(cfg, kind.client, setup, counters, ran, outcome),
                        _results_path(cfg))


def _job_setup(cfg, built: bool, tag_mode: str) -> _JobSetup:
    topo = load_topology_of(cfg.prefix)
    fabric = fabric_settings(cfg.prefix, topo, cfg.scheme)
    fabric["built_for_run"] = built
    profile = _profile(cfg)
    hosts = place(topo, cfg.arch, cfg.workers, 1, cfg.placement)
    # rank 0 (where mpirun runs) is the server under ps; then the workers in placement order
    rank_hosts = hosts["servers"] + hosts["workers"]
    link_bps = min(topo.ports(h.name)[0].rate_bps for h in rank_hosts)
    target_sizes = [t.nbytes for t in profile.backward_order()]
    scaling = _scaling(cfg, link_bps, target_sizes)
    schemes = {c["scheme"] for c in fabric["switch_config"].values()}
    tag, why = tagging_decision(tag_mode, schemes)
    tagging = {"mode": tag_mode, "on": tag, "why": why, "rule": None, "counters": None}
    return _JobSetup(topo, fabric, profile, hosts, rank_hosts, link_bps, scaling, tag, tagging)


def _run_job(cfg, setup: _JobSetup, kind, counters, say) -> _JobRun:
    """Tagger, job and background started, the job run, the background to
    its end; on any failure the background stopped now."""
    bg = None
    try:
        with ExitStack() as stack:
            stack.callback(kind.close)
            spec = kind.prepare(cfg, setup.profile, setup.scaling, setup.names, setup.tag,
                                setup.tagging["why"], say)
            # the tagger first (it compiles and attaches its programs): the job and the
            # background start together after it, as in an untagged run
            tagger = stack.enter_context(kind.tagger(cfg, setup.names) if setup.tag
                                         else nullcontext())
            t0 = time.monotonic()
            kind.start(cfg, setup.topo, setup.names, spec, say)   # a job that starts before its go
            counters.read_before()
            counters.read_queues_before()
            start_s = getattr(kind, "start_s", MPI_START_S)
            bg = _job_background(cfg, setup, spec, start_s, say)
            if bg is not None:
                bg.wait_ready()
            start_ns = _go(bg)
            with measure.Sampler(counters.ports, counters.host_ports) as sampler:
                # training starts a fixed time after the background's origin in every
                # run (pairing), whatever the launch took
                spec = {**spec, "start_at": start_ns / 1e9 + start_s}
                job = kind.launch(cfg, setup.topo, setup.names, spec)
            duration = time.monotonic() - t0
            training_end_ns = time.monotonic_ns()
            counters.read_after()
            if setup.tag:
                _record_tagger(setup.tagging, tagger)
        setup.fabric["agent"] = agent_settings(cfg.prefix)
        background = None
        if bg is not None:
            background = _finish_background(bg, duration, say)
            bg = None
        pairing = _job_pairing(job.output, start_ns, start_s, background, training_end_ns, say)
    except BaseException:
        if bg is not None:
            _stop_now(bg)
            bg.close()
        raise
    return _JobRun(job, spec, sampler.samples, duration, background, pairing)


def _job_background(cfg, setup: _JobSetup, spec: dict, start_s: float, say):
    """The run's background load, planned over the job's estimate (its
    processes started, not yet ready); None at load 0."""
    bg = _prepare_background(replace(cfg, background_s=mpi_background_s(cfg, spec, setup.link_bps,
                                                                        start_s)),
                             setup.topo, setup.hosts, setup.scaling, _estimate_plan(spec),
                             setup.link_bps, say)
    if bg is not None:
        say(f"background load {cfg.load:g}: {bg.params['planned_flows']} "
            f"{cfg.background_cdf} flows planned over {bg.duration_s:.1f} s")
    return bg


def _go(bg) -> int:
    """The background's time origin (monotonic ns): now, or GO_LEAD_S ahead
    when there is a background (its processes told to start then)."""
    start_ns = time.monotonic_ns()
    if bg is not None:
        start_ns += int(GO_LEAD_S * 1e9)
        bg.go(start_ns)
    return start_ns


def _record_tagger(tagging: dict, tagger) -> None:
    tagging["rule"] = tagger.rule
    tagging["counters"] = dict(tagger.counters())
    # each host's Snowflake worker slot: the low bits of its tags' ids
    tagging["workers"] = dict(tagger.workers)


def _job_pairing(out: dict, start_ns: int, start_s: float, background, training_end_ns: int,
                 say) -> dict:
    """The pairing record with the job's own start; a warning when its ranks
    were ready later than planned."""
    pairing = pairing_record([], start_ns, background, training_end_ns, time.monotonic_ns())
    pairing.update(start_offset_s=out["t_start_s"] - start_ns / 1e9,
                   first_send_offset_s=out["t_start_s"] - start_ns / 1e9,
                   mpi_ready_s=out["t_ready_s"] - start_ns / 1e9)
    if pairing["mpi_ready_s"] > start_s:
        say(f"[warn] the ranks were ready {pairing['mpi_ready_s']:.2f} s after the "
            f"background's origin, past the {start_s:g} s planned: this run's training "
            "starts later than its seed's other runs")
    return pairing


def job_record(cfg, client: str, setup: _JobSetup, c, ran: _JobRun,
               outcome: JobOutcome) -> RunRecord:
    """A real job's results record (MPI, PyTorch): what every run records,
    the kind's block under its client's name."""
    from workload.experiment import _senders_record

    profile, scaling, fabric, hosts, topo = (setup.profile, setup.scaling, setup.fabric,
                                             setup.hosts, setup.topo)
    out, background, pairing = ran.job.output, ran.background, ran.pairing
    speed = measure.speed(outcome.iterations, cfg.workers, profile.batch_size,
                          scaling.time_scale)
    span = (out["t_start_s"], out["t_end_s"])
    guard = measure.cpu_guard(ran.samples, c.have_links, span)
    uplinks = measure.uplink_spread(topo, c.before, c.after, span[1] - span[0],
                                    (c.queues_before, c.queues_after)) if c.before else None
    schemes = sorted({x["scheme"] for x in fabric["switch_config"].values()})
    headline = {"scheme": ",".join(schemes), "queueing": fabric["queueing"]["mode"],
                "client": client, "connections": client, "placement": cfg.placement,
                "rto_min_ms": fabric.get("rto_min_ms"), "model": cfg.model, "arch": cfg.arch,
                "workers": cfg.workers, "servers": len(outcome.servers), "load": cfg.load,
                "seed": cfg.seed, "samples_per_s": speed["samples_per_s"],
                "iteration_time_s": speed["iteration_time_s"], **outcome.headline,
                "mpi_correct": outcome.correct, "mpi_tagged": setup.tagging["on"],
                "cpu_bound": guard["flagged"]}
    return RunRecord(
        client=client,
        config=asdict(cfg),
        software=software_versions(),
        machine=machine_info(),
        fabric=fabric,
        model={"name": profile.name, "batch_size": profile.batch_size, "gpu": profile.gpu,
               "layers": len(profile.layers), "params": profile.total_params,
               "target_bytes": profile.total_bytes, "testbed_bytes": outcome.testbed_bytes,
               "tensors": outcome.tensors,
               "layer_fwd_s": [x.fwd_s for x in profile.layers],
               "layer_bwd_s": [x.bwd_s for x in profile.layers]},
        scaling=scaling.describe([t.nbytes for t in profile.backward_order()]),
        placement={"workers": [h.name for h in hosts["workers"]], "servers": outcome.servers,
                   "mode": mode_of(cfg.placement), "spec": cfg.placement},
        **{client: outcome.block},
        load={"offered": cfg.load, "cdf": cfg.background_cdf if cfg.load else None,
              **_senders_record(cfg, topo, hosts),
              "background_covered": pairing["background"]["covered"]
              if background and pairing.get("background") else None,
              "background": background},
        duration_s=ran.duration,
        training_s=span[1] - span[0],
        pairing=pairing,
        summary={
            "speed": speed,
            "bytes": {f"{client}_per_iteration": outcome.testbed_bytes},
            "tcp": measure.tcp_summary({h: measure.counter_delta(c.tcp_before[h], c.tcp_after[h])
                                        for h in c.tcp_after}),
            "uplinks": uplinks,
            "port_drops": measure.port_drops(topo, c.queues_before, c.queues_after)
            if c.queues_before and c.queues_after else None,
            "cpu_guard": guard,
            "background": background["summary"] if background else None,
        },
        flags={"cpu_bound": guard["flagged"], "mpi_incorrect": not outcome.correct},
        headline=headline,
        iterations=outcome.iterations,
        tensors=[],
        cpu_samples=ran.samples,
    )


def _open_mpi_version() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0].strip() if out else None


def _outcome(cfg, hosts, job, spec: dict, tagging: dict) -> JobOutcome:
    """An MPI job's outcome: its block (launch, transport, messages, checks)."""
    out = job.output
    measured = [i for i in out["iterations"] if not i["warmup"]]
    mpi = {
        "pattern": cfg.mpi_pattern, "ranks": out["ranks"], "hosts": job.hosts, "one_rank_per_host": True,
        "launcher": "mpirun in the first host's namespace, rsh agent = ip netns exec",
        "mpirun": job.argv, "open_mpi": _open_mpi_version(),
        "transport": "pml ob1, btl tcp,self on eth0; oob tcp on eth0",
        "wait": (f"nonblocking calls completed by MPI_Testall every {spec['poll_s'] * 1e3:g} ms, "
                 "sleeping between (workload/mpi_rank.py)" if spec["poll_s"] > 0 else
                 "blocking calls (Open MPI's busy wait)"),
        "port_range": list(job.port_range),
        "message_bytes": out["message_bytes"], "messages_per_iteration": len(out["message_bytes"]),
        "bytes_per_iteration": out["bytes_per_iteration"],
        "compute_s_per_iteration": spec["fwd_s"] + sum(spec["compute_s"]),
        "correct": out["correct"], "errors": out["errors"],
        "comm_s_mean": (sum(i["comm_s"] for i in measured) / len(measured)) if measured else None,
        "wall_s": job.wall_s, "tagging": tagging,
        # every rank's CPU seconds over the measured span (start to end barrier)
        "rank_cpu_s": out.get("rank_cpu_s"),
    }
    return JobOutcome(block=mpi, iterations=[{**i, "complete": True} for i in out["iterations"]],
                      correct=out["correct"], testbed_bytes=out["bytes_per_iteration"],
                      tensors=len(out["message_bytes"]),
                      servers=[h.name for h in hosts["servers"]],
                      headline={"mpi_comm_s": mpi["comm_s_mean"]})
