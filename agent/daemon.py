"""Running the agent: in the foreground (``talb agent``) or detached, for
``talb testbed up``/``down`` (:func:`start_background`, :func:`stop_background`).

The agent works on pinned maps only: it loads nothing and unloads nothing.
Stopped or crashed, it leaves the data path forwarding with the last
weights it published; started again, it re-opens the pins and carries on
(the counters it exports are the kernel's, so they continue).

Files, per prefix, under ``/run/talb/<prefix>/``: ``agent.pid`` (written by
the agent in prefix mode, removed at a clean exit), ``agent.log`` (output
of a background agent), ``agent.json`` (snapshot, every second).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import fields
from pathlib import Path

from agent.config import AgentConfig, ConfigError
from agent.loop import Agent
from agent.metrics import AgentMetrics
from agent.snapshot import snapshot_path, write_snapshot
from talb import paths

log = logging.getLogger("talb.agent")

__all__ = ["AgentError", "start_background", "stop_background", "running_pid", "pid_file",
           "log_file", "run", "build", "config_argv"]


class AgentError(RuntimeError):
    """A user-facing failure to start or stop the agent."""


def pid_file(prefix: str) -> Path:
    return paths.state_dir(prefix) / "agent.pid"


def log_file(prefix: str) -> Path:
    return paths.state_dir(prefix) / "agent.log"


def _is_agent(pid: int) -> bool:
    """``pid`` is a live (not zombie) ``talb agent`` process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X") and b"agent" in cmdline and any(b"talb" in a for a in cmdline)


def running_pid(prefix: str) -> int | None:
    """Pid of the agent running for ``prefix`` (from its pid file), or None."""
    try:
        pid = int(pid_file(prefix).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _is_agent(pid) else None


# --- building the agent -----------------------------------------------------------------
def build(config: AgentConfig, *, prefix: str, switch: str | None = None,
          netns: str | None = None, pin_dir: str | os.PathLike | None = None) -> Agent:
    """The agent for every switch of testbed ``prefix`` (``switch`` None), or
    for one switch: its namespace (default ``<prefix>-<switch>`` if that
    exists, else this process's) and pin directory (default the testbed's)."""
    from agent.routing import LocalRouting, TopologyRouting
    from agent.switch import SwitchMonitor

    monitors = {}
    try:
        if switch is None:
            from talb import testbed

            state = testbed.read_state(prefix)
            if state.get("datapath") != "bpf" or state.get("status") != "up":
                raise AgentError(f"testbed '{prefix}' is {state.get('status')} with datapath "
                                 f"{state.get('datapath')}: the agent needs a running bpf data path")
            routing = TopologyRouting(testbed.load_topology_of(prefix), prefix)
            for sw in routing.switches:
                monitors[sw] = SwitchMonitor(sw, routing.netns(sw), paths.pin_dir(prefix, sw), config)
        else:
            if netns is None and Path("/run/netns", paths.netns_name(prefix, switch)).exists():
                netns = paths.netns_name(prefix, switch)
            pin_dir = pin_dir or paths.pin_dir(prefix, switch)
            monitors[switch] = SwitchMonitor(switch, netns or None, pin_dir, config)
            routing = LocalRouting(switch, netns or None, monitors[switch].maps,
                                   monitors[switch].links)
        for sw, m in monitors.items():
            m.bind(routing.ports(sw))
        agent = Agent(monitors, routing, config)
        agent.sync_links()
        return agent
    except BaseException:
        for m in monitors.values():
            m.close()
        raise


# --- foreground -------------------------------------------------------------------------
def _refuse_second_agent(prefix: str) -> None:
    other = running_pid(prefix)
    if other is not None and other != os.getpid():
        raise AgentError(f"an agent for prefix '{prefix}' is already running (pid {other}); "
                         f"stop it first (kill {other})")


def run(config: AgentConfig, *, prefix: str = paths.DEFAULT_PREFIX, switch: str | None = None,
        netns: str | None = None, pin_dir: str | None = None) -> int:
    """Run until SIGTERM/SIGINT (or, in prefix mode, until the testbed is
    removed). Returns the exit status."""
    paths.check_prefix(prefix)
    logging.basicConfig(level=config.logging_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    if switch is None:
        _refuse_second_agent(prefix)
    pidf = agent = metrics = None
    snap = snapshot_path(prefix, switch)
    try:
        agent = build(config, prefix=prefix, switch=switch, netns=netns, pin_dir=pin_dir)
        if switch is None:  # written once the testbed is known to be there
            pidf = pid_file(prefix)
            pidf.write_text(f"{os.getpid()}\n")
        metrics = AgentMetrics()
        metrics.describe_agent(mode="switch" if switch else "prefix",
                               target=switch or prefix, pid=os.getpid())
        metrics.watch(agent)
        agent.observer = metrics
        # One window before serving: the first page already has every series.
        agent.step(agent.clock())
        try:
            metrics.serve(config.metrics_addr, config.metrics_port)
        except OSError as exc:
            raise AgentError(f"--metrics-port: cannot serve on {config.metrics_addr}:"
                             f"{config.metrics_port}: {exc.strerror or exc}") from None
        log.info("agent for %s: %d switches, window %.1f ms, PCM delay %s, counters read %s, "
                 "metrics on http://%s:%d/metrics", switch or f"testbed {prefix}",
                 len(agent.monitors), config.window_s * 1e3, config.pcm_delay,
                 next(iter(agent.monitors.values())).read_strategy, config.metrics_addr,
                 config.metrics_port)
        info = {"pid": os.getpid(), "prefix": prefix, "switch": switch,
                "metrics": f"{config.metrics_addr}:{config.metrics_port}",
                "config": config.to_dict()}
        alive_path = paths.state_file(prefix) if switch is None else \
            Path(pin_dir or paths.pin_dir(prefix, switch))

        def tick():
            try:
                if not alive_path.exists():
                    raise FileNotFoundError(alive_path)
                # prefix mode: never recreate a state directory `testbed down` removed
                write_snapshot(snap, agent.latest, {**info, "loop": dict(metrics.counts)},
                               make_dir=switch is not None)
            except FileNotFoundError:
                log.info("%s is gone (testbed removed): exiting", alive_path)
                stop.set()

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
        for s, h in previous.items():
            signal.signal(s, h)


# --- background -------------------------------------------------------------------------
def config_argv(config: AgentConfig) -> list[str]:
    """``talb agent`` options that reproduce ``config``."""
    argv = ["--window-ms", f"{config.window_s * 1e3:g}", "--w1", f"{config.w1:g}",
            "--w2", f"{config.w2:g}", "--pcm-delay", config.pcm_delay,
            "--metrics-addr", config.metrics_addr, "--metrics-port", str(config.metrics_port),
            "--log-level", config.log_level, "--read-strategy", config.read_strategy,
            "--stats-interval-ms", f"{config.stats_interval_s * 1e3:g}"]
    if config.threshold == "max":
        argv += ["--threshold", "max"]
    elif config.threshold is not None:
        argv += ["--threshold", f"{config.threshold:g}"]
    return argv


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
    Raises ConfigError for bad options and AgentError when the testbed is
    not up, an agent already runs for the prefix, or the agent does not
    come up (with the end of its log)."""
    from talb import testbed

    paths.check_prefix(prefix)
    known = {f.name for f in fields(AgentConfig)}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ConfigError(f"start_background: unknown option(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    config = AgentConfig(**opts)
    testbed.read_state(prefix)  # a clear error when no testbed is up
    other = running_pid(prefix)
    if other is not None:
        raise AgentError(f"an agent for prefix '{prefix}' is already running (pid {other})")
    logf = log_file(prefix)
    logf.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "talb.cli", "agent", "--prefix", prefix, *config_argv(config)]
    with open(logf, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=paths.REPO_ROOT)
    _children[proc.pid] = proc
    host = "127.0.0.1" if config.metrics_addr in ("0.0.0.0", "::") else config.metrics_addr
    url = f"http://{host if ':' not in host else f'[{host}]'}:{config.metrics_port}/metrics"
    deadline = time.monotonic() + timeout
    while not _endpoint_answers(url, proc.pid):
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                _terminate(proc.pid)
            _children.pop(proc.pid, None)
            tail = logf.read_text(errors="replace").strip().splitlines()[-5:]
            raise AgentError(f"the agent for '{prefix}' did not come up "
                             f"({'exit ' + str(proc.returncode) if proc.returncode is not None else 'timeout'}); "
                             f"{logf}: " + " | ".join(tail))
        time.sleep(0.1)
    pid_file(prefix).write_text(f"{proc.pid}\n")
    return proc.pid


def _terminate(pid: int, timeout: float = 5.0) -> None:
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
            if child is None and not _is_agent(pid):
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
        _terminate(pid, timeout)
    pid_file(prefix).unlink(missing_ok=True)
    snapshot_path(prefix).unlink(missing_ok=True)
    return pid is not None
