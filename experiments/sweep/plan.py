"""Presets and free sweeps -> the list of runs (docs/experiments.md).

A :class:`RunSpec` is one `talb run` with every parameter that changes its
result; its :meth:`RunSpec.key` (a hash of all of them) names its results
file, so a sweep started again finds the runs it already has, whatever
preset or flags produced them.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass, field

from common import paths
from common.c_constants import SCHEMES
from common.excerpt import shown

ALL_SCHEMES = tuple(SCHEMES)      # the registry's (constants.h), in id order
PAPER_BASELINES = ("ecmp", "rps", "conga")      # the paper's comparisons (sec. IV-V)
TOPOLOGY_DIR = paths.REPO_ROOT / "topologies"

#: Named agent settings (AgentConfig fields). "default": the agent's defaults
#: (agent/config.py); "paper": the paper's literal reading (Eq. 5 with
#: W1 = W2 = 1, M/D/1 queueing delay, CASE 1's S = the group's largest PCM,
#: docs/design.md §5); the rest: the ablation's one-change-at-a-time variants.
AGENT_SETTINGS: dict[str, dict] = {
    "default": {},
    "paper": {"w1": 1.0, "w2": 1.0, "pcm_delay": "model", "threshold": "max"},
    "w1-0": {"w1": 0.0, "w2": 1.0},
    "w2-0": {"w1": 1.0, "w2": 0.0},
    "measured": {"pcm_delay": "measured"},
    "w1-0-measured": {"w1": 0.0, "w2": 1.0, "pcm_delay": "measured"},
    "window-2ms": {"window_s": 0.002},
    "window-20ms": {"window_s": 0.020},
    "s-0.5": {"threshold": 0.5},
    "s-0.8": {"threshold": 0.8},
}


class PlanError(ValueError):
    """A bad preset or sweep option; the message names it."""


#: The seed cap of the presets' seed rule (issue 17: at least 10).
SEED_CAP = 10
#: The width the main comparison's 95% interval of the ratio (TaLB/baseline)
#: must get under: 0.20 = the width of the ±10% equivalence band
#: (stats.EQUIV_MARGIN), the narrowest band a verdict of "equivalent" needs.
SEED_WIDTH = 0.20


@dataclass(frozen=True)
class SeedRule:
    """How many seeds the headline points run (experiments/sweep/seeds.py): every
    point runs ``first`` seeds; a headline point (``loads``; None: every
    load) then gets one more seed at a time, every scheme, until the paired
    95% interval of the ratio a/b of ``metric`` is narrower than ``width``
    for every pair in ``pairs``, or ``cap`` seeds have run there. ``where``
    narrows the headline points to (load, topology) pairs (lb-classic: only
    where a direction is tested); None: every topology at the loads."""
    first: int
    cap: int = SEED_CAP
    width: float = SEED_WIDTH
    metric: str = "short_fct_mean_s"
    pairs: tuple = tuple(("talb", b) for b in PAPER_BASELINES)
    loads: tuple | None = (0.8,)
    where: tuple | None = None

    def watches(self, spec: "RunSpec") -> bool:
        """Whether ``spec``'s point is one ``where`` allows (the loads aside)."""
        return self.where is None or (spec.load, spec.topology) in self.where

    def to_dict(self) -> dict:
        d = {"first": self.first, "cap": self.cap, "width": self.width, "metric": self.metric,
             "pairs": [list(p) for p in self.pairs],
             "loads": None if self.loads is None else list(self.loads)}
        if self.where is not None:          # left out where unset: older records stay as they are
            d["where"] = [list(w) for w in self.where]
        return d


@dataclass(frozen=True)
class RunSpec:
    topology: str            # path relative to the repository (or absolute)
    scheme: str
    model: str
    arch: str
    workers: int
    servers: int
    load: float
    seed: int
    target_link_bps: float
    scaling_mode: str
    iterations: int
    warmup: int
    background_cdf: str = "websearch"
    agent: str = "default"
    agent_opts: tuple = ()   # sorted (name, value) pairs of AgentConfig fields
    background_size_scale: float | None = None   # None: the tensors' byte scale
    queueing: str = "bands"  # the switch ports' queues: the topology's, or one FIFO per port
    # TCP connections a worker-server pair uses: pair, class, pool:N (workload/patterns/connections.py)
    connections: str = "pair"
    # model "none" (lb-classic): the measured window of background flows, s
    background_s: float | None = None
    # where the nodes sit: spread, remote or WORKERS/SERVERS (workload/placement.py)
    placement: str = "spread"
    # the hosts' minimum TCP RTO: "10ms", ..., "kernel" (no route metric); None: the topology's
    rto_min: str | None = None
    # what makes the training traffic: "talb" (our nodes) or "mpi" (a real Open MPI job,
    # workload/mpi_run.py)
    client: str = "talb"
    # the regime: switch buffers, ECN, congestion control, by name (testbed/regime.py
    # NAMED: scaled, scaled-ecn, ...); None: the topology's deep buffers, no ECN, its tcp_cc
    regime: str | None = None
    # how gradients are cut and ordered: bytescheduler, usbyte, wfbp, fifo (workload/schedules.py)
    scheduler: str = "bytescheduler"
    # PS runs: how each layer is synchronised: ps, sfb, hybrid (workload/hybrid.py)
    comm: str = "ps"
    # all-reduce runs: tensor fusion, "adaptive" or "constant:SIZE"; None: none
    fusion: str | None = None

    def params(self) -> dict:
        d = asdict(self)
        d["agent_opts"] = dict(self.agent_opts)
        # Added after fig10/fig11 ran: left out at their defaults so those
        # runs' keys (and results files) stay the runs' identity.
        for f in ("background_size_scale", "background_s"):
            if d[f] is None:
                del d[f]
        if d["queueing"] == "bands":      # every run before issue 18 queued as its topology
            del d["queueing"]
        if d["connections"] == "pair":    # and had one connection per pair
            del d["connections"]
        if d["placement"] == "spread":    # and placed its nodes so
            del d["placement"]
        if d["rto_min"] is None:          # and ran with the topology's minimum RTO
            del d["rto_min"]
        if d["client"] == "talb":         # and trained with our own nodes
            del d["client"]
        if d["regime"] is None:           # and ran deep, without ECN (issue 36)
            del d["regime"]
        if d["scheduler"] == "bytescheduler":   # and scheduled as ByteScheduler (issue 42)
            del d["scheduler"]
        if d["comm"] == "ps":                   # with every layer through the servers
            del d["comm"]
        if d["fusion"] is None:                 # and no tensor fusion
            del d["fusion"]
        return d

    def key(self) -> str:
        """Hash of every parameter: the run's identity across sweeps."""
        blob = json.dumps(self.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self) -> str:
        topo = self.topology.rsplit("/", 1)[-1].removesuffix(".yaml")
        if self.model == "none":        # background only (lb-classic)
            return f"{topo} {self.background_cdf} {self.scheme} load {self.load:g} seed {self.seed}"
        agent = "" if self.agent == "default" else f" agent={self.agent}"
        return (f"{topo} {self.model} {self.arch} "
                f"{arm(self.scheme, self.queueing, self.connections)} load "
                f"{self.load:g} {self.target_link_bps / 1e9:g}G seed {self.seed}{agent}"
                f"{axes_label(self.placement, self.rto_min)}"
                f"{'' if self.client == 'talb' else f' client={self.client}'}"
                f"{'' if self.regime is None else f' regime={self.regime}'}"
                f"{'' if self.scheduler == 'bytescheduler' else f' scheduler={self.scheduler}'}"
                f"{'' if self.comm == 'ps' else f' comm={self.comm}'}"
                f"{'' if self.fusion is None else f' fusion={self.fusion}'}")


def axes_label(placement: str = "spread", rto_min: str | None = None) -> str:
    """A run's placement and minimum RTO for a label, where not the defaults
    (spread, the topology's): `` placement=remote rto=10ms``."""
    return ("" if placement in (None, "spread") else f" placement={placement}") + \
        ("" if rto_min is None else f" rto={rto_min}")


def arm(scheme: str, queueing: str = "bands", connections: str = "pair") -> str:
    """A scheme under a queueing and a connection model, as seed-rule pairs,
    tables and plots name it: ``ecmp`` (the topology's queues, its priority
    bands; one connection per pair), ``ecmp/fifo``, ``ecmp/pool:8``,
    ``ecmp/fifo/pool:8``."""
    return scheme + ("" if queueing == "bands" else f"/{queueing}") + \
        ("" if connections == "pair" else f"/{connections}")


def arm_split(name: str) -> tuple[str, str, str]:
    """``ecmp/fifo/pool:8`` -> ("ecmp", "fifo", "pool:8"); ``ecmp`` ->
    ("ecmp", "bands", "pair")."""
    scheme, *rest = name.split("/")
    queueing = next((x for x in rest if x in _QUEUEING_ORDER), "bands")
    connections = next((x for x in rest if x not in _QUEUEING_ORDER), "pair")
    return scheme, queueing, connections


def arm_parts(name: str) -> tuple[str, str]:
    """``ecmp/fifo`` -> ("ecmp", "fifo"); ``ecmp`` -> ("ecmp", "bands")."""
    return arm_split(name)[:2]


@dataclass
class Plan:
    name: str
    description: str
    figure: str                      # plots.FIGURES key
    runs: list[RunSpec]
    keeps: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    seed_rule: SeedRule | None = None  # None: the seeds listed, no more

    def counts(self, attr: str) -> dict:
        out: dict = {}
        for r in self.runs:
            out[getattr(r, attr)] = out.get(getattr(r, attr), 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "figure": self.figure,
                "keeps": self.keeps, "changes": self.changes,
                # always empty since every scheme is implemented; kept so that
                # plan.json keeps its keys (issue 37: results files keep theirs)
                "skipped_schemes": [],
                "seed_rule": self.seed_rule.to_dict() if self.seed_rule else None,
                "runs": [{"key": r.key(), **r.params()} for r in self.runs]}


# --- presets -----------------------------------------------------------------------------
# Each preset: the sweep's dimensions (lists) and its fixed parameters.
#
# Two fabrics (docs/experiments.md, "Presets"): the 4-spine design of issue 18
# (fig10, fig11, fig10-factorial, fig10-paper, fig10-rto, fig10-conns, quick,
# quick-ci) and the 2-spine one the first results ran on (fig10-2spine,
# fig11-2spine, fig10-fifo, ablation: their committed directories were made by
# these definitions).
_FIG10_2SPINE = dict(
    topologies=["topologies/fig10.yaml"], schemes=list(ALL_SCHEMES), loads=[0.2, 0.4, 0.6, 0.8],
    models=["threelayer"], archs=["ps"], seeds=5, target_rates=[100e9], agents=["default"],
    workers=4, servers=1, scaling="both", iterations=4, warmup=1, figure="fct_vs_load",
    # the paper's headline: short-tensor AFCT (network FCT, as paper vs ours) at load 0.8,
    # TaLB against each baseline
    seed_rule=dict(metric="short_netfct_mean_s", loads=(0.8,)),
)
#: The 4-spine design's loads: background 0.1-0.4 of the leaves' uplinks. Training
#: offers ~0.3 of a leaf's uplinks with every worker off the server's leaf, so the
#: measured total (summary.offered_load, busiest leaf) runs from 0.46 to 0.73 over
#: fig10's points: the top load, the headline, is below saturation and near the
#: paper's top "overall workload", 0.8 (sec. V-A). docs/experiments.md.
TOP_LOAD = 0.4
_FIG10 = dict(
    _FIG10_2SPINE, topologies=["topologies/fig10-4spine.yaml"], loads=[0.1, 0.2, 0.3, TOP_LOAD],
    placement="remote", seed_rule=dict(metric="short_netfct_mean_s", loads=(TOP_LOAD,)),
)
_SIM_KEEPS_2SPINE = [
    "leaf-spine, 4:1 oversubscription (paper: 48 x 100G hosts over 12 x 100G uplinks per leaf)",
    "PS, workers : servers = 4 : 1; the three-layer model (L0:L1:L2 bytes 1:2:3, L0 short "
    "<= 100 KB, L1/L2 long >= 1 MB at target scale, the paper's send order)",
    "load = offered background bytes/s (web-search sizes, Poisson) over the leaf uplinks' "
    "capacity, training traffic on top (docs/workload.md)",
    "communication-to-link-rate ratio of the 100G target (scaling `both`: bytes and time "
    "scaled together)",
]
_SIM_CHANGES_2SPINE = [
    "2 spines x 2 leaves x 4 hosts instead of 12 x 24 x 48; hosts 50 Mbit/s, uplinks "
    "25 Mbit/s instead of 100G (two CPUs forward everything)",
    "queue 40 KB per band = 12.8 ms at the uplink rate (the paper's 512 KB is 42 us at 100G, "
    "under one packet here); TCP cubic instead of DCTCP",
    "several iterations per run (warm-up excluded) instead of one simulated iteration",
]
_SIM_KEEPS = [
    "leaf-spine with a graded choice of paths (4 spines: Eq. 5's PCM takes more values than "
    "0 and 1)",
    _SIM_KEEPS_2SPINE[1],
    "every tensor crosses the spines: the workers sit off the server's leaf (placement "
    "`remote`; in the paper's 24-leaf fabric nearly every pair is remote)",
    "load = offered background bytes/s (web-search sizes, Poisson, sent by every host) over "
    "the leaf uplinks' capacity, training on top; the measured total (training + background) "
    "of each point is in the summary and stays below saturation at the top load (0.73 on "
    "fig10), near the paper's top 'overall workload', 0.8",
    _SIM_KEEPS_2SPINE[3],
]
_SIM_CHANGES = [
    "4 spines x 2 leaves x 4 hosts instead of 12 x 24 x 48; hosts 50 Mbit/s, uplinks "
    "25 Mbit/s instead of 100G (two CPUs forward everything)",
    "2:1 oversubscription instead of 4:1: at 4:1 one PS link would be a leaf's whole uplink "
    "capacity (paper: 1/12 of it) and training alone would offer ~0.75 of the uplinks",
    "background loads 0.1-0.4 instead of 0.2-0.8: training adds ~0.3, so the total offered "
    "load spans ~0.45-0.75",
    _SIM_CHANGES_2SPINE[1],
    "hosts' minimum RTO 10 ms (a datacenter value) instead of Linux's 200 ms",
    _SIM_CHANGES_2SPINE[2],
]
_PAPER4 = [*PAPER_BASELINES, "talb"]

#: Issue 36's regimes (testbed/regime.py NAMED), in the order a point runs them
_REGIMES = ("deep", "scaled", "scaled-ecn")
_REGIME_KEEPS = [
    "the paper's switch buffer as a drain time: 512 KB per port at 100 Gbit/s (sec. V-A), "
    "41.9 us, on each run's time scale (~116 on fig10's setup) at each switch port's rate, "
    "split evenly over the port's bands (the paper's shared buffer pool, sec. III)",
    "DCTCP at the hosts with ECN marking at the switches (sec. V-A) in the ECN regime: "
    "dctcp-bpf, our DCTCP as a BPF congestion control (this kernel has no tcp_dctcp)",
]
_REGIME_CHANGES = [c for c in _SIM_CHANGES if c is not _SIM_CHANGES_2SPINE[1]] + [
    "three regimes per point, interleaved: deep (fig10's 40 KB per band, 160 KB per port, "
    "12.8 ms per band at the uplinks' 25 Mbit/s; TCP cubic, loss only), scaled (the time-scaled "
    "buffers: 15.2 KB per uplink port, 30.4 KB per 50 Mbit/s host-facing port; cubic), "
    "scaled-ecn (the same buffers, ECN marking and DCTCP)",
    "a floor of 4 full frames (switch_mtu + 14 = 1614 B) per band: the scaled uplink bands "
    "(3.8 KB) hold 6,456 B, 25.8 KB a port; host-facing bands 7,589 B (over the floor). Below "
    "it a band could not hold K plus a delayed-ACK pair (netns_topology/buffers.py)",
    "K, the marking threshold of every band (and of a FIFO port), DCTCP's C x RTT / 7 with "
    "the paper's RTT (2 us a link, 16 us host to host and back) time-scaled: 827 B at 25 "
    "Mbit/s, under a frame, so the floor of 2 full frames (3,228 B) everywhere; the switches "
    "know their queues by a phantom queue per port and band (bpf/include/talb/ecn.h)",
    "the hosts' own egress queues stay fig10's (the paper's buffer is a switch's)",
]
PRESETS: dict[str, dict] = {
    "fig10": dict(_FIG10, description="Fig. 10: tensor FCT vs load, symmetric leaf-spine "
                                      "(4 spines, workers off the server's leaf)",
                  keeps=_SIM_KEEPS, changes=_SIM_CHANGES),
    "fig11": dict(_FIG10, topologies=["topologies/fig11-4spine.yaml"],
                  description="Fig. 11: tensor FCT vs load, asymmetric leaf-spine "
                              "(fig10's fabric with leaf0-spine1 at half rate)",
                  keeps=_SIM_KEEPS, changes=_SIM_CHANGES + [
                      "asymmetry: one of the eight leaf-spine links at half rate (the paper "
                      "does not say which links are degraded or by how much)"]),
    "fig10-2spine": dict(_FIG10_2SPINE,
                         description="Fig. 10 on the first design (results/fig10-2spine): 2 spines, "
                                     "4:1, workers spread over both leaves, loads 0.2-0.8",
                         keeps=_SIM_KEEPS_2SPINE, changes=_SIM_CHANGES_2SPINE),
    "fig11-2spine": dict(_FIG10_2SPINE, topologies=["topologies/fig11.yaml"],
                         description="Fig. 11 on the first design (results/fig11-2spine): "
                                     "fig10-2spine with leaf0-spine1 at half rate",
                         keeps=_SIM_KEEPS_2SPINE, changes=_SIM_CHANGES_2SPINE + [
                             "asymmetry: one of the four leaf-spine links at half rate (the "
                             "paper does not say which links are degraded or by how much)"]),
    "fig9": dict(
        topologies=["topologies/testbed4x4.yaml"], schemes=list(ALL_SCHEMES), loads=[0.0],
        models=["alexnet", "resnet50", "vgg19"], archs=["ps"], seeds=5,
        target_rates=[10e9, 25e9, 50e9, 100e9], agents=["default"], workers=8, servers=2,
        scaling="fit", iterations=4, warmup=1, figure="speed_vs_rate",
        seed_rule=dict(metric="samples_per_s", loads=None),   # every (model, rate) point
        description="Fig. 9: training speed (samples/s) of AlexNet, ResNet50, VGG19 under "
                    "PS + ByteScheduler vs target link rate",
        keeps=["the testbed's shape: leaf-spine, 4 racks x 4 hosts, 2 spines, 2:1 "
               "oversubscription (the paper's '1:2')", "PS with ByteScheduler (partition 4 MB, "
               "credit 16 MB, the start of its search space); the paper's batch sizes",
               "the communication-to-computation ratio of each target link rate (scaling "
               "`fit`: bytes shrunk as far as the 4-packet floor allows with <= 5% inflation, "
               "compute stretched by the rest; samples/s read at target scale)"],
        changes=["25 Mbit/s links instead of 100G (CPU limit, topologies/testbed4x4.yaml)",
                 "8 workers : 2 servers on the 16 hosts (the paper does not give the PS count)",
                 "compute emulated from FLOPs on a V100 profile, no GPUs; one framework "
                 "(ours) instead of TensorFlow/PyTorch/MXNet", "no background load (the paper "
                 "states none for Fig. 9)"]),
    "fig4": dict(
        topologies=["topologies/testbed4x4.yaml"], schemes=list(PAPER_BASELINES),
        loads=[0.2, 0.4, 0.6, 0.8], models=["vgg19"], archs=["ps"], seeds=5,
        target_rates=[100e9], agents=["default"], workers=15, servers=1, scaling="fit",
        iterations=3, warmup=1, background_size_scale=0.1, figure="motivation",
        description="Fig. 4: trailing tensors' FCT and the gap to the ideal training speed "
                    "(VGG19, PS) vs load under ECMP, RPS, CONGA",
        keeps=["PS, many workers to one PS (paper: 16 : 1)", "load from background flows sent "
               "by the workers, not by more training traffic (sec. II)", "100G target scale"],
        changes=["15 workers : 1 PS on the 16-host testbed shape (one host is the PS)",
                 "25 Mbit/s links; queue 40 KB per band instead of 128 KB at 100G",
                 "background sizes x 0.1 (mean 171 KB, <= 117 flows/s at load 0.8), not x the "
                 "tensors' byte scale 0.0022 (mean 3.8 KB, ~5,000 connections/s: the CPUs, "
                 "not the fabric, would set the result): background flows are ~45x larger "
                 "relative to the tensors than at the target",
                 "3 iterations (2 measured): one takes ~10 s here (scaling `fit`, time x 8.9)",
                 "the whole VGG19 model with ByteScheduler partitions instead of 32 KB "
                 "tensor packets", "ideal speed = compute-bound (workers x batch / compute "
                 "time of one iteration)"]),
    "fig10-fifo": dict(_FIG10_2SPINE, topologies=["topologies/fig10-fifo.yaml"],
                       loads=[0.2, 0.8],
                       description="fig10-2spine with one FIFO per port (no priority bands), "
                                   "loads 0.2 and 0.8: what the bands every scheme gets hide",
                       keeps=_SIM_KEEPS_2SPINE, changes=_SIM_CHANGES_2SPINE + [
                           "one 160 KB FIFO per port instead of 4 WFQ bands x 40 KB: the "
                           "same total buffer, no tensor priority in the queues (the "
                           "paper's baselines' switches)", "loads 0.2 and 0.8 only"]),
    "quick": dict(_FIG10, loads=[0.2, TOP_LOAD], seeds=3, iterations=3, seed_rule=None,
                  description=f"quick look: fig10's setup at loads 0.2 and {TOP_LOAD}, 3 seeds "
                              "(under 15 minutes here)",
                  keeps=_SIM_KEEPS, changes=_SIM_CHANGES + ["2 loads, 3 seeds, 3 iterations"]),
    "quick-ci": dict(_FIG10, loads=[0.2, TOP_LOAD], seeds=2, iterations=2, seed_rule=None,
                     description=f"CI-sized quick: fig10's setup at loads 0.2 and {TOP_LOAD}, "
                                 "2 seeds, 2 iterations (a minute or two per scheme pair)",
                     keeps=_SIM_KEEPS, changes=_SIM_CHANGES + ["2 loads, 2 seeds, 2 iterations"]),
    "ablation": dict(_FIG10_2SPINE, schemes=["talb"], loads=[0.5, 0.8], seed_rule=None,
                     agents=["default", "paper", "w1-0", "measured", "w1-0-measured",
                             "window-2ms", "window-20ms", "s-0.5", "s-0.8"],
                     reference="ecmp", figure="ablation",
                     description="agent defaults: window, W1/W2, delay model, threshold S on "
                                 "fig10-2spine's setup at loads 0.5 and 0.8 (TaLB; ECMP as "
                                 "reference)",
                     keeps=_SIM_KEEPS_2SPINE, changes=_SIM_CHANGES_2SPINE),
    # Issue 18: queueing as an axis of its own (docs/experiments.md, "Queueing").
    "fig10-factorial": dict(
        _FIG10, schemes=_PAPER4, loads=[0.2, TOP_LOAD], queueing=["bands", "fifo"],
        seed_rule=dict(metric="short_netfct_mean_s", loads=(0.2, TOP_LOAD),
                       pairs=tuple((arm("talb", q), arm(b, q)) for q in ("bands", "fifo")
                                   for b in PAPER_BASELINES)),
        description="routing x queueing: TaLB and the paper's baselines (ECMP, RPS, CONGA), "
                    "each with the priority bands and with one FIFO per switch port, loads 0.2 "
                    f"and {TOP_LOAD}; TaLB's gain decomposed into queueing, routing and their "
                    "interaction",
        keeps=_SIM_KEEPS, changes=_SIM_CHANGES + [
            "every scheme under both queueings: fig10's 4 WFQ bands x 40 KB per switch port, "
            "and one 160 KB FIFO per switch port (the same bytes), switched on the one fabric "
            "between runs; hosts keep fig10's queue, the agent and the band marks stay as "
            "fig10's", f"schemes: TaLB and the paper's baselines; loads 0.2 and {TOP_LOAD}"]),
    "fig10-paper": dict(
        _FIG10, schemes=_PAPER4, queueing={"talb": ["bands"], "*": ["fifo"]},
        seed_rule=dict(metric="short_netfct_mean_s", loads=(TOP_LOAD,),
                       pairs=tuple(("talb", arm(b, "fifo")) for b in PAPER_BASELINES)),
        description="Fig. 10 in the paper's configuration as we read it: TaLB with its WFQ "
                    "priority bands (sec. III), ECMP, RPS and CONGA on one FIFO per switch port",
        keeps=_SIM_KEEPS + ["WFQ by tensor priority in TaLB's switches (sec. III)"],
        changes=_SIM_CHANGES + [
            "the baselines' switch ports: one 160 KB FIFO (fig10's 4 bands x 40 KB, the same "
            "bytes), our reading: the paper does not say how its baselines queue; TaLB's: "
            "fig10's bands. This comparison mixes routing and queueing "
            "(fig10-factorial separates them)", "schemes: TaLB and the paper's baselines"]),
    # Issue 18: the paper's assumptions together as we read them -- WFQ bands in TaLB's
    # switches (sec. III; FIFO for the baselines, of which the paper says nothing) and
    # each tensor its own flow (a pool of connections) -- at the headline load.
    "fig10-paper-pool": dict(
        _FIG10, schemes=_PAPER4, loads=[TOP_LOAD], queueing={"talb": ["bands"], "*": ["fifo"]},
        connections=["pool:8"],
        seed_rule=dict(metric="short_netfct_mean_s", loads=(TOP_LOAD,),
                       pairs=tuple(("talb/pool:8", arm(b, "fifo", "pool:8"))
                                   for b in PAPER_BASELINES)),
        description="Fig. 10 under the paper's assumptions as we read them: TaLB with its WFQ "
                    "bands, ECMP, RPS and CONGA on FIFO switch ports, every tensor its own "
                    f"flow (a pool of 8 connections per pair), load {TOP_LOAD}",
        keeps=_SIM_KEEPS + ["WFQ by tensor priority in TaLB's switches (sec. III)",
                            "each tensor a flow of its own (sec. V-A: L0 sent as short flows)"],
        changes=_SIM_CHANGES + [
            "the baselines' switch ports: one 160 KB FIFO (fig10's 4 bands x 40 KB), our "
            "reading: the paper does not say how its baselines queue; TaLB's: the bands",
            "a pool of 8 pre-opened connections per worker-server pair, one "
            "tensor per idle connection, instead of a new flow per tensor (no handshakes)",
            f"schemes: TaLB and the paper's baselines; load {TOP_LOAD} only"]),
    # Issue 18: what the datacenter minimum RTO does (the fig10 presets' 10 ms against
    # the kernel's 200 ms), paired by seed at the top load.
    # Issue 36: does the factorial's finding survive the regime? fig10-factorial and
    # fig10-paper again, each run under three regimes interleaved (seed, load, then every
    # regime and arm back to back): deep (the committed runs' regime, re-run here at the
    # same commit), time-scaled shallow buffers with loss only, and the same buffers with
    # ECN marking and DCTCP. Designed before any run (docs/experiments.md, "Regime").
    "fig10-factorial-regime": dict(
        _FIG10, schemes=_PAPER4, loads=[0.2, TOP_LOAD], queueing=["bands", "fifo"],
        regimes=list(_REGIMES), seeds=10, seed_rule=None,
        description="routing x queueing in three regimes: fig10-factorial's TaLB, ECMP, RPS "
                    "and CONGA, each with the priority bands and with one FIFO per switch port, "
                    f"loads 0.2 and {TOP_LOAD}, 10 seeds, each under deep buffers (fig10's), "
                    "time-scaled shallow buffers with loss, and the same buffers with ECN and "
                    "DCTCP; per regime TaLB's gain decomposed into queueing, routing and "
                    "their interaction (paired by seed, Holm), and how the routing effect "
                    "moves from deep to shallow to ECN",
        keeps=_SIM_KEEPS + _REGIME_KEEPS,
        changes=_REGIME_CHANGES + [
            "every scheme under both queueings (fig10-factorial's arms): in the scaled "
            "regimes a FIFO port holds what its bands hold together, as in the deep one",
            f"schemes: TaLB and the paper's baselines; loads 0.2 and {TOP_LOAD}; 10 seeds "
            "everywhere (no seed rule: the issue's 10 paired seeds per cell)"]),
    "fig10-paper-regime": dict(
        _FIG10, schemes=_PAPER4, queueing={"talb": ["bands"], "*": ["fifo"]},
        regimes=list(_REGIMES), seeds=10, seed_rule=None,
        description="Fig. 10 in the paper's configuration as we read it (TaLB with its WFQ "
                    "bands, ECMP, RPS and CONGA on one FIFO per switch port), loads 0.1-0.4, "
                    "10 seeds, under deep buffers (fig10's), time-scaled shallow buffers with "
                    "loss, and the same buffers with ECN and DCTCP (the paper's transport, "
                    "sec. V-A)",
        keeps=_SIM_KEEPS + ["WFQ by tensor priority in TaLB's switches (sec. III)"]
        + _REGIME_KEEPS,
        changes=_REGIME_CHANGES + [
            "the baselines' switch ports: one FIFO holding the bands' bytes (our reading: the "
            "paper does not say how its baselines queue); TaLB's: the bands. This comparison "
            "mixes routing and queueing (fig10-factorial-regime separates them)",
            "schemes: TaLB and the paper's baselines; 10 seeds everywhere (no seed rule)"]),
    "fig10-rto": dict(
        # None: the topology's 10 ms, so those runs are fig10's (the same keys)
        _FIG10, schemes=_PAPER4, loads=[TOP_LOAD], rto_min=[None, "kernel"], seed_rule=None,
        description=f"hosts' minimum RTO: fig10's 10 ms against the kernel's 200 ms, load "
                    f"{TOP_LOAD}, TaLB and the paper's baselines, 5 paired seeds",
        keeps=_SIM_KEEPS, changes=_SIM_CHANGES + [
            "every scheme under both minimum RTOs (a route metric, switched between runs)",
            f"schemes: TaLB and the paper's baselines; load {TOP_LOAD} only; 5 seeds"]),
    # Issue 18: the paper's flows (each tensor its own connection) against ps-lite's one
    # connection per pair, at the headline load.
    "fig10-conns": dict(
        _FIG10, schemes=_PAPER4, loads=[TOP_LOAD], connections=["pair", "pool:8"],
        # TaLB against each baseline, under each connection model (_seed_rule)
        seed_rule=dict(metric="short_netfct_mean_s", loads=(TOP_LOAD,)),
        description="connection models: one connection per worker-server pair (ps-lite) "
                    "against a pool of 8 per pair, one tensor per idle connection (the "
                    f"paper's flows, sec. V-A), load {TOP_LOAD}, TaLB and the paper's "
                    "baselines",
        keeps=_SIM_KEEPS, changes=_SIM_CHANGES + [
            "every scheme under both connection models",
            f"schemes: TaLB and the paper's baselines; load {TOP_LOAD} only"]),
}

# Issue 22: a real Open MPI job (workload/mpi_run.py) as the training traffic, the
# schemes compared on its iteration time, paired by seed.
_MPI = dict(
    topologies=["topologies/talb.yaml"], schemes=list(ALL_SCHEMES), loads=[0.3],
    models=["alexnet"], archs=["allreduce"], clients=["mpi"], seeds=5, target_rates=[10e9],
    agents=["default"], workers=4, servers=1, scaling="bytes", iterations=10, warmup=1,
    background_size_scale=0.1, figure="mpi",
    seed_rule=dict(metric="iteration_time_s", loads=(0.3,)),
    description="a real MPI job: Open MPI all-reduce of AlexNet's tensors (one MPI_Allreduce "
                "per parameter tensor, 4 ranks on both leaves), every scheme, background load "
                "0.3, iteration time paired by seed",
    keeps=["an unmodified Open MPI 4.1 job (mpirun, btl tcp) over the fabric, one rank per host",
           "data-parallel training's communication: every parameter tensor all-reduced each "
           "iteration, in backward order, after its layer's backward compute"],
    changes=["the default fabric (topologies/talb.yaml: 2 spines, 2 leaves x 3 hosts, 100 "
             "Mbit/s); AlexNet's tensors x 0.01 (10G target -> 100 Mbit/s, scaling bytes)",
             "compute emulated by sleeps (the V100 profile); one all-reduce at a time, no "
             "overlap with compute",
             "ranks wait by MPI_Testall every 0.2 ms with sleeps between, not by Open MPI's "
             "busy polling: four spinning ranks saturated the two CPUs that forward the fabric "
             "(workload/mpi_rank.py)",
             "10 iterations (9 measured): one 200 ms RTO moves a run's iteration time by ~2%",
             "tagging (--mpi-tag auto): the transparent tagger tags the MPI connections under "
             "talb; the other schemes run untagged (they do not read tags)",
             "background sizes x 0.1 (fewer, larger flows: the CPUs stay out of the result)"])

PRESETS["mpi"] = _MPI
PRESETS["mpi-quick"] = dict(
    _MPI, schemes=["ecmp", "talb"], seeds=2, iterations=3, seed_rule=None,
    description="mpi's setup for a check that it runs: ECMP and TaLB, 2 seeds, 3 iterations",
    changes=[c for c in _MPI["changes"] if not c.startswith("10 iterations")]
    + ["two schemes, 2 seeds, 3 iterations: not a result"])

# Issue 38: an unmodified PyTorch DDP job (workload/torch_run.py) as the training
# traffic, the schemes compared on its iteration time and samples/s, paired by seed.
_TORCH = dict(
    topologies=["topologies/talb.yaml"], schemes=list(ALL_SCHEMES), loads=[0.3],
    models=["resnet50", "gpt2-small"], archs=["allreduce"], clients=["torch"], seeds=5,
    target_rates=[10e9], agents=["default"], workers=4, servers=1, scaling="bytes",
    iterations=10, warmup=1, background_size_scale=0.1, figure="torch",
    seed_rule=dict(metric="iteration_time_s", loads=(0.3,)),
    description="an unmodified PyTorch DDP job (gloo, 4 ranks on both leaves): a "
                "ResNet-50-shaped convnet and a GPT-2-small-shaped transformer, every scheme, "
                "background load 0.3, iteration time and samples/s paired by seed",
    keeps=["PyTorch 2.13 DistributedDataParallel over gloo, unmodified, one rank per host; "
           "DDP's own gradient buckets (bucket_cap_mb = DDP's 25 MiB x the byte scale), "
           "all-reduced as the backward pass makes them, overlapped with the backward compute",
           "every run's parameters identical on all ranks and equal to a single-process run "
           "(else the run is 'incorrect' and left out)"],
    changes=["the default fabric (topologies/talb.yaml: 2 spines, 2 leaves x 3 hosts, 100 "
             "Mbit/s); the models' widths x 0.1 (their bytes x ~0.01: 10G target -> 100 Mbit/s, "
             "scaling bytes); a 4-sample batch of 32x32 images / 16 tokens computed for real",
             "the profiles' compute (V100, their batch) emulated by sleeps in an autograd "
             "function after each layer (workload/torch_rank.py)",
             "10 iterations (9 measured)",
             "tagging (--mpi-tag auto): the transparent tagger tags the job's cgroup under "
             "talb (every gloo data packet); the other schemes run untagged",
             "tags by the tagger's default size rule: DDP's bucket order (front layers' bucket "
             "last out, served first) is recorded per run, the kernel has no rule for it yet",
             "background sizes x 0.1 (fewer, larger flows: the CPUs stay out of the result)"])

PRESETS["torch"] = _TORCH
PRESETS["torch-quick"] = dict(
    _TORCH, schemes=["ecmp", "talb"], models=["resnet50"], seeds=2, iterations=3,
    seed_rule=None,
    description="torch's setup for a check that it runs: ResNet-50 shape, ECMP and TaLB, "
                "2 seeds, 3 iterations",
    changes=[c for c in _TORCH["changes"] if not c.startswith("10 iterations")]
    + ["two schemes, one model, 2 seeds, 3 iterations: not a result"])

# Issue 42: the training systems the project was founded on, paired by seed. The
# design, decided before any run: the default fabric, 4 workers (PS: 1 server) on
# both leaves, 10G target scaled by bytes, background load 0.3 (sizes x 0.1, as the
# torch preset: the CPUs out of the result), ECMP and TaLB under every setting
# (does TaLB's effect depend on the scheduler, the comm scheme, the fusion?), 5
# fixed seeds, 6 iterations (1 warm-up); compared on iteration time and samples/s,
# paired by seed across the setting (Holm over the comparisons), with OSF's error
# in every results file. docs/experiments.md, "Issue 42's presets".
_PAPERS = dict(
    topologies=["topologies/talb.yaml"], schemes=["ecmp", "talb"], loads=[0.3],
    models=["resnet50", "vgg19"], archs=["ps", "allreduce"], seeds=5, target_rates=[10e9],
    agents=["default"], workers=4, servers=1, scaling="bytes", iterations=6, warmup=1,
    background_size_scale=0.1, figure="fct_vs_load", seed_rule=None,
    keeps=["the schedulers, comm schemes and fusion as the papers define them "
           "(docs/workload.md: Schedulers, Hybrid communication, Tensor fusion)",
           "the papers' batch sizes from the model profiles (VGG19 32, ResNet-50 128)"],
    changes=["the default fabric (topologies/talb.yaml: 2 spines, 2 leaves x 3 hosts, 100 "
             "Mbit/s); tensors x 0.01 (10G target -> 100 Mbit/s, scaling bytes)",
             "compute emulated by sleeps (the V100 profile)",
             "US-Byte's block cost a + b x bytes with a = 0.5 ms and b from the target link, "
             "not fitted to a cluster as its authors do",
             "background sizes x 0.1 (fewer, larger flows: the CPUs stay out of the result)",
             "5 fixed seeds (no seed rule: the directions compare settings, not only schemes)"])
PRESETS["papers-schedulers"] = dict(
    _PAPERS, schedulers=["bytescheduler", "usbyte", "wfbp"],
    description="US-Byte vs ByteScheduler and WFBP (TPDS 2023's direction), ResNet-50 and "
                "VGG19, PS 4:1 and ring all-reduce x4, ECMP and TaLB under each scheduler, "
                "load 0.3, 5 seeds")
PRESETS["papers-hybrid"] = dict(
    _PAPERS, archs=["ps"], comms=["ps", "hybrid"],
    description="Poseidon's hybrid communication vs a parameter server (ATC 2017's "
                "direction): VGG19 (its three fc layers by SFB) and ResNet-50 (its fc), PS "
                "4:1, ECMP and TaLB under each, load 0.3, 5 seeds")
PRESETS["papers-fusion"] = dict(
    _PAPERS, archs=["allreduce"], schedulers=["wfbp"], fusions=["none", "adaptive",
                                                               "constant:64mb"],
    description="OSF's adaptive tensor fusion vs a constant 64 MB buffer and none (WWW "
                "2022's direction): ResNet-50 and VGG19, ring all-reduce x4 with WFBP "
                "(Horovod's), ECMP and TaLB under each, load 0.3, 5 seeds")
PRESETS["papers-quick"] = dict(
    _PAPERS, models=["resnet50"], archs=["ps"], schedulers=["bytescheduler", "usbyte"],
    comms=["ps", "hybrid"], seeds=1, iterations=3,
    description="issue 42's machinery for a check that it runs: ResNet-50, PS 4:1, "
                "ByteScheduler and US-Byte x PS and hybrid, ECMP and TaLB, 1 seed, 3 iterations",
    changes=_PAPERS["changes"] + ["one model, one seed, 3 iterations: not a result"])

_LB_CLASSIC = dict(
    kind="background", topologies=["topologies/lb-classic-sym.yaml",
                                   "topologies/lb-classic-asym.yaml"],
    schemes=list(ALL_SCHEMES), loads=[0.1, 0.3, 0.5, 0.7, 0.8, 0.9],
    cdfs=["websearch", "datamining"], seeds=5, agents=["default"], figure="lb_classic",
    # the standard comparison, each balancer against ECMP; watched at the loads
    # the published directions are tested at (lbclassic.background_plan)
    seed_rule={"metric": "all_nfct_mean",
               "pairs": [(s, "ecmp") for s in ALL_SCHEMES if s != "ecmp"]},
    description="the load-balancing literature's standard evaluation, background "
                "flows only (no training): FCT normalised to the ideal vs load, symmetric and "
                "asymmetric leaf-spine, web-search and data-mining flow sizes",
    keeps=["Poisson flows between hosts on different leaves, sizes from the web-search (DCTCP) "
           "and data-mining (VL2) CDFs, as CONGA, LetFlow and DRILL evaluate",
           "loads 0.1-0.9 of the fabric's capacity; a symmetric leaf-spine and one with a "
           "degraded leaf-spine link", "FCT normalised to the ideal on an idle fabric; short "
           "(<= 100 KB), long (>= 1 MB) and all flows, mean and p99"],
    changes=["2 spines x 2 leaves x 4 hosts, every link 50 Mbit/s (2:1 oversubscribed), "
             "80 KB FIFO per port, instead of 10-40G fabrics (two CPUs forward everything)",
             "flow sizes scaled (web search x0.2, data mining x0.025: both ~330 KB on "
             "average, ~70 flows/s at load 0.9), classes by the unscaled size",
             "asymmetry: leaf0-spine1 at half rate (CONGA's testbed fails a link); load over the capacity traffic spread evenly over the leaves "
             "can use (150 of the 175 Mbit/s of uplinks)",
             "TCP cubic without ECN, the kernel's 200 ms minimum RTO; the schemes' timers "
             "derived from the link rate (docs/schemes.md: flowlet gap 0.98 ms, CONGA's tau "
             "1.96 ms on the symmetric fabric; the asymmetric one's slowest link gives 1.94 "
             "and 3.88 ms)", "DRILL without its decomposition of an asymmetric fabric into symmetric "
             "parts (the paper's answer to asymmetry): on the asymmetric fabric it compares "
             "the queues of unequal links", "TaLB sees no tensors here: every packet takes its "
             "fallback, ECMP"],
)
PRESETS["lb-classic"] = _LB_CLASSIC
# A failed link (issue 36, item 3), designed before any run. Fabric:
# topologies/lb-classic-fail.yaml, CONGA's testbed shape (2 leaves x 2 spines,
# two links per leaf-spine pair, 25 Mbit/s each: lb-classic-sym's 100 Mbit/s of
# uplinks a leaf) with one of leaf0's links to spine1 failed (left out of the fabric:
# topologies/lb-classic-fail.yaml says why). Every scheme, both
# CDFs, loads 0.3 / 0.5 / 0.8 (light, medium, and the heavy load the published
# directions are tested at), 5 seeds, then the seed rule's up to 10 at 0.8.
# Expected directions, each a paired test (lbclassic.DIRECTIONS, fabric
# "failed"), at 0.8 on the all-flow mean normalised FCT, Holm across the table:
# CONGA better than ECMP, and at most a fifth of it (CONGA's "5x better than
# ECMP even with a single link failure"); LetFlow within 20% of CONGA and
# better than ECMP and RPS (LetFlow, NSDI 2017); RPS worse than CONGA (Dixit et
# al., INFOCOM 2013: spraying suffers when a failure breaks symmetry); TaLB
# equal to ECMP (the fallback check). What we expect here, written before
# running: CONGA and LetFlow below ECMP as on the half-rate fabric (1.6-1.8x
# there), the 5x not reached (lb-classic-asym's CONGA/ECMP was 0.55-0.61 at
# 0.8); DRILL without its asymmetry handling.
PRESETS["lb-classic-fail"] = dict(
    _LB_CLASSIC, topologies=["topologies/lb-classic-fail.yaml"], loads=[0.3, 0.5, 0.8],
    description="lb-classic on a failed link: CONGA's testbed shape (two links per leaf-spine "
                "pair) with one of leaf0's four uplinks down, every scheme, web-search and "
                "data-mining flows, loads 0.3/0.5/0.8; CONGA's and LetFlow's failure claims "
                "as paired directions",
    keeps=_LB_CLASSIC["keeps"][:1] + [
        "a failed link, as CONGA's testbed: 2 leaves x 2 spines, two links between every "
        "leaf and spine, one of them down", _LB_CLASSIC["keeps"][2]],
    changes=[_LB_CLASSIC["changes"][1], _LB_CLASSIC["changes"][3],
             "2 spines x 2 leaves x 4 hosts at 50 Mbit/s, every leaf-spine pair joined by two "
             "25 Mbit/s links (a leaf's 100 Mbit/s of uplinks, 2:1 as lb-classic-sym), 80 KB "
             "FIFO per port, instead of CONGA's 40G links (two CPUs forward everything)",
             "leaf0 <-> spine1's second link failed for the whole run, left out of the fabric "
             "(the routes converged around it; the fault-injection sweep, experiments/faults.py, "
             "takes links down mid-run; the PCM agent keeps link state per pair of nodes, so a "
             "link listed down would take its parallel link down too); load over the capacity "
             "even traffic can use, 150 of the 175 Mbit/s of uplinks",
             "loads 0.3, 0.5, 0.8 only (the directions are tested at 0.8)",
             "DRILL without its decomposition of an asymmetric fabric into symmetric parts: "
             "on the failed fabric it compares the queues of every up port"])
PRESETS["lb-classic-quick"] = dict(
    _LB_CLASSIC, topologies=["topologies/lb-classic-quick.yaml"], schemes=["ecmp", "drill"],
    loads=[0.3, 0.8], cdfs=["websearch"], seeds=2, window_s=5.0, seed_rule=None,
    description="lb-classic's runs on a small symmetric fabric, ECMP and "
                "DRILL, web search, loads 0.3 and 0.8, 2 seeds, 5 s windows (the test suite's)",
    changes=_LB_CLASSIC["changes"] + ["2 hosts per leaf (1:1), two schemes, one CDF, two "
                                      "loads, 2 seeds, 5 s windows: a check that it runs, "
                                      "not a result"])

SWEEP_FIELDS = ("topologies", "schemes", "loads", "models", "archs", "seeds", "target_rates",
                "agents", "workers", "servers", "scaling", "iterations", "warmup",
                "background_size_scale", "queueing", "connections", "placement", "rto_min",
                "cdfs", "clients", "regimes", "schedulers", "comms", "fusions")


def topology_path(t: str) -> str:
    """A --topologies entry (a bare name of topologies/, or a file) as the
    plan records it: relative to the repository when inside it. PlanError
    when there is no such file."""
    from pathlib import Path

    p = Path(t)
    if not p.suffix:
        p = TOPOLOGY_DIR / f"{t}.yaml"     # a bare name: one of topologies/
    elif not p.is_absolute() and not p.exists() and (paths.REPO_ROOT / p).exists():
        p = paths.REPO_ROOT / p
    if not p.is_file():
        raise PlanError(f"--topologies: no such topology file {t!r}")
    try:
        return str(p.resolve().relative_to(paths.REPO_ROOT))
    except ValueError:
        return str(p.resolve())


def known_schemes() -> tuple:
    return tuple(SCHEMES)


@dataclass(frozen=True)
class Request:
    """A preset with the command line's changes (``changed``), checked as
    every kind of sweep needs (:func:`resolve`); experiments/sweep/kinds.py
    makes its plan: :func:`training_plan`, or lbclassic.py's for a
    background-only preset (``base["kind"] == "background"``)."""

    name: str
    base: dict
    changed: dict
    schemes: list          # in the preset's order
    seed_list: list
    seed_cap: int | None = None
    seed_width: float | None = None
    fixed_seeds: bool = False


def resolve(preset: str | None = None, *, seed_cap: int | None = None,
            seed_width: float | None = None, fixed_seeds: bool = False,
            **overrides) -> Request:
    """``preset`` (or the quick preset's setup when None: a free sweep) with
    any of SWEEP_FIELDS overridden (None = keep), checked; a scheme the
    registry does not know is a PlanError naming it. ``seed_*``: see
    :func:`training_plan`."""
    if preset is not None and preset not in PRESETS:
        raise PlanError(f"--preset: one of {', '.join(PRESETS)}, got {shown(preset)}")
    base = dict(PRESETS[preset or "quick"])
    unknown = set(overrides) - set(SWEEP_FIELDS)
    if unknown:
        raise PlanError(f"build_plan: unknown option(s) {', '.join(sorted(unknown))}")
    changed = {k: v for k, v in overrides.items() if v is not None}
    base.update(changed)
    name = preset or "sweep"
    if preset and changed:
        name = f"{preset}+" + "+".join(sorted(changed))

    known = known_schemes()
    bad = [s for s in base["schemes"] if s not in known]
    if bad:
        raise PlanError(f"--schemes: unknown scheme(s) {', '.join(bad)} (known: {', '.join(known)})")
    schemes = list(base["schemes"])
    if not schemes:
        raise PlanError(f"--schemes: at least one of {', '.join(known)}")
    for a in base["agents"]:
        if a not in AGENT_SETTINGS:
            raise PlanError(f"--agents: unknown setting {a!r} (known: {', '.join(AGENT_SETTINGS)})")
    for ld in base["loads"]:
        if not 0 <= ld < 1:
            raise PlanError(f"--loads: a fraction in [0, 1), got {shown(ld)}")
    seeds = base["seeds"]
    seed_list = list(range(1, seeds + 1)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise PlanError("--seeds: at least one seed")
    return Request(name=name, base=base, changed=changed, schemes=schemes, seed_list=seed_list,
                   seed_cap=seed_cap, seed_width=seed_width, fixed_seeds=fixed_seeds)


def seed_rule_of(req: Request, arms: list[str]) -> SeedRule | None:
    """The request's SeedRule for a sweep of ``arms`` (its schemes), or None
    (no rule in the preset, --fixed-seeds, a list of seeds); PlanError for
    a --seed-cap or --seed-width it cannot take, naming it."""
    return _seed_rule(req.base, req.base["seeds"], arms, req.seed_cap, req.seed_width,
                      req.fixed_seeds)


def training_plan(req: Request) -> Plan:
    """The runs of a training sweep, with the preset's seed rule (SeedRule;
    ``seeds`` a count is its first seeds, ``seed_cap``/``seed_width`` change
    it) unless ``fixed_seeds`` or ``seeds`` is a list."""
    name, base, changed, schemes = req.name, req.base, req.changed, req.schemes
    seeds, seed_list = base["seeds"], req.seed_list
    reference = base.get("reference")
    if "cdfs" in changed:
        raise PlanError("--cdfs: the lb-classic presets' option (training sweeps use websearch)")
    if "none" in base["models"]:
        raise PlanError("--models: 'none' (background only) is the lb-classic presets' "
                        "(--preset lb-classic)")
    if base["warmup"] >= base["iterations"]:
        raise PlanError(f"--warmup: below --iterations ({base['iterations']}), got {base['warmup']}")

    queueings = _queueings(base.get("queueing"), schemes)
    conns = _connections(base.get("connections"))
    arms = [arm(s, q, c) for s in schemes for q in queueings[s] for c in conns]
    rule = _seed_rule(base, seeds, arms, req.seed_cap, req.seed_width, req.fixed_seeds, conns)
    topologies = [topology_path(t) for t in base["topologies"]]
    placements = _placements(base.get("placement"), base, topologies)
    rtos = _rto_mins(base.get("rto_min"))
    clients = _clients(base.get("clients"), base, conns)
    regimes = _regimes(base.get("regimes"), clients)
    scheds = _schedulers(base.get("schedulers"), clients)
    comms, fusions = _comms(base.get("comms"), clients), _fusions(base.get("fusions"), clients)
    runs: list[RunSpec] = []
    # Order: topology (one fabric each), then seed, load, ..., with scheme and agent
    # setting innermost: what a sweep compares runs back to back, so a slow drift of
    # the machine over the sweep cannot masquerade as a difference between them, and
    # an interrupted sweep has every scheme and setting at the points it reached.
    for topo, seed, load, rate, model, arch in itertools.product(
            topologies, seed_list, base["loads"], base["target_rates"], base["models"],
            base["archs"]):
        # --comms apply to PS runs, --fusions to all-reduce runs: each other's single default
        arch_comms = comms if arch == "ps" else ["ps"]
        arch_fusions = fusions if arch == "allreduce" else [None]
        for pl, rto, client, regime, sch, cm, fu in itertools.product(
                placements, rtos, clients, regimes, scheds, arch_comms, arch_fusions):
            if client in REAL_JOBS and arch != base["archs"][0]:
                continue            # an MPI job is an all-reduce whatever --archs: once a point
            if client in REAL_JOBS and (sch, cm, fu) != ("bytescheduler", "ps", None):
                continue            # a real job sends as its library does
            axes = dict(placement=pl, rto_min=rto, client=client, regime=regime, scheduler=sch,
                        comm=cm, fusion=fu)
            for agent in base["agents"]:
                for c in conns:
                    for q in _QUEUEING_ORDER:
                        for scheme in schemes:
                            if q in queueings[scheme]:
                                runs.append(_spec(base, topo, scheme, model, arch, load, seed,
                                                  rate, agent, q, c, **axes))
            if reference:                               # the reference: once per point
                runs.append(_spec(base, topo, reference, model, arch, load, seed, rate,
                                  "default", **axes))
    return Plan(name=name, description=base["description"], figure=base["figure"], runs=runs,
                keeps=list(base.get("keeps", [])), changes=list(base.get("changes", [])),
                seed_rule=rule)


_QUEUEING_ORDER = ("bands", "fifo")     # netns_topology/qdisc.py QUEUEINGS


def _queueings(value, schemes: list[str]) -> dict[str, list[str]]:
    """Each scheme's queueings from a preset's or --queueing's value: None
    (the topology's: bands), a list for every scheme, or a mapping of
    scheme (or ``*``, the rest) to a list."""
    if value is None:
        value = ["bands"]
    if isinstance(value, str):
        value = [value]
    spec = ({k: [v] if isinstance(v, str) else list(v) for k, v in value.items()}
            if isinstance(value, dict) else {"*": list(value)})
    known = known_schemes()
    for k, modes in spec.items():
        if k != "*" and k not in known:
            raise PlanError(f"--queueing: unknown scheme {k!r} in {k}=... (known: "
                            f"{', '.join(known)}, or * for the rest)")
        if not modes:
            raise PlanError(f"--queueing: no queueing given for {k}")
        for m in modes:
            if m not in _QUEUEING_ORDER:
                raise PlanError(f"--queueing: one of {', '.join(_QUEUEING_ORDER)} (for every "
                                f"scheme, or SCHEME=QUEUEING), got {shown(m)}")
    default = spec.get("*", ["bands"])
    return {s: [q for q in _QUEUEING_ORDER if q in spec.get(s, default)] for s in schemes}


def _connections(value) -> list[str]:
    """The connection models of a preset's or --connections's value (None:
    pair), canonical (``pool:08`` is ``pool:8``), each once, in the order given."""
    from workload.patterns import connections

    if value is None:
        value = ["pair"]
    if isinstance(value, str):
        value = [value]
    if not value:
        raise PlanError("--connections: at least one of pair, class, pool:N")
    out = []
    for v in value:
        try:
            c = connections.canonical(v)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        if c not in out:
            out.append(c)
    return out


def _values(value, default) -> list:
    """A preset's or option's value as a list: None -> [default], one value -> [it]."""
    if value is None:
        return [default]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _placements(value, base: dict, topologies: list[str]) -> list[str]:
    """The placements of a preset's or --placement's value (None: spread),
    canonical, each once; one other than spread is checked against every
    topology and architecture of the sweep (enough hosts off the servers'
    leaves, the hosts named)."""
    from pathlib import Path

    from netns_topology import load_topology
    from workload import placement

    values = _values(value, "spread")
    if not values:
        raise PlanError(f"--placement: at least one of {placement.SYNTAX}")
    out = []
    for v in values:
        try:
            c = [placement.canonical(v, a) for a in base["archs"]][0]
            if c != "spread":
                for t in topologies:
                    topo = load_topology(t if Path(t).is_absolute() else paths.REPO_ROOT / t)
                    for a in base["archs"]:
                        placement.place(topo, a, base["workers"], base["servers"], c)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        if c not in out:
            out.append(c)
    return out


def _rto_mins(value) -> list:
    """The hosts' minimum RTOs of a preset's or --rto-min's value (None: the
    topology's), canonical (``10ms``, ``kernel``), each once, in the order given."""
    from workload.testbed_use import rto_min_setting

    values = _values(value, None)
    if not values:
        raise PlanError("--rto-min: at least one value (10ms, kernel, ...)")
    out = []
    for v in values:
        try:
            c = rto_min_setting(v)
        except ValueError as exc:
            raise PlanError(str(exc)) from None
        if c not in out:
            out.append(c)
    return out


def _regimes(value, clients: list[str]) -> list:
    """The regimes of a preset's or --regime's value (None: the topology's,
    deep without ECN), each once, in the order given; ``deep`` is None (the
    runs before issue 36 are its runs: the same keys)."""
    from testbed.regime import NAMED

    values = _values(value, None)
    if not values:
        raise PlanError(f"--regime: at least one of {', '.join(NAMED)}")
    out = []
    for v in values:
        if v is not None and v not in NAMED:
            raise PlanError(f"--regime: one of {', '.join(NAMED)}, got {shown(v)}")
        c = None if v == "deep" else v
        if c not in out:
            out.append(c)
    if out != [None] and any(c in REAL_JOBS for c in clients):
        raise PlanError("--regime: training runs with our own nodes only (--clients talb); "
                        "an MPI or PyTorch job runs deep without ECN")
    return out


CLIENTS = ("talb", "mpi", "torch")
#: clients that are a real job's all-reduce (one rank per host, their own connections)
REAL_JOBS = ("mpi", "torch")


def _clients(value, base: dict, conns: list[str]) -> list[str]:
    """The training clients of a preset's or --clients's value (None: talb),
    each once: talb (our nodes) and mpi (a real Open MPI all-reduce job, ring
    all-reduce's placement, its own connections)."""
    values = _values(value, "talb")
    if not values:
        raise PlanError(f"--clients: at least one of {', '.join(CLIENTS)}")
    out = []
    for v in values:
        if v not in CLIENTS:
            raise PlanError(f"--clients: one of {', '.join(CLIENTS)}, got {shown(v)}")
        if v not in out:
            out.append(v)
    for job, who in (("mpi", "Open MPI"), ("torch", "gloo")):
        if job not in out:
            continue
        if base["workers"] < 2:
            raise PlanError(f"--workers: a{'n MPI' if job == 'mpi' else ' PyTorch DDP'} job "
                            f"needs at least 2 ranks, got {base['workers']}")
        if conns != ["pair"]:
            raise PlanError(f"--connections: {who} opens its own connections; --clients {job} "
                            f"takes pair only, got {shown(','.join(conns))}")
    return out


def _schedulers(value, clients: list[str]) -> list[str]:
    """The schedulers of a preset's or --schedulers's value (None:
    bytescheduler), each once, in the order given (workload/schedules.py)."""
    from workload import schedules

    values = _values(value, "bytescheduler")
    if not values:
        raise PlanError(f"--schedulers: at least one of {', '.join(schedules.SCHEDULERS)}")
    out = []
    for v in values:
        if v not in schedules.SCHEDULERS:
            raise PlanError(f"--schedulers: one of {', '.join(schedules.SCHEDULERS)}, got {shown(v)}")
        if v not in out:
            out.append(v)
    if "talb" not in clients and out != ["bytescheduler"]:
        raise PlanError(f"--schedulers: our own nodes' axis (--clients talb); got "
                        f"{','.join(out)!r} with --clients {','.join(clients)}")
    return out


def _comms(value, clients: list[str]) -> list[str]:
    """The PS communication schemes of a preset's or --comms's value (None: ps)."""
    from workload import hybrid

    values = _values(value, "ps")
    if not values:
        raise PlanError(f"--comms: at least one of {', '.join(hybrid.COMMS)}")
    for v in values:
        if v not in hybrid.COMMS:
            raise PlanError(f"--comms: one of {', '.join(hybrid.COMMS)}, got {shown(v)}")
    out = list(dict.fromkeys(values))
    if "talb" not in clients and out != ["ps"]:
        raise PlanError(f"--comms: our own nodes' axis (--clients talb), got {shown(','.join(out))}")
    return out


def _fusions(value, clients: list[str]) -> list[str | None]:
    """The all-reduce fusion settings of a preset's or --fusions's value
    (None or "none": no fusion; adaptive; constant:SIZE)."""
    from workload import schedules

    values = _values(value, None)
    if not values:
        raise PlanError("--fusions: at least one of none, adaptive, constant:SIZE")
    out = []
    for v in values:
        v = None if v in (None, "none") else v
        try:
            schedules.parse_fusion(v)
        except ValueError as exc:
            raise PlanError(str(exc).replace("--fusion:", "--fusions:")) from None
        if v not in out:
            out.append(v)
    if "talb" not in clients and out != [None]:
        raise PlanError("--fusions: our own nodes' axis (--clients talb)")
    return out


def _seed_rule(base: dict, seeds, arms: list[str], cap: int | None, width: float | None,
               fixed: bool, conns: list[str] = ("pair",)) -> SeedRule | None:
    """The preset's SeedRule with the command line's changes, or None.
    ``arms``: the sweep's schemes under their queueings and connection
    models (:func:`arm`); the rule's pairs hold under each model of
    ``conns`` (TaLB and a baseline on the same connections)."""
    spec = base.get("seed_rule")
    if cap is not None and cap < 1:
        raise PlanError(f"--seed-cap: at least 1, got {shown(cap)}")
    if width is not None and not 0 < width < 2:
        raise PlanError(f"--seed-width: a width of the ratio's interval in (0, 2), e.g. 0.2 "
                        f"for ±10%, got {shown(width)}")
    asked = cap is not None or width is not None
    why = ("the preset has no seed rule (its seeds are fixed)" if spec is None else
           "--fixed-seeds turns the seed rule off" if fixed else
           "--seeds lists the seeds" if not isinstance(seeds, int) else None)
    if why:
        if asked:
            raise PlanError(f"--seed-{'cap' if cap is not None else 'width'}: {why}")
        return None
    def under(name, c):
        return arm(*arm_split(name)[:2], c)
    pairs = tuple(dict.fromkeys((under(a, c), under(b, c)) for c in conns    # each once
                                for a, b in spec.get("pairs", SeedRule.pairs)
                                if under(a, c) in arms and under(b, c) in arms))
    if not pairs:
        if asked:
            raise PlanError("--seed-cap/--seed-width: the seed rule compares "
                            f"{', '.join(' vs '.join(p) for p in spec.get('pairs', SeedRule.pairs))} "
                            f"and --schemes leaves none of these pairs ({', '.join(arms)})")
        return None
    cap = max(SEED_CAP, seeds) if cap is None else cap
    if cap < seeds:
        raise PlanError(f"--seed-cap: at least --seeds ({seeds}), got {cap}")
    return SeedRule(first=seeds, cap=cap, width=SEED_WIDTH if width is None else width,
                    metric=spec.get("metric", SeedRule.metric), pairs=pairs,
                    loads=spec.get("loads", SeedRule.loads))


def _spec(base, topo, scheme, model, arch, load, seed, rate, agent, queueing="bands",
          connections="pair", placement="spread", rto_min=None, client="talb",
          regime=None, scheduler="bytescheduler", comm="ps", fusion=None) -> RunSpec:
    if client in REAL_JOBS:             # a real job's all-reduce: no servers
        arch = "allreduce"
    servers = base["servers"] if arch == "ps" else 1
    return RunSpec(topology=topo, scheme=scheme, model=model, arch=arch, workers=base["workers"],
                   servers=servers, load=float(load), seed=int(seed), target_link_bps=float(rate),
                   scaling_mode=base["scaling"], iterations=base["iterations"],
                   warmup=base["warmup"], agent=agent,
                   background_size_scale=base.get("background_size_scale"), queueing=queueing,
                   connections=connections, placement=placement, rto_min=rto_min,
                   client=client, regime=regime, agent_opts=tuple(sorted(AGENT_SETTINGS[agent].items())),
                   scheduler=scheduler, comm=comm, fusion=fusion)
