"""`talb bench faults`: every fault kind (workload/faults.py) under parameter
server and ring all-reduce training with background flows, one `talb run
--fault` each, on one fabric; writes each run's results file, ``rows.json``
and ``faults.md`` (the table of docs/faults.md).

A run that fails is a row with its error, not the end of the matrix; an
existing results file is reused (the matrix resumes).
"""
from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from workload.faults import KINDS, parse_fault

DEFAULT_KINDS = tuple(KINDS)
ARCHS = ("ps", "allreduce")
#: the per-kind parameters the matrix runs (the kinds' defaults otherwise)
PARAMS = {"uplink-down": "leaf=leaf0,spine=spine1", "spine-down": "spine=spine0",
          "scheme": "to=ecmp", "table-full": "limit=16,rate=500", "forged-options": "rate=500"}


def spec_of(kind: str, at_s: float, for_s: float) -> str:
    if kind == "none":
        return f"none@{at_s:g}s"
    extra = PARAMS.get(kind)
    return f"{kind}@{at_s:g}s:for={for_s:g}s" + (f",{extra}" if extra else "")


def command(opts: dict, arch: str, spec: str) -> str:
    argv = ["talb", "run", "--model", opts["model"], "--arch", arch,
            "--workers", str(opts["workers"][arch])]
    if arch == "ps":
        argv += ["--servers", str(opts["servers"])]
    argv += ["--load", f"{opts['load']:g}"]
    if opts.get("background_size_scale"):
        argv += ["--background-size-scale", f"{opts['background_size_scale']:g}"]
    argv += ["--seed", str(opts["seed"]),
             "--iterations", str(opts["iterations"]), "--fault", spec]
    if opts.get("topology"):
        argv += ["--topology", str(opts["topology"])]
    return shlex.join(argv)


def row_of(kind: str, arch: str, spec: str, r: dict, cmd: str) -> dict:
    f = r["fault"]
    rec = f["recovery"] or {}
    drops = (r["summary"].get("port_drops") or {}).get("by_kind") or {}
    return {"fault": kind, "spec": spec, "pattern": arch, "recovery_s": rec.get("recovery_s"),
            "after_restore_s": rec.get("after_restore_s"),
            "degraded_windows": rec.get("degraded_windows"), "slow": rec.get("slow"),
            "after": rec.get("after"), "last_slow_s": rec.get("last_slow_s"),
            "worst_slowdown": rec.get("worst_slowdown"),
            "verified": f["verified"], "tensors": f["tensors"],
            "checksum_failed": f["checksum_failed"], "not_delivered": f["not_delivered"],
            "retrans": r["summary"]["tcp"]["total"]["retrans_segs"],
            "queue_drops": sum(drops.values()) if drops else None,
            "counters": f.get("counters") or {}, "injected": f["injected"],
            "restored": f["restored"], "error": f["error"], "training_s": r["training_s"],
            "iteration_s": r["summary"]["speed"]["iteration_time_s"],
            "cpu_bound": r["flags"]["cpu_bound"], "results": r.get("path"), "command": cmd}


def run_matrix(out: Path, *, model: str = "alexnet", kinds=DEFAULT_KINDS, archs=ARCHS,
               workers: dict | None = None, servers: int = 1, iterations: int = 12,
               load: float = 0.2, background_size_scale: float | None = 0.1, seed: int = 1,
               at_s: float = 3.0, for_s: float = 1.0,
               topology: str | None = None, prefix: str = "tfaults", say=print) -> list[dict]:
    from netns_topology.state import exists
    from testbed import lifecycle
    from workload.experiment import RunConfig, RunError, run

    opts = {"model": model, "workers": workers or {"ps": 2, "allreduce": 3}, "servers": servers,
            "iterations": iterations, "load": load, "seed": seed, "topology": topology,
            "background_size_scale": background_size_scale}
    specs = [(k, a, spec_of(k, at_s, for_s)) for a in archs for k in kinds]
    for _, _, spec in specs:
        parse_fault(spec)                          # every spec checked before anything runs
    out.mkdir(parents=True, exist_ok=True)
    built = False

    def fabric() -> None:
        """Built at the first run that needs it (a finished matrix only rewrites its table)."""
        nonlocal built
        if built or exists(prefix):
            return
        from netns_topology import load_topology
        from workload.experiment import DEFAULT_TOPOLOGY
        from workload.testbed_use import free_port as _free_port

        say(f"building testbed '{prefix}' from {topology or DEFAULT_TOPOLOGY}")
        built = True
        lifecycle.up(load_topology(topology or DEFAULT_TOPOLOGY), prefix,
                     agent={"metrics_port": _free_port()})
    rows = []
    try:
        for i, (kind, arch, spec) in enumerate(specs, 1):
            path = out / f"{arch}-{kind}.json"
            cmd = command(opts, arch, spec)
            t = time.monotonic()
            if path.exists():   # done before: its delivery and recovery measured again
                from workload.faults import report

                r = json.loads(path.read_text())
                r["fault"] = report(r["fault"], r["tensors"])
                path.write_text(json.dumps(r, indent=1))
                r["path"] = str(path)
            else:
                say(f"[{i}/{len(specs)}] {arch} {spec}: running")
                fabric()
                cfg = RunConfig(model=model, arch=arch, workers=opts["workers"][arch],
                                servers=servers if arch == "ps" else 1, load=load, seed=seed,
                                iterations=iterations, prefix=prefix, out=str(path), fault=spec,
                                background_size_scale=background_size_scale)
                try:
                    r = run(cfg, say=lambda m: say(f"    {m}"))
                except (RunError, ValueError) as exc:
                    rows.append({"fault": kind, "spec": spec, "pattern": arch,
                                 "error": str(exc), "command": cmd})
                    say(f"[{i}/{len(specs)}] {arch} {spec}: FAILED {exc}")
                    continue
            row = row_of(kind, arch, spec, r, cmd)
            rows.append(row)
            say(f"[{i}/{len(specs)}] {arch} {spec}: recovery {_s(row['recovery_s'])}, "
                f"{row['verified']}/{row['tensors']} verified, {row['retrans']} retransmissions"
                f" ({time.monotonic() - t:.0f} s)")
    finally:
        if built:
            say(f"removing testbed '{prefix}'")
            lifecycle.down(prefix)
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    (out / "faults.md").write_text(table(rows))
    return rows


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f} s"


NOTE_COUNTERS = ("pass_egress_down", "pass_no_route", "clone_fail", "talb_reroute",
                 "talb_table_full", "talb_midstream", "opt_bad_version", "opt_bad_len",
                 "opt_truncated", "opt_zero_len", "opt_overrun", "opt_not_first",
                 "drop_opt_position", "drop_strip_fail")


def table(rows: list[dict]) -> str:
    head = ("| fault | pattern | CPU-bound | recovery (after undo) | degraded windows | slow tensors (last) | "
            "worst slowdown | tensors verified | SHA failed / lost | TCP retrans | queue drops "
            "| switch counters since the fault |\n|" + "---|" * 12 + "\n")
    lines = []
    for r in rows:
        if r.get("error") and "verified" not in r:
            lines.append(f"| {r['fault']} | {r['pattern']} | run failed: {r['error']} |"
                         + " |" * 9)
            continue
        c = r["counters"]
        notes = ", ".join(f"{k} {c[k]}" for k in NOTE_COUNTERS if c.get(k)) or "-"
        worst = "-" if r["worst_slowdown"] is None else f"{r['worst_slowdown']:.1f}x"
        lines.append(
            f"| {r['fault']} | {r['pattern']} | {'yes' if r['cpu_bound'] else 'no'} | {_s(r['recovery_s'])} ({_s(r['after_restore_s'])})"
            f" | {r['degraded_windows']} | {r['slow']} of {r['after']}"
            + (f" ({_s(r.get('last_slow_s'))})" if r["slow"] else "") + f" | {worst} | "
            f"{r['verified']} of {r['tensors']} | {r['checksum_failed']} / {r['not_delivered']} | "
            f"{r['retrans']} | {r['queue_drops']} | {notes} |")
    cmds = "\n".join(f"    {r['command']}" for r in rows)
    return head + "\n".join(lines) + "\n\nReproduce each row:\n\n" + cmds + "\n"
