"""`talb send`: watch TaLB at work without a training workload.

Starts a verifying receiver in the destination host, captures tagged packets
on the uplinks of the senders' leaves, sends tagged tensors over TCP from the
source host(s), then joins the views into one report per tensor: flow
completion time, bytes verified, and which uplink(s) carried it (more than
one would break tensor integrity).

Which uplinks a tensor took is seen two ways: by the captures, and by the
leaf's data path itself, which records the ports every tagged tensor left
it by (map tensor_egress, datapath/egress_record.py). Under XDP a
redirected frame passes no capture, so there the record alone is read (no
capture is started); under TC both are, and a port the captures saw that
the record lacks is reported as a disagreement. A tensor neither saw is
"not checked": never counted as unsplit.

A tensor is its sender's: the report and the split detection key captured
packets by (source address, tensor_id) (common.wire.WireTensorKey), as the
switches do, so several sources, and several runs side by side, never mix
their tensors even when two hosts' ids coincide. Each sender process draws
its ids from a worker slot of its host (workload/id_slots.py).

Across machines (a fabric attached on two, docs/attach.md) the two ends run
apart: :func:`listen` (`talb send --listen --host H`) is the verifying
receiver alone, reporting every tensor it got; :func:`send_to` (`talb send
--src H --to IP:PORT`) the senders alone, with their leaves' uplinks
captured as :func:`run` does.
"""
from __future__ import annotations

import json
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import paths
from common.excerpt import shown
from common.wire import WireTensorKey
from netns_topology.state import TestbedError, load_topology_of, read_state
from workload.capture import CaptureError, start_capture, tensor_ports
from workload.netexec import ns_popen, stop
from workload.snowflake import DEFAULT_WORKER_BITS

# Each sender is one process, and a host's processes draw tensor ids from
# its worker slots (workload/id_slots.py): at most that many per host at once.
MAX_SENDERS_PER_HOST = 1 << DEFAULT_WORKER_BITS
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
    uplinks: dict = field(default_factory=dict)  # port -> tagged packets the captures saw
    src_ip: str = ""
    # the ports its leaf's data path recorded it leaving by (first port
    # first); None: no usable entry, `unrecorded` says why
    recorded: list | None = None
    recorded_packets: int = 0
    unrecorded: str = ""
    local: bool = False  # to a host of its own leaf: it takes no uplink
    leaf: str = ""  # its sender's leaf
    t_start_ns: int = 0  # its sender began it (CLOCK_MONOTONIC)

    @property
    def key(self) -> WireTensorKey:
        return WireTensorKey(self.src_ip, self.tensor_id)

    @property
    def ports(self) -> list[str]:
        """Every uplink it was seen on, by the captures or the record."""
        return sorted(set(self.uplinks) | set(self.recorded or ()))

    @property
    def observed(self) -> bool:
        """Its integrity was checked: seen by a capture or the record (or
        local: no uplink to split across)."""
        return self.local or bool(self.uplinks) or self.recorded is not None

    @property
    def seen_by(self) -> str:
        """"capture+record", "record", "capture", "local" or "" (not checked)."""
        if self.local:
            return "local"
        return "+".join(n for n, seen in (("capture", self.uplinks),
                                          ("record", self.recorded is not None)) if seen)

    @property
    def split(self) -> bool:
        return len(self.ports) > 1

    @property
    def disagrees(self) -> bool:
        """The captures saw it on an uplink its leaf's record does not hold."""
        return self.recorded is not None and not set(self.uplinks) <= set(self.recorded)


@dataclass
class SendReport:
    tensors: list
    pcap_dir: str | None  # None: the captures were in a temporary directory, now removed
    local: bool  # destination on the senders' leaf: no uplink to watch
    captured: bool = True  # captures ran (not under XDP: they see no redirected frame)
    no_record: dict = field(default_factory=dict)  # leaf -> why it has no record

    @property
    def ok(self) -> bool:
        return (bool(self.tensors) and all(t.ok for t in self.tensors) and not self.split
                and not self.disagree)

    @property
    def split(self) -> list:
        return [t for t in self.tensors if t.split]

    @property
    def unchecked(self) -> list:
        """Tensors neither a capture nor their leaf's record saw: their
        integrity is unknown (never counted as unsplit)."""
        return [t for t in self.tensors if not t.observed]

    @property
    def disagree(self) -> list:
        return [t for t in self.tensors if t.disagrees]

    def integrity(self) -> dict:
        """The split check in numbers: tensors checked, split, not checked,
        disagreeing (captures vs record), and by which view."""
        by: dict = {}
        for t in self.tensors:
            if t.observed:
                by[t.seen_by] = by.get(t.seen_by, 0) + 1
        return {"tensors": len(self.tensors), "checked": len(self.tensors) - len(self.unchecked),
                "split": len(self.split), "not_checked": len(self.unchecked),
                "disagree": len(self.disagree), "seen_by": by, "captured": self.captured,
                "no_record": dict(self.no_record)}

    def fct_by_layer(self) -> dict[int, dict]:
        out = {}
        for layer in sorted({t.layer for t in self.tensors}):
            fcts = sorted(t.fct_s for t in self.tensors if t.layer == layer and t.fct_s is not None)
            if fcts:
                out[layer] = {"n": len(fcts), "mean_s": statistics.fmean(fcts),
                              "p99_s": fcts[min(len(fcts) - 1, int(0.99 * len(fcts)))]}
        return out


def _clean_up(procs, captures, tmp) -> None:
    """End our processes (by pid) and captures, remove the pcap directory we made."""
    for proc in procs:
        stop(proc)
    for cap in captures:
        cap.stop()
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _read_json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _check(value: int, name: str, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise TestbedError(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    """One line of proc's stdout, or "" after ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return ""
    return proc.stdout.readline()


def _communicate_all(procs: list[subprocess.Popen], timeout: float) -> list:
    """Every process's (stdout, stderr), all read at once; None for one
    still running after ``timeout`` seconds (the caller ends it). Read one
    after the other, a process whose pipe nobody reads blocks once 64 KiB
    are in it -- the receiver writes a line per tensor -- and with it every
    sender waiting for its ACKs: 8 senders x 150 tensors hung for good."""
    results: list = [None] * len(procs)

    def one(i: int) -> None:
        try:
            results[i] = procs[i].communicate(timeout=timeout)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            pass

    readers = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(procs))]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    return results


def _last_line(err: str, returncode: int) -> str:
    return err.strip().splitlines()[-1] if err.strip() else f"exit {returncode}"


def run(prefix: str, srcs: list[str], dst: str, *, tensors: int = 12, layers: int = 3,
        size: int = 200_000, senders: int = 1, port: int = 7000, pcap_dir: str | None = None,
        say=print, timeout: float = 300.0, fixed_ids: int | None = None) -> SendReport:
    """Send, capture and report (see the module docstring). ``timeout``: for
    the whole exchange; every process started is ended and reaped on every
    path, and without ``pcap_dir`` the captures' temporary directory is
    removed. ``fixed_ids``: every sender numbers its tensors fixed_ids,
    fixed_ids+1, ... instead of drawing ids from its host's slots (to force
    tensors of different hosts to share ids, as tests do)."""
    hosts, host_ns, uplinks = _fabric(prefix)
    _check_request(prefix, hosts, srcs, dst, tensors, layers, size, senders, timeout)
    capture = _captures_see_redirects(prefix)
    if pcap_dir and not capture:
        raise TestbedError("--pcap-dir: the XDP data path redirects frames past every capture "
                           "(nothing would be written); the split check reads the leaves' own "
                           "record of each tensor's uplinks instead")
    workers = len(srcs) * senders
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    tmp = None if pcap_dir or not capture else tempfile.mkdtemp(prefix="talb-send-")
    local = all(hosts[s].leaf == hosts[dst].leaf for s in srcs)
    captures = []
    procs: list[subprocess.Popen] = []
    src_leaves = sorted({hosts[s].leaf for s in srcs})
    try:
        if capture:
            pcaps = Path(pcap_dir or tmp)
            pcaps.mkdir(parents=True, exist_ok=True)
            _start_captures(captures, uplinks, src_leaves, pcaps)
            say(f"capturing tagged packets leaving {', '.join(src_leaves)} on "
                f"{len(captures)} uplinks" + (f" -> {pcaps}" if pcap_dir else ""))
        else:
            say(f"XDP data path: no capture sees a redirected frame; each tensor's uplinks "
                f"come from {', '.join(src_leaves)}'s own record (tensor_egress)")
        _start_receiver(procs, host_ns[dst], dst, port, workers, min(left(), 30.0))
        say(f"receiver on {dst} ({hosts[dst].ip}:{port}); {workers} sender(s) x {tensors} tensors "
            f"of {size} bytes over {layers} layer(s)")
        what = ["--tensors", str(tensors), "--layers", str(layers), "--size", str(size)]
        if fixed_ids is not None:
            what += ["--fixed-ids", str(fixed_ids)]
        worker_src = _start_senders(procs, host_ns, srcs, senders, hosts[dst].ip, port, what)
        sent, received = _records(procs, _communicate_all(procs, left()), worker_src, dst, timeout)
        ports = _tagged_ports(captures)
    finally:
        _clean_up(procs, captures, tmp)
    results = _join(sent, received, worker_src, hosts, ports, dst_leaf=hosts[dst].leaf)
    no_record = _add_records(prefix, results, uplinks, src_leaves)
    return SendReport(results, pcap_dir, local, captured=capture, no_record=no_record)


@dataclass
class ListenReport:
    """What a receiver alone got: one dict per tensor (worker, src, seq,
    layer, bytes, ok, recv_s: first byte to last), from ``connections``."""
    tensors: list
    connections: int
    errors: list

    @property
    def ok(self) -> bool:
        return bool(self.tensors) and all(t["ok"] for t in self.tensors) and not self.errors


def listen(prefix: str, host: str, *, port: int = 7000, connections: int = 1, say=print,
           timeout: float = 600.0) -> ListenReport:
    """The verifying receiver alone, in ``host`` (a host of testbed
    ``prefix`` or of the fabric attached under that name with a namespace
    on this machine), until ``connections`` senders have connected and
    closed or ``timeout`` seconds passed (TestbedError)."""
    hosts, host_ns, _ = _fabric(prefix)
    if host not in hosts:
        raise TestbedError(f"--host: no host '{host}' with a namespace on this machine in "
                           f"'{prefix}' (hosts: {', '.join(hosts) or 'none'})")
    _check(connections, "--senders", 1, 1024)
    _check(port, "--port", 1, 65535)
    if not timeout > 0:
        raise TestbedError(f"--timeout: must be > 0 seconds, got {shown(timeout)}")
    procs: list[subprocess.Popen] = []
    try:
        _start_receiver(procs, host_ns[host], host, port, connections, 30.0)
        say(f"receiver on {host} ({hosts[host].ip}:{port}), waiting for {connections} "
            f"sender connection(s) (at most {timeout:g} s)")
        (out,) = _communicate_all(procs, timeout)
        if out is None:
            raise TestbedError(f"--timeout: {connections} sender(s) did not connect and finish "
                               f"within {timeout:g} s (the receiver was ended)")
    finally:
        for proc in procs:
            stop(proc)
    lines = _read_json_lines(out[0])
    tensors = [{"worker": r["worker"], "src": r.get("src", ""), "seq": r["seq"],
                "layer": r["layer"], "bytes": r["bytes"], "ok": r["ok"],
                "recv_s": (r["t_done_ns"] - r["t_first_ns"]) / 1e9}
               for r in lines if "seq" in r]
    errors = [r["error"] for r in lines if "error" in r]
    if procs[0].returncode:
        errors.append(f"receiver: {_last_line(out[1], procs[0].returncode)}")
    return ListenReport(sorted(tensors, key=lambda t: (t["src"], t["worker"], t["seq"])),
                        connections, errors)


def parse_to(value: str) -> tuple[str, int]:
    """``10.0.0.2:7000`` -> ("10.0.0.2", 7000); TestbedError naming --to."""
    import ipaddress

    ip, sep, port = value.rpartition(":")
    try:
        ipaddress.IPv4Address(ip)
        if not sep or not 1 <= int(port) <= 65535:
            raise ValueError
    except ValueError:
        raise TestbedError(f"--to: must be IPv4:PORT of a listening `talb send --listen`, e.g. "
                           f"10.0.0.2:7000, got {shown(value)}") from None
    return ip, int(port)


def send_to(prefix: str, srcs: list[str], to: str, *, tensors: int = 12, layers: int = 3,
            size: int = 200_000, senders: int = 1, pcap_dir: str | None = None, say=print,
            timeout: float = 300.0) -> SendReport:
    """The senders alone: tensors from ``srcs`` to a receiver elsewhere
    (``to``: IP:PORT of `talb send --listen`), the senders' leaf uplinks
    captured. A tensor is ok when its sender finished (the receiver closed
    its connection after reading every byte; it verifies them and says so
    on its machine); it has no FCT here (the receiver's clock)."""
    dst_ip, port = parse_to(to)
    hosts, host_ns, uplinks = _fabric(prefix)
    for name in srcs:
        if name not in hosts:
            raise TestbedError(f"--src: no host '{name}' with a namespace on this machine in "
                               f"'{prefix}' (hosts: {', '.join(hosts) or 'none'})")
    if not srcs or len(set(srcs)) != len(srcs):
        raise TestbedError(f"--src: give one or more distinct hosts, got {shown(','.join(srcs))}")
    if any(hosts[s].ip == dst_ip for s in srcs):
        raise TestbedError(f"--to {to} is a --src's own address: pick another destination")
    _check(tensors, "--tensors", 1, 100_000)
    _check(layers, "--layers", 1, 256)
    _check(size, "--size", 1, 1 << 30)
    _check(senders, "--senders", 1, MAX_SENDERS_PER_HOST)
    deadline = time.monotonic() + timeout
    tmp = None if pcap_dir else tempfile.mkdtemp(prefix="talb-send-")
    pcaps = Path(pcap_dir or tmp)
    captures, procs = [], []
    try:
        pcaps.mkdir(parents=True, exist_ok=True)
        src_leaves = sorted({hosts[s].leaf for s in srcs})
        _start_captures(captures, {k: v for k, v in uplinks.items() if k in src_leaves},
                        [leaf for leaf in src_leaves if leaf in uplinks], pcaps)
        say(f"capturing tagged packets leaving {', '.join(src_leaves)} on {len(captures)} "
            f"uplinks; {len(srcs) * senders} sender(s) x {tensors} tensors of {size} bytes "
            f"over {layers} layer(s) to {dst_ip}:{port}")
        what = ["--tensors", str(tensors), "--layers", str(layers), "--size", str(size)]
        worker_src = _start_senders(procs, host_ns, srcs, senders, dst_ip, port, what)
        outputs = _communicate_all(procs, max(deadline - time.monotonic(), 0.0))
        sent, errors = [], []
        for w, (proc, out) in enumerate(zip(procs, outputs)):
            if out is None:
                raise TestbedError(f"sender {w} on {worker_src[w]} did not finish within "
                                   f"{timeout:g} s (is `talb send --listen` running at {to}, "
                                   f"with --senders {len(procs)}?)")
            if proc.returncode != 0:
                errors.append(f"sender {w} on {worker_src[w]}: {_last_line(out[1], proc.returncode)}")
            sent += [r for r in _read_json_lines(out[0]) if "tensor_id" in r]
        if errors:
            raise TestbedError("sender failed: " + "; ".join(errors))
        ports = _tagged_ports(captures)
    finally:
        _clean_up(procs, captures, tmp)
    results = []
    for r in sorted(sent, key=lambda r: (r["worker"], r["seq"])):
        src = worker_src[r["worker"]]
        key = WireTensorKey(hosts[src].ip, r["tensor_id"])
        results.append(TensorResult(
            worker=r["worker"], src=src, seq=r["seq"], tensor_id=r["tensor_id"], layer=r["layer"],
            bytes=r["bytes"], len_pkts=r["len_pkts"], fct_s=None, ok=True,
            uplinks=ports.get(key, {}), src_ip=key.src, leaf=hosts[src].leaf,
            t_start_ns=r["t_start_ns"]))
    no_record = _add_records(prefix, results, uplinks, src_leaves)
    return SendReport(results, pcap_dir, local=False, no_record=no_record)


def _check_request(prefix: str, hosts: dict, srcs: list[str], dst: str, tensors: int,
                   layers: int, size: int, senders: int, timeout: float) -> None:
    """TestbedError naming the option that is out of range or names no host."""
    for name in [*srcs, dst]:
        if name not in hosts:
            raise TestbedError(f"host: no host '{name}' in testbed '{prefix}' "
                               f"(hosts: {', '.join(hosts)})")
    if not srcs:
        raise TestbedError("--src: give at least one sending host")
    if len(set(srcs)) != len(srcs):
        raise TestbedError(f"--src: a host named twice in {','.join(srcs)}; use --senders "
                           "for several connections from one host")
    if dst in srcs:
        raise TestbedError(f"--dst {dst} is also a --src: pick another destination")
    _check(tensors, "--tensors", 1, 100_000)
    _check(layers, "--layers", 1, 256)
    _check(size, "--size", 1, 1 << 30)
    _check(senders, "--senders", 1, MAX_SENDERS_PER_HOST)
    if not timeout > 0:
        raise TestbedError(f"timeout: must be > 0 seconds, got {shown(timeout)}")


@dataclass(frozen=True)
class _Host:
    name: str
    ip: str
    leaf: str


def _fabric(prefix: str) -> tuple[dict, dict, dict]:
    """(hosts {name: .ip .leaf}, {host: its namespace}, {leaf: [(namespace,
    interface) of each up uplink]}) of testbed ``prefix``, or of the fabric
    attached under that name (`talb attach`: its hosts with the tagger)."""
    from testbed import attach

    if attach.attached(prefix):
        fabric, record = attach.fabric_of(prefix), attach.read_attach(prefix)
        hosts = {h.name: _Host(h.name, h.ip, fabric.leaf_of(h.name)) for h in fabric.hosts
                 if h.name in record["hosts"]}
        return hosts, {h: rec["netns"] for h, rec in record["hosts"].items()}, attach.uplinks(prefix)
    topo = load_topology_of(prefix)
    hosts = {h.name: h for h in topo.hosts}
    uplinks = {sw.name: [(paths.netns_name(prefix, sw.name), p.name) for p in topo.ports(sw.name)
                         if p.kind == "fabric" and p.up] for sw in topo.switches}
    return hosts, {h: paths.netns_name(prefix, h) for h in hosts}, uplinks


def _start_captures(captures: list, uplinks: dict, leaves: list[str], pcaps: Path) -> None:
    """A capture on every up uplink of ``leaves``, each appended to
    ``captures`` as it starts (so the caller stops those begun if one fails)."""
    for leaf in leaves:
        for netns, ifname in uplinks[leaf]:
            captures.append(start_capture(netns, ifname, pcaps / f"{leaf}-{ifname}.pcap"))


def _start_receiver(procs: list, netns: str, dst: str, port: int, connections: int,
                    timeout: float) -> None:
    """The verifying receiver in ``dst``, appended to ``procs``, once it
    listens; TestbedError when it does not within ``timeout``."""
    receiver = ns_popen(netns,
                        [*APP, "receive", "--port", str(port), "--connections", str(connections)])
    procs.append(receiver)
    ready = _readline(receiver, timeout)
    if '"ready"' not in ready:
        stop(receiver)
        raise TestbedError(
            f"receiver on {dst} did not start: "
            f"{ready.strip() or _last_line(receiver.stderr.read(), receiver.returncode)}")


def _start_senders(procs: list, host_ns: dict, srcs: list[str], senders: int, dst_ip: str,
                   port: int, what: list[str]) -> dict[int, str]:
    """``senders`` sender processes per source host, appended to ``procs``;
    ``what``: their tensor options. {worker: its host}."""
    worker_src = {}
    for i, src in enumerate(srcs):
        for k in range(senders):
            w = i * senders + k
            worker_src[w] = src
            procs.append(ns_popen(host_ns[src], [
                *APP, "send", "--dst", dst_ip, "--port", str(port), "--worker", str(w), *what]))
    return worker_src


def _records(procs: list, outputs: list, worker_src: dict, dst: str,
             timeout: float) -> tuple[list[dict], dict]:
    """(what the senders sent, {(worker, seq): what the receiver got}) from
    the processes' outputs (the receiver's first); TestbedError naming a
    sender that failed or never finished."""
    sent, errors = [], []
    for w, proc in enumerate(procs[1:]):
        if outputs[w + 1] is None:
            raise TestbedError(
                f"sender {w} on {worker_src[w]} did not finish within {timeout:g} s "
                "(every sender and the receiver were ended)")
        out, err = outputs[w + 1]
        if proc.returncode != 0:
            errors.append(f"sender {w} on {worker_src[w]}: {_last_line(err, proc.returncode)}")
        sent += [r for r in _read_json_lines(out) if "tensor_id" in r]
    if errors:
        raise TestbedError("sender failed: " + "; ".join(errors))
    if outputs[0] is None:
        raise TestbedError(f"receiver on {dst} did not finish after its senders")
    received = {(r["worker"], r["seq"]): r for r in _read_json_lines(outputs[0][0])
                if "seq" in r}
    return sent, received


def _tagged_ports(captures: list) -> dict:
    """The captures stopped and read: {WireTensorKey: {port: tagged packets}}."""
    for cap in captures:
        cap.stop()
    try:
        return tensor_ports(captures)
    except CaptureError as exc:
        raise TestbedError(str(exc)) from None


def _join(sent: list[dict], received: dict, worker_src: dict, hosts: dict,
          ports: dict, dst_leaf: str) -> list[TensorResult]:
    """One result per sent tensor: its FCT, whether it arrived intact, the
    uplinks the captures saw it on."""
    results = []
    for s in sorted(sent, key=lambda r: (r["worker"], r["seq"])):
        r = received.get((s["worker"], s["seq"]))
        src = worker_src[s["worker"]]
        key = WireTensorKey(hosts[src].ip, s["tensor_id"])
        results.append(TensorResult(
            worker=s["worker"], src=src, seq=s["seq"], tensor_id=s["tensor_id"],
            layer=s["layer"], bytes=s["bytes"], len_pkts=s["len_pkts"],
            fct_s=(r["t_done_ns"] - s["t_start_ns"]) / 1e9 if r else None,
            ok=bool(r and r["ok"]), uplinks=ports.get(key, {}), src_ip=key.src,
            local=hosts[src].leaf == dst_leaf, leaf=hosts[src].leaf, t_start_ns=s["t_start_ns"]))
    return results


def _captures_see_redirects(prefix: str) -> bool:
    """Whether a capture on an uplink sees the frames the switches send:
    not under XDP (a redirected frame never becomes a packet on the egress
    device). A fabric attached by `talb attach` runs the TC data path."""
    from testbed import attach

    if attach.attached(prefix):
        return True
    return read_state(prefix).get("datapath") != "xdp"


def _add_records(prefix: str, results: list[TensorResult], uplinks: dict,
                 leaves: list[str]) -> dict[str, str]:
    """Each tensor's entry in its leaf's record of egress ports (tensor_egress,
    read from the leaf's pins: one lookup per tensor) into ``recorded``, or
    why there is none into ``unrecorded``. Returns {leaf: why it has no
    record} for the senders' leaves without one (the kernel bridge, a
    data path built before the record, a leaf on another machine)."""
    from datapath.egress_record import open_record, port_names, read_egress

    no_record = {}
    for leaf in leaves:
        mine = [t for t in results if t.leaf == leaf and not t.local]
        if not mine:
            continue
        if not uplinks.get(leaf):
            why = "no uplink of it on this machine"
            maps = None
        else:
            maps, why = open_record(paths.pin_dir(prefix, leaf))
        if maps is None:
            no_record[leaf] = why
            for t in mine:
                t.unrecorded = f"{leaf}: {why}"
            continue
        with maps:
            names = port_names(maps, uplinks[leaf][0][0])
            rec = read_egress(maps, {t.key: t.t_start_ns for t in mine}, names)
        for t in mine:
            r = rec.get(t.key)
            if r is None:
                t.unrecorded = (f"{leaf}'s record holds no entry for it (none of its "
                                "packets forwarded tagged, or evicted since by newer tensors)")
            elif r.older:
                t.unrecorded = (f"{leaf}'s entry began before the tensor: an earlier tensor "
                                "of the same (source, id) shares it")
            else:
                t.recorded, t.recorded_packets = list(r.ports), r.packets
    return no_record
