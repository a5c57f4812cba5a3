"""A scheme is declared once: its ``SCHEME`` record in datapath/schemes/<name>.py,
found by datapath/schemes/registry.py and checked against the C
(bpf/include/talb/constants.h, decision.h, switch_tc.c, structs.h -- read
here from their text, independently of the parser). The places that list
schemes take them from the registry; `talb scheme --list` and the README
show it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.c_constants import CONST, CONSTANTS_H, COUNTER_NAMES
from common.paths import BPF_SRC_DIR
from datapath.schemes import registry
from datapath.schemes.spec import SCHEME_NAME, Scheme

REPO = Path(__file__).resolve().parent.parent
TALB = Path(sys.executable).parent / "talb"


def c_function_body(path: Path, name: str) -> str:
    text = path.read_text()
    m = re.search(rf"\b{name}\([^)]*\)\s*\{{(.*?)\n\}}", text, re.S)
    assert m, f"{path}: no function {name}"
    return m.group(1)


# --- the registry is the C's ----------------------------------------------------------------------
def test_every_define_has_its_module_and_the_same_id_in_id_order():
    text = CONSTANTS_H.read_text()
    defines = {m.group(1).lower(): int(m.group(2))
               for m in re.finditer(r"^#define\s+TALB_SCHEME_(\w+)\s+(\d+)\b", text, re.M)}
    assert {s.name: s.id for s in registry.SCHEMES} == defines
    assert [s.id for s in registry.SCHEMES] == sorted(defines.values())
    for s in registry.SCHEMES:
        assert (REPO / "datapath" / "schemes" / f"{s.name}.py").is_file()
        assert (BPF_SRC_DIR / "include" / "talb" / "schemes" / f"{s.name}.h").is_file()


def test_decision_counters_fit_below_the_option_counters():
    """CNT_DECISION_BASE + id for every scheme, all below CNT_OPT_TAGGED: the
    room the registry states (MAX_SCHEMES) is the C's."""
    assert registry.MAX_SCHEMES == CONST["CNT_OPT_TAGGED"] - CONST["CNT_DECISION_BASE"]
    assert len(registry.SCHEMES) <= registry.MAX_SCHEMES
    for s in registry.SCHEMES:
        assert COUNTER_NAMES[CONST["CNT_DECISION_BASE"] + s.id] == f"decision_{s.name}"
        for counter, _case in s.decisions:
            assert counter in COUNTER_NAMES, (s.name, counter)


def test_clock_need_and_entry_points_are_the_programs():
    """SCHEME.clock is decision.h's talb_scheme_clock(); SCHEME.inline: no
    talb_scheme_<name> entry point in switch_tc.c, the others have one."""
    clock = c_function_body(BPF_SRC_DIR / "include" / "talb" / "decision.h", "talb_scheme_clock")
    in_c = {n.lower() for n in re.findall(r"TALB_SCHEME_(\w+)", clock)}
    assert {s.name for s in registry.SCHEMES if s.clock} == in_c
    source = (BPF_SRC_DIR / "switch_tc.c").read_text()
    for s in registry.SCHEMES:
        has_entry = re.search(rf"^int talb_scheme_{s.name}\(", source, re.M) is not None
        assert has_entry is not s.inline, s.name


def test_parameters_are_config_fields_with_their_defaults_in_range():
    from datapath.structs import TalbConfig

    fields = {name for name, _ in TalbConfig._fields_}
    for s in registry.SCHEMES:
        for p in s.params:
            assert p.field in fields, (s.name, p.name, p.field)
            if p.type == SCHEME_NAME:
                assert p.default in registry.fallback_choices()
            else:
                assert p.lo <= p.default <= p.hi, (s.name, p)
            assert p.help and (p.timer is None or p.unit in ("us", "")), (s.name, p)
        assert callable(s.model), s.name


def test_every_model_is_run_beside_its_program():
    """Each scheme's model entry point is used by a BPF_PROG_TEST_RUN parity
    test (a new scheme's fails here until it has one)."""
    parity = "".join((REPO / "tests" / f).read_text() for f in
                     ("test_schemes_switch.py", "test_talb_switch.py", "test_bpf_datapath.py"))
    for s in registry.SCHEMES:
        assert re.search(rf"\b{s.model.__name__}\b", parity), (s.name, s.model.__name__)


def test_config_keeps_three_spare_words():
    """docs/schemes.md "Limits": a new scheme's parameters go in struct
    talb_config's reserved words (the value size stays, old pins still read)."""
    from datapath.structs import TalbConfig

    text = (BPF_SRC_DIR / "include" / "talb" / "structs.h").read_text()
    body = re.search(r"struct talb_config \{(.*?)\};", text, re.S).group(1)
    assert re.search(r"__u32 reserved\[3\];", body)
    assert dict(TalbConfig._fields_)["reserved"]._length_ == 3


# --- discovery: a new module is found, and checked --------------------------------------------------
@pytest.fixture(autouse=True)
def _forget_test_modules():
    """Drop the modules a test wrote (sys.modules, the package's attribute)."""
    yield
    for name in [m for m in sys.modules if m == "datapath.schemes.hula"]:
        del sys.modules[name]
    if hasattr(registry._package, "hula"):
        delattr(registry._package, "hula")


def _with_module(monkeypatch, tmp_path, name: str, source: str):
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.setattr(registry._package, "__path__", [*registry._package.__path__, str(tmp_path)])


RECORD = """
from datapath.schemes.spec import Scheme
SCHEME = Scheme(name={name!r}, id={id}, title="X", description="x", paper="x", decides="x",
                params=(), xdp=True, xdp_why="x", not_a_fallback=None, decisions=(),
                clock=False, inline=False, model=print)
"""


def test_a_new_module_without_its_define_is_refused_by_name(monkeypatch, tmp_path):
    _with_module(monkeypatch, tmp_path, "hula", RECORD.format(name="hula", id=6))
    with pytest.raises(registry.RegistryError,
                       match=r"datapath/schemes/hula.py: .*constants.h has no #define TALB_SCHEME_HULA"):
        registry.discover()


def test_a_new_module_with_its_define_joins_the_registry(monkeypatch, tmp_path):
    from types import MappingProxyType

    _with_module(monkeypatch, tmp_path, "hula", RECORD.format(name="hula", id=6))
    monkeypatch.setattr(registry, "C_SCHEMES",
                        MappingProxyType({**registry.C_SCHEMES, "hula": 6}))
    found = registry.discover()
    assert [s.name for s in found] == [*(s.name for s in registry.SCHEMES), "hula"]


@pytest.mark.parametrize("name,id,message", [
    ("hula", 3, r"SCHEME.id is 3, but .*constants.h says TALB_SCHEME_HULA 6"),
    ("hula", 9, r"id 9: its decision counter CNT_DECISION_BASE \+ id would reach CNT_OPT_TAGGED"),
])
def test_a_module_whose_id_is_not_the_define_is_refused(monkeypatch, tmp_path, name, id, message):
    from types import MappingProxyType

    _with_module(monkeypatch, tmp_path, name, RECORD.format(name=name, id=id))
    monkeypatch.setattr(registry, "C_SCHEMES",
                        MappingProxyType({**registry.C_SCHEMES, name: 6 if id < 9 else 9}))
    with pytest.raises(registry.RegistryError, match=message):
        registry.discover()


def test_a_define_without_its_module_is_refused_by_name(monkeypatch):
    from types import MappingProxyType

    monkeypatch.setattr(registry, "C_SCHEMES", MappingProxyType({**registry.C_SCHEMES, "hula": 6}))
    with pytest.raises(registry.RegistryError,
                       match=r"defines TALB_SCHEME_HULA without its module: datapath/schemes/hula.py"):
        registry.discover()


# --- the places that list schemes take the registry's list --------------------------------------------
def test_consumers_list_every_scheme_of_the_registry():
    from agent.metrics import DECISIONS
    from bench.datapath_bpf import SCHEME_ROWS, scheme_row
    from datapath.control import SCHEME_PARAMS
    from datapath.loader import INLINE_SCHEMES, SCHEME_PROGS
    from datapath.timers import PARAM_FIELDS
    from datapath.xdp import XDP_REFUSED, XDP_SCHEMES
    from experiments.sweep.plan import ALL_SCHEMES
    from experiments.sweep.plots import SCHEME_ORDER, series_order

    names = [s.name for s in registry.SCHEMES]
    assert list(SCHEME_PARAMS) == names == list(ALL_SCHEMES) == list(SCHEME_ORDER) \
        == list(SCHEME_ROWS)
    assert sorted([*XDP_SCHEMES, *XDP_REFUSED]) == sorted(names)
    assert sorted([*INLINE_SCHEMES, *SCHEME_PROGS]) == sorted(names)
    # every decision counter a scheme declares is exported, under its name
    assert {s for s, _ in DECISIONS.values()} == {*names, "none"}
    # the committed figures' order, arms after their scheme
    assert series_order(["talb", "ecmp/fifo", "conga", "ecmp", "rps"]) == \
        ["ecmp", "ecmp/fifo", "rps", "conga", "talb"]
    assert PARAM_FIELDS == {"flowlet_us": "flowlet_us", "dre_us": "conga_dre_us",
                            "alpha_shift": "conga_alpha_shift", "age_us": "conga_age_us"}
    assert scheme_row("drill") == "switch DRILL(2,1), 4-port group"


def test_attach_and_topology_files_refuse_an_unknown_scheme_listing_the_registry():
    from netns_topology import TopologyError
    from netns_topology.attach_spec import fabric_from_dict

    with pytest.raises(TopologyError) as ei:
        fabric_from_dict({"scheme": "hula", "switches": [{"name": "s1"}], "hosts": []})
    assert ei.value.field == "scheme"
    assert f"must be one of {', '.join(registry.names())}, got 'hula'" in str(ei.value)


def test_set_scheme_errors_are_unchanged():
    """control.py's checks, now from the declarations, say what they said."""
    from datapath.control import SchemeError, _apply_scheme, _fallback_id
    from datapath.structs import TalbConfig

    with pytest.raises(SchemeError, match=r"^x: TaLB cannot be its own fallback \(untagged "
                                          r"packets carry no tensor\)$"):
        _fallback_id("talb", "x")
    with pytest.raises(SchemeError, match=r"^x: CONGA cannot be TaLB's fallback \(it needs every "
                                          r"packet of the fabric, to carry its option leaf to leaf\)$"):
        _fallback_id("conga", "x")
    cfg = TalbConfig()
    with pytest.raises(SchemeError, match=r"^--param d=9: must be 1..4$"):
        _apply_scheme(cfg, 3, "drill", {"d": "9"})
    with pytest.raises(SchemeError, match=r"^--param fallback=rps: only TaLB has a fallback "
                                          r"scheme \(for untagged packets\), not drill$"):
        _apply_scheme(cfg, 3, "drill", {"fallback": "rps"})
    with pytest.raises(SchemeError, match=r"^--param q_bits=2: ecmp takes no parameters$"):
        _apply_scheme(cfg, 0, "ecmp", {"q_bits": "2"})
    _apply_scheme(cfg, 5, "talb", {"fallback": "drill", "d": "3"})   # its fallback's, too
    assert (cfg.scheme, cfg.fallback_scheme, cfg.drill_d) == (5, 3, 3)


# --- what users see --------------------------------------------------------------------------------
def test_talb_scheme_list_as_a_user_runs_it():
    r = subprocess.run([str(TALB), "scheme", "--list"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-500:]
    rows = {line.split("│")[1].strip(): line for line in r.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert list(rows) == list(registry.names())
    for s in registry.SCHEMES:
        row = rows[s.name]
        assert s.paper in row and s.decides in row, row
        assert f"│ {'yes' if s.xdp else 'no'} " in row
    assert "d 2 (1..4)" in r.stdout and "m 1 (0..2)" in r.stdout
    assert "flowlet_us 500 us* (1..10000000)" in r.stdout
    assert "fallback ecmp: ecmp, rps, letflow, drill" in r.stdout


def test_talb_scheme_list_takes_no_name():
    r = subprocess.run([str(TALB), "scheme", "--list", "drill"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert "--list shows every scheme: it takes no NAME, --param or --cluster" in r.stderr


def test_help_texts_list_the_registry():
    from talb.cli_scheme import SCHEME_CHOICES, param_help

    assert SCHEME_CHOICES == "ecmp, rps, letflow, drill, conga or talb"
    assert param_help().startswith(
        "A parameter of the scheme (repeatable): letflow flowlet_us; drill d, m; conga "
        "flowlet_us, dre_us, alpha_shift, q_bits, age_us; talb fallback, tensor_limit, idle_us "
        "(and its fallback's). flowlet_us, dre_us, age_us default to multiples")


def test_readme_and_docs_list_the_registry():
    """README's status names every scheme, in id order; docs/schemes.md's
    table has a row per scheme with its header and its model."""
    readme = (REPO / "README.md").read_text()
    status = re.search(r"data path with\s+(.*?)\s+\(tensor", readme, re.S).group(1)
    titles = [s.title for s in registry.SCHEMES]
    assert re.findall(r"\*\*(\w+)\*\*", status) == titles
    assert "talb scheme --list" in readme
    docs = (REPO / "docs" / "schemes.md").read_text()
    for s in registry.SCHEMES:
        assert re.search(rf"^\| {s.title} +\| `bpf/include/talb/schemes/{s.name}.h` +\| "
                         rf"`datapath/schemes/{s.name}.py`", docs, re.M), s.name
        # and its parameters in the parameter table ("| `d` | DRILL | 2 | 1..4 |")
        rows = [line for line in docs.splitlines() if line.startswith("| `")]
        for p in s.params:
            assert any(f"`{p.name}`" in row and f"| {s.title} " in row for row in rows), \
                (s.name, p.name)


def test_scheme_records_are_frozen():
    s = registry.get("drill")
    assert isinstance(s, Scheme)
    with pytest.raises(Exception):
        s.id = 7
    with pytest.raises(KeyError, match="unknown scheme 'hula'; known: ecmp, rps"):
        registry.get("hula")
