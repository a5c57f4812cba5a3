"""Running the agent: in the foreground (``talb agent``) or detached, for
``talb testbed up``/``down`` (:func:`start_background`, :func:`stop_background`).

The agent works on pinned maps only: it loads nothing and unloads nothing.
Stopped or crashed, it leaves the data path forwarding with the last
weights it published; started again, it re-opens the pins and carries on
(the counters it exports are the kernel's, so they continue).

Files, per prefix, under ``/run/talb/<prefix>/``: ``agent.pid`` (written by
the agent in prefix mode, removed at a clean exit), ``agent.log`` (output
of a background agent), ``agent.json`` (snapshot, every second),
``agent.lock`` (flock held by the prefix's one agent while it lives: a
second agent, however started, refuses to run) and ``agent.start.lock``
(held by :func:`start_background` from its check to the agent answering,
so that two starters never both spawn). The pid file is trusted only if
its process is a ``talb agent`` of that prefix (its command line).
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import fields, replace
from pathlib import Path

from agent.config import DEFAULT_METRICS_PORT, AgentConfig, ConfigError
from agent.loop import Agent
from agent.metrics import AgentMetrics
from agent.snapshot import snapshot_path, write_snapshot
from common import paths

log = logging.getLogger("talb.agent")

__all__ = ["AgentError", "start_background", "stop_background", "running_pid", "pid_file",
           "log_file", "lock_file", "served_prefix", "run", "build", "config_argv",
           "metrics_endpoint", "serve_metrics", "derived_window"]


class AgentError(RuntimeError):
    """A user-facing failure to start or stop the agent."""


def pid_file(prefix: str) -> Path:
    return paths.state_dir(prefix) / "agent.pid"


def log_file(prefix: str) -> Path:
    return paths.state_dir(prefix) / "agent.log"


def lock_file(prefix: str) -> Path:
    """Held (flock) by the running agent of ``prefix`` for its whole life."""
    return paths.state_dir(prefix) / "agent.lock"


def _start_lock_file(prefix: str) -> Path:
    """Held by a starter (start_background) from its check to the agent up."""
    return paths.state_dir(prefix) / "agent.start.lock"


def served_prefix(cmdline: list[str]) -> str | None:
    """The prefix a ``talb agent`` command line manages in prefix mode
    (``--prefix P``, ``--prefix=P``, or the default), or None: not a talb
    agent, or one in ``--switch`` mode (it holds no pid file)."""
    try:
        at = cmdline.index("agent")
    except ValueError:
        return None
    if not any("talb" in a for a in cmdline[:at]):
        return None
    prefix = paths.DEFAULT_PREFIX
    args = iter(cmdline[at + 1:])
    for a in args:
        if a == "--switch" or a.startswith("--switch="):
            return None
        if a == "--prefix":
            prefix = next(args, None)
        elif a.startswith("--prefix="):
            prefix = a.split("=", 1)[1]
    return prefix


def _is_agent(pid: int, prefix: str) -> bool:
    """``pid`` is a live (not zombie) ``talb agent`` process of ``prefix``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    cmdline = raw.decode(errors="replace").split("\0")[:-1]
    return state not in ("Z", "X") and served_prefix(cmdline) == prefix


def running_pid(prefix: str) -> int | None:
    """Pid of the agent running for ``prefix`` (from its pid file), or None:
    a pid file naming a dead process, an agent of another prefix or any
    other process is not taken for ours."""
    try:
        pid = int(pid_file(prefix).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _is_agent(pid, prefix) else None


def _open_lock(path: Path) -> int:
    return paths.private_file(path, os.O_RDWR)


def _hold_agent_lock(prefix: str) -> int | None:
    """The lock of the one agent of ``prefix`` (an fd, held until closed;
    the kernel releases it however the process ends). None when the
    testbed's state directory is missing (build() then says so);
    AgentError when another agent holds it."""
    if not paths.state_dir(prefix).is_dir():
        return None
    fd = _open_lock(lock_file(prefix))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        other = running_pid(prefix)
        raise AgentError(f"an agent for prefix '{prefix}' is already running"
                         f"{f' (pid {other}); stop it first (kill {other})' if other else ''}") \
            from None
    return fd


def _agent_lock_held(prefix: str) -> bool:
    """Another process holds the agent lock (an agent that may not have
    written its pid file yet)."""
    fd = _open_lock(lock_file(prefix))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's own lock at once
    return False


@contextmanager
def _starting(prefix: str):
    """Serialises starters of ``prefix``: check, spawn and wait as one step."""
    fd = _open_lock(_start_lock_file(prefix))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- building the agent -----------------------------------------------------------------
def build(config: AgentConfig, *, prefix: str, switch: str | None = None) -> Agent:
    """The agent for every switch of ``prefix`` -- the fabric attached under
    that name (`talb attach`: its record) or else the testbed (`talb testbed
    up`: its state file) -- or, with ``switch``, for that one switch of it:
    the same ports, rates, buffers and groups, one switch's share of them."""
    from agent.routing import TopologyRouting
    from agent.switch import SwitchMonitor

    monitors = {}
    try:
        if paths.attach_file(prefix).exists():
            routing = _attached_routing(prefix, config, monitors, switch)
        else:
            from netns_topology.state import PROGRAM_DATAPATHS, load_topology_of, read_state

            state = read_state(prefix)
            if state.get("datapath") not in PROGRAM_DATAPATHS or state.get("status") != "up":
                raise AgentError(f"testbed '{prefix}' is {state.get('status')} with datapath "
                                 f"{state.get('datapath')}: the agent needs a running bpf or xdp data path")
            if state.get("datapath") == "xdp":
                from datapath.xdp import XdpError, check_pcm_delay

                try:
                    check_pcm_delay(config.pcm_delay)
                except XdpError as exc:
                    raise AgentError(str(exc)) from None
            routing = TopologyRouting(load_topology_of(prefix), prefix)
            names = routing.switches
            if switch is not None and switch not in names:
                raise AgentError(f"--switch: testbed '{prefix}' has no switch {switch!r} "
                                 f"(switches: {', '.join(names)})")
            for sw in names if switch is None else [switch]:
                monitors[sw] = SwitchMonitor(sw, routing.netns(sw), paths.pin_dir(prefix, sw), config)
        for sw, m in monitors.items():
            m.bind(routing.ports(sw))
        agent = Agent(monitors, routing, config)
        agent.sync_links()
        return agent
    except BaseException:
        for m in monitors.values():
            m.close()
        raise


def _attached_routing(prefix: str, config: AgentConfig, monitors: dict, switch: str | None = None):
    """Monitors (added to ``monitors``) and routing of a fabric `talb attach`
    loaded (its record, /run/talb/<prefix>/attach.json): every switch it
    attached on this machine, or only ``switch``. Rates and buffers as the
    file describes them, groups as attach installed them."""
    from agent.routing import FabricRouting, LocalRouting, PortSpec
    from agent.switch import SwitchMonitor
    from netns_topology.attach_spec import fabric_from_dict

    state = json.loads(paths.attach_file(prefix).read_text())
    if state.get("status") != "up":
        raise AgentError(f"attached fabric '{prefix}' is {state.get('status')}, not up")
    fabric = fabric_from_dict(state["fabric"])
    here = [sw.name for sw in fabric.switches if sw.name in state["switches"]]  # not remote
    if switch is not None and switch not in here:
        remote = any(sw.name == switch for sw in fabric.switches)
        raise AgentError(f"--switch: {switch!r} is " + (
            "remote in the fabric attached as " if remote else "no switch of the fabric attached as ")
            + f"'{prefix}' (switches attached here: {', '.join(here)})")
    parts = {}
    for sw in fabric.switches:
        if sw.name not in here or (switch is not None and sw.name != switch):
            continue
        rec = state["switches"][sw.name]
        m = monitors[sw.name] = SwitchMonitor(sw.name, rec["netns"], rec["pin"], config)
        specs = {p.iface: PortSpec(p.iface, p.rate_bps, p.kind, fabric.port_buffer(p))
                 for p in sw.ports}
        parts[sw.name] = LocalRouting(sw.name, rec["netns"], m.maps, m.links, specs)
    return FabricRouting(parts)


# --- /metrics ---------------------------------------------------------------------------
def _hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def serve_metrics(metrics: AgentMetrics, config: AgentConfig) -> int:
    """Serve ``metrics`` on ``config.metrics_addr`` at the first port of
    ``config.metrics_ports()`` that is free; returns it. AgentError naming
    the flag and value when none is (an explicit --metrics-port taken, or
    every port of the default range)."""
    ports = config.metrics_ports()
    for port in ports:
        try:
            metrics.serve(config.metrics_addr, port)
            return port
        except OSError as exc:
            if config.metrics_port is None and exc.errno == errno.EADDRINUSE:
                continue
            flag = "--metrics-addr" if exc.errno == errno.EADDRNOTAVAIL else "--metrics-port"
            raise AgentError(f"{flag}: cannot serve on {_hostport(config.metrics_addr, port)}: "
                             f"{exc.strerror or exc}") from None
    raise AgentError(f"--metrics-port: ports {ports[0]}-{ports[-1]} on {config.metrics_addr} are "
                     f"all in use; give a free one with --metrics-port")


# --- foreground -------------------------------------------------------------------------
def run(config: AgentConfig, *, prefix: str = paths.DEFAULT_PREFIX,
        switch: str | None = None) -> int:
    """Run until SIGTERM/SIGINT or until the testbed (attached fabric) is
    removed. Returns the exit status. ``switch``: that one switch only
    (no pid file, no prefix lock: several such agents may share a prefix)."""
    paths.check_prefix(prefix)
    logging.basicConfig(level=config.logging_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    pidf = agent = metrics = lock = None
    snap = snapshot_path(prefix, switch)
    try:
        if switch is None:  # one agent per prefix, however it was started
            lock = _hold_agent_lock(prefix)
        agent = build(config, prefix=prefix, switch=switch)
        if switch is None:  # written once the testbed is known to be there
            pidf = pid_file(prefix)
            paths.write_private(pidf, f"{os.getpid()}\n")
        metrics = AgentMetrics()
        metrics.describe_agent(mode="switch" if switch else "prefix",
                               target=switch or prefix, pid=os.getpid())
        metrics.watch(agent)
        agent.observer = metrics
        # One window before serving: the first page already has every series.
        agent.step(agent.clock())
        port = serve_metrics(metrics, config)
        if config.metrics_port is None:
            if port != DEFAULT_METRICS_PORT:
                log.warning("metrics port %d on %s is in use (another testbed's agent?): "
                            "serving on %d", DEFAULT_METRICS_PORT, config.metrics_addr, port)
            # recorded as served: a restart from the snapshot's settings keeps the endpoint
            config = replace(config, metrics_port=port)
        log.info("agent for %s: %d switches, window %.1f ms, PCM delay %s, counters read %s, "
                 "metrics on http://%s/metrics", switch or f"testbed {prefix}",
                 len(agent.monitors), config.window_s * 1e3, config.pcm_delay,
                 next(iter(agent.monitors.values())).read_strategy,
                 _hostport(config.metrics_addr, port))
        info = {"pid": os.getpid(), "prefix": prefix, "switch": switch,
                "metrics": f"{config.metrics_addr}:{port}",
                "config": config.to_dict()}
        alive_path = paths.attach_file(prefix) if paths.attach_file(prefix).exists() \
            else paths.state_file(prefix)

        def tick():
            try:
                if not alive_path.exists():
                    raise FileNotFoundError(alive_path)
                # prefix mode: never recreate a state directory `testbed down` removed
                write_snapshot(snap, agent.latest, {**info, "loop": dict(metrics.counts)},
                               make_dir=False)
            except FileNotFoundError:
                log.info("%s is gone (testbed removed): exiting", alive_path)
                stop.set()

        tick()  # at once: the snapshot says which port was taken (start_background reads it)
        agent.run(stop, tick)
        log.info("stopped after %d windows (%d slow, %d missed)", metrics.counts["windows"],
                 metrics.counts["slow"], metrics.counts["missed"])
        return 0
    finally:
        if metrics is not None:
            metrics.close()
        if agent is not None:
            agent.close()
        snap.unlink(missing_ok=True)
        if pidf is not None:
            try:
                if pidf.read_text().strip() == str(os.getpid()):
                    pidf.unlink()
            except FileNotFoundError:
                pass
        if lock is not None:
            os.close(lock)
        for s, h in previous.items():
            signal.signal(s, h)


# --- background -------------------------------------------------------------------------
def config_argv(config: AgentConfig) -> list[str]:
    """``talb agent`` options that reproduce ``config``."""
    argv = ["--window-ms", f"{config.window_s * 1e3:g}", "--w1", f"{config.w1:g}",
            "--w2", f"{config.w2:g}", "--pcm-delay", config.pcm_delay,
            "--metrics-addr", config.metrics_addr,
            *(["--metrics-port", str(config.metrics_port)] if config.metrics_port is not None else []),
            "--log-level", config.log_level, "--read-strategy", config.read_strategy,
            "--stats-interval-ms", f"{config.stats_interval_s * 1e3:g}"]
    if config.threshold == "max":
        argv += ["--threshold", "max"]
    elif config.threshold is not None:
        argv += ["--threshold", f"{config.threshold:g}"]
    return argv


def derived_window(prefix: str, opts: dict) -> dict:
    """``opts`` with the window the testbed's link rate gives
    (datapath/timers.py: 40 frame slots, at least 5 ms) when it has no
    ``window_s`` -- an explicit window always wins -- and, unless given, a
    ``stats_interval_s`` no shorter than the window (AgentConfig requires it).
    No testbed of ``prefix`` up: the defaults (AgentConfig)."""
    from datapath import timers

    opts = dict(opts)
    if opts.get("window_s") is None:
        opts.pop("window_s", None)
        derived = timers.for_prefix(prefix)
        if derived is not None:
            opts["window_s"] = derived.window_s
    if opts.get("stats_interval_s") is None:
        opts.pop("stats_interval_s", None)
        default = next(f.default for f in fields(AgentConfig) if f.name == "stats_interval_s")
        if opts.get("window_s", 0) > default:
            opts["stats_interval_s"] = opts["window_s"]
    return opts


_children: dict[int, subprocess.Popen] = {}  # reaped by stop_background


def _endpoint_answers(url: str, pid: int) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            body = resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return False
    # Another process (an older agent) may hold the port: the page must be ours.
    return f'pid="{pid}"' in body


def start_background(prefix: str, *, timeout: float = 30.0, **opts) -> int:
    """Start ``talb agent --prefix PREFIX`` detached (own session, output to
    ``/run/talb/<prefix>/agent.log``), wait until its /metrics answers, and
    return its pid (also in ``/run/talb/<prefix>/agent.pid``).

    ``opts``: :class:`agent.config.AgentConfig` fields (``window_s``,
    ``w1``, ``w2``, ``threshold``, ``pcm_delay``, ``metrics_addr``,
    ``metrics_port``, ``log_level``, ``read_strategy``, ``stats_interval_s``).
    Without ``window_s`` the window follows the testbed's link rate
    (:func:`derived_window`).
    Raises ConfigError for bad options and AgentError when the testbed is
    not up, an agent already runs for the prefix, or the agent does not
    come up (with the end of its log)."""
    from netns_topology.state import read_state

    paths.check_prefix(prefix)
    known = {f.name for f in fields(AgentConfig)}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ConfigError(f"start_background: unknown option(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    config = AgentConfig(**derived_window(prefix, opts))
    if not paths.attach_file(prefix).exists():  # an attached fabric has no state.json
        read_state(prefix)  # a clear error when no testbed is up
    with _starting(prefix):
        other = running_pid(prefix)
        if other is not None or _agent_lock_held(prefix):  # the latter: one still starting
            raise AgentError(f"an agent for prefix '{prefix}' is already running"
                             f"{f' (pid {other})' if other else ''}")
        pid = _spawn(prefix, config, timeout)
        paths.write_private(pid_file(prefix), f"{pid}\n")
    return pid


def _metrics_url(prefix: str, config: AgentConfig, pid: int) -> str | None:
    """Where agent ``pid`` serves /metrics: the port given, or the one its
    snapshot (written as soon as it serves) names; None: not known yet."""
    port = config.metrics_port
    if port is None:
        snap = _snapshot_of(prefix, pid)
        if snap is None:
            return None
        port = int(snap["metrics"].rsplit(":", 1)[1])
    host = "127.0.0.1" if config.metrics_addr in ("0.0.0.0", "::") else config.metrics_addr
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}/metrics"


def _snapshot_of(prefix: str, pid: int) -> dict | None:
    """The prefix-mode snapshot if agent ``pid`` wrote it."""
    try:
        snap = json.loads(snapshot_path(prefix).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return snap if snap.get("pid") == pid and snap.get("metrics") else None


def metrics_endpoint(prefix: str) -> str | None:
    """``addr:port`` of the /metrics of the agent running for ``prefix``
    (from its snapshot), or None: no agent, or none that has served yet."""
    pid = running_pid(prefix)
    snap = _snapshot_of(prefix, pid) if pid is not None else None
    return snap["metrics"] if snap else None


def _spawn(prefix: str, config: AgentConfig, timeout: float) -> int:
    """Start the agent process and wait until its /metrics answers."""
    logf = log_file(prefix)
    argv = [sys.executable, "-m", "talb.cli", "agent", "--prefix", prefix, *config_argv(config)]
    with os.fdopen(paths.private_file(logf, os.O_WRONLY | os.O_APPEND), "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=paths.REPO_ROOT)
    _children[proc.pid] = proc
    deadline = time.monotonic() + timeout
    while (url := _metrics_url(prefix, config, proc.pid)) is None \
            or not _endpoint_answers(url, proc.pid):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                _terminate(proc.pid, prefix)
            _children.pop(proc.pid, None)
            tail = logf.read_text(errors="replace").strip().splitlines()[-5:]
            raise AgentError(f"the agent for '{prefix}' did not come up "
                             f"({'exit ' + str(proc.returncode) if proc.returncode is not None else 'timeout'}); "
                             f"{logf}: " + " | ".join(tail))
        time.sleep(0.1)
    return proc.pid


def _terminate(pid: int, prefix: str, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; reaps it if it is our child."""
    child = _children.pop(pid, None)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                return
            if child is None and not _is_agent(pid, prefix):
                return
            time.sleep(0.05)
    if child is not None:
        child.wait()


def stop_background(prefix: str, timeout: float = 5.0) -> bool:
    """Stop the agent of ``prefix`` (SIGTERM; SIGKILL after ``timeout``);
    True if one was running. Idempotent: no agent, no error."""
    paths.check_prefix(prefix)
    pid = running_pid(prefix)
    if pid is not None:
        _terminate(pid, prefix, timeout)
    pid_file(prefix).unlink(missing_ok=True)
    snapshot_path(prefix).unlink(missing_ok=True)
    return pid is not None
