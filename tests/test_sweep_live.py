"""`talb bench --preset quick-ci` end to end on a real fabric: results
files, CSV, every PNG with one line per scheme, the summary's tables filled,
one fabric reused by every run, the agent running with the sweep's settings
in every run, and nothing left behind."""
from __future__ import annotations

import csv
import json

import pytest
from click.testing import CliRunner

from conftest import new_prefix

pytestmark = pytest.mark.live  # builds a fabric and runs traffic: `-m live` selects it


def test_quick_ci_preset_end_to_end(root, tmp_path):
    from common import paths
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.summary import PAPER_LOAD
    from netns_topology.teardown import namespaces
    from talb.cli import main

    prefix = new_prefix()
    out = tmp_path / "quick"
    plan = build_plan("quick-ci")
    schemes = sorted(plan.counts("scheme"))
    assert len(schemes) >= 2, schemes
    r = CliRunner().invoke(main, ["bench", "--preset", "quick-ci",
                                  "--out", str(out), "--prefix", prefix])
    try:
        assert r.exit_code == 0, r.output
        assert not namespaces(prefix) and not paths.state_dir(prefix).exists()   # fabric removed
        assert not (out / "failed.json").exists(), (out / "failed.json").read_text()
        files = sorted((out / "runs").glob("*.json"))
        assert {f.stem for f in files} == {s.key() for s in plan.runs}
        for spec in plan.runs:
            res = json.loads((out / "runs" / f"{spec.key()}.json").read_text())
            assert res["headline"]["scheme"] == spec.scheme          # set on every switch
            assert res["config"]["load"] == spec.load and res["config"]["seed"] == spec.seed
            assert res["fabric"]["built_for_run"] is False           # the sweep's fabric, reused
            agent = res["fabric"]["agent"]
            assert agent and agent["pid"], agent                     # an agent ran during the run
        pids = {json.loads(f.read_text())["fabric"]["agent"]["pid"] for f in files}
        assert len(pids) == len(files)                               # restarted before every run
        rows = list(csv.DictReader(open(out / "runs.csv")))
        assert len(rows) == len(plan.runs)
        assert all(row["status"] in ("ok", "cpu_bound") for row in rows)
        manifest = json.loads((out / "plots.json").read_text())
        assert manifest
        for name, panels in manifest.items():
            assert (out / name).stat().st_size > 10_000, name
            assert len(panels) == 4
            counted = {row["scheme"] for row in rows if row["status"] == "ok"}
            for title, lines in panels.items():
                assert sorted(lines) == sorted(counted), (name, title)
        md = (out / "summary.md").read_text()
        table = md.split("## Paper vs ours")[1].split("## Points")[0]
        row = next(x for x in table.splitlines() if x.startswith("| short-flow AFCT vs ECMP"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        # number | paper | ours (ratio) | TaLB - baseline | where | n | p (Holm) | verdict | effect
        assert cells[1] == "−68%", row
        # the paper's number is compared at 0.8, or at the top load when 0.8 is not swept
        top = PAPER_LOAD if PAPER_LOAD in plan.counts("load") else max(plan.counts("load"))
        at_top = [x for x in rows if float(x["load"]) == top and x["scheme"] in ("talb", "ecmp")]
        counted_seeds = {s: {x["seed"] for x in at_top if x["scheme"] == s and x["status"] == "ok"}
                         for s in ("talb", "ecmp")}
        if counted_seeds["talb"] & counted_seeds["ecmp"]:
            assert cells[2] != "-" and cells[3] != "-", row             # ours computed
            # a paired verdict (a CPU-bound run can leave one seed: "no test")
            assert cells[7].startswith(("TaLB better", "TaLB worse", "equivalent within",
                                        "inconclusive", "no test")), row
        elif counted_seeds["talb"] and counted_seeds["ecmp"]:   # counted, but on different seeds
            assert cells[2] == "-" and cells[7] == "no seed with both runs", row
        else:   # every seed of a point CPU-bound (the machine is shared): said so
            assert cells[2] == "-" and cells[7] == "no counted run (CPU-bound or failed)", row
    finally:
        from netns_topology.state import exists
        from testbed import lifecycle

        if exists(prefix):
            lifecycle.down(prefix)
