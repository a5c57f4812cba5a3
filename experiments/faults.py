"""`talb bench faults`: faults injected into training runs (workload/faults.py),
one `talb run --fault` each on one fabric, under a named *design*
(docs/faults.md): which fabric, training, schemes, seeds, faults, when they
strike and for how long, and the recovery measure's window. Writes each
run's results file, ``rows.json`` and ``faults.md`` (the tables of
docs/faults.md: one row per run, and per fault and scheme the recovery over
the seeds with its interval, TaLB paired by seed against each other scheme).

Designs:

* ``uplink`` (the default): the 4-spine, uplink-bound fabric of results/fig10
  with every worker off the server's leaf, so every tensor crosses a leaf's
  uplinks and path choice matters; one leaf0 uplink down for 2 s, with the
  agent running (the schemes steer around it) and with the agent stopped (the
  dead port stays in the groups: the fault that must hurt), beside the
  undisturbed control; TaLB, ECMP and CONGA; seeds 1-6.
* ``kinds``: the first table (2 spines, AlexNet, PS and ring all-reduce, one
  seed): every fault kind once, 1 s each, 0.5 s windows.

A run that fails is a row with its error, not the end of the matrix; an
existing results file is reused (the matrix resumes), its recovery measured
again with the design's window.
"""
from __future__ import annotations

import json
import shlex
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

from common.excerpt import shown
from workload.faults import KINDS, parse_fault
from workload.measure import rejudge
from workload.run_record import read_record, write_record


@dataclass(frozen=True)
class Fault:
    label: str        # the row's name: several labels may share a kind
    kind: str
    params: str = ""  # key=value,... besides for=


@dataclass(frozen=True)
class Design:
    name: str
    description: str
    topology: str
    model: str
    archs: tuple
    workers: dict
    faults: tuple
    servers: int = 1
    placement: str = "spread"
    target_link_bps: float = 10e9
    scaling_mode: str = "bytes"
    schemes: tuple = (None,)          # None: the fabric's scheme
    seeds: tuple = (1,)
    load: float = 0.2
    background_size_scale: float | None = None   # None: the tensors' byte scale
    iterations: int = 12
    warmup: int = 1
    at_s: float = 3.0
    for_s: float = 1.0
    window_s: float = 0.25
    settle_windows: int | None = 2     # None: the last degraded window anywhere (the first table)
    threshold: float = 3.0             # a window's median slowdown over span_s above this: degraded
    span_s: float | None = 0.5         # None: the window itself
    control_spans_fault: bool = True   # the control measured as if disturbed for for_s


_UPLINK = "leaf=leaf0,spine=spine0"
DESIGNS: dict[str, Design] = {
    "uplink": Design(
        name="uplink",
        description="4-spine uplink-bound fabric (results/fig10's), workers off the server's "
                    "leaf; leaf0-spine0 down 2 s with the agent running and stopped; "
                    "TaLB, ECMP, CONGA; seeds 1-6",
        topology="topologies/fig10-4spine.yaml", model="threelayer", archs=("ps",),
        workers={"ps": 4}, servers=1, placement="remote", target_link_bps=100e9,
        scaling_mode="both", schemes=("talb", "ecmp", "conga"), seeds=(1, 2, 3, 4, 5, 6),
        load=0.2, background_size_scale=None, iterations=12, warmup=1,
        at_s=3.0, for_s=2.0, window_s=0.25,
        faults=(Fault("none", "none"),
                Fault("uplink-down", "uplink-down", _UPLINK),
                Fault("uplink-down, agent stopped", "uplink-down", _UPLINK + ",agent=stop"))),
    "kinds": Design(
        name="kinds",
        description="the first table: every fault kind once on topologies/talb.yaml "
                    "(2 spines), AlexNet, PS and ring all-reduce, seed 1, 1 s faults, 0.5 s "
                    "windows",
        topology="topologies/talb.yaml", model="alexnet", archs=("ps", "allreduce"),
        workers={"ps": 2, "allreduce": 3}, servers=1, load=0.2, background_size_scale=0.1,
        iterations=12, at_s=3.0, for_s=1.0, window_s=0.5, settle_windows=None, threshold=2.0,
        span_s=None,
        control_spans_fault=False,
        faults=tuple(Fault(k, k, p) for k, p in (
            ("none", ""), ("uplink-down", "leaf=leaf0,spine=spine1"), ("spine-down", "spine=spine0"),
            ("agent-kill", ""), ("scheme", "to=ecmp"), ("table-full", "limit=16,rate=500"),
            ("forged-options", "rate=500")))),
}
DEFAULT_DESIGN = "uplink"
assert all(f.kind in KINDS for d in DESIGNS.values() for f in d.faults)


def spec_of(fault: Fault, at_s: float, for_s: float, control_spans_fault: bool = True) -> str:
    if fault.kind == "none":   # measured as if disturbed as long as the faults it controls
        return f"none@{at_s:g}s" + (f":for={for_s:g}s" if for_s and control_spans_fault else "")
    return f"{fault.kind}@{at_s:g}s:for={for_s:g}s" + (f",{fault.params}" if fault.params else "")


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label).replace("--", "-").strip("-")


def command(d: Design, arch: str, scheme: str | None, seed: int, spec: str) -> str:
    """The `talb run` that makes one row (it builds the design's fabric and removes it)."""
    argv = ["talb", "run", "--topology", d.topology]
    if scheme:
        argv += ["--scheme", scheme]
    argv += ["--model", d.model, "--arch", arch, "--workers", str(d.workers[arch])]
    if arch == "ps":
        argv += ["--servers", str(d.servers)]
    if d.placement != "spread":
        argv += ["--placement", d.placement]
    if d.target_link_bps != 10e9:
        argv += ["--target-link-rate", f"{d.target_link_bps / 1e9:g}gbit"]
    if d.scaling_mode != "bytes":
        argv += ["--scaling", d.scaling_mode]
    argv += ["--load", f"{d.load:g}"]
    if d.background_size_scale:
        argv += ["--background-size-scale", f"{d.background_size_scale:g}"]
    argv += ["--seed", str(seed), "--iterations", str(d.iterations)]
    if d.warmup != 1:
        argv += ["--warmup", str(d.warmup)]
    return shlex.join(argv + ["--fault", spec])


def row_of(fault: Fault, arch: str, scheme: str | None, seed: int, spec: str, r: dict,
           cmd: str) -> dict:
    f = r["fault"]
    rec = f["recovery"] or {}
    drops = (r["summary"].get("port_drops") or {}).get("by_kind") or {}
    guard = rejudge(r)        # older results files: judged again by the current rule
    return {"fault": fault.label, "kind": fault.kind, "spec": spec, "pattern": arch,
            "scheme": r["config"].get("scheme") or scheme, "seed": seed,
            "recovery_s": rec.get("recovery_s"), "after_restore_s": rec.get("after_restore_s"),
            "degraded_windows": rec.get("degraded_windows"),
            "stalled_windows": rec.get("stalled_windows"), "worst_window": rec.get("worst_window"),
            "window_s": rec.get("window_s"), "slow": rec.get("slow"),
            "after": rec.get("after"), "last_slow_s": rec.get("last_slow_s"),
            "worst_slowdown": rec.get("worst_slowdown"), "stuck": rec.get("stuck"),
            "last_stuck_s": rec.get("last_stuck_s"),
            "verified": f["verified"], "tensors": f["tensors"],
            "checksum_failed": f["checksum_failed"], "not_delivered": f["not_delivered"],
            "retrans": r["summary"]["tcp"]["total"]["retrans_segs"],
            "queue_drops": sum(drops.values()) if drops else None,
            "counters": f.get("counters") or {}, "injected": f["injected"],
            "restored": f["restored"], "error": f["error"], "training_s": r["training_s"],
            "iteration_s": r["summary"]["speed"]["iteration_time_s"],
            "cpu_bound": bool(guard.get("flagged")), "cpu_busy_mean": guard.get("cpu_busy_mean"),
            "cpu_guard": guard.get("reason"), "results": r.get("path"), "command": cmd}


def plan(d: Design) -> list[tuple]:
    """(fault, arch, scheme, seed, spec) in run order: seed by seed, so a matrix
    stopped early has whole seeds (every cell paired), and within a seed fault by
    fault, scheme by scheme (what the machine's other load does is spread)."""
    return [(f, a, s, seed, spec_of(f, d.at_s, d.for_s, d.control_spans_fault))
            for seed in d.seeds for a in d.archs for f in d.faults for s in d.schemes]


def results_name(fault: Fault, arch: str, scheme: str | None, seed: int, d: Design) -> str:
    if d.name == "kinds":       # the first table's names
        return f"{arch}-{fault.kind}.json"
    return f"{arch}-{scheme or 'fabric'}-{slug(fault.label)}-s{seed}.json"


def run_matrix(out: Path, design: Design, *, prefix: str = "tfaults", say=print) -> list[dict]:
    from netns_topology.state import exists
    from testbed import lifecycle
    from workload.experiment import RunConfig, RunError, run
    from workload.faults import report

    d = design
    runs = plan(d)
    for _, _, _, _, spec in runs:
        parse_fault(spec)                          # every spec checked before anything runs
    out.mkdir(parents=True, exist_ok=True)
    (out / "design.json").write_text(json.dumps(design_dict(d), indent=1))
    built = False

    def fabric() -> None:
        """Built at the first run that needs it (a finished matrix only rewrites its table)."""
        nonlocal built
        if built or exists(prefix):
            return
        from common import paths
        from netns_topology import load_topology
        from workload.testbed_use import free_port as _free_port

        say(f"building testbed '{prefix}' from {d.topology}")
        built = True
        lifecycle.up(load_topology(paths.REPO_ROOT / d.topology), prefix,
                     agent={"metrics_port": _free_port()})
    rows = []
    t0 = time.monotonic()
    try:
        for i, (fault, arch, scheme, seed, spec) in enumerate(runs, 1):
            path = out / results_name(fault, arch, scheme, seed, d)
            cmd = command(d, arch, scheme, seed, spec)
            what = f"{arch} {scheme or ''} seed {seed} {spec}".replace("  ", " ")
            t = time.monotonic()
            if path.exists():   # done before: its delivery and recovery measured again
                r = read_record(path)
                r.fault = report(r.fault, r.tensors, **measure_of(d))
                r = write_record(r, path)
            else:
                say(f"[{i}/{len(runs)}] {what}: running")
                fabric()
                cfg = RunConfig(model=d.model, arch=arch, workers=d.workers[arch],
                                servers=d.servers if arch == "ps" else 1, scheme=scheme,
                                load=d.load, seed=seed, iterations=d.iterations, warmup=d.warmup,
                                target_link_bps=d.target_link_bps, scaling_mode=d.scaling_mode,
                                placement=d.placement, prefix=prefix, out=str(path), fault=spec,
                                background_size_scale=d.background_size_scale)
                try:
                    r = run(cfg, say=lambda m: say(f"    {m}"))
                except (RunError, ValueError) as exc:
                    rows.append({"fault": fault.label, "kind": fault.kind, "spec": spec,
                                 "pattern": arch, "scheme": scheme, "seed": seed,
                                 "error": str(exc), "command": cmd})
                    say(f"[{i}/{len(runs)}] {what}: FAILED {exc}")
                    continue
                r = read_record(r)          # as run() returned it, "path" included
                r.fault = report(r.fault, r.tensors, **measure_of(d))
                r = write_record(r, path)
            row = row_of(fault, arch, scheme, seed, spec, r, cmd)
            row["results"] = path.name
            rows.append(row)
            say(f"[{i}/{len(runs)}] {what}: recovery {_s(row['recovery_s'])}, "
                f"{row['verified']}/{row['tensors']} verified, {row['retrans']} retransmissions, "
                f"CPU-bound {'yes' if row['cpu_bound'] else 'no'} "
                f"({time.monotonic() - t:.0f} s; {(time.monotonic() - t0) / 60:.1f} min in all)")
    finally:
        if built:
            say(f"removing testbed '{prefix}'")
            lifecycle.down(prefix)
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    (out / "faults.md").write_text(report_md(rows, d))
    say(f"archiving the runs (what the table is measured from) in {out / 'runs.tar.xz'}")
    archive(out, [r["results"] for r in rows if r.get("results")])
    return rows


#: a tensor's fields the archive keeps: what workload/recovery.py and the delivery check read
ARCHIVED_TENSOR_FIELDS = ("key", "kind", "layer", "partition", "iteration", "warmup", "censored",
                          "ok", "t_start_ns", "t_done_ns", "fct_s")


def slim(r: dict) -> dict:
    """A results file as the archive keeps it: everything the table reads, the
    tensors with ARCHIVED_TENSOR_FIELDS (times to the microsecond), without
    the background's flow records, the CPU samples and the per-layer records
    (~60 KB a run compressed instead of ~220 KB). `talb bench faults --out`
    on a directory of these measures them again."""
    out = {k: v for k, v in r.items() if k not in ("load", "cpu_samples", "layers", "tensors",
                                                    "path")}
    if isinstance(r.get("load"), dict):
        out["load"] = {k: v for k, v in r["load"].items() if k != "background"}
    tensors = []
    for t in r["tensors"]:
        x = {k: t.get(k) for k in ARCHIVED_TENSOR_FIELDS}
        for k in ("t_start_ns", "t_done_ns"):
            if x[k] is not None:
                x[k] = x[k] // 1000 * 1000
        if x["fct_s"] is not None:
            x["fct_s"] = round(x["fct_s"], 6)
        tensors.append(x)
    out["tensors"] = tensors
    return out


def archive(out: Path, names: list[str]) -> Path:
    """``runs.tar.xz`` in ``out``: the slim copy of each results file named."""
    import io
    import tarfile

    dest = out / "runs.tar.xz"
    tmp = dest.with_suffix(".tmp")
    with tarfile.open(tmp, "w:xz") as tf:
        for name in names:
            data = json.dumps(slim(read_record(out / name)),
                              separators=(",", ":")).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    tmp.replace(dest)
    return dest


def measure_of(d: Design) -> dict:
    """The recovery measure's parameters (workload/recovery.recovery)."""
    return {"window_s": d.window_s, "settle_windows": d.settle_windows,
            "threshold": d.threshold, "span_s": d.span_s}


def design_dict(d: Design) -> dict:
    out = {k: getattr(d, k) for k in d.__dataclass_fields__ if k != "faults"}
    out["faults"] = [{"label": f.label, "kind": f.kind, "params": f.params,
                      "spec": spec_of(f, d.at_s, d.for_s, d.control_spans_fault)} for f in d.faults]
    return out


def with_overrides(d: Design, **kw) -> Design:
    """The design with the options given (None: the design's)."""
    return replace(d, **{k: v for k, v in kw.items() if v is not None})


# --- the report ---------------------------------------------------------------------------
def _s(v) -> str:
    return "-" if v is None else f"{v:.2f} s"


NOTE_COUNTERS = ("pass_egress_down", "pass_no_route", "clone_fail", "talb_reroute",
                 "talb_table_full", "talb_midstream", "opt_bad_version", "opt_bad_len",
                 "opt_truncated", "opt_zero_len", "opt_overrun", "opt_not_first",
                 "drop_opt_position", "drop_strip_fail")


def mean_ci(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% t-interval (the sweeps' stats.estimate); a single
    value or no spread: the value itself."""
    from experiments.sweep.stats import estimate

    e = estimate(values)
    if e.half_width is None:
        return e.mean, e.mean, e.mean
    return e.mean, e.low, e.high


def paired(a: dict, b: dict) -> dict | None:
    """TaLB's recovery minus another scheme's, paired by seed: the seeds both
    have (finite), the mean difference with its t-interval and Wilcoxon's
    signed-rank p (scipy; None when every difference is 0)."""
    from scipy import stats

    seeds = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None)
    if not seeds:
        return None
    diffs = [a[s] - b[s] for s in seeds]
    m, lo, hi = mean_ci(diffs)
    p = None
    if any(diffs):
        p = float(stats.wilcoxon(diffs, zero_method="zsplit").pvalue)
    return {"n": len(seeds), "mean": m, "lo": lo, "hi": hi, "p": p}


def summary(rows: list[dict]) -> dict:
    """Per (pattern, fault, scheme): recovery by seed and its statistics."""
    cells: dict = {}
    for r in rows:
        if "verified" not in r:
            continue
        cells.setdefault((r["pattern"], r["fault"], r["scheme"]), []).append(r)
    out = {}
    controls = {(r["pattern"], r["scheme"], r["seed"]): r["training_s"]
                for r in rows if r.get("kind") == "none" and "verified" in r}
    for key, rs in cells.items():
        rec = {r["seed"]: r["recovery_s"] for r in rs}
        lost = [r["training_s"] - controls[(r["pattern"], r["scheme"], r["seed"])] for r in rs
                if (r["pattern"], r["scheme"], r["seed"]) in controls and r["kind"] != "none"]
        finite = [v for v in rec.values() if v is not None]
        out[key] = {"runs": len(rs), "by_seed": rec, "finite": finite,
                    "stats": mean_ci(finite) if finite else None,
                    "nonzero": sum(1 for v in finite if v > 0),
                    "lost": sum(1 for v in rec.values() if v is None),
                    "after_restore": [r["after_restore_s"] for r in rs
                                      if r["after_restore_s"] is not None],
                    "stalled": sum(r.get("stalled_windows") or 0 for r in rs),
                    "worst_window": max((r["worst_window"] for r in rs
                                         if r.get("worst_window") is not None), default=None),
                    "cpu_bound": sum(1 for r in rs if r["cpu_bound"]),
                    "verified": sum(r["verified"] for r in rs),
                    "tensors": sum(r["tensors"] for r in rs),
                    "failed": sum(r["checksum_failed"] + r["not_delivered"] for r in rs),
                    "retrans": statistics.fmean(r["retrans"] for r in rs),
                    # training time the fault cost, against the control at the same seed
                    "time_lost": mean_ci(lost) if lost else None,
                    "last_slow": [r["last_slow_s"] for r in rs if r.get("last_slow_s") is not None],
                    "last_stuck": {r["seed"]: r["last_stuck_s"] for r in rs
                                   if r.get("last_stuck_s") is not None}}
    return out


def _ci(st) -> str:
    if st is None:
        return "-"
    m, lo, hi = st
    return f"{m:.2f} s" if lo == hi else f"{m:.2f} s [{lo:.2f}, {hi:.2f}]"


def report_md(rows: list[dict], d: Design) -> str:
    """faults.md: the noise floor, the per-scheme table with intervals, the paired
    comparisons, one row per run and the command of each."""
    failed = [r for r in rows if "verified" not in r]
    ok = [r for r in rows if "verified" in r]
    cells = summary(ok)
    parts = [f"Design `{d.name}`: {d.description}. Faults at {d.at_s:g} s for {d.for_s:g} s; "
             f"windows of {d.window_s:g} s; {len(ok)} runs, {len(failed)} failed, "
             f"{sum(1 for r in ok if r['cpu_bound'])} flagged CPU-bound by the CPU guard.\n"]
    controls = [r for r in ok if r["kind"] == "none"]
    if controls:
        nz = [r for r in controls if r["recovery_s"]]
        ww = [r["worst_window"] for r in controls if r.get("worst_window") is not None]
        parts.append(
            f"**Noise floor** (the `none` control, {len(controls)} runs): recovery > 0 in "
            f"{len(nz)} of {len(controls)}" + (f" (largest {max(r['recovery_s'] for r in nz):.2f} s)"
                                               if nz else "")
            + (f"; the largest windowed median slowdown anywhere in a control run {max(ww):.2f}x "
               f"(median over the runs {statistics.median(ww):.2f}x; a window is degraded above "
               f"{d.threshold:g}x within the episode)" if ww else "")
            + (f"; last stuck tensor > 0 in {sum(1 for r in controls if r.get('last_stuck_s'))} "
               f"of {len(controls)} (largest {max(r.get('last_stuck_s') or 0 for r in controls):.2f} s)"
               if any('last_stuck_s' in r for r in controls) else "") + ".\n")
    schemes = list(dict.fromkeys(r["scheme"] for r in ok))
    head = ("| pattern | fault | scheme | recovery, mean [95% CI] | by seed | > 0 | after undo "
            "(mean) | stalled windows | last stuck tensor, mean [95% CI] | by seed "
            "| worst window | training time lost vs control [95% CI] "
            "| CPU-bound | verified | SHA failed + lost "
            "| TCP retrans (mean) |\n|" + "---|" * 16 + "\n")
    lines = []
    for (pattern, fault, scheme), c in cells.items():
        seeds = " ".join("lost" if v is None else f"{v:.2f}"
                         for _, v in sorted(c["by_seed"].items()))
        ar = statistics.fmean(c["after_restore"]) if c["after_restore"] else None
        ww = "-" if c["worst_window"] is None else f"{c['worst_window']:.2f}x"
        st = list(c["last_stuck"].values())
        st_seeds = " ".join(f"{v:.2f}" for _, v in sorted(c["last_stuck"].items()))
        lines.append(f"| {pattern} | {fault} | {scheme or '-'} | {_ci(c['stats'])} | {seeds} | "
                     f"{c['nonzero']} of {c['runs']} | {_s(ar)} | {c['stalled']} | "
                     f"{_ci(mean_ci(st)) if st else '-'} | {st_seeds} | {ww} | "
                     f"{_ci(c['time_lost'])} | "
                     f"{c['cpu_bound']} of {c['runs']} | {c['verified']} of {c['tensors']} | "
                     f"{c['failed']} | {c['retrans']:.0f} |")
    parts.append(head + "\n".join(lines) + "\n")
    if "talb" in schemes and len(schemes) > 1:
        ph = ("| pattern | fault | TaLB − | seeds | recovery: mean difference [95% CI] | Wilcoxon p "
              "| last stuck tensor: mean difference [95% CI] | Wilcoxon p "
              "| training time lost: mean difference [95% CI] | Wilcoxon p |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n")
        pl = []
        for (pattern, fault, scheme), c in cells.items():
            if scheme == "talb":
                continue
            t = cells.get((pattern, fault, "talb"))
            pr = paired(t["by_seed"], c["by_seed"]) if t else None
            if pr is None:
                continue
            lost = paired(*(_lost_by_seed(ok, pattern, fault, x) for x in ("talb", scheme)))
            stuck = paired(t["last_stuck"], c["last_stuck"])
            pl.append(f"| {pattern} | {fault} | {scheme} | {pr['n']} | {_pair(pr)} |"
                      + (" - | - |" if stuck is None else f" {_pair(stuck)} |")
                      + (" - | - |" if lost is None else f" {_pair(lost)} |"))
        if pl:
            parts.append("Paired by seed (TaLB's recovery minus the other scheme's):\n\n"
                         + ph + "\n".join(pl) + "\n")
    parts.append(runs_table(rows))
    cmds = "\n".join(f"    {r['command']}" for r in rows)
    parts.append("Reproduce each row (each builds the design's fabric and removes it; the "
                 "table measures recovery with the design's window, "
                 f"{d.window_s:g} s):\n\n" + cmds + "\n")
    return "\n".join(parts)


def _pair(pr: dict) -> str:
    ci = f"{pr['mean']:+.2f} s" + ("" if pr["lo"] == pr["hi"]
                                   else f" [{pr['lo']:+.2f}, {pr['hi']:+.2f}]")
    return ci + " | " + ("-" if pr["p"] is None else f"{pr['p']:.3f}")


def _lost_by_seed(rows: list[dict], pattern: str, fault: str, scheme: str) -> dict:
    """{seed: training time minus the control's at that seed} of one cell."""
    ctl = {r["seed"]: r["training_s"] for r in rows
           if r["kind"] == "none" and r["pattern"] == pattern and r["scheme"] == scheme}
    return {r["seed"]: r["training_s"] - ctl[r["seed"]] for r in rows
            if r["fault"] == fault and r["pattern"] == pattern and r["scheme"] == scheme
            and r["kind"] != "none" and r["seed"] in ctl}


def runs_table(rows: list[dict]) -> str:
    head = ("| fault | pattern | scheme | seed | CPU-bound | recovery (after undo) | degraded "
            "(stalled) windows | worst window | slow tensors (last) | worst slowdown | tensors "
            "verified | SHA failed / lost | TCP retrans | queue drops | switch counters since "
            "the fault |\n|" + "---|" * 15 + "\n")
    lines = []
    for r in rows:
        if "verified" not in r:
            lines.append(f"| {r['fault']} | {r['pattern']} | {r.get('scheme') or '-'} | "
                         f"{r.get('seed')} | run failed: {r['error']} |" + " |" * 10)
            continue
        c = r["counters"]
        notes = ", ".join(f"{k} {c[k]}" for k in NOTE_COUNTERS if c.get(k)) or "-"
        worst = "-" if r["worst_slowdown"] is None else f"{r['worst_slowdown']:.1f}x"
        ww = "-" if r.get("worst_window") is None else f"{r['worst_window']:.2f}x"
        lines.append(
            f"| {r['fault']} | {r['pattern']} | {r.get('scheme') or '-'} | {r.get('seed')} | "
            f"{'yes' if r['cpu_bound'] else 'no'} | {_s(r['recovery_s'])} "
            f"({_s(r['after_restore_s'])}) | {r['degraded_windows']} "
            f"({r.get('stalled_windows', '-')}) | {ww} | {r['slow']} of {r['after']}"
            + (f" ({_s(r.get('last_slow_s'))})" if r["slow"] else "") + f" | {worst} | "
            f"{r['verified']} of {r['tensors']} | {r['checksum_failed']} / {r['not_delivered']} | "
            f"{r['retrans']} | {r['queue_drops']} | {notes} |")
    return head + "\n".join(lines) + "\n"


def seeds_of(text: str) -> tuple:
    """``1-5``, ``1,3,7`` or ``2`` -> seeds; ValueError naming the value."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if dash else [int(part)]
        except ValueError:
            raise ValueError(f"--seeds: expected seeds like 1-5 or 1,3,7, got {shown(text)}") from None
    if not out:
        raise ValueError(f"--seeds: expected seeds like 1-5 or 1,3,7, got {shown(text)}")
    return tuple(dict.fromkeys(out))
