"""`talb run`: one training experiment (workload/experiment.py) with a
progress bar and a summary table; registered by talb/cli.py."""
from __future__ import annotations

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from common import paths
from common.excerpt import shown
from talb.unwind import sigterm_unwinds

console = Console(highlight=False, soft_wrap=True)
MAX_LAYER_ROWS = 8   # more layers: per-layer numbers are in the results file only


def _rate(ctx, param, value):
    if value is None:
        return None
    from netns_topology import parse_rate

    ctx.meta.setdefault("talb_raw", {})[param.name] = value   # as typed, for error messages
    try:
        return float(parse_rate(value))
    except Exception as exc:  # noqa: BLE001 - the parser's message, under the flag's name
        raise click.BadParameter(str(exc)) from None


def _size(ctx, param, value):
    from netns_topology import parse_size

    ctx.meta.setdefault("talb_raw", {})[param.name] = value
    try:
        return int(parse_size(value))
    except Exception as exc:  # noqa: BLE001
        raise click.BadParameter(str(exc)) from None


def _models() -> list[str]:
    from workload.models import MODELS

    return list(MODELS)


@click.command("run")
@click.option("--scheme", help="Load-balancing scheme for the run (ecmp, talb, ...) "
                               "[the fabric's current one].")
@click.option("--model", required=True, help="Model profile: " + ", ".join(_models()) + "; or "
              "'none': no training, background flows only (the lb-classic calibration, "
              "docs/experiments.md): every flow's FCT and its FCT normalised to the ideal.")
@click.option("--arch", type=click.Choice(["ps", "allreduce"]),
              help="Parameter server or ring all-reduce (required unless --model none or "
                   "--client mpi).")
@click.option("--workers", type=click.IntRange(1, 64),
              help="Worker count (required unless --model none).")
@click.option("--servers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Parameter servers (--arch ps).")
@click.option("--load", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="Background load: offered background bytes/s over the leaves' uplink capacity "
                   "(docs/workload.md); training traffic not counted (the summary prints the "
                   "measured total, training + background: \"offered uplink load\").")
@click.option("--background-cdf", type=click.Choice(["websearch", "datamining"]), default="websearch",
              show_default=True, help="Flow sizes of the background load.")
@click.option("--background-duration", "background_s", type=click.FloatRange(0, min_open=True),
              help="Seconds of background flows to plan [2x an estimate of training + 3 s]; "
                   "the run waits for the plan to end (docs/experiments.md, \"Pairing\"). "
                   "With --model none: the measured window, after a warm-up and followed by a "
                   "fill of max(2 s, a tenth of it) each [long enough for 500 short flows on "
                   "average, 20-150 s].")
@click.option("--background-size-scale", type=click.FloatRange(0, 1, min_open=True),
              help="Multiply background flow sizes by this [the tensors' byte scale; with "
                   "--model none 0.2 for websearch, 0.025 for datamining]. Larger flows, fewer "
                   "connections a second at the same load (docs/workload.md).")
@click.option("--queueing", metavar="bands|fifo",
              help="How the switch ports queue for the run: bands (the topology's queue, its "
                   "priority bands) or fifo (one FIFO per port holding the same bytes); put back "
                   "afterwards on a testbed that was up [as the fabric is now] "
                   "(docs/experiments.md, Queueing).")
@click.option("--connections", default="pair", show_default=True, metavar="pair|class|pool:N",
              help="TCP connections between a worker and a server (ring all-reduce: between "
                   "neighbours): pair, one (ps-lite, BytePS: a tensor waits behind its pair's "
                   "earlier ones); class, one per priority class (the switch band of the "
                   "tensor's layer), each with its own sending thread; pool:N (N 1..64), N "
                   "opened before training, each tensor on an idle one (all its bytes "
                   "acknowledged), waiting for one otherwise: every tensor a flow of its own, "
                   "the paper's simulation (sec. V-A). Both directions (docs/workload.md, "
                   "Connections).")
@click.option("--placement", default="spread", show_default=True,
              metavar="spread|remote|WORKERS/SERVERS",
              help="Where the workers and servers sit: spread, hosts taken leaf by leaf in turn "
                   "(h0 of each leaf, then h1, ...); remote, no worker on a server's leaf "
                   "(servers on the last leaf, workers filling the first leaves; ring "
                   "all-reduce: as spread); or the hosts, joined by +, workers before the slash "
                   "and servers after (h0+h1+h4+h5/h2; all-reduce: workers only). The "
                   "background load comes from the workers under spread, from every host "
                   "otherwise (docs/workload.md, Placement).")
@click.option("--rto-min", metavar="DURATION|kernel",
              help="The hosts' minimum TCP retransmission timeout for the run, e.g. 10ms (a "
                   "locked route metric on every host's route), or kernel (no metric: the "
                   "kernel's 200 ms); put back afterwards on a testbed that was up [as the "
                   "fabric is now: the topology's rto_min, or the kernel's].")
@click.option("--buffer", type=click.Choice(["deep", "scaled"]),
              help="The switch ports' buffers for the run: deep, the topology's queue; scaled, "
                   "the paper's 512 KB per port at 100 Gbit/s on the run's time scale, at each "
                   "port's rate, split over its bands, at least 4 full frames a band; put back "
                   "afterwards [as the fabric is now] (docs/experiments.md, Regime).")
@click.option("--ecn", type=click.Choice(["on", "off"]), callback=lambda _c, _p, v: None if v is None
              else v == "on",
              help="on: the switches mark CE where a port's band holds more than K (DCTCP's "
                   "C x RTT / 7 of the paper's fabric on the run's time scale, at least 2 "
                   "frames) and the hosts negotiate ECN; off: neither; put back afterwards [as "
                   "the fabric is now].")
@click.option("--tcp-cc", metavar="NAME",
              help="The hosts' TCP congestion control for the run: one the kernel offers "
                   "(net.ipv4.tcp_available_congestion_control), or dctcp-bpf, our DCTCP as a "
                   "BPF congestion control, registered for the run [the topology's tcp_cc].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random choice.")
@click.option("--iterations", type=click.IntRange(1, 100_000), default=5, show_default=True,
              help="Training iterations, warm-up included.")
@click.option("--warmup", type=click.IntRange(0, 100_000), default=1, show_default=True,
              help="Leading iterations left out of every statistic.")
@click.option("--topology", type=click.Path(dir_okay=False),
              help="No testbed up: build one from this file for the run and remove it after "
                   "[topologies/talb.yaml; with --model none topologies/lb-classic-sym.yaml].")
@click.option("--target-link-rate", "target_link_bps", default="10gbit", show_default=True, callback=_rate,
              help="Host link rate of the cluster being modelled.")
@click.option("--scaling", "scaling_mode", type=click.Choice(["bytes", "time", "both", "fit"]),
              default="bytes", show_default=True, help="How the target is scaled to the fabric "
              "(docs/workload.md, Scaling): bytes shrink, time stretches, or both; 'fit' picks "
              "the byte scale that keeps the 4-packet floor's inflation under 5%.")
@click.option("--gpu", default="V100", show_default=True, help="GPU of the target cluster.")
@click.option("--gpu-speed", type=float, default=1.0, show_default=True,
              help="Compute speed factor over the GPU's table value.")
@click.option("--batch-size", type=click.IntRange(1), help="Per-worker batch [the model's, as the paper].")
@click.option("--partition-size", "partition_bytes", default="4mb", show_default=True, callback=_size,
              help="ByteScheduler partition size (target scale).")
@click.option("--credit", "credit_bytes", default="16mb", show_default=True, callback=_size,
              help="ByteScheduler credit: bytes in flight per worker (target scale).")
@click.option("--scheduler", type=click.Choice(["bytescheduler", "usbyte", "wfbp", "fifo"]),
              default="bytescheduler", show_default=True,
              help="How gradients are cut and ordered: bytescheduler (equal --partition-size "
                   "partitions, front layer first, --credit in flight); usbyte (US-Byte, TPDS "
                   "2023: unequal blocks of --partition-size units and their order from the "
                   "model profile and --target-link-rate); wfbp (wait-free back-propagation: "
                   "each layer whole as its backward step ends, no priority, no credit); fifo "
                   "(ByteScheduler's partitions and credit, first come first served) "
                   "(docs/workload.md, Schedulers).")
@click.option("--fusion", metavar="adaptive|constant:SIZE",
              help="Tensor fusion for --arch allreduce: the scheduler's messages, in the order "
                   "they are ready, share a buffer of SIZE bytes at target scale, as many as fit "
                   "(constant:64mb, about Horovod's default), or the size OSF's model "
                   "(WWW 2022) finds fastest (adaptive) [no fusion] (docs/workload.md, Tensor "
                   "fusion).")
@click.option("--comm", type=click.Choice(["ps", "sfb", "hybrid"]), default="ps",
              show_default=True,
              help="How --arch ps synchronises each layer: ps (every layer through the "
                   "servers); sfb (every fully connected layer by sufficient factor "
                   "broadcasting: each worker sends its batch's factors, K(M+N) values, to every "
                   "other worker); hybrid (per layer the cheaper by Poseidon's cost model, ATC "
                   "2017) (docs/workload.md, Hybrid communication).")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Results file [runs/<time>-<model>-<arch>-<scheme>-load<L>-seed<K>.json].")
@click.option("--port", "base_port", type=int, default=7100, show_default=True,
              help="First TCP port the nodes listen on.")
@click.option("--timeout", "timeout_s", type=float, default=900.0, show_default=True,
              help="Seconds before the run is abandoned.")
@click.option("--prefix", default=paths.DEFAULT_PREFIX, show_default=True,
              help="Testbed prefix to run on (or to build).")
@click.option("--fault", metavar="KIND@AT[:K=V,...]",
              help="Inject a fault AT seconds after training starts and undo it after for=: "
                   "uplink-down (leaf=, spine=, agent=run|stop), spine-down (spine=, agent=), "
                   "agent-kill, scheme (to=), "
                   "table-full (limit=), forged-options (from=, to=, rate=), none (a control); "
                   "e.g. uplink-down@2s:for=1s. Reports recovery time and delivery "
                   "(docs/faults.md).")
@click.option("--client", type=click.Choice(["talb", "mpi", "torch"]), default="talb",
              show_default=True,
              help="What makes the training traffic: talb, our own nodes (tagged tensors, "
                   "ByteScheduler); mpi, a real Open MPI job (mpirun, btl tcp, one rank per "
                   "host placed as --placement, --workers ranks) running an MPI_Allreduce loop "
                   "over the model's tensors, each result checked (docs/workload.md, \"Real MPI "
                   "jobs\"; `make testbed` installs Open MPI and mpi4py); torch, a PyTorch "
                   "DistributedDataParallel job (gloo, one rank per host, --model resnet50 or "
                   "gpt2-small built in torch.nn), its parameters checked against a "
                   "single-process run (docs/workload.md, \"PyTorch DDP jobs\"; needs "
                   "talb[torch]).")
@click.option("--mpi-tag", type=click.Choice(["auto", "on", "off"]), default="auto",
              show_default=True,
              help="--client mpi: tag the MPI data connections (the btl's port range) "
                   "transparently so TaLB sees tensors; auto: on under scheme talb, off under "
                   "the others (the results say why). --client torch: the same for the job's "
                   "cgroup (gloo's connections).")
@click.option("--mpi-pattern", type=click.Choice(["allreduce", "ps"]), default="allreduce",
              show_default=True,
              help="--client mpi: allreduce, one MPI_Allreduce per tensor across --workers "
                   "ranks; ps, a parameter server as rank 0 (on the host --placement gives the "
                   "server) receiving every worker's MPI_Send and sending the sum back, "
                   "--workers worker ranks.")
@click.option("--mpi-priority", metavar="RULE",
              help="--client mpi or torch with tagging: the transparent tagger's priority rule "
                   "[its default].")
@click.option("--mpi-ports", metavar="LO-HI", default="7600-7663", show_default=True,
              help="--client mpi: the ports the ranks' TCP btl listens on (btl_tcp_port_min_v4 "
                   "and _range_v4): the MPI data connections have one end in it, the "
                   "out-of-band traffic none.")
def run_cmd(**opts):
    """Run one distributed-training experiment on the fabric and write its results.

    Workers (and servers) run as processes in the testbed's hosts and
    exchange tagged tensors over TCP, scheduled ByteScheduler-style; the
    summary shows tensor FCTs (short/long at target scale), trailing
    tensors, iteration time and samples/s, and the offered uplink load
    (training + background bytes to other leaves over the busiest leaf's
    uplinks, past saturation at 1.0 or more); the results file holds every
    parameter and every tensor. Example:

        sudo talb run --scheme talb --model vgg19 --arch ps --workers 4 --load 0 --seed 1
        sudo talb run --model threelayer --arch ps --workers 3 --fault spine-down@3s:for=1s

    --model none: no training, Poisson background flows only (--load,
    --background-cdf, --background-duration, --background-size-scale) from
    every host to hosts on other leaves, after an idle-fabric probe. Per
    class (short <= 100 KB, long >= 1 MB at the CDF's scale, all): mean and
    p99 of the FCT and of the FCT normalised to the ideal, 8 x size / host
    rate + the idle fabric's base latency (docs/experiments.md, lb-classic).
    The load is over the capacity traffic spread evenly over the leaves can
    use. Training options (--arch, --workers, --iterations, --fault, ...)
    are refused. Example:

    \b
        sudo talb run --model none --scheme drill --load 0.8 --background-cdf websearch
    """
    from workload.experiment import RunConfig, RunError, run

    sigterm_unwinds()
    opts["mpi_port_min"], opts["mpi_port_range"] = _port_range(opts.pop("mpi_ports"))
    if opts["model"] == "none":
        for name, flag in (("client", "--client"), ("mpi_tag", "--mpi-tag")):
            if click.get_current_context().get_parameter_source(name) == \
                    click.core.ParameterSource.COMMANDLINE:
                raise ValueError(f"{flag}: --model none runs background flows only, no "
                                 f"training client; drop {flag}, got {shown(opts[name])}")
        for name in ("client", "mpi_tag", "mpi_priority", "mpi_port_min", "mpi_port_range",
                     "mpi_pattern"):
            opts.pop(name)
        return _run_background_only(opts)
    if opts["client"] != "talb" and opts["comm"] != "ps":
        raise ValueError(f"--comm: our own nodes' option (--client talb), got {shown(opts['comm'])}")
    if opts["client"] != "talb" and opts["fusion"] is not None:
        raise ValueError(f"--fusion: our own nodes' option (--client talb), got {shown(opts['fusion'])}")
    if opts["client"] != "talb" and opts["scheduler"] != "bytescheduler":
        raise ValueError(f"--scheduler: our own nodes' option (--client talb); a {opts['client']} "
                         f"job sends as its library does, got {shown(opts['scheduler'])}")
    if opts["client"] == "mpi":
        return _run_mpi(opts)
    if opts["client"] == "torch":
        return _run_torch(opts)
    for name, flag in (("mpi_tag", "--mpi-tag"), ("mpi_priority", "--mpi-priority"),
                       ("mpi_ports", "--mpi-ports"), ("mpi_pattern", "--mpi-pattern")):
        if click.get_current_context().get_parameter_source(name) == \
                click.core.ParameterSource.COMMANDLINE:
            raise ValueError(f"{flag}: an option of --client mpi; add --client mpi or drop "
                             f"{flag}")
    for flag, name in (("--arch", "arch"), ("--workers", "workers")):
        if opts[name] is None:
            raise click.UsageError(f"Missing option '{flag}' (every --model but 'none' trains).")
    cfg = RunConfig(**opts)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(f"{cfg.model} {cfg.arch} x{cfg.workers}", total=cfg.iterations * cfg.workers)

        def on_event(ev):
            if ev.get("ev") == "iter" and ev["it"] > 0 or ev.get("ev") == "end":
                bar.advance(task)

        try:
            results = run(cfg, on_event=on_event,
                          say=lambda m: bar.console.print(f"  [dim]•[/] {m}"))
        except RunError as exc:
            raise ValueError(f"run failed: {exc}") from None   # talb's one red error line
    print_summary(results)


def _port_range(text: str) -> tuple[int, int]:
    """--mpi-ports LO-HI -> (LO, number of ports); ValueError naming the flag."""
    lo, dash, hi = str(text).partition("-")
    try:
        lo_i, hi_i = int(lo), int(hi)
    except ValueError:
        raise ValueError(f"--mpi-ports: a port range LO-HI (e.g. 7600-7663), got {shown(text)}") \
            from None
    if not dash or not 1024 <= lo_i <= hi_i <= 65535:
        raise ValueError(f"--mpi-ports: a port range LO-HI with 1024 <= LO <= HI <= 65535, "
                         f"got {shown(text)}")
    return lo_i, hi_i - lo_i + 1


def _run_mpi(opts: dict) -> None:
    """--client mpi: a real Open MPI job as the training traffic."""
    from workload.experiment import RunConfig, RunError
    from workload.mpi_run import run

    if opts["workers"] is None:
        raise click.UsageError("Missing option '--workers' (--client mpi: the number of ranks, "
                               "one per host).")
    opts["arch"] = "ps" if opts["mpi_pattern"] == "ps" else "allreduce"
    cfg = RunConfig(**opts)
    with console.status(f"MPI job: {cfg.model} x{cfg.workers} ranks"):
        try:
            results = run(cfg, say=lambda m: console.print(f"  [dim]•[/] {m}"))
        except RunError as exc:
            raise ValueError(f"run failed: {exc}") from None
    print_mpi_summary(results)


def _run_torch(opts: dict) -> None:
    """--client torch: a PyTorch DDP job as the training traffic."""
    from workload.experiment import RunConfig, RunError
    from workload.torch_run import run

    if opts["workers"] is None:
        raise click.UsageError("Missing option '--workers' (--client torch: the number of "
                               "ranks, one per host).")
    ctx = click.get_current_context()
    for name, flag in (("mpi_ports", "--mpi-ports"), ("mpi_pattern", "--mpi-pattern")):
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
            raise ValueError(f"{flag}: an option of --client mpi; --client torch picks gloo's "
                             f"connections by the job's cgroup")
    opts["arch"] = "allreduce"
    cfg = RunConfig(**opts)
    with console.status(f"PyTorch DDP job: {cfg.model} x{cfg.workers} ranks"):
        try:
            results = run(cfg, say=lambda m: console.print(f"  [dim]•[/] {m}"))
        except RunError as exc:
            raise ValueError(f"run failed: {exc}") from None
    print_torch_summary(results)


def print_torch_summary(r: dict) -> None:
    """The summary of a --client torch run."""
    cfg, t, s = r["config"], r["torch"], r["summary"]
    schemes = {c["scheme"] for c in r["fabric"]["switch_config"].values()}
    console.print(f"[bold]{cfg['model']}[/] PyTorch DDP (gloo) x{t['ranks']} ranks "
                  f"({', '.join(t['hosts'])}), scheme {', '.join(sorted(schemes))}, load "
                  f"{cfg['load']:g}, seed {cfg['seed']}")
    tg = t["tagging"]
    console.print(f"  {t['model']['params']:,} parameters in {t['model']['tensors']} tensors; "
                  f"{t['buckets_per_iteration']} buckets of <= {t['bucket_cap_mb']:.3g} MiB, "
                  f"{t['bytes_per_iteration']:,} B an iteration; tagging "
                  + ("on (cgroup " + t["cgroup"] + "), rule " + str(tg["rule"]) if tg["on"]
                     else f"off ({tg.get('why')})"))
    sp = s["speed"]
    console.print(f"  iterations measured {sp['iterations']}, iteration {_ms(sp['iteration_time_s'])} "
                  f"ms" + (f", [bold]{sp['samples_per_s']:.1f} samples/s[/] at target scale"
                           if sp["samples_per_s"] else "")
                  + f"; compute emulated {t['compute']['emulated_s_per_iteration'] * 1e3:.0f} ms "
                    f"an iteration + real arithmetic; ranks' CPU "
                  + ", ".join(f"{x:.2f}" for x in t["rank_cpu_s"]) + " s")
    ref = t["reference"]
    console.print("  parameters " + (f"identical on every rank and equal to the single-process "
                                     f"run (max |diff| {ref['max_abs_diff']:.2g})"
                                     if t["correct"] else
                                     "[bold red]WRONG: " + "; ".join(t["errors"]) + "[/]"))
    tcp = s["tcp"]["total"]
    console.print(f"  TCP: {tcp['retrans_segs']} retransmitted of {tcp['out_segs']} segments, "
                  f"{tcp['reordering']} reordering events")
    _print_uplink_spread(s)
    _print_cpu_guard(s)
    console.print(f"  results: {r['path']}")


def print_mpi_summary(r: dict) -> None:
    """The summary of a --client mpi run."""
    cfg, m, s = r["config"], r["mpi"], r["summary"]
    schemes = {c["scheme"] for c in r["fabric"]["switch_config"].values()}
    what = "parameter server" if m.get("pattern") == "ps" else "all-reduce"
    console.print(f"[bold]{cfg['model']}[/] MPI {what} x{m['ranks']} ranks "
                  f"({', '.join(m['hosts'])}), scheme {', '.join(sorted(schemes))}, load "
                  f"{cfg['load']:g}, seed {cfg['seed']}")
    tg = m["tagging"]
    console.print(f"  {m['messages_per_iteration']} messages an iteration, "
                  f"{m['bytes_per_iteration']:,} B (largest {max(m['message_bytes']):,} B); "
                  f"btl ports {m['port_range'][0]}-{m['port_range'][1]}; tagging "
                  + ("on, rule " + str(tg["rule"]) if tg["on"] else f"off ({tg.get('why')})"))
    sp = s["speed"]
    console.print(f"  iterations measured {sp['iterations']}, iteration {_ms(sp['iteration_time_s'])} "
                  f"ms (all-reduces {_ms(m['comm_s_mean'])} ms)"
                  + (f", [bold]{sp['samples_per_s']:.1f} samples/s[/] at target scale"
                     if sp["samples_per_s"] else ""))
    console.print("  results " + ("correct" if m["correct"] else
                                  "[bold red]WRONG: " + "; ".join(m["errors"][:3]) + "[/]"))
    tcp = s["tcp"]["total"]
    console.print(f"  TCP: {tcp['retrans_segs']} retransmitted of {tcp['out_segs']} segments, "
                  f"{tcp['reordering']} reordering events")
    _print_uplink_spread(s)
    _print_cpu_guard(s)
    console.print(f"  results: {r['path']}")


#: options that only mean something for a training run: refused with --model none
TRAINING_ONLY = {"arch": "--arch", "workers": "--workers", "servers": "--servers",
                 "iterations": "--iterations", "warmup": "--warmup",
                 "target_link_bps": "--target-link-rate", "scaling_mode": "--scaling",
                 "gpu": "--gpu", "gpu_speed": "--gpu-speed", "batch_size": "--batch-size",
                 "partition_bytes": "--partition-size", "credit_bytes": "--credit",
                 "base_port": "--port", "timeout_s": "--timeout", "fault": "--fault",
                 "connections": "--connections", "placement": "--placement",
                 "buffer": "--buffer", "ecn": "--ecn", "tcp_cc": "--tcp-cc",
                 "scheduler": "--scheduler", "fusion": "--fusion", "comm": "--comm"}


def _run_background_only(opts: dict) -> None:
    """--model none: refuse the training options given, run, print the summary."""
    from click.core import ParameterSource

    from workload import background_only
    from workload.experiment import RunConfig

    ctx = click.get_current_context()
    raw = ctx.meta.get("talb_raw", {})
    if ctx.get_parameter_source("queueing") == ParameterSource.COMMANDLINE:
        raise ValueError(f"--queueing: --model none runs on the topology's own queues (the "
                         f"lb-classic fabrics: one FIFO per port); drop --queueing, got "
                         f"{opts['queueing']!r}")
    for name, flag in TRAINING_ONLY.items():
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE:
            value = raw.get(name, opts[name])
            raise ValueError(f"{flag}: --model none runs background flows only, no training; "
                             f"drop {flag}, got {shown(value)}")
    keep = ("model", "scheme", "load", "seed", "prefix", "topology", "out", "background_cdf",
            "background_s", "background_size_scale", "rto_min")
    cfg = RunConfig(**{k: opts[k] for k in keep}, arch="none", workers=0, servers=0,
                    iterations=0, warmup=0, target_link_bps=0.0, scaling_mode="none")
    background_only.validate(cfg)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(f"background {cfg.background_cdf} load {cfg.load:g}", total=100)

        def on_progress(elapsed, total):
            bar.update(task, completed=100 * elapsed / total if total else 100)

        try:
            results = background_only.run(cfg, say=lambda m: bar.console.print(f"  [dim]•[/] {m}"),
                                          on_progress=on_progress)
        except background_only.RunError as exc:
            raise ValueError(f"run failed: {exc}") from None
    print_background_summary(results)


def print_background_summary(r: dict) -> None:
    """The summary of a --model none run."""
    s, cfg = r["summary"], r["config"]
    bo, ld = r["background_only"], r["load"]
    bg = s["background"]
    schemes = {c["scheme"] for c in r["fabric"]["switch_config"].values()}
    console.print(f"[bold]background only[/] {cfg['background_cdf']} (sizes x{bo['size_scale']:g}), "
                  f"scheme {', '.join(sorted(schemes))}, load {cfg['load']:g}, seed {cfg['seed']}")
    console.print(f"  window {bo['window_s']:g} s (after {bo['warmup_s']:g} s warm-up, "
                  f"{bo['fill_s']:g} s fill); ideal = 8 x size / host rate + base latency "
                  f"{bo['probe']['base_s'] * 1e3:.2f} ms (idle fabric, {bo['probe']['n']} probes)")
    t = Table(title="window's flows: FCT (ms) and FCT / ideal", title_justify="left")
    for col in ("class", "flows", "done", "censored", "FCT mean", "FCT p99", "norm. mean",
                "norm. p99"):
        t.add_column(col, justify="left" if col == "class" else "right")
    for cls in ("short", "medium", "long", "all"):
        b = bg[cls]
        if b["flows"]:
            t.add_row(cls, str(b["flows"]), str(b["done"]), str(b["censored"] + b["failed"]),
                      _ms(b["fct_mean_s"]), _ms(b["fct_p99_s"]),
                      f"{b['nfct_mean']:.2f}" if b["nfct_mean"] is not None else "-",
                      f"{b['nfct_p99']:.2f}" if b["nfct_p99"] is not None else "-")
    console.print(t)
    dl = ld.get("delivered_wire")
    console.print(f"  load: offered {ld['offered']:g} of {ld['capacity_bps'] / 1e6:g} Mbit/s, "
                  f"realised in the window {ld['offered_realised']:.3f}, delivered on the "
                  f"uplinks {'-' if dl is None else f'{dl:.3f}'} ({ld['flows_per_s']:.1f} flows/s)")
    tcp = s["tcp"]["total"]
    rto = r["fabric"].get("rto_min_ms")
    console.print(f"  TCP: {tcp['retrans_segs']} retransmitted of {tcp['out_segs']} segments, "
                  f"{tcp['reordering']} reordering events, {tcp.get('timeouts', 0)} timeouts "
                  f"(minimum RTO {_rto(rto)})")
    _print_uplink_spread(s)
    _print_cpu_guard(s)
    console.print(f"  results: {r['path']}")


def _rto(ms) -> str:
    """The hosts' minimum RTO in force (fabric.rto_min_ms)."""
    return f"{ms} ms" if ms is not None else "the kernel's 200 ms"


def _ms(v) -> str:
    return f"{v * 1e3:.1f}" if v is not None else "-"


def _print_uplink_spread(s: dict) -> None:
    """How evenly each leaf's uplinks carried the run (both summaries)."""
    if s["uplinks"]:
        console.print("  uplink spread (max-min)/mean: "
                      + ", ".join(f"{k} {v['spread']:.2f}" for k, v in s["uplinks"]["leaves"].items()
                                  if v["spread"] is not None))


def offered_load_line(ol: dict | None) -> str | None:
    """The results' ``summary.offered_load`` in one line: the busiest leaf's
    offered uplink load (training + background bytes to other leaves over
    its uplinks' capacity in the training span), what its uplinks' queues
    sent on and dropped; None without the block (a results file from before
    it)."""
    from workload.measure import OFFERED_SATURATION

    if not ol or ol.get("max_total") is None:
        return None
    leaf = ol["max_leaf"]
    b = ol["leaves"][leaf]
    others = ", ".join(f"{k} {v['total']:.2f}" for k, v in ol["leaves"].items()
                       if k != leaf and v["total"] is not None)
    line = (f"offered uplink load: {b['training']:.2f} training + {b['background']:.2f} "
            f"background = {b['total']:.2f} on {leaf} (max" + (f"; {others}" if others else "")
            + ")")
    if b.get("sent") is not None:
        line += f"; its uplinks sent {b['sent']:.2f} and dropped {b['leaf_up_drops']} packets"
    if b["total"] >= OFFERED_SATURATION:
        line += " [bold red]past saturation[/]"
    return line


def _print_cpu_guard(s: dict) -> None:
    """The CPU's mean load and whether the run was CPU-bound (both summaries)."""
    g = s["cpu_guard"]
    cpu = f"CPU {g['cpu_busy_mean']:.0%} busy on average" if g["cpu_busy_mean"] is not None else "CPU -"
    if g["flagged"]:
        console.print(f"  [bold red]CPU-bound run:[/] {g['reason']} ({cpu})")
    else:
        console.print(f"  {cpu}; not CPU-bound ({g['reason']})")


def _print_osf(s: dict) -> None:
    """OSF's modelled iteration beside the measured one (workload/osf.py)."""
    o = s.get("osf")
    if not o:
        return
    meas = o["measured_iteration_s"]
    console.print(f"  OSF model: iteration {o['predicted_iteration_s'] * 1e3:.1f} ms at target scale, "
                  + (f"measured {meas * 1e3:.1f} ms: error {o['error']:+.1%}" if meas
                     else "nothing measured"))


def print_summary(r: dict) -> None:
    s = r["summary"]
    sc = r["scaling"]
    cfg = r["config"]
    schemes = {c["scheme"] for c in r["fabric"]["switch_config"].values()} or {"(kernel bridge)"}
    console.print(f"[bold]{cfg['model']}[/] {cfg['arch']} x{cfg['workers']}"
                  + (f":{cfg['servers']}" if cfg["arch"] == "ps" else "")
                  + f", scheme {', '.join(sorted(schemes))}, load {cfg['load']:g}, seed {cfg['seed']}"
                  + f", queueing {(r['fabric'].get('queueing') or {}).get('mode', 'bands')}"
                  + f", connections {cfg.get('connections', 'pair')}"
                  + f", scheduler {cfg.get('scheduler', 'bytescheduler')}")
    reg = r["fabric"].get("regime") or {}
    if reg.get("buffer", "deep") != "deep" or reg.get("ecn") or cfg.get("tcp_cc"):
        ks = sorted({p["k"] for ps in reg["ports"].values() for p in ps.values() if p.get("k")})
        console.print(f"  regime: buffers {reg['buffer']}, ECN "
                      f"{'on (K ' + ', '.join(map(str, ks)) + ' B)' if reg.get('ecn') else 'off'}, "
                      f"tcp_cc {reg.get('tcp_cc')}")
    sch = r.get("scheduler") or {}
    if sch.get("blocks"):
        sizes = [b[1] for b in sch["blocks"]]
        console.print(f"  {sch['name']}: {len(sizes)} blocks of {min(sizes):,}-{max(sizes):,} B at "
                      f"target, first layers in order {[b[0] for b in sch['blocks'][:8]]}"
                      + (f"; model iteration {sch['model']['iteration_s'] * 1e3:.1f} ms"
                         if sch.get("model") else ""))
    cm = sch.get("comm")
    if cm:
        console.print(f"  comm {cm['mode']}: by SFB " + (", ".join(cm["sfb_layers"]) or "no layer")
                      + "; the rest through the servers")
    fu = sch.get("fusion")
    if fu:
        size = fu["buffer_bytes"]
        console.print(f"  fusion {fu['mode']}: buffer "
                      + (f"{size:,} B" if size else "none (OSF's model: no fusion is fastest)")
                      + f" at target, {fu['buffers']} buffers an iteration")
    pl, ld = r["placement"], r["load"]
    rto = r["fabric"].get("rto_min_ms")
    console.print(f"  placement {pl.get('mode', 'spread')}: workers {', '.join(pl['workers'])}"
                  + (f", servers {', '.join(pl['servers'])}" if pl["servers"] else "")
                  + (f"; background from {ld['senders_rule']}" if ld.get("senders_rule") else "")
                  + f"; hosts' minimum RTO {_rto(rto)}")
    console.print(f"  scaling {sc['mode']}: target {sc['target_link_bps'] / 1e9:g} Gbit/s -> testbed "
                  f"{sc['testbed_link_bps'] / 1e6:g} Mbit/s, bytes x{sc['byte_scale']:.4g}, "
                  f"time x{sc['time_scale']:.4g}; model {r['model']['target_bytes']:,} B at target, "
                  f"{r['model']['testbed_bytes']:,} B on the testbed in {r['model']['partitions']} "
                  f"partitions" + (f" ({sc['floored_tensors']} raised to {sc['min_tensor_bytes']} B)"
                                   if sc.get("floored_tensors") else ""))
    t = Table(title="tensor FCT (ms, warm-up excluded): from the hand-off to the socket; "
                    "network FCT from the first packet on the wire; the socket buffer's wait "
                    "between them", title_justify="left")
    for col in ("class", "n", "censored", "mean", "p99", "max", "net mean", "net p99",
                "sock buf mean", "no wire times"):
        t.add_column(col, justify="left" if col == "class" else "right")
    rows = [*((c, s["tensors"]["by_class"][c]) for c in ("short", "medium", "long", "all")),
            ("trailing", s["tensors"]["trailing"]),
            *((f"layer {k}", v) for k, v in s["tensors"]["by_layer"].items()
              if len(s["tensors"]["by_layer"]) <= MAX_LAYER_ROWS)]
    for name, b in rows:
        if b["n"] or b["censored"]:
            net, buf = b.get("netfct") or {}, b.get("sendbuf_wait") or {}
            t.add_row(name, str(b["n"]), str(b["censored"]), _ms(b["mean_s"]), _ms(b["p99_s"]),
                      _ms(b["max_s"]), _ms(net.get("mean_s")), _ms(net.get("p99_s")),
                      _ms(buf.get("mean_s")), str(b.get("wire_missing", "-")))
    console.print(t)
    sp = s["speed"]
    console.print(f"  iterations measured {sp['iterations']}, iteration {_ms(sp['iteration_time_s'])} ms "
                  f"on the testbed ({_ms(sp['target_iteration_time_s'])} ms at target), "
                  + (f"[bold]{sp['samples_per_s']:.1f} samples/s[/] at target scale"
                     if sp["samples_per_s"] else "no complete iteration"))
    tcp = s["tcp"]["total"]
    console.print(f"  TCP: {tcp['retrans_segs']} retransmitted of {tcp['out_segs']} segments, "
                  f"{tcp['reordering']} reordering events")
    _print_uplink_spread(s)
    offered = offered_load_line(s.get("offered_load"))
    if offered:
        console.print("  " + offered)
    bg = s.get("background")
    if bg:
        cover = "" if r["load"]["background_covered"] else " [yellow](ended before training did)[/]"
        console.print(f"  background {r['load']['cdf']}: {bg['done']} flows done, {bg['censored']} "
                      f"censored, {bg['failed']} failed, {bg['not_started']} not started; FCT mean "
                      f"{_ms(bg.get('all_fct_mean_s'))} ms, p99 {_ms(bg.get('all_fct_p99_s'))} ms{cover}")
    _print_cpu_guard(s)
    _print_osf(s)
    cn = r.get("connections")
    if cn and cn.get("cpu_s_total") is not None:
        flows = list(cn["flows_carrying_tensors"].values())
        console.print(f"  connections {cn['model']}: {min(flows, default=0)}-{max(flows, default=0)} "
                      f"carrying tensors per direction of a pair; nodes used "
                      f"{cn['cpu_s_total']:.2f} CPU s, at most {cn['threads_max']} threads a node")
    bad = s["tensors"]["corrupted"]
    if bad:
        console.print(f"  [bold red]{bad} tensors failed their checksum[/]")
    if r.get("fault"):
        print_fault(r["fault"])
    console.print(f"  results: {r['path']}")


def print_fault(f: dict) -> None:
    """The fault's line: what was done when, delivery, recovery (docs/faults.md)."""
    if not f["injected"]:
        console.print(f"  [bold red]fault {f['spec']} never injected:[/] the run ended first")
        return
    t0 = f["t_start_ns"]
    when = f"at {(f['t_inject_ns'] - t0) / 1e9:.2f} s"
    if f["t_restore_ns"]:
        when += f", undone at {(f['t_restore_ns'] - t0) / 1e9:.2f} s" + \
            (" (the run ended first)" if f.get("cut_short") else "")
    console.print(f"  [bold]fault[/] {f['spec']} {when}")
    if f["error"]:
        console.print(f"    [bold red]{f['error']}[/]")
    ok = not f["checksum_failed"] and not f["not_delivered"]
    console.print(f"    delivery: {f['verified']} of {f['tensors']} tensors verified (SHA-256), "
                  f"{f['checksum_failed']} failed their checksum, {f['not_delivered']} not "
                  f"delivered" + ("" if ok else " [bold red](data lost)[/]"))
    rec = f["recovery"] or {}
    if rec.get("recovery_s") is not None:
        console.print(f"    recovery {rec['recovery_s']:.2f} s"
                      + (f" ({rec['after_restore_s']:.2f} s after it was undone)"
                         if rec.get("after_restore_s") is not None else "")
                      + f": {rec['degraded_windows']} windows of {rec['window_s']:g} s whose median "
                      f"tensor took over {1 + rec['tolerance']:g}x its pre-fault FCT")
        console.print(f"    tail: {rec['slow']} of {rec['after']} tensors after the fault over "
                      f"{1 + rec['tolerance']:g}x their pre-fault p99"
                      + (f", the last {rec['last_slow_s']:.2f} s after it" if rec['slow'] else "")
                      + f"; worst {rec['worst_slowdown'] or 0:.1f}x")
    else:
        console.print(f"    recovery not measured: {rec.get('reason', '-')}")
    if f.get("counters"):
        console.print("    switch counters since the fault: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(f["counters"].items())))


def register(group: click.Group) -> None:
    group.add_command(run_cmd)
