"""A sweep's runs as rows (the CSV) and as points (mean and 95% interval
over the seeds, CPU-bound and failed runs left out)."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from types import MappingProxyType

from experiments.sweep import pairing
from experiments.sweep.layout import result_path
from experiments.sweep.plan import Plan, RunSpec
from experiments.sweep.stats import Estimate, estimate
from workload.run_record import NewerFormatError, RecordError, read_record

#: the numbers a point reports: outcomes (headline fields of the results file,
#: plus the ideal gap) and where the time went (mechanism)
#: (FCT: from the hand-off to the socket; network FCT, "netfct": from the first
#: packet on the wire, docs/workload.md "Measurement"; results files from before
#: wire times have no network FCT: None here, never a value made up)
OUTCOME_METRICS = ("short_fct_mean_s", "short_fct_p99_s", "long_fct_mean_s", "all_fct_mean_s",
                   "short_netfct_mean_s", "short_netfct_p99_s", "long_netfct_mean_s",
                   "all_netfct_mean_s",
                   "trailing_fct_mean_s", "trailing_fct_p99_s", "samples_per_s", "ideal_gap",
                   # the iteration's time on the testbed (a real MPI job's, --clients mpi)
                   "iteration_time_s")
MECHANISM_METRICS = ("hol_pct", "sendbuf_pct", "short_service_mean_s", "access_gap",
                     "tcp_retrans_pct",
                     "tcp_timeouts", "rto_tail_pct",
                     "uplink_spread", "drops_to_host", "drops_leaf_up", "drops_spine_down")
#: offered uplink load (summary.offered_load of the results file, docs/workload.md):
#: the busiest leaf's training + background bytes to other leaves over its
#: uplinks' capacity in the training span, and its two parts; empty for results
#: files from before it was recorded
OFFERED_METRICS = ("offered_uplink_load", "offered_uplink_training", "offered_uplink_background")
#: Linux's minimum retransmission timeout: a tensor slower than this most
#: likely waited for one (its FCT is a timeout, not a queue)
TCP_RTO_MIN_S = 0.200


def rto_min_s(res_or_row: dict) -> float:
    """The minimum RTO a run's hosts had: its results' ``fabric.rto_min_ms``
    (a row's ``rto_min_ms_in_effect``), or Linux's 200 ms when none was set
    (every run before the topology field ``rto_min``)."""
    ms = res_or_row.get("rto_min_ms_in_effect") if "rto_min_ms_in_effect" in res_or_row \
        else (res_or_row.get("fabric") or {}).get("rto_min_ms")
    return TCP_RTO_MIN_S if ms is None else ms / 1e3
METRICS = OUTCOME_METRICS + MECHANISM_METRICS + OFFERED_METRICS
CENSORED = ("short_censored", "long_censored", "all_censored", "trailing_censored",
            "short_wire_missing", "long_wire_missing", "all_wire_missing",
            "trailing_wire_missing")
#: copied into runs.csv beside the metrics (no point estimate of their own)
SENDBUF = ("short_sendbuf_wait_mean_s", "long_sendbuf_wait_mean_s", "all_sendbuf_wait_mean_s",
           "trailing_sendbuf_wait_mean_s",
           # the wait for a connection before the hand-off (connection models)
           "short_conn_wait_mean_s", "long_conn_wait_mean_s", "all_conn_wait_mean_s",
           "trailing_conn_wait_mean_s")
#: the parameters that tell runs apart (a point: all of them but the seed)
SPEC_FIELDS = ("topology", "scheme", "model", "arch", "workers", "servers", "load", "seed",
               "target_link_bps", "scaling_mode", "iterations", "warmup", "background_cdf",
               "background_size_scale", "agent", "queueing", "connections", "placement",
               "rto_min", "client", "regime", "scheduler", "comm", "fusion")
POINT_FIELDS = tuple(f for f in SPEC_FIELDS if f != "seed")
#: a cell: the runs that share a seed's background plan, and are paired by seed
#: (schemes, agent settings, queueing and connection-model arms, minimum RTOs;
#: not placements: a placement other than spread changes the background's senders)
CELL_FIELDS = tuple(f for f in SPEC_FIELDS
                    if f not in ("scheme", "agent", "queueing", "connections", "rto_min", "seed",
                                 "scheduler", "comm", "fusion"))


def _compute_s(model: dict) -> float:
    """One iteration's compute at target scale: forward + backward of every layer."""
    return sum(model.get("layer_fwd_s", [])) + sum(model.get("layer_bwd_s", []))


def ideal_samples_per_s(results: dict) -> float | None:
    """Compute-bound speed of the target cluster: workers x batch over one
    iteration's compute; None for a model without compute (the three-layer
    model)."""
    m = results.get("model", {})
    compute = _compute_s(m)
    if compute <= 0:
        return None
    return results["config"]["workers"] * m["batch_size"] / compute


def access_bound_samples_per_s(results: dict) -> float | None:
    """The speed no load balancer can beat: each iteration at least as long
    as its compute and as the busiest host link's share of the training
    bytes (PS: every worker's push into its servers, split evenly; ring:
    2(N-1)/N of the model per worker), at target scale. The gap from this
    bound is all a load balancer could win back; the gap from it to the
    compute-bound ideal is the hosts' links (the PS incast)."""
    cfg, m = results["config"], results.get("model", {})
    per_iter = (results["summary"].get("bytes") or {}).get("expected_per_iteration")
    rates = (results.get("fabric") or {}).get("host_link_bps")
    if not per_iter or not rates or not m.get("batch_size"):
        return None
    link = min(rates[h] for h in results["placement"]["workers"] + results["placement"]["servers"])
    if cfg["arch"] == "ps":
        busiest = cfg["workers"] * per_iter["push_per_worker"] / cfg["servers"]
    else:
        busiest = per_iter["send_per_worker"]
    net_s = 8 * busiest / link / results["scaling"]["time_scale"]      # at target scale
    return cfg["workers"] * m["batch_size"] / max(_compute_s(m), net_s)


def service_times(tensors: list[dict]) -> list[tuple[dict, float]]:
    """(tensor, own service time) for every measured tensor: from when it
    could first move -- its hand-off to the socket, or the delivery of the
    tensor before it on the same connection (src -> dst, and the
    connection's index among the pair's: connection models), whichever is
    later -- to its delivery. TCP delivers a connection's bytes in order, so
    the rest of its FCT is spent behind earlier tensors of its own connection
    (head of line), which neither a path nor a queue priority can shorten."""
    by: dict[tuple, list[dict]] = {}
    for t in tensors:
        if t.get("fct_s") is not None:
            by.setdefault((t["src"], t["dst"], t.get("conn") or 0), []).append(t)
    out = []
    for ts in by.values():
        ts.sort(key=lambda t: t["t_start_ns"])
        before = 0
        for t in ts:
            if not t.get("warmup"):
                out.append((t, (t["t_done_ns"] - max(t["t_start_ns"], before)) / 1e9))
            before = max(before, t["t_done_ns"])
    return out


def sendbuf_pct(tensors: list[dict]) -> float | None:
    """% of the FCT (hand-off to delivery) of the measured tensors with wire
    times spent in the sender's socket buffer: from their first byte to the
    kernel to their first packet on the wire. None without wire times (results
    from before them)."""
    both = [t for t in tensors if not t.get("warmup") and t.get("sendbuf_wait_s") is not None
            and t.get("fct_s")]
    total = sum(t["fct_s"] for t in both)
    return 100 * sum(t["sendbuf_wait_s"] for t in both) / total if total else None


def _tcp(results: dict) -> tuple[float | None, int | None]:
    """Retransmitted share of the training hosts' segments (%) and their RTOs."""
    hosts = (results["summary"].get("tcp") or {}).get("per_host") or {}
    out = sum(h.get("out_segs", 0) for h in hosts.values())
    if not out:
        return None, None
    return (100 * sum(h.get("retrans_segs", 0) for h in hosts.values()) / out,
            sum(h.get("timeouts", 0) for h in hosts.values()))


def mechanism(results: dict, samples_per_s: float | None) -> dict:
    """Where a run's time went (MECHANISM_METRICS and the bound they use)."""
    summary = results["summary"]
    bound = access_bound_samples_per_s(results)
    served = service_times(results.get("tensors", []))
    fcts = [t["fct_s"] for t, _ in served]
    short = [s for t, s in served if t.get("class") == "short"]
    drops = (summary.get("port_drops") or {}).get("by_kind") or {}   # {}: a run from before
    retrans, timeouts = _tcp(results)
    return {
        "access_bound_samples_per_s": bound,
        "access_gap": (1 - samples_per_s / bound) if bound and samples_per_s else None,
        "tcp_retrans_pct": retrans, "tcp_timeouts": timeouts,
        "hol_pct": 100 * (1 - sum(s for _, s in served) / sum(fcts)) if sum(fcts) else None,
        "sendbuf_pct": sendbuf_pct(results.get("tensors", [])),
        "short_service_mean_s": sum(short) / len(short) if short else None,
        # a fixed 200 ms, not the run's own minimum RTO: a 10 ms one is passed by
        # queueing alone, so "slower than it" would no longer mean "waited for a timeout"
        "rto_tail_pct": 100 * sum(f >= TCP_RTO_MIN_S for f in fcts) / len(fcts) if fcts else None,
        "uplink_spread": (summary.get("uplinks") or {}).get("mean_spread"),
        **{f"drops_{kind}": drops.get(kind) for kind in ("to_host", "leaf_up", "spine_down")},
    }


def offered(results: dict) -> dict:
    """A run's offered uplink load (OFFERED_METRICS) and the leaf it is on,
    from summary.offered_load; None each for a file from before it."""
    ol = results["summary"].get("offered_load") or {}
    leaf = ol.get("max_leaf")
    b = (ol.get("leaves") or {}).get(leaf) or {}
    return {"offered_uplink_load": ol.get("max_total"),
            "offered_uplink_training": b.get("training"),
            "offered_uplink_background": b.get("background"), "offered_uplink_leaf": leaf}


def archived_results(out: Path, keys: set[str]):
    """(key, RunRecord) for each run of ``keys`` found in ``out``'s archive
    parts (experiments/sweep/archive.py), one file at a time (read by
    workload/run_record.py read_record; a member it cannot read is skipped,
    one of a newer format raises NewerFormatError)."""
    from experiments.sweep.archive import archived_bytes

    for key, data in archived_bytes(Path(out), keys):
        try:
            record = read_record(data, f"{out}: runs/{key}.json")
        except NewerFormatError:
            raise
        except RecordError:
            continue
        yield key, record


def fill_row(row: dict, res, rel: str) -> None:
    """A training run's columns of its row from its results record."""
    head = res["headline"]
    guard = cpu_guard_of(res)
    # a real MPI job whose all-reduce gave a wrong sum (--clients mpi) is left out as CPU-bound runs are
    row["status"] = "cpu_bound" if guard["flagged"] else \
        "incorrect" if res["flags"].get("mpi_incorrect") else "ok"
    row["scheme_in_effect"] = head["scheme"]
    row["queueing_in_effect"] = ((res.get("fabric") or {}).get("queueing") or {}).get("mode", "bands")
    # results from before the connection models had one connection per pair
    row["connections_in_effect"] = (res.get("connections") or {}).get("model", "pair")
    # ... and were placed spread (their placement record had no mode)
    row["placement_in_effect"] = (res.get("placement") or {}).get("spec", "spread")
    row["rto_min_ms_in_effect"] = (res.get("fabric") or {}).get("rto_min_ms")
    # the regime in force (testbed/regime.py; runs before issue 36: deep, no ECN, the topology's cc)
    reg = (res.get("fabric") or {}).get("regime") or {}
    row["buffer_in_effect"] = reg.get("buffer", "deep")
    row["ecn_in_effect"] = bool(reg.get("ecn", False))
    row["tcp_cc_in_effect"] = reg.get("tcp_cc")
    row["bg_senders"] = (res.get("load") or {}).get("senders_rule") or \
        ("workers" if (res.get("load") or {}).get("background") else None)
    row["commit"] = (res.get("software") or {}).get("commit")
    row.update(papers_fields(res))
    row.update(machine_fields(res))
    for k in (*METRICS, *CENSORED, *SENDBUF, "mpi_comm_s", "mpi_correct", "mpi_tagged"):
        if k in head:
            row[k] = head[k]
    ideal = ideal_samples_per_s(res)
    row["ideal_samples_per_s"] = ideal
    sp = head.get("samples_per_s")
    row["ideal_gap"] = (1 - sp / ideal) if ideal and sp else None
    row.update(mechanism(res, sp))
    row.update(offered(res))
    # how many tensors each class mean is over, and the measured span: how far
    # one RTO could move them (experiments/sweep/seeds.py rto_weight)
    summ = res["summary"].get("tensors") or {}
    for cls, block in [*(summ.get("by_class") or {}).items(), ("trailing", summ.get("trailing"))]:
        if block:
            row[f"{cls}_count"] = block.get("n")
    row.update(tail_fields(res))
    row["training_s"] = res.get("training_s")
    row.update(guard_fields(guard))
    # testbed seconds per second of the target (FCTs are testbed wall-clock)
    row["time_scale"] = (res.get("scaling") or {}).get("time_scale")
    row.update(pairing.fields(res))      # what the run saw of its seed's background
    row["results"] = rel


#: the p99s whose interval and count runs.csv carries: (column prefix, tensor field)
TAILS = (("short_netfct_p99", "netfct_s"), ("short_fct_p99", "fct_s"))


def tail_fields(res: dict) -> dict:
    """Per run, for each TAILS p99 of the short tensors: ``_n`` the
    measured tensors it is over, ``_low_s``/``_high_s`` its distribution-free
    95% interval (stats.quantile_ci: order statistics, None where the
    count cannot bound it) and ``_low_rank``/``_high_rank`` which values
    bound it (1 = the smallest). Empty for results without tensors (MPI)."""
    from experiments.sweep.stats import quantile_ci

    short = [t for t in res.get("tensors") or ()
             if t.get("class") == "short" and not t.get("warmup") and not t.get("censored")]
    if not short:
        return {}
    out = {}
    for col, field in TAILS:
        ci = quantile_ci([t[field] for t in short if t.get(field) is not None], 0.99)
        out.update({f"{col}_n": ci["n"], f"{col}_low_s": ci["low"], f"{col}_high_s": ci["high"],
                    f"{col}_low_rank": ci["low_rank"], f"{col}_high_rank": ci["high_rank"]})
    return out


def cpu_guard_of(res: dict) -> dict:
    """The run's CPU guard under the current rule (workload/measure.py
    rejudge: results files of the old, link-excused rule judged again)."""
    from workload.measure import rejudge

    return rejudge(res)


def guard_fields(guard: dict) -> dict:
    """runs.csv's CPU guard columns: mean busy share, the saturated share of
    the windows (the rule's number), whether softirq was measured, the old
    rule's verdict where the run was re-judged, and the reason."""
    return {"cpu_busy_mean": guard.get("cpu_busy_mean"),
            "cpu_saturated_share": guard.get("saturated_share"),
            "cpu_softirq_mean": guard.get("softirq_mean"),
            "cpu_guard_old_flag": (guard.get("old") or {}).get("flagged"),
            "cpu_guard": guard.get("reason")}


def papers_fields(res: dict) -> dict:
    """runs.csv's issue-42 columns: the scheduler in effect (runs before it:
    ByteScheduler), the layers sent by SFB, the fusion buffer in effect
    (adaptive's choice) and OSF's prediction and error (docs/workload.md)."""
    sched = res.get("scheduler") or {}
    osf = res.get("osf") or {}
    return {"scheduler_in_effect": sched.get("name", "bytescheduler"),
            "sfb_layers": " ".join((sched.get("comm") or {}).get("sfb_layers", ())) or None,
            "fusion_buffer_bytes_in_effect": (sched.get("fusion") or {}).get("buffer_bytes"),
            "osf_predicted_iteration_s": osf.get("predicted_iteration_s"),
            "osf_error": osf.get("error")}


def machine_fields(res: dict) -> dict:
    """runs.csv's ``machine`` (the host name the run ran on) and
    ``machine_kind`` (CPU model, cores, kernel: common/machine.py kind);
    empty for results files from before the machine was recorded."""
    from common.machine import kind

    m = res.get("machine")
    return {"machine": (m or {}).get("hostname"), "machine_kind": kind(m)}


def mixed_machines(plan: Plan, rows: list[dict]) -> list[tuple[RunSpec, list[str]]]:
    """The points (every parameter but the seed) whose runs came from
    machines of more than one kind, with those kinds: their timings are not
    comparable with one another."""
    import dataclasses

    specs = {r.key(): r for r in plan.runs}
    by: dict[str, tuple[RunSpec, set]] = {}
    for row in rows:
        spec = specs.get(row["key"])
        if spec is None or not row.get("machine_kind"):
            continue
        point = dataclasses.replace(spec, seed=0)
        by.setdefault(point.key(), (spec, set()))[1].add(row["machine_kind"])
    return [(spec, sorted(kinds)) for spec, kinds in by.values() if len(kinds) > 1]


def load_rows(plan: Plan, out: Path, failed: dict | None = None) -> list[dict]:
    """One row per planned run: its parameters, status (ok, cpu_bound,
    failed, missing) and headline numbers."""
    def new_row(spec: RunSpec) -> dict:
        return {"key": spec.key(), **{f: getattr(spec, f) for f in SPEC_FIELDS},
                "agent_opts": json.dumps(dict(spec.agent_opts), sort_keys=True)}

    return read_rows(plan, out, failed, new_row, fill_row)


def read_rows(plan: Plan, out: Path, failed: dict | None, new_row, fill) -> list[dict]:
    """``new_row(spec)`` per planned run, in plan order, filled by
    ``fill(row, record, path relative to out)`` from its results file in
    ``out``/runs/, or, when not there, in ``out``'s archive parts (runs.tar.xz,
    runs-2.tar.xz, ...: a committed directory; no need to unpack it to redo
    the report). A run with
    neither gets status "failed" (with its error) when ``failed`` names
    it, else "missing"."""
    rows, lacking = [], {}
    for spec in plan.runs:
        row = new_row(spec)
        path = result_path(out, spec)
        try:
            record = read_record(path)
        except NewerFormatError:
            raise
        except (OSError, RecordError):
            lacking[spec.key()] = row
        else:
            fill(row, record, str(path.relative_to(out)))
        rows.append(row)
    for key, res in archived_results(out, set(lacking)):
        fill(lacking.pop(key), res, f"runs/{key}.json")
    for key, row in lacking.items():
        row["status"] = "failed" if failed and key in failed else "missing"
        row["error"] = (failed or {}).get(key, {}).get("error")
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})


#: a row's value of a field it may lack (rows made before the field existed)
FIELD_DEFAULTS = {"connections": "pair", "placement": "spread", "rto_min": None,
                  "client": "talb", "regime": None, "scheduler": "bytescheduler", "comm": "ps",
                  "fusion": None}


def field(row: dict, name: str):
    """``row[name]``, or the field's default for a row without it."""
    return row[name] if name in row or name not in FIELD_DEFAULTS else FIELD_DEFAULTS[name]


def point_key(spec_or_row) -> tuple:
    get = (lambda f: getattr(spec_or_row, f)) if isinstance(spec_or_row, RunSpec) \
        else (lambda f: field(spec_or_row, f))
    return tuple(get(f) for f in POINT_FIELDS)


def points(rows: list[dict], fields: tuple[str, ...] = POINT_FIELDS,
           metrics: tuple[str, ...] = METRICS,
           totals: dict[str, str] = MappingProxyType({"censored": "all_censored"}),
           ranges: tuple[str, ...] = OFFERED_METRICS) -> list[dict]:
    """Per point (the rows alike in ``fields``: every parameter but the
    seed): the parameters, the runs counted (status ok) and excluded, per
    ``totals`` entry {name: row column} that column summed over the counted
    runs, an Estimate per metric, and per ``ranges`` metric [min, max] over
    the counted runs (None: no run has it)."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault(tuple(field(r, f) for f in fields), []).append(r)
    out = []
    for key, rs in by.items():
        ok = [r for r in rs if r["status"] == "ok"]
        p = dict(zip(fields, key))
        p["runs"] = len(rs)
        p["counted"] = len(ok)
        p["cpu_bound"] = sum(r["status"] == "cpu_bound" for r in rs)
        p["failed"] = sum(r["status"] in ("failed", "missing") for r in rs)
        for name, column in totals.items():
            p[name] = sum(r.get(column) or 0 for r in ok)
        p["est"] = {m: estimate([r.get(m) for r in ok]) for m in metrics}
        vals = {m: [r[m] for r in ok if r.get(m) is not None] for m in ranges}
        p["range"] = {m: [min(v), max(v)] if v else None for m, v in vals.items()}
        out.append(p)
    return out


def find(pts: list[dict], **match) -> dict | None:
    for p in pts:
        if all(p.get(k) == v for k, v in match.items()):
            return p
    return None


def seed_values(rows: list[dict], metric: str, **match) -> dict:
    """seed -> the metric of the counted run (status ok) matching ``match``
    (None where the run has no value); CPU-bound, failed and missing runs
    are left out, so their seeds have nothing to pair."""
    return {r["seed"]: r.get(metric) for r in rows
            if r["status"] == "ok" and all(r.get(k, FIELD_DEFAULTS.get(k)) == v
                                           for k, v in match.items())}


def est(p: dict | None, metric: str) -> Estimate:
    return p["est"][metric] if p else estimate([])
