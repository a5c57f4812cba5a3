"""`talb bench shaped`: goodput and CPU through a shaped fabric, link
emulation variants back to back (bench/shaped_fabric.py); registered on the
bench group by talb/cli.py."""
from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console

console = Console(highlight=False, soft_wrap=True)


def _rates(ctx, param, value):
    from netns_topology.errors import TopologyError
    from netns_topology.params import check_rate

    items = [x.strip() for x in value.split(",") if x.strip()]
    if not items:
        raise click.BadParameter("a comma-separated list of link rates, e.g. 100mbit,400mbit")
    try:
        return [check_rate("--rates", x) for x in items]
    except TopologyError as exc:
        raise click.BadParameter(str(exc)) from None


def _variants(ctx, param, value):
    from bench.shaped_fabric import VARIANTS

    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in VARIANTS]
    if not items or bad:
        raise click.BadParameter(f"{', '.join(bad) or 'nothing given'}: pick from {', '.join(VARIANTS)}")
    return items


def _size(ctx, param, value):
    from netns_topology.errors import TopologyError
    from netns_topology.params import check_size

    try:
        return check_size("--queue", value, 3000)
    except TopologyError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("shaped")
@click.option("--rates", default="100mbit,200mbit,400mbit", show_default=True, callback=_rates,
              help="Link rates to measure (every link of the fabric at that rate), comma-separated.")
@click.option("--variants", default="exact,batched", show_default=True, callback=_variants,
              help="Link emulation variants, alternated A B A B on the same fabric: exact (what "
                   "`talb testbed up` builds), batched, batched-full, batched-small, tbf, gro, batched+gro "
                   "(bench/shaped_fabric.py says what each is).")
@click.option("--rounds", "-n", type=click.IntRange(1, 50), default=2, show_default=True,
              help="Rounds of every variant per rate.")
@click.option("--duration", type=click.FloatRange(2, 600), default=8.0, show_default=True,
              help="Seconds measured per run (after 1 s of warm-up that is not counted).")
@click.option("--hosts-per-leaf", type=click.IntRange(1, 4), default=2, show_default=True,
              help="Hosts per leaf (1 spine, 2 leaves); 8 flows in all, host i of leaf 0 with "
                   "host i of leaf 1, both ways.")
@click.option("--queue", "queue_limit", default="300kb", show_default=True, callback=_size,
              help="Bytes of every egress queue (bfifo limit).")
@click.option("--perf-dir", type=click.Path(file_okay=False),
              help="Also profile the first round of every (rate, variant) with `perf record -a -g` "
                   "(or, with --perf-stat, count scheduler/timer/net events) into this directory; "
                   "those runs are marked and are not the ones to compare.")
@click.option("--perf-stat", is_flag=True, help="With --perf-dir: `perf stat` event counts instead.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the rows here.")
def bench_shaped(rates, variants, rounds, duration, hosts_per_leaf, queue_limit, perf_dir, perf_stat,
                 json_out):
    """Goodput, CPU and packets per CPU-second through a shaped 1x2xN fabric.

    Every link is emulated at each --rates in turn; for each rate one fabric
    is built (prefix benchshp, BPF data path, ECMP, no agent) and every
    variant of link emulation is installed on all its interfaces in turn,
    --rounds times (A B A B), while 8 cubic iperf3 flows cross the leaves.
    Needs root and a machine otherwise idle: the CPU share is the whole
    machine's. `batched` sets sch_htb's htb_hysteresis, a machine-wide
    setting, for its runs and puts it back afterwards.
    """
    from bench.shaped_fabric import PREFIX, run
    from netns_topology.state import exists, require_root
    from talb.unwind import sigterm_unwinds

    require_root()
    if exists(PREFIX):
        raise click.UsageError(f"a testbed '{PREFIX}' is up (the benchmark's prefix); "
                               f"`talb testbed down --prefix {PREFIX}` first")
    if perf_dir:
        Path(perf_dir).mkdir(parents=True, exist_ok=True)
    sigterm_unwinds()
    rows = run(rates=rates, variants=variants, rounds=rounds, duration=duration,
               queue_limit=queue_limit, hosts_per_leaf=hosts_per_leaf, perf_dir=perf_dir,
               perf_stat=perf_stat, say=console.print)
    from bench.shaped_fabric import summarise

    for line in summarise(rows):
        console.print(line)
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
        console.print(f"rows written to {json_out}")


def register(bench: click.Group) -> None:
    bench.add_command(bench_shaped)
