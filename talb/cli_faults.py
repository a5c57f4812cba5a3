"""`talb bench faults`: the fault matrix (experiments/faults.py, docs/faults.md);
registered on the bench group by talb/cli.py."""
from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console

from common import paths
from talb.unwind import sigterm_unwinds

console = Console(highlight=False, soft_wrap=True)


def _list(choices):
    def parse(ctx, param, value):
        items = [x.strip() for x in value.split(",") if x.strip()]
        bad = [x for x in items if x not in choices]
        if not items or bad:
            raise click.BadParameter(f"a comma-separated list of {', '.join(choices)}, "
                                     f"got {value!r}")
        return items
    return parse


def _seconds(ctx, param, value):
    from workload.faults import parse_seconds

    try:
        return parse_seconds(value, param.name, value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).replace("--fault: ", "")) from None


def _kinds():
    from workload.faults import KINDS

    return list(KINDS)


@click.command("faults")
@click.option("--kinds", default=",".join(_kinds()), show_default=True, callback=_list(_kinds()),
              help="Fault kinds (none: the undisturbed control).")
@click.option("--archs", default="ps,allreduce", show_default=True,
              callback=_list(["ps", "allreduce"]), help="Training patterns.")
@click.option("--model", default="alexnet", show_default=True, help="Model profile.")
@click.option("--ps-workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--allreduce-workers", type=click.IntRange(2, 64), default=3, show_default=True)
@click.option("--iterations", type=click.IntRange(2, 10_000), default=12, show_default=True)
@click.option("--load", type=click.FloatRange(0, 1, max_open=True), default=0.2, show_default=True,
              help="Background load.")
@click.option("--background-size-scale", type=click.FloatRange(0, 1, min_open=True), default=0.1,
              show_default=True, help="Background flow sizes x this (docs/workload.md): the "
              "tensors' byte scale (0.01 at 10G) makes ~600 small flows/s, CPU-bound here.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--at", "at_s", default="3s", show_default=True, callback=_seconds,
              help="When each fault is injected, after the nodes start.")
@click.option("--for", "for_s", default="1s", show_default=True, callback=_seconds,
              help="How long each fault lasts.")
@click.option("--topology", type=click.Path(dir_okay=False),
              help="Fabric to build [topologies/talb.yaml].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Results directory [results/faults-<UTC time>]; an existing one resumes.")
@click.option("--prefix", default="tfaults", show_default=True, help="Prefix of the fabric.")
def bench_faults(kinds, archs, model, ps_workers, allreduce_workers, iterations, load,
                 background_size_scale, seed,
                 at_s, for_s, topology, out_dir, prefix):
    """Every fault kind under PS and ring all-reduce training with background
    flows: one `talb run --fault` each on one fabric; writes faults.md (the
    table of docs/faults.md: recovery time, tensors verified, retransmissions,
    drops, the command of each row), rows.json and every run's results."""
    from experiments.faults import run_matrix
    from netns_topology.state import require_root

    require_root()
    sigterm_unwinds()
    out = Path(out_dir) if out_dir else paths.REPO_ROOT / "results" / \
        f"faults-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    console.print(f"[bold]faults[/]: {', '.join(kinds)} x {', '.join(archs)}, {model}, load "
                  f"{load:g}, fault at {at_s:g} s for {for_s:g} s; results in {out}")
    rows = run_matrix(out, model=model, kinds=kinds, archs=archs,
                      workers={"ps": ps_workers, "allreduce": allreduce_workers},
                      iterations=iterations, load=load,
                      background_size_scale=background_size_scale, seed=seed, at_s=at_s, for_s=for_s,
                      topology=topology, prefix=prefix, say=console.print)
    failed = [r for r in rows if r.get("error")]
    console.print(f"  {len(rows) - len(failed)} runs, {len(failed)} failed; table: {out / 'faults.md'}")


def register(bench: click.Group) -> None:
    bench.add_command(bench_faults)
