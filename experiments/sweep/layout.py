"""Where a sweep keeps each run's results in its directory (OUT/runs/<key>.json),
and whether a run is finished: shared by the runner and the report."""
from __future__ import annotations

from pathlib import Path

from experiments.sweep.plan import RunSpec


def result_path(out: Path, spec: RunSpec) -> Path:
    return Path(out) / "runs" / f"{spec.key()}.json"


def is_done(out: Path, spec: RunSpec) -> bool:
    """A results file this code reads is there (workload/run_record.py
    read_record); one of a newer format: NewerFormatError, never "not done"."""
    from workload.run_record import NewerFormatError, RecordError, read_record

    try:
        read_record(result_path(out, spec))
    except NewerFormatError:
        raise
    except (OSError, RecordError):
        return False
    return True
