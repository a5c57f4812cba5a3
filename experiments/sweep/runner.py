"""Run a plan: one fabric per topology, a clean state before every run,
resume, a progress bar with ETA.

Results directory::

    OUT/plan.json          the plan (every run with its key)
    OUT/runs/<key>.json    each finished run's results file (workload/experiment.py)
    OUT/failed.json        runs that failed: key -> error (retried on the next start)

A run is finished when its results file is there: a sweep started again
skips it, whatever preset or flags listed it (the key hashes every
parameter, plan.RunSpec.key).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from experiments.sweep.layout import is_done, result_path
from experiments.sweep.plan import Plan, RunSpec

RunFn = Callable[[RunSpec, Path], None]   # must leave the results JSON at the path




class Fabric:
    """The sweep's testbeds: one per topology, built once and reused by every
    run on it; before each run the agent is restarted with the run's
    settings, the switch ports set to the run's queueing, the hosts to its
    minimum RTO, the scheme set on every switch and the tensor tables emptied."""

    def __init__(self, prefix: str, say=lambda _m: None):
        from common import paths

        self.prefix = paths.check_prefix(prefix)
        self.say = say
        self.topology: str | None = None

    def use(self, topology: str) -> None:
        from common import paths
        from netns_topology import load_topology
        from netns_topology.state import TestbedError, exists, require_root
        from testbed import lifecycle

        if self.topology == topology:
            return
        self.close()
        require_root()
        if exists(self.prefix):
            raise TestbedError(
                f"--prefix: a testbed '{self.prefix}' is already up; the sweep builds its own "
                f"(take it down with `talb testbed down --prefix {self.prefix}`, or pick "
                f"another --prefix)")
        path = Path(topology)
        if not path.is_absolute():
            path = paths.REPO_ROOT / path
        self.say(f"building testbed '{self.prefix}' from {topology}")
        lifecycle.up(load_topology(path), self.prefix, agent=None)
        self.topology = topology

    def prepare(self, spec: RunSpec) -> None:
        from agent.daemon import start_background, stop_background
        from common import paths
        from datapath.control import clear_tensor_table, set_scheme
        from datapath.maps import SwitchMaps
        from netns_topology.state import load_topology_of
        from testbed import lifecycle
        from workload.testbed_use import free_port as _free_port

        stop_background(self.prefix)          # its PCM history belongs to the last run
        lifecycle.set_queueing(self.prefix, spec.queueing)   # switch ports idle: nothing queued
        from netns_topology.state import read_state
        from testbed.regime import set_regime

        if read_state(self.prefix).get("regime"):   # a killed run's: the runs start deep
            set_regime(self.prefix)
        topo = load_topology_of(self.prefix)
        # the run's minimum RTO, or the topology's (None: the kernel's)
        lifecycle.set_rto_min(self.prefix, topo.rto_min if spec.rto_min is None else spec.rto_min)
        for sw in topo.switches:
            with SwitchMaps(paths.pin_dir(self.prefix, sw.name)) as maps:
                set_scheme(maps, spec.scheme)
                clear_tensor_table(maps)      # idle switch: the last run's nodes are gone
        start_background(self.prefix, metrics_port=_free_port(), **dict(spec.agent_opts))

    def close(self) -> None:
        from testbed import lifecycle

        if self.topology is not None:
            self.say(f"removing testbed '{self.prefix}'")
            lifecycle.down(self.prefix)
            self.topology = None


def real_run(prefix: str, timeout_s: float = 600.0) -> RunFn:
    """One `talb run` on the prepared fabric (workload.experiment.run)."""
    def run_one(spec: RunSpec, path: Path) -> None:
        from workload import experiment, mpi_run
        from workload.experiment import RunConfig

        from testbed.regime import NAMED

        # a real MPI job (--clients mpi), a PyTorch DDP job (--clients torch) or our own
        # nodes as the training traffic
        if spec.client == "torch":
            from workload import torch_run
            run = torch_run.run
        else:
            run = mpi_run.run if spec.client == "mpi" else experiment.run
        # the regime's buffers, ECN and congestion control (None: as the fabric is)
        buffer, ecn, tcp_cc = NAMED[spec.regime] if spec.regime else (None, None, None)
        run(RunConfig(model=spec.model, arch=spec.arch, workers=spec.workers,
                      servers=spec.servers, scheme=spec.scheme, load=spec.load, seed=spec.seed,
                      iterations=spec.iterations, warmup=spec.warmup,
                      target_link_bps=spec.target_link_bps, scaling_mode=spec.scaling_mode,
                      background_cdf=spec.background_cdf,
                      background_size_scale=spec.background_size_scale, queueing=spec.queueing,
                      connections=spec.connections, placement=spec.placement,
                      rto_min=spec.rto_min, client=spec.client, scheduler=spec.scheduler,
                      comm=spec.comm, fusion=spec.fusion,
                      buffer=buffer, ecn=ecn, tcp_cc=tcp_cc,
                      prefix=prefix, out=str(path),
                      timeout_s=timeout_s, background_s=spec.background_s))
    return run_one


class _NoFabric:
    """For a run function that needs no testbed (tests)."""

    def use(self, topology):
        pass

    def prepare(self, spec):
        pass

    def close(self):
        pass


def start_out(plan: Plan, out: Path, console) -> tuple[list[RunSpec], int]:
    """A sweep's start in ``out``: runs/ made, plan.json written; returns the
    unfinished runs, grouped by topology (one fabric per topology; plan order
    kept within), and how many were there already (said when any)."""
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1))
    todo = [r for r in plan.runs if not is_done(out, r)]
    skipped = len(plan.runs) - len(todo)
    if skipped:
        console.print(f"  [dim]•[/] resuming: {skipped} of {len(plan.runs)} runs already in {out}")
    first: dict = {}
    for i, r in enumerate(todo):
        first.setdefault(r.topology, i)
    order = sorted(range(len(todo)), key=lambda i: (first[todo[i].topology], i))
    return [todo[i] for i in order], skipped


def progress_bar(console, progress: bool = True):
    """The sweep's progress bar: current run, done/total, elapsed and ETA."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=console, transient=True, disable=not progress)


def run_plan(plan: Plan, out: Path, *, run_fn: RunFn | None = None, fabric=None,
             prefix: str = "tbench", console=None, progress: bool = True) -> dict:
    """Run every unfinished run of ``plan`` into ``out``; returns
    ``{"done": n, "skipped": n (already there), "failed": {key: error}}``.
    A failed run is recorded and the sweep goes on; Ctrl-C stops it (the
    fabric is removed, finished runs stay). A ``fabric`` given is the
    caller's to close; one made here is closed here."""
    from rich.console import Console

    out = Path(out)
    console = console or Console(highlight=False, soft_wrap=True)
    failed_path = out / "failed.json"
    failed = {}
    todo, skipped = start_out(plan, out, console)
    own_fabric = fabric is None
    if fabric is None:
        fabric = _NoFabric() if run_fn is not None else \
            Fabric(prefix, say=lambda m: console.print(f"  [dim]•[/] {m}"))
    run_fn = run_fn or real_run(prefix)
    done = 0
    bar = progress_bar(console, progress)
    try:
        with bar:
            task = bar.add_task(plan.name, total=len(todo))
            for spec in todo:
                bar.update(task, description=spec.label())
                path = result_path(out, spec)
                t0 = time.monotonic()
                fabric.use(spec.topology)     # a fabric that cannot be built stops the sweep
                try:
                    fabric.prepare(spec)
                    run_fn(spec, path)
                    if not is_done(out, spec):
                        raise RuntimeError(f"the run left no results file at {path}")
                    done += 1
                    failed.pop(spec.key(), None)
                    bar.console.print(f"  [dim]•[/] {spec.label()}: {time.monotonic() - t0:.0f} s")
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                    failed[spec.key()] = {"run": spec.label(), "error": f"{type(exc).__name__}: {exc}"}
                    bar.console.print(f"  [red]failed[/] {spec.label()}: {exc}")
                    failed_path.write_text(json.dumps(failed, indent=1))
                bar.advance(task)
    finally:
        if own_fabric:
            fabric.close()
    if failed:
        failed_path.write_text(json.dumps(failed, indent=1))
    else:
        failed_path.unlink(missing_ok=True)
    return {"done": done, "skipped": skipped, "failed": failed}


def run_sweep(plan: Plan, out: Path, *, run_fn: RunFn | None = None, prefix: str = "tbench",
              console=None, progress: bool = True, cluster=None) -> tuple[Plan, dict]:
    """Run ``plan``, then, under its seed rule (experiments/sweep/seeds.py), one
    more seed at a time at the headline points whose main comparison is
    still wider than the rule's width, until none is or the cap is reached.
    One fabric throughout. Returns the plan as run (with the added seeds)
    and the report of run_plan, summed over the rounds. ``cluster``
    (experiments/sweep/cluster.py Cluster, --cluster) runs each round on its
    workers instead, each with its own fabric, removed at the end."""
    from rich.console import Console

    from experiments.sweep import seeds
    from experiments.sweep.kinds import load_rows

    console = console or Console(highlight=False, soft_wrap=True)
    plan = seeds.with_recorded(plan, out)
    if cluster is not None:
        fabric = cluster
    else:
        fabric = _NoFabric() if run_fn is not None else \
            Fabric(prefix, say=lambda m: console.print(f"  [dim]•[/] {m}"))
    total = {"done": 0, "skipped": 0, "failed": {}}
    try:
        while True:
            if cluster is not None:
                rep = cluster.run_plan(plan, out, console=console, progress=progress)
            else:
                rep = run_plan(plan, out, run_fn=run_fn, fabric=fabric, prefix=prefix,
                               console=console, progress=progress)
            total["done"] += rep["done"]
            total["skipped"] = total["skipped"] or rep["skipped"]   # later rounds: this round's runs
            total["failed"] = rep["failed"]
            if plan.seed_rule is None:
                return plan, total
            decisions = seeds.decide(plan, load_rows(plan, out, rep["failed"]))
            wider = seeds.extend(plan, decisions)
            seeds.write_record(out, wider, decisions)
            more = [d for d in decisions if d["status"] == "more"]
            if not more or len(wider.runs) == len(plan.runs):
                return plan, total
            rule = plan.seed_rule
            console.print(f"  [dim]•[/] seed rule: {len(more)} headline point(s) still wider than "
                          f"{rule.width:g} ({rule.metric}); adding seed {max(more[0]['seeds']) + 1} "
                          f"of at most {rule.cap}")
            plan = wider
    finally:
        fabric.close()
