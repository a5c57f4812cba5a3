"""A scheme is declared once: its ``SCHEME`` record in datapath/schemes/<name>.py,
found by datapath/schemes/registry.py and checked against its C header
(bpf/include/talb/schemes/<name>.h: TALB_SCHEME_<NAME> and its flags;
constants.h's room, structs.h -- read here from their text, independently
of the parser). The places that list
schemes take them from the registry; `talb scheme --list` and the README
show it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.c_constants import CONST, COUNTER_NAMES, SCHEME_HEADERS
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
    schemes_dir = BPF_SRC_DIR / "include" / "talb" / "schemes"
    defines = {}
    for path in schemes_dir.glob("*.h"):
        m = re.search(rf"^#define\s+TALB_SCHEME_{path.stem.upper()}\s+(\d+)\b",
                      path.read_text(), re.M)
        if m:
            defines[path.stem] = int(m.group(1))
    assert {s.name: s.id for s in registry.SCHEMES} == defines
    assert [s.id for s in registry.SCHEMES] == sorted(defines.values())
    for s in registry.SCHEMES:
        assert (REPO / "datapath" / "schemes" / f"{s.name}.py").is_file()
        assert (schemes_dir / f"{s.name}.h").is_file()


def test_decision_counters_have_room_for_every_id():
    """CNT_DECISION_BASE + id for ids 0..MAX_SCHEMES-1 (16), all inside the
    counters array and past every named counter: the room the registry
    states (MAX_SCHEMES) is the C's."""
    assert registry.MAX_SCHEMES == CONST["TALB_MAX_SCHEMES"] >= 16
    base = CONST["CNT_DECISION_BASE"]
    assert base + registry.MAX_SCHEMES <= CONST["TALB_NR_COUNTERS"]
    named = [v for k, v in CONST.items() if k.startswith("CNT_") and k != "CNT_DECISION_BASE"]
    assert max(named) < base
    assert len(registry.SCHEMES) <= registry.MAX_SCHEMES
    for s in registry.SCHEMES:
        assert COUNTER_NAMES[base + s.id] == f"decision_{s.name}"
        for counter, _case in s.decisions:
            assert counter in COUNTER_NAMES, (s.name, counter)


def test_clock_need_and_entry_points_are_the_headers_flags():
    """SCHEME.clock is the header's TALB_SF_CLOCK / TALB_SF_CLOCK_HOOK;
    SCHEME.inline its TALB_SF_INLINE (no program of its own)."""
    for s in registry.SCHEMES:
        text = (BPF_SRC_DIR / "include" / "talb" / "schemes" / f"{s.name}.h").read_text()
        flags = re.search(rf"^#define\s+TALB_SCHEME_{s.name.upper()}_FLAGS\s+(.*?)(?<!\\)$",
                          text.replace("\\\n", " "), re.M).group(1)
        assert ("TALB_SF_CLOCK" in flags) is s.clock, s.name
        assert ("TALB_SF_INLINE" in flags) is s.inline, s.name
        assert ("TALB_SF_PROGRAM" in flags) is not s.inline, s.name


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


def test_config_keeps_its_size_with_the_spare_words_left():
    """docs/schemes.md "Limits": a new scheme's parameters take struct
    talb_config's reserved words (Presto's flowcell size took one of three),
    so that the value keeps its size: 64 bytes, and a switch pinned by an
    older build still reads."""
    import ctypes

    from datapath.structs import TalbConfig

    text = (BPF_SRC_DIR / "include" / "talb" / "structs.h").read_text()
    body = re.search(r"struct talb_config \{(.*?)\};", text, re.S).group(1)
    spare = re.search(r"__u32 reserved\[(\d+)\];", body)
    assert spare and int(spare.group(1)) >= 1
    assert dict(TalbConfig._fields_)["reserved"]._length_ == int(spare.group(1))
    assert ctypes.sizeof(TalbConfig) == 64


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
                       match=r"datapath/schemes/hula.py: no header hula.h with #define "
                             r"TALB_SCHEME_HULA"):
        registry.discover()


def test_a_new_module_with_its_define_joins_the_registry(monkeypatch, tmp_path):
    from types import MappingProxyType

    _with_module(monkeypatch, tmp_path, "hula", RECORD.format(name="hula", id=14))
    monkeypatch.setattr(registry, "C_SCHEMES",
                        MappingProxyType({**registry.C_SCHEMES, "hula": 14}))
    found = registry.discover()
    assert [s.name for s in found] == [*(s.name for s in registry.SCHEMES), "hula"]


@pytest.mark.parametrize("name,id,message", [
    ("hula", 3, r"SCHEME.id is 3, but .* says TALB_SCHEME_HULA 6"),
    ("hula", 16, r"id 16: ids 0..15 fit \(TALB_MAX_SCHEMES"),
])
def test_a_module_whose_id_is_not_the_define_is_refused(monkeypatch, tmp_path, name, id, message):
    from types import MappingProxyType

    _with_module(monkeypatch, tmp_path, name, RECORD.format(name=name, id=id))
    monkeypatch.setattr(registry, "C_SCHEMES",
                        MappingProxyType({**registry.C_SCHEMES, name: 6 if id < 16 else 16}))
    with pytest.raises(registry.RegistryError, match=message):
        registry.discover()


def test_a_define_without_its_module_is_refused_by_name(monkeypatch):
    from types import MappingProxyType

    monkeypatch.setattr(registry, "C_SCHEMES", MappingProxyType({**registry.C_SCHEMES, "hula": 6}))
    with pytest.raises(registry.RegistryError,
                       match=r"defines TALB_SCHEME_HULA without its module: hula.py beside it"):
        registry.discover()


def test_a_module_whose_inline_or_clock_is_not_the_headers_is_refused(monkeypatch, tmp_path):
    """rps.h says TALB_SF_PROGRAM and no clock: a record saying otherwise is refused."""
    from dataclasses import replace

    from datapath.schemes import rps

    original = rps.SCHEME
    monkeypatch.setattr(rps, "SCHEME", replace(original, inline=True))
    with pytest.raises(registry.RegistryError,
                       match=r"datapath/schemes/rps.py: SCHEME.inline is True, but .*rps.h's "
                             r"TALB_SCHEME_RPS_FLAGS lack TALB_SF_INLINE"):
        registry.discover()
    monkeypatch.setattr(rps, "SCHEME", replace(original, clock=True))
    with pytest.raises(registry.RegistryError, match=r"SCHEME.clock is True, but .*rps.h's"):
        registry.discover()


# --- scheme headers: what the C side refuses ----------------------------------------------------
HEADER = """#define TALB_SCHEME_{up} {id}
#define TALB_SCHEME_{up}_FLAGS {flags}
"""


@pytest.mark.parametrize("id,flags,message", [
    ("16", "(TALB_SF_PROGRAM)", r"TALB_SCHEME_HULA 16: ids are 0..15"),
    ("3", "(TALB_SF_PROGRAM)", r"scheme 'hula' id 3: the id of .*drill.h \(scheme 'drill' id 3\)"),
    ("9", "(TALB_SF_PROGRAM | TALB_SF_INLINE)", r"exactly one of TALB_SF_INLINE .* and TALB_SF_PROGRAM"),
    ("9", "(TALB_SF_INLINE | TALB_SF_DEFAULT)", r"exactly one scheme is TALB_SF_DEFAULT"),
    ("9", "(TALB_SF_INLINE | TALB_SF_EVERY_HOP)", r"TALB_SF_EVERY_HOP needs TALB_SF_PROGRAM"),
    ("9", "(1U << 20 | TALB_SF_PROGRAM)", r"bits 0x100000 are no TALB_SF_\*"),
])
def test_a_bad_scheme_header_is_refused_naming_it(tmp_path, id, flags, message):
    from common.c_constants import SchemeHeaderError, scheme_headers

    (tmp_path / "hula.h").write_text(HEADER.format(up="HULA", id=id, flags=flags))
    with pytest.raises(SchemeHeaderError, match=message) as ei:
        scheme_headers({"TALB_SCHEME_PATH": str(tmp_path)})
    assert "hula.h" in str(ei.value)


def test_a_header_without_flags_and_a_missing_directory_are_refused(tmp_path):
    from common.c_constants import SchemeHeaderError, scheme_headers

    (tmp_path / "hula.h").write_text("#define TALB_SCHEME_HULA 9\n")
    with pytest.raises(SchemeHeaderError, match=r"hula.h: no #define TALB_SCHEME_HULA_FLAGS"):
        scheme_headers({"TALB_SCHEME_PATH": str(tmp_path)})
    with pytest.raises(SchemeHeaderError, match=r"TALB_SCHEME_PATH: .*nowhere is not a directory"):
        scheme_headers({"TALB_SCHEME_PATH": str(tmp_path / "nowhere")})


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


# --- the control plane calls each scheme's hooks instead of naming it ------------------------------
def test_shared_control_plane_names_no_scheme_but_talb():
    """Issue 37: datapath/control.py and datapath/fabric.py reach a scheme's
    own control through its record (Scheme.install, .config_view, .control,
    its params' fields and timers). TaLB's groups, PCM and tensor table are
    still control.py's: not checked here."""
    others = [s.name for s in registry.SCHEMES if s.name != "talb"]
    assert {"ecmp", "drill", "conga"} <= set(others)
    for rel in ("datapath/control.py", "datapath/fabric.py"):
        named = re.findall("|".join(others), (REPO / rel).read_text(), re.I)
        assert not named, (rel, named)


def test_a_schemes_control_functions_keep_their_names_in_control():
    from datapath import control
    from datapath.control import ecmp_index, read_queue_estimates   # as callers always did
    from datapath.schemes import conga, drill, ecmp

    assert control.set_conga_leaves is conga.set_conga_leaves
    assert control.read_conga_tables is conga.read_conga_tables
    assert read_queue_estimates is drill.read_queue_estimates and ecmp_index is ecmp.ecmp_index
    assert {"set_conga_leaves", "read_queue_estimates", "flow_hash"} <= set(control.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'hula_tables'"):
        control.hula_tables


class _OneConfig:
    """A switch's maps as read_config reads them: config[0] only."""

    def __init__(self, cfg):
        self.config = {0: cfg}


def test_read_config_takes_every_schemes_fields_from_its_record():
    from datapath.control import read_config
    from datapath.structs import TalbConfig

    cfg = TalbConfig()                      # all 0: nothing set
    cfg.conga_leaf, cfg.drill_d, cfg.flowlet_timeout_us = 2, 3, 700
    out = read_config(_OneConfig(cfg))
    # the keys a run records (results files keep their keys)
    assert set(out) == {
        "scheme", "hash_seed", "release_sk", "flags", "fallback_scheme", "tensor_limit",
        "tensor_idle_us", "n_bands", "layers_per_band", "flowlet_timeout_us", "drill_d",
        "drill_m", "conga_dre_us", "conga_age_us", "conga_alpha_shift", "conga_q_bits",
        "conga_leaf", "presto_cell_bytes"}
    assert (out["scheme"], out["fallback_scheme"]) == ("ecmp", "ecmp")
    assert out["presto_cell_bytes"] == 65536                # Presto's flowcell, the paper's 64 KB
    assert (out["drill_d"], out["flowlet_timeout_us"], out["conga_leaf"]) == (3, 700, 1)
    # 0 out of a parameter's range is its default; 0 in range (DRILL's m) is 0
    assert out["drill_m"] == 0
    assert out["conga_dre_us"] == CONST["TALB_DEFAULT_CONGA_DRE_US"]
    assert out["tensor_limit"] == CONST["TALB_MAX_TENSORS"]
    assert out["tensor_idle_us"] == CONST["TALB_DEFAULT_IDLE_US"]
    cfg.conga_leaf = 0
    assert read_config(_OneConfig(cfg))["conga_leaf"] is None          # a spine


def test_a_control_function_name_two_schemes_share_is_refused(monkeypatch, tmp_path):
    from types import MappingProxyType

    source = "def read_conga_tables(maps):\n    return {}\n" + RECORD.format(
        name="hula", id=6).replace("model=print)", "model=print, control=(read_conga_tables,))")
    _with_module(monkeypatch, tmp_path, "hula", source)
    monkeypatch.setattr(registry, "C_SCHEMES",
                        MappingProxyType({**registry.C_SCHEMES, "hula": 6}))
    with pytest.raises(registry.RegistryError,
                       match=r"hula\.py: SCHEME\.control read_conga_tables: scheme 'conga' has "
                             r"a control function of that name"):
        registry.discover()


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
    assert "fallback ecmp: ecmp, rps, letflow, drill, presto, wcmp" in r.stdout
    assert "cell_bytes 65536 B (1500..1073741824)" in r.stdout


def test_talb_scheme_list_takes_no_name():
    r = subprocess.run([str(TALB), "scheme", "--list", "drill"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1
    assert "--list shows every scheme: it takes no NAME, --param or --cluster" in r.stderr


def test_help_texts_list_the_registry():
    from talb.cli_scheme import SCHEME_CHOICES, param_help

    assert SCHEME_CHOICES == "ecmp, rps, letflow, drill, conga, talb, presto or wcmp"
    assert param_help().startswith(
        "A parameter of the scheme (repeatable): letflow flowlet_us; drill d, m; conga "
        "flowlet_us, dre_us, alpha_shift, q_bits, age_us; talb fallback, tensor_limit, idle_us "
        "(and its fallback's); presto cell_bytes. flowlet_us, dre_us, age_us default to multiples")


def test_readme_and_docs_list_the_registry():
    """README's status names every scheme of the project, in id order;
    docs/schemes.md's table has a row per scheme with its header and its
    model (a scheme from $TALB_SCHEME_PATH is its author's to document)."""
    from common.c_constants import BUILTIN_SCHEME_DIR

    ours = [s for s in registry.SCHEMES
            if SCHEME_HEADERS[s.name].path.parent.resolve() == BUILTIN_SCHEME_DIR.resolve()]
    readme = (REPO / "README.md").read_text()
    status = re.search(r"data path with\s+(.*?)\s+\(tensor", readme, re.S).group(1)
    titles = [s.title for s in ours]
    assert re.findall(r"\*\*(\w+)\*\*", status) == titles
    assert "talb scheme --list" in readme
    docs = (REPO / "docs" / "schemes.md").read_text()
    for s in ours:
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
