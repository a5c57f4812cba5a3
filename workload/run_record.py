"""What every results file of `talb run` carries besides its numbers: the
format, the software it ran on, the agent's settings, and the write itself
(training runs, workload/experiment.py, and background-only runs,
workload/background_only.py)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from common import paths

RESULTS_FORMAT = "talb-run/1"


def software_versions() -> dict:
    def cmd(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=5).stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            return None
    try:
        from importlib.metadata import version
        talb_version = version("talb")
    except Exception:  # noqa: BLE001 - not installed: the commit says it all
        talb_version = None
    commit = cmd("git", "-C", str(paths.REPO_ROOT), "rev-parse", "HEAD")
    dirty = cmd("git", "-C", str(paths.REPO_ROOT), "status", "--porcelain", "--untracked-files=no")
    return {"talb": talb_version, "commit": commit, "commit_dirty": bool(dirty) if commit else None,
            "python": platform.python_version(), "kernel": platform.release(),
            "iproute2": cmd("ip", "-V"), "machine": platform.machine(), "cpus": os.cpu_count()}


def agent_settings(prefix: str) -> dict | None:
    """The PCM agent's settings: from its snapshot (written every window or
    so), else its command line; None when no agent runs for the testbed."""
    from agent.daemon import running_pid
    from agent.snapshot import snapshot_path

    pid = running_pid(prefix)
    if pid is None:
        return None
    try:
        snap = json.loads(snapshot_path(prefix).read_text())
        return {"pid": pid, "config": snap.get("config"), "metrics": snap.get("metrics")}
    except (OSError, json.JSONDecodeError):
        try:
            argv = open(f"/proc/{pid}/cmdline").read().split("\0")
        except OSError:
            argv = None
        return {"pid": pid, "config": None, "argv": argv}


def write_results(results: dict, path: Path) -> None:
    """Write atomically (a reader never sees half a file); adds ``results["path"]``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)
    results["path"] = str(path)
