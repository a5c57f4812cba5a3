"""The agent's parts one by one: counter windows, configuration errors, the
loop's schedule, counter reads (batch vs per key), the lean netlink reader
(against pyroute2), link state, process control and `talb top`.

Kernel-facing parts run against real maps and a namespace of their own; no
fabric is built here (tests/test_agent_live.py does that).
"""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from agent.config import AgentConfig, ConfigError
from agent.loop import Agent
from agent.metrics import AgentMetrics, decisions, drops
from agent.window import ColumnWindow, CounterWindow
from common import native
from datapath import bpf_syscall as sc
from datapath.maps import Map, possible_cpus
from datapath.statsread import PerCpuArrayReader
from datapath.structs import PortStats
from conftest import new_prefix, skip_or_fail

TALB = [sys.executable, "-m", "talb.cli"]


# --- counter windows ---------------------------------------------------------------
def test_window_deltas_over_the_real_time_between_readings():
    w = CounterWindow()
    assert w.advance(10.0, {"a": (100, 1)}) is None  # first reading: no window yet
    win = w.advance(10.007, {"a": (1600, 2), "b": (5, 5)})
    assert win.dt_s == pytest.approx(0.007)
    assert win.deltas == {"a": (1500, 1), "b": (0, 0)}  # a new key has no window yet
    assert w.advance(10.007, {"a": (1600, 2)}) is None  # the clock did not move


def test_window_counter_reset_counts_from_zero():
    w = CounterWindow()
    w.advance(1.0, {"a": (10_000, 10)})
    assert w.advance(2.0, {"a": (300, 2)}).deltas == {"a": (300, 2)}


def test_column_window_gives_the_counter_windows_deltas():
    """The agent's per-port columns: the same deltas as CounterWindow's dicts,
    including a counter that went back (map recreated) and ports rebound."""
    cw, col = CounterWindow(), ColumnWindow()
    readings = [(1.0, ("a", "b"), [[100, 5], [1, 1]]),
                (1.004, ("a", "b"), [[1600, 5], [2, 1]]),
                (1.004, ("a", "b"), [[1700, 5], [3, 1]]),     # the clock did not move
                (1.009, ("a", "b"), [[300, 3000], [1, 3]]),   # a went back: counts from zero
                (1.013, ("b", "c"), [[3100, 7], [4, 7]])]     # a gone, c new: no window yet
    for t, keys, cols in readings:
        win = cw.advance(t, {k: (cols[0][i], cols[1][i]) for i, k in enumerate(keys)})
        got = col.advance(t, keys, cols)
        if win is None:
            assert got is None
            continue
        dt, (db, dp) = got
        assert dt == win.dt_s
        assert {k: (db[i], dp[i]) for i, k in enumerate(keys)} == win.deltas


# --- configuration ---------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, option", [
    ({"window_s": 0}, "--window-ms"), ({"window_s": 11}, "--window-ms"),
    ({"w1": -1}, "--w1"), ({"w1": 0, "w2": 0}, "--w1/--w2"), ({"threshold": 1.5}, "--threshold"),
    ({"pcm_delay": "guess"}, "--pcm-delay"), ({"metrics_addr": "localhost:1"}, "--metrics-addr"),
    ({"metrics_port": 0}, "--metrics-port"), ({"log_level": "loud"}, "--log-level"),
    ({"read_strategy": "fast"}, "--read-strategy"), ({"stats_interval_s": 0.001}, "--stats-interval-ms"),
    ({"w2": float("nan")}, "--w2"),
])
def test_bad_configuration_names_the_option(kwargs, option):
    with pytest.raises(ConfigError, match=f"^{option}:"):
        AgentConfig(**kwargs)


@pytest.mark.parametrize("threshold, argv", [(None, []), ("max", ["--threshold", "max"]),
                                             (0.7, ["--threshold", "0.7"])])
def test_threshold_round_trips_to_the_detached_agents_argv(threshold, argv):
    """None (S = 1.0), "max" (each group's largest PCM) and a number survive
    start_background's trip through the command line."""
    from agent.daemon import config_argv
    from talb.cli_agent import _threshold

    args = config_argv(AgentConfig(threshold=threshold))
    tail = args[args.index("--threshold"):args.index("--threshold") + 2] if "--threshold" in args else []
    assert tail == argv
    assert _threshold(tail[1] if tail else None) == threshold


def test_cli_refuses_bad_options_before_touching_anything(root):
    prefix = new_prefix()
    for args, option in ((["--window-ms", "0"], "--window-ms"),
                         (["--threshold", "high"], "--threshold"),
                         (["--netns", "x"], "--netns")):
        r = subprocess.run([*TALB, "agent", "--prefix", prefix, *args], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 1 and f"error: {option}" in r.stderr, r.stderr
    r = subprocess.run([*TALB, "agent", "--prefix", prefix], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and f"no testbed with prefix '{prefix}'" in r.stderr, r.stderr
    from common import paths
    assert not paths.state_dir(prefix).exists()


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive loopback ports that are free now."""
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def test_default_metrics_port_taken_serves_on_the_next_free_one(monkeypatch):
    """No --metrics-port: the default, else the next free port of a bounded
    range (a second testbed's agent needs no flag); all taken, or an explicit
    port taken: an error naming --metrics-port and the value."""
    import socket
    import urllib.request

    from agent import config as agent_config
    from agent.daemon import AgentError, config_argv, serve_metrics

    base = _free_run(3)
    monkeypatch.setattr(agent_config, "DEFAULT_METRICS_PORT", base)
    monkeypatch.setattr(agent_config, "METRICS_PORT_TRIES", 3)
    assert list(AgentConfig().metrics_ports()) == [base, base + 1, base + 2]
    assert list(AgentConfig(metrics_port=base).metrics_ports()) == [base]
    assert "--metrics-port" not in config_argv(AgentConfig())   # the detached agent chooses too
    argv = config_argv(AgentConfig(metrics_port=base))
    assert argv[argv.index("--metrics-port") + 1] == str(base)
    held, served = socket.socket(), []
    try:
        held.bind(("127.0.0.1", base))
        held.listen()
        for want in (base + 1, base + 2):
            m = AgentMetrics()
            served.append(m)
            assert serve_metrics(m, AgentConfig()) == want
            with urllib.request.urlopen(f"http://127.0.0.1:{want}/metrics", timeout=5) as r:
                assert r.status == 200
        with pytest.raises(AgentError, match=f"^--metrics-port: ports {base}-{base + 2} on "
                                             f"127.0.0.1 are all in use"):
            serve_metrics(AgentMetrics(), AgentConfig())
        with pytest.raises(AgentError, match=f"^--metrics-port: cannot serve on "
                                             f"127.0.0.1:{base}: Address already in use"):
            serve_metrics(AgentMetrics(), AgentConfig(metrics_port=base))
    finally:
        held.close()
        for m in served:
            m.close()


# --- the loop's schedule -----------------------------------------------------------------
class _Observer:
    def __init__(self):
        self.windows = []
        self.failed = []

    def window_done(self, duration_s, lag_s, slow, missed):
        self.windows.append((duration_s, lag_s, slow, missed))

    def window_failed(self, exc):
        self.failed.append(exc)

    def switch_failed(self, switch, exc):
        self.failed.append((switch, exc))


class _FakeTime:
    """A clock that moves only when the loop waits (select) or a window works."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def select(self, r, w, x, timeout):
        self.now += timeout
        return [], [], []


class _ScriptedAgent(Agent):
    """An Agent without switches whose windows take scripted (fake) time."""

    def __init__(self, period, script, stop, clock):
        super().__init__({}, None, AgentConfig(window_s=period), observer=_Observer(), clock=clock)
        self.script, self.stop, self.starts = list(script), stop, []

    def step(self, now):
        self.starts.append(now)
        work = self.script.pop(0)
        if not self.script:
            self.stop.set()
        if work == "raise":
            raise RuntimeError("boom")
        self.clock.now += work


def test_loop_keeps_its_schedule_counts_slow_and_missed_windows(monkeypatch):
    import agent.loop

    T = 0.005
    clock = _FakeTime()
    monkeypatch.setattr(agent.loop, "select", clock)
    stop = threading.Event()
    a = _ScriptedAgent(T, [0.001, 0.001, 0.0125, 0.001, "raise", 0.006, 0.001, 0.001], stop, clock)
    t0 = clock.now
    a.run(stop)
    obs = a.observer
    assert len(obs.windows) == 8 and len(obs.failed) == 1
    # window 3 (slot 2) took 2.5 T, to 4.5 T: slot 3 is missed, slot 4 starts at
    # once, half a window late; window 6 (slot 6) overran by 0.2 T: slot 7 starts late
    assert [w[2] for w in obs.windows] == [False, False, True, False, False, True, False, False]
    assert [w[3] for w in obs.windows] == [0, 0, 1, 0, 0, 0, 0, 0]
    assert [round(w[1] / T, 3) for w in obs.windows] == [0, 0, 0, 0.5, 0, 0, 0.2, 0]
    # the schedule stays on the grid t0 + k T
    assert [round((s - t0) / T, 3) for s in a.starts] == [0, 1, 2, 4.5, 5, 6, 7.2, 8]
    assert obs.windows[2][0] == pytest.approx(0.0125)


class _Monitor:
    """A switch's window work as the loop sees it; ``fault`` raises in every window."""

    def __init__(self, name, fault=None):
        self.name, self.fault, self.maps, self.links = name, fault, None, None
        self.published, self.latest = [], None

    def poll_links(self):
        return False

    def housekeeping(self, read_qdiscs):
        pass

    def window(self, now, read_qdiscs):
        if self.fault is not None:
            raise self.fault
        self.published.append(now)
        from agent.switch import SwitchReading
        self.latest = SwitchReading(self.name, now, None, (), (), {}, "ecmp", None)
        return self.latest


class _NoRouting:
    def sync(self, watchers, maps, on_error=None):
        return []


def test_one_failing_switch_does_not_stop_the_others(caplog):
    """spine1's window raises every time (first and middle of three, then
    last): the others still publish in every window; each failure counts in
    talb_agent_switch_errors_total{switch="spine1"}; the log says it once,
    not once per window."""
    clock = _FakeTime()
    metrics = AgentMetrics()
    for order in (["spine1", "leaf0", "leaf1"], ["leaf0", "spine1", "leaf1"],
                  ["leaf0", "leaf1", "spine1"]):
        mons = {n: _Monitor(n, OSError(9, "Bad file descriptor") if n == "spine1" else None)
                for n in order}
        agent = Agent(mons, _NoRouting(), AgentConfig(window_s=0.005), observer=metrics,
                      clock=clock)
        caplog.clear()
        with caplog.at_level("ERROR", logger="talb.agent"):
            for _ in range(20):
                agent.step(clock())
                clock.now += 0.005
        assert len(mons["leaf0"].published) == 20 and len(mons["leaf1"].published) == 20, order
        assert set(agent.latest) == {"leaf0", "leaf1"}
        failed = [r for r in caplog.records if "spine1" in r.getMessage()]
        assert len(failed) == 1 and "Bad file descriptor" in failed[0].getMessage(), failed
    assert metrics.registry.get_sample_value("talb_agent_switch_errors_total",
                                             {"switch": "spine1"}) == 60
    assert metrics.registry.get_sample_value("talb_agent_switch_errors_total",
                                             {"switch": "leaf0"}) is None
    assert metrics.counts["switch_errors"] == 60 and metrics.counts["errors"] == 0


def test_a_persistent_switch_fault_is_logged_again_after_the_interval(caplog):
    from agent.loop import ERROR_LOG_INTERVAL_S

    clock = _FakeTime()
    mons = {"leaf0": _Monitor("leaf0", RuntimeError("gone"))}
    agent = Agent(mons, _NoRouting(), AgentConfig(window_s=0.005), clock=clock)
    with caplog.at_level("ERROR", logger="talb.agent"):
        for _ in range(3):
            agent.step(clock())
        clock.now += ERROR_LOG_INTERVAL_S
        agent.step(clock())
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 2 and "failed 2 more times" in msgs[1], msgs


def test_metrics_observer_counts_windows():
    m = AgentMetrics()
    m.window_done(0.001, 0.0, False, 0)
    m.window_done(0.02, 0.001, True, 3)
    m.window_failed(RuntimeError())
    m.switch_failed("leaf0", RuntimeError())
    assert m.counts == {"windows": 2, "slow": 1, "missed": 3, "errors": 1, "switch_errors": 1}


def test_decisions_and_drops_from_counters():
    counters = {"decision_ecmp": 10, "decision_single": 4, "talb_hit": 50, "talb_case1": 7,
                "talb_case2": 3, "talb_threshold": 2, "released": 99, "drop_strip_fail": 1,
                "drop_opt_position": 0, "pass_no_route": 5}
    assert sorted(decisions(counters)) == sorted([
        ("ecmp", "hash", 10), ("none", "single_port", 4), ("talb", "table_hit", 50),
        ("talb", "case1", 5), ("talb", "case1_threshold", 2), ("talb", "case2", 3)])
    assert sorted(drops(counters)) == [("opt_position", 0), ("strip_fail", 1)]


# --- counter reads -------------------------------------------------------------------------
def test_batch_and_per_key_reads_agree(root):
    ncpu = possible_cpus()
    fd = sc.map_create(sc.BPF_MAP_TYPE_PERCPU_ARRAY, 4, ctypes.sizeof(PortStats), 64, "t_ps")
    m = Map(fd, ctypes.c_uint32, PortStats)
    try:
        for i in range(64):
            raw = b"".join(bytes(PortStats(i, i * 10 + c, i * 100 + c, (i << 33) + c))
                           for c in range(ncpu))
            sc.map_update(fd, ctypes.c_uint32(i), raw)
        expect = [(i * ncpu, i * 10 * ncpu + sum(range(ncpu)), i * 100 * ncpu + sum(range(ncpu)),
                   (i << 33) * ncpu + sum(range(ncpu))) for i in range(40)]
        batch = PerCpuArrayReader(m, 40, "batch")
        per_key = PerCpuArrayReader(m, 40, "per_key")
        assert batch.read() == expect == per_key.read()
        columns = [list(col) for col in zip(*expect)]
        assert batch.columns((0, 1, 2, 3)) == columns == per_key.columns((0, 1, 2, 3))
        assert batch.columns((3, 2)) == [columns[3], columns[2]]
        assert PerCpuArrayReader(m, 40).strategy == "batch"  # this kernel has it
    finally:
        m.close()


# --- the config map's writers -------------------------------------------------------------
_CONFIG_WRITER = """
import sys
from pathlib import Path
from datapath import control
from datapath.maps import Map
from datapath.structs import TalbConfig
import ctypes

class Maps:
    pin_dir = Path(sys.argv[1])
    config = Map.from_pin(pin_dir / "config", ctypes.c_uint32, TalbConfig)

sys.stdin.readline()  # both start at once
for i in range(int(sys.argv[3])):
    if sys.argv[2] == "count":
        with control.config_update(Maps) as cfg:
            cfg.tensor_limit += 1
    elif sys.argv[2] == "scheme":
        control.set_scheme(Maps, ("talb", "ecmp")[i % 2])
    else:
        control.set_release(Maps, i % 2 == 0)
"""


@pytest.fixture
def config_pin(root):
    """A pinned config array (the data path's ``config`` map), alone in a
    directory on the project's bpffs."""
    from common import paths
    from datapath.structs import TalbConfig

    d = paths.BPFFS_DIR / f"{new_prefix()}cfg"
    d.mkdir(parents=True)
    fd = sc.map_create(sc.BPF_MAP_TYPE_ARRAY, 4, ctypes.sizeof(TalbConfig), 1, "t_cfg")
    try:
        sc.obj_pin(fd, d / "config")
        yield d
    finally:
        os.close(fd)
        (d / "config").unlink(missing_ok=True)
        d.rmdir()


def _writers(pin, *jobs):
    procs = [subprocess.Popen([sys.executable, "-c", _CONFIG_WRITER, str(pin), kind, str(n)],
                              stdin=subprocess.PIPE, text=True) for kind, n in jobs]
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.stdin.close()
        assert p.wait(timeout=120) == 0


def _read_config_pin(pin):
    from datapath.structs import TalbConfig

    m = Map.from_pin(pin / "config", ctypes.c_uint32, TalbConfig)
    try:
        return m[0]
    finally:
        m.close()


def test_concurrent_config_writers_lose_no_update(config_pin):
    """config[0] is one array value, replaced whole: three processes each
    read-modify-write it 400 times at once (through control.config_update,
    as every set_* does); no update is lost."""
    _writers(config_pin, ("count", 400), ("count", 400), ("count", 400))
    assert _read_config_pin(config_pin).tensor_limit == 1200


def test_scheme_and_release_set_at_once_both_stand(config_pin):
    """`talb scheme` and `talb release` from two shells at once: each
    command's last value is what the data path has (neither reverts the
    other's field)."""
    from common.c_constants import CFG_RELEASE_SK, SCHEMES

    for _ in range(3):
        _writers(config_pin, ("scheme", 301), ("release", 301))  # last: talb, release on
        cfg = _read_config_pin(config_pin)
        assert cfg.scheme == SCHEMES["talb"] and cfg.flags & CFG_RELEASE_SK, \
            (cfg.scheme, cfg.flags)
        _writers(config_pin, ("scheme", 300), ("release", 300))  # last: ecmp, release off
        cfg = _read_config_pin(config_pin)
        assert cfg.scheme == SCHEMES["ecmp"] and not cfg.flags & CFG_RELEASE_SK, \
            (cfg.scheme, cfg.flags)


# --- netlink and link state ------------------------------------------------------------------
@pytest.fixture
def netns(root):
    """A namespace with a veth pair va<->vb, HTB (with a bfifo leaf) on va."""
    name = f"{new_prefix()}-nl"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        def ip(*args):
            subprocess.run(["ip", "-n", name, *args], check=True)
        ip("link", "add", "va", "type", "veth", "peer", "name", "vb")
        ip("link", "set", "va", "up")
        ip("link", "set", "vb", "up")
        subprocess.run(["tc", "-n", name, "qdisc", "add", "dev", "va", "root", "handle", "1:",
                        "htb", "default", "10"], check=True)
        subprocess.run(["tc", "-n", name, "class", "add", "dev", "va", "parent", "1:", "classid",
                        "1:10", "htb", "rate", "10mbit"], check=True)
        subprocess.run(["tc", "-n", name, "qdisc", "add", "dev", "va", "parent", "1:10", "handle",
                        "10:", "bfifo", "limit", "30000"], check=True)
        ip("addr", "add", "10.9.0.1/24", "dev", "va")
        ip("addr", "add", "10.9.0.2/24", "dev", "vb")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_rtnl_dumps_match_pyroute2(netns):
    from pyroute2 import IPRoute

    from agent.rtnl import Rtnl

    # some traffic through a's HTB
    subprocess.run(["ip", "netns", "exec", netns, "ping", "-c", "3", "-i", "0.01", "-I", "va",
                    "10.9.0.2"], capture_output=True)
    r = Rtnl(netns)
    try:
        links, qdiscs = r.links(), r.root_qdiscs()
    finally:
        r.close()
    with IPRoute(netns=netns, flags=0) as ipr:
        want_links = {m["index"]: (m.get_attr("IFLA_IFNAME"), m["flags"]) for m in ipr.get_links()}
        want_q = {}
        for q in ipr.get_qdiscs():
            if q["parent"] == 0xFFFFFFFF:
                st = dict(q.get_attr("TCA_STATS2")["attrs"])
                want_q[q["index"]] = (st["TCA_STATS_QUEUE"]["backlog"], st["TCA_STATS_QUEUE"]["drops"],
                                      st["TCA_STATS_BASIC"]["bytes"], st["TCA_STATS_BASIC"]["packets"])
    assert {i: (link.name, link.flags) for i, link in links.items()} == want_links
    got = {i: (q.backlog_bytes, q.drops, q.bytes, q.packets) for i, q in qdiscs.items()}
    assert got == want_q
    va = next(i for i, link in links.items() if link.name == "va")
    assert qdiscs[va].packets > 0


N_PORTS = 200  # root qdisc messages of ~0.3 kB: the dump spans several receives


@pytest.fixture(scope="module")
def many_qdiscs(root, tmp_path_factory):
    """A namespace with N_PORTS veth pairs aN<->bN, an HTB root 1: on each
    aN (some packets through a0's), so that a qdisc dump spans several
    receives."""
    name = f"{new_prefix()}-nq"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        # quiet ports: no IPv6 (router solicitations, DAD) moving the counters
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], check=True)
        tmp_path = tmp_path_factory.mktemp("nq")
        links = tmp_path / "links"
        links.write_text("".join(f"link add a{i} type veth peer name b{i}\nlink set a{i} up\n"
                                 f"link set b{i} up\n" for i in range(N_PORTS)))
        subprocess.run(["ip", "-n", name, "-b", str(links)], check=True)
        qdiscs = tmp_path / "qdiscs"
        qdiscs.write_text("".join(f"qdisc add dev a{i} root handle 1: htb default 10\n"
                                  for i in range(N_PORTS)))
        subprocess.run(["tc", "-n", name, "-b", str(qdiscs)], check=True)
        subprocess.run(["ip", "-n", name, "addr", "add", "10.77.0.1/24", "dev", "a0"], check=True)
        # a permanent neighbour: no ARP probe moves a0's counters later
        subprocess.run(["ip", "-n", name, "neigh", "replace", "10.77.0.2", "dev", "a0", "lladdr",
                        "02:00:00:00:00:02", "nud", "permanent"], check=True)
        subprocess.run(["ip", "netns", "exec", name, "ping", "-c", "3", "-i", "0.01", "-w", "1",
                        "-I", "a0", "10.77.0.2"], capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _qdisc_truth(netns) -> dict:
    """{ifindex: (backlog, qlen, drops, bytes, packets)} of every aN's root,
    read by pyroute2 (datapath/qdisc_stats.py), one interface at a time."""
    from datapath.qdisc_stats import QdiscReader

    reader = QdiscReader(netns)
    try:
        out = {}
        for i in range(N_PORTS):
            q = reader.read(f"a{i}")
            out[reader._ifindex(f"a{i}")] = (q.backlog_bytes, q.backlog_packets, q.drops,
                                             q.sent_bytes, q.sent_packets)
        return out
    finally:
        reader._ipr.close()


def _ours(qdiscs) -> dict:
    return {i: (q.backlog_bytes, q.qlen, q.drops, q.bytes, q.packets) for i, q in qdiscs.items()}


def test_rtnl_dump_after_an_interrupted_dump_is_complete(many_qdiscs, monkeypatch):
    """A dump that fails half-way (here: parsing its fifth qdisc) leaves the
    rest of its replies in the socket; the next dump must be the whole,
    current table (pyroute2's), not the stale tail ending at the old DONE."""
    import agent.rtnl as rtnl

    truth = _qdisc_truth(many_qdiscs)
    assert len(truth) == N_PORTS and truth[min(truth)][4] > 0  # a0 sent the pings
    r = rtnl.Rtnl(many_qdiscs)
    try:
        parse, calls = rtnl._qdisc_stats, []

        def failing(*args):
            calls.append(1)
            if len(calls) == 5:
                raise ValueError("injected parse failure")
            return parse(*args)

        for _ in range(3):  # and again: every later dump starts clean
            monkeypatch.setattr(rtnl, "_qdisc_stats", failing)
            calls.clear()
            with pytest.raises(ValueError, match="injected"):
                r.root_qdiscs()
            monkeypatch.setattr(rtnl, "_qdisc_stats", parse)
            got = _ours(r.root_qdiscs())
            assert {i: got.get(i) for i in truth} == truth
            assert len(r.links()) == 2 * N_PORTS + 1  # lo too: the link dump is whole as well
    finally:
        r.close()
    assert _qdisc_truth(many_qdiscs) == truth  # the ports were quiet: one truth for all reads


def test_rtnl_skips_replies_to_another_request(many_qdiscs):
    """Replies of another sequence number in the socket (a link dump nobody
    read) are skipped: their DONE does not end the qdisc dump."""
    import agent.rtnl as rtnl

    truth = _qdisc_truth(many_qdiscs)
    r = rtnl.Rtnl(many_qdiscs)
    try:
        body = rtnl._IFINFO.pack(0, 0, 0, 0, 0)
        r.sock.send(rtnl._NLMSG.pack(rtnl._NLMSG.size + len(body), rtnl.RTM_GETLINK,
                                     rtnl.NLM_F_REQUEST | rtnl.NLM_F_DUMP, 4242, 0) + body)
        got = _ours(r.root_qdiscs())
        assert {i: got.get(i) for i in truth} == truth
    finally:
        r.close()


def test_link_watcher_sees_down_up_and_a_peer_losing_carrier(netns):
    from agent.linkstate import LinkWatcher
    from agent.rtnl import Rtnl

    rtnl = Rtnl(netns)
    w = LinkWatcher(netns, rtnl)
    try:
        assert w.up("va") and w.up("vb") and not w.poll()
        subprocess.run(["ip", "-n", netns, "link", "set", "vb", "down"], check=True)
        time.sleep(0.05)
        assert w.poll() and not w.up("vb") and not w.up("va")  # va: no carrier
        assert w.links["va"].flags & 0x1  # but still administratively up
        subprocess.run(["ip", "-n", netns, "link", "set", "vb", "up"], check=True)
        deadline = time.monotonic() + 2
        while not (w.up("va") and w.up("vb")) and time.monotonic() < deadline:
            time.sleep(0.01)
            w.poll()
        assert w.up("va") and w.up("vb")
        # a deleted port is down, and keeps its index (its groups can be rewritten)
        vb = w.ifindex("vb")
        subprocess.run(["ip", "-n", netns, "link", "del", "vb"], check=True)
        time.sleep(0.05)
        assert w.poll() and not w.up("vb") and not w.up("va") and w.ifindex("vb") == vb
    finally:
        w.close()
        rtnl.close()


class _LinksOnlyMonitor:
    """A switch whose only real part is its link watcher; each window takes
    ``work_s`` of wall time and polls nothing itself."""

    def __init__(self, links, work_s):
        from agent.switch import SwitchReading

        self.links, self.work_s, self.maps, self.windows = links, work_s, None, 0
        self.latest = SwitchReading("sw", 0.0, None, (), (), {}, "ecmp", None)

    def poll_links(self):
        return self.links.poll()

    def housekeeping(self, read_qdiscs):
        pass

    def window(self, now, read_qdiscs):
        self.windows += 1
        if self.work_s:
            time.sleep(self.work_s)

    def refresh_groups(self):
        pass

    def down_ports(self):
        return [n for n in ("va", "vb") if not self.links.up(n)]

    def close(self):
        pass


class _RecordingRouting:
    """Routing that records the link state each sync saw (a switch reprogrammed)."""

    def __init__(self):
        self.calls = []

    def sync(self, watchers, maps, on_error=None):
        self.calls.append({n: (w.up("va"), w.up("vb")) for n, w in watchers.items()})
        return list(watchers)


def _saw_vb_down(routing) -> bool:
    return any(not call["sw"][1] for call in routing.calls)


@pytest.mark.parametrize("late", [False, True], ids=["on_time", "late"])
def test_loop_follows_a_link_going_down_on_time_or_late(netns, late):
    """The running loop regroups when a port goes down, whether its windows
    are on time (the wait's select() wakes for the notification) or all
    late (every window longer than the period: the loop never sleeps, and a
    zero-timeout select() before each window finds it). The window itself
    no longer polls the netlink sockets, so this guards the wait."""
    from agent.linkstate import LinkWatcher
    from agent.rtnl import Rtnl

    rtnl = Rtnl(netns)
    links = LinkWatcher(netns, rtnl)
    mon = _LinksOnlyMonitor(links, 0.006 if late else 0.0)
    routing, obs = _RecordingRouting(), _Observer()
    agent = Agent({"sw": mon}, routing, AgentConfig(window_s=0.002), observer=obs)
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while mon.windows < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mon.windows >= 5 and not _saw_vb_down(routing)
        subprocess.run(["ip", "-n", netns, "link", "set", "vb", "down"], check=True)
        deadline = time.monotonic() + 10
        while not _saw_vb_down(routing) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        loop.join(10)
        links.close()
        rtnl.close()
    assert not loop.is_alive()
    # (va loses carrier in a notification of its own, possibly a little later)
    assert _saw_vb_down(routing), routing.calls
    assert not obs.failed, obs.failed
    if late:  # every window overran the period: the loop never slept before one
        assert obs.windows and all(w[2] for w in obs.windows), obs.windows[:5]


def test_rtnl_refuses_a_missing_namespace(root):
    from agent.rtnl import Rtnl

    with pytest.raises(FileNotFoundError, match="no network namespace"):
        Rtnl("talb-no-such-namespace")
    assert not os.path.exists("/run/netns/talb-no-such-namespace")


# --- process control ------------------------------------------------------------------------
def test_stop_background_without_an_agent_is_a_no_op(root):
    from agent import daemon

    prefix = new_prefix()
    assert daemon.stop_background(prefix) is False
    assert daemon.stop_background(prefix) is False


def test_start_background_refuses_bad_options_and_a_missing_testbed(root):
    from agent import daemon
    from netns_topology.state import TestbedError

    prefix = new_prefix()
    with pytest.raises(ConfigError, match="unknown option"):
        daemon.start_background(prefix, windw_s=0.01)
    with pytest.raises(ConfigError, match="--window-ms"):
        daemon.start_background(prefix, window_s=100)
    with pytest.raises(TestbedError, match="no testbed"):
        daemon.start_background(prefix)
    assert daemon.running_pid(prefix) is None


def test_pid_file_is_ours_only_if_it_names_an_agent_of_this_prefix(root):
    """The pid file is believed only for a live `talb agent` whose command
    line serves this prefix: an agent of another prefix, one in --switch
    mode or an unrelated process (a reused pid) is not ours."""
    from agent import daemon
    from common import paths

    prefix, other = new_prefix(), new_prefix()
    assert daemon.served_prefix(["python", "-m", "talb.cli", "agent"]) == paths.DEFAULT_PREFIX
    assert daemon.served_prefix(["/usr/bin/talb", "agent", f"--prefix={prefix}"]) == prefix
    assert daemon.served_prefix(["talb", "agent", "--prefix", prefix, "--switch", "leaf0"]) is None
    assert daemon.served_prefix(["sleep", "agent", "--prefix", prefix]) is None
    nap = "import time; time.sleep(60)"
    procs = {name: subprocess.Popen([sys.executable, "-c", nap, *argv])
             for name, argv in (("other", ["talb", "agent", "--prefix", other]),
                                ("switch", ["talb", "agent", "--prefix", prefix, "--switch", "s"]),
                                ("unrelated", []),
                                ("ours", ["talb", "agent", "--prefix", prefix]))}
    paths.state_dir(prefix).mkdir(parents=True)
    try:
        seen = {}
        for name, proc in procs.items():
            daemon.pid_file(prefix).write_text(f"{proc.pid}\n")
            seen[name] = daemon.running_pid(prefix)
        assert seen == {"other": None, "switch": None, "unrelated": None,
                        "ours": procs["ours"].pid}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
        import shutil
        shutil.rmtree(paths.state_dir(prefix))


def test_a_second_agent_of_a_prefix_refuses_to_run(root):
    """The agent holds its prefix's lock while it lives; another process
    taking it (as a second agent would) is refused with the first's pid."""
    import fcntl

    from agent import daemon
    from common import paths

    prefix = new_prefix()
    paths.state_dir(prefix).mkdir(parents=True)
    try:
        fd = daemon._hold_agent_lock(prefix)
        try:
            daemon.pid_file(prefix).write_text(f"{os.getpid()}\n")
            code = ("import sys; from agent import daemon; "
                    f"daemon._hold_agent_lock({prefix!r})")
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode != 0 and "AgentError" in r.stderr and \
                f"an agent for prefix '{prefix}' is already running" in r.stderr, r.stderr
        finally:
            os.close(fd)
        probe = os.open(daemon.lock_file(prefix), os.O_RDWR)
        try:  # released with the fd (or the process): free again
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        import shutil
        shutil.rmtree(paths.state_dir(prefix))


# --- talb top -----------------------------------------------------------------------------------
def test_top_once_renders_a_snapshot(tmp_path):
    from agent.switch import GroupReading, PortReading, SwitchReading

    ports = (PortReading("spine0", "fabric", 100_000_000, True, 10, 1, 0.25, 0.0002, 0.0, 0, 0),
             PortReading("spine1", "fabric", 50_000_000, False, 20, 2, 0.9, 0.02, 0.012, 75_000, 3))
    reading = SwitchReading("leaf0", 1.0, 0.005, ports,
                            (GroupReading(2, "spine0+spine1", ("spine0", "spine1"), (0.0, 1.0),
                                          (1.0, 0.0)),), {}, "talb", 4)
    env = {**os.environ, "TALB_RUN_DIR": str(tmp_path), "COLUMNS": "80"}
    code = ("from agent.snapshot import write_snapshot, snapshot_path; import pickle, sys; "
            "write_snapshot(snapshot_path('x1'), pickle.load(sys.stdin.buffer), "
            "{'pid': 1, 'prefix': 'x1', 'switch': None, 'metrics': '127.0.0.1:9477', "
            "'config': {'window_s': 0.005, 'pcm_delay': 'model'}, 'loop': {'windows': 7}})")
    import pickle
    subprocess.run([sys.executable, "-c", code], input=pickle.dumps({"leaf0": reading}),
                   env=env, check=True)
    snap = json.loads((tmp_path / "x1" / "agent.json").read_text())
    assert snap["switches"]["leaf0"]["groups"][0]["pcm"] == [0.0, 1.0]
    out = subprocess.run([*TALB, "top", "--prefix", "x1", "--once"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "leaf0" in text and "scheme talb" in text and "tensors 4" in text
    assert "spine1" in text and "down" in text and "1.000" in text and "75000" in text
    assert "stale" not in text
    assert max(map(len, text.splitlines())) <= 80, text
    snap["written"] -= 60  # an agent that stopped writing a minute ago
    (tmp_path / "x1" / "agent.json").write_text(json.dumps(snap))
    out = subprocess.run([*TALB, "top", "--prefix", "x1", "--once"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert "stale" in out.stdout


def _fabric_snapshot(written: float) -> dict:
    """An agent's snapshot of a 4x4 leaf-spine fabric with the longest names
    talb allows (12-character nodes; a port is its peer's name, "-N" for a
    parallel link: 15 characters, IFNAMSIZ): 8 ports per leaf, 4 per spine."""
    from dataclasses import asdict

    from agent.switch import GroupReading, PortReading, SwitchReading

    leaves = [f"rack12leaf0{i}" for i in range(4)]
    spines = [f"rack12spine{i}" for i in range(4)]
    switches = {}
    for sw in leaves + spines:
        if sw in leaves:
            names = [f"{sw[:-2]}h{i:02d}{sw[-1]}x" for i in range(4)] + [f"{s}-{k}" for s, k in
                                                                        zip(spines, (1, 2, 3, 4))]
        else:
            names = [f"{leaf}-1" for leaf in leaves]
        ports = tuple(PortReading(n, "fabric", 100_000_000, i != 2, 10**12 + i, 10**9, 0.873 + i / 1000,
                                  0.0123 + i * 1e-4, 1.2345 + i, 1_499_876 + i, 3)
                      for i, n in enumerate(names))
        up = names[-4:]
        group = GroupReading(7, "+".join(up), tuple(up), (0.125, 1.0, 0.5, 0.75),
                             (0.375, 0.0, 0.25, 0.375))
        switches[sw] = asdict(SwitchReading(sw, 1.0, 0.005, ports, (group,), {}, "talb", 4096))
    return {"pid": 4194304, "prefix": "exp12longabc", "switch": None, "written": written,
            "metrics": "127.0.0.1:9496", "config": {"window_s": 0.005, "pcm_delay": "measured"},
            "loop": {"windows": 123456789, "slow": 12345, "missed": 6789}, "switches": switches}


def test_top_fits_80_columns():
    """`talb top` on an 80-column terminal: no line is longer, every port's
    full name and every number a reader looks for is there (nothing cut to
    '…'), for a 4x4 fabric with the longest names allowed."""
    from rich.console import Console

    from agent.top import _fit, render_snapshots

    snap = _fabric_snapshot(written=1000.0)
    for now, stale in ((1000.5, False), (1100.0, True)):
        console = Console(width=80, record=True, highlight=False, color_system=None)
        console.print(render_snapshots([snap], "exp12longabc", now=now))
        text = console.export_text()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= 80, "\n".join(l for l in lines if len(l) > 80)
        assert "…" not in text, text
        assert ("stale" in text) == stale
        assert "agent pid 4194304" in text and "http://127.0.0.1:9496/metrics" in text
        assert "windows 123456789 (slow 12345, missed 6789)" in text
        for name, sw in snap["switches"].items():
            assert f"{name}  scheme talb  tensors 4096" in text
            for i, port in enumerate(sw["ports"]):
                row = next(l for l in lines if l.startswith(port["name"] + " "))
                cells = row.split()
                assert port["name"] == cells[0] and len(port["name"]) <= 15
                assert ("up" if port["up"] else "down") in cells
                assert f"{87.3 + i / 10:.0f}%" in row                 # utilisation
                assert f"{12.3 + i / 10:.2f}" in cells                # E[W] ms (model)
                assert f"{1234.5 + i * 1000:.0f}" in cells            # qdisc ms (measured)
                assert str(1_499_876 + i) in cells                    # backlog bytes
            for port, pcm, weight in zip(sw["groups"][0]["ports"], sw["groups"][0]["pcm"],
                                         sw["groups"][0]["weights"]):
                row = next(l for l in lines if l.startswith(port + " ")).split()
                assert row[-2:] == [f"{pcm:.3f}", f"{weight:.3f}"]
        header = next(l for l in lines if l.lstrip().startswith("port"))
        for col in ("link", "utilisation", "PCM", "weight"):
            assert col in header
    # a longer name (a future attach of foreign interfaces) is cut in the middle
    assert _fit("enp0s31f6-uplink-a") == "enp0s31…plink-a" and len(_fit("x" * 40)) == 15


# --- publishing ------------------------------------------------------------------------
@pytest.fixture
def twin_switch_maps(root):
    """Two switches' maps (the data path's layout, no program), pinned on the
    project's bpffs and programmed alike: ports 11..18, four groups (one
    weighting a port by listing it twice)."""
    import shutil

    from bench.agent_loop import pin_switch_maps
    from common import paths
    from datapath.control import program_switch
    from datapath.maps import SwitchMaps

    base = paths.BPFFS_DIR / f"{new_prefix()}pub"
    ports = [(f"p{i}", i, False, True) for i in range(11, 19)]
    groups = {"198.18.0.1": [11, 12, 13, 14], "198.18.0.2": [15, 16],
              "198.18.0.3": [11, 11, 12], "198.18.0.4": [17, 18, 11]}
    twins = []
    try:
        for name in ("old", "new"):
            pin_switch_maps(base / name)
            twins.append(SwitchMaps(base / name))
            program_switch(twins[-1], ports, groups)
        yield twins
    finally:
        for m in twins:
            m.close()
        shutil.rmtree(base, ignore_errors=True)


def _groups_bytes(maps) -> dict[int, bytes]:
    return {gid: bytes(g) for gid, g in maps.groups.items()}


@pytest.mark.parametrize("in_c", [True, False], ids=["c", "python"])
def test_batched_publishing_writes_what_publish_pcm_writes(twin_switch_maps, in_c):
    """The agent's publisher (one batch read, one batch write of the groups
    that change) leaves the groups map exactly as one publish_pcm per group
    does, window after window: a group whose PCMs did not change is not
    rewritten, one that changed is, one reset behind the agent's back is
    restored, and a group reprogrammed away fails as publish_pcm fails. With
    its fixed point and schedules in C (datapath/talb_parts.c) and without."""
    from datapath.control import GroupPublisher, program_switch, publish_pcm
    from datapath.structs import FwdGroup

    old, new = twin_switch_maps
    assert _groups_bytes(old) == _groups_bytes(new)
    members = {gid: g.ports() for gid, g in sorted(new.groups.items())}
    plan = list(members.items())
    gid_of = {tuple(ports): gid for gid, ports in plan}
    # the groups, in the order of the lists below
    order = [gid_of[(11, 12, 13, 14)], gid_of[(15, 16)], gid_of[(11, 11, 12)], gid_of[(17, 18, 11)]]
    plan = [(gid, members[gid]) for gid in order]
    publisher = GroupPublisher(new, plan, native=in_c)
    assert (publisher._native is not None) == (in_c and native.compiler() is not None
                                               and not native.disabled())

    def window(pcms, thresholds):
        """Both paths publish the same window; the errors of the batched one."""
        for (gid, ports), pcm, s in zip(plan, pcms, thresholds):
            try:
                publish_pcm(old, ports, dict(zip(ports, pcm)), s, group_id=gid)
            except ValueError:
                pass
        return publisher.publish(pcms, thresholds)

    def pcms(*values):  # one value list per group, in group order
        return [list(v) for v in values]

    first = pcms((0.1, 0.7, 0.7, 1.0), (0.0, 0.5), (0.3, 0.3, 0.9), (0.2, 0.2, 0.2))
    assert window(first, [None, None, 0.6, None]) == [None] * 4
    assert _groups_bytes(old) == _groups_bytes(new)
    assert (publisher.written, publisher.unchanged) == (4, 0)
    snapshot = _groups_bytes(new)

    # group 0 unchanged, group 1 changed, group 2 only its threshold, group 3
    # a change too small to show in fixed point
    second = pcms((0.1, 0.7, 0.7, 1.0), (0.25, 0.5), (0.3, 0.3, 0.9), (0.2, 0.2, 0.2000001))
    assert window(second, [None, None, 0.8, None]) == [None] * 4
    after = _groups_bytes(new)
    assert after == _groups_bytes(old)
    gids = order
    assert after[gids[0]] == snapshot[gids[0]] and after[gids[3]] == snapshot[gids[3]]
    assert after[gids[1]] != snapshot[gids[1]] and after[gids[2]] != snapshot[gids[2]]
    assert (publisher.written, publisher.unchanged) == (6, 2)

    # Behind the agent's back: group 0 reset to neutral values (flags set), in
    # both maps. The same PCMs again: both paths restore group 0, keep its flags.
    for m in (old, new):
        g = FwdGroup.of(members[gids[0]])
        g.flags = 0x5
        m.groups[gids[0]] = g
    assert window(second, [None, None, 0.8, None]) == [None] * 4
    assert _groups_bytes(old) == _groups_bytes(new)
    assert new.groups[gids[0]].flags == 0x5
    assert new.groups[gids[0]].talb()["pcm"] != [0, 0, 0, 0]
    assert (publisher.written, publisher.unchanged) == (7, 5)

    # Reprogrammed: the group of ports 15+16 is gone (publish_pcm raises for
    # it, the batched path returns the same error), the others still publish.
    ports = [(f"p{i}", i, False, True) for i in range(11, 19)]
    groups = {"198.18.0.1": [11, 12, 13, 14], "198.18.0.3": [11, 11, 12],
              "198.18.0.4": [17, 18, 11]}
    for m in (old, new):
        program_switch(m, ports, groups)
    third = pcms((0.9, 0.0, 0.5, 0.5), (0.5, 0.5), (0.0, 0.0, 1.0), (1.0, 0.0, 0.4))
    errors = window(third, [None] * 4)
    assert [e is None for e in errors] == [True, False, True, True]
    assert "no group with ports [15, 16]" in str(errors[1])
    assert _groups_bytes(old) == _groups_bytes(new)
    assert publisher.batched, "the kernel refused the batch commands: the per-group path ran"


def test_buffered_publishing_writes_what_list_publishing_writes(twin_switch_maps):
    """GroupPublisher.publish_buffered -- the P_i written into the C
    publication's input by the caller, as the agent's C window does, no
    list handed over -- leaves the groups map exactly as publish() with the
    same P_i as lists, window after window: PCMs and thresholds changing,
    the same PCMs again (nothing rewritten), a group reset behind the
    agent's back (restored), a group reprogrammed away (the same error;
    only then are the P_i asked for as lists)."""
    import random

    from datapath.control import GroupPublisher, program_switch
    from datapath.structs import FwdGroup

    if native.compiler() is None or native.disabled():
        skip_or_fail("no C compiler: there is no C publication to feed")
    old, new = twin_switch_maps
    plan = [(gid, g.ports()) for gid, g in sorted(new.groups.items())]
    by_lists, by_buffer = GroupPublisher(old, plan), GroupPublisher(new, plan)
    target = by_buffer.input_buffer()
    assert target is not None, "no C publication"
    buffer, stride = target
    asked = []

    def window(pcms, thresholds):
        for k, pcm in enumerate(pcms):
            buffer[k * stride:k * stride + len(pcm)] = pcm

        def pcms_of():
            asked.append(len(pcms))
            return [list(p) for p in pcms]
        a = by_lists.publish(pcms, thresholds)
        b = by_buffer.publish_buffered(thresholds, pcms_of)
        # the same errors; a message lists the installed groups in each map's own
        # (hash) order, which two maps need not share
        assert [str(e).split(" (groups:")[0] for e in b] == [str(e).split(" (groups:")[0] for e in a]
        assert _groups_bytes(new) == _groups_bytes(old)
        assert (by_buffer.written, by_buffer.unchanged) == (by_lists.written, by_lists.unchanged)
        return b

    rng = random.Random(5)
    thresholds = [None] * len(plan)
    for k in range(6):
        if k == 3:
            thresholds = [0.6, None, 0.8, None]
        pcms = [[round(rng.random(), 3) for _ in ports] for _gid, ports in plan]
        assert window(pcms, thresholds) == [None] * len(plan)
    written = by_buffer.written
    assert window(pcms, thresholds) == [None] * len(plan)     # the same again
    assert by_buffer.written == written and not asked
    # behind the agent's back: a group reset to neutral values (flags set) in both maps
    gid, ports = plan[0]
    for m in (old, new):
        g = FwdGroup.of(ports)
        g.flags = 0x5
        m.groups[gid] = g
    assert window(pcms, thresholds) == [None] * len(plan)
    assert new.groups[gid].flags == 0x5 and by_buffer.written == written + 1 and not asked
    # reprogrammed: the group of ports 15+16 is gone
    ports = [(f"p{i}", i, False, True) for i in range(11, 19)]
    groups = {"198.18.0.1": [11, 12, 13, 14], "198.18.0.3": [11, 11, 12],
              "198.18.0.4": [17, 18, 11]}
    for m in (old, new):
        program_switch(m, ports, groups)
    errors = window([[round(rng.random(), 3) for _ in p] for _gid, p in plan], thresholds)
    assert sum(e is not None for e in errors) == 1 and asked == [len(plan)]
    assert "no group with ports [15, 16]" in str(next(e for e in errors if e is not None))


def test_an_agent_window_leaves_the_maps_as_publish_pcm_would(root):
    """A real window of the agent (16 ports in a namespace, pinned maps,
    counters moving as under load, then still): after each window, one
    publish_pcm per group with the window's PCMs changes nothing in the
    groups map -- the agent wrote exactly what the old path writes, both for
    groups whose PCMs changed and for groups whose PCMs did not."""
    from agent.config import AgentConfig
    from bench.agent_loop import BenchFabric, SyntheticTraffic
    from datapath.control import publish_pcm

    fabric = BenchFabric(16, new_prefix())
    traffic = None
    try:
        traffic = SyntheticTraffic(fabric, seed=7)
        agent = fabric.agent(AgentConfig(window_s=0.001))
        try:
            (m,) = agent.monitors.values()
            agent.step(time.monotonic())  # the first reading: no window yet
            written = []
            for k in range(12):
                if k < 8:  # then the counters stand still: the same PCMs again
                    traffic.step()
                time.sleep(0.001)
                agent.step(time.monotonic())
                after = _groups_bytes(m.maps)
                reading = m.latest
                assert len(reading.groups) == 2
                for g, r in zip(m._groups, reading.groups):
                    publish_pcm(m.maps, g.members, dict(zip(g.distinct, r.pcm)), group_id=g.gid)
                assert _groups_bytes(m.maps) == after, f"window {k}"
                written.append(m._publisher.written)
            moved = [b - a for a, b in zip(written, written[1:])]
            assert all(n > 0 for n in moved[:7]), moved      # PCMs changed: rewritten
            assert moved[8:] == [0, 0, 0], moved             # unchanged: left alone
        finally:
            agent.close()
    finally:
        if traffic is not None:
            traffic.close()
        fabric.close()
