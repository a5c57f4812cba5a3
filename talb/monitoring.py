"""Prometheus (and Grafana, when installed) for a researcher to watch the
testbed and a run: `talb monitoring up|down|status|targets`, `make monitoring`.

What `up` starts, each detached in its own session, pid and start time
recorded in ``state.json`` so that `down` ends exactly those processes:

* Prometheus (Debian's /usr/bin/prometheus) on 127.0.0.1, scraping every
  second, TSDB under :func:`mon_dir`/prometheus;
* the target refresher (``talb monitoring targets --follow``): every second
  it rewrites Prometheus' ``file_sd`` files from what is running now --
  every agent's snapshot (``/run/talb/<prefix>/agent*.json`` names its
  /metrics address) and every live run's endpoint file
  (workload/run_metrics.py). So testbeds, agents and runs started after
  `make monitoring` are scraped within a few seconds, and ones that end
  drop out, without touching `talb testbed` or the agent;
* Grafana, if a ``grafana`` or ``grafana-server`` binary is installed,
  provisioned from ``grafana/provisioning`` (the datasource, and the
  dashboards generated into ``grafana/dashboards``), anonymous viewer access.

Everything lives under ``/run/talb/monitoring-stack`` (or $TALB_MONITORING_DIR) ('-': never a testbed
prefix's directory): gone at reboot, like the testbeds.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from common import paths
from netns_topology.state import TestbedError



def mon_dir() -> Path:
    """Where monitoring keeps its state, logs and data: /run/talb/monitoring-stack,
    or $TALB_MONITORING_DIR (tests: a stack of their own beside a user's)."""
    return Path(os.environ.get("TALB_MONITORING_DIR", paths.RUN_DIR / "monitoring-stack"))


def state_file() -> Path:
    return mon_dir() / "state.json"


def targets_dir() -> Path:
    return mon_dir() / "targets"

GRAFANA_DIR = paths.REPO_ROOT / "grafana"
DEFAULT_PROMETHEUS_PORT = 9090
DEFAULT_GRAFANA_PORT = 3000
SCRAPE_INTERVAL = "1s"
AGENT_JOB, RUN_JOB = "talb-agent", "talb-run"

Progress = Callable[[str], None]


class MonitoringError(TestbedError):
    """A user-facing failure: the message says what happened and what to do."""


# --- processes ------------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """Start time of ``pid`` (clock ticks since boot): with the pid, an
    identity a recycled pid does not repeat. None: no such live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _alive(proc: dict) -> bool:
    return _start_time(proc["pid"]) == proc["start_time"]


def _spawn(name: str, argv: list[str], env: dict | None = None) -> dict:
    log = mon_dir() / f"{name}.log"
    with os.fdopen(paths.private_file(log, os.O_WRONLY | os.O_APPEND), "ab") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=env, cwd=mon_dir())
    return {"pid": p.pid, "start_time": _start_time(p.pid), "log": str(log), "argv": argv,
            "_popen": p}


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its parent (init) reaps it


def _stop(proc: dict, timeout: float = 10.0) -> bool:
    """SIGTERM, then SIGKILL, to the recorded process only if it still is the
    one started (pid and start time). True if it was running."""
    if not _alive(proc):
        _reap(proc["pid"])
        return False
    popen = proc.get("_popen")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(proc["pid"], sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if popen is not None and popen.poll() is not None:
                return True
            if popen is None and not _alive(proc):
                _reap(proc["pid"])
                return True
            time.sleep(0.05)
    return True


def read_state() -> dict | None:
    try:
        return json.loads(state_file().read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise MonitoringError(f"{state_file()} is corrupt ({exc}); remove it after checking "
                              f"that no monitoring process it names still runs") from None


def _write_state(state: dict) -> None:
    clean = {**state, "processes": {k: {f: v for f, v in p.items() if not f.startswith("_")}
                                    for k, p in state["processes"].items()}}
    paths.write_private(state_file(), json.dumps(clean, indent=2))


def _get(url: str, timeout: float = 1.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def _wait_ready(url: str, proc: dict, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _get(url)
            return
        except (urllib.error.URLError, OSError):
            pass
        if not _alive(proc) or time.monotonic() > deadline:
            tail = Path(proc["log"]).read_text(errors="replace").strip().splitlines()[-5:]
            raise MonitoringError(f"{what} did not come up ({'exited' if not _alive(proc) else 'timeout'}); "
                                  f"{proc['log']}: " + " | ".join(tail))
        time.sleep(0.2)


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --- targets ---------------------------------------------------------------------------
def agent_targets() -> list[dict]:
    """file_sd entries of every running agent, from the snapshots they write
    every second: ``testbed`` label = the prefix."""
    from agent.snapshot import read_snapshots

    out = []
    if not paths.RUN_DIR.is_dir():
        return out
    for d in sorted(paths.RUN_DIR.iterdir()):
        if not (d.is_dir() and paths.PREFIX_RE.match(d.name)):
            continue
        for snap in read_snapshots(d.name):
            addr = snap.get("metrics")
            if not addr or _start_time(int(snap.get("pid", 0))) is None:
                continue  # no endpoint, or a dead agent's leftover
            host, port = addr.rsplit(":", 1)
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            labels = {"testbed": d.name}
            if snap.get("switch"):
                labels["agent_switch"] = snap["switch"]
            out.append({"targets": [f"{host}:{port}"], "labels": labels})
    return out


def run_targets() -> list[dict]:
    from workload.run_metrics import read_endpoints

    return [{"targets": [e["target"]], "labels": e.get("labels", {})} for e in read_endpoints()]


def write_targets(directory: Path | None = None) -> dict:
    """Rewrite the file_sd files (only when they change: Prometheus re-reads
    on change). Returns {job: targets}."""
    directory = directory or targets_dir()
    paths.private_dir(directory)
    found = {AGENT_JOB: agent_targets(), RUN_JOB: run_targets()}
    for job, entries in found.items():
        path = directory / f"{job}.json"
        text = json.dumps(entries, indent=1, sort_keys=True)
        if not path.exists() or path.read_text() != text:
            paths.write_private(path, text)
    return {job: [t for e in entries for t in e["targets"]] for job, entries in found.items()}


def follow_targets(interval_s: float = 1.0) -> None:
    """Refresh the targets every ``interval_s`` until `down` removes the state
    file (or SIGTERM)."""
    from workload.run_metrics import watcher_file

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop and state_file().exists():
            write_targets()
            paths.private_dir(watcher_file().parent)
            watcher_file().touch(mode=0o600)  # runs wait for a last scrape while this is fresh
            time.sleep(interval_s)
    finally:
        watcher_file().unlink(missing_ok=True)


def prometheus_config(directory: Path | None = None) -> dict:
    """Prometheus' configuration: the agents and the runs, every second."""
    directory = directory or targets_dir()
    def job(name: str, honor: bool) -> dict:
        return {"job_name": name, "scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                # a run labels its series itself (testbed included): keep its labels
                "honor_labels": honor,
                "file_sd_configs": [{"files": [str(directory / f"{name}.json")],
                                     "refresh_interval": "5s"}]}
    return {"global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [job(AGENT_JOB, False), job(RUN_JOB, True)]}


# --- Grafana -----------------------------------------------------------------------------
def find_grafana() -> list[str] | None:
    """The command that starts Grafana's server, or None if not installed."""
    for name, argv in (("grafana", ["server"]), ("grafana-server", [])):
        path = shutil.which(name)
        if path:
            return [path, *argv]
    return None


def _grafana_homepath() -> str:
    for d in ("/usr/share/grafana", "/opt/grafana"):
        if Path(d, "conf", "defaults.ini").exists():
            return d
    raise MonitoringError("Grafana is installed but its home (conf/defaults.ini) is not in "
                          "/usr/share/grafana or /opt/grafana")


def grafana_env(prometheus_url: str, port: int, data_dir: Path) -> dict:
    """Grafana's settings as GF_* variables (no ini file to write) and the
    variables grafana/provisioning/*.yaml expand."""
    dashboards = GRAFANA_DIR / "dashboards"
    return {
        **os.environ,
        "GF_PATHS_DATA": str(data_dir), "GF_PATHS_LOGS": str(data_dir / "log"),
        "GF_PATHS_PLUGINS": str(data_dir / "plugins"),
        "GF_PATHS_PROVISIONING": str(GRAFANA_DIR / "provisioning"),
        "GF_SERVER_HTTP_ADDR": "127.0.0.1", "GF_SERVER_HTTP_PORT": str(port),
        "GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
        "GF_ANALYTICS_REPORTING_ENABLED": "false", "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": str(dashboards / "fabric.json"),
        "TALB_PROMETHEUS_URL": prometheus_url, "TALB_GRAFANA_DASHBOARDS": str(dashboards),
    }


# --- up / down / status ------------------------------------------------------------------
def _quiet(_msg: str) -> None:
    pass


def up(*, prometheus_port: int = DEFAULT_PROMETHEUS_PORT, grafana_port: int = DEFAULT_GRAFANA_PORT,
       grafana: bool = True, prometheus_bin: str | None = None, progress: Progress = _quiet) -> dict:
    """Start Prometheus, the target refresher and Grafana (if installed and
    ``grafana``); returns the state (with the URLs). Anything started is
    stopped again if a later step fails."""
    state = read_state()
    if state is not None and any(_alive(p) for p in state["processes"].values()):
        raise MonitoringError(f"monitoring is already up (Prometheus {state['urls']['prometheus']}); "
                              f"`talb monitoring down` (make monitoring-down) stops it")
    prometheus_bin = prometheus_bin or shutil.which("prometheus")
    if prometheus_bin is None:
        raise MonitoringError("prometheus is not installed: `make setup` installs Debian's package")
    grafana_cmd = find_grafana() if grafana else None
    for what, port, wanted in (("--prometheus-port", prometheus_port, True),
                               ("--grafana-port", grafana_port, grafana_cmd is not None)):
        if wanted and not _port_free(port):
            raise MonitoringError(f"{what}: port {port} on 127.0.0.1 is in use; pick another")
    paths.private_dir(mon_dir())
    paths.write_private(mon_dir() / "prometheus.yml",
                        json.dumps(prometheus_config(), indent=1))  # YAML ⊃ JSON
    found = write_targets()
    prom_url = f"http://127.0.0.1:{prometheus_port}"
    state = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "dir": str(mon_dir()),
             "urls": {"prometheus": prom_url}, "processes": {}}
    _write_state(state)  # first: the refresher runs while it exists
    procs = state["processes"]
    try:
        procs["prometheus"] = _spawn("prometheus", [
            prometheus_bin, f"--config.file={mon_dir() / 'prometheus.yml'}",
            f"--storage.tsdb.path={mon_dir() / 'prometheus'}", "--storage.tsdb.retention.time=7d",
            f"--web.listen-address=127.0.0.1:{prometheus_port}"])
        _write_state(state)
        _wait_ready(f"{prom_url}/-/ready", procs["prometheus"], "Prometheus", 30)
        progress(f"Prometheus {prom_url} (pid {procs['prometheus']['pid']}), "
                 f"{len(found[AGENT_JOB])} agent(s), {len(found[RUN_JOB])} run(s) to scrape")
        procs["targets"] = _spawn("targets", [sys.executable, "-m", "talb.cli", "monitoring",
                                              "targets", "--follow"],
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                      filter(None, [str(paths.REPO_ROOT), os.environ.get("PYTHONPATH")]))})
        _write_state(state)
        if grafana_cmd is not None:
            gdir = mon_dir() / "grafana"
            paths.private_dir(gdir)
            procs["grafana"] = _spawn("grafana", [*grafana_cmd, "--homepath", _grafana_homepath()],
                                      env=grafana_env(prom_url, grafana_port, gdir))
            state["urls"]["grafana"] = f"http://127.0.0.1:{grafana_port}"
            _write_state(state)
            _wait_ready(f"{state['urls']['grafana']}/api/health", procs["grafana"], "Grafana", 60)
            progress(f"Grafana {state['urls']['grafana']} (pid {procs['grafana']['pid']}), "
                     f"dashboards in folder 'talb'")
        elif grafana:
            progress("Grafana is not installed: Prometheus only, its UI at the URL above "
                     "(`sudo make grafana` installs Grafana from its APT repository, or says "
                     "what to do where that is out of reach)")
        else:
            progress("Grafana not started (--no-grafana): Prometheus only")
    except BaseException:
        down()
        raise
    return state


def down(progress: Progress = _quiet) -> dict:
    """Stop what `up` started (by recorded pid and start time); keeps the
    TSDB (the history a later `up` shows again). Idempotent."""
    state = read_state()
    stopped = []
    if state is not None:
        state_file().unlink(missing_ok=True)  # the refresher exits on its next round
        for name in ("grafana", "targets", "prometheus"):
            proc = state["processes"].get(name)
            if proc is not None and _stop(proc):
                stopped.append(name)
                progress(f"stopped {name} (pid {proc['pid']})")
    return {"stopped": stopped}


def status() -> dict:
    state = read_state()
    if state is None:
        return {"up": False}
    procs = {name: {"pid": p["pid"], "running": _alive(p), "log": p["log"]}
             for name, p in state["processes"].items()}
    targets = {}
    for job in (AGENT_JOB, RUN_JOB):
        try:
            entries = json.loads((targets_dir() / f"{job}.json").read_text())
        except (OSError, json.JSONDecodeError):
            entries = []
        targets[job] = [{"target": t, **e.get("labels", {})} for e in entries for t in e["targets"]]
    return {"up": any(p["running"] for p in procs.values()), "urls": state["urls"],
            "dir": state["dir"], "processes": procs, "targets": targets}
