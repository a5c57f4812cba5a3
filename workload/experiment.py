"""One training experiment end to end: fabric, nodes, measurement, results file.

    from workload.experiment import RunConfig, run
    results = run(RunConfig(scheme="talb", model="vgg19", arch="ps", workers=4))

Steps: validate the configuration; use the running testbed of ``prefix``
(or build one from ``topology`` and remove it afterwards); set the scheme;
profile the model, scale it to the fabric and partition it
(workload/scheduler.py); place workers and servers on hosts; start one
process per node in its host namespace (``python -m
workload.patterns.node``); read their records while they run; read the
kernel TCP counters, the switches' port counters and the CPU before, during
and after; join it all into one results dictionary (written as JSON).

A node that fails ends the run: every process is killed by pid, the
fabric removed if the run built it, and :class:`RunError` says which node
failed and why. Nothing is left running on any path.
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common import paths
from common.excerpt import shown
from common.machine import machine_info
from netns_topology.state import (PROGRAM_DATAPATHS, TestbedError, load_topology_of, queueing_of, read_state,
                                  regime_of, rto_min_of)
from testbed.regime import regime_for_run
from workload import measure, run_metrics
from workload.netexec import ns_popen
from workload.patterns import PATTERNS, get_pattern
from workload.patterns.common import HEADER
from workload.placement import mode_of
from workload.run_record import RunRecord, agent_settings, software_versions, write_record
from workload.scaling import MSS_BYTES
from workload.scheduler import DEFAULT_CREDIT_BYTES, DEFAULT_PARTITION_BYTES
from workload.tensor_sender import MAX_TENSOR_PKTS
from workload.testbed_use import (queueing_for_run, rto_min_for_run, rto_min_setting,
                                  testbed_for)

NODE = [sys.executable, "-m", "workload.patterns.node"]
DEFAULT_TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
SCALING_MODES = ("bytes", "time", "both", "fit")
#: Background flows a run's workers can open per second without the CPU
#: guard firing (fig10 at load 0.8 ran 101/s at 52% CPU; the first fig4
#: attempt, ~1000/s of 430 B flows, was CPU-bound): above it, a warning
#: names --background-size-scale.
MAX_BACKGROUND_FLOWS_PER_S = 200
#: How far ahead of "now" the run puts its start instant once every node is
#: connected: time to hand "go T" to every node and background source.
GO_LEAD_S = 0.25


class RunError(RuntimeError):
    """The run failed; the message says where and why."""


@dataclass
class RunConfig:
    model: str
    arch: str
    workers: int
    scheme: str | None = None           # None: keep the fabric's scheme
    servers: int = 1                    # PS only
    load: float = 0.0
    seed: int = 0
    iterations: int = 5
    warmup: int = 1
    partition_bytes: int = DEFAULT_PARTITION_BYTES   # target scale
    credit_bytes: int = DEFAULT_CREDIT_BYTES         # target scale
    target_link_bps: float = 10e9
    scaling_mode: str = "bytes"
    gpu: str = "V100"
    gpu_speed: float = 1.0
    batch_size: int | None = None       # None: the model's (the paper's)
    prefix: str = paths.DEFAULT_PREFIX
    topology: str | None = None         # build from this when no testbed is up
    out: str | None = None              # results file; None: runs/<stamp>-....json
    base_port: int = 7100
    timeout_s: float = 900.0
    background_cdf: str = "websearch"   # flow sizes of the background load
    background_s: float | None = None   # how long background flows are planned; None: estimated
    # Background flow sizes x this; None: the tensors' byte scale (both keep the
    # target's proportions). Set it where that scale makes flows of a few
    # hundred bytes and thousands of connections a second (docs/workload.md).
    background_size_scale: float | None = None
    # A fault injected mid-run, KIND@AT[:key=value,...] (workload/faults.py); None: none.
    fault: str | None = None
    # How the switch ports queue for the run: "bands" (the topology's queue),
    # "fifo" (one FIFO per port, the same bytes); None: as the fabric is now.
    # Set before the run and put back after it on a testbed the run did not build.
    queueing: str | None = None
    # How tensors travel between a worker and a server (ring: neighbours):
    # "pair" (one connection, as ps-lite), "class" (one per priority class) or
    # "pool:N" (N pre-opened, one tensor per idle connection);
    # workload/patterns/connections.py, docs/workload.md "Connections".
    connections: str = "pair"
    # Where the nodes sit: "spread", "remote" or WORKERS/SERVERS host lists
    # (workload/placement.py, docs/workload.md "Placement").
    placement: str = "spread"
    # The hosts' minimum TCP RTO for the run: "10ms", ..., or "kernel" (no route
    # metric: the kernel's 200 ms); None: as the fabric is now. Set before the run
    # and put back after it on a testbed the run did not build (testbed.lifecycle.set_rto_min).
    rto_min: str | None = None
    # What makes the training traffic: "talb" (our nodes, TensorSender's tagged
    # tensors) or "mpi" (a real Open MPI all-reduce job, workload/mpi_run.py).
    client: str = "talb"
    # The regime (testbed/regime.py, docs/experiments.md "Regime"): the switch
    # buffers, "deep" (the topology's) or "scaled" (the paper's 512 KB at 100G on
    # the run's time scale); ECN marking at the switches and negotiation at the
    # hosts; the hosts' congestion control ("dctcp-bpf": ours, as BPF). None: as
    # the fabric is now. Set before the run and put back after it.
    buffer: str | None = None
    ecn: bool | None = None
    tcp_cc: str | None = None
    # --client mpi: tag the MPI data connections transparently: "auto" (under
    # scheme talb), "on", "off"; the tagger's priority rule (None: its default);
    # the ranks' btl TCP ports [mpi_port_min, mpi_port_min + mpi_port_range).
    mpi_tag: str = "auto"
    mpi_pattern: str = "allreduce"      # or "ps": rank 0 a parameter server (send/receive)
    mpi_priority: str | None = None
    mpi_port_min: int = 7600
    mpi_port_range: int = 64
    # How gradients are cut and ordered: bytescheduler, usbyte, wfbp, fifo (workload/schedules.py)
    scheduler: str = "bytescheduler"
    # Tensor fusion of all-reduce messages: "adaptive" (OSF's model) or "constant:SIZE"
    # (target bytes); None: none (workload/schedules.py fuse)
    fusion: str | None = None
    # How PS runs synchronise each layer: "ps" (every layer by the servers), "sfb" (fully
    # connected layers by sufficient factor broadcasting between workers), "hybrid"
    # (Poseidon's cost model picks per layer); workload/hybrid.py
    comm: str = "ps"


def _need(cond: bool, flag: str, value, what: str) -> None:
    if not cond:
        raise ValueError(f"{flag}: {what}, got {shown(value)}")


def validate(cfg: RunConfig, *, profile_needed: bool = True) -> None:
    _need(cfg.arch in PATTERNS, "--arch", cfg.arch, f"one of {', '.join(PATTERNS)}")
    _need(isinstance(cfg.workers, int) and cfg.workers >= (2 if cfg.arch == "allreduce" else 1),
          "--workers", cfg.workers,
          "ring all-reduce needs at least 2 workers" if cfg.arch == "allreduce" else "at least 1")
    _need(isinstance(cfg.servers, int) and cfg.servers >= 1, "--servers", cfg.servers, "at least 1")
    _need(cfg.arch == "ps" or cfg.servers == 1, "--servers", cfg.servers,
          "parameter servers exist with --arch ps only")
    _need(0.0 <= cfg.load < 1.0, "--load", cfg.load, "a fraction of capacity in [0, 1)")
    _need(isinstance(cfg.iterations, int) and cfg.iterations >= 1, "--iterations", cfg.iterations,
          "at least 1")
    _need(isinstance(cfg.warmup, int) and 0 <= cfg.warmup < cfg.iterations, "--warmup", cfg.warmup,
          f"0 .. iterations-1 ({cfg.iterations - 1}): at least one iteration must be measured")
    _need(cfg.partition_bytes >= 1, "--partition-size", cfg.partition_bytes, "at least 1 byte")
    _need(cfg.credit_bytes >= 1, "--credit", cfg.credit_bytes, "at least 1 byte")
    _need(cfg.target_link_bps > 0, "--target-link-rate", cfg.target_link_bps, "a positive rate")
    _need(cfg.scaling_mode in SCALING_MODES, "--scaling", cfg.scaling_mode,
          f"one of {', '.join(SCALING_MODES)}")
    _need(cfg.gpu_speed > 0, "--gpu-speed", cfg.gpu_speed, "a positive factor")
    from workload import schedules

    schedules.check(cfg.scheduler)                     # ValueError names --scheduler
    schedules.parse_fusion(cfg.fusion)                 # ValueError names --fusion
    _need(cfg.fusion is None or cfg.arch == "allreduce", "--fusion", cfg.fusion,
          "tensor fusion batches all-reduce messages (--arch allreduce)")
    from workload import hybrid

    hybrid.check(cfg.comm)                             # ValueError names --comm
    _need(cfg.comm == "ps" or cfg.arch == "ps", "--comm", cfg.comm,
          "sufficient factor broadcasting replaces a parameter server's layers (--arch ps)")
    _need(cfg.comm == "ps" or cfg.workers >= 2, "--comm", cfg.comm,
          "sufficient factors go between workers: at least 2 (--workers)")
    _need(1024 <= cfg.base_port <= 65000, "--port", cfg.base_port, "a port in 1024..65000")
    if profile_needed:   # unknown model, batch size, GPU: an error before any fabric is touched
        try:
            _profile(cfg)
        except ValueError as exc:
            field, _, rest = str(exc).partition(":")
            flag = {"model": "--model", "gpu": "--gpu", "gpu_speed": "--gpu-speed",
                    "batch_size": "--batch-size"}.get(field)
            raise ValueError(f"{flag}:{rest}" if flag else str(exc)) from None
    if cfg.scheme is not None:
        from datapath.control import scheme_id_of

        try:
            scheme_id_of(cfg.scheme)
        except ValueError as exc:
            raise ValueError(f"--scheme: {exc}") from None
    from workload.background import check_options

    check_options(cfg.background_cdf, cfg.background_s, cfg.background_size_scale)
    from netns_topology.qdisc import QUEUEINGS

    _need(cfg.queueing is None or cfg.queueing in QUEUEINGS, "--queueing", cfg.queueing,
          f"one of {', '.join(QUEUEINGS)}")
    from workload.patterns import connections

    cfg.connections = connections.canonical(cfg.connections)   # ValueError names --connections
    from workload import placement

    cfg.placement = placement.canonical(cfg.placement, cfg.arch)   # ValueError names --placement
    cfg.rto_min = rto_min_setting(cfg.rto_min)
    from netns_topology.buffers import BUFFERS

    _need(cfg.buffer is None or cfg.buffer in BUFFERS, "--buffer", cfg.buffer,
          f"one of {', '.join(BUFFERS)}")
    _need(cfg.ecn is None or isinstance(cfg.ecn, bool), "--ecn", cfg.ecn, "on or off")
    if cfg.tcp_cc is not None:
        from datapath.tcp_cc import check as check_tcp_cc

        check_tcp_cc(cfg.tcp_cc)                  # TcpCcError (a ValueError) names --tcp-cc
    if cfg.fault is not None:
        from workload.faults import parse_fault

        parse_fault(cfg.fault)


# --- the pieces ------------------------------------------------------------------------
def _profile(cfg: RunConfig):
    from workload.models import get_profile

    return get_profile(cfg.model, batch_size=cfg.batch_size, gpu=cfg.gpu, gpu_speed=cfg.gpu_speed)


def _scaling(cfg: RunConfig, testbed_link_bps: float, target_sizes: list[int]):
    """``both``: the byte scale that keeps the smallest partition at the floor;
    ``fit``: the one that keeps the floor's inflation of all of them <= 5%."""
    from workload.scaling import scaling_for

    return scaling_for(cfg.target_link_bps, testbed_link_bps, mode=cfg.scaling_mode,
                       smallest_bytes=min(target_sizes) if cfg.scaling_mode == "both" else None,
                       sizes=target_sizes if cfg.scaling_mode == "fit" else None,
                       target_gpu=cfg.gpu)


def place(topo, arch: str, workers: int, servers: int, placement: str = "spread") -> dict[str, list]:
    """Hosts for the nodes under ``placement`` (workload/placement.py):
    ``spread`` takes hosts leaf by leaf in turn (h0 of leaf0, h0 of leaf1,
    ..., h1 of leaf0, ...), so that neighbours in the ring and workers and
    servers sit on different leaves; ``remote`` keeps every worker off the
    servers' leaves; or the hosts named. Workers first, then servers."""
    from workload import placement as placement_

    return placement_.place(topo, arch, workers, servers, placement)


def fabric_settings(prefix: str, topo, scheme: str | None) -> dict:
    """Set the scheme on every switch (when asked) and read back what is in
    effect: a results file's ``fabric`` record (the run adds the agent's
    settings at its end). TestbedError for a bridge testbed: its hosts
    cannot tag tensors."""
    state = read_state(prefix)
    out = {"prefix": prefix, "datapath": state.get("datapath"), "topology": state["topology"],
           # the switch ports' queues in effect (the topology's, or a FIFO: testbed.lifecycle.set_queueing)
           "queueing": queueing_of(prefix, state),
           # buffers, ECN, congestion control in effect (testbed/regime.py)
           "regime": regime_of(prefix, state),
           "host_link_bps": {h.name: topo.ports(h.name)[0].rate_bps for h in topo.hosts},
           "switch_config": {}, "agent": None}
    if state.get("datapath") not in PROGRAM_DATAPATHS:
        # TensorSender tags through the hosts' TC programs, attached with the bpf data path only
        raise TestbedError(
            f"testbed '{prefix}' forwards with the kernel bridge (--datapath bridge): its hosts "
            f"cannot tag tensors; run on a testbed built with the bpf data path")
    from datapath import timers
    from datapath.fabric import switch_configs

    # what the link rate gives (docs/schemes.md); switch_config and the
    # agent's config hold what is in force (derived, or set explicitly)
    out["timers"] = timers.for_topology(topo).to_dict()
    # in force: the topology's, or set since (testbed.lifecycle.set_rto_min); None: the
    # kernel's default, 200 ms
    out["rto_min_ms"] = rto_min_of(prefix, state)
    out["switch_config"] = switch_configs(topo, prefix, scheme)
    return out


def make_plan(cfg: RunConfig, profile, scaling, parts, hosts: dict,
              credit_bytes: int | None = None) -> dict:
    """``credit_bytes``: the scheduler's credit (None: --credit)."""
    layers = [{"fwd_s": scaling.compute_s(layer.fwd_s), "bwd_s": scaling.compute_s(layer.bwd_s)}
              for layer in profile.layers]
    return {
        "arch": cfg.arch, "iterations": cfg.iterations,
        "credit_bytes": cfg.credit_bytes if credit_bytes is None else credit_bytes,
        "min_tensor_bytes": scaling.min_tensor_bytes, "layers": layers,
        "partitions": [[p.pid, p.layer, p.tensor, p.index, p.target_bytes, p.nbytes, p.priority]
                       for p in parts],
        "workers": [{"host": h.name, "ip": h.ip, "port": cfg.base_port} for h in hosts["workers"]],
        "servers": [{"host": h.name, "ip": h.ip, "port": cfg.base_port + 1 + i}
                    for i, h in enumerate(hosts["servers"])],
    }


def connections_plan(cfg: RunConfig, parts, topo) -> dict:
    """The plan's connection model (workload/patterns/connections.py).
    ``class``: each partition's class is the priority band its layer is
    marked into on the switches (band_of: band 1 + layer // layers_per_band,
    the last band taking the rest), from the topology's queue whatever the
    run's queueing, so that bands and fifo runs open the same connections;
    numbered from 0. A topology with one band has one class."""
    from workload.patterns import connections

    mode, n = connections.parse(cfg.connections)
    if mode == "pool":
        return {"model": "pool", "n": n}
    if mode == "pair":
        return {"model": "pair"}
    from datapath.schemes.talb import band_of

    q = topo.queue
    bands = [band_of(True, p.layer, len(q.bands), q.layers_per_band) for p in parts]
    return {"model": "class", "bands": len(q.bands), "layers_per_band": q.layers_per_band,
            "class_of": [max(b - 1, 0) for b in bands]}


def connections_record(cfg: RunConfig, plan: dict, events: list[dict]) -> dict:
    """What the run's connection model was and cost: the model, the
    connections each pair opened, per direction (sending node > receiving
    node) how many distinct connections carried tensors, and per node its
    CPU seconds and most threads at once (the nodes' "cost" records)."""
    conns = plan.get("connections") or {"model": "pair"}
    used: dict[str, set] = {}
    for e in events:
        if e.get("ev") == "tx":
            used.setdefault(f"{e['src']}>{e['dst']}", set()).add(
                tuple(e["ports"]) if e.get("ports") else e.get("conn", 0))
    flows = {k: len(v) for k, v in sorted(used.items())}
    cost = {str(e["node"]): {"cpu_s": e["cpu_s"], "threads": e["threads"]}
            for e in events if e.get("ev") == "cost"}
    return {"model": cfg.connections,
            "pool_size": conns.get("n"),
            "classes": len(set(conns["class_of"])) if conns["model"] == "class" else None,
            "class_of_partition": conns.get("class_of"),
            "flows_carrying_tensors": flows,
            "nodes": cost,
            "cpu_s_total": sum(c["cpu_s"] for c in cost.values()) if cost else None,
            "threads_max": max((c["threads"] for c in cost.values()), default=None)}


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it (SIGKILL) if the run's
    process dies without ending it (a SIGKILL leaves no finally to run).
    `ip netns exec` execs the node in place, so the setting reaches it."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class _Nodes:
    """The run's processes; every one ended by pid on every path."""

    def __init__(self):
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.events: list[dict] = []
        self.q: queue.Queue = queue.Queue()
        self._readers: list[threading.Thread] = []
        self.stderr: dict[str, list[str]] = {}

    def start(self, name: str, netns: str, argv: list[str]) -> subprocess.Popen:
        proc = ns_popen(netns, argv, cwd=str(paths.REPO_ROOT), preexec_fn=_die_with_parent,
                        stdin=subprocess.PIPE)
        self.procs.append((name, proc))
        self.stderr[name] = []
        for target in (self._read_out, self._read_err):
            t = threading.Thread(target=target, args=(name, proc), daemon=True)
            t.start()
            self._readers.append(t)
        return proc

    def _read_out(self, name, proc):
        for line in proc.stdout:
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self.q.put((name, ev))

    def _read_err(self, name, proc):
        for line in proc.stderr:
            self.stderr[name].append(line.rstrip())

    def go(self, t0_ns: int) -> None:
        """Every node's start barrier (patterns/common.py wait_for_go): the
        run's start instant on its stdin. A node already gone is left to
        :meth:`failed`."""
        for _, p in self.procs:
            try:
                p.stdin.write(f"go {t0_ns}\n")
                p.stdin.close()
            except OSError:
                pass

    def failed(self) -> tuple[str, subprocess.Popen] | None:
        return next(((n, p) for n, p in self.procs if p.poll() not in (None, 0)), None)

    def all_done(self) -> bool:
        return all(p.poll() == 0 for _, p in self.procs)

    def drain(self, on_event=None) -> None:
        while True:
            try:
                name, ev = self.q.get_nowait()
            except queue.Empty:
                return
            self.events.append(ev)
            if on_event:
                on_event(ev)

    def kill_all(self) -> None:
        for _, p in self.procs:
            if p.poll() is None:
                p.kill()
        for _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.join_readers(timeout=2)

    def join_readers(self, timeout: float) -> None:
        """Wait (each at most ``timeout``) until every node's output is read
        to its end: after the nodes exited, their last records are queued."""
        for t in self._readers:
            t.join(timeout=timeout)

    def dump_stacks(self) -> None:
        """Every live node prints its threads' stacks to stderr (faulthandler)."""
        import signal

        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGUSR1)
        time.sleep(1.0)

    def write_log(self, path: Path) -> None:
        path.write_text("".join(f"--- {name} (pid {p.pid}, exit {p.returncode})\n"
                                + "".join(line + "\n" for line in self.stderr[name])
                                for name, p in self.procs))

    def pids(self) -> list[int]:
        return [p.pid for _, p in self.procs]


def _error_tail(nodes: _Nodes, name: str) -> str:
    lines = [x for x in nodes.stderr.get(name, []) if x.strip()]
    head = next((x for x in lines if x.startswith("node failed:")), None)
    return head or (lines[-1] if lines else "no error output")


def _wait_ready(nodes: _Nodes, names: set, deadline: float, on_event, ev: str = "ready") -> None:
    """Until every node of ``names`` said ``ev``: "ready" (listening) or
    "set" (connected to its peers, waiting for the start instant)."""
    ready = set()
    while ready != names:
        nodes.drain(on_event)
        ready = {f"n{e['node']}" for e in nodes.events if e.get("ev") == ev} & names
        bad = nodes.failed()
        if bad:
            raise RunError(f"node {bad[0]} failed while starting (exit {bad[1].returncode}): "
                           f"{_error_tail(nodes, bad[0])}")
        if time.monotonic() > deadline:
            what = "start listening" if ev == "ready" else "connect to their peers"
            raise RunError(f"nodes {', '.join(sorted(names - ready))} did not {what}")
        time.sleep(0.02)


def training_estimate_s(cfg: RunConfig, plan: dict, link_bps: float) -> float:
    """A lower bound of the training time: per iteration the larger of the
    compute time and the busiest host link's training bytes at its rate
    (PS: every worker's pushes into the servers' links, the incast; ring
    all-reduce: 2(N-1)/N of the model out of every worker)."""
    compute = sum(layer["fwd_s"] + layer["bwd_s"] for layer in plan["layers"])
    model = sum(p[5] for p in plan["partitions"])
    busiest = model * (2 * (cfg.workers - 1) / cfg.workers if cfg.arch == "allreduce"
                       else cfg.workers / cfg.servers)
    return cfg.iterations * max(compute, 8 * busiest / link_bps)


def background_duration_s(cfg: RunConfig, plan: dict, link_bps: float) -> float:
    """How long to plan background flows for when not given: twice the
    training estimate plus 3 s. It depends on the point only (model,
    pattern, fabric, iterations), never on the scheme, and every run waits
    for its plan to finish (docs/experiments.md, "Pairing"). On the
    committed sweeps (issue 17) training took 1.3-2.9 times the estimate
    on the symmetric fabrics (fig10, ablation: at most 5.2 s against a
    plan of 6.6 s), at most 2.0 times on fig4 (38 s against 41.8 s), up to
    4.8 times on fig11's asymmetric fabric (11 of its 120 runs would
    outlast the plan) and 8.5 times on FIFO queues at load 0.8. Training
    that outlasts the plan runs its tail without background, and the
    results say so (``load.background_covered``)."""
    return min(cfg.timeout_s, 2 * training_estimate_s(cfg, plan, link_bps) + 3)


def background_drain_s(duration_s: float) -> float:
    """How long after its planned end a run waits for background flows still
    open (then censored): as long as the plan, the same for every scheme.
    The wait ends early once every flow is over."""
    return duration_s


def _prepare_background(cfg: RunConfig, topo, hosts: dict, scaling, plan: dict, link_bps: float,
                        say=lambda _m: None):
    """Background flows to hosts on other leaves from the workers (as the
    paper; placement ``spread``) or from every host (the other placements:
    workload/placement.py bg_senders), sizes scaled like the tensors (or by
    ``background_size_scale``); None at load 0. Its processes are started
    and wait for the run's start instant (``go``)."""
    if cfg.load == 0:
        return None
    from workload.background import BackgroundLoad, fabric_hosts, uplink_capacity_bps
    from workload.placement import bg_senders

    bg = BackgroundLoad(fabric_hosts(topo, cfg.prefix), load=cfg.load,
                        capacity_bps=uplink_capacity_bps(topo), seed=cfg.seed,
                        duration_s=cfg.background_s or background_duration_s(cfg, plan, link_bps),
                        cdf=cfg.background_cdf, senders=bg_senders(topo, cfg.placement, hosts)[0],
                        size_scale=cfg.background_size_scale or scaling.byte_scale)
    rate = bg.params["arrival_rate_per_s"]
    if rate > MAX_BACKGROUND_FLOWS_PER_S:
        say(f"warning: {rate:.0f} background flows/s of {bg.params['effective_mean_bytes']:.0f} B "
            f"on average: over the {MAX_BACKGROUND_FLOWS_PER_S}/s the hosts open without saturating "
            f"the CPUs; --background-size-scale makes flows larger and fewer at the same load")
    try:
        return bg.prepare()
    except BaseException:
        bg.close()
        raise


def _stop_now(bg):
    """End the background load now, with training, not at its planned end:
    ``stop()`` waits for the sources until t0 + duration + drain_s, so a
    drain of (now - planned end), negative while flows are still planned,
    makes that moment now. Flows under way are censored, later ones never
    start. Only for a failed run: a run that succeeds waits for its plan."""
    if bg.t0_ns is None:            # never given its start instant: nothing started
        return bg.stop(drain_s=0)
    planned_end_ns = bg.t0_ns + int(bg.duration_s * 1e9)
    return bg.stop(drain_s=(time.monotonic_ns() - planned_end_ns) / 1e9)


def pairing_record(events: list[dict], t0_ns: int, background: dict | None,
                   training_end_ns: int, end_ns: int) -> dict:
    """What makes runs of one seed comparable, relative to the run's start
    instant t0 (docs/experiments.md, "Pairing"): when training started
    (``start_offset_s``: the first tensor admitted − t0; the same for every
    scheme within a few ms), how punctually the nodes woke, and how much of
    the background plan the run saw."""
    def rel(t_ns):
        return None if t_ns is None else (t_ns - t0_ns) / 1e9

    admits = [e["t_admit_ns"] for e in events if e.get("ev") == "tx" and e.get("t_admit_ns")]
    sends = [e["t_ns"] for e in events if e.get("ev") == "tx"]
    rx = [e["t_ns"] for e in events if e.get("ev") == "rx"]
    goes = [e for e in events if e.get("ev") == "go"]
    last_rx = max(rx) if rx else training_end_ns
    out = {
        "t0_ns": t0_ns, "go_lead_s": GO_LEAD_S,
        "start_offset_s": rel(min(admits)) if admits else None,
        "first_send_offset_s": rel(min(sends)) if sends else None,
        "nodes_go": len(goes),
        # the earliest a node had its "go" before t0 (negative: after it) and the
        # latest one woke after t0
        "go_received_ahead_min_s": min((t0_ns - e["t_recv_ns"]) / 1e9 for e in goes)
        if goes else None,
        "go_woke_late_max_s": max(rel(e["t_ns"]) for e in goes) if goes else None,
        "training_end_s": rel(last_rx), "nodes_done_s": rel(training_end_ns), "end_s": rel(end_ns),
        "background": None,
    }
    if background is not None:
        p, flows = background["params"], background["flows"]
        started = [f for f in flows if f["start_ns"] is not None]
        ends = [f["end_ns"] for f in flows if f["end_ns"] is not None]
        out["background"] = {
            "plan_sha256": p.get("plan_sha256"), "planned_s": p["duration_s"],
            "drain_s": p.get("drain_s"), "planned_flows": p["planned_flows"],
            "planned_bytes": p["planned_bytes"],
            "t0_offset_s": rel(p["t0_ns"]) if p.get("t0_ns") is not None else None,
            "started": len(started),
            **{k: sum(f["status"] == k for f in flows)
               for k in ("done", "censored", "failed", "not_started")},
            "delivered_bytes": sum(f["received_bytes"] for f in flows),
            "start_lag_max_s": max(((f["start_ns"] - f["planned_start_ns"]) / 1e9 for f in started),
                                   default=None),
            "last_done_s": rel(max(ends)) if ends else None,
            "covered": rel(last_rx) <= p["duration_s"],
        }
    return out


def _outstanding(events: list[dict]) -> str:
    """Where a stuck run stands: tensors in flight, each worker's last iteration."""
    done = {e["k"] for e in events if e["ev"] == "rx"}
    waiting = [e["k"] for e in events if e["ev"] == "tx" and e["k"] not in done]
    last = {}
    for e in events:
        if e["ev"] == "iter":
            last[e["node"]] = e["it"]
    return (f"{len(waiting)} tensors sent and not received ({', '.join(waiting[:5])}); "
            f"workers at iteration {last}")


def _results_path(cfg: RunConfig) -> Path:
    if cfg.out:
        return Path(cfg.out)
    return Path("runs") / f"{run_metrics.run_id_of(cfg)}.json"


# --- the run ---------------------------------------------------------------------------
def run(cfg: RunConfig, *, profile=None, scaling=None, on_event=None, on_nodes=None,
        say=lambda _m: None) -> dict:
    """Run one experiment; returns the results (also written to the results
    file, ``results["path"]``). ``profile``/``scaling``: given objects
    instead of ``cfg.model``'s profile and the scaling from ``cfg``.
    ``on_event``: called with every node record as it arrives (progress);
    ``on_nodes``: called once every node is started, with {node name: pid}.
    ``model == "none"``: background flows only, no training
    (workload/background_only.py, a code path of its own)."""
    if cfg.model == "none":
        from workload import background_only

        return background_only.run(cfg, say=say)
    # a real MPI job (--client mpi) runs through workload.mpi_run.run, which builds on this module
    _need(cfg.client == "talb", "--client", cfg.client,
          "talb here (our own nodes); a real MPI job runs with workload.mpi_run.run")
    validate(cfg, profile_needed=profile is None)

    def check(topo):
        # enough hosts, the hosts named? before building
        place(topo, cfg.arch, cfg.workers, cfg.servers, cfg.placement)
        if cfg.fault:
            from workload.faults import check_names, parse_fault

            check_names(parse_fault(cfg.fault), topo)

    with testbed_for(cfg.prefix, cfg.topology, DEFAULT_TOPOLOGY, check, say) as built, \
            rto_min_for_run(cfg.prefix, cfg.rto_min, built, say), \
            queueing_for_run(cfg.prefix, cfg.queueing, built, say):
        return _run_on_fabric(cfg, profile, scaling, on_event, on_nodes, say, built)


def _run_on_fabric(cfg, profile, scaling, on_event, on_nodes, say, built) -> dict:
    run = _setup(cfg, profile, scaling, built)
    # the buffers are on the run's time scale, known from here on
    with regime_for_run(cfg.prefix, buffer=cfg.buffer, ecn=cfg.ecn, tcp_cc=cfg.tcp_cc,
                        time_scale=run.scaling.time_scale, built=built, say=say) as regime:
        run.fabric["regime"] = regime
        return _train_and_report(cfg, run, on_event, on_nodes, say)


def _train_and_report(cfg, run, on_event, on_nodes, say) -> dict:
    held = _Held(_write_plan(run.plan), _fault_injector(cfg, run, say), _Nodes(),
                 # Monitoring hook (issue 12): the run's live /metrics, fed the node records
                 # as they arrive.
                 run_metrics.LiveRun.start(cfg, run.profile, run.scaling,
                                           _target_bytes_fn(cfg, run.parts, cfg.workers),
                                           on_event))
    try:
        trained = _train(cfg, run, held, on_nodes, say)
    except RunError as exc:
        held.nodes.kill_all()
        raise _with_node_log(exc, held.nodes, cfg) from None
    finally:
        fault = held.close()

    record = _record(cfg, run, held.nodes.events, trained, held.counters)
    _add_osf(cfg, run, record)
    if run.schedule is not None:
        record.scheduler = run.schedule                 # workload/schedules.py
        if cfg.scheduler != "bytescheduler":            # earlier runs' rows stay as they were
            record.headline["scheduler"] = cfg.scheduler
        if cfg.fusion is not None:
            record.headline["fusion"] = cfg.fusion
        if cfg.comm != "ps":
            record.headline["comm"] = cfg.comm
    if fault is not None:
        from workload import faults

        record.fault = faults.report(fault, record.tensors)
    return write_record(record, _results_path(cfg))


def _train(cfg: RunConfig, run: _Setup, held: _Held, on_nodes, say) -> _Trained:
    """Counters before; background and nodes started, started together,
    waited for; counters after; the background's plan to its end."""
    held.counters = _Counters(cfg.prefix, run)
    held.counters.read_before()
    if held.injector is not None:
        held.injector.prepare()
    held.counters.read_queues_before()
    t0 = time.monotonic()
    deadline = t0 + cfg.timeout_s
    held.bg = _prepare_background(cfg, run.topo, run.hosts, run.scaling, run.plan, run.link_bps,
                                  say)
    if held.bg is not None:
        say(f"background load {cfg.load:g}: {held.bg.params['planned_flows']} "
            f"{cfg.background_cdf} flows planned over {held.bg.duration_s:.1f} s")
    start_ns, samples = _run_nodes(cfg, run, held, deadline, on_nodes, say)
    duration = time.monotonic() - t0
    training_end_ns = time.monotonic_ns()
    # every tensor is through the senders' TC egress: their wire times
    wire = read_wire_times(cfg.prefix, run.node_hosts, held.nodes.events)
    # the training's counters, before the background's rest runs alone
    held.counters.read_after()
    run.fabric["agent"] = agent_settings(cfg.prefix)   # read late: its first snapshot takes a window
    c = held.counters
    held.live.finish(c.tcp_before, c.tcp_after,
                     c.ports and measure.uplink_spread(run.topo, c.before, c.after, duration))
    background = None
    if held.bg is not None:
        background = _finish_background(held.bg, duration, say)
        held.bg = None
    pairing = pairing_record(held.nodes.events, start_ns, background, training_end_ns,
                             time.monotonic_ns())
    return _Trained(duration, samples, background, pairing, wire)


def _run_nodes(cfg: RunConfig, run: _Setup, held: _Held, deadline: float, on_nodes,
               say) -> tuple[int, list]:
    """Start the nodes, start them and the background together (and the
    fault's clock), wait until training is over: (the start instant, the CPU
    sampler's samples)."""
    on_event, nodes = held.live.on_event, held.nodes
    with measure.Sampler(held.counters.ports, held.counters.host_ports) as sampler:
        _start_nodes(cfg, run, nodes, held.run_dir / "plan.json", on_event, say)
        if on_nodes:
            on_nodes({name: p.pid for name, p in nodes.procs})
        start_ns = _start_together(nodes, held.bg, deadline, on_event)
        if held.injector is not None:
            # the fault's clock is the training's (and the background plan's) start: the
            # same instant into training at every scheme of a seed, however long the
            # nodes took to get ready on a busy machine
            held.injector.start(start_ns)
        _wait_for_training(cfg, run, nodes, deadline, on_event)
    return start_ns, sampler.samples


# --- the run's steps ---------------------------------------------------------------------
@dataclass
class _Setup:
    """A training run as derived from its configuration and the fabric,
    before anything starts."""

    topo: object
    fabric: dict                # the results' "fabric" record (fabric_settings)
    profile: object
    hosts: dict                 # {"workers": [...], "servers": [...]} (place)
    link_bps: float             # the slowest host link the nodes use
    scaling: object
    parts: list
    plan: dict
    pattern: object
    node_roles: list            # (role, rank) per node id
    schedule: dict | None = None    # the results' "scheduler" record (workload/schedules.py)

    @property
    def node_hosts(self) -> list:
        """The host of each node id: workers first, then servers."""
        return self.hosts["workers"] + self.hosts["servers"]


def _setup(cfg: RunConfig, profile, scaling, built: bool) -> _Setup:
    """Set the scheme, place the nodes, scale and partition the model and
    plan the run; ValueError when a partition is too large to be one tensor."""
    topo = load_topology_of(cfg.prefix)
    fabric = fabric_settings(cfg.prefix, topo, cfg.scheme)
    fabric["built_for_run"] = built
    profile = profile or _profile(cfg)
    hosts = place(topo, cfg.arch, cfg.workers, cfg.servers, cfg.placement)
    link_bps = min(topo.ports(h.name)[0].rate_bps for h in hosts["workers"] + hosts["servers"])
    target_sizes = [p.target_bytes for p in _schedule(cfg, profile)[0]]
    scaling = scaling or _scaling(cfg, link_bps, target_sizes)
    parts, credit, sched = _schedule(cfg, profile, scaling.tensor_bytes)
    biggest = max(parts, key=lambda p: p.nbytes)
    if biggest.nbytes + HEADER.size > MAX_TENSOR_PKTS * MSS_BYTES:
        raise ValueError(f"--partition-size: partitions of {cfg.partition_bytes} target bytes are "
                         f"{biggest.nbytes} bytes on the testbed (scaling {scaling.mode}), over the "
                         f"16-bit tensor length ({MAX_TENSOR_PKTS} packets); choose a smaller size, "
                         f"got {cfg.partition_bytes}")
    plan = make_plan(cfg, profile, scaling, parts, hosts, credit)
    if sched.get("fusion"):          # the layers each fused buffer carries (WorkerLoop)
        plan["carries"] = sched["fusion"]["layers_of_buffer"]
    if sched.get("comm"):            # partitions that go worker to worker (patterns/ps.py)
        plan["sfb"] = sched["comm"]["sfb_partitions"]
    plan["connections"] = connections_plan(cfg, parts, topo)
    pattern = get_pattern(cfg.arch)
    return _Setup(topo, fabric, profile, hosts, link_bps, scaling, parts, plan, pattern,
                  pattern.nodes(plan), sched)


def _add_osf(cfg: RunConfig, run: _Setup, record: RunRecord) -> None:
    """OSF's modelled iteration beside the measured one (workload/osf.py), at target scale."""
    from workload import osf, schedules

    b = schedules.seconds_per_byte(cfg.arch, cfg.workers, cfg.servers, cfg.target_link_bps)
    pred = osf.prediction(run.profile, run.parts, b=b, workers=cfg.workers,
                          measured_s=record.summary["speed"]["target_iteration_time_s"],
                          sfb=run.plan.get("sfb", ()),
                          b_sfb=schedules.sfb_seconds_per_byte(cfg.workers, cfg.target_link_bps))
    record.osf = pred
    record.summary["osf"] = {k: pred[k] for k in ("predicted_iteration_s",
                                                  "measured_iteration_s", "error")}


def _schedule(cfg: RunConfig, profile, tensor_bytes=None):
    """(partitions, credit, record) of the run's --scheduler (workload/schedules.py)."""
    from workload import schedules

    parts, credit, record = schedules.plan(
        profile, cfg.scheduler, partition_bytes=cfg.partition_bytes,
        credit_bytes=cfg.credit_bytes, arch=cfg.arch, workers=cfg.workers, servers=cfg.servers,
        target_link_bps=cfg.target_link_bps, tensor_bytes=tensor_bytes)
    if cfg.fusion is not None:
        b = schedules.seconds_per_byte(cfg.arch, cfg.workers, cfg.servers, cfg.target_link_bps)
        parts, fusion = schedules.fuse(profile, parts, cfg.fusion, b=b, tensor_bytes=tensor_bytes)
        record = {**record, "fusion": fusion}
    if cfg.comm != "ps":
        from workload import hybrid

        rows = hybrid.choose(profile, cfg.comm, cfg.workers, cfg.servers)
        parts, sfb = schedules.with_sfb(profile, parts, rows, tensor_bytes)
        record = {**record, "comm": {"mode": cfg.comm, "sfb_partitions": sfb,
                                     "sfb_layers": [r["name"] for r in rows if r["scheme"] == "sfb"],
                                     "layers": [r for r in rows if "shape" in r]}}
    return parts, credit, record


def _write_plan(plan: dict) -> Path:
    """A directory holding plan.json, readable by the nodes."""
    run_dir = Path(tempfile.mkdtemp(prefix="talb-run-"))
    (run_dir / "plan.json").write_text(json.dumps(plan))
    os.chmod(run_dir, 0o755)
    return run_dir


def _fault_injector(cfg: RunConfig, run: _Setup, say):
    """The run's fault injector, or None; checked against the fabric before
    anything starts."""
    if not cfg.fault:
        return None
    from workload import faults

    return faults.FaultInjector(faults.parse_fault(cfg.fault), cfg.prefix, run.topo,
                                run.node_hosts, seed=cfg.seed, say=say)


@dataclass
class _Held:
    """What a run holds while it runs; :meth:`close` ends it all on every path."""

    run_dir: Path               # plan.json for the nodes
    injector: object            # workload.faults.FaultInjector, or None
    nodes: _Nodes
    live: object                # run_metrics.LiveRun
    counters: _Counters | None = None
    bg: object = None           # the background load until its plan is over

    def close(self):
        """End everything, in this order; the fault's record (None: no fault)."""
        fault = None
        if self.injector is not None:   # first: no link left down, no agent left dead
            fault = self.injector.close()
        self.live.close()
        self.nodes.kill_all()
        if self.bg is not None:            # a failed run: every background process ends too
            _stop_now(self.bg)
            self.bg.close()
        if self.counters is not None:
            self.counters.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return fault


@dataclass
class _Trained:
    """What training gave, beside the counters and the nodes' records."""

    duration: float             # nodes started to nodes done, s
    samples: list               # the CPU sampler's
    background: dict | None
    pairing: dict
    wire: tuple                 # read_wire_times'


class _Counters:
    """The kernel's TCP counters of the nodes' hosts, the switches' port
    counters (bpf data path only) and the port qdiscs, read before and
    after training."""

    def __init__(self, prefix: str, run: _Setup):
        self.prefix, self.topo, self.hosts = prefix, run.topo, run.node_hosts
        self.have_links = run.fabric["datapath"] in PROGRAM_DATAPATHS
        self.ports = None
        self.before = self.after = self.queues_before = self.queues_after = None
        self.tcp_before = self.tcp_after = None
        self.host_ports = {(h.leaf, p.name): p.rate_bps for h in self.hosts
                           for p in self.topo.ports(h.leaf) if p.peer == h.name}

    def _tcp(self) -> dict:
        return {h.name: measure.read_tcp_counters(paths.netns_name(self.prefix, h.name))
                for h in self.hosts}

    def read_before(self) -> None:
        self.tcp_before = self._tcp()
        if self.have_links:
            self.ports = measure.PortCounters(self.prefix, self.topo)
        self.before = self.ports.read() if self.ports else None

    def read_queues_before(self) -> None:
        self.queues_before = measure.read_qdisc_counters(self.prefix, self.topo)

    def read_after(self) -> None:
        self.after = self.ports.read() if self.ports else None
        self.queues_after = self.queues_before and measure.read_qdisc_counters(self.prefix,
                                                                              self.topo)
        self.tcp_after = self._tcp()

    def close(self) -> None:
        if self.ports is not None:
            self.ports.close()


def _start_nodes(cfg: RunConfig, run: _Setup, nodes: _Nodes, plan_path: Path, on_event,
                 say) -> None:
    """One process per node in its host's namespace: servers first, and
    once they listen, the workers that connect to them."""
    def start(i: int, role: str, rank: int) -> None:
        nodes.start(f"n{i}", paths.netns_name(cfg.prefix, run.node_hosts[i].name),
                    [*NODE, str(plan_path), role, str(rank)])

    servers = [(i, r) for i, r in enumerate(run.node_roles) if r[0] == "server"]
    for i, (role, rank) in servers:
        start(i, role, rank)
    if servers:
        _wait_ready(nodes, {f"n{i}" for i, _ in servers}, time.monotonic() + 30, on_event)
    for i, (role, rank) in enumerate(run.node_roles):
        if role != "server":
            start(i, role, rank)
    say(f"{len(run.node_roles)} nodes running")


def _start_together(nodes: _Nodes, bg, deadline: float, on_event) -> int:
    """Pairing (docs/experiments.md): every node connects first; then one
    start instant, a little ahead, is the background's t0 and the moment
    every worker starts training, so every scheme at a seed sees the same
    background flows at the same times into training. Returns the instant."""
    _wait_ready(nodes, {name for name, _ in nodes.procs},
                min(deadline, time.monotonic() + 60), on_event, ev="set")
    if bg is not None:
        bg.wait_ready()
    start_ns = time.monotonic_ns() + int(GO_LEAD_S * 1e9)
    if bg is not None:
        bg.go(start_ns)
    nodes.go(start_ns)
    return start_ns


def _wait_for_training(cfg: RunConfig, run: _Setup, nodes: _Nodes, deadline: float,
                       on_event) -> None:
    """Until every node is done and its output read; RunError when a node
    fails or the run passes its timeout."""
    while not nodes.all_done():
        nodes.drain(on_event)
        bad = nodes.failed()
        if bad:
            name = bad[0]
            host = run.node_hosts[int(name[1:])].name
            raise RunError(f"node {name} ({run.node_roles[int(name[1:])][0]} on {host}) failed "
                           f"(exit {bad[1].returncode}): {_error_tail(nodes, name)}")
        if time.monotonic() > deadline:
            nodes.dump_stacks()
            raise RunError(f"timeout: the run took longer than {cfg.timeout_s:g} s; "
                           f"{_outstanding(nodes.events)}")
        time.sleep(0.05)
    nodes.join_readers(timeout=10)
    nodes.drain(on_event)


def _finish_background(bg, training_s: float, say) -> dict:
    """Wait for the background's whole plan, never cut at training's end
    (the same for every scheme; flows still open at the planned end + the
    drain are censored), then end it: its record."""
    left = (bg.t0_ns - time.monotonic_ns()) / 1e9 + bg.duration_s
    if left > 0:
        say(f"training done; the background's plan runs {left:.1f} s more")
    background = bg.stop(drain_s=background_drain_s(bg.duration_s)).to_dict()
    background["params"]["training_s"] = training_s
    bg.close()
    return background


def _with_node_log(exc: RunError, nodes: _Nodes, cfg: RunConfig) -> RunError:
    """``exc`` naming the file where every node's error output now is."""
    log = _results_path(cfg).with_suffix(".nodes.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    nodes.write_log(log)
    return RunError(f"{exc} (every node's error output: {log})")


#: where a run's wire times come from (results["wire"]["point"], docs/workload.md)
WIRE_POINT = ("the sending host's TC egress (bpf/host_tc.c, map tensor_wire): before the "
              "host's own qdisc, i.e. handed to the host's NIC queue")


def read_wire_times(prefix: str, node_hosts: list, events: list[dict]) -> tuple[dict, dict]:
    """Every sent tensor's entry in its sending host's ``tensor_wire`` map:
    ({(node, tensor_id): {first_ns, last_ns, latest_ns, packets}}, what was
    read: entries found per host and the hosts whose map could not be read,
    with why). One lookup per tensor; ids are unique per host."""
    from datapath.host_maps import HostMaps

    ids: dict[str, list[tuple[int, int]]] = {}
    for e in events:
        if e["ev"] == "tx":
            ids.setdefault(node_hosts[e["src"]].name, []).append((e["src"], e["tensor_id"]))
    wire, found, errors = {}, {}, {}
    for host, pairs in ids.items():
        try:
            maps = HostMaps(paths.pin_dir(prefix, host))
        except (OSError, ValueError) as exc:   # no pin (a testbed of an older build), layout
            errors[host] = str(exc)
            continue
        try:
            got = maps.wire_times({tid for _, tid in pairs})
        finally:
            maps.close()
        for node, tid in pairs:
            w = got.get(tid)
            if w is not None:
                wire[(node, tid)] = {"first_ns": w.first_ns, "last_ns": w.last_ns,
                                     "latest_ns": w.latest_ns, "packets": w.packets}
        found[host] = len(got)
    return wire, {"point": WIRE_POINT, "entries": found, "errors": errors}


def _headline(cfg, fabric, tensors: dict, speed: dict, guard: dict) -> dict:
    """One flat row of the numbers a sweep compares (issue 11's CSV)."""
    schemes = sorted({c["scheme"] for c in fabric["switch_config"].values()})
    row = {"scheme": ",".join(schemes) or "bridge", "queueing": fabric["queueing"]["mode"],
           "connections": cfg.connections, "placement": cfg.placement,
           "rto_min_ms": fabric.get("rto_min_ms"),
           "model": cfg.model, "arch": cfg.arch,
           "workers": cfg.workers, "servers": cfg.servers if cfg.arch == "ps" else 0,
           "load": cfg.load, "seed": cfg.seed, "samples_per_s": speed["samples_per_s"],
           "iteration_time_s": speed["iteration_time_s"], "cpu_bound": guard["flagged"]}
    for name, block in [*tensors["by_class"].items(), ("trailing", tensors["trailing"])]:
        row[f"{name}_fct_mean_s"] = block["mean_s"]
        row[f"{name}_fct_p99_s"] = block["p99_s"]
        row[f"{name}_censored"] = block["censored"]
        # network FCT (first packet on the wire -> delivered) and the send-buffer wait
        row[f"{name}_netfct_mean_s"] = block["netfct"]["mean_s"]
        row[f"{name}_netfct_p99_s"] = block["netfct"]["p99_s"]
        row[f"{name}_sendbuf_wait_mean_s"] = block["sendbuf_wait"]["mean_s"]
        # the wait for a connection before the hand-off (connection models)
        row[f"{name}_conn_wait_mean_s"] = block["conn_wait"]["mean_s"]
        row[f"{name}_wire_missing"] = block["wire_missing"]
    return row


def _senders_record(cfg, topo, hosts) -> dict:
    """The load block's senders: the hosts and the rule (``workers`` or ``every host``)."""
    if not cfg.load:
        return {"senders": None, "senders_rule": None}
    from workload.placement import bg_senders

    names, rule = bg_senders(topo, cfg.placement, hosts)
    return {"senders": names, "senders_rule": rule}


def _target_bytes_fn(cfg, parts, n_workers):
    by_pid = {p.pid: p for p in parts}

    def target(tx: dict) -> float:
        p = by_pid[tx["pid"]]
        return p.target_bytes / n_workers if tx["kind"] in ("reduce", "gather") else p.target_bytes
    return target


def _record(cfg, run: _Setup, events: list[dict], trained: _Trained, c: _Counters) -> RunRecord:
    """A training run's results record from its setup, its nodes' records,
    what training gave and the counters read around it."""
    profile, scaling, parts, plan, fabric, hosts, topo = (run.profile, run.scaling, run.parts,
                                                          run.plan, run.fabric, run.hosts, run.topo)
    duration, samples, background, pairing, wire = (trained.duration, trained.samples,
                                                    trained.background, trained.pairing,
                                                    trained.wire)
    queues = (c.queues_before, c.queues_after)
    n = cfg.workers
    tensors = measure.join_tensors(events, _target_bytes_fn(cfg, parts, n), cfg.warmup, wire[0])
    iterations = measure.iteration_records(events, n, cfg.warmup)
    if cfg.arch == "ps":
        expected = run.pattern.bytes_per_iteration(parts, n, cfg.servers, plan.get("sfb", ()))
    else:
        expected = run.pattern.bytes_per_iteration(parts, n, scaling.min_tensor_bytes)
    payload_sent = sum(t["bytes"] - HEADER.size for t in tensors)
    span = measure.training_span_s(events)
    training_s = span[1] - span[0] if span else None
    guard = measure.cpu_guard(samples, c.have_links, span)
    summary_tensors = measure.tensor_summary(tensors, n)
    speed_ = measure.speed(iterations, n, profile.batch_size, scaling.time_scale)
    model = {"name": profile.name, "batch_size": profile.batch_size, "gpu": profile.gpu,
             "layers": len(profile.layers), "params": profile.total_params,
             "target_bytes": profile.total_bytes, "testbed_bytes": sum(p.nbytes for p in parts),
             "partitions": len(parts),
             "layer_fwd_s": [l.fwd_s for l in profile.layers],
             "layer_bwd_s": [l.bwd_s for l in profile.layers]}
    record = RunRecord(
        config=asdict(cfg),
        software=software_versions(),
        # where it ran: host name, kernel, CPU model, cores (common/machine.py)
        machine=machine_info(),
        fabric=fabric,
        model=model,
        scaling=scaling.describe([p.target_bytes for p in parts]),
        scheduler={"name": "bytescheduler", "partition_bytes": cfg.partition_bytes,
                   "credit_bytes": cfg.credit_bytes, "priority": "layer index, front first"},
        # where the nodes sat, and the --placement that put them there (workload/placement.py)
        placement={**{k: [h.name for h in v] for k, v in hosts.items()},
                   "mode": mode_of(cfg.placement), "spec": cfg.placement},
        # the connection model in effect and what it cost (docs/workload.md, "Connections")
        connections=connections_record(cfg, plan, events),
        load={"offered": cfg.load, "cdf": cfg.background_cdf if cfg.load else None,
              # who sends the background (workload/placement.py bg_senders); None at load 0
              **_senders_record(cfg, topo, hosts),
              "background_covered": pairing["background"]["covered"]
              if background and pairing else None,
              "background": background},
        duration_s=duration,               # nodes started to nodes done
        training_s=training_s,             # first tensor sent to last received
        pairing=pairing,                   # the start instant and what each run saw of the plan
        wire=wire[1],                      # where the tensors' wire times come from
        summary={
            "tensors": summary_tensors,
            "layers": measure.layer_records(events, cfg.warmup),
            "speed": speed_,
            "bytes": {"expected_per_iteration": expected,
                      "payload_sent_all_iterations": payload_sent,
                      "expected_all_iterations": expected["total"] * cfg.iterations},
            "tcp": measure.tcp_summary({h: measure.counter_delta(c.tcp_before[h], c.tcp_after[h])
                                        for h in c.tcp_after}),
            # utilisation over the time tensors flowed (not the nodes' start-up)
            "uplinks": measure.uplink_spread(topo, c.before, c.after, training_s or duration,
                                             queues)
            if c.before else None,
            # drops per switch port queue, by where the port leads (measure.port_drops)
            "port_drops": measure.port_drops(topo, *queues) if all(queues) else None,
            "cpu_guard": guard,
            "background": background["summary"] if background else None,
        },
        flags={"cpu_bound": guard["flagged"]},
        headline=_headline(cfg, fabric, summary_tensors, speed_, guard),
        iterations=iterations,
        layers=measure.layer_events(events),
        tensors=tensors,
        cpu_samples=samples,
    )
    # training + background bytes offered to other leaves, per leaf, over its uplinks
    s = record.summary
    s["offered_load"] = measure.offered_load(
        topo, [n["host"] for n in plan["workers"] + plan["servers"]], tensors,
        background and background["flows"], measure.training_span_ns(events), s["uplinks"],
        s["port_drops"])
    return record
