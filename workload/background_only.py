"""Background flows only, no training: ``talb run --model none`` (issue 17,
item 5), the runs of the ``lb-classic`` calibration (docs/experiments.md).

The load-balancing literature's standard evaluation on this testbed: Poisson
flows with web-search or data-mining sizes from every host to hosts on other
leaves (workload/background.py), no training, every flow's FCT recorded and
normalised to its ideal. A code path of its own beside the training run:
``workload.experiment.run`` hands ``model == "none"`` to :func:`run`.

Timeline (t = 0 when the first flow may start)::

    [0, W)              warm-up: flows run, not counted (the fabric starts empty)
    [W, W + D)          the window: the flows planned to start here are the sample
    [W + D, W + D + F)  fill: flows keep arriving, not counted, so that the
                        window's last flows finish under the same load as the rest
    after               no new flows; the run waits until every flow is done
                        (at most DRAIN = max(30 s, D); unfinished flows: censored)

D is ``--background-duration`` (default: :func:`default_window_s`, enough for
500 short flows, 20-150 s); W = F = max(2 s, D / 10).

**Ideal FCT** of a flow of S bytes: 8 S / R + B. R is the slower of its two
hosts' link rates; B the FCT of a 1-byte flow on the idle fabric -- the median
of ~40 such flows sent just before the load starts (the TCP handshake and the
applications' own latency, which every flow pays once whatever its size). The
normalised FCT, FCT / ideal, is then ~1 on an idle fabric for every size,
the convention of the literature's "FCT normalised to the FCT on an idle
fabric"; without B a 100-byte flow (half the data-mining flows are smaller
than that at this preset's scale) would read 100x its ideal on an idle fabric.
Each flow's record keeps ``serial_s`` = 8 S / R, so a report can recompute
the normalisation with another B (experiments/sweep/lbclassic.py pools B over all
runs of a fabric, so that every scheme is divided by the same ideal).

**Classes** by the flow's size at the CDF's own scale (size / size scale),
as the literature's: short <= 100 KB, long >= 1 MB, "all" every flow.

**Load**: offered background bytes/s over :func:`even_capacity_bps`, the
capacity traffic spread evenly over the leaves can use: the smallest
(leaf's uplink capacity x hosts / the leaf's hosts). On a symmetric fabric
that is the sum of the uplinks (as training runs, workload/background.py); on
lb-classic's asymmetric one 2 x 75 = 150 Mbit/s, not the 175 Mbit/s sum,
whose load 0.9 would overload leaf0's uplinks whatever the balancer does.
"""
from __future__ import annotations

import statistics
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from common import paths
from common.excerpt import shown
from common.machine import machine_info
from netns_topology.state import (PROGRAM_DATAPATHS, TestbedError, load_topology_of, queueing_of, read_state,
                                  regime_of,
                                  rto_min_of)
from workload import measure
from workload.run_record import RunRecord, agent_settings, software_versions, write_record
from workload.testbed_use import rto_min_for_run, rto_min_setting, testbed_for

NO_MODEL = "none"
DEFAULT_TOPOLOGY = paths.REPO_ROOT / "topologies" / "lb-classic-sym.yaml"
CLASSES = ("short", "medium", "long", "all")
#: Flow sizes x this per CDF unless --background-size-scale says otherwise:
#: both CDFs scaled to a mean of ~330 KB (web search 342 KB, data mining
#: 316 KB), so that a load makes about as many flows a second with either:
#: ~70/s at load 0.9 on lb-classic's 200 Mbit/s (docs/experiments.md).
DEFAULT_SIZE_SCALE = {"websearch": 0.2, "datamining": 0.025}
#: The default window plans this many short flows (expected): p99 of the
#: short flows then has ~5 flows above it.
SHORT_FLOWS_TARGET = 500
#: 20 s at least: at high load 500 short flows come in 10 s, but the bytes a
#: window offers vary from seed to seed with the CDFs' heavy tails (data
#: mining: ~27% at load 0.9 in 10 s, ~18% in 20 s); a longer window narrows it.
WINDOW_MIN_S, WINDOW_MAX_S = 20.0, 150.0
DRAIN_MIN_S = 30.0
#: The idle-fabric probe: 1-byte flows at this rate for this long, one
#: sender and sink per leaf; the base latency B needs at least PROBE_MIN.
PROBE_FLOWS_PER_S, PROBE_S, PROBE_MIN = 20.0, 2.0, 10
PORT, PROBE_PORT = 7400, 7401
#: Flows a second the hosts open without the CPUs setting the result (as
#: workload/experiment.py MAX_BACKGROUND_FLOWS_PER_S).
MAX_FLOWS_PER_S = 200


class RunError(RuntimeError):
    pass


# --- the definitions (unit-tested on constructed flows) -----------------------------------
def margin_s(window_s: float) -> float:
    """Warm-up W and fill F around a window of ``window_s``."""
    return max(2.0, window_s / 10)


def even_capacity_bps(topo) -> float:
    """The background load's capacity: the most that traffic spread evenly
    over the hosts (each host sending the same to hosts on other leaves) can
    push through the leaves' uplinks -- min over leaves of the leaf's up
    capacity x (hosts / the leaf's hosts). Symmetric fabric: the sum of the
    uplinks. A link at half rate lowers it for every leaf."""
    per_leaf = Counter(h.leaf for h in topo.hosts)
    total = sum(per_leaf.values())
    caps = []
    for leaf, n in per_leaf.items():
        up = sum(p.rate_bps for p in topo.ports(leaf) if p.kind == "fabric" and p.up)
        caps.append(up * total / n)
    if len(per_leaf) < 2 or not min(caps) > 0:
        raise ValueError("--topology: background flows need at least two leaves with hosts "
                         "and uplinks, got leaves " + ", ".join(sorted(map(str, per_leaf))))
    return float(min(caps))


def cdf_at(cdf, x: float) -> float:
    """P(size <= x) of a FlowSizeCDF (its piecewise-linear points)."""
    pts = cdf.points
    if x < pts[0][0]:
        return 0.0
    for (x0, p0), (x1, p1) in zip(pts, pts[1:]):
        if x0 <= x < x1:
            return p0 + (p1 - p0) * (x - x0) / (x1 - x0)
    return 1.0


def size_scale_of(cdf_name: str, given: float | None) -> float:
    return given if given is not None else DEFAULT_SIZE_SCALE[cdf_name]


def default_window_s(cdf_name: str, size_scale: float, load: float, capacity_bps: float) -> float:
    """Window long enough for SHORT_FLOWS_TARGET short flows on average, within
    WINDOW_MIN_S..WINDOW_MAX_S, rounded to 0.1 s."""
    from workload.background import FlowSizeCDF, arrival_rate

    cdf = FlowSizeCDF.named(cdf_name).scaled(size_scale)
    short_per_s = arrival_rate(load, capacity_bps, cdf) * cdf_at(cdf, measure.SHORT_MAX_BYTES * size_scale)
    return round(min(WINDOW_MAX_S, max(WINDOW_MIN_S, SHORT_FLOWS_TARGET / short_per_s)), 1)


def size_class(size_bytes: int, size_scale: float) -> str:
    """short / medium / long by the size at the CDF's own scale."""
    return measure.size_class(size_bytes / size_scale)


def flow_rows(flows: list[dict], *, t0_ns: int, warmup_s: float, window_s: float,
              size_scale: float, host_rate_bps: dict, base_s: float) -> list[dict]:
    """Each flow record (BackgroundResult.to_dict()['flows']) with its phase
    (warmup, window, fill), class at the CDF's scale, serial_s = 8 S / R and,
    when done, nfct = fct_s / (serial_s + base_s)."""
    out = []
    for f in flows:
        offset = (f["planned_start_ns"] - t0_ns) / 1e9
        phase = "warmup" if offset < warmup_s else ("window" if offset < warmup_s + window_s
                                                    else "fill")
        rate = min(host_rate_bps[f["src"]], host_rate_bps[f["dst"]])
        row = {k: v for k, v in f.items() if k != "size_class"}   # that one is at wire scale
        row.update(phase=phase, serial_s=8 * f["size_bytes"] / rate,
                   **{"class": size_class(f["size_bytes"], size_scale)})
        row["nfct"] = normalised(row, base_s)
        out.append(row)
    return out


def normalised(flow: dict, base_s: float) -> float | None:
    """FCT over the ideal 8 S / R + B; None for a flow that did not finish."""
    if flow.get("fct_s") is None:
        return None
    return flow["fct_s"] / (flow["serial_s"] + base_s)


def class_summary(flows: list[dict], base_s: float | None = None) -> dict:
    """Per class (short, medium, long, all) of the *window's* flows: counts by
    status, mean and p99 of the FCT and of the normalised FCT (finished flows
    only; censored ones are counted, never given an FCT). ``base_s``:
    recompute the normalisation with this B (else each flow's ``nfct``)."""
    window = [f for f in flows if f["phase"] == "window"]
    out = {}
    for cls in CLASSES:
        mine = [f for f in window if cls in ("all", f["class"])]
        done = [f for f in mine if f["status"] == "done"]
        fct = [f["fct_s"] for f in done]
        nf = [normalised(f, base_s) if base_s is not None else f["nfct"] for f in done]
        block = {"flows": len(mine), "done": len(done),
                 **{s: sum(f["status"] == s for f in mine) for s in ("censored", "failed", "not_started")},
                 "bytes": sum(f["size_bytes"] for f in mine)}
        block.update(fct_mean_s=statistics.fmean(fct) if fct else None,
                     fct_p99_s=measure.p99(fct) if fct else None,
                     nfct_mean=statistics.fmean(nf) if nf else None,
                     nfct_p99=measure.p99(nf) if nf else None)
        out[cls] = block
    return out


HEADLINE_CLASSES = ("short", "long", "all")


def headline(scheme: str, cfg, classes: dict, extra: dict) -> dict:
    """One flat row (runs.csv): the run's parameters and per class the mean
    and p99 of the normalised FCT and of the FCT, counts and censored flows."""
    row = {"scheme": scheme, "model": NO_MODEL, "cdf": cfg.background_cdf, "load": cfg.load,
           "seed": cfg.seed}
    for cls in HEADLINE_CLASSES:
        b = classes[cls]
        row.update({f"{cls}_nfct_mean": b["nfct_mean"], f"{cls}_nfct_p99": b["nfct_p99"],
                    f"{cls}_fct_mean_s": b["fct_mean_s"], f"{cls}_fct_p99_s": b["fct_p99_s"],
                    f"{cls}_n": b["done"], f"{cls}_censored": b["censored"] + b["failed"]})
    row.update(extra)
    return row


# --- validation ----------------------------------------------------------------------------
def _need(cond: bool, flag: str, value, what: str) -> None:
    if not cond:
        raise ValueError(f"{flag}: {what}, got {shown(value)}")


def validate(cfg) -> None:
    """What a background-only run needs; the CLI refuses the training-only
    flags before this (talb/cli_run.py)."""
    from workload.background import check_options

    _need(cfg.model == NO_MODEL, "--model", cfg.model, f"{NO_MODEL!r} for a background-only run")
    _need(0.0 < cfg.load < 1.0, "--load", cfg.load,
          "--model none runs background flows only, so it needs a load in (0, 1)")
    check_options(cfg.background_cdf, cfg.background_s, cfg.background_size_scale)
    cfg.rto_min = rto_min_setting(getattr(cfg, "rto_min", None))   # names --rto-min
    _need(cfg.fault is None, "--fault", cfg.fault,
          "faults are injected into training; --model none has no training to disturb")
    if cfg.scheme is not None:
        from datapath.control import scheme_id_of

        try:
            scheme_id_of(cfg.scheme)
        except ValueError as exc:
            raise ValueError(f"--scheme: {exc}") from None


# --- the run -------------------------------------------------------------------------------
def _fabric(prefix: str, topo, scheme: str | None) -> dict:
    """Set the scheme on every switch (when asked) and read back what is in effect."""
    state = read_state(prefix)
    if state.get("datapath") not in PROGRAM_DATAPATHS:
        raise TestbedError(
            f"testbed '{prefix}' forwards with the kernel bridge (--datapath bridge): it has no "
            f"load-balancing scheme to measure; run on a testbed built with the bpf data path")
    from datapath import timers
    from datapath.fabric import switch_configs

    out = {"prefix": prefix, "datapath": state.get("datapath"), "topology": state["topology"],
           "queueing": queueing_of(prefix, state),
           "regime": regime_of(prefix, state),
           "host_link_bps": {h.name: topo.ports(h.name)[0].rate_bps for h in topo.hosts},
           # what the link rate gives (docs/schemes.md); switch_config holds what is in force
           "timers": timers.for_topology(topo).to_dict(), "rto_min_ms": rto_min_of(prefix, state),
           "switch_config": switch_configs(topo, prefix, scheme), "agent": None}
    return out


def probe_base_latency(topo, prefix: str, capacity_bps: float, seed: int) -> dict:
    """B: the median FCT of 1-byte flows on the idle fabric, one sender and
    one sink per leaf (the first host of each), ~PROBE_FLOWS_PER_S a second
    for PROBE_S seconds."""
    from workload.background import BackgroundLoad, FlowSizeCDF, fabric_hosts

    first = {}
    for h in fabric_hosts(topo, prefix):
        first.setdefault(h.leaf, h)
    bg = BackgroundLoad(list(first.values()), load=PROBE_FLOWS_PER_S * 8 / capacity_bps,
                        capacity_bps=capacity_bps, seed=seed, duration_s=PROBE_S,
                        cdf=FlowSizeCDF([(1, 0.0), (1, 1.0)], "probe-1B"), port=PROBE_PORT,
                        start_delay_s=0.3, drain_s=5.0)
    with bg:
        pass                                    # start, then stop: waits for every flow
    fcts = sorted(f.fct_s for f in bg.result.flows if f.status == "done")
    if len(fcts) < PROBE_MIN:
        raise RunError(f"idle-fabric probe: {len(fcts)} of {len(bg.result.flows)} 1-byte flows "
                       f"finished (need {PROBE_MIN}); problems: {bg.result.params['problems']}")
    return {"base_s": statistics.median(fcts), "n": len(fcts), "min_s": fcts[0],
            "max_s": fcts[-1], "hosts": sorted(first[l].name for l in first),
            "what": "median FCT of 1-byte flows between the leaves' first hosts on the idle "
                    "fabric, just before the load"}


def _results_path(cfg) -> Path:
    if cfg.out:
        return Path(cfg.out)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path("runs") / (f"{stamp}-none-{cfg.background_cdf}-{cfg.scheme or 'fabric'}"
                           f"-load{cfg.load:g}-seed{cfg.seed}.json")


def run(cfg, *, say=lambda _m: None, on_progress=None) -> dict:
    """One background-only run; returns the results (also written to the
    results file, ``results["path"]``). Uses the testbed of ``cfg.prefix``
    if one is up, else builds one from ``cfg.topology`` (default
    topologies/lb-classic-sym.yaml) and removes it afterwards.
    ``on_progress(elapsed_s, total_s)``: called while the flows run."""
    validate(cfg)
    # even_capacity_bps: two leaves with hosts? before building
    if (cfg.buffer, cfg.ecn, cfg.tcp_cc) != (None, None, None):
        raise ValueError(f"--buffer/--ecn/--tcp-cc: training runs with our own nodes only "
                         f"(the scaled buffers need their time scale), got buffer {cfg.buffer!r}, "
                         f"ecn {cfg.ecn!r}, tcp_cc {cfg.tcp_cc!r}")
    with testbed_for(cfg.prefix, cfg.topology, DEFAULT_TOPOLOGY, even_capacity_bps, say) as built, \
            rto_min_for_run(cfg.prefix, cfg.rto_min, built, say):
        return _run_on_fabric(cfg, built, say, on_progress)


def _sleep_until(t_mono: float, t0: float, total: float, on_progress) -> None:
    while (left := t_mono - time.monotonic()) > 0:
        time.sleep(min(0.25, left))
        if on_progress:
            on_progress(min(total, time.monotonic() - t0), total)


@dataclass(frozen=True)
class _Timeline:
    """The run's plan in time (the module's docstring): window, warm-up =
    fill margin, the longest drain, and the capacity and size scale they
    follow from."""

    capacity_bps: float
    size_scale: float
    window_s: float
    margin_s: float
    drain_s: float

    @property
    def total_s(self) -> float:
        """Warm-up, window and fill: while flows are planned to start."""
        return 2 * self.margin_s + self.window_s


@dataclass(frozen=True)
class _Snapshot:
    """The counters at one edge of the window."""

    t: float                    # time.monotonic()
    ports: dict                 # the switches' port counters (PortCounters.read)
    queues: dict | None         # {(switch, port): (drops, sent_bytes)} (read_qdisc_counters)


@dataclass
class _Measured:
    """What the flows' run gave: the flows' result, the window's edges, the
    counters around it and the CPU samples."""

    result: object              # BackgroundResult
    window_start: _Snapshot
    window_end: _Snapshot
    tcp_before: dict
    tcp_after: dict
    queues_before: dict | None
    queues_after: dict | None
    samples: list
    t_end: float


def _timeline(cfg, topo) -> _Timeline:
    capacity = even_capacity_bps(topo)
    scale = size_scale_of(cfg.background_cdf, cfg.background_size_scale)
    window = cfg.background_s or default_window_s(cfg.background_cdf, scale, cfg.load, capacity)
    return _Timeline(capacity, scale, window, margin_s(window), max(DRAIN_MIN_S, window))


def _planned_load(cfg, hosts, plan: _Timeline, say):
    """The background flows of the run, planned (not started)."""
    from workload.background import BackgroundLoad

    bg = BackgroundLoad(hosts, load=cfg.load, capacity_bps=plan.capacity_bps, seed=cfg.seed,
                        duration_s=plan.margin_s + plan.window_s + plan.margin_s,
                        cdf=cfg.background_cdf,
                        size_scale=plan.size_scale, port=PORT, drain_s=plan.drain_s)
    rate = bg.params["arrival_rate_per_s"]
    if rate > MAX_FLOWS_PER_S:
        say(f"warning: {rate:.0f} flows/s planned, over the {MAX_FLOWS_PER_S}/s the hosts open "
            f"without saturating the CPUs; --background-size-scale makes flows larger and fewer")
    margin = plan.margin_s
    say(f"{cfg.background_cdf} x{plan.size_scale:g} at load {cfg.load:g} of "
        f"{plan.capacity_bps / 1e6:g} Mbit/s: "
        f"{bg.params['planned_flows']} flows planned ({rate:.1f}/s), window {plan.window_s:g} s "
        f"after {margin:g} s of warm-up, {margin:g} s of fill")
    return bg


def _run_flows(cfg, topo, hosts, bg, plan: _Timeline, say, on_progress) -> _Measured:
    """Start the flows, read the counters at the window's edges, wait for
    the flows to finish; every path: processes ended, maps closed."""
    host_ports = {(h.leaf, p.name): p.rate_bps for h in topo.hosts
                  for p in topo.ports(h.leaf) if p.peer == h.name}
    with ExitStack() as stack:       # every path: processes ended, maps closed, files removed
        stack.callback(bg.close)
        ports = measure.PortCounters(cfg.prefix, topo)   # the CPU guard's sampler thread reads it
        stack.callback(ports.close)
        window_ports = measure.PortCounters(cfg.prefix, topo)   # this thread's: maps of its own
        stack.callback(window_ports.close)

        def snapshot() -> _Snapshot:
            return _Snapshot(time.monotonic(), window_ports.read(),
                             measure.read_qdisc_counters(cfg.prefix, topo))

        tcp_before = {h.name: measure.read_tcp_counters(h.netns) for h in hosts}
        queues_before = measure.read_qdisc_counters(cfg.prefix, topo)
        with measure.Sampler(ports, host_ports) as sampler:
            try:
                bg.start()
                t0, total = bg.t0_ns / 1e9, plan.total_s
                _sleep_until(t0 + plan.margin_s, t0, total, on_progress)
                start = snapshot()
                _sleep_until(t0 + plan.margin_s + plan.window_s, t0, total, on_progress)
                end = snapshot()
                _sleep_until(t0 + total, t0, total, on_progress)
                say(f"window done; waiting for the flows to finish (at most {plan.drain_s:g} s)")
                result = bg.stop(drain_s=plan.drain_s)
            except BaseException:
                if bg.t0_ns is not None:
                    bg.stop(drain_s=-1e9)        # now: every process ended by its pid
                raise
        t_end = time.monotonic()
        queues_after = measure.read_qdisc_counters(cfg.prefix, topo)
        tcp_after = {h.name: measure.read_tcp_counters(h.netns) for h in hosts}
    return _Measured(result, start, end, tcp_before, tcp_after, queues_before, queues_after,
                     sampler.samples, t_end)


def _uplink_sent_bytes(topo, m: _Measured) -> int | None:
    """Bytes the leaves' uplink queues sent during the window; None without
    queue counters (an unshaped fabric)."""
    before, after = m.window_start.queues, m.window_end.queues
    if not (before and after):
        return None
    leaf_up = [(sw.name, p.name) for sw in topo.switches if sw.role == "leaf"
               for p in topo.ports(sw.name) if p.kind == "fabric"]
    sent = 1                                        # (drops, sent_bytes)
    return sum(after[k][sent] - before[k][sent] for k in leaf_up)


def _load_block(cfg, topo, plan: _Timeline, classes: dict, m: _Measured, rate: float) -> dict:
    """The results' load: offered, realised in the window, delivered on the wire."""
    capacity = plan.capacity_bps
    wire = _uplink_sent_bytes(topo, m)
    window_real = m.window_end.t - m.window_start.t
    return {
        "offered": cfg.load, "capacity_bps": capacity,
        "capacity_rule": "min over leaves of uplink capacity x hosts / the leaf's hosts "
                         "(workload/background_only.py even_capacity_bps)",
        "offered_realised": 8 * classes["all"]["bytes"] / (plan.window_s * capacity),
        "delivered_wire": 8 * wire / (window_real * capacity) if wire is not None else None,
        "delivered_what": "bytes the leaves' uplink queues sent during the window (headers, "
                          "ACKs and warm-up/fill flows included) over the window x capacity",
        "flows_per_s": rate,
    }


def _headline_extra(plan: _Timeline, base: float, load_block: dict, tcp: dict,
                    guard: dict) -> dict:
    """The headline's fields beside the classes' FCTs."""
    tot = tcp["total"]
    return {"base_latency_s": base, "offered_realised": load_block["offered_realised"],
            "delivered_load": load_block["delivered_wire"],
            "reorder_per_kseg": 1000 * tot["reordering"] / tot["out_segs"] if tot["out_segs"] else None,
            "retrans_pct": 100 * tot["retrans_segs"] / tot["out_segs"] if tot["out_segs"] else None,
            "timeouts": tot.get("timeouts"), "window_s": plan.window_s,
            "cpu_bound": guard["flagged"]}


def _run_on_fabric(cfg, built: bool, say, on_progress) -> dict:
    from workload.background import fabric_hosts

    topo = load_topology_of(cfg.prefix)
    fabric = _fabric(cfg.prefix, topo, cfg.scheme)
    fabric["built_for_run"] = built
    plan = _timeline(cfg, topo)
    t_run = time.monotonic()

    say("idle-fabric probe: 1-byte flows for the ideal's base latency")
    probe = probe_base_latency(topo, cfg.prefix, plan.capacity_bps, cfg.seed)
    hosts = fabric_hosts(topo, cfg.prefix)
    bg = _planned_load(cfg, hosts, plan, say)
    m = _run_flows(cfg, topo, hosts, bg, plan, say, on_progress)
    fabric["agent"] = agent_settings(cfg.prefix)
    record = _record(cfg, topo, fabric, plan, probe, hosts, bg, m, t_run)
    return write_record(record, _results_path(cfg))


def _record(cfg, topo, fabric: dict, plan: _Timeline, probe: dict, hosts, bg, m: _Measured,
            t_run: float) -> RunRecord:
    """A background-only run's results record."""
    base = probe["base_s"]
    rates = {h.name: topo.ports(h.name)[0].rate_bps for h in topo.hosts}
    flows = flow_rows(m.result.to_dict()["flows"], t0_ns=bg.t0_ns, warmup_s=plan.margin_s,
                      window_s=plan.window_s, size_scale=plan.size_scale, host_rate_bps=rates,
                      base_s=base)
    classes = class_summary(flows)
    load_block = _load_block(cfg, topo, plan, classes, m, bg.params["arrival_rate_per_s"])
    guard = measure.cpu_guard(m.samples, True, (m.window_start.t, m.window_end.t))
    tcp = measure.tcp_summary({h: measure.counter_delta(m.tcp_before[h], m.tcp_after[h])
                               for h in m.tcp_after})
    schemes = sorted({c["scheme"] for c in fabric["switch_config"].values()})
    return RunRecord(
        config=asdict(cfg),
        software=software_versions(),
        # where it ran: host name, kernel, CPU model, cores (common/machine.py)
        machine=machine_info(),
        fabric=fabric,
        model=None,
        scaling=None,
        placement={"senders": [h.name for h in hosts], "destinations": "hosts on other leaves"},
        load={**load_block, "cdf": cfg.background_cdf,
              "background": {"params": m.result.params, "flows": flows}},
        background_only={
            "window_s": plan.window_s, "warmup_s": plan.margin_s, "fill_s": plan.margin_s,
            "drain_s": plan.drain_s, "size_scale": plan.size_scale, "probe": probe,
            "ideal": "8 x size / min(host link rates) + base latency B (the probe's median)",
            "classes": "by size / size_scale: short <= 100 KB, long >= 1 MB",
        },
        duration_s=m.t_end - t_run,
        summary={
            "background": {**classes, "load": load_block, "base_latency_s": base,
                           "flows_planned": len(flows),
                           "by_phase": dict(Counter(f["phase"] for f in flows))},
            "tcp": tcp,
            "uplinks": measure.uplink_spread(topo, m.window_start.ports, m.window_end.ports,
                                             m.window_end.t - m.window_start.t,
                                             (m.window_start.queues, m.window_end.queues)),
            "port_drops": measure.port_drops(topo, m.queues_before, m.queues_after)
            if m.queues_before and m.queues_after else None,
            "cpu_guard": guard,
        },
        flags={"cpu_bound": guard["flagged"]},
        headline=headline(",".join(schemes) or "bridge", cfg, classes,
                          _headline_extra(plan, base, load_block, tcp, guard)),
        cpu_samples=m.samples,
    )
