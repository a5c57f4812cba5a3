"""`talb agent`, `talb top` and `talb bench agent`, registered on the main
command group by :func:`register` (talb/cli.py calls it)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

from agent.config import (DEFAULT_METRICS_PORT, DEFAULT_WINDOW_S, LOG_LEVELS,
                          METRICS_PORT_TRIES, PCM_DELAY_MODES, AgentConfig, ConfigError)
from common import paths
from common.excerpt import shown
from datapath.statsread import STRATEGIES
from netns_topology.state import TestbedError, require_root

PREFIX_HELP = "Name prefix of the testbed's namespaces (<prefix>-<node>)."


def _threshold(value: str | None) -> float | str | None:
    if value is None:
        return None
    if value.strip().lower() == "max":
        return "max"
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"--threshold: 'max' or a number in [0, 1], got {shown(value)}") from None


@click.command("agent")
@click.option("--prefix", default=paths.DEFAULT_PREFIX, show_default=True, help=PREFIX_HELP)
@click.option("--switch", help="Manage this one switch of the prefix's fabric only (an attached "
                               "fabric's or a testbed's; same ports, rates, buffers and groups as "
                               "without it). Default: every switch (attached on this machine).")
@click.option("--netns", hidden=True)
@click.option("--pin-dir", hidden=True)
@click.option("--window-ms", type=float, default=None,
              help="Window T in ms: counters read, PCM computed and published every T "
                   "[default: 40 frame times at the testbed's slowest multipath link, at least "
                   f"{DEFAULT_WINDOW_S * 1e3:g} ms: {DEFAULT_WINDOW_S * 1e3:g} ms at 100 Mbit/s; "
                   "docs/schemes.md].")
@click.option("--w1", type=float, default=1.0, show_default=True,
              help="Weight W1 of utilisation in the PCM (Eq. 5).")
@click.option("--w2", type=float, default=1.0, show_default=True,
              help="Weight W2 of queueing delay in the PCM (Eq. 5).")
@click.option("--threshold", default=None,
              help="TaLB's CASE 1 threshold S in [0, 1] [default: 1.0, the largest PCM]; "
                   "'max': each group's largest PCM (the paper's literal reading; see "
                   "docs/talb-decisions.md for why it is not the default).")
@click.option("--pcm-delay", type=click.Choice(PCM_DELAY_MODES), default="model", show_default=True,
              help="Queueing delay in the PCM: M/D/1 model (Eq. 3/4) or measured qdisc backlog.")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address of the Prometheus /metrics endpoint.")
@click.option("--metrics-port", type=int, default=None,
              help=f"Port of the Prometheus /metrics endpoint [default: {DEFAULT_METRICS_PORT}, "
                   f"or the next free one up to {DEFAULT_METRICS_PORT + METRICS_PORT_TRIES - 1}; "
                   f"given: that port or an error].")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option("--read-strategy", type=click.Choice(STRATEGIES), default="auto", show_default=True,
              help="Per-CPU counter reads: one BPF_MAP_LOOKUP_BATCH, or a lookup per port.")
@click.option("--stats-interval-ms", type=float, default=None,
              help="Data-path counters, tensor table and (model mode) qdisc stats every this "
                   "often [100, or the window if longer].")
def agent_cmd(prefix, switch, netns, pin_dir, window_ms, w1, w2, threshold, pcm_delay,
              metrics_addr, metrics_port, log_level, read_strategy, stats_interval_ms):
    """Run the PCM loop: port counters -> utilisation, queueing delay -> PCM ->
    weights in the switches' maps, every window; Prometheus metrics on /metrics.

    The switches are the prefix's: a fabric `talb attach` loaded under that
    name, or else the testbed `talb testbed up` built. Runs until Ctrl-C /
    SIGTERM (or until the testbed is removed or the fabric detached). The
    data path keeps forwarding with the last weights while no agent runs.
    """
    from agent import daemon

    if netns is not None or pin_dir is not None:
        raise ConfigError(f"{'--netns' if netns is not None else '--pin-dir'}: gone; the agent "
                          "learns a switch from its fabric only: describe the switch in a fabric "
                          "file (docs/attach.md: its netns, ports, rates), `talb attach --fabric "
                          "FILE --no-agent`, then `talb agent --prefix NAME --switch SWITCH`")
    paths.check_prefix(prefix)
    if switch is not None:  # part of pin and snapshot paths
        paths.check_node(switch, "--switch")
    # no --window-ms: the window follows the testbed's link rate (datapath/timers.py)
    timing = daemon.derived_window(prefix, {
        "window_s": None if window_ms is None else window_ms / 1e3,
        "stats_interval_s": None if stats_interval_ms is None else stats_interval_ms / 1e3})
    config = AgentConfig(w1=w1, w2=w2, threshold=_threshold(threshold),
                         pcm_delay=pcm_delay, metrics_addr=metrics_addr, metrics_port=metrics_port,
                         log_level=log_level, read_strategy=read_strategy, **timing)
    require_root()
    try:
        code = daemon.run(config, prefix=prefix, switch=switch)
    except (daemon.AgentError, OSError, LookupError) as exc:
        raise TestbedError(str(exc)) from None
    raise SystemExit(code)


@click.command("top")
@click.option("--prefix", default=paths.DEFAULT_PREFIX, show_default=True, help=PREFIX_HELP)
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@click.option("--interval", type=click.FloatRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between refreshes.")
def top_cmd(prefix, once, interval):
    """Live view of the agent: utilisation, delay, PCM, weight and state of every port."""
    from rich.console import Console
    from rich.live import Live

    from agent.top import render

    paths.check_prefix(prefix)
    console = Console(highlight=False)
    if once:
        console.print(render(prefix))
        return
    try:
        with Live(render(prefix), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(prefix))
    except KeyboardInterrupt:
        pass


@click.command("agent")
@click.option("--ports", default="16,64,256", show_default=True,
              help="Port counts to measure (comma-separated).")
@click.option("--windows", type=click.IntRange(10, 10**6), default=1000, show_default=True,
              help="Windows timed per configuration.")
@click.option("--runs", type=click.IntRange(1, 100), default=6, show_default=True,
              help="1-second runs at 1 ms windows per case for the CPU share's median "
                   "(loaded, idle, measured delay; the C window and the Python window "
                   "interleaved).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the results here.")
def bench_agent_cmd(ports, windows, runs, json_out):
    """Cost of one agent window for N ports (per-key vs batched counter
    reads, model vs measured delay, with and without publishing, ports idle
    and with every port's counters moving), the highest window rate the
    loop sustains, and its CPU share (CPU seconds per wall second) at each
    window size -- at 1 ms, 1000 windows/s."""
    from bench.agent_loop import run_all

    require_root()
    try:
        counts = [int(x) for x in ports.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--ports: comma-separated integers, got {shown(ports)}") from None
    results = run_all(counts, windows=windows, runs=runs, say=click.echo)
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=2))
        click.echo(f"results written to {json_out}")


def register(main: click.Group) -> None:
    main.add_command(agent_cmd)
    main.add_command(top_cmd)
    bench = main.commands.get("bench")
    if isinstance(bench, click.Group):
        bench.add_command(bench_agent_cmd)
