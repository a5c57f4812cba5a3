"""Small C helpers of the agent's window, built with the system's C compiler
the first time they are needed and loaded with ctypes.

Each source is compiled once (~0.1 s) into the run directory (root-only, as
the BPF cache), keyed by the source, its -D constants, the flags and the
compiler: ``<run dir>/native/<name>-<key>.so``, written atomically. No
compiler (``cc``, ``gcc``, ``clang`` or ``$CC``), a failed build or
``TALB_NATIVE=off``: :func:`load` returns None, logs why once, and the caller
keeps its Python code -- the C code computes the same numbers (each helper
has tests that compare the two), it only costs less.

Built with ``-ffp-contract=off``: a product and a sum are never fused into
one rounding, so every double is what Python computes with the same
operations in the same order.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Sequence

from common import paths

log = logging.getLogger("talb.native")

CFLAGS = ("-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-std=c11")

_lock = threading.Lock()
_libs: dict[tuple, ctypes.CDLL | None] = {}


def disabled() -> bool:
    return os.environ.get("TALB_NATIVE", "").strip().lower() in ("0", "off", "no", "none")


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") \
        or shutil.which("clang")


def build(source: Path, defines: Sequence[str] = (), cc: str | None = None) -> Path:
    """The shared object of ``source`` (built if not cached); OSError if it
    cannot be built."""
    cc = cc or compiler()
    if cc is None:
        raise OSError("no C compiler (cc, gcc, clang; or $CC)")
    src = Path(source).read_bytes()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as exc:
        raise OSError(f"{cc} --version: {exc}") from exc
    key = hashlib.sha256(repr((src, tuple(defines), CFLAGS, "-lm", cc,
                               version)).encode()).hexdigest()[:16]
    out_dir = paths.private_dir(paths.RUN_DIR / "native")
    lib = out_dir / f"{Path(source).stem}-{key}.so"
    try:
        st = lib.stat()
    except FileNotFoundError:
        pass
    else:  # its code runs in this (root) process: ours and not writable by others
        if st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return lib
    fd, tmp = tempfile.mkstemp(dir=out_dir, suffix=".so")
    os.close(fd)
    try:
        try:
            r = subprocess.run([cc, *CFLAGS, *defines, "-o", tmp, str(source), "-lm"],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            raise OSError(f"{cc}: {exc}") from exc
        if r.returncode != 0:
            raise OSError(f"{cc} {Path(source).name} failed: {r.stderr.strip()[-400:]}")
        os.chmod(tmp, 0o600)
        os.replace(tmp, lib)  # atomic: a concurrent builder's copy is as good
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load(source: Path, defines: Sequence[str] = ()) -> ctypes.CDLL | None:
    """``source`` built and loaded, once per process; None (logged once) when
    it cannot be, or with ``TALB_NATIVE=off``."""
    key = (str(source), tuple(defines))
    with _lock:
        if key in _libs:
            return _libs[key]
        lib = None
        if disabled():
            log.info("TALB_NATIVE=off: %s not used, Python computes the same", Path(source).name)
        else:
            try:
                lib = ctypes.CDLL(str(build(source, defines)))
            except OSError as exc:
                log.warning("%s not used (Python computes the same, slower): %s",
                            Path(source).name, exc)
        _libs[key] = lib
        return lib


def forget() -> None:
    """Forget what :func:`load` found (tests switching ``TALB_NATIVE``)."""
    with _lock:
        _libs.clear()
