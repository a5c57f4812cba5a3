"""The C facts of ``bpf/include/talb/constants.h``, parsed at import.

That header is the one source of truth for limits, scheme ids, flags and
counter indices; this module is its Python side (``CONST`` and the names
derived from it, the registry of schemes among them), shared by every
layer: the wire format, the topology's checks, the data path's mirrors.
:func:`parse_constants` also reads the host program's header
(datapath/host_maps.py).
"""
from __future__ import annotations

import ast
import operator
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from common.paths import BPF_SRC_DIR

CONSTANTS_H = Path(BPF_SRC_DIR) / "include" / "talb" / "constants.h"

_DEFINE_RE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+?)\s*$")
_INT_RE = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}


def _eval_expr(text: str, names: dict[str, int]) -> int | None:
    """Value of a C integer expression, or None if it is not one we accept."""
    text = _INT_RE.sub(lambda m: m.group(1), text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return ~ev(node.operand) & 0xFFFFFFFF
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(node)

    try:
        return ev(tree)
    except (ValueError, KeyError):
        return None


def parse_constants(path: str | os.PathLike = CONSTANTS_H) -> dict[str, int]:
    """``{NAME: value}`` for every integer ``#define`` of a header."""
    names: dict[str, int] = {}
    text = Path(path).read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # block comments
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        m = _DEFINE_RE.match(line)
        if not m:
            continue
        value = _eval_expr(m.group(2), names)
        if value is not None:
            names[m.group(1)] = value
    return names


CONST = MappingProxyType(parse_constants())


def constant(consts: Mapping[str, int], name: str, header: str | os.PathLike) -> int:
    """``consts[name]``; a RuntimeError naming ``header`` if it lacks it."""
    try:
        return consts[name]
    except KeyError:
        raise RuntimeError(f"{header}: no integer #define {name}") from None


def counter_names(consts: Mapping[str, int], prefix: str, n: int, header: str | os.PathLike,
                  *, exclude: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Counter index -> name for a counters array of ``n``, from the
    ``<prefix><NAME>`` defines of ``header`` (but ``exclude``); indices
    without a name are ``reserved_<i>``. Checks range and uniqueness."""
    names: list[str | None] = [None] * n
    for k, v in consts.items():
        if not k.startswith(prefix) or k in exclude:
            continue
        if not 0 <= v < n:
            raise RuntimeError(f"{header}: {k}={v} outside counters[{n}]")
        if names[v] is not None:
            raise RuntimeError(f"{header}: {k} and {prefix}{names[v].upper()} share index {v}")
        names[v] = k[len(prefix):].lower()
    return tuple(name if name is not None else f"reserved_{i}" for i, name in enumerate(names))


def _constants_h(name: str) -> int:
    """An integer #define of bpf/include/talb/constants.h (CONSTANTS_H)."""
    return constant(CONST, name, CONSTANTS_H)


TALB_MAX_PORTS = _constants_h("TALB_MAX_PORTS")
TALB_MAX_GROUP_PORTS = _constants_h("TALB_MAX_GROUP_PORTS")
TALB_NR_COUNTERS = _constants_h("TALB_NR_COUNTERS")
PORT_HOST = _constants_h("PORT_HOST")
PORT_UP = _constants_h("PORT_UP")
CFG_RELEASE_SK = _constants_h("CFG_RELEASE_SK")
TALB_NR_LAYERS = _constants_h("TALB_NR_LAYERS")
TALB_SCHED_MAX = _constants_h("TALB_SCHED_MAX")
TALB_MAX_TENSORS = _constants_h("TALB_MAX_TENSORS")
TALB_PCM_ONE = _constants_h("TALB_PCM_ONE")
TALB_COUNT_LIVE = _constants_h("TALB_COUNT_LIVE")
TALB_COUNT_SWEPT = _constants_h("TALB_COUNT_SWEPT")
TALB_TENSOR_DONE = _constants_h("TALB_TENSOR_DONE")
TALB_DRILL_MAX_M = _constants_h("TALB_DRILL_MAX_M")
#: priority bands of a port's egress queue (skb->priority classids 1:10..1:17)
MAX_BANDS = _constants_h("TALB_MAX_BANDS")

# --- the schemes: one header each -------------------------------------------------
#: Where scheme headers are found: the project's, then each directory of
#: $TALB_SCHEME_PATH (os.pathsep-separated; docs/add-a-scheme.md), where a
#: scheme brought from outside the tree keeps its <name>.h beside its <name>.py.
SCHEME_PATH_ENV = "TALB_SCHEME_PATH"
BUILTIN_SCHEME_DIR = Path(BPF_SRC_DIR) / "include" / "talb" / "schemes"
TALB_MAX_SCHEMES = _constants_h("TALB_MAX_SCHEMES")
_SCHEME_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,15}\Z")


class SchemeHeaderError(RuntimeError):
    """A scheme's header is missing its id or flags, or clashes with another."""


@dataclass(frozen=True)
class SchemeHeader:
    """What a scheme's C header declares: TALB_SCHEME_<NAME> and _FLAGS."""

    name: str
    id: int
    flags: int          # TALB_SF_*
    path: Path

    def has(self, flag: str) -> bool:
        return bool(self.flags & CONST[f"TALB_SF_{flag}"])


def scheme_dirs(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The project's scheme directory, then $TALB_SCHEME_PATH's."""
    env = os.environ if env is None else env
    extra = [Path(d) for d in env.get(SCHEME_PATH_ENV, "").split(os.pathsep) if d.strip()]
    return (BUILTIN_SCHEME_DIR, *extra)


def _header_defines(path: Path) -> dict[str, str]:
    """NAME -> value text of a header's #defines (continuation lines joined)."""
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    text = text.replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        m = _DEFINE_RE.match(line.split("//", 1)[0])
        if m:
            out[m.group(1)] = m.group(2)
    return out


def read_scheme_header(path: str | os.PathLike) -> SchemeHeader | None:
    """The declaration of the scheme whose header is ``path`` (<name>.h), or
    None for a helper header (no TALB_SCHEME_<NAME>: pick.h, flowlet.h)."""
    path = Path(path)
    name = path.stem
    key = f"TALB_SCHEME_{name.upper()}"
    defines = _header_defines(path)
    if key not in defines:
        return None
    if not _SCHEME_NAME_RE.match(name):
        raise SchemeHeaderError(f"{path}: a scheme's name is lower case letters, digits and _ "
                                f"(at most 16), starting with a letter: not {name!r}")
    names = dict(CONST)
    sid = _eval_expr(defines[key], names)
    if sid is None:
        raise SchemeHeaderError(f"{path}: #define {key} {defines[key]}: not an integer")
    if not 0 <= sid < TALB_MAX_SCHEMES:
        raise SchemeHeaderError(f"{path}: #define {key} {sid}: ids are 0..{TALB_MAX_SCHEMES - 1} "
                                f"(TALB_MAX_SCHEMES, {CONSTANTS_H})")
    if f"{key}_FLAGS" not in defines:
        raise SchemeHeaderError(f"{path}: no #define {key}_FLAGS (its TALB_SF_* hooks, "
                                f"talb/scheme_api.h)")
    flags = _eval_expr(defines[f"{key}_FLAGS"], names)
    if flags is None:
        raise SchemeHeaderError(f"{path}: #define {key}_FLAGS {defines[f'{key}_FLAGS']}: not "
                                f"an expression of TALB_SF_* flags")
    h = SchemeHeader(name, sid, flags, path)
    _check_flags(h)
    return h


#: flag -> the flags it needs (a scheme's hooks that make sense together)
_FLAG_NEEDS = {"DEFAULT": "INLINE", "EVERY_HOP": "PROGRAM", "OWN_PROGRAM": "PROGRAM"}


def _check_flags(h: SchemeHeader) -> None:
    where = f"{h.path}: TALB_SCHEME_{h.name.upper()}_FLAGS"
    known = 0
    for k, v in CONST.items():
        if k.startswith("TALB_SF_"):
            known |= v
    if h.flags & ~known:
        raise SchemeHeaderError(f"{where} {h.flags:#x}: bits {h.flags & ~known:#x} are no TALB_SF_*")
    if h.has("INLINE") == h.has("PROGRAM"):
        raise SchemeHeaderError(f"{where}: exactly one of TALB_SF_INLINE (decides in the main "
                                f"program) and TALB_SF_PROGRAM (a program of its own)")
    for flag, needs in _FLAG_NEEDS.items():
        if h.has(flag) and not h.has(needs):
            raise SchemeHeaderError(f"{where}: TALB_SF_{flag} needs TALB_SF_{needs}")


def scheme_headers(env: Mapping[str, str] | None = None) -> tuple[SchemeHeader, ...]:
    """Every scheme header of :func:`scheme_dirs`, in id order; a name or an
    id declared twice is refused naming both files."""
    by_name: dict[str, SchemeHeader] = {}
    by_id: dict[int, SchemeHeader] = {}
    for d in scheme_dirs(env):
        if not d.is_dir():
            raise SchemeHeaderError(f"{SCHEME_PATH_ENV}: {d} is not a directory")
        for path in sorted(d.glob("*.h")):
            h = read_scheme_header(path)
            if h is None:
                continue
            for seen, what in ((by_name.get(h.name), "name"), (by_id.get(h.id), "id")):
                if seen is not None:
                    raise SchemeHeaderError(f"{path}: scheme {h.name!r} id {h.id}: the {what} of "
                                            f"{seen.path} (scheme {seen.name!r} id {seen.id})")
            by_name[h.name] = by_id[h.id] = h
    defaults = [h for h in by_name.values() if h.has("DEFAULT")]
    if len(defaults) != 1:
        raise SchemeHeaderError("exactly one scheme is TALB_SF_DEFAULT (the main program's last "
                                "resort), not " + (", ".join(str(h.path) for h in defaults) or "none"))
    return tuple(sorted(by_name.values(), key=lambda h: h.id))


#: every scheme's header (the project's and $TALB_SCHEME_PATH's), in id order
SCHEME_HEADERS = MappingProxyType({h.name: h for h in scheme_headers()})
#: The schemes' names and ids, in id order: what the layers below datapath
#: (topology and fabric files) check names against. What each scheme
#: declares about itself (parameters, XDP, counters, model) is
#: datapath/schemes/registry.py's, which checks its records against these.
SCHEMES = MappingProxyType({h.name: h.id for h in SCHEME_HEADERS.values()})
SCHEME_NAMES = MappingProxyType({v: k for k, v in SCHEMES.items()})


def _with_scheme_defines(core: Mapping[str, int], env: Mapping[str, str] | None = None
                         ) -> dict[str, int]:
    """``core`` (constants.h's defines) and every integer #define of every
    header of :func:`scheme_dirs` (a scheme's limits, defaults and named
    counters live in its own header; its helpers' too: flowlet.h). A name
    defined twice with two values is refused naming the header."""
    merged = dict(core)
    seen: dict[str, Path] = {}
    for d in scheme_dirs(env):
        for path in sorted(Path(d).glob("*.h")):
            for name, text in _header_defines(path).items():
                value = _eval_expr(text, merged)
                if value is None:
                    continue
                if name in merged and merged[name] != value:
                    raise SchemeHeaderError(
                        f"{path}: #define {name} {text}: {seen.get(name, CONSTANTS_H)} "
                        f"defines it as {merged[name]}")
                merged[name] = value
                seen.setdefault(name, path)
    return merged


#: constants.h's defines and the scheme headers' (CONST["TALB_DEFAULT_FLOWLET_US"],
#: CONST["CNT_FLOWLET_NEW"]): what the layers above read, wherever the C keeps it
CONST = MappingProxyType(_with_scheme_defines(CONST))
#: the scheme a switch runs unless told (a topology or attach file without
#: ``scheme``, a fresh data path): the one whose header is TALB_SF_DEFAULT
DEFAULT_SCHEME = next(h.name for h in SCHEME_HEADERS.values() if h.has("DEFAULT"))
# Every scheme the headers declare is implemented: the loader loads a program
# for each (a header without its program fails the load, not a run), and an id
# without one falls back to the default scheme in the data path.


def _counter_names() -> tuple[str, ...]:
    """The CNT_* defines, and decision_<scheme> at CNT_DECISION_BASE + id."""
    names = list(counter_names(CONST, "CNT_", TALB_NR_COUNTERS, CONSTANTS_H,
                               exclude=frozenset({"CNT_DECISION_BASE"})))
    base = _constants_h("CNT_DECISION_BASE")
    for name, sid in SCHEMES.items():
        if names[base + sid] != f"reserved_{base + sid}":
            raise RuntimeError(f"{CONSTANTS_H}: CNT_{names[base + sid].upper()} is "
                               f"CNT_DECISION_BASE + {sid}, the decision counter of {name}")
        names[base + sid] = f"decision_{name}"
    return tuple(names)


#: counter index -> name ("pass_no_route", "released", "decision_ecmp", ...)
COUNTER_NAMES = _counter_names()
