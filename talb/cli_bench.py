"""`talb bench --preset NAME` / free sweeps: options and the call into
experiments/sweep (docs/experiments.md); the `bench` group itself is in talb/cli.py."""
from __future__ import annotations

import functools
import time
from pathlib import Path

import click
from rich.console import Console

from common.excerpt import shown
from talb.unwind import sigterm_unwinds

console = Console(highlight=False, soft_wrap=True)


def _list(kind):
    def parse(ctx, param, value):
        if value is None:
            return None
        items = [x.strip() for x in value.split(",") if x.strip()]
        if not items:
            raise click.BadParameter("a comma-separated list, got nothing")
        if kind is str:
            return items
        try:
            return [kind(x) for x in items]
        except ValueError:
            raise click.BadParameter(f"comma-separated numbers, got {shown(value)}") from None
    return parse


def _rates(ctx, param, value):
    if value is None:
        return None
    from netns_topology import parse_rate

    try:
        return [float(parse_rate(x.strip())) for x in value.split(",") if x.strip()]
    except Exception as exc:  # noqa: BLE001 - the parser's message, under the flag's name
        raise click.BadParameter(str(exc)) from None


def _seeds(ctx, param, value):
    if value is None:
        return None
    if "," in value:
        return _list(int)(ctx, param, value)
    try:
        n = int(value)
    except ValueError:
        raise click.BadParameter(f"a count (5 = seeds 1..5) or a list (1,2,7), got {shown(value)}") \
            from None
    if n < 1:
        raise click.BadParameter(f"at least 1, got {n}")
    return n


def _queueing(ctx, param, value):
    """``bands,fifo`` (every scheme under each) or ``talb=bands,*=fifo`` (per
    scheme, ``*`` the rest); checked by the plan (experiments/sweep/plan.py)."""
    if value is None:
        return None
    items = [x.strip() for x in value.split(",") if x.strip()]
    if not items:
        raise click.BadParameter("a comma-separated list, got nothing")
    if not any("=" in x for x in items):
        return items
    out: dict = {}
    for x in items:
        scheme, _, mode = x.rpartition("=")
        out.setdefault(scheme.strip() or "*", []).append(mode.strip())
    return out


def _presets():
    from experiments.sweep.plan import PRESETS

    return list(PRESETS)


def _plan_options() -> list:
    """What is swept: the preset, or a free sweep's schemes, loads, fabrics, models and traffic."""
    return [
    click.option("--preset", help="A prepared sweep: " + ", ".join(_presets())
                 + " (docs/experiments.md). Without it: a free sweep on quick's setup. "
                 "lb-classic (no training: background flows only, the load-balancing "
                 "literature's evaluation and which of its directions hold here) takes "
                 "about 13 h here (--dry-run prints the estimate); lb-classic-quick about 2 min."),
    click.option("--schemes", callback=_list(str), help="Schemes, comma-separated "
                 "[the preset's; all six for fig9/10/11].") ,
    click.option("--loads", callback=_list(float), help="Background loads, e.g. 0.2,0.5,0.8."),
    click.option("--topologies", callback=_list(str),
                 help="Topology files (or names under topologies/)."),
    click.option("--models", callback=_list(str), help="Model profiles, e.g. vgg19,resnet50."),
    click.option("--cdfs", callback=_list(str),
                 help="Background flow-size CDFs: websearch, datamining (lb-classic presets)."),
    click.option("--archs", callback=_list(str), help="ps, allreduce."),
    ]


def _seed_options() -> list:
    """How many seeds: a count or list, and the seed rule that adds them."""
    return [
    click.option("--seeds", callback=_seeds, help="Seeds: a count (5 = 1..5) or a list."),
    click.option("--seed-cap", type=int, help="Seed rule: the most seeds a headline point "
                 "runs [10]. The presets fig9/10/11 and fig10-fifo run --seeds (a count) "
                 "everywhere, then one more seed at a time at their headline points until "
                 "the paired 95% interval of TaLB/baseline is narrower than --seed-width "
                 "for every paper baseline, or this many seeds have run; lb-classic at the "
                 "loads its directions are tested at (light and heavy), until every "
                 "balancer/ECMP ratio of the all-flow mean normalised FCT is."),
    click.option("--seed-width", type=float, help="Seed rule: the width of the ratio's "
                 "interval to reach [0.2: the ±10% equivalence band]."),
    click.option("--fixed-seeds", is_flag=True, help="No seed rule: exactly --seeds."),
    ]


def _arm_options() -> list:
    """The arms every point runs under: link rate, queues, connections, placement, minimum RTO, scheduling, clients, regime, agent."""
    return [
    click.option("--target-rates", callback=_rates, help="Target link rates, e.g. 10gbit,100gbit."),
    click.option("--queueing", callback=_queueing, metavar="LIST",
                 help="How the switch ports queue, per run: bands (the topology's queue, its "
                      "priority bands), fifo (one FIFO per port, the same bytes); a list runs "
                      "every scheme under each (bands,fifo), SCHEME=Q names one scheme's "
                      "(talb=bands,*=fifo: TaLB with bands, the rest FIFO) [bands; "
                      "fig10-factorial: bands,fifo; fig10-paper: talb=bands,*=fifo]."),
    click.option("--connections", callback=_list(str), metavar="LIST",
                 help="TCP connections per worker-server pair, per run: pair (one, as "
                      "ps-lite), class (one per priority class), pool:N (N pre-opened, one "
                      "tensor per idle connection: the paper's flows, sec. V-A); a list runs "
                      "every scheme under each, paired by seed (pair,pool:8) [pair] "
                      "(docs/workload.md, Connections)."),
    click.option("--placement", callback=_list(str), metavar="LIST",
                 help="Where the workers and servers sit, per run: spread (hosts leaf by "
                      "leaf in turn), remote (no worker on a server's leaf), or "
                      "WORKERS/SERVERS hosts joined by + (h0+h1+h4+h5/h2); a list runs every "
                      "point under each (spread,remote). The background comes from the "
                      "workers under spread, from every host otherwise [spread] "
                      "(docs/workload.md, Placement)."),
    click.option("--rto-min", "rto_min", callback=_list(str), metavar="LIST",
                 help="The hosts' minimum TCP RTO, per run: a duration (10ms) or kernel (no "
                      "route metric: the kernel's 200 ms); a list runs every scheme under "
                      "each, paired by seed (10ms,kernel) [the topology's] "
                      "(docs/experiments.md, Placement and minimum RTO)."),
    click.option("--schedulers", callback=_list(str), metavar="LIST",
                 help="How our nodes cut and order gradients, per run: bytescheduler, "
                      "usbyte (US-Byte's unequal blocks), wfbp (each layer whole as its "
                      "backward ends), fifo (ByteScheduler's partitions, no priority); a "
                      "list runs every scheme under each, paired by seed "
                      "(bytescheduler,usbyte,wfbp) [bytescheduler] (docs/workload.md, "
                      "Schedulers)."),
    click.option("--comms", callback=_list(str), metavar="LIST",
                 help="PS runs: how each layer is synchronised, per run: ps, sfb (fully "
                      "connected layers by sufficient factor broadcasting), hybrid "
                      "(Poseidon's cost model per layer); a list runs every scheme under "
                      "each (ps,hybrid) [ps] (docs/workload.md, Hybrid communication)."),
    click.option("--fusions", callback=_list(str), metavar="LIST",
                 help="All-reduce runs: tensor fusion, per run: none, adaptive (OSF's "
                      "model), constant:SIZE; a list runs every scheme under each "
                      "(adaptive,constant:64mb) [none] (docs/workload.md, Tensor fusion)."),
    click.option("--clients", callback=_list(str), metavar="LIST",
                 help="What makes the training traffic, per run: talb (our nodes, tagged "
                      "tensors), mpi (a real Open MPI all-reduce job over the model's "
                      "tensors, `talb run --client mpi`), torch (a PyTorch DDP job, `talb run "
                      "--client torch`); a list runs every point under "
                      "each [talb; --preset mpi and mpi-quick: mpi; torch and torch-quick: "
                      "torch] (docs/workload.md, Real MPI jobs, PyTorch DDP jobs)."),
    click.option("--regime", "regimes", callback=_list(str), metavar="LIST",
                 help="The regime, per run: deep (the topology's buffers, loss only, its "
                      "tcp_cc), scaled (the paper's 512 KB at 100 Gbit/s on the run's time "
                      "scale), deep-ecn and scaled-ecn (ECN marking at the switches, DCTCP "
                      "at the hosts: dctcp-bpf); a list runs every point under each [deep; "
                      "the -regime presets: deep,scaled,scaled-ecn] (docs/experiments.md, "
                      "Regime)."),
    click.option("--agents", callback=_list(str),
                 help="Named agent settings (experiments/sweep/plan.py AGENT_SETTINGS)."),
    ]


def _run_shape_options() -> list:
    """Each run's size."""
    return [
    click.option("--workers", type=click.IntRange(1, 64), help="Workers per run."),
    click.option("--servers", type=click.IntRange(1, 64), help="Parameter servers per run."),
    click.option("--iterations", type=click.IntRange(1, 1000), help="Iterations per run."),
    # The data path implements every scheme of the registry, so nothing is left to
    # skip: kept, hidden and without effect, for command lines written before.
    click.option("--skip-missing", is_flag=True, hidden=True,
                 help="No effect (every scheme is implemented); kept for old command lines."),
    ]


def _output_options() -> list:
    """Where the results go and where the runs run; plan or report only."""
    return [
    click.option("--out", "out_dir", type=click.Path(file_okay=False),
                 help="Results directory [results/bench-<preset>-<UTC time>]; an existing "
                      "one resumes."),
    click.option("--prefix", "sweep_prefix", default="tbench", show_default=True,
                 help="Prefix of the sweep's own testbeds."),
    click.option("--cluster", metavar="tcp://HOST:8786",
                 help="Run the sweep's runs on a Dask distributed cluster: the scheduler's "
                      "address (`dask scheduler` on one machine; `dask worker ADDR "
                      "--nworkers 1 --nthreads 1 --resources testbed=1` as root on each "
                      "testbed machine, after `make setup`). Each worker builds and reuses "
                      "its own fabric, one run at a time; results come back here into --out "
                      "(resume works across local and cluster runs; runs.csv says which "
                      "machine made each run). Needs the extra `cluster` (make setup "
                      "installs it); this machine need not be a testbed "
                      "(docs/experiments.md, Sweeps on a cluster)."),
    click.option("--dry-run", is_flag=True, help="List the plan and exit."),
    click.option("--report-only", is_flag=True,
                 help="Rebuild CSV, plots and summary from --out without running."),
    ]


def sweep_options(f):
    """The sweep's options, in --help's order (each group in its own function)."""
    opts = [*_plan_options(), *_seed_options(), *_arm_options(), *_run_shape_options(),
            *_output_options()]
    for o in reversed(opts):
        f = o(f)
    return f


def sweep(*, preset, schemes, loads, topologies, models, archs, seeds, seed_cap, seed_width,
          fixed_seeds, target_rates, queueing, agents, workers, servers, iterations,
          out_dir, sweep_prefix, dry_run, report_only, cdfs=None, connections=None,
          placement=None, rto_min=None, cluster=None, clients=None, regimes=None, schedulers=None,
          comms=None, fusions=None, skip_missing=False) -> None:
    del skip_missing        # the hidden no-op flag (_run_shape_options)
    from common import paths
    from experiments.sweep import seeds as seedrule
    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.plan import PlanError
    from experiments.sweep.runner import is_done, run_sweep

    try:
        plan = build_plan(preset, schemes=schemes, loads=loads,
                          topologies=topologies, models=models, archs=archs, seeds=seeds,
                          target_rates=target_rates, queueing=queueing, connections=connections,
                          placement=placement, rto_min=rto_min, clients=clients,
                          regimes=regimes,
                          schedulers=schedulers, comms=comms, fusions=fusions,
                          agents=agents, workers=workers,
                          servers=servers, iterations=iterations, seed_cap=seed_cap,
                          seed_width=seed_width, fixed_seeds=fixed_seeds, cdfs=cdfs)
    except PlanError as exc:
        raise ValueError(str(exc)) from None
    out = Path(out_dir) if out_dir else paths.REPO_ROOT / "results" / \
        f"bench-{preset or 'sweep'}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    plan = seedrule.with_recorded(plan, out)       # seeds an earlier invocation added
    console.print(f"[bold]{plan.name}[/]: {plan.description}")
    queueings, conns = plan.counts("queueing"), plan.counts("connections")
    places, rtos = plan.counts("placement"), plan.counts("rto_min")
    console.print(f"  {len(plan.runs)} runs; schemes {plan.counts('scheme')}"
                  + (f"; queueing {queueings}" if set(queueings) != {"bands"} else "")
                  + (f"; connections {conns}" if set(conns) != {"pair"} else "")
                  + (f"; placement {places}" if set(places) != {"spread"} else "")
                  + (f"; schedulers {plan.counts('scheduler')}"
                     if set(plan.counts("scheduler")) != {"bytescheduler"} else "")
                  + (f"; comms {plan.counts('comm')}" if set(plan.counts("comm")) != {"ps"} else "")
                  + (f"; fusions {plan.counts('fusion')}"
                     if set(plan.counts("fusion")) != {None} else "")
                  + (f"; rto_min {rtos}" if set(rtos) != {None} else "")
                  + (f"; regime {plan.counts('regime')}"
                     if set(plan.counts("regime")) != {None} else "")
                  + f"; results in {out}")
    rule = plan.seed_rule
    if rule:
        pairs = ", ".join(f"{a}/{b}" for a, b in rule.pairs)
        console.print(f"  seed rule: {rule.first} seeds everywhere, then up to {rule.cap} at the "
                      f"headline points (load {', '.join(f'{x:g}' for x in rule.loads or ())}) "
                      f"until every ratio of {rule.metric} ({pairs}) has a paired 95% interval "
                      f"narrower than {rule.width:g}")
    if plan.figure == "lb_classic":
        from experiments.sweep.lbclassic import estimate_wall_s

        console.print(f"  estimated wall time here: {estimate_wall_s(plan) / 3600:.1f} h for all "
                      f"{len(plan.runs)} runs (windows, warm-up and fill, plus a measured "
                      f"overhead per run; a resumed sweep skips what it has)")
    if dry_run:
        for r in plan.runs:
            console.print(f"  {r.key()} {'done ' if is_done(out, r) else ''}{r.label()}")
        return
    t0 = time.monotonic()
    report = None
    if not report_only and cluster:
        plan, report = _on_cluster(cluster, plan, out, sweep_prefix)
    elif not report_only:
        from netns_topology.state import require_root

        require_root()
        sigterm_unwinds()
        plan, report = run_sweep(plan, out, prefix=sweep_prefix, console=console)
    res = finish(plan, out, report, wall_s=time.monotonic() - t0 if report else None)
    flagged = sum(r["status"] == "cpu_bound" for r in res["rows"])
    console.print(f"  done in {(time.monotonic() - t0) / 60:.1f} min; {flagged} CPU-bound runs "
                  f"excluded; {len((report or {}).get('failed') or {})} failed")
    for r in res.get("directions", []):     # lb-classic: the published directions
        console.print(f"  {r['direction'].claim} ({Path(r['topology']).stem}, {r['cdf']}, "
                      f"load {r['load'] if r['load'] is not None else '-'}): {r['verdict']}",
                      markup=False)
    for r in res["paper_vs_ours"] if "directions" not in res else []:
        if r["ours"] != "-":
            console.print(f"  {r['number']}: paper {r['paper']}, ours {r['ours']}: {r['verdict']}")
    console.print(f"  summary: {out / 'summary.md'}")


def _on_cluster(address: str, plan, out: Path, prefix: str):
    """run_sweep with every run on the Dask cluster at ``address``."""
    from experiments.sweep.runner import run_sweep

    try:
        from experiments.sweep.cluster import Cluster, connect
    except ImportError as exc:
        raise ValueError(f"--cluster {address}: needs Dask distributed ({exc}); install the "
                         f"extra with `make setup` or `pip install -e '.[cluster]'`") from None
    client = connect(address)      # before anything is written to --out
    try:
        sigterm_unwinds()
        console.print(f"  on the cluster at {address}: "
                      f"{len(client.scheduler_info().get('workers', {}))} worker(s)")
        return run_sweep(plan, out, prefix=prefix, console=console,
                         cluster=Cluster(client, prefix))
    finally:
        client.close()


def with_sweep(f):
    """Decorate the bench group's callback: the sweep options, and the sweep
    itself when no subcommand (datapath, agent) is given."""
    @sweep_options
    @click.pass_context
    @functools.wraps(f)
    def group(ctx, **opts):
        if ctx.invoked_subcommand is None:
            sweep(**opts)
    return group
