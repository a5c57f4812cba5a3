"""Where a sweep keeps each run's results in its directory (OUT/runs/<key>.json),
and whether a run is finished: shared by the runner and the report."""
from __future__ import annotations

import json
from pathlib import Path

from experiments.sweep.plan import RunSpec


def result_path(out: Path, spec: RunSpec) -> Path:
    return Path(out) / "runs" / f"{spec.key()}.json"


def is_done(out: Path, spec: RunSpec) -> bool:
    path = result_path(out, spec)
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except (OSError, json.JSONDecodeError):
        return False
