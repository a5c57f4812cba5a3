"""A sweep's kind chooses its plan and its report, in one place above both.

Training sweeps (every preset but lb-classic's) get plan.py's runs and
summary.py's report; background-only sweeps (``--preset lb-classic``, no
training) get lbclassic.py's. lbclassic.py builds on plan.py and
summary.py, so the choice lives here rather than in them: neither imports
the other's kind.
"""
from __future__ import annotations

from pathlib import Path

from experiments.sweep import lbclassic, summary
from experiments.sweep.plan import Plan, resolve, seed_rule_of, training_plan


def build_plan(preset: str | None = None, *, seed_cap: int | None = None,
               seed_width: float | None = None, fixed_seeds: bool = False, **overrides) -> Plan:
    """The runs of ``preset`` (or of the quick preset's setup when None: a
    free sweep), with any of SWEEP_FIELDS overridden (None = keep).
    A scheme the registry does not know: PlanError naming it.
    The preset's seed rule (SeedRule; ``seeds`` a count is its first
    seeds, ``seed_cap``/``seed_width`` change it) unless ``fixed_seeds`` or
    ``seeds`` is a list."""
    req = resolve(preset, seed_cap=seed_cap, seed_width=seed_width, fixed_seeds=fixed_seeds,
                  **overrides)
    if req.base.get("kind") == "background":      # no training: lbclassic.py
        return lbclassic.background_plan(req.name, req.base, req.schemes, req.seed_list,
                                         req.changed, rule=seed_rule_of(req, req.schemes))
    return training_plan(req)


def load_rows(plan: Plan, out: Path, failed: dict | None = None) -> list[dict]:
    """One row per planned run, read as the sweep's kind reads its results
    (what the seed rule decides on between rounds)."""
    if plan.figure == "lb_classic":     # background only: its own rows
        return lbclassic.load_rows(plan, out, failed)[0]
    from experiments.sweep.results import load_rows as training_rows

    return training_rows(plan, out, failed)


def finish(plan: Plan, out: Path, report: dict | None = None, wall_s: float | None = None) -> dict:
    """CSV, points, plots and summary.md from what ``out`` holds now."""
    if plan.figure == "lb_classic":     # background only: its own report
        return lbclassic.finish(plan, out, report, wall_s)
    return summary.finish(plan, out, report, wall_s)
