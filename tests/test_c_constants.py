"""The registry of schemes is the C's: common/c_constants.py derives it from
the TALB_SCHEME_<NAME> define of each scheme's header
(bpf/include/talb/schemes/<name>.h), and every part of the project that
lists schemes uses it (read here from the headers' text, independently of
the parser)."""
from __future__ import annotations

import re

import pytest

from common.c_constants import (BUILTIN_SCHEME_DIR, CONST, CONSTANTS_H, MAX_BANDS,
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


# --- a scheme's own constants and counters live in its header ------------------------------------
#: what the built-in schemes keep in their headers (issue 37), and the header
OWN = {"flowlet.h": ("TALB_FLOWLET_TABLE_SIZE", "TALB_DEFAULT_FLOWLET_US", "CNT_FLOWLET_"),
       "drill.h": ("TALB_DEFAULT_DRILL_",),
       "conga.h": ("TALB_CONGA_MAX_LEAVES", "TALB_CONGA_TABLE_SIZE", "TALB_DEFAULT_CONGA_",
                   "TALB_CONGA_DECAY_MAX", "TALB_CONGA_Q16", "CNT_CONGA_"),
       "talb.h": ("CNT_TALB_",)}


def test_each_schemes_constants_and_counters_are_in_its_header():
    shared = CONSTANTS_H.read_text()
    for header, prefixes in OWN.items():
        text = (BUILTIN_SCHEME_DIR / header).read_text()
        for prefix in prefixes:
            pattern = rf"^#define\s+{prefix}\w*\s"
            assert re.search(pattern, text, re.M), (header, prefix)
            assert not re.search(pattern, shared, re.M), prefix       # not in constants.h
            assert any(k.startswith(prefix) for k in CONST), prefix  # Python reads them there


def test_counters_keep_their_indices_when_they_move_to_a_header():
    """A fabric pinned before the move reads the same counters by the same
    index (the names results files record are the same)."""
    from common.c_constants import COUNTER_NAMES

    assert COUNTER_NAMES[32:44] == (
        "talb_hit", "talb_case1", "talb_case2", "talb_threshold", "talb_fallback",
        "talb_table_full", "talb_reroute", "talb_aged", "talb_completed", "talb_inserted",
        "talb_late", "talb_midstream")
    assert COUNTER_NAMES[47:57] == (
        "flowlet_new", "flowlet_same", "conga_pushed", "conga_ce_raised", "conga_stripped",
        "conga_fb_sent", "conga_fb_received", "conga_push_fail", "conga_drop_strip_fail",
        "talb_joined")
    assert CONST["TALB_CONGA_TABLE_SIZE"] == 64 * CONST["TALB_MAX_GROUP_PORTS"]


def test_a_scheme_header_names_a_counter_of_its_own_and_clashes_are_refused(tmp_path):
    from common.c_constants import (TALB_NR_COUNTERS, SchemeHeaderError, _with_scheme_defines,
                                    counter_names, parse_constants)

    core = parse_constants()
    free = next(i for i in range(core["CNT_DECISION_BASE"])
                if i not in {v for k, v in CONST.items() if k.startswith("CNT_")})
    (tmp_path / "hula.h").write_text(f"#define CNT_HULA_PROBES {free}  /* probes sent */\n")
    merged = _with_scheme_defines(core, {"TALB_SCHEME_PATH": str(tmp_path)})
    names = counter_names(merged, "CNT_", TALB_NR_COUNTERS, CONSTANTS_H,
                          exclude=frozenset({"CNT_DECISION_BASE"}))
    assert names[free] == "hula_probes" and names[49] == "conga_pushed"
    (tmp_path / "hula.h").write_text("#define TALB_DEFAULT_CONGA_DRE_US 7\n")
    with pytest.raises(SchemeHeaderError, match=r"hula\.h: #define TALB_DEFAULT_CONGA_DRE_US 7: "
                                                r".*conga\.h defines it as 125"):
        _with_scheme_defines(core, {"TALB_SCHEME_PATH": str(tmp_path)})
