"""`talb bench build`: how long fabrics take to build (bench/build_time.py);
registered on the bench group by talb/cli.py."""
from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

console = Console(highlight=False, soft_wrap=True)


def _shapes(ctx, param, value):
    from bench.build_time import parse_shape

    items = [x.strip() for x in value.split(",") if x.strip()]
    if not items:
        raise click.BadParameter("a comma-separated list of shapes, e.g. 4x4x4,4x8x4")
    for item in items:
        try:
            parse_shape(item)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return items


@click.command("build")
@click.option("--shapes", default="4x4x4,4x8x4,8x8x8", show_default=True, callback=_shapes,
              help="Fabrics to build, SPINESxLEAVESxHOSTS_PER_LEAF, comma-separated.")
@click.option("--repeats", "-n", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Rounds of every variant per shape (the table shows medians).")
@click.option("--mininet/--no-mininet", default=True, show_default=True,
              help="Also build each shape with Mininet (LinuxBridge, TCLink) when the system "
                   "Python has it; when it has not, the output says so.")
@click.option("--prefix", default="tbuild", show_default=True,
              help="Name prefix of the fabrics' namespaces (must not be up).")
@click.option("--out", "out_dir", default="bench-build", show_default=True,
              type=click.Path(file_okay=False),
              help="Where runs.csv, summary.json and build_time.png go.")
@click.option("--breakdown/--no-breakdown", default=True, show_default=True,
              help="Also print where each talb variant's `up` went: before the build "
                   "(interpreter, imports), each build step, the attach step (waiting for the "
                   "kernel's verifier, attaching), after (status, exit); and the loading "
                   "threads' seconds, which overlap the build (medians; also in summary.json).")
def bench_build(shapes, repeats, mininet, prefix, out_dir, breakdown):
    """Seconds until a fabric is up, against its number of nodes.

    Each shape is built and torn down --repeats times as whole `talb testbed
    up` / `down` processes: with the BPF data path from a cold cache of
    compiled programs (bcc compiles each program once) and from a warm one
    (no compiler), with --datapath bridge (no programs: the floor), and with
    Mininet beside them. Needs root and a machine otherwise idle: the
    numbers are wall-clock seconds.
    """
    from bench.build_time import RATIOS, ratios, run, summarise, write
    from netns_topology.state import exists, require_root
    from talb.unwind import sigterm_unwinds

    require_root()
    if exists(prefix):
        raise click.UsageError(f"--prefix: a testbed '{prefix}' is up; tear it down or pick "
                               "another prefix")
    sigterm_unwinds()
    try:
        results = run(shapes, repeats, prefix=prefix, mininet=mininet,
                      say=lambda m: console.print(f"  {m}"))
    except KeyboardInterrupt:
        from testbed import lifecycle

        lifecycle.down(prefix)
        raise
    table = Table(title="seconds until the fabric is up (median of "
                        f"{repeats}; min-max), then down")
    for col in ("shape", "nodes", "variant", "up", "min-max", "down"):
        table.add_column(col, justify="left" if col in ("shape", "variant") else "right")
    for s in summarise(results["rows"]):
        table.add_row(s["shape"], str(s["nodes"]), s["variant"], f"{s['up_median_s']:.2f}",
                      f"{s['up_min_s']:.2f}-{s['up_max_s']:.2f}", f"{s['down_median_s']:.2f}")
    console.print(table)
    for a, b in RATIOS:
        paired = ratios(results["rows"], a, b)
        if paired:
            console.print(f"{a} / {b} (median of the rounds' ratios): "
                          + ", ".join(f"{shape} {r:.2f}x" for shape, r in paired.items()))
    if breakdown:
        _print_breakdown(summarise(results["rows"]))
    if results["mininet"]:
        console.print(f"Mininet not measured: {results['mininet']}")
    files = write(results, out_dir)
    console.print("written: " + ", ".join(str(p) for p in files.values()))


def _print_breakdown(summary: list[dict]) -> None:
    rows = [s for s in summary if s.get("breakdown_median_s")]
    if not rows:
        return
    keys = list(dict.fromkeys(k for s in rows for k in s["breakdown_median_s"]))
    table = Table(title="where `talb testbed up` went (median seconds; load.*: the loading "
                        "threads, overlapping the build)")
    table.add_column("part")
    for s in rows:
        table.add_column(f"{s['shape']} {s['variant']}", justify="right")
    for key in keys:
        table.add_row(key, *(f"{s['breakdown_median_s'][key]:.3f}"
                             if key in s["breakdown_median_s"] else "-" for s in rows))
    console.print(table)


def register(bench: click.Group) -> None:
    bench.add_command(bench_build)
