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

#: The schemes' names and ids, from the TALB_SCHEME_<NAME> defines in id order:
#: what the layers below datapath (topology and fabric files) check names
#: against. What each scheme declares about itself (parameters, XDP, counters,
#: model) is datapath/schemes/registry.py's, which checks its records against
#: these ids.
SCHEMES = MappingProxyType(dict(sorted(
    ((k[len("TALB_SCHEME_"):].lower(), v) for k, v in CONST.items() if k.startswith("TALB_SCHEME_")),
    key=lambda item: item[1])))
SCHEME_NAMES = MappingProxyType({v: k for k, v in SCHEMES.items()})
#: Schemes the data path implements: all of them. The name stays for the
#: check user space makes before it sets one (an id without a program falls
#: back to ECMP in the data path); the loader loads a program for every
#: scheme, so a define without its entry point fails the load, not a run.
IMPLEMENTED_SCHEMES = frozenset(SCHEMES)


#: counter index -> name ("pass_no_route", "released", "decision_ecmp", ...)
COUNTER_NAMES = counter_names(CONST, "CNT_", TALB_NR_COUNTERS, CONSTANTS_H,
                              exclude=frozenset({"CNT_DECISION_BASE"}))
