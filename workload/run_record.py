"""The results record every `talb run` writes, and the one way to read it.

:class:`RunRecord` holds one run's results file: its top-level blocks as
typed fields, in the order the file has them. Every run kind builds one and
writes it with :func:`write_record` -- training runs (workload/experiment.py),
background-only runs (workload/background_only.py), real MPI and PyTorch
jobs (workload/mpi_run.py, workload/torch_run.py) -- and every reader gets
one from :func:`read_record`: the sweeps' rows (experiments/sweep/results.py,
layout.py, cluster.py, lbclassic.py through results.read_rows), the fault
matrix (experiments/faults.py) and `talb report` (talb/report.py).

**Schema version.** The file's ``format`` key says it: ``talb-run/<N>``,
today :data:`SCHEMA_VERSION` = 1; a file without ``format`` (the first
runs') reads as version 0, with the same keys, every one of them optional.
A file of a newer version than this code knows is refused (its keys may
mean something else). The keys are those of ``talb-run/1`` exactly; a key
the record does not know (a file from a newer minor change, a hand-made
one) is kept as read, in its place (:attr:`RunRecord.unknown`).

The nested blocks stay plain mappings (their fields: docs/workload.md).
A record reads like the file's mapping as well (``rec["summary"]``,
``rec.get("fabric")``), so code written against the files reads records
unchanged. Also here: what every record carries besides its numbers (the
software it ran on, the agent's settings).
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import paths
from common.excerpt import shown

SCHEMA = "talb-run"
SCHEMA_VERSION = 1
RESULTS_FORMAT = f"{SCHEMA}/{SCHEMA_VERSION}"
#: the version of a file without ``format`` (runs from before it was recorded)
UNVERSIONED = 0


class RecordError(ValueError):
    """Not a results file this code reads: the message names the source and why."""


class NewerFormatError(RecordError):
    """A results file of a newer schema version than this code reads: never
    taken for a missing or broken one (a sweep would run it again)."""


class _Absent:
    """A block the run's kind does not write (not the same as a block that is null)."""

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(kw_only=True)
class RunRecord(MutableMapping):
    """One run's results file. The fields are the file's keys, in the order
    every kind writes them; ABSENT: not written by this kind of run."""

    format: str = RESULTS_FORMAT
    created: str = field(default_factory=_utc_now)
    client: str = ABSENT            # "mpi" / "torch"; absent: our own nodes (or no training)
    config: dict = ABSENT           # the run's RunConfig as given
    software: dict = ABSENT         # software_versions()
    machine: dict = ABSENT          # common/machine.py machine_info()
    fabric: dict = ABSENT           # the testbed and what was in force (schemes, regime, agent)
    model: dict | None = ABSENT     # None: background flows only
    scaling: dict | None = ABSENT   # None: background flows only
    scheduler: dict = ABSENT        # the tensors' scheduler (training runs)
    placement: dict = ABSENT
    connections: dict = ABSENT      # the connection model (training runs)
    mpi: dict = ABSENT              # the MPI job (--client mpi)
    torch: dict = ABSENT            # the DDP job (--client torch)
    load: dict = ABSENT             # the background load
    background_only: dict = ABSENT  # the window and ideal of a --model none run
    duration_s: float = ABSENT
    training_s: float | None = ABSENT
    pairing: dict | None = ABSENT
    wire: Any = ABSENT
    summary: dict = ABSENT
    flags: dict = ABSENT
    headline: dict = ABSENT         # the flat row a sweep reads (runs.csv)
    iterations: list = ABSENT
    layers: list = ABSENT
    tensors: list = ABSENT
    cpu_samples: list = ABSENT
    osf: dict = ABSENT              # OSF's modelled iteration (training runs)
    fault: dict = ABSENT            # the injected fault's report (--fault)
    #: keys this code does not know, as read
    unknown: dict = field(default_factory=dict, repr=False)
    #: the keys in the order they were read (a record read and written again keeps it)
    key_order: tuple = field(default=(), repr=False, compare=False)

    # --- the file's mapping ---------------------------------------------------------------
    def __getitem__(self, key: str):
        if key in KEYS:
            value = getattr(self, key)
            if value is ABSENT:
                raise KeyError(key)
            return value
        return self.unknown[key]

    def __setitem__(self, key: str, value) -> None:
        if key in KEYS:
            setattr(self, key, value)
        else:
            self.unknown[key] = value

    def __delitem__(self, key: str) -> None:
        if key in KEYS:
            if getattr(self, key) is ABSENT:
                raise KeyError(key)
            setattr(self, key, ABSENT)
        else:
            del self.unknown[key]

    def __iter__(self):
        present = [k for k in KEYS if getattr(self, k) is not ABSENT] + list(self.unknown)
        first = [k for k in self.key_order if k in present]
        return iter(first + [k for k in present if k not in first])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    __eq__ = MutableMapping.__eq__

    @property
    def version(self) -> int:
        """The schema version (``format``); 0 for a file without one."""
        return schema_version(self.format)

    def to_dict(self) -> dict:
        """The results file's mapping, keys in the file's order."""
        return {k: self[k] for k in self}

    @classmethod
    def from_dict(cls, data: dict) -> "RunRecord":
        known = {k: v for k, v in data.items() if k in KEYS}
        if "format" not in data:
            known["format"] = ABSENT
        if "created" not in data:
            known["created"] = ABSENT
        return cls(**known, unknown={k: v for k, v in data.items() if k not in KEYS},
                   key_order=tuple(data))


KEYS = tuple(f.name for f in dataclasses.fields(RunRecord) if f.name not in ("unknown", "key_order"))
#: what every run kind writes (write_record refuses a record without one of them)
WRITTEN_BY_EVERY_RUN = ("format", "created", "config", "software", "machine", "fabric", "model",
                        "scaling", "placement", "load", "duration_s", "summary", "flags",
                        "headline", "cpu_samples")


def schema_version(fmt) -> int:
    """``talb-run/<N>`` -> N; no format (ABSENT or None) -> UNVERSIONED."""
    if fmt is ABSENT or fmt is None:
        return UNVERSIONED
    name, _, number = str(fmt).partition("/")
    if name != SCHEMA or not number.isdigit():
        raise RecordError(f"format: not a talb results file, got {shown(fmt)}")
    return int(number)


def read_record(source, where: str | None = None) -> RunRecord:
    """A results file as a RunRecord: ``source`` a path, the file's text or
    bytes, or its parsed mapping; ``where`` names it in errors (default: the
    path). RecordError when it is not JSON, not a mapping, or of a newer
    schema version; OSError when the file cannot be read."""
    if isinstance(source, Path):
        where = where or str(source)
        source = source.read_bytes()
    where = where or "results"
    if isinstance(source, (bytes, str)):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as exc:
            raise RecordError(f"{where}: not a readable JSON results file ({exc})") from None
    if isinstance(source, RunRecord):
        return source
    if not isinstance(source, dict):
        raise RecordError(f"{where}: not a results object, got {shown(source)}")
    rec = RunRecord.from_dict(source)
    try:
        version = rec.version
    except RecordError as exc:
        raise RecordError(f"{where}: {exc}") from None
    if version > SCHEMA_VERSION:
        raise NewerFormatError(f"{where}: results format {rec.format!r} is newer than this talb "
                          f"reads ({RESULTS_FORMAT}); read it with the talb that wrote it")
    return rec


def write_record(record: RunRecord, path: Path) -> dict:
    """Write ``record`` to ``path`` atomically (a reader never sees half a
    file); returns the file's mapping with ``path`` added. A record a run
    made must have every block of WRITTEN_BY_EVERY_RUN; one read from a file
    (and amended: experiments/faults.py measures a fault again) is written
    back with the keys it was read with."""
    missing = [k for k in WRITTEN_BY_EVERY_RUN if getattr(record, k) is ABSENT]
    if missing and not record.key_order:
        raise ValueError(f"a results record without {', '.join(missing)}")
    results = record.to_dict()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)
    results["path"] = str(path)
    return results


# --- what every record carries besides its numbers ---------------------------------------
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
