"""`talb bench faults`: the fault matrix (experiments/faults.py, docs/faults.md);
registered on the bench group by talb/cli.py."""
from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console

from common import paths
from common.excerpt import shown
from talb.unwind import sigterm_unwinds

console = Console(highlight=False, soft_wrap=True)


def _list(choices):
    def parse(ctx, param, value):
        if value is None:
            return None
        items = [x.strip() for x in value.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if not items or bad:
            raise click.BadParameter(f"a comma-separated list of {', '.join(choices)}, "
                                     f"got {shown(value)}")
        return tuple(items)
    return parse


def _seconds(ctx, param, value):
    from workload.faults import parse_seconds

    if value is None:
        return None
    try:
        v = parse_seconds(value, param.name, value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--fault: ", "")) from None
    if v <= 0 and param.name != "at_s":
        raise click.BadParameter(f"must be > 0, got {shown(value)}")
    return v


def _seeds(ctx, param, value):
    from experiments.faults import seeds_of

    if value is None:
        return None
    try:
        return seeds_of(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--seeds: ", "")) from None


def _designs():
    from experiments.faults import DESIGNS

    return list(DESIGNS)


def _schemes():
    from common.c_constants import SCHEMES

    return list(SCHEMES)


@click.command("faults")
@click.option("--design", type=click.Choice(_designs()), default="uplink", show_default=True,
              help="uplink: the 4-spine uplink-bound fabric of results/fig10, a leaf0 uplink "
                   "down 2 s with the agent running and stopped, beside the undisturbed "
                   "control; TaLB, ECMP, CONGA; seeds 1-6 (54 runs, ~20 min here). kinds: the "
                   "first table, every fault kind once on topologies/talb.yaml (docs/faults.md).")
@click.option("--faults", "labels", default=None,
              help="Only these of the design's faults, by kind or name (uplink-down-agent-stopped), "
                   "comma-separated [all].")
@click.option("--schemes", default=None, callback=_list(_schemes()),
              help="Schemes, comma-separated [the design's].")
@click.option("--seeds", default=None, callback=_seeds, help="Seeds: 1-5 or 1,3,7 [the design's].")
@click.option("--archs", default=None, callback=_list(["ps", "allreduce"]),
              help="Training patterns [the design's].")
@click.option("--iterations", type=click.IntRange(2, 10_000), default=None,
              help="Training iterations, warm-up included [the design's].")
@click.option("--load", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="Background load [the design's].")
@click.option("--at", "at_s", default=None, callback=_seconds,
              help="When each fault is injected, after training starts [the design's].")
@click.option("--for", "for_s", default=None, callback=_seconds,
              help="How long each fault lasts [the design's].")
@click.option("--window", "window_s", default=None, callback=_seconds,
              help="The recovery measure's window (docs/faults.md) [the design's].")
@click.option("--topology", type=click.Path(dir_okay=False, exists=True),
              help="Fabric to build [the design's].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Results directory [results/faults-<UTC time>]; an existing one resumes.")
@click.option("--prefix", default="tfaults", show_default=True, help="Prefix of the fabric.")
def bench_faults(design, labels, schemes, seeds, archs, iterations, load, at_s, for_s, window_s,
                 topology, out_dir, prefix):
    """Faults injected into training runs with background flows, one `talb
    run --fault` each on one fabric, under a design (docs/faults.md): writes
    faults.md (the noise floor, recovery per fault and scheme with its 95%
    interval over the seeds, TaLB paired by seed against each scheme, one row
    per run with its CPU guard verdict and command), rows.json, design.json
    and every run's results. Prints each run's recovery as it ends."""
    from experiments.faults import DESIGNS, run_matrix, slug, with_overrides
    from netns_topology.state import require_root

    d = DESIGNS[design]
    if labels is not None:
        names = list(dict.fromkeys([f.kind for f in d.faults] + [slug(f.label) for f in d.faults]))
        want = [x.strip() for x in labels.split(",") if x.strip()]
        bad = [x for x in want if x not in names]
        if not want or bad:
            raise click.BadParameter(f"the design '{design}' has the faults "
                                     f"{', '.join(names)}, got {shown(labels)}", param_hint="--faults")
        d = with_overrides(d, faults=tuple(f for f in d.faults
                                           if f.kind in want or slug(f.label) in want))
    d = with_overrides(d, schemes=schemes, seeds=seeds, archs=archs, iterations=iterations,
                       load=load, at_s=at_s, for_s=for_s, window_s=window_s,
                       topology=str(Path(topology).resolve()) if topology else None)
    require_root()
    sigterm_unwinds()
    out = Path(out_dir) if out_dir else paths.REPO_ROOT / "results" / \
        f"faults-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    n = len(d.faults) * len(d.schemes) * len(d.seeds) * len(d.archs)
    console.print(f"[bold]faults[/] ({d.name}): {', '.join(f.label for f in d.faults)} x "
                  f"{', '.join(s or 'fabric scheme' for s in d.schemes)} x seeds "
                  f"{', '.join(map(str, d.seeds))} x {', '.join(d.archs)} = {n} runs on "
                  f"{d.topology}, {d.model}, load {d.load:g}, fault at {d.at_s:g} s for "
                  f"{d.for_s:g} s, windows {d.window_s:g} s; results in {out}")
    rows = run_matrix(out, d, prefix=prefix, say=console.print)
    failed = [r for r in rows if r.get("error") and "verified" not in r]
    console.print(f"  {len(rows) - len(failed)} runs, {len(failed)} failed; table: {out / 'faults.md'}")


def register(bench: click.Group) -> None:
    bench.add_command(bench_faults)
