"""The registry of schemes is the C's: common/c_constants.py derives it from
the TALB_SCHEME_* defines of bpf/include/talb/constants.h, and every part of
the project that lists schemes uses it (read here from the header's text,
independently of the parser)."""
from __future__ import annotations

import re

import pytest

from common.c_constants import CONSTANTS_H, IMPLEMENTED_SCHEMES, MAX_BANDS, SCHEME_NAMES, SCHEMES
from common.paths import BPF_SRC_DIR
from netns_topology import TopologyError, topology_from_dict


def defines(prefix: str) -> dict[str, int]:
    text = CONSTANTS_H.read_text()
    return {m.group(1): int(m.group(2))
            for m in re.finditer(rf"^#define\s+{prefix}(\w+)\s+(\d+)\b", text, re.M)}


def test_scheme_names_and_ids_are_the_defines():
    c = defines("TALB_SCHEME_")
    assert dict(SCHEMES) == {name.lower(): i for name, i in c.items()}
    assert list(SCHEMES.values()) == sorted(c.values())          # in id order
    assert len(SCHEMES) == defines("TALB_NR_")["SCHEMES"]
    assert {i: n for n, i in SCHEMES.items()} == dict(SCHEME_NAMES)
    assert IMPLEMENTED_SCHEMES == set(SCHEMES)
    assert MAX_BANDS == defines("TALB_MAX_")["BANDS"]


def test_every_scheme_but_the_inline_ones_has_its_entry_point_in_the_switch_program():
    from datapath.loader import INLINE_SCHEMES, SCHEME_PROGS

    source = (BPF_SRC_DIR / "switch_tc.c").read_text()
    assert set(SCHEME_PROGS) == set(SCHEMES) - set(INLINE_SCHEMES)
    for fn in SCHEME_PROGS.values():
        # written against talb/ctx.h: struct __ctx_buff (an skb here, an xdp_md in switch_xdp.c)
        assert re.search(rf"^int {fn}\(struct __ctx_buff \*skb\)", source, re.M), fn


@pytest.mark.parametrize("scheme", ["hula", "ECMP", ""])
def test_a_topology_refuses_a_scheme_the_registry_lacks(scheme):
    with pytest.raises(TopologyError) as ei:
        topology_from_dict({"scheme": scheme})
    assert ei.value.field == "scheme"
    assert f"must be one of {', '.join(SCHEMES)}, got {scheme!r}" in str(ei.value)
