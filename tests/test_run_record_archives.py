"""Every committed sweep's archived runs read through the one results
reader (workload/run_record.py read_record, via the sweeps' own
experiments/sweep/results.py archived_results) into the runs.csv rows as
committed: each run's columns that come from its results file (those the
committed runs.csv has), value for value as runs.csv writes them. The fault matrix's archive (slim copies,
experiments/faults.py) reads back to the same mapping, key for key.

Slow (every archive is decompressed and parsed: ~200 MB of xz), so a
test per sweep."""
from __future__ import annotations

import csv
import json
import tarfile
from pathlib import Path

import pytest

from experiments.sweep import lbclassic
from experiments.sweep.archive import parts
from experiments.sweep.results import archived_results, fill_row
from workload.run_record import SCHEMA_VERSION, read_record

RESULTS = Path(__file__).resolve().parent.parent / "results"
SWEEPS = sorted(p.name for p in RESULTS.iterdir()
                if (p / "runs.csv").exists() and parts(p))


def _csv_text(value) -> str:
    """A value as write_csv writes it."""
    return "" if value is None else str(value)


def test_there_are_committed_sweeps_to_read():
    assert len(SWEEPS) >= 15, SWEEPS


@pytest.mark.parametrize("name", SWEEPS)
def test_a_committed_sweeps_archive_reads_into_its_committed_rows(name):
    out = RESULTS / name
    figure = json.loads((out / "plan.json").read_text()).get("figure")
    fill = lbclassic.fill_row if figure == "lb_classic" else fill_row
    with open(out / "runs.csv", newline="") as f:
        committed = {r["key"]: r for r in csv.DictReader(f) if r.get("results")}
    assert committed, f"{name}: runs.csv lists no run with a results file"
    seen, versions = set(), set()
    for key, rec in archived_results(out, set(committed)):
        versions.add(rec.version)
        row = {"key": key}
        fill(row, rec, f"runs/{key}.json")
        want = committed[key]
        # a column today's report adds that a runs.csv written before it lacks
        # (fig10-load0's predates issue 36's regime columns) is no read difference
        differ = {k: (_csv_text(v), want[k]) for k, v in row.items()
                  if k in want and _csv_text(v) != want[k]}
        assert not differ, f"{name} {key}: (read, committed) {differ}"
        seen.add(key)
    assert seen == set(committed), f"{name}: not in the archive: {sorted(set(committed) - seen)[:5]}"
    assert versions <= {0, SCHEMA_VERSION}


def test_the_fault_matrix_archive_reads_back_key_for_key():
    with tarfile.open(RESULTS / "faults" / "runs.tar.xz", "r:xz") as tar:
        members = [m for m in tar if m.isfile()]
        assert members
        for m in members:
            data = tar.extractfile(m).read()
            rec = read_record(data, m.name)
            parsed = json.loads(data)
            assert rec.version == SCHEMA_VERSION
            assert list(rec.to_dict()) == list(parsed) and rec.to_dict() == parsed
            assert rec["fault"]["kind"] and rec.tensors
