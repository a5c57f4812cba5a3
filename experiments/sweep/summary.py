"""The sweep's outputs from its results directory: CSV, points, PNGs,
paired.csv (every scheme pair at every point, paired by seed) and summary.md
with the effective parameters and the paper-vs-ours table (paired verdicts,
experiments/sweep/stats.py)."""
from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

from experiments.sweep import directions, pairing, plots, regime_shift
from experiments.sweep.labels import caveat_md, scheme_label
from experiments.sweep.plan import PAPER_BASELINES, Plan, arm
from experiments.sweep.results import (CELL_FIELDS, MECHANISM_METRICS, OUTCOME_METRICS,
                                       POINT_FIELDS, SPEC_FIELDS, est, field, find, load_rows,
                                       points, seed_values,
                                       write_csv)
from workload.measure import OFFERED_SATURATION
from experiments.sweep.stats import (ALPHA, BOOTSTRAP_MIN_N, EQUIV_MARGIN, Paired, holm, holm_by,
                                     interaction, paired)

#: issue 11's headline numbers (paper sec. V-B, at 0.8 load): TaLB's reduction
#: against ECMP / RPS / CONGA. The paper's FCT is a flow's, from its first
#: packet: ours to compare is the network FCT (first packet on the wire ->
#: delivered, docs/workload.md), with the FCT from the hand-off to the socket
#: (FCT_FROM_HANDOFF) shown beside it.
PAPER_FCT = {
    "short_netfct_mean_s": ("short-flow AFCT", {"ecmp": 0.68, "rps": 0.55, "conga": 0.25}),
    "short_netfct_p99_s": ("short-flow p99 FCT", {"ecmp": 0.57, "rps": 0.42, "conga": 0.19}),
    "long_netfct_mean_s": ("long-flow AFCT", {"ecmp": 0.61, "rps": 0.51, "conga": 0.29}),
    "all_netfct_mean_s": ("overall AFCT", {"ecmp": 0.52, "rps": 0.34, "conga": 0.13}),
}
#: network FCT metric -> the same statistic of the FCT from the hand-off
FCT_FROM_HANDOFF = {m: m.replace("_netfct_", "_fct_") for m in PAPER_FCT}
#: what a network-FCT row says when its runs never recorded wire times: it is
#: judged on the FCT from the hand-off instead (see _headline_row)
NO_NETFCT = "on the FCT from the hand-off: no network FCT in these runs (recorded before wire times)"
PAPER_SPEEDUP = 2.37    # "training speed up to 2.37x": the abstract, naming no figure (issue 11;
                        # the testbed's Fig. 9 text, sec. IV-B, tops out at +121.4%, 2.21x)
PAPER_LOAD = 0.8
ANALYSIS_FILE = "analysis.md"


def _fmt(e, scale=1e3, digits=1) -> str:
    if e.mean is None:
        return "-"
    s = f"{e.mean * scale:.{digits}f}"
    return s + (f" ± {e.half_width * scale:.{digits}f}" if e.half_width is not None else " (n=1)")


#: what the comparisons of TaLB and a baseline hold fixed: TaLB on pool
#: connections is compared with a baseline on pool connections, under the
#: same placement and minimum RTO
_GROUP = ("topology", "model", "arch", "target_link_bps", "connections", "placement", "rto_min",
          "regime", "scheduler", "comm", "fusion")
#: paired.csv's cells: every arm of a point, connection models and minimum
#: RTOs included (runs of a seed share its background plan whatever they are;
#: a placement other than spread changes the background's senders)
_CELL = tuple(f for f in _GROUP if f not in ("connections", "rto_min", "scheduler", "comm",
                                             "fusion"))


def _groups(pts) -> list[tuple]:
    """The points' groups (_GROUP values), sorted (None, the topology's RTO, first)."""
    return sorted({tuple(p[f] for f in _GROUP) for p in pts},
                  key=lambda g: tuple((0, "") if v is None else (1, v) for v in g))


def _axes(g) -> str:
    """A group's connection model, placement and minimum RTO for a label,
    each where not the default ("" for one connection per pair, spread, the
    topology's RTO). ``g``: a tuple in _GROUP's order, or a row or point."""
    d = dict(zip(_GROUP, g)) if isinstance(g, tuple) else g
    c, pl, rto = d.get("connections"), d.get("placement"), d.get("rto_min")
    reg = d.get("regime")
    return ("" if c in (None, "pair") else f", {c} connections") + \
        ("" if pl in (None, "spread") else f", placement {pl}") + \
        ("" if rto is None else f", rto_min {rto}") + \
        ("" if reg is None else f", regime {reg}") + \
        ("" if d.get("scheduler") in (None, "bytescheduler") else f", scheduler {d['scheduler']}") + \
        ("" if d.get("comm") in (None, "ps") else f", comm {d['comm']}") + \
        ("" if d.get("fusion") is None else f", fusion {d['fusion']}")
#: the headline numbers TaLB is compared on, lower is better but for the speed
COMPARED = ("short_fct_mean_s", "short_fct_p99_s", "long_fct_mean_s", "all_fct_mean_s",
            "samples_per_s")


def _lower_better(metric: str) -> bool:
    return metric != "samples_per_s"


def _unit(metric: str) -> tuple[float, str]:
    return (1.0, "samples/s") if metric == "samples_per_s" else (1e3, "ms")


def compare(rows: list[dict], metric: str, a: dict, b: dict) -> tuple[Paired, list]:
    """a against b paired by seed (the counted runs matching each), and the
    seeds one side has and the other lacks (nothing to pair)."""
    va, vb = seed_values(rows, metric, **a), seed_values(rows, metric, **b)
    seeds = sorted(set(va) | set(vb))
    pr = paired([va.get(s) for s in seeds], [vb.get(s) for s in seeds],
                lower_is_better=_lower_better(metric))
    lone = [s for s in seeds if va.get(s) is None or vb.get(s) is None]
    return pr, lone


def _diff(pr: Paired, metric: str) -> str:
    if pr.diff.mean is None:
        return "-"
    k, u = _unit(metric)
    d = 0 if k == 1 else 1
    if pr.diff.low is None:
        return f"{pr.diff.mean * k:+.{d}f} {u} (n=1)"
    s = f"{pr.diff.mean * k:+.{d}f} [{pr.diff.low * k:+.{d}f}, {pr.diff.high * k:+.{d}f}] {u}"
    if pr.bootstrap:
        s += f" (bootstrap [{pr.bootstrap[0] * k:+.{d}f}, {pr.bootstrap[1] * k:+.{d}f}])"
    return s


def bootstrap_md(table: list[dict]) -> str:
    """One sentence: in how many of paired.csv's comparisons (``table``) with
    a bootstrap interval on the tested scale it decides as the t interval
    does (stats.Paired.bootstrap_agrees)."""
    checked = [r["boot_agrees"] for r in table if r.get("boot_agrees") is not None]
    if not checked:
        return (f"No comparison has {BOOTSTRAP_MIN_N} pairs, so no bootstrap check of the t "
                "intervals.")
    agree = sum(checked)
    return (f"The bootstrap check (paired.csv `boot_agrees`: the percentile bootstrap interval "
            f"of the mean log-ratio, or of the mean difference where the test ran on those, "
            f"excludes no difference exactly when the t interval does) agrees in {agree} of the "
            f"{len(checked)} comparisons with {BOOTSTRAP_MIN_N} or more pairs"
            + ("." if agree == len(checked) else
               f"; where it does not, the t interval's verdict rests on its normality "
               f"assumption ({len(checked) - agree} comparisons, "
               f"{sum(1 for r in table if r.get('boot_agrees') is False and r.get('p') is not None and r['p'] < ALPHA)}"
               f" of them significant by t)."))


def _ratio(pr: Paired, metric: str) -> str:
    if pr.ratio is None:
        return "-"
    if metric == "samples_per_s":
        return f"{pr.ratio:.2f}×" + (f" [{pr.ratio_low:.2f}, {pr.ratio_high:.2f}]"
                                     if pr.ratio_low is not None else "")
    return f"{pr.ratio - 1:+.0%}" + (f" [{pr.ratio_low - 1:+.0%}, {pr.ratio_high - 1:+.0%}]"
                                     if pr.ratio_low is not None else "")


def _tested(pr: Paired, metric: str) -> str:
    """The interval of the test that decides the verdict -- the ratio's (on the
    log-ratios) or, where a value is not positive, the difference's -- with the
    mean difference beside it in the metric's unit."""
    if pr.scale == "log-ratio" and pr.ratio is not None:
        k, u = _unit(metric)
        d = 0 if k == 1 else 1
        return f"{_ratio(pr, metric)} ({pr.diff.mean * k:+.{d}f} {u})"
    return _diff(pr, metric).split(" (bootstrap")[0]


def _p(p) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def _word(v: str, who: str = "TaLB") -> str:
    return f"{who} {v}" if v in ("better", "worse") else v


def _marked(pr: Paired, p_holm, p_equiv_holm) -> str:
    """The uncorrected verdict, † when the Holm-corrected one agrees."""
    v = pr.verdict()
    return v + ("†" if v not in ("inconclusive",) and pr.verdict(p_holm, p_equiv_holm) == v else "")


def paper_sides(pts: list[dict], base: str) -> tuple[dict, dict]:
    """How TaLB and ``base`` queue in the paper's comparison, as far as the
    sweep has it: TaLB with its priority bands, the baseline with FIFOs
    (sec. III: WFQ is part of TaLB's switch; the paper does not say how its
    baselines queue, FIFO is our reading) when
    the sweep ran them so (fig10-paper, fig10-factorial); otherwise each
    as it ran, like for like where both ran alike (every sweep before
    issue 18: bands). Returns the match of each side (scheme, queueing)."""
    def ran(scheme):
        return {p["queueing"] for p in pts if p["scheme"] == scheme}
    qt = "bands" if "bands" in ran("talb") or not ran("talb") else min(ran("talb"))
    qb = ran(base)
    qb = ("fifo" if qt == "bands" and "fifo" in qb else qt if qt in qb or not qb else min(qb))
    return {"scheme": "talb", "queueing": qt}, {"scheme": base, "queueing": qb}


def _sides_note(ta: dict, ba: dict) -> str:
    """The queueing of each side, when it is not the topology's for both."""
    if ta["queueing"] == ba["queueing"] == "bands":
        return ""
    return f"; TaLB {ta['queueing']}, {ba['scheme'].upper()} {ba['queueing']}"


def _sides_md(pvo: list[dict]) -> str:
    """A sentence on the queueing of the compared sides, where it is not the topology's for both."""
    if not any("; TaLB " in r["where"] for r in pvo):
        return ""
    return (" *Where* names each side's queueing (`bands`: the topology's priority bands; "
            "`fifo`: one FIFO per switch port, the same bytes): TaLB with bands against a "
            "baseline with FIFOs is the paper's comparison as we read it (sec. III makes WFQ "
            "part of TaLB's switch and the paper does not say how its baselines queue), and it "
            "mixes routing and queueing; *Routing × queueing* separates them "
            "where the sweep ran both.")


def _missing(rows, pts, base, kw, ta=None, ba=None) -> str:
    """Why a comparison has no number."""
    if find(pts, scheme=base) is None:
        return "not run"
    here = [find(pts, **kw, **side) for side in (ta or {"scheme": "talb"}, ba or {"scheme": base})]
    if any(p is not None and p["counted"] == 0 and p["runs"] for p in here):
        return "no counted run (CPU-bound or failed)"
    return "no data"


def _recorded(rows, metric, kw) -> bool:
    """Some counted run at ``kw`` (any scheme) carries ``metric`` at all: a
    results file from before it was recorded has no such key."""
    return any(metric in r for r in rows
               if r["status"] == "ok" and all(r.get(k) == v for k, v in kw.items()))


def _headline_row(rows, pts, number, paper, metric, base, kw, where) -> dict:
    ta, ba = paper_sides(pts, base)
    where += _sides_note(ta, ba)
    # Runs recorded before wire times (the committed ones up to issue 17 item 4)
    # have no network FCT: the row is judged on the FCT from the hand-off,
    # labelled, and keeps its place in the Holm family, so the other rows'
    # corrections do not change with the age of the data.
    on_handoff = (metric in FCT_FROM_HANDOFF and not _recorded(rows, metric, kw)
                  and _recorded(rows, FCT_FROM_HANDOFF[metric], kw))
    metric = FCT_FROM_HANDOFF[metric] if on_handoff else metric
    pr, lone = compare(rows, metric, {**kw, **ta}, {**kw, **ba})
    t, b = est(find(pts, **kw, **ta), metric), est(find(pts, **kw, **ba), metric)
    k = 1 if metric == "samples_per_s" else 1e3
    row = {"number": number, "paper": paper, "metric": metric, "pair": pr, "where": where,
           "n": pr.n, "unpaired_seeds": lone, "talb_ms": _fmt(t, k), "base_ms": _fmt(b, k),
           "ours": _ratio(pr, metric), "diff": _diff(pr, metric), "p": pr.p,
           "p_equiv": pr.p_equiv, "paper_effect": "-", "ours_handoff": "-", "on_handoff": on_handoff}
    if metric in FCT_FROM_HANDOFF:        # the same number on the FCT from the hand-off
        old = FCT_FROM_HANDOFF[metric]
        pr_old, _ = compare(rows, old, {**kw, **ta}, {**kw, **ba})
        row["pair_handoff"] = pr_old
        row["ours_handoff"] = _ratio(pr_old, old)
    elif on_handoff:                      # the row's own numbers are the hand-off's
        row["pair_handoff"], row["ours_handoff"] = pr, row["ours"]
    if pr.n == 0:
        if find(pts, scheme="talb") is None:
            row["verdict"] = "TaLB not run"
        elif t.mean is None or b.mean is None:
            row["verdict"] = _missing(rows, pts, base, kw, ta, ba)
        else:
            row["verdict"] = "no seed with both runs"
        if t.mean is None or b.mean is None:     # one side has nothing: no seed to name
            row["unpaired_seeds"] = []
    return row


def paper_vs_ours(plan: Plan, pts: list[dict], rows: list[dict] | None = None) -> list[dict]:
    """One row per headline number: the paper's, ours paired by seed (TaLB
    against the baseline at the same point), p-values Holm-corrected across
    the rows in the family (``holm`` True: every row but the largest
    speed-up, which is picked after the fact)."""
    rows = rows or []
    out = []
    ref = [p for p in pts if p["agent"] == "default"]
    loads = sorted({p["load"] for p in ref})
    at = PAPER_LOAD if PAPER_LOAD in loads else (loads[-1] if loads else None)
    groups = _groups(ref)
    # a real MPI job (--clients mpi) has no per-tensor FCT: only its speed is compared
    fct = {} if plan.runs and all(r.client == "mpi" for r in plan.runs) else PAPER_FCT
    for metric, (what, paper) in fct.items():
        for base in PAPER_BASELINES:
            for g in groups:
                kw = {**dict(zip(_GROUP, g)), "agent": "default", "load": at}
                r = _headline_row(rows, ref, f"{what} vs {base.upper()}", f"−{paper[base]:.0%}",
                                  metric, base, kw,
                                  f"{Path(g[0]).stem}, {g[1]}{_axes(g)}, load {at:g}")
                # The paper's numbers are at its "overall workload" 0.8 (sec. V-A): training
                # and background. The 4-spine presets' top background load (0.4) is where
                # their measured total reaches ~0.8 (plan.TOP_LOAD), so a sweep without 0.8
                # is compared at its top load; the row's "where" names it.
                if r["pair"].ratio_low is not None:
                    r["paper_effect"] = r["pair"].excludes_ratio(1 - paper[base])
                out.append({**r, "holm": True})
    for base in PAPER_BASELINES:
        for g in groups:
            kw = {**dict(zip(_GROUP, g)), "agent": "default", "load": at}
            out.append({**_headline_row(rows, ref, f"training speed vs {base.upper()}",
                                        f"up to {PAPER_SPEEDUP}× (its abstract)",
                                        "samples_per_s", base, kw,
                                        f"{g[1]}, {g[3] / 1e9:g}G{_axes(g)}, load {at:g}"),
                        "holm": True})
    for base in PAPER_BASELINES:
        best = None
        ta, ba = paper_sides(ref, base)
        for p in ref:
            if p["scheme"] != "talb" or p["queueing"] != ta["queueing"]:
                continue
            kw = {k: p[k] for k in (*_GROUP, "load", "agent")}
            pr, _ = compare(rows, "samples_per_s", {**kw, **ta}, {**kw, **ba})
            if pr.ratio and (best is None or pr.ratio > best[0]):
                best = (pr.ratio, p, kw)
        number = f"training speed-up vs {base.upper()} (largest over the points)"
        if best is None:
            out.append({"number": number, "paper": f"up to {PAPER_SPEEDUP}×", "metric":
                        "samples_per_s", "pair": None, "where": "-", "n": 0, "unpaired_seeds": [],
                        "talb_ms": "-", "base_ms": "-", "ours": "-", "diff": "-", "p": None,
                        "p_equiv": None, "paper_effect": "-", "holm": False,
                        "verdict": "not run" if find(ref, scheme=base) is None else "no data"})
            continue
        _, p, kw = best
        r = _headline_row(rows, ref, number, f"up to {PAPER_SPEEDUP}×", "samples_per_s", base, kw,
                          f"{p['model']}, {p['target_link_bps'] / 1e9:g}G{_axes(p)}, "
                          f"load {p['load']:g}")
        r["paper_effect"] = r["pair"].excludes_ratio(PAPER_SPEEDUP) or "-"
        out.append({**r, "holm": False})
    fam = [r for r in out if r["holm"]]
    for key in ("p", "p_equiv"):
        for r, q in zip(fam, holm([r[key] for r in fam])):
            r[key + "_holm"] = q
    for r in out:
        if "verdict" not in r:
            if r["holm"]:
                r["verdict"] = _word(r["pair"].verdict(r["p_holm"], r["p_equiv_holm"]))
            else:
                r["verdict"] = _word(r["pair"].verdict()) + " (uncorrected)"
        if r.get("on_handoff") and r["n"]:       # a row with numbers: say which FCT
            r["verdict"] += f"; {NO_NETFCT}"
    return out


def _headline_md(pvo) -> list[str]:
    cols = ["number", "paper", "ours: TaLB/baseline − 1 [95% CI]", "TaLB − baseline [95% CI]",
            "where", "n", "p (Holm)", "verdict", "paper's effect",
            "FCT from the hand-off: TaLB/baseline − 1"]
    body = []
    for r in pvo:
        p = _p(r["p"]) + (f" ({_p(r.get('p_holm'))})" if r["holm"] and r["p"] is not None else "")
        n = f"{r['n']}" + (f" (seed {', '.join(map(str, r['unpaired_seeds']))} unpaired)"
                           if r["unpaired_seeds"] else "")
        body.append([r["number"], r["paper"], r["ours"], r["diff"], r["where"], n, p,
                     r["verdict"], r["paper_effect"], r.get("ours_handoff", "-")])
    return [md_table(cols, body)]


def paired_table(rows: list[dict], pts: list[dict]) -> list[dict]:
    """Every pair of schemes (and agent settings) at every point, on every
    outcome metric, paired by seed: the rows of paired.csv (raw p-values)."""
    cells: dict[tuple, set] = {}
    for p in pts:
        cells.setdefault(tuple(p[f] for f in (*_CELL, "load")), set()).add(
            (p["scheme"], p["queueing"], p["connections"], p["agent"], p["rto_min"]))
    out = []

    def name(s, q, c, a, rto):
        return arm(s, q, c) + ("" if a == "default" else f"/{a}") + \
            ("" if rto is None else f"/rto={rto}")
    for cell, members in sorted(cells.items(), key=lambda c: tuple(map(str, c[0]))):
        kw = dict(zip((*_CELL, "load"), cell))
        ms = sorted(members, key=lambda m: (plots.series_order([m[0]])[0], m[1], m[2], m[3],
                                            str(m[4])))
        for i, (sa, qa, ca, aa, ra) in enumerate(ms):
            for sb, qb, cb, ab, rb in ms[i + 1:]:
                for metric in OUTCOME_METRICS:
                    pr, lone = compare(rows, metric, {**kw, "scheme": sa, "queueing": qa,
                                                      "connections": ca, "agent": aa,
                                                      "rto_min": ra},
                                       {**kw, "scheme": sb, "queueing": qb, "connections": cb,
                                        "agent": ab, "rto_min": rb})
                    out.append({**kw, "a": name(sa, qa, ca, aa, ra), "b": name(sb, qb, cb, ab, rb),
                                "metric": metric, **pr.to_dict(),
                                "unpaired_seeds": " ".join(map(str, lone))})
    return out


# --- routing x queueing (issue 18) ----------------------------------------------------------
#: the decomposition's rows: key -> (what, the sides a and b as the verdict names them);
#: {B} is the baseline. T/X: TaLB/the baseline; B/F: the priority bands/one FIFO per port.
EFFECTS = {
    "gain": ("TaLB's gain, the paper's comparison: (T,B) − (X,F)", ("TaLB+bands", "{B}+FIFO")),
    "routing_fifo": ("routing, under FIFO: (T,F) − (X,F)", ("TaLB", "{B}")),
    "queueing_base": ("queueing, for {B}: (X,B) − (X,F)", ("bands", "FIFO")),
    "interaction": ("interaction: ((T,B) − (T,F)) − ((X,B) − (X,F))", ("TaLB", "{B}")),
    "routing_bands": ("routing, under bands: (T,B) − (X,B)", ("TaLB", "{B}")),
    "queueing_talb": ("queueing, for TaLB: (T,B) − (T,F)", ("bands", "FIFO")),
}
#: the metrics the routing x queueing decomposition covers (factorial.csv): the
#: headline numbers, on the network FCT (what the paper's flow FCT measures) and
#: from the hand-off
FACTORIAL_METRICS = ("short_netfct_mean_s", "short_netfct_p99_s", "long_netfct_mean_s",
                     "all_netfct_mean_s", *COMPARED)
#: the ones summary.md shows
FACTORIAL_MD_METRICS = ("short_netfct_mean_s", "short_fct_mean_s", "samples_per_s")


def _number(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _on(va: dict, vb: dict, seeds: list, lower: bool) -> Paired:
    return paired([va[s] for s in seeds], [vb[s] for s in seeds], lower_is_better=lower)


def factorial_table(rows: list[dict], pts: list[dict]) -> list[dict]:
    """Where TaLB and a baseline each ran under both queueings at a point
    (fig10-factorial): per metric, the decomposition of EFFECTS, paired by
    seed. A baseline's rows use the seeds where all four cells have a
    counted run, so that gain = routing under FIFO + queueing for the
    baseline + interaction holds seed by seed, and in the means; TaLB's
    queueing effect uses every seed with both of TaLB's runs. p-values
    Holm-corrected per metric across the table's rows; verdicts from them."""
    ref = [p for p in pts if p["agent"] == "default"]
    out = []
    for g in _groups(ref):
        for load in sorted({p["load"] for p in ref if tuple(p[f] for f in _GROUP) == g}):
            kw = {**dict(zip(_GROUP, g)), "load": load, "agent": "default"}
            ran = {(p["scheme"], p["queueing"]) for p in ref if all(p[k] == v for k, v in kw.items())}
            bases = [b for b in plots.series_order(sorted({s for s, _ in ran} - {"talb"}))
                     if {(b, "bands"), (b, "fifo")} <= ran]
            if not {("talb", "bands"), ("talb", "fifo")} <= ran or not bases:
                continue
            for metric in FACTORIAL_METRICS:
                lower = _lower_better(metric)
                v = {(s, q): {k: x for k, x in seed_values(rows, metric, **kw, scheme=s,
                                                           queueing=q).items() if _number(x)}
                     for s in ("talb", *bases) for q in ("bands", "fifo")}
                tb, tf = v["talb", "bands"], v["talb", "fifo"]

                def row(base, effect, pr, seeds):
                    return {**kw, "metric": metric, "baseline": base, "effect": effect, "pair": pr,
                            "n": pr.n, "seeds": seeds}
                both = sorted(set(tb) & set(tf))
                out.append(row(None, "queueing_talb", _on(tb, tf, both, lower), both))
                for b in bases:
                    xb, xf = v[b, "bands"], v[b, "fifo"]
                    four = sorted(set(both) & set(xb) & set(xf))
                    out += [row(b, "gain", _on(tb, xf, four, lower), four),
                            row(b, "routing_fifo", _on(tf, xf, four, lower), four),
                            row(b, "queueing_base", _on(xb, xf, four, lower), four),
                            row(b, "interaction", interaction(tb, tf, xb, xf, four, lower), four),
                            row(b, "routing_bands", _on(tb, xb, four, lower), four)]
    holm_by(out, "metric")
    for r in out:
        r["verdict"] = _effect_verdict(r)
    return out


def _effect_verdict(r: dict) -> str:
    base = (r["baseline"] or "").upper()
    v = r["pair"].verdict(r["p_holm"], r["p_equiv_holm"])
    a, b = (x.format(B=base) for x in EFFECTS[r["effect"]][1])
    if r["effect"] == "interaction":
        return {"better": f"bands favour {a}", "worse": f"bands favour {b}"}.get(
            v, "no interaction (within ±10%)" if v.startswith("equivalent") else v)
    return {"better": f"{a} better", "worse": f"{b} better"}.get(v, v)


def factorial_csv_rows(table: list[dict]) -> list[dict]:
    out = []
    for r in table:
        d = r["pair"].to_dict()
        d.pop("verdict")
        out.append({**{k: r[k] for k in (*_GROUP, "load", "metric", "baseline", "effect", "n")},
                    "seeds": " ".join(map(str, r["seeds"])), **d, "p_holm": r["p_holm"],
                    "p_equiv_holm": r["p_equiv_holm"], "verdict": r["verdict"]})
    return out


def _factorial_md(table: list[dict]) -> list[str]:
    if not table:
        return []
    many = len({tuple(r[f] for f in _GROUP) for r in table}) > 1
    L = ["## Routing × queueing: where TaLB's gain comes from", "",
         "Each seed's runs of TaLB (T) and a baseline (X), each with the priority bands (B) and "
         "with one FIFO per switch port (F), give per seed TaLB's gain in the paper's comparison "
         "as we read it (WFQ for TaLB's switch, sec. III; the paper does not say how its "
         "baselines queue), (T,B) − (X,F), and its parts: **routing** under FIFO (T,F) − "
         "(X,F), **queueing** for "
         "the baseline (X,B) − (X,F), and their **interaction** ((T,B) − (T,F)) − ((X,B) − "
         "(X,F)). The three add up to the gain seed by seed, so their means do too: a "
         "baseline's rows use the seeds where all four runs were counted. Also shown: routing "
         "under bands (= routing under FIFO + interaction) and queueing for TaLB (= queueing "
         "for the baseline + interaction; over every seed with both of TaLB's runs). Each: the "
         "mean per-seed difference and its 95% paired-t interval; the ratio (geometric mean of "
         "the per-seed ratios − 1; for the interaction (T,B)/(T,F) over (X,B)/(X,F)) and its "
         "interval; p of the paired t on the per-seed log-ratios (the ratio's interval is "
         "its interval; on the differences only where a value is not positive), "
         "Holm-corrected across the rows of the metric's table; "
         "the verdict from the corrected p-values: the better side, or equivalent within "
         f"±{EQUIV_MARGIN:.0%} (TOST on the log-ratio), else inconclusive; for the interaction, "
         "whether the bands favour TaLB or the baseline (the ratio of ratios ≠ 1), or no interaction "
         f"(the ratio of ratios within 1 ± {EQUIV_MARGIN:.0%}). Every compared metric, on "
         "the network FCT and from the hand-off: "
         "`factorial.csv`.", ""]
    for metric in FACTORIAL_MD_METRICS:
        fam = [r for r in table if r["metric"] == metric]
        if not fam:
            continue
        k, u = _unit(metric)
        L += [f"### {dict(_METRIC_NAMES).get(metric, metric)} ({u})", ""]
        body = []
        for r in fam:
            pr = r["pair"]
            grp = [f"{Path(r['topology']).stem}, {r['model']}, {r['target_link_bps'] / 1e9:g}G"
                   f"{_axes(r)}"] if many else []
            body.append(grp + [f"{r['load']:g}", (r["baseline"] or "-").upper(),
                               EFFECTS[r["effect"]][0].format(B=(r["baseline"] or "").upper()),
                               str(pr.n), _diff(pr, metric).rsplit(" ", 1)[0] if pr.n else "-",
                               _ratio(pr, metric),
                               _p(pr.p) + (f" ({_p(r['p_holm'])})" if pr.p is not None else ""),
                               r["verdict"]])
        L += [md_table((["group"] if many else []) + ["load", "vs", "effect", "n",
                                                       "mean [95% CI]", "ratio [95% CI]",
                                                       "p (Holm)", "verdict"], body), ""]
    return L


def _regime_shift_md(table: list[dict]) -> list[str]:
    """summary.md's section on how TaLB's gain and its parts move from deep
    buffers to each other regime (regime_shift.py)."""
    if not table:
        return []
    many = len({tuple(r.get(f) for f in _GROUP if f != "regime") for r in table}) > 1
    L = ["## From deep buffers to each regime: how the gain and its parts move", "",
         "For each seed, an effect's ratio in a regime (e.g. routing under the bands, "
         "(T,B)/(X,B)) over the same seed's ratio under deep buffers: the ratio of ratios − 1 "
         "(geometric mean over the seeds with every arm the baseline's effects compare counted "
         "in both regimes: all four in a factorial, TaLB's and the baseline's in a design "
         "that follows TaLB's gain only) and its "
         "95% paired-t interval on the logs, p of that t test Holm-corrected per metric across "
         "this table's rows; the verdict says towards which side the effect moves in the "
         f"regime, or unchanged within ±{EQUIV_MARGIN:.0%} (TOST), else inconclusive. "
         "Every compared metric: `regime_shift.csv`.", ""]
    for metric in ("short_netfct_mean_s", "samples_per_s"):
        fam = [r for r in table if r["metric"] == metric]
        if not fam:
            continue
        L += [f"### {dict(_METRIC_NAMES).get(metric, metric)}", ""]
        body = []
        for r in fam:
            pr = r["pair"]
            grp = [f"{Path(r['topology']).stem}, {r['model']}, {r['target_link_bps'] / 1e9:g}G"
                   f"{_axes({**r, 'regime': None})}"] if many else []
            ratio = "-" if pr.ratio is None else (
                f"{pr.ratio - 1:+.0%}" + (f" [{pr.ratio_low - 1:+.0%}, {pr.ratio_high - 1:+.0%}]"
                                          if pr.ratio_low is not None else ""))
            what = regime_shift.SHIFT_EFFECTS[r["effect"]][0].format(B=r["baseline"].upper())
            body.append(grp + [f"{r['load']:g}", r["baseline"].upper(), what, r["regime"],
                               str(pr.n), ratio,
                               _p(pr.p) + (f" ({_p(r['p_holm'])})" if pr.p is not None else ""),
                               r["verdict"]])
        L += [md_table((["group"] if many else []) + ["load", "vs", "effect", "regime", "n",
                                                       "in the regime / under deep [95% CI]",
                                                       "p (Holm)", "verdict"], body), ""]
    return L


_METRIC_NAMES = (("short_fct_mean_s", "short-tensor AFCT, from the hand-off"),
                 ("short_fct_p99_s", "short-tensor p99, from the hand-off"),
                 ("long_fct_mean_s", "long-tensor AFCT, from the hand-off"),
                 ("all_fct_mean_s", "overall AFCT, from the hand-off"),
                 ("short_netfct_mean_s", "short-tensor AFCT, network FCT"),
                 ("short_netfct_p99_s", "short-tensor p99, network FCT"),
                 ("long_netfct_mean_s", "long-tensor AFCT, network FCT"),
                 ("all_netfct_mean_s", "overall AFCT, network FCT"),
                 ("samples_per_s", "training speed"))


def _talb_pairs_md(rows, pts) -> list[str]:
    """Per group and load: TaLB (default setting) against each other scheme on
    the compared metrics; Holm across the whole table."""
    ref = [p for p in pts if p["agent"] == "default"]
    if not find(ref, scheme="talb"):
        return []
    cells = []
    for g in _groups(ref):
        gkw = dict(zip(_GROUP, g))
        for load in sorted({p["load"] for p in ref if tuple(p[f] for f in _GROUP) == g}):
            kw = {**gkw, "load": load, "agent": "default"}
            here = [p for p in ref if all(p[k] == v for k, v in kw.items())]
            ran = {}
            for p in here:
                ran.setdefault(p["scheme"], set()).add(p["queueing"])
            # TaLB under each queueing against each scheme under the same one, or,
            # where a scheme never ran under it, under its own (fig10-paper)
            for qt in sorted(ran.get("talb", ()), key=("bands", "fifo").index):
                for base in plots.series_order(sorted(set(ran) - {"talb"})):
                    for qb in (sorted(ran[base]) if qt not in ran[base] else [qt]):
                        cells.append((g, load, qt, arm(base, qb), [
                            compare(rows, m, {**kw, "scheme": "talb", "queueing": qt},
                                    {**kw, "scheme": base, "queueing": qb})[0] for m in COMPARED]))
    if not cells:
        return []
    flat = [pr for *_, prs in cells for pr in prs]
    ph, peh = holm([pr.p for pr in flat]), holm([pr.p_equiv for pr in flat])
    # the tests the table holds: its cells with a test (an outcome a sweep did not
    # measure, e.g. the FCTs of an MPI job, is a cell but no test)
    tests = sum(pr.p is not None for pr in flat)
    many = len({c[0] for c in cells}) > 1
    queueings = any(c[2] != "bands" or "/" in c[3] for c in cells)
    body, i = [], 0
    for g, load, qt, base, prs in cells:
        line = ([f"{Path(g[0]).stem}, {g[1]}, {g[3] / 1e9:g}G{_axes(g)}"] if many else []) + \
            [f"{load:g}"] + ([arm("talb", qt)] if queueings else []) + \
            [scheme_label(base, g[0]), str(min(pr.n for pr in prs))]
        for m, pr in zip(COMPARED, prs):
            line.append(f"{_tested(pr, m) if pr.n else '-'}; "
                        f"{_marked(pr, ph[i], peh[i]) if pr.n >= 2 else '-'}")
            i += 1
        body.append(line)
    cols = (["group"] if many else []) + ["load"] + (["TaLB"] if queueings else []) + \
        ["vs", "n"] + ["short AFCT", "short p99", "long AFCT", "all AFCT", "training speed"]
    return ["## Paired comparisons: TaLB against each scheme", "",
            "TaLB/the scheme per seed: the geometric mean of the per-seed ratios (a change "
            "for FCTs, × for the speed) and its 95% interval from the paired t on the "
            "per-seed log-ratios, the test the verdict comes from; in brackets after it, the "
            "mean per-seed difference TaLB − the scheme (ms of testbed wall-clock for FCTs, "
            "samples/s at target scale for the speed). Then the verdict "
            f"for TaLB: better, worse, equivalent within ±{EQUIV_MARGIN:.0%} (TOST on the "
            "log-ratio), or inconclusive, each test at 5% **uncorrected** (with "
            f"{tests} test{'s' if tests != 1 else ''}, about {0.05 * tests:.0f} "
            "better/worse verdicts are expected "
            "by chance alone when nothing differs); † marks a verdict that stands after Holm's "
            "correction across every cell of this table. Every scheme pair at every point, on "
            "every outcome, with raw p-values: `paired.csv`."
            + (" `/fifo`: the switch ports queued in one FIFO each instead of the topology's "
               "priority bands; TaLB is compared with each scheme under the same queueing, or, "
               "where the scheme never ran under it, under the scheme's own." if queueings else ""),
            "", md_table(cols, body), ""]


#: a point's mark when its mean offered uplink load is at least OFFERED_SATURATION
PAST_SATURATION = "past saturation"


def offered_cell(p: dict) -> str:
    """A point's measured offered uplink load (the busiest leaf's training +
    background over its uplinks, per run): mean [min–max] over the counted
    runs, marked past saturation when the mean is at least
    OFFERED_SATURATION; "n/a" for runs from before it was recorded."""
    e, rng = p["est"].get("offered_uplink_load"), (p.get("range") or {}).get("offered_uplink_load")
    if e is None or e.mean is None:
        return "n/a"
    s = f"{e.mean:.2f}" + (f" [{rng[0]:.2f}–{rng[1]:.2f}]" if rng and e.n > 1 else "")
    return s + (f" **{PAST_SATURATION}**" if e.mean >= OFFERED_SATURATION else "")


def _offered_md(pts) -> str:
    """The note under the points table on the offered uplink load column."""
    known = [p for p in pts if offered_cell(p) != "n/a"]
    past = [p for p in known if p["est"]["offered_uplink_load"].mean >= OFFERED_SATURATION]
    s = ("`offered uplink load`: per run, the busiest leaf's training + background bytes to "
         "other leaves in the training span over its uplinks' capacity in that span "
         "(`load` counts the background alone; docs/workload.md, \"Offered load\"); mean "
         "[min–max] over the point's counted runs, its training and background parts in "
         f"runs.csv. **{PAST_SATURATION}**: a mean of {OFFERED_SATURATION:.1f} or more, more "
         "bytes offered than the uplinks carry whatever the paths, so the queues overflow "
         "and the point measures drops and timeouts more than path choice")
    if not known:
        return s + "; n/a: runs recorded before the offered load was."
    loads = ", ".join(f"{x:g}" for x in sorted({p["load"] for p in past}))
    return s + (f": {len(past)} of {len(known)} points here"
                + (f" (load {loads})" if past else "")
                + ("; n/a: runs recorded before the offered load was." if len(known) < len(pts)
                   else "."))


#: the axes the points table gives a column of their own when the sweep ran
#: another value than the default: (field, column, default)
_AXIS_COLUMNS = (("placement", "placement", "spread"), ("rto_min", "rto min", None))


def _points_table(pts, metrics, offered: bool = False) -> str:
    axes = [(f, col) for f, col, default in _AXIS_COLUMNS
            if {p[f] for p in pts} - {default}]
    cols = ["topology", "model", "scheme", "agent", *(col for _, col in axes), "load", "rate",
            "n", "excluded"] + \
        (["offered uplink load"] if offered else []) + \
        [m.replace("_fct_", " ").removesuffix("_s").replace("samples_per", "samples/s")
         .replace("_pct", "").replace("_", " ") for m in metrics]
    prow = []
    for p in sorted(pts, key=lambda p: (p["topology"], p["model"], p["agent"], p["target_link_bps"],
                                        p["load"], p["placement"], str(p["rto_min"]),
                                        p["connections"],
                                        plots.series_order([p["scheme"]])[0], p["queueing"])):
        vals = []
        for m in metrics:
            scale = 1e3 if "fct" in m or m.endswith("_mean_s") else (100 if m.endswith("_gap") else 1)
            vals.append(_fmt(p["est"][m], scale, 2 if m == "uplink_spread" else 1))
        prow.append([Path(p["topology"]).stem, p["model"],
                     scheme_label(arm(p["scheme"], p["queueing"], p["connections"]),
                                  p["topology"]),
                     p["agent"], *(p[f] if p[f] is not None else "topology's" for f, _ in axes),
                     f"{p['load']:g}", f"{p['target_link_bps'] / 1e9:g}G", p["counted"],
                     p["cpu_bound"] + p["failed"], *([offered_cell(p)] if offered else []),
                     *vals])
    return md_table(cols, prow)


def md_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table (every summary.md's tables, lb-classic's too)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _ablation_md(rows, pts) -> list[str]:
    """Setting x load: TaLB's FCTs under each agent setting, against the
    default setting's and ECMP's, paired by seed (Holm across the table)."""
    L = ["## Ablation: agent settings", "",
         "TaLB under each named agent setting (experiments/sweep/plan.py AGENT_SETTINGS); "
         "`paper` is the paper's literal reading. Short-tensor AFCT against the `default` "
         "setting and against ECMP paired by seed: the setting/the other − 1 (geometric mean "
         "of the per-seed ratios) and its 95% interval from the paired t on the log-ratios, "
         "the mean difference in ms (testbed wall-clock) in brackets, and the verdict for "
         "the setting from that test, "
         "each test at 5% uncorrected; † marks a verdict that stands after Holm's correction "
         "across both columns of this table.", ""]
    m = "short_fct_mean_s"
    cells = []
    for load in sorted({p["load"] for p in pts}):
        for p in sorted((p for p in pts if p["scheme"] == "talb" and p["load"] == load),
                        key=lambda p: p["agent"]):
            kw = {k: p[k] for k in (*_GROUP, "load")}
            me = {**kw, "scheme": "talb", "agent": p["agent"]}
            vs_d = None if p["agent"] == "default" else \
                compare(rows, m, me, {**kw, "scheme": "talb", "agent": "default"})[0]
            vs_e = compare(rows, m, me, {**kw, "scheme": "ecmp"})[0] \
                if find(pts, scheme="ecmp", load=load) else None
            cells.append((load, p, vs_d, vs_e))
    prs = [pr for *_, d, e in cells for pr in (d, e) if pr is not None]
    ph = dict(zip(map(id, prs), holm([pr.p for pr in prs])))
    peh = dict(zip(map(id, prs), holm([pr.p_equiv for pr in prs])))

    def cell(pr):
        if pr is None:
            return "-"
        if pr.n < 2:
            return "no test (fewer than 2 pairs)"
        return f"{_tested(pr, m)}; {_marked(pr, ph[id(pr)], peh[id(pr)])}"

    body = [[f"{load:g}", p["agent"], p["counted"], _fmt(p["est"]["short_fct_mean_s"]),
             _fmt(p["est"]["short_fct_p99_s"]), _fmt(p["est"]["all_fct_mean_s"]), cell(d), cell(e)]
            for load, p, d, e in cells]
    L += [md_table(["load", "setting", "n", "short AFCT ms", "short p99 ms", "all AFCT ms",
                     "short AFCT vs default", "short AFCT vs ECMP"], body), ""]
    return L


def _fct_units(rows) -> str:
    scales = sorted({round(r["time_scale"], 1) for r in rows if r.get("time_scale")})
    s = "FCTs in ms of testbed wall-clock"
    if len(scales) == 1:
        s += (f" (time scale {scales[0]:g}: a testbed second stands for 1/{scales[0]:g} s of "
              "the target, so divide by it for the target's time)")
    elif scales:
        s += (f" (time scale {scales[0]:g} to {scales[-1]:g} by point, `time_scale` in "
              "runs.csv: divide a testbed time by it for the target's)")
    return s + "."


def _seeds_md(plan: Plan, rows: list[dict]) -> list[str]:
    """How many seeds the headline points ran, and why; how far one RTO reaches."""
    from experiments.sweep import seeds

    rule = plan.seed_rule
    L = ["## Seeds", ""]
    n_seeds = sorted({r.seed for r in plan.runs})
    if rule is None:
        mpi = plan.runs and all(r.client == "mpi" for r in plan.runs)
        return L + [f"Fixed: seeds {', '.join(map(str, n_seeds))} at every point (this sweep has "
                    "no seed rule: a preview preset, a list given with --seeds, or "
                    "--fixed-seeds).", ""] + _rto_md(rows, "iteration_time_s" if mpi
                                                     else "short_fct_mean_s")
    L += [seed_rule_text(rule, seeds.headline_loads(rule, plan)), ""]
    decisions = seeds.decide(plan, rows)
    body = []
    for d in decisions:
        where = ", ".join(f"{k} {v}" for k, v in d["point"].items()
                          if k in ("topology", "model", "load", "target_link_bps", "agent",
                                   "placement", "rto_min")
                          and v not in (None, "default", "spread"))
        widths = "; ".join(f"{_ratio_name(p['a'], p['b'])} {seed_interval(p)}" for p in d["pairs"])
        body.append([where, seeds_run_md(d), widths, seed_status_md(d, rule)])
    L += [md_table(["headline point", "seeds", "ratio [95% CI] (width)", "stopped because"],
                    body) if body else "No headline point has runs yet.", ""]
    return L + _rto_md(rows, rule.metric)


def seeds_run_md(d: dict) -> str:
    """A seed-rule point's seeds: run, and planned where a stopped round left some."""
    run, planned = len(d["seeds_run"]), len(d["seeds"])
    return str(run) if run == planned else f"{run} ({planned} planned)"


def seed_status_md(d: dict, rule) -> str:
    """Why a seed-rule point (seeds.decide) stopped, or that it has not."""
    return {"narrow": "narrow enough", "cap": f"cap ({rule.cap}) reached, still wider",
            "more": "more seeds wanted: the sweep stopped before the rule was done (or ran "
                    "before it existed)"}[d["status"]]


def seed_rule_text(rule, loads) -> str:
    """The seed rule in one sentence, watching ``loads``."""
    return (f"Seed rule: {rule.first} seeds at every point; then at the headline points "
            f"(load {', '.join(f'{x:g}' for x in sorted(loads))}) one "
            f"more seed at a time, every scheme, until the paired 95% interval of the ratio "
            f"{' / '.join(_ratio_name(a, b) for a, b in rule.pairs[:1])} (and every other pair: "
            f"{', '.join(_ratio_name(a, b) for a, b in rule.pairs[1:]) or 'none'}) of "
            f"`{rule.metric}` is narrower than {rule.width:g} (the width of the "
            f"±{rule.width / 2:.0%} equivalence band), or {rule.cap} seeds have run there.")


def _ratio_name(a: str, b: str) -> str:
    """a/b, an arm with a queueing in parentheses: (talb/fifo)/(ecmp/fifo)."""
    return "/".join(f"({x})" if "/" in x else x for x in (a, b))


def seed_interval(p: dict) -> str:
    if p["width"] is None:
        return f"n {p['n']}: no interval"
    return f"{p['ratio']:.3f} [{p['ratio_low']:.3f}, {p['ratio_high']:.3f}] ({p['width']:.3f})"


def _rto_md(rows: list[dict], metric: str) -> list[str]:
    from experiments.sweep.results import rto_min_s
    from experiments.sweep.seeds import RTO_WEIGHT_MAX, rto_weight

    weights = [(rto_weight(r, metric), r) for r in rows if r["status"] == "ok"]
    weights = [(w, r) for w, r in weights if w is not None]
    if not weights:
        return [f"One RTO: not known for these runs (their results lack the tensor counts of "
                f"`{metric}`).", ""]
    heavy = [(w, r) for w, r in weights if w > RTO_WEIGHT_MAX]
    heavy_at = ", ".join(sorted({f"{r['scheme']} load {r['load']:g}" for _, r in heavy}))
    worst = max(weights, key=lambda wr: wr[0])
    rtos = sorted({round(rto_min_s(r) * 1e3) for _, r in weights})
    L = [f"One RTO (the hosts' minimum: {' and '.join(f'{m} ms' for m in rtos)}) could move a "
         f"run's `{metric}` by at most "
         f"{worst[0]:.1%} (largest over the {len(weights)} counted runs: {worst[1]['scheme']} "
         f"load {worst[1]['load']:g} seed {worst[1]['seed']}): "
         + (f"no run over {RTO_WEIGHT_MAX:.0%}, so no single timeout decides a seed."
            if not heavy else
            f"{len(heavy)} runs over {RTO_WEIGHT_MAX:.0%}, where one timeout could decide the "
            f"seed: {heavy_at}.")
         + " (For a mean FCT: the minimum RTO over the class's tensors × their mean; for a "
         "speed: over the measured training time; experiments/sweep/seeds.py.)", ""]
    return L


def finish(plan: Plan, out: Path, report: dict | None = None, wall_s: float | None = None) -> dict:
    """A training sweep's CSV, points, plots and summary.md from what ``out``
    holds now (kinds.py: lb-classic's are lbclassic.py's)."""
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
    pvo = paper_vs_ours(plan, pts, rows)
    table = paired_table(rows, pts)
    write_csv(table, out / "paired.csv")
    factorial = factorial_table(rows, pts)
    if factorial:
        write_csv(factorial_csv_rows(factorial), out / "factorial.csv")
    shift = regime_shift.shift_table(rows, pts, _GROUP)
    if shift:
        write_csv(regime_shift.shift_csv_rows(shift, _GROUP), out / "regime_shift.csv")
    papers = directions.table(rows)
    if papers:
        write_csv(directions.csv_rows(papers), out / "directions.csv")
    pairs = pairing.check(rows, CELL_FIELDS)
    md = _summary_md(plan, out, rows, pts, pvo, manifest, wall_s, pairs,
                     boot=bootstrap_md(table))
    (out / "summary.md").write_text(md)
    return {"rows": rows, "points": pts, "paper_vs_ours": pvo, "plots": manifest,
            "factorial": factorial, "pairing": pairs}


def report_head(plan: Plan, rows: list[dict], wall_s: float | None) -> list[str]:
    """summary.md's first lines (every sweep's, lb-classic's too): title and
    description, the commits the runs were made at and the one writing the
    report, the runs by status, the schemes skipped."""
    from workload.run_record import software_versions

    sw = software_versions()
    st = {s: sum(r["status"] == s for r in rows) for s in ("ok", "cpu_bound", "failed", "missing")}
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
    L += caveat_md(plan.runs)
    return L + machines_md(plan, rows)


def machines_md(plan: Plan, rows: list[dict]) -> list[str]:
    """Where the runs ran (runs.csv ``machine``), and a warning per point whose
    runs came from machines of different kinds (a cluster sweep, or a sweep
    resumed elsewhere): timings are comparable on one kind only."""
    from experiments.sweep.results import mixed_machines

    hosts: dict[tuple, int] = {}
    unrecorded = 0
    for r in rows:
        if r.get("machine"):
            k = (r["machine"], r.get("machine_kind"))
            hosts[k] = hosts.get(k, 0) + 1
        elif r.get("status") not in ("missing", "failed"):
            unrecorded += 1
    if not hosts:
        return []
    # every run made is accounted for: the oldest results files predate the record
    parts = [f"{h} ({k}): {n} runs" for (h, k), n in sorted(hosts.items())]
    if unrecorded:
        parts.append(f"{unrecorded} run{'s' if unrecorded != 1 else ''}: not recorded (made "
                     "before results files recorded their machine)")
    L = ["Machines: " + "; ".join(parts) + ".", ""]
    mixed = mixed_machines(plan, rows)
    if mixed:
        L += [f"**Mixed machines**: {len(mixed)} point(s) have runs from machines of different "
              "kinds; their timings are only comparable on one kind:", ""]
        L += [f"- {spec.label().replace(f'seed {spec.seed}', '').strip()}: "
              + " / ".join(kinds) for spec, kinds in mixed] + [""]
    return L


def _span(values) -> str:
    values = sorted(values)
    return "-" if not values else (f"{values[0]:g}" if values[0] == values[-1]
                                   else f"{values[0]:g}–{values[-1]:g}")


def tails_md(rows, pts) -> list[str]:
    """## Tails: per point, how many short tensors each run's p99 (network
    FCT) is over, which value it is, and its distribution-free 95% interval
    per run (runs.csv ``short_netfct_p99_*``: stats.quantile_ci)."""
    col = "short_netfct_p99"
    body = []
    for p in sorted(pts, key=lambda p: (p["topology"], p["model"], p["agent"], p["target_link_bps"],
                                        p["load"], p["placement"], str(p["rto_min"]),
                                        p["connections"],
                                        plots.series_order([p["scheme"]])[0], p["queueing"])):
        mine = [r for r in rows if r["status"] == "ok" and r.get(f"{col}_n")
                and all(field(r, f) == p[f] for f in POINT_FIELDS)]
        if not mine:
            continue
        ns = [r[f"{col}_n"] for r in mine]
        from_top = [n - math.ceil(0.99 * n - 1e-9) + 1 for n in ns]
        low = [r[f"{col}_low_s"] / r["short_netfct_p99_s"] - 1 for r in mine
               if r.get(f"{col}_low_s") is not None and r.get("short_netfct_p99_s")]
        high = [r[f"{col}_high_s"] / r["short_netfct_p99_s"] - 1 for r in mine
                if r.get(f"{col}_high_s") is not None and r.get("short_netfct_p99_s")]
        ranks = sorted({(r[f"{col}_n"] - (r[f"{col}_low_rank"] or 0) + 1,
                         r[f"{col}_n"] - r[f"{col}_high_rank"] + 1 if r[f"{col}_high_rank"] else None)
                        for r in mine})
        rk = "; ".join(f"{a}th–{'1st' if b == 1 else (f'{b}th' if b else 'none')}"
                       for a, b in ranks[:3]) + (" …" if len(ranks) > 3 else "")
        body.append([Path(p["topology"]).stem, p["model"],
                     scheme_label(arm(p["scheme"], p["queueing"], p["connections"]), p["topology"]),
                     p["agent"], f"{p['load']:g}", f"{p['target_link_bps'] / 1e9:g}G", len(mine),
                     _span(ns), _span(from_top), rk,
                     f"{statistics.median(low):+.0%}" if low else "-",
                     f"{statistics.median(high):+.0%}" if len(high) == len(mine) else
                     (f"{statistics.median(high):+.0%} ({len(mine) - len(high)} unbounded)"
                      if high else "unbounded")])
    if not body:
        return []
    return ["## Tails: what each p99 rests on", "",
            "A run's short-tensor p99 (network FCT) is the nearest-rank 99th percentile of its "
            "measured short tensors (warm-up and censored ones left out): with n of them, the "
            "⌈0.99 n⌉-th smallest, i.e. about the 5th largest of 480. Its 95% interval per run "
            "is distribution-free, from order statistics (experiments/sweep/stats.py "
            "quantile_ci: the count of values below the true p99 is binomial(n, 0.99)); an "
            "upper bound needs 0.99^n ≤ 2.5%, n ≥ 368, and is then the largest value or near "
            "it. Per point over its counted runs: `short n` the tensors per run, `p99 = k-th "
            "largest`, `interval (from the top)` the ranks that bound it, and the median of "
            "the per-run bounds relative to the run's p99. The points' p99 means and their "
            "seed intervals (*Points*) average these per-run values; runs.csv has each run's "
            "(`short_netfct_p99_n`, `_low_s`, `_high_s`, `_low_rank`, `_high_rank`).", "",
            md_table(["topology", "model", "scheme", "agent", "load", "rate", "runs", "short n",
                      "p99 = k-th largest", "interval (from the top)", "low vs p99",
                      "high vs p99"], body), ""]


def _summary_md(plan, out, rows, pts, pvo, manifest, wall_s, pairs=(), boot: str = "") -> str:
    """A training sweep's summary.md: its sections in order."""
    L = report_head(plan, rows, wall_s)
    L += _parameters_md(plan)
    L += _paper_vs_ours_md(rows, pvo, pairs)
    L += _factorial_md(factorial_table(rows, pts))
    L += _regime_shift_md(regime_shift.shift_table(rows, pts, _GROUP))
    L += directions.markdown(directions.table(rows))
    L += _seeds_md(plan, rows)
    L += _talb_pairs_md(rows, pts)
    L += pairing.markdown(pairs)
    if plan.figure == "ablation":
        L += _ablation_md(rows, pts)
    L += _analysis_md(out)
    L += _points_md(pts)
    L += _where_time_goes_md(pts)
    L += tails_md(rows, pts)
    L += _excluded_md(rows)
    L += ["## Figures", ""] + [f"![{name}]({name})" for name in manifest] + [""]
    L += _statistics_md(pts, pairs, boot)
    return "\n".join(L)


def _parameters_md(plan) -> list[str]:
    """Every parameter's values over the plan, the agent's settings, what was kept and changed."""
    first = plan.runs[0] if plan.runs else None
    L = ["## Effective parameters", ""]
    if first:
        dims = {f: sorted({getattr(r, f) for r in plan.runs}, key=str) for f in SPEC_FIELDS}
        L += [md_table(["parameter", "values"], [[k, ", ".join(str(v) for v in vs)]
                                                   for k, vs in dims.items()]), ""]
        agents = {r.agent: dict(r.agent_opts) for r in plan.runs}
        L += ["Agent settings (AgentConfig fields over the defaults of agent/config.py): "
              + "; ".join(f"`{k}` {v or '{}'}" for k, v in agents.items()) + ".", ""]
    if plan.keeps:
        L += ["Kept from the paper:", ""] + [f"- {k}" for k in plan.keeps] + [""]
    if plan.changes:
        L += ["Changed to fit this machine:", ""] + [f"- {c}" for c in plan.changes] + [""]
    return L


def _paper_vs_ours_md(rows, pvo, pairs) -> list[str]:
    """How ours is compared with the paper's, and the comparison's table."""
    L = ["## Paper vs ours", "",
          "Ours: TaLB against the baseline at the same point of this sweep, **paired by seed** "
          "(each seed's TaLB run against the same seed's baseline run): the ratio TaLB/baseline "
          "(geometric mean of the per-seed ratios, 95% interval from the paired t on the "
          "log-ratios; shown as a change, negative when TaLB is lower) and the difference "
          "TaLB − baseline (mean of the per-seed differences, 95% paired-t interval, in the "
          "metric's unit). p: the paired t on the log-ratios, the test whose interval the "
          "ratio column shows, then Holm-corrected across the rows of this table "
          "but the largest speed-ups (picked after the fact, so uncorrected and only "
          "indicative). Verdict for TaLB: **better** or **worse** (Holm p < 0.05), "
          f"**equivalent within ±{EQUIV_MARGIN:.0%}** (not that, and the equivalence test — two "
          f"one-sided t tests on the log-ratio, ratio within 1 ± {EQUIV_MARGIN:.0%}, Holm p < "
          "0.05), else **inconclusive**. *Paper's effect*: whether the paper's ratio (e.g. "
          "−68% → 0.32) lies outside our 95% interval of the ratio (*excluded*: our data "
          "rule it out). The paper's FCT numbers come from its 100G simulation (sec. V-B), "
          f"its speed-up (up to {PAPER_SPEEDUP}×) from its abstract, which names no figure (its "
          "testbed's Fig. 9 text, sec. IV-B, tops out at +121.4% over ECMP, 2.21×). "
          "**FCT rows compare network FCT**: from "
          "a tensor's first packet on the wire (handed to the sending host's NIC queue) to its "
          "delivery, as the paper's flow FCT starts at the flow's first packet; the last "
          "column gives the same ratio on the FCT from the hand-off to the socket, which also "
          "counts the wait in the sender's socket buffer behind the connection's earlier "
          "tensors (docs/workload.md, \"Measurement\"). Runs recorded before wire times have "
          "no network FCT: their FCT rows are judged on the FCT from the hand-off instead, "
          "say so in the verdict, and stay in the Holm family (its size does not change "
          "with the age of the data).", "",
          *_headline_md(pvo), "",
          _fct_units(rows) + " Speeds in samples/s at target scale. n: seeds with a counted "
          "run on both sides." + _sides_md(pvo), "", pairing.verdict_line(pairs), ""]
    return L


def _analysis_md(out) -> list[str]:
    """The hand-written findings of ANALYSIS_FILE, kept when the report is redone."""
    L = []
    analysis = out / ANALYSIS_FILE
    if analysis.exists():      # hand-written findings, kept when the report is redone
        L += ["## Analysis: why ours differ from the paper's", "",
              f"(from `{ANALYSIS_FILE}` in this directory)", "", analysis.read_text().strip(), ""]
    return L


def _points_md(pts) -> list[str]:
    """The points' outcomes with their intervals, and the offered load."""
    L = ["## Points", "", "Mean ± 95% half-width over the counted seeds (n); FCT in ms of "
          "testbed wall-clock (see *Paper vs ours*). The intervals draw the plots' error bars; "
          "whether two schemes differ is the paired comparisons' call, not whether these "
          "overlap.", ""]
    L += [_points_table(pts, OUTCOME_METRICS, offered=True), "", _offered_md(pts), "",
          "`fct`: from the hand-off to the socket; "
          "`netfct`: network FCT, from the first packet on the wire ('-' for runs recorded "
          "before wire times; tensors delivered without wire times are counted in runs.csv, "
          "`*_wire_missing`). `ideal gap` in % (1 − samples/s over the "
          "compute-bound speed); censored tensors (sent, never received) are counted in "
          "runs.csv, never given an FCT.", ""]
    return L


def _where_time_goes_md(pts) -> list[str]:
    """The points' mechanism metrics and what each means."""
    L = ["### Where the time goes", "",
          "Per point: `hol` % of all tensors' FCT spent behind earlier tensors of the same "
          "TCP connection (head of line: TCP delivers a connection's bytes in order, so no "
          "path or queue priority shortens it); `sendbuf` % of the FCT of the tensors with "
          "wire times spent in the sender's socket buffer, from their first byte to the kernel "
          "to their first packet on the wire ('-': runs from before wire times); "
          "`short service mean` ms a short tensor's own "
          "time, from when it could first move to its delivery (experiments/sweep/results.py "
          "service_times); `access gap` % = 1 − samples/s over the speed the hosts' own links allow "
          "(every iteration at least its compute and the busiest host link's training bytes, "
          "e.g. the PS's incast: what no load balancer can beat; experiments/sweep/results.py); "
          "`tcp retrans` % of the training hosts' segments retransmitted; `tcp timeouts` "
          "RTOs per run; `rto tail` % of measured tensors slower than 200 ms, Linux's minimum "
          "RTO (with it, most of them waited for a timeout; with the 4-spine presets' 10 ms, a "
          "tail of its own: read `tcp timeouts` for the RTOs); `uplink spread` (max − min)/mean of the bytes a leaf sent up each "
          "uplink (0 = even); `drops` packets dropped per run at the switches' port queues, "
          "by where the port leads: to a host (the incast), leaf up to a spine (the "
          "balancer's choice), spine down to a leaf ('-': runs from before drops were read).", "",
          _points_table(pts, MECHANISM_METRICS), ""]
    return L


def _excluded_md(rows) -> list[str]:
    """The runs left out: CPU-bound, failed or not run."""
    flagged = [r for r in rows if r["status"] == "cpu_bound"]
    L = ["## Runs excluded", ""]
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
    return L


def _statistics_md(pts, pairs, boot: str) -> list[str]:
    """How the intervals, tests and verdicts are made."""
    max_pairs = max([p["counted"] for p in pts] + [0])      # no pair has more seeds
    L = ["## Statistics", "", "Per point: mean over the seeds and a two-sided 95% confidence "
          "interval mean ± t(0.975, n−1)·s/√n (Student t, scipy). CPU-bound runs are excluded. "
          "Comparisons are paired by seed (experiments/sweep/stats.py): one test decides, the "
          "paired t on the per-seed log-ratios ln(a/b) (p, and the ratio's interval: an "
          "interval that excludes 1 is p < 0.05 before Holm); where a seed's value is 0 "
          "(e.g. no timeouts) the same t on the per-seed differences. The mean difference "
          "and its paired-t interval are shown beside, in the metric's unit; "
          f"equivalence by TOST on the log-ratio within ±{EQUIV_MARGIN:.0%}. Holm's correction "
          "decides the verdicts of *Paper vs ours* (across its rows but the largest speed-ups); "
          "the tables of pairs give uncorrected verdicts and mark (†) those that survive Holm "
          f"across the table. With {BOOTSTRAP_MIN_N} or more pairs a percentile "
          "bootstrap interval of the mean difference is shown beside the t interval as a check"
          + (f" (at most {max_pairs} seeds a point here, so none is shown)"
             if max_pairs < BOOTSTRAP_MIN_N else "") + ". " + boot + " With 5 seeds a sign test could "
          "never reach p < 0.05 (its smallest two-sided p is 2/32 = 0.0625); the t test can, "
          "assuming roughly normal differences. Unpaired interval overlap is a plot aid only.",
          "", pairing.verdict_line(pairs), ""]
    return L
