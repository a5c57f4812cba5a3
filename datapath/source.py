"""The C source of a program of bpf/, as bcc is given it.

bcc only rewrites map operations in its main source file, so the project's
own headers (``#include "talb/..."``) are expanded into one text before
compiling, with ``#line`` markers so that errors still name the real files.
The expanded text is also what the cache of compiled programs is keyed by
(datapath/compiled.py).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from common.paths import BPF_SRC_DIR

__all__ = ["INCLUDE_DIR", "expand_source"]

INCLUDE_DIR = Path(BPF_SRC_DIR) / "include"
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def expand_source(path: str | os.PathLike,
                  include_dirs: tuple[str | os.PathLike, ...] = (INCLUDE_DIR,)) -> str:
    """``path`` with every ``#include "..."`` found under ``include_dirs``
    (or next to the including file) expanded in place, each file once,
    with ``#line`` markers. ``#include <...>`` is left to the compiler."""
    seen: set[Path] = set()

    def find(name: str, here: Path) -> Path | None:
        for d in (here.parent, *map(Path, include_dirs)):
            p = (d / name).resolve()
            if p.is_file():
                return p
        return None

    def expand(p: Path) -> str:
        seen.add(p)
        out = [f'#line 1 "{p}"\n']
        for i, line in enumerate(p.read_text().splitlines(keepends=True), 1):
            m = _INCLUDE_RE.match(line)
            inc = find(m.group(1), p) if m else None
            if inc is None:
                out.append(line)
                continue
            if inc not in seen:
                out.append(expand(inc))
            out.append(f'#line {i + 1} "{p}"\n')
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        return "".join(out)

    return expand(Path(path).resolve())
