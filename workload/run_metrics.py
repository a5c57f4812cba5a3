"""Live metrics of an experiment (`talb run`) for Prometheus.

Design: the run serves its own ``/metrics`` (prometheus-client, 127.0.0.1,
port :data:`DEFAULT_PORT` or the next free one) for as long as it runs,
and registers the endpoint in ``/run/talb/run-endpoints/<pid>-<port>.json``
(:func:`endpoints_dir`)
so that `talb monitoring` finds it without configuration. Why a pull
endpoint: Prometheus already scrapes the agent that way every second, the
histograms (FCT, iteration time) stay exact per scrape and queryable with
``histogram_quantile``; a Pushgateway is one more daemon to install and
keeps the last push of a dead run forever; node_exporter's textfile
collector is not installed here and rewrites a file per update.

Every series carries the run's labels ``run_id``, ``scheme``, ``model``,
``arch`` and ``load`` (so two runs can be told apart on one graph);
``talb_run_info`` carries them once more with the testbed. Names follow the
agent's conventions: ``talb_`` prefix, base units (seconds, bytes),
counters end in ``_total``.

The runner calls :meth:`RunMetrics.tensor_done`, :meth:`iteration_done`,
:meth:`background_flow_done`, :meth:`tcp_counters` and
:meth:`uplink_spread` as results come in; nothing here touches the traffic.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram,
                               disable_created_metrics, start_http_server)

from common import paths
from common.excerpt import shown

DEFAULT_PORT = 9479  # the agent's default is 9477


def endpoints_dir() -> Path:
    """/run/talb/run-endpoints ('-': never a testbed prefix's directory), or
    $TALB_RUN_ENDPOINTS_DIR (tests: runs only their own monitoring sees)."""
    return Path(os.environ.get("TALB_RUN_ENDPOINTS_DIR", paths.RUN_DIR / "run-endpoints"))


def watcher_file() -> Path:
    """Touched every second by whoever turns endpoint files into scrape
    targets (`talb monitoring`): while it is fresh, a run's last values are
    worth a wait at its end."""
    return endpoints_dir() / ".watcher"

WATCHER_FRESH_S = 3.0
#: Prometheus' discovery hands new targets to its scrapers at most every 5 s:
#: a run shorter than that is scraped only if it waits this long at its end
LINGER_S = 10.0
RUN_LABELS = ("run_id", "scheme", "model", "arch", "load")
#: tensor FCT buckets: 100 us .. 60 s (a short tensor on an idle 100 Mbit/s
#: fabric takes ~1 ms, a scaled long one seconds)
FCT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
               0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITERATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TENSOR_CLASSES = ("short", "long", "medium")  # paper: short <= 100 KB, long >= 1 MB


class RunMetrics:
    """The exposition of one run. ``with RunMetrics(...) as m:`` serves it
    and removes the endpoint on every path."""

    def __init__(self, *, run_id: str, scheme: str, model: str, arch: str, load: float,
                 testbed: str = paths.DEFAULT_PREFIX, addr: str = "127.0.0.1",
                 port: int | None = DEFAULT_PORT):
        paths.check_prefix(testbed)
        if not run_id:
            raise ValueError(f"run_id: must be a non-empty string, got {shown(run_id)}")
        self.labels = {"run_id": str(run_id), "scheme": str(scheme), "model": str(model),
                       "arch": str(arch), "load": f"{float(load):g}"}
        self.testbed, self.addr, self.port = testbed, addr, port
        disable_created_metrics()
        self.registry = r = CollectorRegistry(auto_describe=True)
        # first: a scrape counted here collects every value set before it began
        self._scrapes = _ScrapeCounter()
        r.register(self._scrapes)
        L = list(RUN_LABELS)
        self._info = Gauge("talb_run_info", "The run (value 1): its scheme, model, "
                           "architecture, load and testbed", [*L, "testbed"], registry=r)
        self._iter = Histogram("talb_run_iteration_duration_seconds",
                               "Time of one training iteration (warm-up excluded), testbed clock",
                               L, buckets=ITERATION_BUCKETS, registry=r)
        self._speed = Gauge("talb_run_samples_per_second",
                            "Training speed of the last iteration, samples/s at the target scale",
                            L, registry=r)
        self._iters = Counter("talb_run_iterations", "Iterations finished (warm-up excluded)",
                              L, registry=r)
        self._fct = Histogram("talb_run_tensor_fct_seconds",
                              "Tensor flow completion time: handed to the socket -> last byte "
                              "at the receiving application", [*L, "class", "layer"],
                              buckets=FCT_BUCKETS, registry=r)
        self._tbytes = Counter("talb_run_tensor_bytes", "Bytes of finished tensors (testbed scale)",
                               [*L, "class"], registry=r)
        self._censored = Counter("talb_run_tensors_censored",
                                 "Tensors that never finished (censored, not counted as 0 s)",
                                 [*L, "class"], registry=r)
        self._bg = Histogram("talb_run_background_fct_seconds",
                             "Flow completion time of background flows", L,
                             buckets=FCT_BUCKETS, registry=r)
        self._bgbytes = Counter("talb_run_background_bytes", "Bytes of finished background flows",
                                L, registry=r)
        self._retrans = Counter("talb_run_tcp_retransmissions",
                              "TCP segments the host retransmitted since the run started "
                              "(kernel counter TcpRetransSegs, delta)", [*L, "host"], registry=r)
        self._reorder = Counter("talb_run_tcp_reordering",
                              "TCP reordering events the host saw since the run started "
                              "(kernel TcpExt *Reorder counters, delta)", [*L, "host"], registry=r)
        self._spread = Gauge("talb_run_uplink_spread_ratio",
                             "Spread of utilisation over a leaf's uplinks in the run so far: "
                             "(max - min) / mean of the uplinks' bytes (0 = even)",
                             [*L, "leaf"], registry=r)
        self._info.labels(**self.labels, testbed=testbed).set(1)
        for cls in TENSOR_CLASSES:  # "none censored" is a result: exported as 0, not absent
            self._censored.labels(**self.labels, **{"class": cls})
        self._tcp_seen: dict[tuple[str, str], int] = {}  # (host, counter) -> last value set
        self._server = None
        self.endpoint_file: Path | None = None

    # -- serving -----------------------------------------------------------------------
    def start(self) -> "RunMetrics":
        """Serve on ``addr:port``; the port in use -> the next free one (the
        endpoint file says which); ``port`` None or 0: any free port."""
        candidates = [self.port, 0] if self.port else [0]
        for port in candidates:
            try:
                self._server, _ = start_http_server(port, addr=self.addr, registry=self.registry)
                break
            except OSError:
                if port == 0:
                    raise
        self.port = self._server.server_address[1]
        paths.private_dir(endpoints_dir())
        self.endpoint_file = endpoints_dir() / f"{os.getpid()}-{self.port}.json"
        paths.write_private(self.endpoint_file, json.dumps({
            "pid": os.getpid(), "target": f"{self.addr}:{self.port}",
            "job": "talb-run", "labels": {"testbed": self.testbed}}))
        return self

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def close(self, linger_s: float = LINGER_S) -> None:
        """Stop serving. While monitoring watches (:func:`watched`), first
        wait (at most ``linger_s``) for one more scrape, so that the last
        values set -- the counters read after the run -- are recorded."""
        if self._server is not None and linger_s > 0 and watched():
            self._scrapes.wait_next(linger_s)
        if self.endpoint_file is not None:
            self.endpoint_file.unlink(missing_ok=True)
            self.endpoint_file = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- observations ------------------------------------------------------------------
    def tensor_done(self, *, fct_s: float | None, size_class: str, layer: int, nbytes: int) -> None:
        """One tensor: ``fct_s`` None = censored (never finished)."""
        if size_class not in TENSOR_CLASSES:
            raise ValueError(f"size_class: must be one of {', '.join(TENSOR_CLASSES)}, "
                             f"got {shown(size_class)}")
        if fct_s is None:
            self._censored.labels(**self.labels, **{"class": size_class}).inc()
            return
        _check_time("fct_s", fct_s)
        self._fct.labels(**self.labels, **{"class": size_class, "layer": str(int(layer))}) \
            .observe(fct_s)
        self._tbytes.labels(**self.labels, **{"class": size_class}).inc(nbytes)

    def iteration_done(self, *, duration_s: float, samples_per_s: float) -> None:
        _check_time("duration_s", duration_s)
        self._iter.labels(**self.labels).observe(duration_s)
        self._iters.labels(**self.labels).inc()
        self._speed.labels(**self.labels).set(samples_per_s)

    def background_flow_done(self, *, fct_s: float, nbytes: int) -> None:
        _check_time("fct_s", fct_s)
        self._bg.labels(**self.labels).observe(fct_s)
        self._bgbytes.labels(**self.labels).inc(nbytes)

    def tcp_counters(self, host: str, *, retransmissions: int, reordering: int = 0) -> None:
        """The host's counters since the run started (deltas of the kernel's,
        which only grow): the exported counters advance to these values."""
        for name, metric, value in (("retrans", self._retrans, retransmissions),
                                    ("reorder", self._reorder, reordering)):
            last = self._tcp_seen.get((host, name), 0)
            if value < last:
                raise ValueError(f"{name}: counters since the run started only grow; "
                                 f"host {host} went from {last} to {value}")
            metric.labels(**self.labels, host=host).inc(value - last)
            self._tcp_seen[(host, name)] = value

    def uplink_spread(self, leaf: str, uplink_bytes: list[int] | dict) -> float:
        """Set and return the spread of a leaf's uplink bytes (see the help)."""
        values = list(uplink_bytes.values()) if isinstance(uplink_bytes, dict) else list(uplink_bytes)
        spread = spread_ratio(values)
        self._spread.labels(**self.labels, leaf=leaf).set(spread)
        return spread


class _ScrapeCounter:
    """A collector with no series that counts the scrapes."""

    def __init__(self):
        self.count = 0
        self._cond = threading.Condition()

    def describe(self):
        return []

    def collect(self):
        with self._cond:
            self.count += 1
            self._cond.notify_all()
        return []

    def wait_next(self, timeout_s: float) -> bool:
        with self._cond:
            seen = self.count
            return self._cond.wait_for(lambda: self.count > seen, timeout=timeout_s)


def spread_ratio(values: list[float]) -> float:
    """(max - min) / mean; 0 for no traffic or fewer than two links."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return 0.0 if mean <= 0 else (max(values) - min(values)) / mean


def _check_time(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name}: must be a finite number of seconds >= 0, got {shown(value)}")


def watched() -> bool:
    try:
        return time.time() - watcher_file().stat().st_mtime < WATCHER_FRESH_S
    except FileNotFoundError:
        return False


def read_endpoints() -> list[dict]:
    """Endpoint files of runs whose process is alive (a dead run's file is removed)."""
    out = []
    for path in sorted(endpoints_dir().glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not Path(f"/proc/{data.get('pid')}").exists():
            path.unlink(missing_ok=True)
            continue
        out.append(data)
    return out


# --- the runner's hook (workload/experiment.py) -------------------------------------------
def run_id_of(cfg) -> str:
    """A run's id: its results file is runs/<id>.json unless --out names one
    (workload/experiment.py)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{stamp}-{cfg.model}-{cfg.arch}-{cfg.scheme or 'fabric'}-load{cfg.load:g}-seed{cfg.seed}"


class LiveRun:
    """Feeds the runner's node records (workload/patterns/common.py) into a
    :class:`RunMetrics` as they arrive: a tensor's FCT when its ``rx`` meets
    its ``tx``, an iteration's time (the slowest worker's, as
    measure.iteration_records) when every worker has started the next one.
    Warm-up iterations are left out, as in the results file."""

    def __init__(self, metrics: RunMetrics, *, target_bytes_of, warmup: int, workers: int,
                 samples_per_iteration: float, on_event=None):
        from workload.measure import size_class

        self.metrics, self._target, self._class = metrics, target_bytes_of, size_class
        self.warmup, self.workers, self._samples = warmup, workers, samples_per_iteration
        self._next = on_event
        self._tx: dict = {}                      # key -> tx record awaiting its rx
        self._rx: dict = {}                      # key -> rx record awaiting its tx
        self._starts: dict = defaultdict(dict)   # iteration -> {worker: t_ns}
        self._done_its: set = set()
        self._last: dict = {}                    # worker -> last iteration it started

    @classmethod
    def start(cls, cfg, profile, scaling, target_bytes_of, on_event=None) -> "LiveRun":
        """Serve the run's /metrics (labels from ``cfg``) and return the feed."""
        m = RunMetrics(run_id=run_id_of(cfg), scheme=cfg.scheme or "fabric", model=cfg.model,
                       arch=cfg.arch, load=cfg.load, testbed=cfg.prefix).start()
        return cls(m, target_bytes_of=target_bytes_of, warmup=cfg.warmup, workers=cfg.workers,
                   samples_per_iteration=cfg.workers * profile.batch_size * scaling.time_scale,
                   on_event=on_event)

    def on_event(self, ev: dict) -> None:
        kind = ev.get("ev")
        if kind in ("tx", "rx"):
            # Each node's output is read by a thread of its own: a receiver's
            # rx may come before the sender's tx. Whichever comes second pairs.
            mine, other = (self._tx, self._rx) if kind == "tx" else (self._rx, self._tx)
            peer = other.pop(ev["k"], None)
            if peer is None:
                mine[ev["k"]] = ev
            else:
                self._tensor(*((ev, peer) if kind == "tx" else (peer, ev)))
        elif kind in ("iter", "end"):
            # a worker's "end" closes its last iteration as the next "iter" would
            it = ev["it"] if kind == "iter" else self._last.get(ev["node"], -1) + 1
            self._last[ev["node"]] = it
            self._starts[it][ev["node"]] = ev["t_ns"]
            self._iterations_done()
        if self._next is not None:
            self._next(ev)

    def _tensor(self, tx: dict, rx: dict) -> None:
        if tx["it"] >= self.warmup:
            self.metrics.tensor_done(fct_s=max(0, rx["t_ns"] - tx["t_ns"]) / 1e9,
                                     size_class=self._class(self._target(tx)),
                                     layer=tx["layer"], nbytes=tx["bytes"])

    def _iterations_done(self) -> None:
        for it in sorted(self._starts):
            nxt = self._starts.get(it + 1, {})
            if it in self._done_its or len(self._starts[it]) < self.workers or len(nxt) < self.workers:
                continue
            self._done_its.add(it)
            if it >= self.warmup:
                took = max(nxt[w] - self._starts[it][w] for w in self._starts[it]) / 1e9
                if took > 0:
                    self.metrics.iteration_done(duration_s=took,
                                                samples_per_s=self._samples / took)

    def finish(self, tcp_before: dict, tcp_after: dict, uplinks: dict | None) -> None:
        """The counters read after the run: TCP per host, uplink bytes per leaf
        (measure.uplink_spread's result)."""
        for host, after in tcp_after.items():
            before = tcp_before.get(host, {})
            delta = {k: v - before.get(k, 0) for k, v in after.items()}
            self.metrics.tcp_counters(host, retransmissions=delta.get("retrans_segs", 0),
                                      reordering=sum(delta.get(k, 0) for k in
                                                     ("sack_reorder", "ts_reorder", "reno_reorder")))
        for leaf, rec in ((uplinks or {}).get("leaves") or {}).items():
            self.metrics.uplink_spread(leaf, rec["tx_bytes"])

    def close(self) -> None:
        self.metrics.close()
