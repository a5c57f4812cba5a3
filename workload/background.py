"""Background load: flows unrelated to training, as in the TaLB paper (sec. V-A
varies the load 0.2-0.8), over real TCP between host namespaces.

* :class:`FlowSizeCDF`: the web-search and data-mining flow-size CDFs
  (``workload/cdfs/``, the published distributions, ``docs/references.md``), sampled with
  linear interpolation between the published points.
* :func:`plan_flows`: Poisson arrivals at the rate that offers ``load`` x
  ``capacity_bps`` of background bytes, each flow from a random sender to a
  random host on *another* leaf, its size drawn from the CDF.
* :class:`BackgroundLoad`: runs a plan. One sink per destination host reads
  and discards (``python -m workload.background sink``); one source per
  sending host opens one TCP connection per flow at its planned time
  (``... source``). Every flow's size, start, end and FCT is recorded; every
  process is ended by its pid on every path.

Load (docs/workload.md, "Background load"): offered background bytes/s over
``capacity_bps``, which the caller states; :func:`uplink_capacity_bps` gives
the usual choice, the sum of the leaves' uplink rates, which every
background flow crosses exactly once (its destination is on another leaf).
Training traffic is not counted in the load.
"""
from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import math
import os
import random
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from common.excerpt import shown
from workload.netexec import ns_popen, stop

CDF_DIR = Path(__file__).resolve().parent / "cdfs"
CDF_FILES = {"websearch": "websearch_cdf.txt", "datamining": "datamining_cdf.txt"}
# The means workload/cdfs/README.md documents (linear interpolation).
DOCUMENTED_MEAN_BYTES = {"websearch": 1.7e6, "datamining": 12.7e6}
DEFAULT_PORT = 7400
HEADER = struct.Struct("!QQ")        # flow id, payload bytes: the sink reports per flow
CHUNK = 64 * 1024
SHORT_MAX_BYTES = 100_000            # classes as TaLB sec. V-A
LONG_MIN_BYTES = 1_000_000
APP = [sys.executable, "-m", "workload.background"]


class BackgroundError(RuntimeError):
    pass


# --- flow sizes -------------------------------------------------------------------------
class FlowSizeCDF:
    """A flow-size distribution given as (bytes, cumulative fraction) points,
    sampled by inverting the piecewise-linear CDF. Mass below the first
    point's fraction sits on its size; two points with the same size hold a
    point mass (how :meth:`capped` keeps min(X, cap))."""

    def __init__(self, points: Sequence[tuple[float, float]], name: str = ""):
        pts = [(float(x), float(p)) for x, p in points]
        if len(pts) < 2:
            raise ValueError(f"points: a CDF needs at least 2 points, got {len(pts)} ({name})")
        for (x0, p0), (x1, p1) in zip(pts, pts[1:]):
            if x1 < x0 or p1 < p0:
                raise ValueError(f"points: sizes and fractions must not decrease, got "
                                 f"({x0:g}, {p0:g}) then ({x1:g}, {p1:g}) ({name})")
        if pts[0][0] < 0 or pts[0][1] < 0 or abs(pts[-1][1] - 1.0) > 1e-9:
            raise ValueError(f"points: sizes >= 0, fractions from >= 0 up to exactly 1 ({name})")
        self.name = name
        self.points = pts
        self._fractions = [p for _, p in pts]

    @classmethod
    def from_file(cls, path, name: str | None = None) -> "FlowSizeCDF":
        path = Path(path)
        points = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                x, p = line.split()
                points.append((float(x), float(p)))
            except ValueError:
                raise ValueError(f"{path}:{n}: expected 'bytes fraction', got {shown(line)}") from None
        return cls(points, name or path.stem)

    @classmethod
    def named(cls, name: str) -> "FlowSizeCDF":
        """"websearch" or "datamining"."""
        try:
            return cls.from_file(CDF_DIR / CDF_FILES[name], name)
        except KeyError:
            raise ValueError(f"cdf: unknown flow-size CDF {name!r}; known: {', '.join(CDF_FILES)}") from None

    def sample(self, rng: random.Random) -> int:
        """One flow size in bytes (at least 1)."""
        u = rng.random()
        i = bisect.bisect_right(self._fractions, u)
        if i == 0:
            x = self.points[0][0]
        elif i == len(self.points):
            x = self.points[-1][0]
        else:
            (x0, p0), (x1, p1) = self.points[i - 1], self.points[i]
            x = x0 + (x1 - x0) * (u - p0) / (p1 - p0)
        return max(1, round(x))

    def mean(self) -> float:
        m = self.points[0][0] * self.points[0][1]
        for (x0, p0), (x1, p1) in zip(self.points, self.points[1:]):
            m += (p1 - p0) * (x0 + x1) / 2
        return m

    def scaled(self, factor: float) -> "FlowSizeCDF":
        """Every size multiplied by ``factor`` (the run's byte scale)."""
        if not factor > 0:
            raise ValueError(f"size_scale: must be positive, got {shown(factor)}")
        return FlowSizeCDF([(x * factor, p) for x, p in self.points], self.name)

    def capped(self, cap: float) -> "FlowSizeCDF":
        """The distribution of min(X, cap): the mass above ``cap`` sits on it."""
        if not cap > 0:
            raise ValueError(f"max_flow_bytes: must be positive, got {shown(cap)}")
        pts = [(x, p) for x, p in self.points if x < cap]
        if not pts:
            return FlowSizeCDF([(cap, 0.0), (cap, 1.0)], self.name)
        i = len(pts)
        if i < len(self.points):
            (x0, p0), (x1, p1) = self.points[i - 1], self.points[i]
            pts.append((cap, p0 + (p1 - p0) * (cap - x0) / (x1 - x0)))
            pts.append((cap, 1.0))
        return FlowSizeCDF(pts, self.name)


# --- hosts, capacity and the plan --------------------------------------------------------
@dataclass(frozen=True)
class BgHost:
    name: str
    netns: str
    ip: str
    leaf: str


def fabric_hosts(topo, prefix: str) -> list[BgHost]:
    from common.paths import netns_name

    return [BgHost(h.name, netns_name(prefix, h.name), h.ip, h.leaf) for h in topo.hosts]


def uplink_capacity_bps(topo) -> float:
    """Sum of the rates of every up link from a leaf (a switch with hosts)
    into the fabric: what inter-leaf background flows share."""
    leaves = {h.leaf for h in topo.hosts}
    return float(sum(link.rate_bps for link in topo.links
                     if link.kind == "fabric" and link.up and (link.a in leaves or link.b in leaves)))


@dataclass(frozen=True)
class PlannedFlow:
    flow_id: int
    src: str
    dst: str
    dst_ip: str
    size_bytes: int
    start_s: float          # offset from the run's start


def check_options(cdf: str, duration_s: float | None, size_scale: float | None) -> None:
    """The background options every run kind takes (`talb run`'s
    --background-cdf, --background-duration, --background-size-scale):
    ValueError naming the flag of the first out of range."""
    def need(cond: bool, flag: str, value, what: str) -> None:
        if not cond:
            raise ValueError(f"{flag}: {what}, got {shown(value)}")

    need(cdf in CDF_FILES, "--background-cdf", cdf, f"one of {', '.join(CDF_FILES)}")
    need(duration_s is None or duration_s > 0, "--background-duration", duration_s,
         "a positive number of seconds")
    need(size_scale is None or 0 < size_scale <= 1, "--background-size-scale", size_scale,
         "a factor in (0, 1]")


def _check_load(load) -> float:
    if isinstance(load, bool) or not isinstance(load, (int, float)) or not 0.0 <= load <= 1.0:
        raise ValueError(f"load: must be within [0, 1] (fraction of capacity_bps), got {shown(load)}")
    return float(load)


def plan_flows(hosts: Sequence[BgHost], *, load: float, capacity_bps: float, cdf: FlowSizeCDF,
               duration_s: float, seed: int, senders: Sequence[str] | None = None) -> list[PlannedFlow]:
    """Poisson arrivals over [0, duration_s) at rate load * capacity_bps /
    (8 * cdf.mean()) flows/s; each from a sender drawn uniformly (so each
    sender is a Poisson source of its own) to a host on another leaf."""
    load = _check_load(load)
    if not capacity_bps > 0:
        raise ValueError(f"capacity_bps: must be positive, got {shown(capacity_bps)}")
    if not duration_s > 0:
        raise ValueError(f"duration_s: must be positive, got {shown(duration_s)}")
    by_name = {h.name: h for h in hosts}
    names = list(senders) if senders is not None else [h.name for h in hosts]
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise ValueError(f"senders: must be hosts of the fabric, got {unknown or names}")
    src_hosts = [by_name[n] for n in names]
    remote = {h.leaf: [d for d in hosts if d.leaf != h.leaf] for h in src_hosts}
    lonely = [h.name for h in src_hosts if not remote[h.leaf]]
    if lonely:
        raise ValueError(f"senders: {lonely} have no host on another leaf to send to")
    if load == 0:
        return []
    rate = arrival_rate(load, capacity_bps, cdf)
    rng = random.Random(seed)
    flows, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            return flows
        src = rng.choice(src_hosts)
        dst = rng.choice(remote[src.leaf])
        flows.append(PlannedFlow(len(flows), src.name, dst.name, dst.ip, cdf.sample(rng), t))


def arrival_rate(load: float, capacity_bps: float, cdf: FlowSizeCDF) -> float:
    """Flows per second offering load * capacity_bps on average."""
    return load * capacity_bps / (8.0 * cdf.mean())


def plan_digest(plan: Sequence[PlannedFlow]) -> str:
    """SHA-256 of a plan's flows (id, source, destination, size, start offset
    in ns): runs with equal digests were offered the same background."""
    blob = json.dumps([[f.flow_id, f.src, f.dst, f.size_bytes, round(f.start_s * 1e9)]
                       for f in plan], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# --- records ---------------------------------------------------------------------------
@dataclass
class FlowRecord:
    flow_id: int
    src: str
    dst: str
    size_bytes: int
    planned_start_ns: int
    start_ns: int | None        # when the source began (connect), CLOCK_MONOTONIC
    end_ns: int | None          # when the sink had the last byte
    received_bytes: int
    status: str                 # done | censored (started, never finished) | failed | not_started
    error: str = ""

    @property
    def fct_s(self) -> float | None:
        if self.status != "done":
            return None
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def size_class(self) -> str:
        if self.size_bytes <= SHORT_MAX_BYTES:
            return "short"
        return "long" if self.size_bytes >= LONG_MIN_BYTES else "medium"

    def to_dict(self) -> dict:
        return {**asdict(self), "fct_s": self.fct_s, "size_class": self.size_class}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


@dataclass
class BackgroundResult:
    flows: list[FlowRecord]
    params: dict

    def summary(self) -> dict:
        out = {"flows": len(self.flows)}
        for status in ("done", "censored", "failed", "not_started"):
            out[status] = sum(1 for f in self.flows if f.status == status)
        for cls in ("all", "short", "medium", "long"):
            fcts = [f.fct_s for f in self.flows if f.status == "done" and cls in ("all", f.size_class)]
            if fcts:
                out[f"{cls}_fct_mean_s"] = statistics.fmean(fcts)
                out[f"{cls}_fct_p99_s"] = _pct(fcts, 0.99)
        return out

    def to_dict(self) -> dict:
        return {"params": self.params, "summary": self.summary(),
                "flows": [f.to_dict() for f in self.flows]}


# --- the generator ---------------------------------------------------------------------
def _json_lines(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass            # a line cut short by a killed process
    return out


class BackgroundLoad:
    """Poisson background flows over TCP between host namespaces.

        with BackgroundLoad(fabric_hosts(topo, prefix), load=0.5,
                            capacity_bps=uplink_capacity_bps(topo), seed=1,
                            duration_s=30) as bg:
            ...                                 # the training run
        result = bg.result                      # every flow, FCTs

    ``size_scale``: multiply sizes (the run's byte scale, so that background
    and tensors keep the target's proportions); ``max_flow_bytes``: cap sizes
    (data mining reaches 1 GB). Both are applied before the arrival rate is
    computed, so the offered load stays ``load``.
    """

    def __init__(self, hosts: Sequence[BgHost], *, load: float, capacity_bps: float, seed: int,
                 duration_s: float, cdf: str | FlowSizeCDF = "websearch",
                 senders: Sequence[str] | None = None, port: int = DEFAULT_PORT,
                 size_scale: float = 1.0, max_flow_bytes: int | None = None,
                 start_delay_s: float = 0.5, drain_s: float = 30.0, workdir: str | None = None):
        base = FlowSizeCDF.named(cdf) if isinstance(cdf, str) else cdf
        dist = base.scaled(size_scale) if size_scale != 1.0 else base
        if max_flow_bytes is not None:
            dist = dist.capped(max_flow_bytes)
        if not 1 <= port <= 65535:
            raise ValueError(f"port: must be 1..65535, got {shown(port)}")
        self.hosts = {h.name: h for h in hosts}
        self.cdf = dist
        self.port = port
        self.duration_s = duration_s
        self.start_delay_s = start_delay_s
        self.drain_s = drain_s
        self.plan = plan_flows(hosts, load=load, capacity_bps=capacity_bps, cdf=dist,
                               duration_s=duration_s, seed=seed, senders=senders)
        self.params = {
            "cdf": base.name, "cdf_mean_bytes": base.mean(), "size_scale": size_scale,
            "max_flow_bytes": max_flow_bytes, "effective_mean_bytes": dist.mean(),
            "load": load, "capacity_bps": capacity_bps,
            "offered_bps": load * capacity_bps,
            "arrival_rate_per_s": arrival_rate(load, capacity_bps, dist) if load else 0.0,
            "duration_s": duration_s, "seed": seed,
            "senders": sorted({f.src for f in self.plan}) if senders is None else list(senders),
            "port": port, "planned_flows": len(self.plan),
            "planned_bytes": sum(f.size_bytes for f in self.plan),
            "plan_sha256": plan_digest(self.plan),
        }
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="talb-bg-"))
        self._sinks: dict[str, subprocess.Popen] = {}
        self._sources: dict[str, subprocess.Popen] = {}
        self.t0_ns: int | None = None
        self.result: BackgroundResult | None = None

    # -- processes ---------------------------------------------------------------------
    def _spawn(self, host: BgHost, role: str, argv: list[str], **kw) -> subprocess.Popen:
        out = open(self.workdir / f"{role}-{host.name}.jsonl", "w")
        err = open(self.workdir / f"{role}-{host.name}.err", "w")
        try:
            return ns_popen(host.netns, [*APP, role, *argv], stdout=out, stderr=err,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)
        finally:
            out.close()
            err.close()

    def _wait_ready(self, role: str, name: str, proc: subprocess.Popen, deadline: float) -> None:
        path = self.workdir / f"{role}-{name}.jsonl"
        while not any("ready" in r for r in _json_lines(path)):
            if proc.poll() is not None:
                err = (self.workdir / f"{role}-{name}.err").read_text().strip()
                raise BackgroundError(f"background {role} in {name} exited {proc.returncode}: "
                                      f"{err[-400:]}")
            if time.monotonic() > deadline:
                raise BackgroundError(f"background {role} in {name} not ready after 15 s")
            time.sleep(0.05)

    def prepare(self) -> "BackgroundLoad":
        """Start every process; the sources load their schedules (offsets
        from t0) and wait for :meth:`go` to give them t0."""
        if self._sinks or self._sources:
            raise BackgroundError("background load already started")
        try:
            for name in sorted({f.dst for f in self.plan}):
                self._sinks[name] = self._spawn(self.hosts[name], "sink", ["--port", str(self.port)])
            deadline = time.monotonic() + 15
            for name, proc in self._sinks.items():
                self._wait_ready("sink", name, proc, deadline)
            for name in sorted({f.src for f in self.plan}):
                schedule = [{"flow": f.flow_id, "dst_ip": f.dst_ip, "port": self.port,
                             "size": f.size_bytes, "offset_ns": int(f.start_s * 1e9)}
                            for f in self.plan if f.src == name]
                path = self.workdir / f"schedule-{name}.json"
                path.write_text(json.dumps(schedule))
                self._sources[name] = self._spawn(self.hosts[name], "source",
                                                  ["--schedule", str(path)], stdin=subprocess.PIPE)
        except BaseException:
            self._end_all()
            raise
        return self

    def wait_ready(self, timeout_s: float = 15.0) -> None:
        """Until every source has loaded its schedule (after :meth:`prepare`)."""
        deadline = time.monotonic() + timeout_s
        for name, proc in self._sources.items():
            self._wait_ready("source", name, proc, deadline)

    def go(self, t0_ns: int) -> "BackgroundLoad":
        """Once every source is ready: flow i starts at ``t0_ns`` + its planned
        offset (CLOCK_MONOTONIC). ``t0_ns`` should lie a little ahead (the
        sources start a flow late, never early)."""
        if self.t0_ns is not None:
            raise BackgroundError("background load already started")
        try:
            self.wait_ready()
            self.t0_ns = t0_ns
            for proc in self._sources.values():
                proc.stdin.write(f"go {t0_ns}\n")
                proc.stdin.close()
        except BaseException:
            self._end_all()
            raise
        return self

    def start(self) -> "BackgroundLoad":
        """:meth:`prepare`, then :meth:`go` ``start_delay_s`` from now."""
        self.prepare()
        try:
            return self.go(time.monotonic_ns() + int(self.start_delay_s * 1e9))
        except BaseException:
            self._end_all()
            raise

    def _end_all(self) -> None:
        for proc in [*self._sources.values(), *self._sinks.values()]:
            stop(proc, grace=3.0)

    def stop(self, *, drain_s: float | None = None) -> BackgroundResult:
        """Let the sources finish their flows (until the planned end + drain_s),
        end every process, and collect the records (unfinished = censored)."""
        drain = self.drain_s if drain_s is None else drain_s
        try:
            if self.t0_ns is not None:
                end = self.t0_ns / 1e9 + self.duration_s + drain
                for proc in self._sources.values():
                    left = end - time.monotonic()
                    try:
                        proc.wait(timeout=max(0.0, left))
                    except subprocess.TimeoutExpired:
                        pass
        finally:
            # exits of their own with an error, before we end anything
            crashed = {f"{role} {name}": proc.returncode
                       for role, procs in (("source", self._sources), ("sink", self._sinks))
                       for name, proc in procs.items() if proc.poll() not in (None, 0)}
            self._end_all()
        problems = []
        for what, code in sorted(crashed.items()):
            role, name = what.split()
            err = self.workdir / f"{role}-{name}.err"
            tail = err.read_text().strip()[-300:] if err.exists() else ""
            problems.append(f"{what} exited {code}: {tail}")
        self.result = BackgroundResult(self._collect(), {**self.params, "problems": problems,
                                                         "t0_ns": self.t0_ns, "drain_s": drain})
        return self.result

    def running(self) -> list[int]:
        """Pids of processes still running (empty after stop())."""
        return [p.pid for p in [*self._sources.values(), *self._sinks.values()] if p.poll() is None]

    def _collect(self) -> list[FlowRecord]:
        started, finished, errors, received = {}, {}, {}, {}
        for name in self._sources:
            for r in _json_lines(self.workdir / f"source-{name}.jsonl"):
                if "flow" not in r:
                    continue
                if r.get("event") == "start":
                    started[r["flow"]] = r["t_start_ns"]
                elif r.get("event") == "error":
                    errors[r["flow"]] = r["error"]
                elif r.get("event") == "done":
                    finished[r["flow"]] = r
        for name in self._sinks:
            for r in _json_lines(self.workdir / f"sink-{name}.jsonl"):
                if "flow" in r:
                    received[r["flow"]] = r
        records = []
        for f in self.plan:
            got = received.get(f.flow_id)
            complete = got is not None and got["bytes"] == f.size_bytes and f.flow_id in finished
            if f.flow_id in finished and (got is None or got["bytes"] != f.size_bytes):
                # the source saw the sink close, yet the sink lacks bytes: a defect,
                # not a flow cut short by stop() (that one is censored)
                got_bytes = got["bytes"] if got else 0
                errors.setdefault(f.flow_id, f"received {got_bytes} of {f.size_bytes} bytes")
            if f.flow_id not in started:
                status = "not_started"
            elif f.flow_id in errors:
                status = "failed"
            else:
                status = "done" if complete else "censored"
            records.append(FlowRecord(
                f.flow_id, f.src, f.dst, f.size_bytes,
                (self.t0_ns or 0) + int(f.start_s * 1e9), started.get(f.flow_id),
                got["t_done_ns"] if complete else None, got["bytes"] if got else 0,
                status, errors.get(f.flow_id, "")))
        return records

    def close(self) -> None:
        """Remove the working directory (records are in ``result``)."""
        if self._own_dir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "BackgroundLoad":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.stop(drain_s=0 if exc_type else None)
        finally:
            self.close()


# --- the programs that run inside the namespaces -----------------------------------------
def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def _sink(port: int) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readexactly(HEADER.size)
            t_first = time.monotonic_ns()
            flow, size = HEADER.unpack(head)
            got = 0
            while chunk := await reader.read(CHUNK):
                got += len(chunk)
            _emit({"flow": flow, "bytes": got, "expected": size,
                   "t_first_ns": t_first, "t_done_ns": time.monotonic_ns()})
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "0.0.0.0", port, backlog=512)
    _emit({"ready": port})
    async with server:
        await server.serve_forever()


async def _source(schedule: list[dict], t0_ns: int) -> None:
    payload = bytes(CHUNK)

    async def one(f: dict) -> None:
        delay = (t0_ns + f["offset_ns"] - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        t_start = time.monotonic_ns()
        _emit({"event": "start", "flow": f["flow"], "t_start_ns": t_start})
        try:
            reader, writer = await asyncio.open_connection(f["dst_ip"], f["port"])
            writer.write(HEADER.pack(f["flow"], f["size"]))
            left = f["size"]
            while left > 0:
                n = min(left, CHUNK)
                writer.write(payload[:n])
                await writer.drain()
                left -= n
            writer.write_eof()
            await reader.read()            # the sink closes once it has every byte
            writer.close()
            _emit({"event": "done", "flow": f["flow"], "t_start_ns": t_start,
                   "t_end_ns": time.monotonic_ns(), "sent": f["size"]})
        except OSError as exc:
            _emit({"event": "error", "flow": f["flow"], "error": f"{type(exc).__name__}: {exc}"})

    await asyncio.gather(*(one(f) for f in schedule))
    _emit({"done": len(schedule)})


def main(argv: Iterable[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="background flows: sink (read and discard) or source")
    sub = ap.add_subparsers(dest="role", required=True)
    sub.add_parser("sink").add_argument("--port", type=int, required=True)
    sub.add_parser("source").add_argument("--schedule", required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.role == "sink":
        asyncio.run(_sink(args.port))
    else:
        schedule = json.loads(Path(args.schedule).read_text())
        _emit({"ready": len(schedule)})
        line = sys.stdin.readline()       # "go T0_NS": the flows' time origin (BackgroundLoad.go)
        word, _, value = line.strip().partition(" ")
        if word != "go" or not value.isdigit():
            sys.stderr.write(f"source: expected 'go T0_NS' on stdin, got {shown(line)}\n")
            return 2
        asyncio.run(_source(schedule, int(value)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
