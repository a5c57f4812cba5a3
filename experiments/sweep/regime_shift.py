"""How TaLB's gain and its parts move from deep buffers to another regime
(issue 36; the design: docs/experiments.md, "Regime", written before the
runs): for each seed, an effect's ratio in the regime (e.g. routing under
the bands, (T,B)/(X,B)) over the same seed's ratio under deep buffers --
the same seeds' runs, paired across regimes, interleaved in one sweep.

    table = shift_table(rows, pts, group_fields)   # [] unless deep + another regime ran

A row's verdict says towards which side the effect moves in the regime:
``moves towards TaLB`` (its routing gains on the baseline's), towards the
baseline, ``unchanged within ±10%`` (TOST on the log ratio of ratios), or
inconclusive; p-values Holm-corrected per metric across the table.
"""
from __future__ import annotations

from experiments.sweep import plots
from experiments.sweep.results import seed_values
from experiments.sweep.stats import Paired, holm_by, paired

#: the effects followed across regimes: key -> (what, the two cells of its
#: ratio as (scheme, queueing) with X the baseline, the sides it can move to)
SHIFT_EFFECTS = {
    "gain": ("TaLB's gain (T,B)/(X,F)", (("talb", "bands"), ("X", "fifo")),
             ("TaLB+bands", "{B}+FIFO")),
    "queueing_base": ("queueing for {B} (X,B)/(X,F)", (("X", "bands"), ("X", "fifo")),
                      ("bands", "FIFO")),
    "routing_bands": ("routing under bands (T,B)/(X,B)", (("talb", "bands"), ("X", "bands")),
                      ("TaLB", "{B}")),
    "routing_fifo": ("routing under FIFO (T,F)/(X,F)", (("talb", "fifo"), ("X", "fifo")),
                     ("TaLB", "{B}")),
}
#: the metrics followed (summary.md shows the network FCT and the speed)
SHIFT_METRICS = ("short_netfct_mean_s", "short_fct_mean_s", "samples_per_s")
#: the regime the others are compared with: the runs with no regime (deep buffers)
REFERENCE = None


def _lower_better(metric: str) -> bool:
    return metric != "samples_per_s"


def _cells(rows, metric, kw, base) -> dict:
    """(scheme, queueing) -> {seed: value} of TaLB's and the baseline's four
    arms at ``kw`` (counted runs with a positive value)."""
    return {(s, q): {k: v for k, v in seed_values(rows, metric, **kw, scheme=s,
                                                  queueing=q).items() if v is not None and v > 0}
            for s in ("talb", base) for q in ("bands", "fifo")}


def _arms(effect: str, base: str) -> tuple:
    """The effect's two (scheme, queueing) cells, X named: its ratio's numerator first."""
    return tuple((base if s == "X" else s, q) for s, q in SHIFT_EFFECTS[effect][1])


def _ratio(cells: dict, effect: str, base: str, seed) -> float:
    a, b = _arms(effect, base)
    return cells[a][seed] / cells[b][seed]


def shift_table(rows: list[dict], pts: list[dict], group_fields: tuple) -> list[dict]:
    """Per group (``group_fields`` but the regime), load, regime other than
    deep, baseline, metric and effect: the per-seed ratio in the regime
    against the same seed's ratio under deep buffers, paired; Holm per
    metric across the table. An effect is followed where both of its arms
    ran under deep buffers and the regime (the factorial: all four; the
    paper's design, TaLB with bands against FIFO baselines: the gain only).
    Empty unless deep runs and another regime's ran at the same points."""
    ref = [p for p in pts if p["agent"] == "default"]
    if REFERENCE not in {p.get("regime") for p in ref} or len({p.get("regime") for p in ref}) < 2:
        return []
    fields = tuple(f for f in group_fields if f != "regime")
    out = []
    for g in sorted({tuple(p.get(f) for f in fields) for p in ref},
                    key=lambda g: tuple((0, "") if v is None else (1, str(v)) for v in g)):
        here = [p for p in ref if tuple(p.get(f) for f in fields) == g]
        for load in sorted({p["load"] for p in here}):
            at = [p for p in here if p["load"] == load]

            def ran(regime):
                return {(p["scheme"], p["queueing"]) for p in at if p.get("regime") == regime}
            deep_arms = ran(REFERENCE)
            for regime in sorted({p.get("regime") for p in at} - {REFERENCE}):
                both = deep_arms & ran(regime)
                kw = {**dict(zip(fields, g)), "load": load, "agent": "default"}
                for b in plots.series_order(sorted({s for s, _ in both} - {"talb"})):
                    effects = [e for e in SHIFT_EFFECTS if set(_arms(e, b)) <= both]
                    arms = {a for e in effects for a in _arms(e, b)}
                    for metric in SHIFT_METRICS if effects else ():
                        reg = _cells(rows, metric, {**kw, "regime": regime}, b)
                        deep = _cells(rows, metric, {**kw, "regime": REFERENCE}, b)
                        # as the factorial: the seeds with every arm followed counted, here
                        # in both regimes, so every effect of a baseline rests on the same seeds
                        seeds = sorted(set.intersection(*(set(c[a]) for c in (reg, deep)
                                                          for a in arms)))
                        if not seeds:
                            continue
                        for effect in effects:
                            pr = paired([_ratio(reg, effect, b, s) for s in seeds],
                                        [_ratio(deep, effect, b, s) for s in seeds],
                                        lower_is_better=_lower_better(metric))
                            out.append({**kw, "regime": regime, "metric": metric, "baseline": b,
                                        "effect": effect, "pair": pr, "n": pr.n, "seeds": seeds})
    holm_by(out, "metric")
    for r in out:
        r["verdict"] = shift_verdict(r["pair"], r.get("p_holm"), r.get("p_equiv_holm"),
                                     r["effect"], r["baseline"])
    return out


def shift_verdict(pr: Paired, p_holm, p_equiv_holm, effect: str, baseline: str) -> str:
    """Towards which side the effect moves in the regime (a better ratio of
    ratios is one more in favour of the effect's first side)."""
    v = pr.verdict(p_holm, p_equiv_holm)
    a, b = (x.format(B=baseline.upper()) for x in SHIFT_EFFECTS[effect][2])
    if v.startswith("equivalent"):
        return "unchanged " + v.removeprefix("equivalent ")
    return {"better": f"moves towards {a}", "worse": f"moves towards {b}"}.get(v, v)


def shift_csv_rows(table: list[dict], group_fields: tuple) -> list[dict]:
    """regime_shift.csv: a row per comparison, the ratio of ratios and its test."""
    out = []
    for r in table:
        d = r["pair"].to_dict()
        d.pop("verdict")
        out.append({**{k: r.get(k) for k in group_fields}, "load": r["load"],
                    "metric": r["metric"], "baseline": r["baseline"], "effect": r["effect"],
                    "against": "deep", "n": r["n"], "seeds": " ".join(map(str, r["seeds"])),
                    **d, "p_holm": r["p_holm"], "p_equiv_holm": r["p_equiv_holm"],
                    "verdict": r["verdict"]})
    return out
