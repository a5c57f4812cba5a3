"""The lb-classic calibration (issue 17, item 5): background flows only, no
training, the load-balancing literature's standard evaluation -- and which
of the literature's published directions hold on this testbed.

* :func:`background_plan`: the runs of ``--preset lb-classic`` (and
  ``lb-classic-quick``), called by kinds.build_plan. Each RunSpec has model
  ``"none"`` (so its key never equals a training run's) and its window
  ``background_s`` (workload/background_only.py default_window_s).
* :func:`finish`: runs.csv, points.json, paired.csv, the figures and
  summary.md from a results directory; kinds.finish hands lb-classic here.

Normalisation in the report: each run measured its own base latency B on
the idle fabric (its probe); the report divides every run of a fabric by
the same ideal, 8 S / R + B_fabric, B_fabric the median of that fabric's
runs' B -- so that a scheme is never judged against a denominator of its
own. Every run's own B is in runs.csv (``base_latency_run_s``).

Verdicts come from comparisons paired by seed (experiments/sweep/stats.py): at
one seed every scheme of a point sees the same flows at the same times
(no training, so no offset into the plan). Holm's correction runs across
every test of the directions table, and separately across the table of
each scheme against ECMP.
"""
from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from common.excerpt import shown
from experiments.sweep import labels, plots, results
from experiments.sweep.plan import Plan, PlanError, RunSpec, SeedRule, topology_path
from experiments.sweep.results import find, read_rows
from experiments.sweep.stats import ALPHA, EQUIV_MARGIN, Estimate, Paired, holm, tost
from experiments.sweep.summary import ANALYSIS_FILE, bootstrap_md, md_table, report_head

NO_MODEL = "none"
#: sweep options that only mean something for training
TRAINING_FIELDS = {"models": "--models", "archs": "--archs", "target_rates": "--target-rates",
                   "workers": "--workers", "servers": "--servers", "iterations": "--iterations",
                   "warmup": "--warmup", "scaling": "--scaling",
                   "queueing": "--queueing", "connections": "--connections",
                   "placement": "--placement", "regimes": "--regime"}
CLASSES = ("short", "long", "all")
#: per point: normalised FCT (nfct) and FCT per class, and the mechanism
LB_METRICS = tuple(f"{c}_{m}" for c in CLASSES for m in ("nfct_mean", "nfct_p99", "fct_mean_s",
                                                           "fct_p99_s")) + \
    ("reorder_per_kseg", "retrans_pct", "offered_realised", "delivered_load", "cpu_busy_mean")
POINT_FIELDS = ("topology", "background_cdf", "load", "scheme", "agent")
#: the figure's panels: (metric, title)
PANELS = [("short_nfct_mean", "(a) short flows: mean"), ("short_nfct_p99", "(b) short flows: p99"),
          ("long_nfct_mean", "(c) long flows: mean"), ("long_nfct_p99", "(d) long flows: p99"),
          ("all_nfct_mean", "(e) all flows: mean"), ("all_nfct_p99", "(f) all flows: p99")]
#: the table of every scheme against ECMP
VS_ECMP = (("short_nfct_mean", "short mean"), ("short_nfct_p99", "short p99"),
           ("long_nfct_mean", "long mean"), ("all_nfct_mean", "all mean"))
#: LetFlow's testbed claim: mean FCT within 10-20% of CONGA's
WITHIN = 0.20
#: CONGA's failed-link claim: 5x better FCT than ECMP, a ratio of at most 1/5
FIFTH = 0.20
#: the tests on a ratio against a bound: expect -> the bound a/b stays below
RATIO_BOUNDS = {"within": 1 + WITHIN, "fifth": FIFTH}


# --- the plan -------------------------------------------------------------------------------
def background_plan(name: str, base: dict, schemes: list, seed_list: list, changed: dict,
                    rule: SeedRule | None = None) -> Plan:
    """lb-classic's runs: topology, CDF, seed, load, agent setting, with the
    scheme innermost (what the sweep compares runs back to back). ``rule``
    (the preset's, plan.seed_rule_of) watches the points the published
    directions are tested at in this sweep (:func:`direction_points`); a
    sweep with none of them has no rule."""
    from common import paths
    from experiments.sweep.plan import AGENT_SETTINGS
    from netns_topology import load_topology
    from workload.background import CDF_FILES
    from workload.background_only import (DEFAULT_SIZE_SCALE, default_window_s,
                                          even_capacity_bps)

    for field, flag in TRAINING_FIELDS.items():
        if field == "queueing" and field in changed:
            raise PlanError(f"--queueing: {name.split('+')[0]} runs on its fabrics' own queues "
                            f"(one FIFO per port), got {shown(changed[field])}")
        if field in changed:
            raise PlanError(f"{flag}: {name.split('+')[0]} runs no training (background flows "
                            f"only), got {shown(changed[field])}")
    if "rto_min" in changed:
        raise PlanError(f"--rto-min: {name.split('+')[0]} runs with its fabrics' own minimum RTO "
                        f"(the kernel's; not an axis of the background-only sweeps), got "
                        f"{changed['rto_min']!r}")
    for ld in base["loads"]:
        if not 0 < ld < 1:
            raise PlanError(f"--loads: background-only runs need a load in (0, 1), got {shown(ld)}")
    cdfs = base.get("cdfs") or ["websearch"]
    for c in cdfs:
        if c not in CDF_FILES:
            raise PlanError(f"--cdfs: one of {', '.join(CDF_FILES)}, got {shown(c)}")
    scale_given = base.get("background_size_scale")
    if scale_given is not None and not 0 < scale_given <= 1:
        raise PlanError(f"--background-size-scale: a factor in (0, 1], got {shown(scale_given)}")
    runs = []
    for topo in (topology_path(t) for t in base["topologies"]):
        path = Path(topo) if Path(topo).is_absolute() else paths.REPO_ROOT / topo
        try:
            capacity = even_capacity_bps(load_topology(path))
        except ValueError as exc:
            raise PlanError(f"--topologies: {topo}: {exc}") from None
        for cdf in cdfs:
            scale = scale_given if scale_given is not None else DEFAULT_SIZE_SCALE[cdf]
            for seed in seed_list:
                for load in base["loads"]:
                    window = base.get("window_s") or default_window_s(cdf, scale, load, capacity)
                    for agent in base["agents"]:
                        for scheme in schemes:
                            runs.append(RunSpec(
                                topology=topo, scheme=scheme, model=NO_MODEL, arch=NO_MODEL,
                                workers=0, servers=0, load=float(load), seed=int(seed),
                                target_link_bps=0.0, scaling_mode=NO_MODEL, iterations=0,
                                warmup=0, background_cdf=cdf, agent=agent,
                                agent_opts=tuple(sorted(AGENT_SETTINGS[agent].items())),
                                background_size_scale=float(scale), background_s=float(window)))
    topologies = [topology_path(t) for t in base["topologies"]]
    watched = direction_points(base["loads"], topologies)
    rule = dataclasses.replace(rule, loads=tuple(sorted({ld for ld, _ in watched})),
                               where=watched) if rule and watched else None
    return Plan(name=name, description=base["description"], figure=base["figure"], runs=runs,
                keeps=list(base.get("keeps", [])), changes=list(base.get("changes", [])),
                seed_rule=rule)


#: a run's wall time beyond its plan (W + D + F): agent restart, the idle-fabric
#: probe, starting the hosts' processes, the last flows' drain. Measured with
#: lb-classic-quick and the full fabrics at load 0.9 (docs/experiments.md).
RUN_OVERHEAD_S = 6.0
#: ... and the drain after the fill grows with the load: at 0.9 runs took 9-34 s
#: past their plan (long flows finishing under load), at 0.3 a second or two
DRAIN_PER_LOAD_S = 20.0


def estimate_wall_s(plan: Plan) -> float:
    """The plan's wall time here: every run's W + D + F, the fixed overhead
    and a drain that grows with the load."""
    from workload.background_only import margin_s

    return sum(r.background_s + 2 * margin_s(r.background_s) + RUN_OVERHEAD_S
               + DRAIN_PER_LOAD_S * r.load for r in plan.runs)


# --- rows and points -------------------------------------------------------------------------
def _window_flows(res: dict) -> list[tuple]:
    """(class, status, fct_s, serial_s) of the window's flows: all the report needs."""
    return [(f["class"], f["status"], f["fct_s"], f["serial_s"])
            for f in res["load"]["background"]["flows"] if f["phase"] == "window"]


def _class_metrics(flows: list[tuple], base_s: float) -> dict:
    out = {}
    for cls in CLASSES:
        mine = [f for f in flows if cls == "all" or f[0] == cls]
        done = [f for f in mine if f[1] == "done"]
        fct = sorted(f[2] for f in done)
        nf = sorted(f[2] / (f[3] + base_s) for f in done)

        def p99(xs):
            return xs[max(0, math.ceil(0.99 * len(xs)) - 1)] if xs else None
        out.update({f"{cls}_nfct_mean": statistics.fmean(nf) if nf else None,
                    f"{cls}_nfct_p99": p99(nf),
                    f"{cls}_fct_mean_s": statistics.fmean(fct) if fct else None,
                    f"{cls}_fct_p99_s": p99(fct), f"{cls}_flows": len(mine),
                    f"{cls}_n": len(done), f"{cls}_censored": len(mine) - len(done)})
    return out


def fill_row(row: dict, res, rel: str) -> None:
    """A run's own columns of its row from its results record (the pooled
    base latency's come after every run is read: :func:`load_rows`)."""
    head = res["headline"]
    guard = results.cpu_guard_of(res)
    row.update(status="cpu_bound" if guard["flagged"] else "ok",
               scheme_in_effect=head["scheme"], commit=(res.get("software") or {}).get("commit"),
               base_latency_run_s=head["base_latency_s"], results=rel,
               **{k: head.get(k) for k in ("reorder_per_kseg", "retrans_pct", "timeouts",
                                           "offered_realised", "delivered_load")},
               flows_per_s=res["load"].get("flows_per_s"),
               **results.guard_fields(guard),
               **results.machine_fields(res))


def load_rows(plan: Plan, out: Path, failed: dict | None = None) -> tuple[list[dict], dict]:
    """One row per planned run (status ok, cpu_bound, failed, missing) and
    {topology: pooled base latency B}. Results from OUT/runs/ or OUT/runs.tar.xz."""
    flows = {}

    def fill(row, res, rel):
        fill_row(row, res, rel)
        flows[row["key"]] = _window_flows(res)

    def new_row(spec: RunSpec) -> dict:
        return {"key": spec.key(), "topology": spec.topology, "scheme": spec.scheme,
                "background_cdf": spec.background_cdf, "load": spec.load, "seed": spec.seed,
                "agent": spec.agent, "size_scale": spec.background_size_scale,
                "window_s": spec.background_s}

    rows = read_rows(plan, out, failed, new_row, fill)
    bases = {}
    for r in rows:
        if r.get("base_latency_run_s") is not None:
            bases.setdefault(r["topology"], []).append(r["base_latency_run_s"])
    pooled = {t: statistics.median(v) for t, v in bases.items()}
    for r in rows:
        if r["key"] in flows:
            r["base_latency_s"] = pooled[r["topology"]]
            r.update(_class_metrics(flows[r["key"]], pooled[r["topology"]]))
    return rows, {t: {"base_s": pooled[t], "runs": len(v), "min_s": min(v), "max_s": max(v)}
                  for t, v in bases.items()}


def points(rows: list[dict]) -> list[dict]:
    """Per point (every parameter but the seed): runs counted (status ok),
    excluded, censored and all flows, an Estimate per LB_METRICS."""
    return results.points(rows, POINT_FIELDS, LB_METRICS,
                          {"censored": "all_censored", "flows": "all_flows"}, ranges=())


# --- topologies: which is which --------------------------------------------------------------
def fabric_kind(topology: str) -> str:
    """'failed' (a leaf-spine link down), 'asymmetric' (links of different
    rates) or 'symmetric': which directions a fabric tests."""
    return labels.fabric_kind(topology)


# --- published directions --------------------------------------------------------------------
@dataclass(frozen=True)
class Direction:
    id: str
    claim: str                 # the direction, in this testbed's terms
    source: str                # where it is stated (only what we could find)
    fabric: str                # symmetric | asymmetric | failed | both
    at: str                    # high (0.8, else the highest load) | low (the lowest)
    metric: str
    tests: tuple               # (a, b, expect): expect better | worse | not_worse | equivalent |
    #                            within (a/b below 1 + WITHIN) | fifth (a/b below FIFTH)


DIRECTIONS = (
    Direction("sym-low-equal", "Symmetric fabric, light load: ECMP about as good as every other "
              "scheme (the balancers differ under load)",
              "no statement found in the sources we could read: the brief's expectation; the "
              "papers below report their gains at heavy load", "symmetric", "low",
              "all_nfct_mean", (("ecmp", "rps", "equivalent"), ("ecmp", "letflow", "equivalent"),
                                ("ecmp", "drill", "equivalent"), ("ecmp", "conga", "equivalent"))),
    Direction("sym-high-ecmp", "Symmetric fabric, heavy load: ECMP's short flows slower than "
              "under the congestion-aware schemes (hash collisions)",
              "Hu et al., TaLB, IWQoS 2024, sec. V-B (hash collisions make ECMP's short-flow FCT "
              "very large at heavy load; its flows were tensors)", "symmetric", "high",
              "short_nfct_mean", (("ecmp", "letflow", "worse"), ("ecmp", "drill", "worse"),
                                  ("ecmp", "conga", "worse"))),
    Direction("sym-drill", "Symmetric fabric, heavy load: DRILL's mean FCT below CONGA's",
              "Ghorbani et al., DRILL, SIGCOMM 2017, abstract (at 80% load 1.3-1.4x lower mean "
              "FCT than recent proposals, from shorter upstream queues)", "symmetric", "high",
              "all_nfct_mean", (("drill", "conga", "better"),)),
    Direction("sym-rps", "Symmetric fabric: TCP tolerates RPS's reordering, so spraying "
              "packets is no worse than ECMP",
              "Dixit et al., On the impact of packet spraying in data center networks, INFOCOM "
              "2013, abstract (symmetric paths queue alike; TCP tolerates the reordering)",
              "symmetric", "high", "all_nfct_mean", (("rps", "ecmp", "not_worse"),)),
    Direction("sym-drill-reorder", "DRILL's per-packet choices reorder little: fewer TCP "
              "reordering events than blind spraying (RPS)",
              "Ghorbani et al., DRILL, SIGCOMM 2017, abstract (its design addresses packet "
              "reordering); the talk's summary, layer9.org, Aug. 2017: very little reordering",
              "symmetric", "high", "reorder_per_kseg", (("drill", "rps", "better"),)),
    # Presto (issue 37, item 4), written before any run: flowcells round-robin
    # over the paths (He et al., SIGCOMM 2015, sec. 3.1) against ECMP's
    # hashing, and flowcells rather than packets as the unit. Its answer to
    # asymmetry -- the controller's weighted paths -- is not built here (the
    # round-robin is even), so on the asymmetric fabric the directions are
    # issue 37's expectation, not the paper's: spraying at a coarser grain.
    Direction("sym-presto", "Symmetric fabric, heavy load: Presto's mean FCT below ECMP's "
              "(flowcells spread what ECMP's hash collisions pile up)",
              "He et al., Presto, SIGCOMM 2015, abstract (flow hashing congests on collisions; "
              "Presto closely tracks a single non-blocking switch) and sec. 3.1 (flowcells "
              "round-robin over the paths)", "symmetric", "high", "all_nfct_mean",
              (("presto", "ecmp", "better"),)),
    Direction("sym-presto-reorder", "Presto's flowcells reorder less than per-packet spraying: "
              "fewer TCP reordering events than RPS, without the paper's receiver GRO",
              "He et al., Presto, SIGCOMM 2015, sec. 3.1 (a flowcell, up to 64 KB, keeps one "
              "path: reordering only where a flowcell ends; sec. 3.2's GRO hides that, not "
              "built here)", "symmetric", "high", "reorder_per_kseg",
              (("presto", "rps", "better"),)),
    Direction("asym-presto", f"Asymmetric fabric: Presto's mean FCT within {WITHIN:.0%} of "
              f"RPS's (both spread a flow evenly over paths of unequal rates)",
              "issue 37 (Presto should behave like spraying on the asymmetric fabric); He et "
              "al., Presto, SIGCOMM 2015, sec. 3.1 (even round-robin of flowcells without the "
              "controller's weights)", "asymmetric", "high", "all_nfct_mean",
              (("presto", "rps", "within"),)),
    Direction("asym-presto-reorder", "Asymmetric fabric: Presto reorders less than RPS (a "
              "flowcell keeps one path)",
              "issue 37 (like spraying, with fewer reorderings); He et al., Presto, SIGCOMM "
              "2015, sec. 3.1", "asymmetric", "high", "reorder_per_kseg",
              (("presto", "rps", "better"),)),
    Direction("asym-conga", "Asymmetric fabric: CONGA's FCT well below ECMP's",
              "Alizadeh et al., CONGA, SIGCOMM 2014, abstract (5x better FCT than ECMP in its "
              "testbed even with a single link failure)", "asymmetric", "high", "all_nfct_mean",
              (("conga", "ecmp", "better"),)),
    Direction("asym-letflow-conga", f"Asymmetric fabric: LetFlow's mean FCT within "
              f"{WITHIN:.0%} of CONGA's",
              "Vanini et al., LetFlow, NSDI 2017, abstract (average FCT within 10-20% of CONGA's "
              "in testbed experiments, 2x in simulations with large asymmetry and heavy load)",
              "asymmetric", "high", "all_nfct_mean", (("letflow", "conga", "within"),)),
    Direction("asym-letflow", "Asymmetric fabric: LetFlow better than the traffic-oblivious "
              "schemes (ECMP, RPS)",
              "Vanini et al., LetFlow, NSDI 2017, abstract (significantly better than "
              "traffic-oblivious schemes under asymmetry; its were WCMP and Presto)",
              "asymmetric", "high", "all_nfct_mean",
              (("letflow", "ecmp", "better"), ("letflow", "rps", "better"))),
    Direction("asym-rps", "Asymmetric fabric: RPS suffers once symmetry is broken: worse than "
              "CONGA, which adapts",
              "Dixit et al., INFOCOM 2013, abstract (RPS's performance suffers when symmetry "
              "is disturbed, e.g. link failures); Hu et al., TaLB, sec. V-B (RPS worse in "
              "asymmetric topologies)", "asymmetric", "high", "all_nfct_mean",
              (("rps", "conga", "worse"),)),
    # a failed link (issue 36, item 3): lb-classic-fail.yaml, CONGA's testbed
    # shape with one of leaf0's four uplinks down; decided before any run
    Direction("fail-conga", "Failed link: CONGA's FCT below ECMP's",
              "Alizadeh et al., CONGA, SIGCOMM 2014, abstract (5x better FCT than ECMP in its "
              "testbed even with a single link failure)", "failed", "high", "all_nfct_mean",
              (("conga", "ecmp", "better"),)),
    Direction("fail-conga-5x", "Failed link: CONGA's mean FCT at most a fifth of ECMP's "
              "(the published factor)",
              "Alizadeh et al., CONGA, SIGCOMM 2014, abstract (5x better FCT than ECMP even "
              "with a single link failure)", "failed", "high", "all_nfct_mean",
              (("conga", "ecmp", "fifth"),)),
    Direction("fail-letflow-conga", f"Failed link: LetFlow's mean FCT within {WITHIN:.0%} of "
              f"CONGA's",
              "Vanini et al., LetFlow, NSDI 2017, abstract (average FCT within 10-20% of CONGA's "
              "in testbed experiments; asymmetry from failures is what it is built for)",
              "failed", "high", "all_nfct_mean", (("letflow", "conga", "within"),)),
    Direction("fail-letflow", "Failed link: LetFlow better than the traffic-oblivious schemes "
              "(ECMP, RPS)",
              "Vanini et al., LetFlow, NSDI 2017, abstract (significantly better than "
              "traffic-oblivious schemes under asymmetry)", "failed", "high", "all_nfct_mean",
              (("letflow", "ecmp", "better"), ("letflow", "rps", "better"))),
    Direction("fail-rps", "Failed link: RPS worse than CONGA, which adapts",
              "Dixit et al., INFOCOM 2013, abstract (RPS's performance suffers when symmetry "
              "is disturbed, e.g. link failures)", "failed", "high", "all_nfct_mean",
              (("rps", "conga", "worse"),)),
    # WCMP (issue 37, item 4), decided before any run. Its weights here are the
    # local ports' rates (docs/schemes.md, WCMP): on lb-classic-asym leaf0 splits
    # 2:1 towards the spines, while leaf1, whose uplinks are alike, still sends
    # half of its leaf0-bound flows over spine1's half-rate link down
    Direction("asym-wcmp", "Asymmetric fabric: WCMP better than ECMP (flows weighted by "
              "the uplinks' rates)",
              "Zhou et al., WCMP, EuroSys 2014, abstract (ECMP assumes a balanced, regular, "
              "fault-free topology and degrades when it is not; WCMP weights the paths by the "
              "topology and cuts the variation in flow bandwidths by up to 25x relative to ECMP)",
              "asymmetric", "high", "all_nfct_mean", (("wcmp", "ecmp", "better"),)),
    Direction("sym-wcmp-ecmp", "Check, not a published direction: on the symmetric fabric "
              "every port weighs alike, so WCMP takes ECMP's port for every flow and equals ECMP",
              "docs/schemes.md (WCMP: equal weights reduce to ECMP's hash mod n, flow for flow; "
              "tests/test_schemes_switch.py)", "symmetric", "high", "all_nfct_mean",
              (("wcmp", "ecmp", "equivalent"),)),
    Direction("talb-fallback", "Check, not a published direction: with no tensors TaLB forwards "
              "every packet by its fallback (ECMP), so TaLB equals ECMP",
              "docs/schemes.md (TaLB's fallback for untagged packets)", "both", "high",
              "all_nfct_mean", (("talb", "ecmp", "equivalent"),)),
)


#: "light" load: the lowest swept, if at most this; "heavy": 0.8, else the highest
#: swept if at least HEAVY_MIN
LIGHT_MAX, HEAVY_MIN = 0.3, 0.7


def _load_at(loads: list[float], at: str) -> float | None:
    """The load a direction is tested at; None when the sweep has none that fits."""
    if not loads:
        return None
    if at == "low":
        return min(loads) if min(loads) <= LIGHT_MAX else None
    if 0.8 in loads:
        return 0.8
    return max(loads) if max(loads) >= HEAVY_MIN else None


def direction_points(loads, topologies) -> tuple[tuple[float, str], ...]:
    """(load, topology) of every point a direction is tested at in a sweep of
    ``loads`` on ``topologies``: where the seed rule adds seeds. Seeds go
    only where a verdict uses them (the light-load direction is about the
    symmetric fabric: the asymmetric one gets none at that load)."""
    kinds = {t: fabric_kind(t) for t in topologies}
    points = set()
    for d in DIRECTIONS:
        load = _load_at(list(loads), d.at)
        if load is not None:
            points |= {(load, t) for t, kind in kinds.items() if d.fabric in ("both", kind)}
    return tuple(sorted(points))


def _compare(rows, metric, a: dict, b: dict) -> Paired:
    from experiments.sweep.summary import compare

    return compare(rows, metric, a, b)[0]


def _test_pvalues(pr: Paired, logs: list[float], expect: str) -> tuple[float | None, float | None]:
    """(p of the difference -- or, for a bound of RATIO_BOUNDS (within,
    fifth), of the ratio above the bound; p of the equivalence -- or of the
    ratio below the bound) the test decides on."""
    if expect in RATIO_BOUNDS:
        if len(logs) < 2:
            return None, None
        bound = math.log(RATIO_BOUNDS[expect])
        return tost(logs, bound, 1e9), tost(logs, -1e9, bound)
    return pr.p, pr.p_equiv


def _outcome(expect: str, pr: Paired, p, p_eq) -> str:
    if pr.n < 2 or p is None:
        return "no test"
    if expect in RATIO_BOUNDS:      # p: ratio above the bound; p_eq: below it
        if p_eq is not None and p_eq < ALPHA:
            return "holds"
        return "does not hold" if p < ALPHA else "inconclusive"
    v = pr.verdict(p, p_eq)
    eq = v.startswith("equivalent")
    if expect == "better":
        return "holds" if v == "better" else ("does not hold" if v == "worse" or eq else "inconclusive")
    if expect == "worse":
        return "holds" if v == "worse" else ("does not hold" if v == "better" or eq else "inconclusive")
    if expect == "not_worse":
        return "holds" if v == "better" or eq else ("does not hold" if v == "worse" else "inconclusive")
    if expect == "equivalent":
        return "holds" if eq else ("does not hold" if v in ("better", "worse") else "inconclusive")
    raise ValueError(f"expect: {expect!r}")


def _paired_with_logs(rows, metric, a, b) -> tuple[Paired, list[float]]:
    """The paired comparison and the per-seed log-ratios (the within-margin
    test needs them)."""
    from experiments.sweep.results import seed_values

    va, vb = seed_values(rows, metric, **a), seed_values(rows, metric, **b)
    logs = [math.log(va[s] / vb[s]) for s in sorted(set(va) & set(vb))
            if va[s] is not None and vb[s] is not None and va[s] > 0 and vb[s] > 0]
    return _compare(rows, metric, a, b), logs


def directions(rows: list[dict], pts: list[dict]) -> list[dict]:
    """Every direction on every fabric of its kind and every CDF: its tests
    paired by seed, Holm-corrected across all of them, and the verdict:
    holds here / does not hold / inconclusive / not run."""
    kinds = {t: fabric_kind(t) for t in sorted({p["topology"] for p in pts})}
    cdfs = sorted({p["background_cdf"] for p in pts})
    out, family = [], []
    for d in DIRECTIONS:
        for topo, kind in kinds.items():
            if d.fabric != "both" and d.fabric != kind:
                continue
            for cdf in cdfs:
                mine = [p for p in pts if p["topology"] == topo and p["background_cdf"] == cdf
                        and p["agent"] == "default"]
                load = _load_at(sorted({p["load"] for p in mine}), d.at)
                have = {p["scheme"] for p in mine}
                tests = []
                for a, b, expect in d.tests:
                    t = {"a": a, "b": b, "expect": expect}
                    if load is None:
                        t["outcome"] = (f"not run (no load <= {LIGHT_MAX:g})" if d.at == "low"
                                        else f"not run (no load >= {HEAVY_MIN:g})")
                    elif a not in have or b not in have:
                        t["outcome"] = f"not run ({', '.join(s for s in (a, b) if s not in have)})"
                    else:
                        kw = {"topology": topo, "background_cdf": cdf, "load": load,
                              "agent": "default"}
                        pr, logs = _paired_with_logs(rows, d.metric, {**kw, "scheme": a},
                                                     {**kw, "scheme": b})
                        t["pair"] = pr
                        t["p"], t["p_eq"] = _test_pvalues(pr, logs, expect)
                        t["censored"] = sum(find(mine, scheme=s, load=load)["censored"]
                                            for s in (a, b))
                        family.append(t)
                    tests.append(t)
                out.append({"direction": d, "topology": topo, "kind": kind, "cdf": cdf,
                            "load": load, "tests": tests})
    flat = [x for t in family for x in (t["p"], t["p_eq"])]
    adj = holm(flat)
    for i, t in enumerate(family):
        t["p_holm"], t["p_eq_holm"] = adj[2 * i], adj[2 * i + 1]
        t["outcome"] = _outcome(t["expect"], t["pair"], t["p_holm"], t["p_eq_holm"])
    for r in out:        # decided on the tests that ran; those that did not are said
        got = [t["outcome"] for t in r["tests"]]
        ran = [o for o in got if not o.startswith("not run")]
        if not ran:
            r["verdict"] = "not run"
        elif "does not hold" in ran:
            r["verdict"] = "does not hold"
        elif all(o == "holds" for o in ran):
            r["verdict"] = "holds here"
        else:
            r["verdict"] = "inconclusive"
        if ran and len(ran) < len(got):
            r["verdict"] += " (partly not run)"
    return out


# --- text ------------------------------------------------------------------------------------
def _ratio(pr: Paired) -> str:
    """a/b − 1 and the interval of the test behind the verdict (the log-ratios';
    where a seed's value is 0 there is no ratio and the test ran on the
    differences, shown so)."""
    if pr is not None and pr.scale == "difference" and pr.diff.mean is not None:
        s = f"difference {pr.diff.mean:+.3g}"
        return s + (f" [{pr.diff.low:+.3g}, {pr.diff.high:+.3g}]" if pr.diff.low is not None else "")
    if pr is None or pr.ratio is None:
        return "-"
    s = f"{pr.ratio - 1:+.0%}"
    if pr.ratio_low is not None:
        s += f" [{pr.ratio_low - 1:+.0%}, {pr.ratio_high - 1:+.0%}]"
    return s


_EXPECT = {"better": "better than", "worse": "worse than", "not_worse": "not worse than",
           "equivalent": "equivalent (±10%) to", "within": f"within +{WITHIN:.0%} of",
           "fifth": f"at most {FIFTH:g}× (5× better than)"}


def _directions_md(dirs: list[dict]) -> list[str]:
    L = ["## Published directions: do they hold here?", "",
         "Each direction as the literature states it (source: only what we could find stated; "
         "abstracts paraphrased), tested on the fabric it is about at its load (*high*: 0.8, "
         "else the highest swept; *low*: the lowest), on the metric named, per CDF. A test "
         "compares scheme a with scheme b **paired by seed**: a/b − 1 with its 95% interval "
         "and the verdict from one test, the paired t on the per-seed log-ratios (p; the "
         f"interval is its interval), and TOST within ±{EQUIV_MARGIN:.0%} (p equiv; "
         "experiments/sweep/stats.py), both "
         "Holm-corrected across every p-value of this table. *within +20%*: holds when the one-sided t on the "
         "log-ratios puts a/b below 1.2, does not when it puts it above."
         + (f" *at most {FIFTH:g}×*: the same against {FIFTH:g} (CONGA's published 5×)."
            if any(t["expect"] == "fifth" for r in dirs for t in r["tests"]) else "")
         + " A direction **holds "
         "here** when each of its tests that ran does, **does not hold** when any test "
         "contradicts it (for *better* and *worse*, equivalence contradicts too), else "
         "**inconclusive**; *partly not run* when some of its schemes or loads are not in the "
         "sweep.", ""]
    body = []
    for r in dirs:
        d = r["direction"]
        tests = "; ".join(
            f"{t['a']} {_EXPECT[t['expect']]} {t['b']}: "
            + (f"{_ratio(t.get('pair'))} (n={t['pair'].n}, {_ps(t)}) → {t['outcome']}"
               if "pair" in t else t["outcome"])
            + (f", {t['censored']} censored flows" if t.get("censored") else "")
            for t in r["tests"])
        body.append([d.claim, d.source, f"{Path(r['topology']).stem}, {r['cdf']}, "
                     f"load {r['load']:g}" if r["load"] is not None else "-",
                     d.metric.replace("_", " "), tests, f"**{r['verdict']}**"])
    L += [md_table(["direction", "source", "where", "metric", "tests (a/b − 1 [95% CI])",
                     "here"], body), ""]
    return L


def _ps(t: dict) -> str:
    """The Holm-corrected p-values a test decided on."""
    if t["expect"] in RATIO_BOUNDS:
        b = RATIO_BOUNDS[t["expect"]]
        return (f"p(ratio > {b:g}) {_p(t.get('p_holm'))}, "
                f"p(ratio < {b:g}) {_p(t.get('p_eq_holm'))}")
    return f"p {_p(t.get('p_holm'))}, p equiv {_p(t.get('p_eq_holm'))}"


def _p(p) -> str:
    return "-" if p is None else (f"{p:.3f}" if p >= 0.001 else "<0.001")


def vs_ecmp_md(rows, pts) -> list[str]:
    """Every scheme against ECMP at every point, paired by seed, on the
    normalised FCT; Holm across the whole table."""
    cells = []
    for topo in sorted({p["topology"] for p in pts}):
        for cdf in sorted({p["background_cdf"] for p in pts}):
            for load in sorted({p["load"] for p in pts if p["topology"] == topo}):
                kw = {"topology": topo, "background_cdf": cdf, "load": load, "agent": "default"}
                if not find(pts, scheme="ecmp", **kw):
                    continue
                for s in plots.series_order({p["scheme"] for p in pts if p["scheme"] != "ecmp"
                                              and all(p[k] == v for k, v in kw.items())}):
                    cells.append((topo, cdf, load, s, [
                        _compare(rows, m, {**kw, "scheme": s}, {**kw, "scheme": "ecmp"})
                        for m, _ in VS_ECMP]))
    if not cells:
        return []
    flat = [pr for *_, prs in cells for pr in prs]
    ph, peh = holm([pr.p for pr in flat]), holm([pr.p_equiv for pr in flat])
    body, i = [], 0
    for topo, cdf, load, s, prs in cells:
        line = [Path(topo).stem, cdf, f"{load:g}", labels.scheme_label(s, topo),
                str(min(pr.n for pr in prs))]
        for pr in prs:
            v = pr.verdict()
            mark = "†" if v not in ("inconclusive",) and pr.n >= 2 and pr.verdict(ph[i], peh[i]) == v \
                else ""
            line.append(f"{_ratio(pr)}; {v if pr.n >= 2 else '-'}{mark}")
            i += 1
        body.append(line)
    return ["## Each scheme against ECMP", "",
            "The scheme's normalised FCT over ECMP's, paired by seed: ratio − 1 and its 95% "
            "interval, then the verdict for the scheme (better = lower), each test at 5% "
            f"uncorrected ({len(flat)} tests: about {0.05 * len(flat):.0f} better/worse verdicts "
            "by chance alone if nothing differed); † marks one that stands after Holm's "
            "correction across this table. Every pair of schemes at every point, with raw "
            "p-values: `paired.csv`.", "",
            md_table(["fabric", "CDF", "load", "scheme", "n"] + [t for _, t in VS_ECMP], body), ""]


def _fmt(e: Estimate, scale=1.0, digits=2) -> str:
    if e.mean is None:
        return "-"
    return f"{e.mean * scale:.{digits}f}" + (f" ± {e.half_width * scale:.{digits}f}"
                                              if e.half_width is not None else " (n=1)")


def _points_md(pts) -> str:
    cols = ["fabric", "CDF", "load", "scheme", "n", "excl.", "flows", "censored",
            "short mean", "short p99", "long mean", "long p99", "all mean", "all p99",
            "all FCT mean ms", "delivered", "reorder /kseg", "CPU"]
    body = []
    for p in sorted(pts, key=lambda p: (p["topology"], p["background_cdf"], p["load"],
                                        plots.series_order([p["scheme"]])[0])):
        e = p["est"]
        body.append([Path(p["topology"]).stem, p["background_cdf"], f"{p['load']:g}",
                     labels.scheme_label(p["scheme"], p["topology"]),
                     p["counted"], p["cpu_bound"] + p["failed"], p["flows"], p["censored"],
                     *(_fmt(e[m]) for m, _ in PANELS),
                     _fmt(e["all_fct_mean_s"], 1e3, 1), _fmt(e["delivered_load"]),
                     _fmt(e["reorder_per_kseg"], 1, 1), _fmt(e["cpu_busy_mean"], 100, 0)])
    return md_table(cols, body)


def render(pts: list[dict], out: Path, title: str) -> dict:
    """One PNG per (fabric, CDF): six panels of normalised FCT against load
    (short, long, all; mean and p99), a line per scheme, 95% error bars,
    log scale (overloaded points sit orders of magnitude above)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    manifest: dict = {}
    for (topo, cdf), gpts in plots.group_by(pts, ("topology", "background_cdf")).items():
        fig, axes = plt.subplots(2, 3, figsize=(12.6, 7.2), squeeze=False)
        for ax, (metric, ptitle) in zip([axes[0][0], axes[1][0], axes[0][1], axes[1][1],
                                         axes[0][2], axes[1][2]], PANELS):
            plots.draw_panel(ax, gpts, x="load", series=lambda p: p["scheme"], metric=metric,
                             scale=1.0, title=ptitle, ylabel="FCT / ideal", xlabel="load",
                             label=lambda name, topo=topo: labels.scheme_label(name, topo))
            if ax.containers:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        fig.suptitle(f"{title} — {plots.figure_name((topo, cdf))}", fontsize=10)
        plots.save_figure(fig, Path(out) / f"{plots.figure_name((topo, cdf))}.png", manifest)
    (Path(out) / "plots.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def paired_rows(rows, pts) -> list[dict]:
    """Every pair of schemes at every point on every normalised metric (paired.csv)."""
    out = []
    cells = sorted({(p["topology"], p["background_cdf"], p["load"], p["agent"]) for p in pts},
                   key=lambda c: tuple(map(str, c)))
    for topo, cdf, load, agent in cells:
        kw = {"topology": topo, "background_cdf": cdf, "load": load, "agent": agent}
        ss = plots.series_order({p["scheme"] for p in pts if all(p[k] == v for k, v in kw.items())})
        for i, a in enumerate(ss):
            for b in ss[i + 1:]:
                for m in [m for m, _ in PANELS] + ["reorder_per_kseg"]:
                    pr = _compare(rows, m, {**kw, "scheme": a}, {**kw, "scheme": b})
                    out.append({**kw, "a": a, "b": b, "metric": m, **pr.to_dict()})
    return out


def finish(plan: Plan, out: Path, report: dict | None = None, wall_s: float | None = None) -> dict:
    """runs.csv, points.json, paired.csv, PNGs and summary.md from ``out``."""
    from experiments.sweep.results import write_csv

    out = Path(out)
    failed = (report or {}).get("failed")
    if failed is None and (out / "failed.json").exists():
        failed = json.loads((out / "failed.json").read_text())
    rows, bases = load_rows(plan, out, failed)
    write_csv(rows, out / "runs.csv")
    pts = points(rows)
    (out / "points.json").write_text(json.dumps(
        [{**{k: v for k, v in p.items() if k != "est"},
          "est": {m: e.to_dict() for m, e in p["est"].items()}} for p in pts], indent=1))
    manifest = render(pts, out, "lb-classic") if pts else {}
    dirs = directions(rows, pts)
    table = paired_rows(rows, pts)
    write_csv(table, out / "paired.csv")
    (out / "summary.md").write_text(summary_md(plan, out, rows, pts, dirs, bases, manifest, wall_s,
                                               boot=bootstrap_md(table)))
    verdicts = [{"number": f"{r['direction'].id} ({Path(r['topology']).stem}, {r['cdf']})",
                 "paper": r["direction"].source.split(",")[0],
                 "ours": "; ".join(_ratio(t["pair"]) for t in r["tests"] if "pair" in t) or "-",
                 "verdict": r["verdict"], "direction": r["direction"].claim}
                for r in dirs]
    return {"rows": rows, "points": pts, "directions": dirs, "paper_vs_ours": verdicts,
            "plots": manifest, "base_latency": bases}


def seeds_md(plan: Plan, rows: list[dict]) -> list[str]:
    """How many seeds each direction point ran and why (the seed rule), and
    how far one RTO could move a run's all-flow mean FCT."""
    from experiments.sweep import seeds
    from experiments.sweep.summary import (seed_interval, seed_rule_text, seed_status_md,
                                           seeds_run_md)

    rule = plan.seed_rule
    L = ["## Seeds", ""]
    if rule is None:
        L += [f"Fixed: seeds {', '.join(map(str, sorted({r.seed for r in plan.runs})))} at every "
              "point (no seed rule: lb-classic-quick, a list given with --seeds, --fixed-seeds, "
              "or a sweep with no load the directions are tested at).", ""]
    else:
        at: dict[float, list[str]] = {}
        for ld, topo in rule.where or ():
            at.setdefault(ld, []).append(Path(topo).stem)
        where = "; ".join(f"load {ld:g} on {', '.join(sorted(ts))}" for ld, ts in sorted(at.items()))
        L += [seed_rule_text(rule, seeds.headline_loads(rule, plan)) + " The headline points are "
              f"those a direction is tested at ({where}), so their verdicts get the seeds.", ""]
        body = []
        for d in seeds.decide(plan, rows):
            pt = d["point"]
            widths = "; ".join(f"{p['a']}/{p['b']} {seed_interval(p)}" for p in d["pairs"])
            body.append([f"{Path(pt['topology']).stem} {pt['background_cdf']} {pt['load']:g}",
                         seeds_run_md(d), widths, seed_status_md(d, rule)])
        L += [md_table(["point (fabric, CDF, load)", "seeds", "ratio [95% CI] (width)",
                        "stopped because"], body) if body else "No point of the rule has runs yet.",
              ""]
    # one RTO (the kernel's 200 ms: the fabrics set no minimum) over the
    # all-flow mean: 0.2 s / (finished flows x their mean FCT)
    from experiments.sweep.seeds import RTO_WEIGHT_MAX

    weights = [(0.2 / (r["all_n"] * r["all_fct_mean_s"]), r) for r in rows
               if r["status"] == "ok" and r.get("all_n") and r.get("all_fct_mean_s")]
    if weights:
        w, worst = max(weights, key=lambda x: x[0])
        over = sum(x > RTO_WEIGHT_MAX for x, _ in weights)
        L += [f"One RTO (the kernel's minimum, 200 ms) could move a run's all-flow mean FCT by "
              f"at most {w:.2%} (0.2 s over the window's finished flows × their mean FCT; "
              f"largest over the {len(weights)} counted runs: {Path(worst['topology']).stem} "
              f"{worst['background_cdf']} {worst['scheme']} load {worst['load']:g} seed "
              f"{worst['seed']}): "
              + (f"no run over {RTO_WEIGHT_MAX:.0%}, so no single timeout decides a seed."
                 if not over else
                 f"{over} runs over {RTO_WEIGHT_MAX:.0%}."), ""]
    return L


def tails_md(rows: list[dict]) -> list[str]:
    """What each run's p99 rests on (issue 36, item 7): the finished flows
    per class and run, and which value the nearest-rank p99 is."""
    parts = []
    for cls in CLASSES:
        ns = sorted(r[f"{cls}_n"] for r in rows if r["status"] == "ok" and r.get(f"{cls}_n"))
        if ns:
            top = sorted({n - math.ceil(0.99 * n - 1e-9) + 1 for n in (ns[0], ns[-1])})
            parts.append(f"{cls} {ns[0]}-{ns[-1]} flows a run (median {statistics.median(ns):g}; "
                         f"the p99 the k-th largest, k = {'-'.join(map(str, top))})")
    if not parts:
        return []
    return ["**What each p99 rests on**: " + "; ".join(parts) + ". A p99 over fewer than 368 "
            "values has no distribution-free 95% upper bound (0.99^n > 2.5%; "
            "experiments/sweep/stats.py quantile_ci); runs.csv has each run's count "
            "(`short_n`, `long_n`, `all_n`).", ""]


def summary_md(plan, out, rows, pts, dirs, bases, manifest, wall_s, boot: str = "") -> str:
    L = report_head(plan, rows, wall_s)
    L += ["## What runs", "",
          "No training: `talb run --model none` (workload/background_only.py). Poisson flows "
          "from every host to random hosts on the other leaf, sizes from the CDF (scaled), one "
          "TCP connection each. A run: an idle-fabric probe (1-byte flows: the base latency B), "
          "then warm-up W, the measured window D (the flows planned to start in it are the "
          "sample), a fill F while the window's last flows finish under load, then no new "
          "flows until every flow is done (or censored). W = F = max(2 s, D/10).", "",
          "**Normalised FCT** = FCT / (8 × size / host rate + B): 1 on an idle fabric for every "
          "size. B is the fabric's: the median over all its runs of each run's probe median "
          "(every scheme divided by the same ideal). **Classes** by the unscaled size: short "
          "≤ 100 KB, long ≥ 1 MB, all = every flow. Mean and p99 (nearest rank) over the "
          "finished flows of a run; a point is the mean over its seeds.", ""]
    L += tails_md(rows)
    kinds = {t: fabric_kind(t) for t in sorted({r.topology for r in plan.runs})}
    L += [md_table(["fabric", "kind", "base latency B (runs, min-max)"],
                    [[Path(t).stem, k, (f"{bases[t]['base_s'] * 1e3:.3f} ms ({bases[t]['runs']}, "
                                        f"{bases[t]['min_s'] * 1e3:.3f}-{bases[t]['max_s'] * 1e3:.3f})")
                      if t in bases else "-"] for t, k in kinds.items()]), ""]
    dims = {"schemes": sorted({r.scheme for r in plan.runs}, key=lambda s: plots.series_order([s])),
            "CDFs (size scale)": sorted({f"{r.background_cdf} (x{r.background_size_scale:g})"
                                         for r in plan.runs}),
            "loads": sorted({r.load for r in plan.runs}), "seeds": sorted({r.seed for r in plan.runs}),
            "agent settings": sorted({r.agent for r in plan.runs})}
    L += [md_table(["parameter", "values"], [[k, ", ".join(map(str, v))] for k, v in dims.items()]),
          "", "Windows D (s) by fabric, CDF and load: "
          + "; ".join(f"{Path(t).stem} {c}: " + ", ".join(
              f"{ld:g}→{w:g}" for ld, w in sorted({(r.load, r.background_s) for r in plan.runs
                                                   if r.topology == t and r.background_cdf == c}))
              for t, c in sorted({(r.topology, r.background_cdf) for r in plan.runs})) + ".", ""]
    if plan.keeps:
        L += ["Kept from the literature's evaluations:", ""] + [f"- {k}" for k in plan.keeps] + [""]
    if plan.changes:
        L += ["Changed to fit this machine:", ""] + [f"- {c}" for c in plan.changes] + [""]
    L += _directions_md(dirs)
    L += ["**Pairing.** With no training there is no offset: at one seed every scheme of a "
          "point gets the same flows (sizes, hosts, times relative to the run's start). "
          "`runs.csv` shows it: `offered_realised` is equal across the schemes of a seed.", ""]
    L += vs_ecmp_md(rows, pts)
    L += seeds_md(plan, rows) + ([boot, ""] if boot else [])
    analysis = out / ANALYSIS_FILE
    if analysis.exists():
        L += ["## Analysis", "", f"(from `{ANALYSIS_FILE}` in this directory)", "",
              analysis.read_text().strip(), ""]
    L += ["## Points", "", "Normalised FCT, mean ± 95% half-width over the counted seeds (n); "
          "`flows` the window's flows of the counted runs, `censored` those that never "
          "finished (never given an FCT: a point with many is better than it looks); "
          "`delivered` what the leaves' uplinks sent during the window over the capacity "
          "(headers and ACKs included); `reorder /kseg` TCP reordering events per 1000 "
          "segments sent; `CPU` % busy.", "", _points_md(pts), ""]
    flagged = [r for r in rows if r["status"] == "cpu_bound"]
    bad = [r for r in rows if r["status"] in ("failed", "missing")]
    L += ["## Runs excluded", ""]
    if flagged:
        L += ["CPU-bound (the CPU guard, docs/workload.md):", ""] + \
             [f"- `{r['key']}` {Path(r['topology']).stem} {r['background_cdf']} {r['scheme']} "
              f"load {r['load']:g} seed {r['seed']}: {r.get('cpu_guard')}" for r in flagged] + [""]
    if bad:
        L += ["Failed or not run:", ""] + \
             [f"- `{r['key']}` {Path(r['topology']).stem} {r['background_cdf']} {r['scheme']} "
              f"load {r['load']:g} seed {r['seed']}: {r['status']}"
              f"{': ' + r['error'] if r.get('error') else ''}" for r in bad] + [""]
    if not flagged and not bad:
        L += ["None.", ""]
    L += ["## Figures", ""] + [f"![{name}]({name})" for name in manifest] + [""]
    return "\n".join(L)
