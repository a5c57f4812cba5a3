"""README.md's headline table is the one the committed summaries produce.

The table (TaLB against ECMP / RPS / CONGA on fig10's design, every scheme
with the bands, and in our reading of the paper's configuration) is typed
by hand into README.md; the numbers come from `results/fig10` and
`results/fig10-paper`. Each README cell is held against the *Paper vs ours*
table of the sweep's committed summary.md (interval, verdict, paired seeds,
the paper's number), and that table against the sweep's paired.csv (the
interval of TaLB/baseline recomputed from the ratio columns, Holm across the
table's 15 tests recomputed from the raw p-values, the verdict from those).
So a README number edited away from the data fails here, and so does a
summary that no longer says what its paired.csv gives. No root, no runs.
"""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pytest

from experiments.sweep.plan import arm
from experiments.sweep.stats import ALPHA, holm
from markdown_tables import grids, section, tables

REPO = Path(__file__).resolve().parents[1]
#: the README's headline rows and the outcome each compares (network FCT)
ROWS = {"short-flow AFCT": "short_netfct_mean_s", "short-flow p99 FCT": "short_netfct_p99_s",
        "long-flow AFCT": "long_netfct_mean_s", "overall AFCT": "all_netfct_mean_s",
        "training speed": "samples_per_s"}
BASELINES = ("ECMP", "RPS", "CONGA")
#: the summary's verdicts, as the README words them
VERDICTS = {"TaLB better": "better", "TaLB worse": "worse", "inconclusive": "inconclusive",
            "equivalent within ±10%": "equivalent"}
HEADLINE = "headline (TaLB vs ECMP / RPS / CONGA"


def _norm(cell: str) -> str:
    """An interval as both files write it, minus signs, % and spaces aside:
    "−35% [−46, −22]" and "-35% [-46%, -22%]" are both "-35[-46,-22]"."""
    return cell.replace("−", "-").replace("%", "").replace(" ", "")


def _three(cell: str) -> list[str]:
    parts = [p.strip() for p in cell.split(" / ")]
    assert len(parts) == len(BASELINES), f"not one value per baseline: {cell!r}"
    return parts


def readme_headline(md: str) -> dict:
    """The README's headline table: per results directory named in a column
    header, its paired seeds and per row its three intervals and verdicts;
    the paper's column and the load the header names."""
    found = [(cols, rows) for cols, rows in grids(md) if cols[0].startswith(HEADLINE)]
    assert len(found) == 1, "README.md has no headline table (or more than one)"
    cols, rows = found[0]
    load = re.search(r"ours: background ([0-9.]+)", cols[0])
    out = {"load": float(load.group(1)), "paper": {}, "sweeps": {}}
    for i, head in enumerate(cols):
        m = re.search(r"`results/([\w-]+)`, (\d+) paired seeds", head)
        if not m:
            continue
        assert cols[i + 1].startswith("verdict"), f"no verdict column after {head!r}"
        out["sweeps"][m.group(1)] = {
            "seeds": int(m.group(2)),
            "rows": {r[0]: {"ours": _three(r[i]), "verdict": _three(r[i + 1])} for r in rows}}
    out["paper"] = {r[0]: r[1] for r in rows}
    assert set(out["paper"]) == set(ROWS), f"headline rows {sorted(out['paper'])}"
    return out


def summary_headline(sweep: str) -> dict[str, dict]:
    """The *Paper vs ours* table of results/SWEEP/summary.md by its `number`."""
    md = (REPO / "results" / sweep / "summary.md").read_text()
    return {r["number"]: r for r in tables(section(md, "Paper vs ours"))[0]}


def _paired(sweep: str) -> list[dict]:
    with open(REPO / "results" / sweep / "paired.csv") as f:
        return list(csv.DictReader(f))


def _talb_over(paired: list[dict], load: float, metric: str, base_arm: str, talb_arm: str):
    """TaLB/baseline from paired.csv (either order of a and b): ratio, its
    interval, p, p_equiv, the effect's sign (for the verdict) and n."""
    hits = [r for r in paired if float(r["load"]) == load and r["metric"] == metric
            and {r["a"], r["b"]} == {talb_arm, base_arm}]
    assert len(hits) == 1, f"{len(hits)} rows of {talb_arm} and {base_arm} on {metric} at {load}"
    r = hits[0]
    flip = r["a"] != talb_arm
    ratio, lo, hi = (float(r[k]) for k in ("ratio", "ratio_low", "ratio_high"))
    if flip:
        ratio, lo, hi = 1 / ratio, 1 / hi, 1 / lo
    effect = math.log(ratio) if r["scale"] == "log-ratio" else \
        (-1 if flip else 1) * float(r["diff_mean"])
    return {"ratio": ratio, "low": lo, "high": hi, "p": float(r["p"]),
            "p_equiv": float(r["p_equiv"]) if r["p_equiv"] else None,
            "effect": effect, "n": int(r["n"])}


def _ratio_text(metric: str, x: dict) -> str:
    """experiments/sweep/summary.py's way of writing a ratio and its interval."""
    if metric == "samples_per_s":
        return f"{x['ratio']:.2f}× [{x['low']:.2f}, {x['high']:.2f}]"
    return f"{x['ratio'] - 1:+.0%} [{x['low'] - 1:+.0%}, {x['high'] - 1:+.0%}]"


def _p_text(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else "<0.001"


def _arms(where: str, base: str) -> tuple[str, str]:
    """TaLB's and the baseline's arm names in paired.csv from the summary's
    *where* ("...; TaLB bands, ECMP fifo" when the queueings differ)."""
    m = re.search(rf"TaLB (\w+), {base} (\w+)", where)
    qt, qb = (m.group(1), m.group(2)) if m else ("bands", "bands")
    return arm("talb", qt, "pair"), arm(base.lower(), qb, "pair")


def summary_against_paired(sweep: str) -> list[str]:
    """Where the summary's *Paper vs ours* rows differ from paired.csv."""
    table, paired, bad = summary_headline(sweep), _paired(sweep), []
    family = {k: r for k, r in table.items() if "(largest over the points)" not in k}
    got = {}
    for number, r in family.items():
        label, base = number.rsplit(" vs ", 1)
        metric = ROWS[label]
        load = float(re.search(r"load ([0-9.]+)", r["where"]).group(1))
        talb_arm, base_arm = _arms(r["where"], base)
        x = got[number] = _talb_over(paired, load, metric, base_arm, talb_arm)
        if _ratio_text(metric, x) != r["ours: TaLB/baseline − 1 [95% CI]"]:
            bad.append(f"{sweep} {number}: summary {r['ours: TaLB/baseline − 1 [95% CI]']!r}, "
                       f"paired.csv {_ratio_text(metric, x)!r}")
        if str(x["n"]) != r["n"]:
            bad.append(f"{sweep} {number}: summary n {r['n']}, paired.csv {x['n']}")
    keys = list(got)
    ph = holm([got[k]["p"] for k in keys])
    pe = holm([got[k]["p_equiv"] for k in keys])
    for k, p_h, pe_h in zip(keys, ph, pe):
        x, r = got[k], family[k]
        shown = f"{_p_text(x['p'])} ({_p_text(p_h)})"
        if shown != r["p (Holm)"]:
            bad.append(f"{sweep} {k}: summary p {r['p (Holm)']!r}, recomputed {shown!r}")
        lower_better = ROWS[k.rsplit(" vs ", 1)[0]] != "samples_per_s"
        verdict = ("TaLB better" if (x["effect"] < 0) == lower_better else "TaLB worse") \
            if p_h < ALPHA else "equivalent within ±10%" if pe_h is not None and pe_h < ALPHA \
            else "inconclusive"
        if verdict != r["verdict"]:
            bad.append(f"{sweep} {k}: summary verdict {r['verdict']!r}, from paired.csv "
                       f"and Holm {verdict!r}")
    return bad


def readme_against_summaries(md: str) -> list[str]:
    """Where README.md's headline table differs from the committed summaries."""
    readme, bad = readme_headline(md), []
    assert set(readme["sweeps"]) == {"fig10", "fig10-paper"}, sorted(readme["sweeps"])
    for sweep, cols in readme["sweeps"].items():
        table = summary_headline(sweep)
        for label, cells in cols["rows"].items():
            for base, ours, verdict in zip(BASELINES, cells["ours"], cells["verdict"]):
                r = table[f"{label} vs {base}"]
                where = f"{sweep} {label} vs {base}"
                if _norm(ours) != _norm(r["ours: TaLB/baseline − 1 [95% CI]"]):
                    bad.append(f"{where}: README {ours!r}, summary "
                               f"{r['ours: TaLB/baseline − 1 [95% CI]']!r}")
                if verdict != VERDICTS.get(r["verdict"]):
                    bad.append(f"{where}: README {verdict!r}, summary {r['verdict']!r}")
                if int(r["n"]) != cols["seeds"]:
                    bad.append(f"{where}: README {cols['seeds']} paired seeds, summary n {r['n']}")
                if f"load {readme['load']:g}" not in r["where"]:
                    bad.append(f"{where}: README load {readme['load']:g}, summary {r['where']!r}")
    fig10 = summary_headline("fig10")
    for label, cell in readme["paper"].items():
        if label == "training speed":
            ours = [re.match(r"up to [0-9.]+×", cell).group(0)]
            theirs = {re.match(r"up to [0-9.]+×", fig10[f"{label} vs {b}"]["paper"]).group(0)
                      for b in BASELINES}
        else:
            ours = _three(cell)
            theirs = [fig10[f"{label} vs {b}"]["paper"] for b in BASELINES]
        if list(ours) != list(theirs):
            bad.append(f"paper's {label}: README {cell!r}, summary {sorted(theirs)!r}")
    return bad


def test_readme_headline_is_what_the_summaries_give():
    assert readme_against_summaries((REPO / "README.md").read_text()) == []


@pytest.mark.parametrize("sweep", ["fig10", "fig10-paper"])
def test_summary_headline_is_what_paired_csv_gives(sweep):
    assert summary_against_paired(sweep) == []


def _headline_cells(md: str) -> list[tuple[int, str]]:
    """(line number, line) of the README's headline rows."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {HEADLINE}"))
    return [(i, lines[i]) for i in range(start + 2, start + 2 + len(ROWS))]


def test_an_edited_readme_number_or_verdict_is_caught():
    """The check is not vacuous: one interval bound moved by one point, or one
    verdict changed, in README's table is named as a difference."""
    md = (REPO / "README.md").read_text()
    lines = md.splitlines()
    for i, line in _headline_cells(md):
        m = re.search(r"\[([−+-]?)(\d+)", line)
        if not m:
            continue
        bumped = line[:m.start(2)] + str(int(m.group(2)) + 1) + line[m.end(2):]
        edited = "\n".join(lines[:i] + [bumped] + lines[i + 1:])
        bad = readme_against_summaries(edited)
        assert len(bad) == 1 and line.split("|")[1].strip() in bad[0], bad
    i, line = _headline_cells(md)[0]
    cell = line.split(" | ")[3]
    swapped = cell.replace("better", "worse", 1) if "better" in cell else \
        cell.replace("worse", "better", 1)
    edited = "\n".join(lines[:i] + [line.replace(cell, swapped, 1)] + lines[i + 1:])
    assert len(readme_against_summaries(edited)) == 1
