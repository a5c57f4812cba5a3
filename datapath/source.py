"""The C source of a program of bpf/, as bcc is given it.

bcc only rewrites map operations in its main source file, so the project's
own headers (``#include "talb/..."``) are expanded into one text before
compiling, with ``#line`` markers so that errors still name the real files.
The expanded text is also what the cache of compiled programs is keyed by
(datapath/compiled.py).

One include is made here, not read: ``talb/schemes/all.h``, every scheme's
header (the project's and $TALB_SCHEME_PATH's, common/c_constants.py
SCHEME_HEADERS) and the lists of schemes by hook that
bpf/include/talb/scheme_dispatch.h is built from -- so that adding a scheme
adds no line to a shared file.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from common.paths import BPF_SRC_DIR

__all__ = ["INCLUDE_DIR", "expand_source", "scheme_list", "GENERATED"]

INCLUDE_DIR = Path(BPF_SRC_DIR) / "include"
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

#: talb/schemes/all.h's lists: macro -> the TALB_SF_* flags a scheme must have
#: and must not have to be in it (talb/scheme_dispatch.h uses them)
SCHEME_LISTS = {
    "TALB_SCHEMES": ((), ()),
    "TALB_SCHEMES_INLINE": (("INLINE",), ("DEFAULT",)),
    "TALB_SCHEMES_DEFAULT": (("DEFAULT",), ()),
    "TALB_SCHEMES_PROGRAM": (("PROGRAM",), ()),
    "TALB_SCHEMES_PICK_PROGRAM": (("PROGRAM",), ("OWN_PROGRAM",)),
    "TALB_SCHEMES_EVERY_HOP": (("EVERY_HOP",), ()),
    "TALB_SCHEMES_CLOCK": (("CLOCK",), ()),
    "TALB_SCHEMES_CLOCK_HOOK": (("CLOCK_HOOK",), ()),
    "TALB_SCHEMES_EGRESS": (("EGRESS",), ()),
    "TALB_SCHEMES_FALLBACK": (("FALLBACK",), ()),
}


def scheme_list(headers=None) -> str:
    """The text of ``talb/schemes/all.h``: an #include of every scheme
    header (id order) and ``#define TALB_SCHEMES_<HOOK>(X) X(name, id) ...``
    for each list of :data:`SCHEME_LISTS`."""
    from common.c_constants import SCHEME_HEADERS

    headers = list((headers if headers is not None else SCHEME_HEADERS).values())
    out = ["/* talb/schemes/all.h: made by datapath/source.py from the scheme headers\n",
           " * (common/c_constants.py SCHEME_HEADERS), not a file. */\n"]
    out += [f'#include "{h.path.resolve()}"\n' for h in headers]
    for macro, (need, refuse) in SCHEME_LISTS.items():
        members = [h for h in headers
                   if all(h.has(f) for f in need) and not any(h.has(f) for f in refuse)]
        out.append(f"#define {macro}(X)" + "".join(f" X({h.name}, {h.id})" for h in members)
                   + "\n")
    return "".join(out)


#: includes made when expanding, not read from a file: name -> its text
GENERATED = {"talb/schemes/all.h": scheme_list}


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

    def expand(p: Path, text: str | None = None) -> str:
        seen.add(p)
        out = [f'#line 1 "{p}"\n']
        if text is None:
            text = p.read_text()
        for i, line in enumerate(text.splitlines(keepends=True), 1):
            m = _INCLUDE_RE.match(line)
            if m and m.group(1) in GENERATED:
                made = Path(m.group(1) + " (generated)")
                if made not in seen:
                    out.append(expand(made, GENERATED[m.group(1)]()))
                out.append(f'#line {i + 1} "{p}"\n')
                continue
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
