"""Measurement of a training run: per-tensor records, summaries, kernel TCP
counters, switch port counters and the CPU guard.

Definitions (docs/workload.md, "Measurement"). Per tensor, five times,
CLOCK_MONOTONIC ns (one clock for every namespace of the machine, and the
clock of bpf_ktime_get_ns):

  t_admit_ns       the scheduler admits it (a worker's first send of a
                   partition; None where no scheduler decides: PULLs, later
                   ring steps)
  t_start_ns       the sender calls TensorSender.send
  t_kernel_ns      its first byte is handed to the kernel (first send call)
  t_wire_first_ns  its first packet passes the sending host's TC egress
  t_wire_last_ns   its latest packet does (retransmissions included)
  t_delivered_ns   the receiving application has its last byte (= t_done_ns)

and from them:

* FCT (``fct_s``): t_start -> delivered, the hand-off to the socket to
  delivery (the definition of every result before network FCT).
* Network FCT (``netfct_s``): t_wire_first -> delivered, the paper's flow
  FCT (from the flow's first packet). TC egress runs before the host's own
  qdisc: "on the wire" is "handed to the host's NIC queue", which, as in the
  paper's simulator, makes the host's NIC queue part of the FCT.
* Send-buffer wait (``sendbuf_wait_s``): t_kernel -> t_wire_first, behind
  the connection's earlier bytes in the socket (and TCP's window).
* Scheduler wait (``sched_wait_s``): t_admit -> t_kernel.
* Wire times come from the host program's ``tensor_wire`` map, joined by
  (sending node, tensor id); a tensor delivered without them (no entry, an
  entry older than its hand-off to the kernel: another tensor of the same
  id, or results from before wire times) is counted ``wire_missing``, never
  given a network FCT.
* Classes by the tensor's size *at target scale*, as the paper: short <=
  100 KB, long >= 1 MB, the rest "medium" (counted in "all" only).
* A tensor sent and never received is *censored*: counted, never given an
  FCT (neither 0 nor the run's length); statistics say how many they left out.
* Warm-up iterations are excluded from every summary (records keep them,
  marked ``warmup``).
* p99: nearest-rank percentile (the smallest value with at least 99% of the
  sample at or below it).
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from collections import defaultdict

SHORT_MAX_BYTES = 100_000      # TaLB section V: short flows <= 100 KB
LONG_MIN_BYTES = 1_000_000     # long flows >= 1 MB

# Kernel TCP counters kept per host: (table, name) in /proc/net/snmp and /proc/net/netstat.
TCP_COUNTERS = {
    "retrans_segs": ("Tcp", "RetransSegs"),
    "out_segs": ("Tcp", "OutSegs"),
    "fast_retrans": ("TcpExt", "TCPFastRetrans"),
    "timeouts": ("TcpExt", "TCPTimeouts"),
    "lost_retransmit": ("TcpExt", "TCPLostRetransmit"),
    "sack_reorder": ("TcpExt", "TCPSACKReorder"),
    "ts_reorder": ("TcpExt", "TCPTSReorder"),
    "reno_reorder": ("TcpExt", "TCPRenoReorder"),
    "dsack_recv": ("TcpExt", "TCPDSACKRecv"),
    "ofo_queue": ("TcpExt", "TCPOFOQueue"),
}
REORDER_COUNTERS = ("sack_reorder", "ts_reorder", "reno_reorder")

# CPU guard (docs/workload.md, "CPU guard").
CPU_BUSY_SATURATED = 0.90      # all CPUs together at least this busy: saturated window
CPU_SATURATED_SHARE = 0.20     # flag when at least this share of windows is saturated
FORWARDING_PINNED = 0.50       # one CPU saturated with at least this share in softirq: saturated
SAMPLE_INTERVAL_S = 0.5


def size_class(target_bytes: float) -> str:
    if target_bytes <= SHORT_MAX_BYTES:
        return "short"
    if target_bytes >= LONG_MIN_BYTES:
        return "long"
    return "medium"


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(0.99 * len(s)) - 1)]


def stats(values: list[float], censored: int = 0) -> dict:
    """n, mean and p99 of the finished values; censored ones only counted."""
    out = {"n": len(values), "censored": censored}
    out.update(_moments(values))
    return out


def _moments(values: list[float]) -> dict:
    if values:
        return {"mean_s": statistics.fmean(values), "p99_s": p99(values), "max_s": max(values)}
    return {"mean_s": None, "p99_s": None, "max_s": None}


def _span_s(a: int | None, b: int | None) -> float | None:
    return (b - a) / 1e9 if a is not None and b is not None else None


def wire_entry(tx: dict, entry: dict | None) -> dict | None:
    """The host program's entry for the tensor of ``tx`` if it is this
    tensor's: its first packet passed egress no earlier than its first byte
    went to the kernel (an earlier one is another tensor that had the same id,
    ids coming back after ~17.5 min). ``entry``: {first_ns, last_ns (0: the
    last byte never went out), latest_ns, packets} (datapath.host_maps.HostWire
    as a dict)."""
    if entry is None:
        return None
    since = tx.get("t_kernel_ns") or tx["t_ns"]
    return entry if entry["first_ns"] >= since else None


# --- per-tensor records ---------------------------------------------------------------
def join_tensors(events: list[dict], target_bytes_of, warmup: int,
                 wire: dict | None = None) -> list[dict]:
    """One record per message sent (tx), with its receipt (rx) if any.
    ``target_bytes_of(tx)`` gives a message's size at target scale.
    ``wire``: {(sending node, tensor_id): {first_ns, last_ns, latest_ns,
    packets}} read from the sending hosts' ``tensor_wire`` maps (None: no
    wire times, every tensor's are missing)."""
    rx = {e["k"]: e for e in events if e["ev"] == "rx"}
    wire = wire or {}
    out = []
    for e in events:
        if e["ev"] != "tx":
            continue
        r = rx.get(e["k"])
        target = target_bytes_of(e)
        done = r["t_ns"] if r else None
        kernel = e.get("t_kernel_ns")
        w = wire_entry(e, wire.get((e["src"], e["tensor_id"])))
        first = w["first_ns"] if w else None
        last = (w["last_ns"] or None) if w else None      # 0: the last byte never went out
        out.append({
            "key": e["k"], "kind": e["kind"], "src": e["src"], "dst": e["dst"],
            "iteration": e["it"], "partition": e["pid"], "step": e["step"], "layer": e["layer"],
            "bytes": e["bytes"], "target_bytes": target, "class": size_class(target),
            "tensor_id": e["tensor_id"],
            # the connection it went on: index in its pair, [local, remote] ports
            "conn": e.get("conn", 0), "ports": e.get("ports"),
            "t_admit_ns": e.get("t_admit_ns"), "t_queued_ns": e.get("t_queued_ns"),
            "t_start_ns": e["t_ns"],
            "t_kernel_ns": kernel, "t_wire_first_ns": first, "t_wire_last_ns": last,
            "t_wire_latest_ns": w["latest_ns"] if w else None,
            "wire_packets": w["packets"] if w else None,
            "t_done_ns": done, "t_delivered_ns": done,
            "fct_s": _span_s(e["t_ns"], done),
            "netfct_s": _span_s(first, done),
            "sendbuf_wait_s": _span_s(kernel, first),
            "sched_wait_s": _span_s(e.get("t_admit_ns"), kernel),
            # ready to go -> handed to its socket: the wait for its connection
            # (the connection model's queue; before the FCT's start)
            "conn_wait_s": _span_s(e.get("t_queued_ns"), e["t_ns"]),
            "ok": bool(r and r["ok"]), "censored": r is None,
            "warmup": e["it"] < warmup,
        })
    return out


def tensor_summary(tensors: list[dict], workers: int | None = None) -> dict:
    """FCT statistics by class, by layer, and of trailing tensors (the last
    tensor of each layer to reach each worker in each iteration, paper
    Fig. 4: the one the worker's next forward step waits for); warm-up
    excluded. Node ids below ``workers`` are workers (None: every node)."""
    measured = [t for t in tensors if not t["warmup"]]

    def block(ts):
        """Today's FCT (n, censored, mean_s, p99_s, max_s) and beside it,
        over the delivered tensors, network FCT, send-buffer wait and
        scheduler wait (each n, mean_s, p99_s, max_s), and how many
        delivered tensors lack wire times (no network FCT)."""
        done = [t for t in ts if not t["censored"]]
        out = stats([t["fct_s"] for t in done], len(ts) - len(done))
        for name in ("netfct", "sendbuf_wait", "sched_wait", "conn_wait"):
            vals = [t[f"{name}_s"] for t in done if t.get(f"{name}_s") is not None]
            out[name] = {"n": len(vals), **_moments(vals)}
        out["wire_missing"] = len(done) - out["netfct"]["n"]
        return out

    by_class = {c: block([t for t in measured if t["class"] == c])
                for c in ("short", "medium", "long")}
    by_class["all"] = block(measured)
    by_layer = {str(layer): block([t for t in measured if t["layer"] == layer])
                for layer in sorted({t["layer"] for t in measured})}
    # Trailing: per (receiving node, iteration, layer), the one finishing last;
    # a censored tensor there is the trailing one (it never finished).
    groups = defaultdict(list)
    for t in measured:
        if workers is None or t["dst"] < workers:
            groups[(t["dst"], t["iteration"], t["layer"])].append(t)
    trailing = [next((t for t in g if t["censored"]), None) or max(g, key=lambda t: t["t_done_ns"])
                for g in groups.values()]
    return {"by_class": by_class, "by_layer": by_layer, "trailing": block(trailing),
            "delivered_bytes": sum(t["bytes"] for t in measured if not t["censored"]),
            "corrupted": sum(1 for t in tensors if not t["censored"] and not t["ok"])}


def iteration_records(events: list[dict], workers: int, warmup: int) -> list[dict]:
    """Per iteration: each worker's time from the start of its forward pass
    to the start of the next (the last: to having every parameter back);
    the iteration's time is the slowest worker's (synchronous training)."""
    starts = defaultdict(dict)
    for e in events:
        if e["ev"] == "iter":
            starts[e["node"]][e["it"]] = e["t_ns"]
        elif e["ev"] == "end":
            starts[e["node"]]["end"] = e["t_ns"]
    its = sorted({it for s in starts.values() for it in s if it != "end"})
    out = []
    for it in its:
        per = {}
        for w in range(workers):
            s = starts.get(w, {})
            nxt = s.get(it + 1, s.get("end")) if it + 1 not in its else s.get(it + 1)
            if it in s and nxt is not None:
                per[w] = (nxt - s[it]) / 1e9
        done = len(per) == workers
        out.append({"iteration": it, "warmup": it < warmup, "complete": done,
                    "time_s": max(per.values()) if done else None,
                    "worker_time_s": {str(w): v for w, v in per.items()},
                    "worker_start_ns": {str(w): starts[w][it] for w in range(workers)
                                        if it in starts.get(w, {})}})
    return out


def layer_events(events: list[dict]) -> list[dict]:
    """Every (worker, iteration, layer): gradients ready, parameters back."""
    return [{"node": e["node"], "iteration": e["it"], "layer": e["layer"],
             "t_ready_ns": e["t_ready_ns"], "t_done_ns": e["t_done_ns"]}
            for e in events if e["ev"] == "layer"]


def layer_records(events: list[dict], warmup: int) -> dict:
    """Per layer: communication completion time (gradients ready -> the
    layer's parameters back at the worker), warm-up excluded."""
    times = defaultdict(list)
    for e in events:
        if e["ev"] == "layer" and e["it"] >= warmup:
            times[e["layer"]].append((e["t_done_ns"] - e["t_ready_ns"]) / 1e9)
    return {str(k): stats(v) for k, v in sorted(times.items())}


def speed(iterations: list[dict], workers: int, batch_size: int, time_scale: float) -> dict:
    """Training speed at target scale: samples per second of the whole
    cluster; testbed seconds / time_scale = target seconds."""
    measured = [i["time_s"] for i in iterations if not i["warmup"] and i["complete"]]
    censored = sum(1 for i in iterations if not i["warmup"] and not i["complete"])
    if not measured:
        return {"iterations": 0, "censored": censored, "iteration_time_s": None,
                "target_iteration_time_s": None, "samples_per_s": None}
    mean = statistics.fmean(measured)
    return {"iterations": len(measured), "censored": censored, "iteration_time_s": mean,
            "target_iteration_time_s": mean / time_scale,
            "samples_per_s": workers * batch_size * time_scale / mean}


# --- kernel counters -------------------------------------------------------------------
def parse_proc_net(text: str) -> dict[tuple[str, str], int]:
    """/proc/net/snmp and /proc/net/netstat: pairs of 'Table: names' /
    'Table: values' lines."""
    out = {}
    lines = text.splitlines()
    for head, vals in zip(lines, lines[1:]):
        h, v = head.split(), vals.split()
        if h and v and h[0] == v[0] and h[0].endswith(":") and len(h) == len(v) \
                and all(x.lstrip("-").isdigit() for x in v[1:]):
            for name, value in zip(h[1:], v[1:]):
                out[(h[0][:-1], name)] = int(value)
    return out


def read_tcp_counters(netns: str) -> dict[str, int]:
    """The kernel's TCP counters of one namespace (they are per namespace)."""
    from workload.netexec import ns_run

    proc = ns_run(netns, ["cat", "/proc/net/snmp", "/proc/net/netstat"], check=True)
    table = parse_proc_net(proc.stdout)
    return {name: table.get(key, 0) for name, key in TCP_COUNTERS.items()}


def counter_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def tcp_summary(deltas: dict[str, dict]) -> dict:
    total = defaultdict(int)
    for d in deltas.values():
        for k, v in d.items():
            total[k] += v
    out = dict(total)
    out["reordering"] = sum(total[k] for k in REORDER_COUNTERS)
    out["retransmit_ratio"] = total["retrans_segs"] / total["out_segs"] if total["out_segs"] else None
    return {"per_host": deltas, "total": out}


class PortCounters:
    """Byte counters of the switches' ports (the data path's ``port_stats``),
    read from the pinned maps: {(switch, port): (rx_bytes, tx_bytes)}."""

    def __init__(self, prefix: str, topo, switches=None):
        from common import paths
        from datapath.maps import SwitchMaps

        self.topo = topo
        self.maps = {}
        names = switches or [s.name for s in topo.switches]
        try:
            for sw in names:
                self.maps[sw] = SwitchMaps(paths.pin_dir(prefix, sw))
        except BaseException:
            self.close()
            raise

    def read(self) -> dict[tuple[str, str], tuple[int, int]]:
        from datapath.control import read_port_stats

        out = {}
        for sw, maps in self.maps.items():
            ports = self.topo.ports(sw)
            stats_ = read_port_stats(maps, range(len(ports)))
            for pid, port in enumerate(ports):
                s = stats_[pid]
                out[(sw, port.name)] = (s["rx_bytes"], s["tx_bytes"])
        return out

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
        self.maps = {}


def uplink_spread(topo, before: dict, after: dict, duration_s: float,
                  queues: tuple[dict | None, dict | None] = (None, None)) -> dict:
    """Bytes each leaf sent up each of its uplinks during the run, their
    load and the spread: (max - min) / mean per leaf (0 = even).

    The switch's tx counters count what the balancer sent *towards* a port,
    before its queue: ``offered`` (over the port's rate) passes 1 where the
    queue drops, e.g. on a half-rate link. ``utilisation`` is what the link
    carried: the port queue's sent bytes (``queues``: read_qdisc_counters
    before and after) over its rate, at most ~1; without queue counters
    (an unshaped fabric) it is the offered load, and ``utilisation_from``
    says which."""
    q0, q1 = queues
    carried = q0 is not None and q1 is not None
    leaves = {}
    for sw in topo.switches:
        ups = [p for p in topo.ports(sw.name) if p.kind == "fabric" and sw.role == "leaf"]
        if not ups:
            continue
        tx = {p.name: after[(sw.name, p.name)][1] - before[(sw.name, p.name)][1] for p in ups}

        def per_rate(nbytes: dict) -> dict:
            return {p.name: nbytes[p.name] * 8 / (duration_s * p.rate_bps) if duration_s > 0
                    else None for p in ups}

        offered = per_rate(tx)
        util = per_rate({p.name: q1[(sw.name, p.name)][1] - q0[(sw.name, p.name)][1]
                         for p in ups}) if carried else offered
        mean = statistics.fmean(tx.values())
        leaves[sw.name] = {"tx_bytes": tx, "offered": offered, "utilisation": util,
                           "spread": (max(tx.values()) - min(tx.values())) / mean if mean else None}
    spreads = [v["spread"] for v in leaves.values() if v["spread"] is not None]
    return {"leaves": leaves, "mean_spread": statistics.fmean(spreads) if spreads else None,
            "utilisation_from": "port queue sent bytes" if carried
            else "switch tx counters (offered, drops included)"}


def read_qdisc_counters(prefix: str, topo) -> dict[tuple[str, str], tuple[int, int]] | None:
    """Drops and sent bytes of every switch port's root qdisc (the port
    queue, datapath/qdisc_stats.py): {(switch, port): (drops, sent_bytes)};
    None for a fabric without shaping (no qdisc to read). (DRILL's estimate
    of the same queues, from a switch's maps: datapath.control.read_queue_estimates.)"""
    from common.paths import netns_name
    from datapath.qdisc_stats import QdiscReader

    out = {}
    try:
        for sw in topo.switches:
            with QdiscReader(netns_name(prefix, sw.name)) as reader:
                for port in topo.ports(sw.name):
                    q = reader.read(port.name)
                    out[(sw.name, port.name)] = (q.drops, q.sent_bytes)
    except LookupError:
        return None
    return out


def port_drops(topo, before: dict, after: dict) -> dict:
    """Where packets were dropped during the run: per port, and summed by
    where the port leads: ``to_host`` (a leaf's port to a host: the incast
    no balancer can avoid), ``leaf_up`` (leaf to spine: what the balancer
    chooses among), ``spine_down`` (spine to leaf)."""
    ports, by_kind = {}, {"to_host": 0, "leaf_up": 0, "spine_down": 0}
    for sw in topo.switches:
        for port in topo.ports(sw.name):
            drops, sent = after[(sw.name, port.name)]
            d0, s0 = before[(sw.name, port.name)]
            kind = "to_host" if port.kind != "fabric" else (
                "leaf_up" if sw.role == "leaf" else "spine_down")
            by_kind[kind] += drops - d0
            ports.setdefault(sw.name, {})[port.name] = {"drops": drops - d0, "sent_bytes": sent - s0,
                                                        "to": port.peer, "kind": kind}
    return {"by_kind": by_kind, "ports": ports}


# --- CPU guard -------------------------------------------------------------------------
#: /proc/stat's per-CPU columns (proc(5)): user nice system idle iowait irq softirq steal
_IDLE, _IOWAIT, _SOFTIRQ, _USED_COLUMNS = 3, 4, 6, 8


def read_cpu_stat() -> dict[str, tuple[int, int, int]]:
    """{"all" | "cpu0" | "cpu1" ...: (busy, total, softirq) jiffies} from
    /proc/stat. Softirq is where the fabric is forwarded: a veth's receive,
    the bridges, the tc/BPF programs and the qdiscs run in NET_RX/NET_TX
    softirq (in ksoftirqd too, which the kernel counts as softirq time)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            name, *rest = line.split()
            fields = [int(x) for x in rest]
            idle = fields[_IDLE] + (fields[_IOWAIT] if len(fields) > _IOWAIT else 0)
            total = sum(fields[:_USED_COLUMNS])   # guest time is already inside user/nice
            softirq = fields[_SOFTIRQ] if len(fields) > _SOFTIRQ else 0
            out["all" if name == "cpu" else name] = (total - idle, total, softirq)
    return out


def cpu_window(prev: dict, cur: dict) -> dict:
    """One sampling window's CPU shares from two read_cpu_stat() readings:
    ``cpu_busy`` (all CPUs together), ``softirq`` (all CPUs' softirq share of
    their time: the forwarding CPU), and per CPU ``busy_per_cpu`` and
    ``softirq_per_cpu`` (a share of that CPU's time)."""
    def shares(name):
        db, dt, ds = (c - p for c, p in zip(cur[name], prev[name]))
        return (db / dt, ds / dt) if dt > 0 else (0.0, 0.0)
    cpus = sorted((n for n in cur if n != "all" and n in prev), key=lambda n: int(n[3:]))
    busy, soft = shares("all")
    per = [shares(n) for n in cpus]
    return {"cpu_busy": busy, "softirq": soft, "busy_per_cpu": [round(b, 4) for b, _ in per],
            "softirq_per_cpu": [round(s, 4) for _, s in per]}


class Sampler:
    """Samples CPU busy and softirq shares (all CPUs and each one) and
    host-link byte counters every ``interval_s`` in a thread, for the CPU
    guard."""

    def __init__(self, ports: PortCounters | None, host_ports: dict, interval_s=SAMPLE_INTERVAL_S):
        self.ports, self.host_ports, self.interval_s = ports, host_ports, interval_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self):
        links = self.ports.read() if self.ports is not None else {}
        return time.monotonic(), read_cpu_stat(), links

    def _run(self) -> None:
        prev = self._read()
        while not self._stop.wait(self.interval_s):
            cur = self._read()
            dt = cur[0] - prev[0]
            util = {}
            for key, rate in self.host_ports.items():
                if key in cur[2] and key in prev[2]:
                    rx = cur[2][key][0] - prev[2][key][0]
                    tx = cur[2][key][1] - prev[2][key][1]
                    util["/".join(key)] = max(rx, tx) * 8 / (dt * rate)
            self.samples.append({"t_s": cur[0], **cpu_window(prev[1], cur[1]),
                                 "host_link_util": util})
            prev = cur

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def training_span_ns(events: list[dict]) -> tuple[int, int] | None:
    """(first tensor handed to a socket, last one received), CLOCK_MONOTONIC ns."""
    tx = [e["t_ns"] for e in events if e["ev"] == "tx"]
    rx = [e["t_ns"] for e in events if e["ev"] == "rx"]
    return (min(tx), max(rx)) if tx and rx else None


def training_span_s(events: list[dict]) -> tuple[float, float] | None:
    """(first tensor handed to a socket, last one received), monotonic seconds."""
    span = training_span_ns(events)
    return (span[0] / 1e9, span[1] / 1e9) if span else None


#: the rule's text, recorded with every verdict (and the version: results
#: files of the old rule are re-judged by :func:`rejudge`)
GUARD_RULE = (f"flag when >= {CPU_SATURATED_SHARE:.0%} of the {SAMPLE_INTERVAL_S:g} s windows "
              f"while traffic flows are saturated: the CPUs together >= {CPU_BUSY_SATURATED:.0%} "
              f"busy, or one CPU >= {CPU_BUSY_SATURATED:.0%} busy with at least "
              f"{FORWARDING_PINNED:.0%} of its time in softirq (the forwarding pinned it); "
              f"whatever the links carried")
GUARD_VERSION = 2


def _forwarding_pinned(s: dict) -> bool:
    return any(b >= CPU_BUSY_SATURATED and f >= FORWARDING_PINNED
               for b, f in zip(s.get("busy_per_cpu") or (), s.get("softirq_per_cpu") or ()))


def cpu_guard(samples: list[dict], have_links: bool = True,
              span_s: tuple[float, float] | None = None) -> dict:
    """Flag a run whose windows the CPUs saturated (GUARD_RULE), whatever
    the links did: a link at line rate in a saturated window does not
    excuse it (a parameter-server incast puts one there in almost every
    window, and the forwarding still waited for a CPU). ``span_s``: only
    windows that end inside it count (the traffic: the nodes' start-up,
    Python importing, is busy CPU with no traffic). ``have_links`` is kept
    for the callers; it no longer changes the verdict. Samples without the
    per-CPU softirq fields (results files from before them) are judged on
    the all-CPU condition alone."""
    if span_s is not None:
        samples = [x for x in samples if span_s[0] < x["t_s"] <= span_s[1] + SAMPLE_INTERVAL_S]
    if not samples:
        return {"rule": GUARD_RULE, "version": GUARD_VERSION, "flagged": False, "windows": 0,
                "reason": "run shorter than one window", "cpu_busy_mean": None}
    measured = all("softirq" in s for s in samples)
    busy = [s for s in samples if s["cpu_busy"] >= CPU_BUSY_SATURATED]
    pinned = [s for s in samples if _forwarding_pinned(s)]
    saturated = [s for s in samples if s["cpu_busy"] >= CPU_BUSY_SATURATED or _forwarding_pinned(s)]
    share = len(saturated) / len(samples)
    flagged = share >= CPU_SATURATED_SHARE
    peak = max((max(s["host_link_util"].values(), default=0.0) for s in saturated
                if s.get("host_link_util")), default=None)
    soft = [s["softirq"] for s in samples if "softirq" in s]
    reason = (f"CPUs saturated in {len(saturated)}/{len(samples)} windows ({share:.0%})"
              + (f", {len(pinned)} with one CPU pinned by forwarding" if measured else
                 " (softirq not recorded: all-CPU busy share only)")
              + ("; the CPU, not the network, may have set the rates" if flagged else ""))
    return {"rule": GUARD_RULE, "version": GUARD_VERSION, "flagged": flagged,
            "windows": len(samples), "saturated_windows": len(saturated),
            "saturated_share": share, "cpu_busy_windows": len(busy),
            "forwarding_pinned_windows": len(pinned) if measured else None,
            "softirq_measured": measured,
            "cpu_busy_mean": statistics.fmean(s["cpu_busy"] for s in samples),
            "cpu_busy_max": max(s["cpu_busy"] for s in samples),
            "softirq_mean": statistics.fmean(soft) if measured else None,
            "softirq_max_cpu": max((max(s["softirq_per_cpu"], default=0.0) for s in samples),
                                   default=None) if measured else None,
            "peak_host_link_util_when_saturated": peak, "reason": reason}


def rejudge(res: dict) -> dict:
    """A results file's CPU guard under the current rule. Files judged by
    it already keep their verdict; older ones (the rule that excused a
    window with a host link at 80% of its rate, and no softirq samples) are
    judged again from what they recorded: the windows while traffic flowed
    and how many of them had the CPUs >= CPU_BUSY_SATURATED busy, i.e. the
    saturated share without the link excuse. The old verdict is kept under
    ``old``."""
    g = dict((res.get("summary") or {}).get("cpu_guard") or {})
    if g.get("version") == GUARD_VERSION:
        return g
    old = {"flagged": bool((res.get("flags") or {}).get("cpu_bound", g.get("flagged", False))),
           "reason": g.get("reason")}
    windows, busy = g.get("windows"), g.get("saturated_windows")
    if busy is None and windows and res.get("cpu_samples"):
        # a guard from before the count was recorded: the windows it used are
        # not known, so every sample counts (start-up included: conservative)
        samples = res["cpu_samples"]
        windows, busy = len(samples), sum(s["cpu_busy"] >= CPU_BUSY_SATURATED for s in samples)
    if not windows or busy is None:
        return {**g, "version": GUARD_VERSION, "rule": GUARD_RULE, "flagged": old["flagged"],
                "old": old, "rejudged": False,
                "reason": (g.get("reason") or "") + " (not re-judged: no window counts recorded)"}
    share = busy / windows
    flagged = share >= CPU_SATURATED_SHARE
    return {**g, "version": GUARD_VERSION, "rule": GUARD_RULE, "flagged": flagged, "old": old,
            "rejudged": True, "windows": windows, "saturated_windows": busy,
            "saturated_share": share, "softirq_measured": False,
            "reason": f"CPUs saturated in {busy}/{windows} windows ({share:.0%}; re-judged from the "
                      f"recorded counts, softirq not recorded: all-CPU busy share only, no link "
                      f"excuse)" + ("; the CPU, not the network, may have set the rates"
                                    if flagged else "")}


# --- offered load ----------------------------------------------------------------------
#: Offered uplink load (``summary.offered_load``: training + background bytes a
#: leaf's hosts offered to other leaves, over the leaf's uplink capacity) at or
#: above this is past saturation: more bytes were offered than the uplinks can
#: carry in the span, whatever the paths chosen, so queues grow until packets
#: drop; differences between schemes there are drops and timeouts, not path
#: choice (docs/experiments.md, "Offered load").
OFFERED_SATURATION = 1.0


def leaf_uplink_capacity_bps(topo) -> dict[str, float]:
    """Per leaf (a switch with hosts): the sum of the rates of its up links
    into the fabric, from ``topo.links`` as
    workload.background.uplink_capacity_bps (which is their sum over leaves)."""
    cap = {h.leaf: 0.0 for h in topo.hosts}
    for link in topo.links:
        if link.kind == "fabric" and link.up:
            for end in {link.a, link.b}:
                if end in cap:
                    cap[end] += link.rate_bps
    return dict(sorted(cap.items()))


def offered_load(topo, node_hosts: list[str], tensors: list[dict], flows: list[dict] | None,
                 span_ns: tuple[int, int] | None, uplinks: dict | None = None,
                 drops: dict | None = None) -> dict | None:
    """Per leaf, the bytes its hosts offered to hosts on other leaves during
    the training span (first tensor handed to a socket to the last one
    received, ``span_ns``, CLOCK_MONOTONIC ns like every tensor and
    background time), each over span x the leaf's uplink capacity
    (:func:`leaf_uplink_capacity_bps`):

    * ``training``: tensors (records of :func:`join_tensors`; ``src``/``dst``
      node ids, ``node_hosts[id]`` their hosts) handed to their socket in the
      span whose sender and receiver are on different leaves, by the bytes the
      application handed to TCP (header included): demand, not
      retransmissions;
    * ``background``: background flows (FlowRecord dicts) from the leaf's hosts
      to other leaves planned to start in the span, by their planned size;
    * ``total``: their sum.

    Beside them, what the uplinks measured, over the same span x capacity
    (frames: headers, ACKs and retransmissions included; the counters are
    read before the nodes start and after they end, a little more than the
    span): ``forwarded``, the bytes the data path handed to them (``uplinks``:
    :func:`uplink_spread`'s record, before the queues, so drops included);
    ``sent``, the bytes their queues sent on (``drops``: :func:`port_drops`'s
    record); ``leaf_up_drops``, the packets those queues dropped. Each None
    without its counters. Plus the largest total over the leaves
    (``max_total``) and its leaf (``max_leaf``). None without a span (no
    tensor received)."""
    if span_ns is None:
        return None
    t0, t1 = span_ns
    span_s = (t1 - t0) / 1e9
    leaf_of = {h.name: h.leaf for h in topo.hosts}
    cap = leaf_uplink_capacity_bps(topo)
    training = dict.fromkeys(cap, 0)
    background = dict.fromkeys(cap, 0)
    for t in tensors:
        src, dst = leaf_of[node_hosts[t["src"]]], leaf_of[node_hosts[t["dst"]]]
        if src != dst and t0 <= t["t_start_ns"] <= t1:
            training[src] += t["bytes"]
    # Background bytes: a flow's planned size when its planned start lies in
    # the span, not its bytes prorated over [start, end]. Offered load is
    # demand, like the tensors' bytes and like `load` itself (Poisson arrivals
    # of planned sizes); a flow's end stretches as the uplinks congest, so
    # prorating would push bytes out of the span just when the fabric is past
    # saturation (and a censored flow has no end). With Poisson arrivals the
    # bytes of flows straddling the span's start balance, on average, those
    # of flows running past its end.
    for f in flows or ():
        src, dst = leaf_of[f["src"]], leaf_of[f["dst"]]
        if src != dst and t0 <= f["planned_start_ns"] <= t1:
            background[src] += f["size_bytes"]
    queues = {sw: [p for p in ports.values() if p["kind"] == "leaf_up"]
              for sw, ports in ((drops or {}).get("ports") or {}).items()}
    leaves = {}
    for leaf, c in cap.items():
        carried = span_s * c / 8          # bytes the leaf's uplinks can carry in the span

        def frac(b, carried=carried):
            return b / carried if carried > 0 else None
        fwd = ((uplinks or {}).get("leaves") or {}).get(leaf)
        q = queues.get(leaf)
        leaves[leaf] = {
            "capacity_bps": c, "training_bytes": training[leaf],
            "background_bytes": background[leaf],
            "training": frac(training[leaf]), "background": frac(background[leaf]),
            "total": frac(training[leaf] + background[leaf]),
            "forwarded": frac(sum(fwd["tx_bytes"].values())) if fwd else None,
            "sent": frac(sum(p["sent_bytes"] for p in q)) if q else None,
            "leaf_up_drops": sum(p["drops"] for p in q) if q else None}
    rated = [(v["total"], leaf) for leaf, v in leaves.items() if v["total"] is not None]
    top = max(rated, key=lambda r: r[0], default=(None, None))
    return {"span_s": span_s, "background_bytes": "planned size of flows planned to start in the span",
            "leaves": leaves, "max_total": top[0], "max_leaf": top[1]}
