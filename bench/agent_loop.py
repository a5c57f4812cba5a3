"""`talb bench agent`: what one agent window costs for N switch ports, and
the highest window rate the loop sustains, with the loop's CPU share.

No program is loaded: each switch is a namespace whose ports are veth ends
with the testbed's link emulation (HTB root, bfifo leaf; the peers sit in
another namespace, as on the fabric), and a set of maps with the data
path's exact layout (sizes from bpf/include/talb/maps.h and the schemes'
headers), pinned on the project's bpffs and programmed by ``program_switch`` (groups of 8 ports).
The agent opens them as it opens a testbed's, so a window does all its
real work: link notifications, counter reads, qdisc dumps (measured mode),
PCM maths and publishing (one batch read and one batch write of the
groups map per switch). Switches have at most TALB_MAX_PORTS (64) ports:
256 ports are 4 switches.

No packet moves either, so every port is idle and the PCMs never change:
publishing then writes nothing. "Loaded" runs make the counters move
instead (:class:`SyntheticTraffic`: 0..8 full frames per port and window,
written into ``port_stats`` between windows, outside the timing), so that
every group's PCMs -- and its published schedule -- change every window:
the worst case for publishing.

Measured, per port count:
* ms per window (wall, and the loop thread's CPU time): read strategy (one
  BPF_MAP_LOOKUP_BATCH per switch vs a lookup per port) x PCM delay (model
  vs measured), the same without publishing (what publishing costs), idle
  and loaded, and the cost of the port_stats read alone (plus
  ``read_port_stats``, the per-key reader of datapath/control.py, for
  reference);
* sustained rate: the loop run for a second at shrinking windows; the
  shortest window at which it misses at most 1% of its slots (slow
  windows, i.e. over budget but caught up with, are reported beside), and
  at each window the loop's CPU time per wall second (``cpu_share``; at a
  1 ms window: ``cpu_share_at_1000_per_s``), idle and loaded.
"""
from __future__ import annotations

import ctypes
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import threading
import time

from agent.config import AgentConfig
from agent.loop import Agent
from agent.routing import PortSpec
from agent.switch import SwitchMonitor
from common import paths
from common.c_constants import CONST, TALB_MAX_GROUP_PORTS, TALB_MAX_PORTS
from datapath import bpf_syscall as sc
from datapath.control import program_switch, read_port_stats
from datapath.loader import ensure_bpffs
from datapath.maps import MAP_SPECS, SwitchMaps, possible_cpus
from datapath.statsread import PerCpuArrayReader

RATE = 100_000_000
QUEUE = 150_000
WINDOWS_MS = (20.0, 10.0, 5.0, 2.0, 1.0, 0.5)


def _max_entries() -> dict[str, int]:
    """Each map's size as the switch's source declares it -- bpf/include/talb/maps.h
    for the shared maps, each scheme's header for its own (a size is a number
    or a constant of constants.h, possibly a product of them)."""
    from datapath.loader import SWITCH_SRC, expand_source

    text = expand_source(SWITCH_SRC)
    sizes = {}
    for name, size in re.findall(r'^TALB_MAP\("[^"]+",[^,]+,[^,]+,\s*(\w+),\s*([^;]+)\);',
                                 text, re.M):
        terms = re.findall(r"\w+", size)
        value = 1
        for t in terms:
            value *= int(t) if t.isdigit() else CONST[t]
        sizes[name] = value
    missing = [n for n in MAP_SPECS if n not in sizes]
    if missing:
        raise RuntimeError(f"{SWITCH_SRC} and its headers declare no size for map(s) {', '.join(missing)}")
    return sizes


def pin_switch_maps(pin_dir) -> None:
    """A switch's maps with the data path's exact layout, empty, pinned in
    ``pin_dir`` (made if missing) as a loaded switch pins them; no program.
    Remove them with shutil.rmtree."""
    pin_dir.mkdir(parents=True, exist_ok=True)
    sizes = _max_entries()
    for mname, (kt, vt, mtype) in MAP_SPECS.items():
        fd = sc.map_create(mtype, ctypes.sizeof(kt), ctypes.sizeof(vt), sizes[mname], mname[:15])
        try:
            sc.obj_pin(fd, pin_dir / mname)
        finally:
            os.close(fd)


class _FixedRouting:
    """Ports as built here; links never change during a bench."""

    def __init__(self, ports: dict[str, list[PortSpec]]):
        self._ports = ports

    def ports(self, switch):
        return self._ports[switch]

    def sync(self, watchers, maps):
        return []


class BenchFabric:
    """``n_ports`` ports over ceil(n/64) switch namespaces, with pinned maps."""

    def __init__(self, n_ports: int, tag: str):
        self.tag = tag
        self.switches: dict[str, list[PortSpec]] = {}
        self.sink = f"{tag}-sink"
        self.pin_root = paths.BPFFS_DIR / tag
        self._namespaces = [self.sink]
        _ip("netns", "add", self.sink)
        left, k = n_ports, 0
        try:
            while left > 0:
                n = min(left, TALB_MAX_PORTS)
                self._switch(f"sw{k}", n)
                left -= n
                k += 1
        except BaseException:
            self.close()
            raise

    def netns(self, switch: str) -> str:
        return f"{self.tag}-{switch}"

    def pin_dir(self, switch: str):
        return self.pin_root / switch

    def _switch(self, name: str, n: int) -> None:
        netns = self.netns(name)
        _ip("netns", "add", netns)
        self._namespaces.append(netns)
        links = [f"link add p{i} type veth peer name {name}q{i} netns {self.sink}" for i in range(n)]
        links += [f"link set p{i} up" for i in range(n)]
        links += [f"link set {name}q{i} up" for i in range(n)]
        _batch(["ip", "-n", netns, "-batch", "-"], links[:2 * n])
        _batch(["ip", "-n", self.sink, "-batch", "-"], links[2 * n:])
        tc = []
        for i in range(n):
            tc += [f"qdisc add dev p{i} root handle 1: htb default 10",
                   f"class add dev p{i} parent 1: classid 1:1 htb rate {RATE} ceil {RATE}",
                   f"class add dev p{i} parent 1:1 classid 1:10 htb rate {RATE} ceil {RATE}",
                   f"qdisc add dev p{i} parent 1:10 handle 10: bfifo limit {QUEUE}"]
        _batch(["tc", "-n", netns, "-batch", "-"], tc)
        pin = self.pin_dir(name)
        pin_switch_maps(pin)
        index = _ifindexes(netns)
        rows = [(f"p{i}", index[f"p{i}"], False, True) for i in range(n)]
        groups = {}
        for g in range(0, n, TALB_MAX_GROUP_PORTS):
            members = [index[f"p{i}"] for i in range(g, min(n, g + TALB_MAX_GROUP_PORTS))]
            groups[f"198.18.{len(self.switches)}.{g + 1}"] = members
        with SwitchMaps(pin) as maps:
            program_switch(maps, rows, groups)
        self.switches[name] = [PortSpec(f"p{i}", RATE, "fabric", QUEUE) for i in range(n)]

    def agent(self, config: AgentConfig) -> Agent:
        monitors = {}
        try:
            for sw, specs in self.switches.items():
                monitors[sw] = SwitchMonitor(sw, self.netns(sw), self.pin_dir(sw), config)
                monitors[sw].bind(specs)
        except BaseException:
            for m in monitors.values():
                m.close()
            raise
        return Agent(monitors, _FixedRouting(self.switches), config)

    def close(self) -> None:
        for ns in self._namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.pin_root, ignore_errors=True)


class SyntheticTraffic:
    """Traffic without packets: each :meth:`step` adds a window's worth of
    frames to every port's ``port_stats`` (CPU 0's slot, one
    BPF_MAP_UPDATE_BATCH per switch), so that U, E[W] and the PCMs change
    from one window to the next, as under load. Port i of a switch sends
    0..8 full frames a window (100 Mbit/s carries ~8 in 1 ms), its mean
    rising with i, from a seeded generator: every run the same sequence."""

    FRAME = 1514
    FIELDS = 4  # struct port_stats: rx_packets, rx_bytes, tx_packets, tx_bytes

    def __init__(self, fabric: BenchFabric, seed: int = 1):
        self._rng = random.Random(seed)
        self._switches = []
        ncpu = possible_cpus()
        for sw, specs in fabric.switches.items():
            n = len(specs)
            fd = sc.obj_get(fabric.pin_dir(sw) / "port_stats")
            batch = sc.MapBatch(fd, 4, self.FIELDS * 8 * ncpu, n, f"{sw}/port_stats")
            keys = memoryview(batch.keys).cast("B").cast("I")
            for i in range(n):
                keys[i] = i
            values = memoryview(batch.values).cast("B").cast("Q")
            self._switches.append((fd, batch, values, n, ncpu))

    def step(self) -> None:
        rng, f = self._rng, self.FIELDS
        for _fd, batch, values, n, ncpu in self._switches:
            for i in range(n):
                k = min(8, int(rng.random() * (2 + 8 * i / n)))
                base = i * ncpu * f  # CPU 0's slot of entry i
                values[base + 2] += k
                values[base + 3] += k * self.FRAME
            batch.update(n)

    def close(self) -> None:
        for fd, *_ in self._switches:
            os.close(fd)
        self._switches = []


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _batch(argv: list[str], lines: list[str]) -> None:
    r = subprocess.run(argv, input="\n".join(lines) + "\n", text=True, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()[-300:]}")


def _ifindexes(netns: str) -> dict[str, int]:
    out = subprocess.run(["ip", "-n", netns, "-o", "link"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split(":")[1].strip().split("@")[0]: int(line.split(":")[0])
            for line in out.splitlines()}


def _ms_per_window(agent: Agent, windows: int, publish: bool = True,
                   traffic: SyntheticTraffic | None = None) -> tuple[float, float]:
    """(wall ms, CPU ms) per window, the windows back to back; with
    ``traffic``, counters move between windows (outside the timing)."""
    for m in agent.monitors.values():
        m.publishes = publish
    agent.step(time.monotonic())  # prime the windows (first reading)
    wall = cpu = 0.0
    for _ in range(windows):
        if traffic is not None:
            traffic.step()
        t, c = time.perf_counter(), time.thread_time()
        agent.step(time.monotonic())
        cpu += time.thread_time() - c
        wall += time.perf_counter() - t
    return wall / windows * 1e3, cpu / windows * 1e3


def _read_cost_us(fabric: BenchFabric, strategy: str, repeat: int = 2000) -> float:
    readers, maps = [], []
    for sw, specs in fabric.switches.items():
        m = SwitchMaps(fabric.pin_dir(sw))
        maps.append(m)
        readers.append(PerCpuArrayReader(m.port_stats, len(specs), strategy))
    try:
        start = time.perf_counter()
        for _ in range(repeat):
            for r in readers:
                r.read()
        return (time.perf_counter() - start) / repeat * 1e6
    finally:
        for m in maps:
            m.close()


def _control_read_cost_us(fabric: BenchFabric, repeat: int = 200) -> float:
    maps = [SwitchMaps(fabric.pin_dir(sw)) for sw in fabric.switches]
    try:
        start = time.perf_counter()
        for _ in range(repeat):
            for m in maps:
                read_port_stats(m)
        return (time.perf_counter() - start) / repeat * 1e6
    finally:
        for m in maps:
            m.close()


def python_window(agent: Agent) -> None:
    """Switch ``agent``'s monitors to the Python window: counters read and
    summed in Python (statsread), deltas in window.ColumnWindow, the model
    and PCMs through pcm.PortModel/GroupPcm, publication through
    GroupPublisher's Python glue (its C parts kept) -- the agent as it was
    before the window became two C calls, for comparisons in one run."""
    for m in agent.monitors.values():
        m._native = None
        m._publisher._c_publish = None


def _one_run(fabric: BenchFabric, pcm_delay: str, window_ms: float, seconds: float,
             traffic: SyntheticTraffic | None, native: bool = True) -> dict:
    """The real loop for ``seconds`` at ``window_ms``: windows, slow ones,
    missed slots and the loop thread's CPU time per wall second (less the
    synthetic traffic's, when ``traffic`` moves the counters after every
    window)."""
    config = AgentConfig(window_s=window_ms / 1e3, pcm_delay=pcm_delay,
                         stats_interval_s=max(0.1, window_ms / 1e3))
    agent = fabric.agent(config)
    if not native:
        python_window(agent)
    counts = {"windows": 0, "slow": 0, "missed": 0}
    extra = [0.0]  # CPU seconds spent moving the synthetic counters

    class Obs:
        def window_done(self, duration_s, lag_s, slow, missed):
            counts["windows"] += 1
            counts["slow"] += slow
            counts["missed"] += missed
            if traffic is not None:
                c = time.thread_time()
                traffic.step()
                extra[0] += time.thread_time() - c

        def window_failed(self, exc):
            raise exc

    agent.observer = Obs()
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    wall, cpu = time.monotonic(), time.thread_time()
    try:
        agent.run(stop)
    finally:
        cpu = time.thread_time() - cpu - extra[0]
        wall = time.monotonic() - wall
        agent.close()
    slots = counts["windows"] + counts["missed"]
    share = counts["missed"] / slots if slots else 1.0
    return {"window_ms": window_ms, **counts, "missed_share": round(share, 4),
            "ok": share <= 0.01, "cpu_share": round(cpu / wall, 4)}


def _sustained(fabric: BenchFabric, pcm_delay: str, seconds: float = 1.0,
               traffic: SyntheticTraffic | None = None) -> dict:
    """Run the real loop at shrinking windows; per window size the share of
    slow windows and of missed slots, and the loop's CPU time per wall
    second. ``cpu_share_at_1000_per_s``: at 1 ms when sustained (else None);
    ``cpu_share_1ms``: at 1 ms all the same."""
    rows = [_one_run(fabric, pcm_delay, window_ms, seconds, traffic) for window_ms in WINDOWS_MS]
    best = min((r["window_ms"] for r in rows if r["ok"]), default=None)
    at_1ms = next((r for r in rows if r["window_ms"] == 1.0), None)
    return {"runs": rows, "shortest_window_ms": best,
            "max_rate_per_s": round(1e3 / best) if best else None,
            "cpu_share_at_1000_per_s": at_1ms["cpu_share"] if at_1ms and at_1ms["ok"] else None,
            "cpu_share_1ms": at_1ms["cpu_share"] if at_1ms else None}


#: the 1 ms runs of :func:`shares_at_1ms`: (name, PCM delay, counters moving, C window)
SHARE_CASES = (("loaded", "model", True, True), ("loaded/python", "model", True, False),
               ("idle", "model", False, True), ("idle/python", "model", False, False),
               ("measured", "measured", True, True),
               ("measured/python", "measured", True, False))


def shares_at_1ms(fabric: BenchFabric, traffic: SyntheticTraffic, runs: int,
                  seconds: float = 1.0) -> dict:
    """The loop's CPU share at 1,000 windows/s, ``runs`` rounds of every case
    of :data:`SHARE_CASES` in turn (the C window and the Python window
    interleaved, so a machine's drift hits both): per case the runs, their
    median, min and max, and whether every run kept its slots; per C case
    the median ratio to its Python twin, round by round."""
    per = {name: [] for name, *_ in SHARE_CASES}
    for _ in range(runs):
        for name, mode, moving, native in SHARE_CASES:
            per[name].append(_one_run(fabric, mode, 1.0, seconds,
                                      traffic if moving else None, native))
    out = {}
    for name, rows in per.items():
        shares = [r["cpu_share"] for r in rows]
        out[name] = {"runs": rows, "median": round(statistics.median(shares), 4),
                     "min": min(shares), "max": max(shares),
                     "sustained": all(r["ok"] for r in rows)}
    for name in [n for n, *_ in SHARE_CASES if not n.endswith("/python")]:
        pairs = [a["cpu_share"] / b["cpu_share"]
                 for a, b in zip(per[name], per[f"{name}/python"]) if b["cpu_share"] > 0]
        out[name]["ratio_to_python"] = round(statistics.median(pairs), 3) if pairs else None
    return out


def run_all(port_counts=(16, 64, 256), *, windows: int = 1000, runs: int = 1,
            say=print) -> dict:
    ensure_bpffs()
    machine = {"kernel": platform.release(), "cpus": os.cpu_count()}
    say(f"machine: kernel {machine['kernel']}, {machine['cpus']} CPUs")
    results = {"machine": machine, "ports": {}}
    for n in port_counts:
        fabric = BenchFabric(n, f"bench{os.getpid() % 100000}p{n}")
        try:
            r = {"switches": len(fabric.switches),
                 "port_stats_read_us": {s: round(_read_cost_us(fabric, s), 1)
                                        for s in ("batch", "per_key")},
                 "control_read_port_stats_us": round(_control_read_cost_us(fabric), 1),
                 "ms_per_window": {}}
            traffic = SyntheticTraffic(fabric)
            r["cpu_ms_per_window"] = {}
            try:
                for strategy, mode, publish, moving in (
                        ("batch", "model", True, False), ("batch", "measured", True, False),
                        ("per_key", "model", True, False), ("batch", "model", False, False),
                        ("batch", "model", True, True), ("batch", "model", False, True)):
                    agent = fabric.agent(AgentConfig(read_strategy=strategy, pcm_delay=mode))
                    try:
                        key = (f"{strategy}/{mode}" + ("" if publish else "/no_publish")
                               + ("/loaded" if moving else ""))
                        wall, cpu = _ms_per_window(agent, windows, publish,
                                                   traffic if moving else None)
                        r["ms_per_window"][key] = round(wall, 3)
                        r["cpu_ms_per_window"][key] = round(cpu, 3)
                    finally:
                        agent.close()
                r["sustained"] = {mode: _sustained(fabric, mode) for mode in ("model", "measured")}
                r["sustained"]["model/loaded"] = _sustained(fabric, "model", traffic=traffic)
                r["share_at_1ms"] = shares_at_1ms(fabric, traffic, runs)
            finally:
                traffic.close()
        finally:
            fabric.close()
        results["ports"][n] = r
        w, sus = r["ms_per_window"], r["sustained"]

        def share(mode):
            s = sus[mode]["cpu_share_1ms"]
            ok = sus[mode]["cpu_share_at_1000_per_s"] is not None
            return f"{s:.1%} of a core" + ("" if ok else " (slots missed)")

        say(f"{n:4d} ports ({r['switches']} switches): window {w['batch/model']:.3f} ms "
            f"(measured delay {w['batch/measured']:.3f} ms; per-key reads "
            f"{w['per_key/model']:.3f} ms; without publishing "
            f"{w['batch/model/no_publish']:.3f} ms); every port's counters moving "
            f"{w['batch/model/loaded']:.3f} ms (without publishing "
            f"{w['batch/model/no_publish/loaded']:.3f} ms); port_stats read "
            f"{r['port_stats_read_us']['batch']} us batched vs "
            f"{r['port_stats_read_us']['per_key']} us per key (control.read_port_stats "
            f"{r['control_read_port_stats_us']} us); sustained "
            f"{sus['model']['max_rate_per_s']} windows/s (model), "
            f"{sus['measured']['max_rate_per_s']} (measured), "
            f"{sus['model/loaded']['max_rate_per_s']} (model, loaded); CPU at 1000 windows/s: "
            f"{share('model')} (model), {share('measured')} (measured), "
            f"{share('model/loaded')} (model, loaded)")
        at = r["share_at_1ms"]

        def med(name):
            c = at[name]
            return f"{c['median']:.1%}" + ("" if c["sustained"] else " (slots missed)")
        say(f"{n:4d} ports, loop CPU share at 1000 windows/s, median of {runs} run(s) of 1 s "
            f"(C window / Python window, median ratio): loaded {med('loaded')} / "
            f"{med('loaded/python')} ({at['loaded']['ratio_to_python']}x), idle {med('idle')} / "
            f"{med('idle/python')} ({at['idle']['ratio_to_python']}x), measured delay "
            f"{med('measured')} / {med('measured/python')} "
            f"({at['measured']['ratio_to_python']}x)")
    return results
