"""The sweep's outputs from its results directory: CSV, points, PNGs and
summary.md with the effective parameters and the paper-vs-ours table."""
from __future__ import annotations

import json
import time
from pathlib import Path

from bench.sweep import plots
from bench.sweep.plan import PAPER_BASELINES, Plan
from bench.sweep.results import (MECHANISM_METRICS, OUTCOME_METRICS, SPEC_FIELDS, est, find,
                                 load_rows, points, write_csv)
from bench.sweep.stats import CONFIDENCE, overlap

#: issue 11's headline numbers (paper sec. V-B, at 0.8 load): TaLB's reduction
#: against ECMP / RPS / CONGA
PAPER_FCT = {
    "short_fct_mean_s": ("short-flow AFCT", {"ecmp": 0.68, "rps": 0.55, "conga": 0.25}),
    "short_fct_p99_s": ("short-flow p99 FCT", {"ecmp": 0.57, "rps": 0.42, "conga": 0.19}),
    "long_fct_mean_s": ("long-flow AFCT", {"ecmp": 0.61, "rps": 0.51, "conga": 0.29}),
    "all_fct_mean_s": ("overall AFCT", {"ecmp": 0.52, "rps": 0.34, "conga": 0.13}),
}
PAPER_SPEEDUP = 2.37    # "training speed up to 2.37x" (issue 11; testbed, sec. IV-B)
PAPER_LOAD = 0.8
ANALYSIS_FILE = "analysis.md"


def _fmt(e, scale=1e3, digits=1) -> str:
    if e.mean is None:
        return "-"
    s = f"{e.mean * scale:.{digits}f}"
    return s + (f" ± {e.half_width * scale:.{digits}f}" if e.half_width is not None else " (n=1)")


def _verdict(talb, base, lower_is_better=True) -> str:
    if talb.mean is None or base.mean is None:
        return "no data"
    ov = overlap(talb, base)
    if ov is None:
        return "no interval (n < 2)"
    if ov:
        return "no difference (CIs overlap)"
    better = talb.mean < base.mean if lower_is_better else talb.mean > base.mean
    return "TaLB better" if better else "TaLB worse"


def _missing(pts, base, kw) -> str:
    """Why a comparison has no number."""
    if find(pts, scheme=base) is None:
        return "not run"
    here = [find(pts, scheme=s, **kw) for s in ("talb", base)]
    if any(p is not None and p["counted"] == 0 and p["runs"] for p in here):
        return "no counted run (CPU-bound or failed)"
    return "no data"


def paper_vs_ours(plan: Plan, pts: list[dict]) -> list[dict]:
    """One row per headline number: paper's value, ours from this sweep."""
    rows = []
    ref = [p for p in pts if p["agent"] == "default"]
    loads = sorted({p["load"] for p in ref})
    at = PAPER_LOAD if PAPER_LOAD in loads else (loads[-1] if loads else None)
    groups = {(p["topology"], p["model"], p["arch"], p["target_link_bps"]) for p in ref}
    for metric, (what, paper) in PAPER_FCT.items():
        for base in PAPER_BASELINES:
            for g in sorted(groups):
                kw = dict(zip(("topology", "model", "arch", "target_link_bps"), g), agent="default",
                          load=at)
                t, b = est(find(ref, scheme="talb", **kw), metric), est(find(ref, scheme=base, **kw), metric)
                ours = (1 - t.mean / b.mean) if t.mean is not None and b.mean else None
                rows.append({"number": f"{what} reduction vs {base.upper()}", "paper": f"−{paper[base]:.0%}",
                             "ours": "-" if ours is None else f"{-ours:+.0%}",
                             "where": f"{Path(g[0]).stem}, {g[1]}, load {at:g}" if at is not None else "-",
                             "talb_ms": _fmt(t), "base_ms": _fmt(b),
                             "verdict": _verdict(t, b) if ours is not None else
                             _missing(ref, base, kw)})
    for base in PAPER_BASELINES:
        best = None
        for p in ref:
            if p["scheme"] != "talb":
                continue
            q = find(ref, **{k: p[k] for k in ("topology", "model", "arch", "target_link_bps",
                                                "load")}, scheme=base)
            t, b = p["est"]["samples_per_s"], est(q, "samples_per_s")
            if t.mean and b.mean and (best is None or t.mean / b.mean > best[0]):
                best = (t.mean / b.mean, p, t, b)
        row = {"number": f"training speed-up vs {base.upper()} (largest)", "paper": f"up to {PAPER_SPEEDUP}×"}
        if best is None:
            row.update(ours="-", where="-", talb_ms="-", base_ms="-",
                       verdict="not run" if find(ref, scheme=base) is None else "no data")
        else:
            r, p, t, b = best
            row.update(ours=f"{r:.2f}×", where=f"{p['model']}, {p['target_link_bps'] / 1e9:g}G, "
                       f"load {p['load']:g}", talb_ms=_fmt(t, 1, 1), base_ms=_fmt(b, 1, 1),
                       verdict=_verdict(t, b, lower_is_better=False))
        rows.append(row)
    return rows


def _points_table(pts, metrics) -> str:
    cols = ["topology", "model", "scheme", "agent", "load", "rate", "n", "excluded"] + \
        [m.replace("_fct_", " ").removesuffix("_s").replace("samples_per", "samples/s")
         .replace("_pct", "").replace("_", " ") for m in metrics]
    prow = []
    for p in sorted(pts, key=lambda p: (p["topology"], p["model"], p["agent"], p["target_link_bps"],
                                        p["load"], plots._series_order([p["scheme"]])[0])):
        vals = []
        for m in metrics:
            scale = 1e3 if "fct" in m or m.endswith("_mean_s") else (100 if m.endswith("_gap") else 1)
            vals.append(_fmt(p["est"][m], scale, 2 if m == "uplink_spread" else 1))
        prow.append([Path(p["topology"]).stem, p["model"], p["scheme"], p["agent"], f"{p['load']:g}",
                     f"{p['target_link_bps'] / 1e9:g}G", p["counted"],
                     p["cpu_bound"] + p["failed"], *vals])
    return _md_table(cols, prow)


def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _ablation_md(pts) -> list[str]:
    """Setting x load: TaLB's FCTs under each agent setting, against the
    default setting's (CI overlap = no difference) and ECMP's."""
    L = ["## Ablation: agent settings", "",
         "TaLB under each named agent setting (bench/sweep/plan.py AGENT_SETTINGS); "
         "`paper` is the paper's literal reading. Verdicts against `default` from the 95% "
         "intervals.", ""]
    rows = []
    for load in sorted({p["load"] for p in pts}):
        dflt = find(pts, scheme="talb", agent="default", load=load)
        ecmp = find(pts, scheme="ecmp", load=load)
        for p in sorted((p for p in pts if p["scheme"] == "talb" and p["load"] == load),
                        key=lambda p: p["agent"]):
            rows.append([f"{load:g}", p["agent"], p["counted"],
                         _fmt(p["est"]["short_fct_mean_s"]), _fmt(p["est"]["short_fct_p99_s"]),
                         _fmt(p["est"]["all_fct_mean_s"]),
                         "-" if p["agent"] == "default" else
                         _verdict(p["est"]["short_fct_mean_s"], est(dflt, "short_fct_mean_s"))
                         .replace("TaLB", "setting"),
                         _verdict(p["est"]["short_fct_mean_s"], est(ecmp, "short_fct_mean_s"))])
    L += [_md_table(["load", "setting", "n", "short AFCT ms", "short p99 ms", "all AFCT ms",
                     "short AFCT vs default", "short AFCT vs ECMP"], rows), ""]
    return L


def _machine() -> dict:
    from workload.experiment import software_versions

    return software_versions()


def finish(plan: Plan, out: Path, report: dict | None = None, wall_s: float | None = None) -> dict:
    """CSV, points, plots and summary.md from what ``out`` holds now."""
    out = Path(out)
    failed = (report or {}).get("failed")
    if failed is None and (out / "failed.json").exists():
        failed = json.loads((out / "failed.json").read_text())
    rows = load_rows(plan, out, failed)
    write_csv(rows, out / "runs.csv")
    pts = points(rows)
    (out / "points.json").write_text(json.dumps(
        [{**{k: v for k, v in p.items() if k != "est"},
          "est": {m: e.to_dict() for m, e in p["est"].items()}} for p in pts], indent=1))
    manifest = plots.render(plan.figure, pts, out, plan.description.split(":")[0])
    pvo = paper_vs_ours(plan, pts)
    md = _summary_md(plan, out, rows, pts, pvo, manifest, wall_s)
    (out / "summary.md").write_text(md)
    return {"rows": rows, "points": pts, "paper_vs_ours": pvo, "plots": manifest}


def _summary_md(plan, out, rows, pts, pvo, manifest, wall_s) -> str:
    sw = _machine()
    st = {s: sum(r["status"] == s for r in rows) for s in ("ok", "cpu_bound", "failed", "missing")}
    first = plan.runs[0] if plan.runs else None
    # the code the runs ran on (each results file says), not the one writing this report
    ran_on = sorted({r["commit"] for r in rows if r.get("commit")})
    L = [f"# talb bench: {plan.name}", "", plan.description, "",
         f"Runs made at commit {', '.join(ran_on) or '-'}. Report written "
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit "
         f"{sw['commit']}{' (dirty)' if sw['commit_dirty'] else ''}, kernel {sw['kernel']}, "
         f"{sw['cpus']} CPUs, Python {sw['python']}."
         + (f" Wall time of this invocation: {wall_s / 60:.1f} min." if wall_s else ""), "",
         f"Runs: {len(rows)} planned, {st['ok']} counted, {st['cpu_bound']} CPU-bound (excluded), "
         f"{st['failed']} failed, {st['missing']} not run yet.", ""]
    if plan.skipped_schemes:
        L += [f"**Schemes skipped** (not implemented by the data path yet, --skip-missing): "
              f"{', '.join(plan.skipped_schemes)}.", ""]
    L += ["## Effective parameters", ""]
    if first:
        dims = {f: sorted({getattr(r, f) for r in plan.runs}, key=str) for f in SPEC_FIELDS}
        L += [_md_table(["parameter", "values"], [[k, ", ".join(str(v) for v in vs)]
                                                   for k, vs in dims.items()]), ""]
        agents = {r.agent: dict(r.agent_opts) for r in plan.runs}
        L += ["Agent settings (AgentConfig fields over the defaults of agent/config.py): "
              + "; ".join(f"`{k}` {v or '{}'}" for k, v in agents.items()) + ".", ""]
    if plan.keeps:
        L += ["Kept from the paper:", ""] + [f"- {k}" for k in plan.keeps] + [""]
    if plan.changes:
        L += ["Changed to fit this machine:", ""] + [f"- {c}" for c in plan.changes] + [""]
    L += ["## Paper vs ours", "",
          f"Ours: TaLB against the baseline at the same point of this sweep (mean over seeds; "
          f"reduction = 1 − TaLB/baseline, shown negative when TaLB is lower). Verdict from the "
          f"{CONFIDENCE:.0%} intervals (Student t over the seeds): overlapping intervals are "
          f"**no difference**. The paper's FCT numbers come from its 100G simulation "
          f"(sec. V-B), its speed-up from its testbed (sec. IV-B).", "",
          _md_table(["number", "paper", "ours", "where", "TaLB", "baseline", "verdict"],
                    [[r["number"], r["paper"], r["ours"], r["where"], r["talb_ms"], r["base_ms"],
                      r["verdict"]] for r in pvo]),
          "", "FCTs in ms, speeds in samples/s at target scale; ± is the 95% half-width.", ""]
    if plan.figure == "ablation":
        L += _ablation_md(pts)
    analysis = out / ANALYSIS_FILE
    if analysis.exists():      # hand-written findings, kept when the report is redone
        L += ["## Analysis: why ours differ from the paper's", "",
              f"(from `{ANALYSIS_FILE}` in this directory)", "", analysis.read_text().strip(), ""]
    L += ["## Points", "", "Mean ± 95% half-width over the counted seeds (n); FCT in ms.", ""]
    L += [_points_table(pts, OUTCOME_METRICS), "", "`ideal gap` in % (1 − samples/s over the "
          "compute-bound speed); censored tensors (sent, never received) are counted in "
          "runs.csv, never given an FCT.", ""]
    L += ["### Where the time goes", "",
          "Per point: `hol` % of all tensors' FCT spent behind earlier tensors of the same "
          "TCP connection (head of line: TCP delivers a connection's bytes in order, so no "
          "path or queue priority shortens it); `short service mean` ms a short tensor's own "
          "time, from when it could first move to its delivery (bench/sweep/results.py "
          "service_times); `access gap` % = 1 − samples/s over the speed the hosts' own links allow "
          "(every iteration at least its compute and the busiest host link's training bytes, "
          "e.g. the PS's incast: what no load balancer can beat; bench/sweep/results.py); "
          "`tcp retrans` % of the training hosts' segments retransmitted; `tcp timeouts` "
          "RTOs per run; `rto tail` % of measured tensors slower than the 200 ms minimum RTO "
          "(most of them waited for a timeout); `uplink spread` (max − min)/mean of the bytes a leaf sent up each "
          "uplink (0 = even); `drops` packets dropped per run at the switches' port queues, "
          "by where the port leads: to a host (the incast), leaf up to a spine (the "
          "balancer's choice), spine down to a leaf ('-': runs from before drops were read).", "",
          _points_table(pts, MECHANISM_METRICS), ""]
    flagged = [r for r in rows if r["status"] == "cpu_bound"]
    L += ["## Runs excluded", ""]
    if flagged:
        L += ["CPU-bound (the CPU guard, docs/workload.md):", ""] + \
             [f"- `{r['key']}` {r['scheme']} load {r['load']:g} seed {r['seed']}: {r.get('cpu_guard')}"
              for r in flagged] + [""]
    bad = [r for r in rows if r["status"] in ("failed", "missing")]
    if bad:
        L += ["Failed or not run:", ""] + \
             [f"- `{r['key']}` {r['scheme']} load {r['load']:g} seed {r['seed']}: "
              f"{r['status']}{': ' + r['error'] if r.get('error') else ''}" for r in bad] + [""]
    if not flagged and not bad:
        L += ["None.", ""]
    L += ["## Figures", ""] + [f"![{name}]({name})" for name in manifest] + [""]
    L += ["## Statistics", "", "Per point: mean over the seeds and a two-sided 95% confidence "
          "interval mean ± t(0.975, n−1)·s/√n (Student t; quantiles from a table, "
          "bench/sweep/stats.py, as scipy is not installed). CPU-bound runs are excluded. "
          "Two schemes whose intervals overlap are reported as no difference.", ""]
    return "\n".join(L)
