"""How many seeds a headline point needs (issue 17): run the preset's first
seeds everywhere, then one more seed at a time at the headline points whose
main comparison is still too wide, up to a cap (plan.SeedRule).

The record of what was decided is ``OUT/seeds.json``: a resumed sweep and
``--report-only`` rebuild the same list of runs from it, and the summary
says, per headline point, whether its interval got narrow enough or the cap
stopped it.

One RTO must not decide a seed: :func:`rto_weight` is how much one
retransmission timeout at Linux's minimum (200 ms) could move a run's
headline number: for a mean FCT over n tensors, 0.2 s / (n x mean); for a
training speed, 0.2 s over the measured training time (a timeout on the
critical path stalls the iteration by about that much). Points where it
exceeds RTO_WEIGHT_MAX are named in the summary.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from experiments.sweep.plan import Plan, RunSpec, SeedRule, arm
from experiments.sweep.results import POINT_FIELDS, point_key, rto_min_s
from experiments.sweep.stats import paired

RECORD = "seeds.json"
#: a run whose headline number one RTO could move by more than this is named
RTO_WEIGHT_MAX = 0.05


def _lower_is_better(metric: str) -> bool:
    return metric != "samples_per_s"


def headline_loads(rule: SeedRule, plan: Plan) -> set[float]:
    """The loads the rule watches; when the plan has none of them (a sweep
    with other --loads), its highest load, as the paper-vs-ours table does."""
    loads = {r.load for r in plan.runs}
    if rule.loads is None:
        return loads
    watched = loads & set(rule.loads)
    return watched or ({max(loads)} if loads else set())


def _point(spec_or_row) -> tuple:
    """A point without its scheme, queueing and connection model: the arms
    (plan.arm) at one seed of it are compared."""
    d = dict(zip(POINT_FIELDS, point_key(spec_or_row)))
    d.pop("scheme")
    d.pop("queueing")
    d.pop("connections")
    return tuple(sorted(d.items(), key=lambda kv: kv[0]))


def _arm(spec: RunSpec) -> str:
    return arm(spec.scheme, spec.queueing, spec.connections)


def decide(plan: Plan, rows: list[dict]) -> list[dict]:
    """Per headline point (scheme aside): the seeds run there, each pair's
    paired interval of the ratio and its width, and the status: ``narrow``
    (every pair's interval under the width), ``cap`` (cap seeds run, still
    wide) or ``more`` (another seed wanted). A row's parameters are its
    run's (``plan``'s RunSpec of its key), whatever columns the sweep's
    kind writes."""
    rule = plan.seed_rule
    if rule is None:
        return []
    loads = headline_loads(rule, plan)
    specs = {s.key(): s for s in plan.runs}
    groups: dict[tuple, list[tuple[RunSpec, dict]]] = {}
    for r in rows:
        spec = specs.get(r["key"])
        if spec is not None and spec.load in loads and rule.watches(spec):
            groups.setdefault(_point(spec), []).append((spec, r))
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        seeds = sorted({s.seed for s, _ in rs})
        # seeds every run of the point has a result at (a stopped round leaves some planned)
        unrun = {s.seed for s, r in rs if r["status"] in ("missing", "failed")}
        pairs = []
        for a, b in rule.pairs:
            va = {s.seed: r.get(rule.metric) for s, r in rs if _arm(s) == a and r["status"] == "ok"}
            vb = {s.seed: r.get(rule.metric) for s, r in rs if _arm(s) == b and r["status"] == "ok"}
            both = sorted(set(va) | set(vb))
            pr = paired([va.get(s) for s in both], [vb.get(s) for s in both],
                        lower_is_better=_lower_is_better(rule.metric))
            width = (pr.ratio_high - pr.ratio_low) if pr.ratio_low is not None else None
            pairs.append({"a": a, "b": b, "n": pr.n, "ratio": pr.ratio, "ratio_low": pr.ratio_low,
                          "ratio_high": pr.ratio_high, "width": width})
        narrow = all(p["width"] is not None and p["width"] < rule.width for p in pairs)
        status = "narrow" if narrow else ("cap" if len(seeds) >= rule.cap else "more")
        out.append({"point": dict(key), "seeds": seeds, "pairs": pairs, "status": status,
                    "seeds_run": [x for x in seeds if x not in unrun]})
    return out


def extend(plan: Plan, decisions: list[dict]) -> Plan:
    """The plan plus one more seed, every scheme, at each point whose status is ``more``."""
    wanted = {tuple(sorted(d["point"].items(), key=lambda kv: kv[0])): max(d["seeds"]) + 1
              for d in decisions if d["status"] == "more"}
    have = {(_point(r), r.seed) for r in plan.runs}
    new: list[RunSpec] = []
    template: dict[tuple, list[RunSpec]] = {}
    for r in plan.runs:                  # one seed's runs of a point, in plan order
        k = _point(r)
        if k in wanted and (not template.get(k) or template[k][0].seed == r.seed):
            template.setdefault(k, []).append(r)
    for k, seed in wanted.items():
        if (k, seed) in have:
            continue
        new += [dataclasses.replace(r, seed=seed) for r in template.get(k, [])]
    return dataclasses.replace(plan, runs=plan.runs + new)


def write_record(out: Path, plan: Plan, decisions: list[dict]) -> None:
    rec = {"rule": plan.seed_rule.to_dict() if plan.seed_rule else None,
           "points": decisions,
           "extra_runs": [{"key": r.key(), **r.params()} for r in plan.runs
                          if plan.seed_rule and r.seed > plan.seed_rule.first]}
    (Path(out) / RECORD).write_text(json.dumps(rec, indent=1, default=list))


def with_recorded(plan: Plan, out: Path) -> Plan:
    """``plan`` plus the extra seeds an earlier invocation added (OUT/seeds.json),
    at the plan's own points only: a sweep or report over other loads, fabrics
    or CDFs does not gain a point from the seeds recorded there."""
    path = Path(out) / RECORD
    if plan.seed_rule is None or not path.exists():
        return plan
    extra = json.loads(path.read_text()).get("extra_runs") or []
    have = {r.key() for r in plan.runs}
    points = {_point(r) for r in plan.runs}
    fields = {f.name for f in dataclasses.fields(RunSpec)}
    add = []
    for d in extra:
        spec = {k: v for k, v in d.items() if k in fields}
        spec["agent_opts"] = tuple(sorted((spec.get("agent_opts") or {}).items()))
        r = RunSpec(**spec)
        if r.key() not in have and _point(r) in points:
            add.append(r)
            have.add(r.key())
    return dataclasses.replace(plan, runs=plan.runs + add)


def rto_weight(row: dict, metric: str) -> float | None:
    """How far one RTO (the run's minimum RTO: 200 ms, Linux's, unless its hosts
    had another) could move this run's ``metric``, as a fraction of it."""
    value = row.get(metric)
    if not value:
        return None
    if metric in ("samples_per_s", "iteration_time_s"):
        span = row.get("training_s")
        return rto_min_s(row) / span if span else None
    cls = metric.split("_", 1)[0]
    n = row.get(f"{cls}_count")
    return rto_min_s(row) / (n * value) if n else None
