"""The one results record (workload/run_record.py): every run kind writes
a RunRecord through write_record, every reader reads through read_record.

What a user relies on: a new file has the keys, in the order, of the files
committed under results/ (a diff between runs shows values, not a
reshuffle); a file of an older version reads, one of a newer version is
refused by name (never taken for a missing run and run again); and every
committed sweep's archived runs read through the record into the same
runs.csv rows as committed (the slow half: tests/test_run_record_archives.py).
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from experiments.sweep.plan import RunSpec
from workload.run_record import (RESULTS_FORMAT, SCHEMA_VERSION, UNVERSIONED,
                                 WRITTEN_BY_EVERY_RUN, NewerFormatError, RecordError, RunRecord,
                                 read_record, write_record)

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "results"
#: a committed sweep of each kind of run that has one (its newest archive part's first run)
COMMITTED = {"training": RESULTS / "fig10-factorial-regime", "background_only": RESULTS / "lb-classic",
             "mpi": RESULTS / "mpi"}


def _first_member(out: Path) -> dict:
    from experiments.sweep.archive import parts

    with tarfile.open(parts(out)[-1], "r:xz") as tar:
        for m in tar:
            if m.isfile() and m.name.endswith(".json"):
                return json.loads(tar.extractfile(m).read())
    raise AssertionError(f"{part}: no run file")


def _blocks(data: dict) -> dict:
    """The file's blocks as keyword arguments, in reverse (the record, not
    the caller, sets the order)."""
    return dict(reversed(list(data.items())))


@pytest.mark.parametrize("kind", sorted(COMMITTED))
def test_a_record_built_by_a_run_has_the_committed_files_keys_in_their_order(kind, tmp_path):
    committed = _first_member(COMMITTED[kind])
    rec = RunRecord(**_blocks(committed))
    written = write_record(rec, tmp_path / "r.json")
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert list(on_disk) == list(committed)
    assert on_disk == committed
    assert written == {**committed, "path": str(tmp_path / "r.json")}


def test_the_torch_and_mpi_blocks_sit_where_the_mpi_file_has_its_job(tmp_path):
    mpi = _first_member(COMMITTED["mpi"])
    torch = {("torch" if k == "mpi" else k): v for k, v in mpi.items()}
    torch["client"] = "torch"
    assert list(RunRecord(**_blocks(torch)).to_dict()) == list(torch)


def test_a_run_record_lacking_a_block_every_run_writes_is_refused_and_nothing_written(tmp_path):
    blocks = {k: {} for k in WRITTEN_BY_EVERY_RUN if k not in ("format", "created", "headline")}
    with pytest.raises(ValueError, match="without headline"):
        write_record(RunRecord(**blocks), tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_write_is_atomic_and_replaces_an_older_file(tmp_path):
    blocks = {k: {"n": 1} for k in WRITTEN_BY_EVERY_RUN if k not in ("format", "created")}
    path = tmp_path / "runs" / "r.json"
    write_record(RunRecord(**blocks), path)
    blocks["headline"] = {"n": 2}
    write_record(RunRecord(**blocks), path)
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]       # no temporary left
    data = json.loads(path.read_text())
    assert data["headline"] == {"n": 2} and data["format"] == RESULTS_FORMAT


def test_the_schema_version_is_the_format_and_a_file_without_one_reads_as_version_0():
    assert read_record({"format": "talb-run/1", "headline": {}}).version == SCHEMA_VERSION == 1
    old = read_record(b'{"config": {"model": "vgg19"}, "headline": {"scheme": "ecmp"}}')
    assert old.version == UNVERSIONED == 0
    assert old["headline"] == {"scheme": "ecmp"} and "format" not in old
    assert json.dumps(old.to_dict()) == '{"config": {"model": "vgg19"}, "headline": {"scheme": "ecmp"}}'


@pytest.mark.parametrize("text, message", [
    ('{"format": "talb-run/2"}', "x.json: results format 'talb-run/2' is newer than this talb reads"),
    ('{"format": "iperf3/1"}', "x.json: format: not a talb results file, got 'iperf3/1'"),
    ('[1, 2, 3]', "x.json: not a results object, got [1, 2, 3]"),
    ('{"format": ', "x.json: not a readable JSON results file"),
])
def test_what_is_not_a_results_file_this_talb_reads_is_refused_by_name(text, message):
    with pytest.raises(RecordError) as err:
        read_record(text, "x.json")
    assert str(err.value).startswith(message)


def test_keys_the_record_does_not_know_are_kept_in_place():
    data = {"format": "talb-run/1", "config": {}, "note": "by hand", "headline": {"a": 1}}
    rec = read_record(dict(data))
    assert rec["note"] == "by hand" and rec.unknown == {"note": "by hand"}
    assert list(rec.to_dict()) == list(data)
    rec["fault"] = {"kind": "link"}                      # amended: a known block, at the end
    assert list(rec.to_dict()) == [*data, "fault"]


def test_a_sweep_never_takes_a_newer_file_for_a_run_to_make_again(tmp_path):
    from experiments.sweep.layout import is_done, result_path

    spec = RunSpec(topology="t.yaml", scheme="ecmp", model="vgg19", arch="ps", workers=2,
                   servers=1, load=0.0, seed=1, target_link_bps=10**9, scaling_mode="time",
                   iterations=3, warmup=1)
    path = result_path(tmp_path, spec)
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "talb-run/1"')                 # half a file: not done
    assert not is_done(tmp_path, spec)
    path.write_text('{"format": "talb-run/1"}')
    assert is_done(tmp_path, spec)
    path.write_text('{"format": "talb-run/7"}')
    with pytest.raises(NewerFormatError, match="talb-run/7"):
        is_done(tmp_path, spec)


def test_talb_report_names_a_newer_file(tmp_path):
    from talb.report import ReportError, load_results

    path = tmp_path / "r.json"
    path.write_text('{"format": "talb-run/3", "config": {}}')
    with pytest.raises(ReportError, match=r"r.json: results format 'talb-run/3' is newer"):
        load_results(path)
