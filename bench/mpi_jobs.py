"""Real Open MPI jobs on the default fabric, per scheme, untagged and tagged
by the transparent tagger (docs/workload.md, "Real MPI jobs", "Tagging
unmodified applications"): one rank pair's goodput (a loop of large
MPI_Send/MPI_Recv, h0 -> h3, leaf to leaf) and the time of a 16.8 MB
MPI_Allreduce across four hosts on both leaves (h0, h3, h1, h4).

    sudo .venv/bin/python -m bench.mpi_jobs [--prefix benchmpi] [--reps 3] [--tag off,on]

Builds its own testbed from topologies/talb.yaml (2 spines, 2 leaves x 3
hosts, 100 Mbit/s) and removes it afterwards; prints one JSON line per
scheme and a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
from contextlib import nullcontext

from common import paths
from common.c_constants import SCHEMES
from common.excerpt import shown
from netns_topology import load_topology
from testbed import lifecycle
from workload.mpi_job import DEFAULT_PORT_MIN, DEFAULT_PORT_RANGE, run_job
from workload.testbed_use import free_port
from workload.transparent_tag import TransparentTagger

ALLREDUCE_BYTES = 16_800_000
PAIR = ["h0", "h3"]
RANKS = ["h0", "h3", "h1", "h4"]


def _set_scheme(prefix: str, topo, scheme: str) -> None:
    from datapath.control import set_scheme
    from datapath.maps import SwitchMaps

    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            set_scheme(maps, scheme)


def measure_scheme(prefix: str, topo, scheme: str, reps: int, tagged: bool) -> dict:
    _set_scheme(prefix, topo, scheme)
    ports = (DEFAULT_PORT_MIN, DEFAULT_PORT_MIN + DEFAULT_PORT_RANGE - 1)
    with (TransparentTagger(prefix, RANKS, ports=ports) if tagged else nullcontext()) as tagger:
        row = _measure(prefix, topo, reps)
        row["tagger"] = tagger.counters() if tagged else None
    return {"scheme": scheme, "tagged": tagged, **row}


def _measure(prefix: str, topo, reps: int) -> dict:
    pair = run_job(prefix, topo, PAIR, {"mode": "sendrecv", "bytes": 4 << 20, "reps": 10},
                   timeout_s=120).output
    ar = run_job(prefix, topo, RANKS, {"mode": "allreduce", "counts": [ALLREDUCE_BYTES // 4],
                                       "iterations": reps + 1, "warmup": 1},
                 timeout_s=600).output
    times = [i["time_s"] for i in ar["iterations"] if not i["warmup"]]
    return {"pair_goodput_bps": pair["goodput_bps"],
            "pair_correct": pair["correct"], "allreduce_bytes": ALLREDUCE_BYTES,
            "allreduce_s": times, "allreduce_mean_s": statistics.fmean(times),
            "allreduce_correct": ar["correct"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", default="benchmpi")
    ap.add_argument("--reps", type=int, default=3, help="measured all-reduces per scheme")
    ap.add_argument("--tag", default="off,on", help="untagged (off), tagged (on), or both")
    args = ap.parse_args(argv)
    topo = load_topology(paths.REPO_ROOT / "topologies" / "talb.yaml")
    lifecycle.up(topo, args.prefix, agent={"metrics_port": free_port()})
    tags = [t.strip() for t in args.tag.split(",")]
    if not tags or any(t not in ("off", "on") for t in tags):
        ap.error(f"--tag: off, on or off,on, got {shown(args.tag)}")
    rows = []
    try:
        for scheme in SCHEMES:
            for tag in tags:
                rows.append(measure_scheme(args.prefix, topo, scheme, args.reps, tag == "on"))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        lifecycle.down(args.prefix)
    print(f"{'scheme':8} {'tagged':6} {'pair goodput':>14} {'16.8 MB all-reduce x4':>24}")
    for r in rows:
        ts = r["allreduce_s"]
        print(f"{r['scheme']:8} {'yes' if r['tagged'] else 'no':6} "
              f"{r['pair_goodput_bps'] / 1e6:10.1f} Mb/s "
              f"{r['allreduce_mean_s']:10.2f} s ({min(ts):.2f}-{max(ts):.2f})"
              + ("" if r["pair_correct"] and r["allreduce_correct"] else "  WRONG RESULT"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
