"""A scheme made only of its own two files is a scheme of the project
(issue 37, docs/add-a-scheme.md): tests/fixtures/schemes/roundrobin.h and
roundrobin.py, found through TALB_SCHEME_PATH -- the tutorial's way --
with id 15, the last the data path has room for. Every command and module
runs in a process of its own with that variable set (the registry reads it
at import), as a user runs them: the CLI offers and lists it, `talb
attach`'s fabric files and the topology files take it, the agent exports
its decision counter, the presets' "all schemes" and the sweep's plan
include it, the switch program (TC and XDP) is built with it and decides as
its Python model does, within the verifier's budget. Without the variable
nothing of it shows."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "schemes"
TALB = Path(sys.executable).parent / "talb"


def env(with_plugin: bool = True) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "TALB_SCHEME_PATH"}
    if with_plugin:
        e["TALB_SCHEME_PATH"] = str(FIXTURES)
    e["COLUMNS"] = "200"
    return e


def run(*cmd, with_plugin: bool = True, timeout: float = 120):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=REPO,
                          env=env(with_plugin), timeout=timeout)


def python(code: str, with_plugin: bool = True):
    out = run(sys.executable, "-c", code, with_plugin=with_plugin)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_fixture_is_two_files():
    assert sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".h", ".py")) == \
        ["roundrobin.h", "roundrobin.py"]


def test_the_cli_lists_and_offers_it():
    listed = run(TALB, "scheme", "--list")
    assert listed.returncode == 0, listed.stderr
    row = next(ln for ln in listed.stdout.splitlines() if ln.startswith("│ roundrobin "))
    assert "every switch, per packet" in row and "tests/fixtures/schemes" in row
    helped = run(TALB, "testbed", "up", "--help")       # --scheme's choices
    assert helped.returncode == 0 and "roundrobin" in helped.stdout
    chosen = run(TALB, "bench", "--preset", "quick", "--schemes", "ecmp,roundrobin", "--dry-run")
    assert chosen.returncode == 0 and "roundrobin" in chosen.stdout, chosen.stderr
    # without the variable it is not a scheme at all
    assert "roundrobin" not in run(TALB, "scheme", "--list", with_plugin=False).stdout
    assert "roundrobin" not in run(TALB, "testbed", "up", "--help", with_plugin=False).stdout
    refused = run(TALB, "bench", "--preset", "quick", "--schemes", "ecmp,roundrobin",
                  "--dry-run", with_plugin=False)
    assert refused.returncode != 0 and "roundrobin" in refused.stderr + refused.stdout


def test_a_missing_scheme_directory_is_refused_by_name():
    e = env()
    e["TALB_SCHEME_PATH"] = str(FIXTURES / "nowhere")
    out = subprocess.run([str(TALB), "scheme", "--list"], capture_output=True, text=True,
                         cwd=REPO, env=e, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip() == f"talb: TALB_SCHEME_PATH: {FIXTURES / 'nowhere'} is not a directory"


def test_attach_topology_metrics_and_the_registry_take_it():
    got = python("""
import json
from common.c_constants import COUNTER_NAMES, CONST, SCHEMES
from datapath.schemes.registry import names
from datapath.loader import SCHEME_PROGS
from datapath.xdp import XDP_SCHEMES
from agent.metrics import DECISIONS, decisions
from netns_topology import topology_from_dict
from netns_topology.attach_spec import fabric_from_dict
fab = fabric_from_dict({"scheme": "roundrobin",
                        "switches": [{"name": "s1", "ports": [{"iface": "s1-eth1", "to": "h1"}]}],
                        "hosts": [{"name": "h1", "ip": "10.0.0.1", "iface": "eth0", "netns": "h1"}]})
topo = topology_from_dict({"scheme": "roundrobin"})
print(json.dumps({
    "names": list(names()), "id": SCHEMES["roundrobin"],
    "counter": COUNTER_NAMES[CONST["CNT_DECISION_BASE"] + 15],
    "prog": SCHEME_PROGS.get("roundrobin"), "xdp": "roundrobin" in XDP_SCHEMES,
    "metric": decisions({"decision_roundrobin": 5, "decision_ecmp": 1}),
    "attach": fab.scheme, "topology": topo.scheme}))
""")
    assert got["names"][-1] == "roundrobin" and got["id"] == 15
    assert got["counter"] == "decision_roundrobin"
    assert got["prog"] == "talb_scheme_roundrobin" and got["xdp"]
    assert ["roundrobin", "turn", 5] in got["metric"]
    assert got["attach"] == got["topology"] == "roundrobin"


def test_the_all_schemes_presets_and_the_plan_include_it():
    """A preset that runs every scheme runs this one too (fig10-2spine: its
    schemes are the registry's); one that names its schemes does not."""
    with_it = run(TALB, "bench", "--preset", "fig10-2spine", "--dry-run")
    without = run(TALB, "bench", "--preset", "fig10-2spine", "--dry-run", with_plugin=False)
    assert with_it.returncode == 0 and without.returncode == 0, with_it.stderr + without.stderr
    assert "roundrobin" in with_it.stdout and "roundrobin" not in without.stdout
    named = run(TALB, "bench", "--preset", "ablation", "--dry-run")
    assert named.returncode == 0 and "roundrobin" not in named.stdout
    plan = python("""
import json
from experiments.sweep.plan import ALL_SCHEMES, PRESETS
from experiments.sweep.plots import SCHEME_ORDER
print(json.dumps({"all": list(ALL_SCHEMES), "order": list(SCHEME_ORDER),
                  "fig9": PRESETS["fig9"]["schemes"]}))
""")
    assert plan["all"][-1] == plan["order"][-1] == plan["fig9"][-1] == "roundrobin"


@pytest.mark.bpf
def test_the_switch_decides_as_its_model_within_the_budget(bcc):
    """TC and XDP: 36 packets over a 4-port group (all up, one down, two
    down) each leave by the port the model's turn gives, counted at
    CNT_DECISION_BASE + 15; its programs verified within the budget."""
    from datapath.bpf_syscall import VERIFIER_INSN_LIMIT
    from datapath.program import VERIFIER_BUDGET_SHARE

    out = run(sys.executable, REPO / "tests" / "scheme_plugin_probe.py", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["decision_counter"] == 15
    budget = int(VERIFIER_BUDGET_SHARE * VERIFIER_INSN_LIMIT)
    for kind in ("tc", "xdp"):
        r = got[kind]
        assert r["sent"] == 36 and r["mismatches"] == [], (kind, r["mismatches"])
        assert r["config_scheme"] == "roundrobin"
        assert r["counters"]["decision_roundrobin"] == 36, (kind, r["counters"])
        assert r["counters"].get("scheme_fallback", 0) == 0
        assert 0 < r["verified_insns"]["talb_scheme_roundrobin"] <= budget, r["verified_insns"]


@pytest.mark.bpf
def test_a_testbed_runs_it_and_its_decisions_are_counted(bcc, request):
    """`talb testbed up --scheme roundrobin` as the tutorial shows it (a
    small fabric: two leaves, two spines): every switch runs it, and
    traffic from one leaf to the other is spread by it over both uplinks
    (its decision counter, read in a process of its own)."""
    from conftest import new_prefix
    from testbed import lifecycle

    prefix = new_prefix()
    request.addfinalizer(lambda: (run(TALB, "testbed", "down", "--prefix", prefix),
                                  lifecycle.down(prefix)))
    up = run(TALB, "testbed", "up", "--prefix", prefix, "--spines", "2", "--leaves", "2",
             "--hosts-per-leaf", "1", "--no-agent", "--scheme", "roundrobin", timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    shown = run(TALB, "scheme", "--prefix", prefix)
    assert shown.returncode == 0, shown.stderr
    assert sum("roundrobin" in ln for ln in shown.stdout.splitlines()) == 4, shown.stdout
    # 20 pings h0 -> h1 cross leaf0's two uplinks in turn
    from helpers import ping
    from netns_topology.topo import LeafSpine

    # the same shape's addresses (this process, without TALB_SCHEME_PATH,
    # would refuse the testbed's own topology: its scheme is unknown here)
    dst = next(h.ip for h in LeafSpine(spines=2, leaves=2, hosts_per_leaf=1).hosts
               if h.name == "h1")
    assert ping(f"{prefix}-h0", dst, count=20) == 20
    got = python(f"""
import json
from common import paths
from datapath.control import read_counters
from datapath.maps import SwitchMaps
print(json.dumps(read_counters(SwitchMaps(paths.pin_dir("{prefix}", "leaf0")))))
""")
    assert got["decision_roundrobin"] >= 20, got


def test_a_plugin_whose_module_and_header_disagree_is_refused_naming_both(tmp_path):
    """The header says 15, the module 14: `talb` stops with one line naming
    both files, whatever the command."""
    import shutil

    shutil.copy(FIXTURES / "roundrobin.h", tmp_path / "roundrobin.h")
    (tmp_path / "roundrobin.py").write_text(
        (FIXTURES / "roundrobin.py").read_text().replace("id=15", "id=14"))
    e = env()
    e["TALB_SCHEME_PATH"] = str(tmp_path)
    out = subprocess.run([str(TALB), "scheme", "--list"], capture_output=True, text=True,
                         cwd=REPO, env=e, timeout=60)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (f"talb: {tmp_path / 'roundrobin.py'}: SCHEME.id is 14, but "
                                  f"{tmp_path / 'roundrobin.h'} says TALB_SCHEME_ROUNDROBIN 15")
