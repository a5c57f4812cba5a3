"""`talb send`: watch TaLB at work without a training workload.

Starts a verifying receiver in the destination host, captures tagged packets
on the uplinks of the senders' leaves, sends tagged tensors over TCP from the
source host(s), then joins the three views into one report per tensor:
flow completion time, bytes verified, and which uplink(s) carried it (more
than one would break tensor integrity).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from talb import paths, testbed
from workload.capture import start_capture, tensor_ports
from workload.netexec import ns_popen
from workload.snowflake import DEFAULT_WORKER_BITS

# Distinct tensor ids need distinct workers: the Snowflake id's worker field.
MAX_WORKERS = 1 << DEFAULT_WORKER_BITS
APP = [sys.executable, "-m", "workload.tensor_app"]


@dataclass
class TensorResult:
    worker: int
    src: str
    seq: int
    tensor_id: int
    layer: int
    bytes: int
    len_pkts: int
    fct_s: float | None
    ok: bool
    uplinks: dict = field(default_factory=dict)  # port -> tagged packets seen

    @property
    def split(self) -> bool:
        return len(self.uplinks) > 1


@dataclass
class SendReport:
    tensors: list
    pcap_dir: str
    local: bool  # destination on the senders' leaf: no uplink to watch

    @property
    def ok(self) -> bool:
        return bool(self.tensors) and all(t.ok for t in self.tensors) and not self.split

    @property
    def split(self) -> list:
        return [t for t in self.tensors if t.split]

    def fct_by_layer(self) -> dict[int, dict]:
        out = {}
        for layer in sorted({t.layer for t in self.tensors}):
            fcts = sorted(t.fct_s for t in self.tensors if t.layer == layer and t.fct_s is not None)
            if fcts:
                out[layer] = {"n": len(fcts), "mean_s": statistics.fmean(fcts),
                              "p99_s": fcts[min(len(fcts) - 1, int(0.99 * len(fcts)))]}
        return out


def _read_json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _check(value: int, name: str, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise testbed.TestbedError(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


def run(prefix: str, srcs: list[str], dst: str, *, tensors: int = 12, layers: int = 3,
        size: int = 200_000, senders: int = 1, port: int = 7000, pcap_dir: str | None = None,
        say=print, timeout: float = 300.0) -> SendReport:
    topo = testbed.load_topology_of(prefix)
    hosts = {h.name: h for h in topo.hosts}
    for name in [*srcs, dst]:
        if name not in hosts:
            raise testbed.TestbedError(f"host: no host '{name}' in testbed '{prefix}' "
                                       f"(hosts: {', '.join(hosts)})")
    if dst in srcs:
        raise testbed.TestbedError(f"--dst {dst} is also a --src: pick another destination")
    _check(tensors, "--tensors", 1, 100_000)
    _check(layers, "--layers", 1, 256)
    _check(size, "--size", 1, 1 << 30)
    workers = len(srcs) * senders
    _check(workers, "--senders x sources", 1, MAX_WORKERS)

    pcaps = Path(pcap_dir or tempfile.mkdtemp(prefix="talb-send-"))
    pcaps.mkdir(parents=True, exist_ok=True)
    src_leaves = sorted({hosts[s].leaf for s in srcs})
    local = all(hosts[s].leaf == hosts[dst].leaf for s in srcs)
    captures = []
    procs: list[subprocess.Popen] = []
    try:
        for leaf in src_leaves:
            for p in topo.ports(leaf):
                if p.kind == "fabric" and p.up:
                    captures.append(start_capture(paths.netns_name(prefix, leaf), p.name,
                                                  pcaps / f"{leaf}-{p.name}.pcap"))
        say(f"capturing tagged packets leaving {', '.join(src_leaves)} on "
            f"{len(captures)} uplinks -> {pcaps}")

        receiver = ns_popen(paths.netns_name(prefix, dst),
                            [*APP, "receive", "--port", str(port), "--connections", str(workers)])
        procs.append(receiver)
        ready = receiver.stdout.readline()
        if '"ready"' not in ready:
            raise testbed.TestbedError(f"receiver on {dst} did not start: "
                                       f"{ready.strip() or receiver.stderr.read().strip()}")
        say(f"receiver on {dst} ({hosts[dst].ip}:{port}); {workers} sender(s) x {tensors} tensors "
            f"of {size} bytes over {layers} layer(s)")

        worker_src = {}
        for i, src in enumerate(srcs):
            for k in range(senders):
                w = i * senders + k
                worker_src[w] = src
                procs.append(ns_popen(paths.netns_name(prefix, src), [
                    *APP, "send", "--dst", hosts[dst].ip, "--port", str(port), "--worker", str(w),
                    "--tensors", str(tensors), "--layers", str(layers), "--size", str(size)]))

        sent, errors = [], []
        for proc in procs[1:]:
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}")
            sent += [r for r in _read_json_lines(out) if "tensor_id" in r]
        out, err = receiver.communicate(timeout=30)
        received = {(r["worker"], r["seq"]): r for r in _read_json_lines(out) if "seq" in r}
        if errors:
            raise testbed.TestbedError("sender failed: " + "; ".join(errors))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        for cap in captures:
            cap.stop()

    ports = tensor_ports(captures)
    results = []
    for s in sorted(sent, key=lambda r: (r["worker"], r["seq"])):
        r = received.get((s["worker"], s["seq"]))
        results.append(TensorResult(
            worker=s["worker"], src=worker_src[s["worker"]], seq=s["seq"], tensor_id=s["tensor_id"],
            layer=s["layer"], bytes=s["bytes"], len_pkts=s["len_pkts"],
            fct_s=(r["t_done_ns"] - s["t_start_ns"]) / 1e9 if r else None,
            ok=bool(r and r["ok"]), uplinks=ports.get(s["tensor_id"], {})))
    return SendReport(results, str(pcaps), local)
