"""The registry of schemes is the C's: common/c_constants.py derives it from
the TALB_SCHEME_<NAME> define of each scheme's header
(bpf/include/talb/schemes/<name>.h), and every part of the project that
lists schemes uses it (read here from the headers' text, independently of
the parser)."""
from __future__ import annotations

import re

import pytest

from common.c_constants import (BUILTIN_SCHEME_DIR, CONSTANTS_H, MAX_BANDS,
                                SCHEME_HEADERS, SCHEME_NAMES, SCHEMES)
from common.paths import BPF_SRC_DIR
from netns_topology import TopologyError, topology_from_dict


def defines(prefix: str) -> dict[str, int]:
    text = CONSTANTS_H.read_text()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(rf"^#define\s+{prefix}(\w+)\s+(\d+)\b", text, re.M)}


def scheme_defines() -> dict[str, int]:
    """name -> id of every schemes/<name>.h that defines TALB_SCHEME_<NAME>."""
    out = {}
    for path in BUILTIN_SCHEME_DIR.glob("*.h"):
        m = re.search(rf"^#define\s+TALB_SCHEME_{path.stem.upper()}\s+(\d+)\b",
                      path.read_text(), re.M)
        if m:
            out[path.stem] = int(m.group(1))
    return out


def test_scheme_names_and_ids_are_the_defines():
    c = scheme_defines()
    assert dict(SCHEMES) == c
    assert list(SCHEMES.values()) == sorted(c.values())          # in id order
    assert max(SCHEMES.values()) < defines("TALB_MAX_")["SCHEMES"]
    assert {i: n for n, i in SCHEMES.items()} == dict(SCHEME_NAMES)
    assert MAX_BANDS == defines("TALB_MAX_")["BANDS"]


def test_every_scheme_but_the_inline_ones_has_its_program():
    """A TALB_SF_PROGRAM scheme's program is made by switch_tc.c around its
    <name>_pick, or written in its own header (TALB_SF_OWN_PROGRAM)."""
    from datapath.loader import INLINE_SCHEMES, SCHEME_PROGS

    assert set(SCHEME_PROGS) == set(SCHEMES) - set(INLINE_SCHEMES)
    for name, fn in SCHEME_PROGS.items():
        h = SCHEME_HEADERS[name]
        text = h.path.read_text()
        if h.has("OWN_PROGRAM"):
            # written against talb/ctx.h: struct __ctx_buff (an skb, or an xdp_md in switch_xdp.c)
            assert re.search(rf"^int {fn}\(struct __ctx_buff \*skb\)", text, re.M), fn
        else:
            assert re.search(rf"\b{name}_pick\(const struct talb_pkt \*p", text), name


def _defined_in(path) -> set[str]:
    """Functions, macros and maps a header defines."""
    code = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    names = set(re.findall(r"^(?:static\s+__always_inline|TALB_SCHEME_FN)\s+[\w\s\*]*?\b(\w+)\(",
                           code, re.M))
    names |= set(re.findall(r"^#define\s+(\w+)", code, re.M))
    names |= set(re.findall(r"TALB_MAP\([^,]+,[^,]+,[^,]+,\s*(\w+),", code))
    return names - {f"TALB_SCHEMES_{path.stem.upper()}_H"}


def test_shared_c_names_no_scheme():
    """Issue 37: the switch's shared C (the entry points, the decision core,
    the dispatch) names no scheme: no id, no decision counter, nothing a
    scheme's header defines. Comments aside."""
    shared = [BPF_SRC_DIR / "switch_tc.c", BPF_SRC_DIR / "switch_xdp.c",
              *(BPF_SRC_DIR / "include" / "talb" / h for h in
                ("decision.h", "scheme_api.h", "scheme_dispatch.h", "constants.h", "pkt.h",
                 "maps.h"))]
    own = set().union(*(_defined_in(h.path) for h in SCHEME_HEADERS.values()))
    assert {"talb_scheme_select", "conga_select", "drill_account", "TALB_SCHEME_CONGA",
            "tensors", "drill_mem", "conga_dre"} <= own
    for path in shared:
        code = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
        used = set(re.findall(r"\b\w+\b", code)) & own
        ids = re.findall(rf"\b(?:TALB_SCHEME|CNT_DECISION)_(?:{'|'.join(SCHEMES).upper()})\b", code)
        assert not used and not ids, (path.name, sorted(used), ids)


@pytest.mark.parametrize("scheme", ["hula", "ECMP", ""])
def test_a_topology_refuses_a_scheme_the_registry_lacks(scheme):
    with pytest.raises(TopologyError) as ei:
        topology_from_dict({"scheme": scheme})
    assert ei.value.field == "scheme"
    assert f"must be one of {', '.join(SCHEMES)}, got {scheme!r}" in str(ei.value)
