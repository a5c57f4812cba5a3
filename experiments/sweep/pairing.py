"""Did the runs of one seed see the same background from the same start?
(issue 17, item 2; docs/experiments.md, "Pairing").

Every scheme's run at a point and seed gets the seed's background plan,
starts training at one instant that is also the plan's time origin, and
waits for the whole plan. This module reads what each run recorded
(``pairing`` in its results file, workload/experiment.py) into runs.csv
columns, and checks per point and seed that the counted runs were paired:
identical plans, delivered background bytes within ``DELIVERED_TOL`` and
training-start offsets within ``OFFSET_TOL_S``. Runs from before (no
``pairing`` record) are "not recorded".
"""
from __future__ import annotations

from pathlib import Path

#: training-start offsets (first tensor admitted − start instant) of the
#: runs of one seed may differ by this much (the nodes wake within ~1 ms of
#: the instant; the rest is the emulated compute before the first admission)
OFFSET_TOL_S = 0.005
#: background bytes delivered by the runs of one seed may differ by this
#: share of the largest (0 when every planned flow completes)
DELIVERED_TOL = 0.01

#: runs.csv columns (None in a run from before pairing was recorded)
FIELDS = ("pairing_recorded", "start_offset_s", "bg_plan", "bg_planned_flows", "bg_planned_bytes",
          "bg_started", "bg_done", "bg_censored", "bg_delivered_bytes", "bg_covered",
          "bg_start_lag_max_s")

_NOT_RECORDED = ("**Pairing not recorded.** These runs were made before a seed's runs shared "
                 "one training start and the whole background plan (issue 17): the schemes' "
                 "runs at one seed share the seed's background plan, but each run's training "
                 "starts at its own offset into it and its background is cut when its training "
                 "ends, so the pairs see similar, not identical, background: pairing is by seed "
                 "but imperfect (it removes less of the seed-to-seed noise than it could).")


def fields(results: dict) -> dict:
    """A run's pairing columns from its results file."""
    p = results.get("pairing")
    if not p:
        return {f: None for f in FIELDS} | {"pairing_recorded": False}
    b = p.get("background") or {}
    return {"pairing_recorded": True, "start_offset_s": p.get("start_offset_s"),
            "bg_plan": (b.get("plan_sha256") or "")[:16] or None,
            "bg_planned_flows": b.get("planned_flows"), "bg_planned_bytes": b.get("planned_bytes"),
            "bg_started": b.get("started"), "bg_done": b.get("done"),
            "bg_censored": b.get("censored"), "bg_delivered_bytes": b.get("delivered_bytes"),
            "bg_covered": b.get("covered"), "bg_start_lag_max_s": b.get("start_lag_max_s")}


def _who(r: dict) -> str:
    """A run's arm: scheme, /queueing when not the topology's bands,
    /connections when not pair, /agent setting when not the default,
    /rto=... when a minimum RTO was set."""
    q, a = r.get("queueing") or "bands", r.get("agent") or "default"
    c, rto = r.get("connections") or "pair", r.get("rto_min")
    return r["scheme"] + ("" if q == "bands" else f"/{q}") + ("" if c == "pair" else f"/{c}") + \
        ("" if a == "default" else f"/{a}") + ("" if rto is None else f"/rto={rto}")


def check(rows: list[dict], cell_fields: tuple[str, ...]) -> list[dict]:
    """Per cell (``cell_fields``: every parameter but the scheme, the agent
    setting, the queueing and the seed) and seed with two or more counted runs: whether
    they were paired, and the numbers that say so."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("status") == "ok":
            groups.setdefault((tuple(r[f] for f in cell_fields), r["seed"]), []).append(r)
    out = []
    for (cell, seed), rs in sorted(groups.items(),
                                   key=lambda g: tuple(map(str, (*g[0][0], g[0][1])))):
        if len(rs) < 2:
            continue
        rs = sorted(rs, key=_who)
        g = {"cell": dict(zip(cell_fields, cell)), "seed": seed, "runs": [_who(r) for r in rs],
             "rows": rs, "problems": []}
        if not all(r.get("pairing_recorded") for r in rs):
            g["status"] = "not recorded"
            out.append(g)
            continue
        plans = {r.get("bg_plan") for r in rs}
        g["background"] = plans != {None}
        if len(plans) > 1:
            g["problems"].append("background plans differ")
        offsets = [r["start_offset_s"] for r in rs if r.get("start_offset_s") is not None]
        g["offset_spread_s"] = max(offsets) - min(offsets) if offsets else None
        if len(offsets) < len(rs):
            g["problems"].append("a run has no training start")
        elif g["offset_spread_s"] > OFFSET_TOL_S:
            lo = min(rs, key=lambda r: r["start_offset_s"])
            hi = max(rs, key=lambda r: r["start_offset_s"])
            g["problems"].append(f"training-start offsets {1e3 * g['offset_spread_s']:.1f} ms apart "
                                 f"({_who(lo)} {1e3 * lo['start_offset_s']:.1f}, "
                                 f"{_who(hi)} {1e3 * hi['start_offset_s']:.1f} ms)")
        if g["background"]:
            got = [r.get("bg_delivered_bytes") or 0 for r in rs]
            g["delivered_spread"] = (max(got) - min(got)) / max(got) if max(got) else 0.0
            if g["delivered_spread"] > DELIVERED_TOL:
                lo, hi = rs[got.index(min(got))], rs[got.index(max(got))]
                g["problems"].append(f"background bytes delivered {g['delivered_spread']:.1%} apart "
                                     f"({_who(lo)} {min(got) / 1e6:.2f}, {_who(hi)} "
                                     f"{max(got) / 1e6:.2f} MB)")
            g["uncovered"] = [_who(r) for r in rs if r.get("bg_covered") is False]
        g["status"] = "held" if not g["problems"] else "not held"
        out.append(g)
    return out


def _where(g: dict, vary: list[str]) -> str:
    parts = []
    for f in vary:
        v = g["cell"][f]
        parts.append(Path(v).stem if f == "topology" else
                     f"{v / 1e9:g}G" if f == "target_link_bps" else f"{f} {v:g}"
                     if isinstance(v, float) else str(v))
    return ", ".join(parts + [f"seed {g['seed']}"])


def _vary(groups: list[dict]) -> list[str]:
    keys = list(groups[0]["cell"]) if groups else []
    vary = [k for k in keys if len({str(g["cell"][k]) for g in groups}) > 1]
    return vary or (["load"] if "load" in keys else [])


def verdict_line(groups: list[dict]) -> str:
    """One line: did pairing hold at every seed, and where not."""
    if not groups:
        return "**Pairing**: no seed of any point has two counted runs to pair."
    old = [g for g in groups if g["status"] == "not recorded"]
    if len(old) == len(groups):
        return _NOT_RECORDED
    vary = _vary(groups)
    bad = [g for g in groups if g["status"] == "not held"]
    checked = len(groups) - len(old)
    rule = (f"identical background plans, background bytes delivered within "
            f"{DELIVERED_TOL:.0%}, training-start offsets within {1e3 * OFFSET_TOL_S:g} ms")
    if bad:
        s = (f"**Pairing did not hold** at {len(bad)} of {checked} seeds checked ({rule}): "
             + "; ".join(f"{_where(g, vary)}: {', '.join(g['problems'])}" for g in bad) + ".")
    else:
        s = (f"**Pairing held** at every seed of every point ({checked} checked: {rule})."
             if not old else
             f"**Pairing held** at every seed where it was recorded ({checked}: {rule}).")
    if old:
        s += (f" Not recorded at {len(old)} (runs from before pairing was recorded: "
              + ", ".join(_where(g, vary) for g in old[:8])
              + (", ..." if len(old) > 8 else "") + ").")
    uncovered = sum(len(g.get("uncovered", [])) for g in groups)
    if uncovered:
        s += (f" In {uncovered} run(s) training outlasted the background plan and ran its "
              "tail without background (`bg_covered` in runs.csv).")
    return s


def _same_or_each(rs: list[dict], key: str, fmt) -> str:
    vals = [r.get(key) for r in rs]
    if all(v is None for v in vals):
        return "-"
    if len(set(vals)) == 1:
        return fmt(vals[0])
    return ", ".join(f"{_who(r)} {'-' if r.get(key) is None else fmt(r.get(key))}" for r in rs)


def markdown(groups: list[dict]) -> list[str]:
    """The summary's section: the verdict line and, per point and seed, the
    background each run saw and its training-start offset."""
    L = ["## Pairing", "", verdict_line(groups), ""]
    shown = [g for g in groups if g["status"] != "not recorded"]
    if not shown:
        return L
    vary = _vary(groups)
    L += ["Per point and seed, the counted runs (schemes and agent settings): the background "
          "plan (flows, MB; one digest for all runs or 'differ'), flows started and done and "
          "MB delivered (one value when every run has it, else per run), the training-start "
          "offset (first tensor admitted − the run's start instant, which is also the "
          "background's time origin; min–max over the runs), the largest lag of a background "
          "flow's start behind its plan (a busy CPU delays the sources) and the verdict. Per "
          "run: runs.csv (`start_offset_s`, `bg_*`).", ""]
    body = []
    for g in shown:
        rs = g["rows"]
        offs = [r["start_offset_s"] for r in rs if r.get("start_offset_s") is not None]
        off = (f"{1e3 * min(offs):.1f}–{1e3 * max(offs):.1f}" if offs else "-")
        lags = [r["bg_start_lag_max_s"] for r in rs if r.get("bg_start_lag_max_s") is not None]
        lag = f"{1e3 * max(lags):.0f}" if lags else "-"
        if g.get("background"):
            r0 = rs[0]
            mb = (r0.get("bg_planned_bytes") or 0) / 1e6
            plan = (f"{r0.get('bg_planned_flows')} flows, {mb:.2f} MB"
                    + ("" if "background plans differ" not in g["problems"] else " (differ)"))
            cols = [plan, _same_or_each(rs, "bg_started", str), _same_or_each(rs, "bg_done", str),
                    _same_or_each(rs, "bg_delivered_bytes", lambda v: f"{v / 1e6:.2f}")]
        else:
            cols = ["none", "-", "-", "-"]
        verdict = "held" if g["status"] == "held" else "**not held**: " + "; ".join(g["problems"])
        body.append([_where(g, vary), len(rs), *cols, off, lag, verdict])
    head = ["point, seed", "runs", "background plan", "started", "done", "MB delivered",
            "start offset ms", "flow start lag ms", "pairing"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    L += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return L + [""]
