"""A committed results directory keeps its runs' files as xz tar parts:
``runs.tar.xz``, then ``runs-2.tar.xz``, ``runs-3.tar.xz``, ... each with
members ``runs/<key>.json``.

Parts are append-only: :func:`pack_new_runs` (``talb bench archive``)
writes the runs that no part holds yet -- or holds with other bytes (a run
made again) -- into a new part, and never rewrites one. Adding a chunk of
runs to a committed sweep then adds a file of that chunk's size to the
repository instead of a new copy of every run (one archive rewritten per
chunk grew a submission past its size limit). Where a key is in more than
one part, the newest part's file is the run.
"""
from __future__ import annotations

import hashlib
import os
import re
import tarfile
from pathlib import Path
from typing import Callable, Iterator

#: the first part; the ones after it are runs-<n>.tar.xz, n = 2, 3, ...
FIRST = "runs.tar.xz"
_PART = re.compile(r"^runs(?:-([1-9][0-9]*))?\.tar\.xz$")


def _number(path: Path) -> int | None:
    m = _PART.match(path.name)
    return None if m is None else int(m.group(1) or 1)


def parts(out: Path) -> list[Path]:
    """``out``'s archive parts, oldest first."""
    found = [(n, p) for p in Path(out).glob("runs*.tar.xz") if (n := _number(p)) is not None]
    return [p for _, p in sorted(found)]


def _members(path: Path) -> Iterator[tuple[str, tarfile.TarFile, tarfile.TarInfo]]:
    """(key, the open archive, member) of each run file in one part, read
    as a stream, one file at a time (the files are tens of MB)."""
    with tarfile.open(path, "r:xz") as tar:
        for m in tar:
            p = Path(m.name)
            if m.isfile() and p.parent.name == "runs" and p.suffix == ".json":
                yield p.stem, tar, m


def archived_bytes(out: Path, keys: set[str]) -> Iterator[tuple[str, bytes]]:
    """(key, file bytes) for each run of ``keys`` in ``out``'s parts, each
    key once: from the newest part that holds it."""
    left = set(keys)
    for part in reversed(parts(out)):
        if not left:
            return
        for key, tar, m in _members(part):
            if key in left:
                left.discard(key)
                yield key, tar.extractfile(m).read()


def _digests(out: Path) -> dict[str, str]:
    """{key: sha256 of its file} of every run in the parts (newest wins)."""
    found: dict[str, str] = {}
    for part in parts(out):
        for key, tar, m in _members(part):
            h = hashlib.sha256()
            with tar.extractfile(m) as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            found[key] = h.hexdigest()
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ArchiveError(Exception):
    """Nothing to pack from: the message names the directory."""


def pack_new_runs(out: Path, say: Callable[[str], None] = lambda m: None) -> dict:
    """Pack ``out``/runs/*.json that no part holds (or holds with other
    bytes) into the next part. Written to a temporary file and renamed, so
    a failure leaves no part behind. Returns {"part": path or None, "new":
    n, "replaced": n, "kept": n already archived as they are}."""
    out = Path(out)
    runs = out / "runs"
    if not runs.is_dir():
        raise ArchiveError(f"{runs}: no such directory: no run files to pack (a sweep writes "
                           f"them there; `tar -xJf` a part to unpack one)")
    files = sorted(runs.glob("*.json"))
    existing = parts(out)
    say(f"reading {len(existing)} archive part(s) of {out}" if existing else
        f"{out} has no archive yet")
    have = _digests(out)
    new = [f for f in files if f.stem not in have]
    changed = [f for f in files if f.stem in have and _sha256(f) != have[f.stem]]
    kept = len(files) - len(new) - len(changed)
    if not new and not changed:
        return {"part": None, "new": 0, "replaced": 0, "kept": kept}
    number = (_number(existing[-1]) + 1) if existing else 1
    part = out / (FIRST if number == 1 else f"runs-{number}.tar.xz")
    tmp = out / f".{part.name}.partial"
    say(f"packing {len(new)} new and {len(changed)} changed run(s) into {part.name}")
    try:
        with tarfile.open(tmp, "w:xz") as tar:
            for f in sorted(new + changed):
                tar.add(f, arcname=f"runs/{f.name}")
        os.replace(tmp, part)
    finally:
        tmp.unlink(missing_ok=True)
    return {"part": part, "new": len(new), "replaced": len(changed), "kept": kept}
