"""The agent's latest readings as a JSON file, rewritten every second, for
``talb top`` and scripts: readable without Prometheus, and atomic (a reader
never sees half a file)."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from common import paths

SNAPSHOT_GLOB = "agent*.json"


def snapshot_path(prefix: str, switch: str | None = None) -> Path:
    """``/run/talb/<prefix>/agent.json`` (prefix mode) or
    ``agent-<switch>.json`` (one switch)."""
    name = "agent.json" if switch is None else f"agent-{paths.check_node(switch, 'switch')}.json"
    return paths.state_dir(prefix) / name


def write_snapshot(path: Path, readings: dict, info: dict, *, make_dir: bool = True) -> None:
    """``make_dir=False``: the directory must exist (a testbed's state
    directory: FileNotFoundError once `talb testbed down` removed it)."""
    data = {**info, "written": time.time(),
            "switches": {name: asdict(r) for name, r in sorted(readings.items())}}
    if make_dir:
        paths.private_dir(path.parent)
    paths.write_private(path, json.dumps(data))


def read_snapshots(prefix: str) -> list[dict]:
    """Every agent snapshot of a prefix (one per running agent), by file name."""
    out = []
    for path in sorted(paths.state_dir(prefix).glob(SNAPSHOT_GLOB)):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # removed or replaced while listing
        data["path"] = str(path)
        out.append(data)
    return out
