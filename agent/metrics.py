"""Prometheus exporter of the agent (``/metrics``, prometheus-client).

Port, group and data-path series come from the agent's latest readings,
built at scrape time by a custom collector (no per-window cost). Counters
(``*_total``) are the kernel's own cumulative counters, so they continue
across agent restarts. The loop's own timing is in histograms and
counters updated every window.

Labels: ``switch``, ``port``, ``group`` (the group's ports joined by "+").
"""
from __future__ import annotations

import threading

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics,
                               start_http_server)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from pyroute2.netlink.exceptions import NetlinkError

from agent.loop import Agent
from datapath.qdisc_stats import QdiscReader
from datapath.schemes import registry as scheme_registry
from netns_topology.qdisc import FIRST_BAND, ROOT

# Loop timing buckets: tenths of a ms up to a second (a window is a few ms).
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05,
            0.1, 0.25, 1.0)

#: counters of multipath decisions -> (scheme, case), as each scheme declares
#: them (SCHEME.decisions: a new scheme's are exported with no edit here). TaLB's decisions
#: split into table hits and new tensors by case; CNT_TALB_THRESHOLD is
#: the part of CASE 1 sent back to the lowest-PCM port by S. The count of
#: TaLB's fallback scheme (ECMP by default) includes TaLB's untagged packets
#: and full-table tensors.
DECISIONS = {
    **{counter: (s.name, case) for s in scheme_registry.SCHEMES for counter, case in s.decisions},
    "decision_single": ("none", "single_port"),
}


def decisions(counters: dict) -> list[tuple[str, str, int]]:
    """(scheme, case, packets) from the data path's counters; the cases of a
    scheme do not overlap."""
    out = [(*DECISIONS[name], counters[name]) for name in DECISIONS if name in counters]
    if "talb_case1" in counters:
        rank = max(0, counters["talb_case1"] - counters.get("talb_threshold", 0))
        out.append(("talb", "case1", rank))
    return out


def drops(counters: dict) -> list[tuple[str, int]]:
    """Packets the program dropped, by reason (CNT_DROP_*). ``released``
    (first-hop originals freed after their clone was sent) is not a drop,
    although clsact counts it as one."""
    return [(name[len("drop_"):], v) for name, v in counters.items() if name.startswith("drop_")]


class AgentMetrics:
    """Registry + loop observer + HTTP server."""

    def __init__(self):
        # *_created series would double every counter for no use here.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.loop_duration = Histogram("talb_agent_loop_duration_seconds",
                                       "Time one window's work took", buckets=_BUCKETS, registry=r)
        self.loop_lag = Histogram("talb_agent_loop_lag_seconds",
                                  "How late a window started against its schedule",
                                  buckets=_BUCKETS, registry=r)
        self.windows = Counter("talb_agent_windows", "Windows run", registry=r)
        self.slow = Counter("talb_agent_slow_windows",
                            "Windows whose work took longer than the window", registry=r)
        self.missed = Counter("talb_agent_missed_windows",
                              "Scheduled windows skipped because the loop was a whole window or "
                              "more behind (the next window covers their time)", registry=r)
        self.errors = Counter("talb_agent_window_errors", "Windows that failed with an error",
                              registry=r)
        self.switch_errors = Counter("talb_agent_switch_errors",
                                     "Failures of one switch's work in a window (reading, "
                                     "publishing, reprogramming); the other switches go on",
                                     ["switch"], registry=r)
        self._info = Gauge("talb_agent_info", "The agent process (value 1)",
                           ["mode", "target", "pid"], registry=r)
        #: plain copies of the counters, for the snapshot file
        self.counts = {"windows": 0, "slow": 0, "missed": 0, "errors": 0, "switch_errors": 0}
        self._server = None

    def describe_agent(self, mode: str, target: str, pid: int) -> None:
        self._info.labels(mode, target, str(pid)).set(1)

    # -- LoopObserver ----------------------------------------------------------------
    def window_done(self, duration_s: float, lag_s: float, slow: bool, missed: int) -> None:
        self.loop_duration.observe(duration_s)
        self.loop_lag.observe(max(0.0, lag_s))
        self.windows.inc()
        self.counts["windows"] += 1
        if slow:
            self.slow.inc()
            self.counts["slow"] += 1
        if missed:
            self.missed.inc(missed)
            self.counts["missed"] += missed

    def window_failed(self, exc: BaseException) -> None:
        self.errors.inc()
        self.counts["errors"] += 1

    def switch_failed(self, switch: str, exc: BaseException) -> None:
        self.switch_errors.labels(switch).inc()
        self.counts["switch_errors"] += 1

    # -- exporting -------------------------------------------------------------------
    def watch(self, agent: Agent) -> None:
        self.registry.register(_ReadingsCollector(agent))
        self.registry.register(_TensorEventsCollector(agent))
        self._bands = _BandCollector(agent)
        self.registry.register(self._bands)

    def serve(self, addr: str, port: int) -> None:
        self._server, _thread = start_http_server(port, addr=addr, registry=self.registry)

    def close(self) -> None:
        if getattr(self, "_bands", None) is not None:
            self._bands.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _ReadingsCollector:
    def __init__(self, agent: Agent):
        self.agent = agent

    def describe(self):
        return []  # series depend on the fabric: nothing to declare up front

    def collect(self):
        sp = ["switch", "port"]
        spg = ["switch", "port", "group"]
        util = GaugeMetricFamily("talb_port_utilization_ratio",
                                 "Eq. 1: bytes sent in the last window over link capacity", labels=sp)
        delay = GaugeMetricFamily("talb_port_queue_delay_seconds",
                                  "Mean queueing + service delay: M/D/1 model (Eq. 3/4) or "
                                  "measured qdisc backlog over capacity",
                                  labels=[*sp, "source"])
        pcm = GaugeMetricFamily("talb_port_pcm", "Port congestion metric P_i (Eq. 5) in its group",
                                labels=spg)
        weight = GaugeMetricFamily("talb_port_wrr_weight",
                                   "CASE 2 weight 1 - P_i, normalised over the group", labels=spg)
        tx_bytes = CounterMetricFamily("talb_port_tx_bytes",
                                       "Bytes the program sent out of the port", labels=sp)
        tx_packets = CounterMetricFamily("talb_port_tx_packets",
                                         "Packets the program sent out of the port", labels=sp)
        backlog = GaugeMetricFamily("talb_port_qdisc_backlog_bytes",
                                    "Bytes queued in the port's egress qdisc (HTB root)", labels=sp)
        qdrops = CounterMetricFamily("talb_port_qdisc_drops",
                                     "Packets the port's egress qdisc dropped (HTB root)", labels=sp)
        up = GaugeMetricFamily("talb_port_up", "1 if the port is up with carrier", labels=sp)
        tensors = GaugeMetricFamily("talb_tensor_table_entries", "Live tensor table entries",
                                    labels=["switch"])
        dec = CounterMetricFamily("talb_decisions",
                                  "Multipath forwarding decisions by scheme and case",
                                  labels=["switch", "scheme", "case"])
        drop = CounterMetricFamily("talb_drops", "Packets the switch program dropped, by reason",
                                   labels=["switch", "reason"])
        events = CounterMetricFamily("talb_datapath_packets",
                                     "Every data-path counter (CNT_* in constants.h), by name",
                                     labels=["switch", "counter"])
        scheme = GaugeMetricFamily("talb_scheme_info", "Load-balancing scheme of the switch",
                                   labels=["switch", "scheme"])
        for sw, r in sorted(self.agent.latest.items()):
            for p in r.ports:
                lab = [sw, p.name]
                if p.utilization is not None:
                    util.add_metric(lab, p.utilization)
                    delay.add_metric([*lab, "model"], p.delay_model)
                if p.delay_measured is not None:
                    delay.add_metric([*lab, "measured"], p.delay_measured)
                tx_bytes.add_metric(lab, p.tx_bytes)
                tx_packets.add_metric(lab, p.tx_packets)
                if p.backlog_bytes is not None:
                    backlog.add_metric(lab, p.backlog_bytes)
                    qdrops.add_metric(lab, p.qdisc_drops)
                up.add_metric(lab, 1.0 if p.up else 0.0)
            for g in r.groups:
                for port, pv, wv in zip(g.ports, g.pcm, g.weights):
                    pcm.add_metric([sw, port, g.label], pv)
                    weight.add_metric([sw, port, g.label], wv)
            if r.tensors is not None:
                tensors.add_metric([sw], r.tensors)
            for sch, case, v in decisions(r.counters):
                dec.add_metric([sw, sch, case], v)
            for reason, v in drops(r.counters):
                drop.add_metric([sw, reason], v)
            for name, v in r.counters.items():
                events.add_metric([sw, name], v)
            if r.scheme is not None:
                scheme.add_metric([sw, r.scheme], 1.0)
        yield from (util, delay, pcm, weight, tx_bytes, tx_packets, backlog, qdrops, up,
                    tensors, dec, drop, events, scheme)


#: data-path events of TaLB's tensor table (CNT_TALB_*) that are not one of
#: the disjoint decision cases above: a packet may count in a case *and*
#: here (an aged entry is then decided anew), or leave TaLB for the
#: fallback scheme (fallback, table_full, midstream).
TENSOR_EVENTS = {
    "talb_fallback": "fallback", "talb_table_full": "table_full", "talb_late": "late",
    "talb_midstream": "midstream", "talb_aged": "aged", "talb_reroute": "reroute",
    "talb_inserted": "inserted", "talb_completed": "completed",
}


def tensor_events(counters: dict) -> list[tuple[str, int]]:
    """(event, packets) of the tensor table's CNT_TALB_* events present in ``counters``."""
    return [(event, counters[name]) for name, event in TENSOR_EVENTS.items() if name in counters]


class _TensorEventsCollector:
    """The tensor table's events (CNT_TALB_*) from the loop's latest readings."""

    def __init__(self, agent: Agent):
        self.agent = agent

    def describe(self):
        return []

    def collect(self):
        events = CounterMetricFamily("talb_tensor_events",
                                     "Tensor-table events of TaLB's data path (CNT_TALB_*), "
                                     "by event", labels=["switch", "event"])
        for sw, r in sorted(self.agent.latest.items()):
            for event, v in tensor_events(r.counters):
                events.add_metric([sw, event], v)
        yield events


class _BandCollector:
    """Bytes each priority band of a port's egress HTB sent (class 1:(0x10+b),
    netns_topology/qdisc.py), read at scrape time from the kernel's class
    counters over netlink sockets of its own (the loop's are not shared
    between threads). About 9 ms a scrape for the 4-switch talb.yaml fabric."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self._lock = threading.Lock()  # the HTTP server may serve two scrapes at once
        self._readers: dict = {}

    def describe(self):
        return []

    def _reader(self, switch: str):
        if switch not in self._readers:
            self._readers[switch] = QdiscReader(self.agent.monitors[switch].netns)
        return self._readers[switch]

    def collect(self):
        bands = CounterMetricFamily("talb_port_band_tx_bytes",
                                    "Bytes the port's egress priority band sent (HTB class "
                                    "1:(0x10+band)); band 0 carries untagged traffic, band b>0 "
                                    "tagged layers (b-1)*layers_per_band .. b*layers_per_band-1 "
                                    "(the last band: every later layer too)",
                                    labels=["switch", "port", "band"])
        with self._lock:
            for sw, r in sorted(self.agent.latest.items()):
                if sw not in self.agent.monitors:
                    continue
                for p in r.ports:
                    try:
                        classes = self._reader(sw).class_bytes(p.name)
                    except (LookupError, OSError, NetlinkError):
                        # port or namespace gone (testbed going down): no series, and a
                        # fresh socket next time; the rest of the page is still served
                        reader = self._readers.pop(sw, None)
                        if reader is not None:
                            reader.close()
                        break
                    for handle, nbytes in sorted(classes.items()):
                        minor = handle & 0xFFFF
                        if handle >> 16 == ROOT >> 16 and minor >= FIRST_BAND:
                            bands.add_metric([sw, p.name, str(minor - FIRST_BAND)], nbytes)
        yield bands

    def close(self) -> None:
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()
