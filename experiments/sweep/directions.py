"""Issue 42's directions: each paper's system against what it set out to
beat, paired by seed at every point that ran both (same scheme, model,
arch, load, ...), and whether TaLB's effect on ECMP depends on the setting
(the interaction: TaLB/ECMP under one setting over TaLB/ECMP under the
other). Compared on samples/s; Holm across the table's rows per family
(directions, interactions). The papers-* presets (experiments/sweep/plan.py)
run the arms; summary.md shows the table, directions.csv holds it."""
from __future__ import annotations

from experiments.sweep.results import POINT_FIELDS, field, seed_values
from experiments.sweep.stats import holm_by, interaction, paired

METRIC = "samples_per_s"

#: (axis, ours, against, what the paper reports); ``against`` "constant" is
#: any constant:SIZE buffer
DIRECTIONS = (
    ("scheduler", "usbyte", "bytescheduler",
     "US-Byte (TPDS 2023): up to 1.26x ByteScheduler's speed"),
    ("scheduler", "usbyte", "wfbp", "US-Byte (TPDS 2023): up to 1.56x WFBP's speed"),
    ("comm", "hybrid", "ps", "Poseidon (ATC 2017): hybrid PS/SFB faster than a PS where fully "
                             "connected layers are large (VGG19)"),
    ("fusion", "adaptive", "constant", "OSF (WWW 2022): adaptive fusion +32% to +150% scaling "
                                       "over a constant buffer"),
    ("fusion", "adaptive", None, "OSF (WWW 2022): fusion against none (no number given)"),
)


def _matches(value, want) -> bool:
    if want == "constant":
        return isinstance(value, str) and value.startswith("constant:")
    return value == want


def _cells(rows: list[dict], axis: str) -> dict[tuple, set]:
    """point-without-the-axis -> the axis values counted runs have there."""
    out: dict[tuple, set] = {}
    rest = [f for f in POINT_FIELDS if f != axis]
    for r in rows:
        if r.get("status") == "ok":
            out.setdefault(tuple(field(r, f) for f in rest), set()).add(field(r, axis))
    return out


def table(rows: list[dict]) -> list[dict]:
    """One row per direction and point where both arms ran: ours against the
    other arm (``kind`` "direction"); and per direction and point where
    TaLB and ECMP ran under both arms, the interaction (``kind``
    "interaction": TaLB's speed-up over ECMP under ours over that under the
    other arm; > 1 when TaLB helps more under ours)."""
    out = []
    for axis, ours, against, claim in DIRECTIONS:
        rest = [f for f in POINT_FIELDS if f != axis]
        for cell, values in sorted(_cells(rows, axis).items(), key=str):
            kw = dict(zip(rest, cell))
            a_vals = [v for v in values if _matches(v, ours)]
            b_vals = [v for v in values if _matches(v, against)]
            for a in a_vals:
                for b in b_vals:
                    va = seed_values(rows, METRIC, **kw, **{axis: a})
                    vb = seed_values(rows, METRIC, **kw, **{axis: b})
                    seeds = sorted(s for s in set(va) & set(vb)
                                   if va[s] is not None and vb[s] is not None)
                    pr = paired([va[s] for s in seeds], [vb[s] for s in seeds],
                                lower_is_better=False)
                    out.append({**kw, "kind": "direction", "axis": axis, "ours": a,
                                "against": b, "claim": claim, "pair": pr, "n": pr.n})
    # the interactions: TaLB against ECMP under each arm, at the points with all four
    for axis, ours, against, _ in DIRECTIONS:
        rest = [f for f in POINT_FIELDS if f not in (axis, "scheme")]
        cells = {}
        for r in rows:
            if r.get("status") == "ok":
                cells.setdefault(tuple(field(r, f) for f in rest), set()).add(
                    (field(r, "scheme"), field(r, axis)))
        for cell, have in sorted(cells.items(), key=str):
            kw = dict(zip(rest, cell))
            for a in sorted({v for _, v in have if _matches(v, ours)}, key=str):
                for b in sorted({v for _, v in have if _matches(v, against)}, key=str):
                    if not {("talb", a), ("talb", b), ("ecmp", a), ("ecmp", b)} <= have:
                        continue
                    v = {(s, x): {k: y for k, y in seed_values(rows, METRIC, **kw, scheme=s,
                                                                **{axis: x}).items()
                                  if y is not None}
                         for s in ("talb", "ecmp") for x in (a, b)}
                    four = sorted(set.intersection(*(set(d) for d in v.values())))
                    pr = interaction(v["talb", a], v["talb", b], v["ecmp", a], v["ecmp", b],
                                     four, lower=False)
                    out.append({**kw, "scheme": "talb vs ecmp", "kind": "interaction",
                                "axis": axis, "ours": a, "against": b,
                                "claim": f"does TaLB's effect depend on the {axis}? (issue 42)",
                                "pair": pr, "n": pr.n})
    holm_by(out, "kind")
    return out


def _ratio(pr) -> str:
    if pr.ratio is None:
        return "-"
    return f"{pr.ratio:.2f}x" + (f" [{pr.ratio_low:.2f}, {pr.ratio_high:.2f}]"
                                 if pr.ratio_low is not None else "")


def _p(p) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def csv_rows(tab: list[dict]) -> list[dict]:
    return [{**{k: v for k, v in r.items() if k != "pair"}, "ratio": r["pair"].ratio,
             "ratio_low": r["pair"].ratio_low, "ratio_high": r["pair"].ratio_high,
             "p": r["pair"].p,
             "verdict": r["pair"].verdict(r.get("p_holm"), r.get("p_equiv_holm"))}
            for r in tab]


def markdown(tab: list[dict]) -> list[str]:
    """summary.md's section; nothing when the sweep ran no two arms of an axis."""
    if not tab:
        return []
    L = ["## The papers' directions (issue 42)", "",
         "Samples/s of each paper's system over the arm it set out to beat, at the same point "
         "(scheme, model, arch, load, ...), paired by seed: the ratio ours/against (geometric "
         "mean of the per-seed ratios, 95% interval from the paired t on the log-ratios), p of "
         "that t, Holm-corrected across the directions; verdict for *ours* from the corrected "
         "p (better/worse, else equivalent within ±10% by TOST, else inconclusive). Then "
         "whether TaLB's effect depends on the setting: per seed (TaLB/ECMP under ours) over "
         "(TaLB/ECMP under the other), > 1 when TaLB helps more under ours; Holm across those "
         "rows.", ""]
    head = ["axis", "ours", "against", "model", "arch", "scheme", "load", "n", "ratio", "p",
            "p (Holm)", "verdict", "paper"]
    for kind, title in (("direction", "Directions"), ("interaction", "TaLB's effect by setting")):
        rows = [r for r in tab if r["kind"] == kind]
        if not rows:
            continue
        L += [f"### {title}", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)]
        for r in rows:
            pr = r["pair"]
            L.append("| " + " | ".join(str(x) for x in (
                r["axis"], r["ours"], r["against"] or "none", r["model"], r["arch"],
                r["scheme"], f"{r['load']:g}", pr.n, _ratio(pr), _p(pr.p), _p(r.get("p_holm")),
                pr.verdict(r.get("p_holm"), r.get("p_equiv_holm")), r["claim"])) + " |")
        L.append("")
    return L
