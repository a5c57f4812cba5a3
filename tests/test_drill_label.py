"""DRILL on an asymmetric fabric is labelled "DRILL without its asymmetry
handling" (issue 36, item 6): by the code that writes summaries and
plots (experiments/sweep/labels.py), in every committed summary table row
and figure legend of an asymmetric fabric, and in the README texts. No
root, no runs."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from experiments.sweep.labels import DRILL_ASYMMETRIC, caveat_md, fabric_kind, scheme_label

REPO = Path(__file__).resolve().parents[1]
LABELLED = f"drill ({DRILL_ASYMMETRIC})"


def test_label_follows_the_fabric():
    assert fabric_kind("topologies/lb-classic-sym.yaml") == "symmetric"
    assert fabric_kind("topologies/lb-classic-asym.yaml") == "asymmetric"      # a half-rate link
    assert fabric_kind("topologies/fig11-4spine.yaml") == "asymmetric"
    assert fabric_kind("topologies/linkdown.yaml") == "failed"                 # a link built down
    assert fabric_kind("topologies/lb-classic-fail.yaml") == "failed"          # a pair one link short
    assert scheme_label("drill", "topologies/lb-classic-sym.yaml") == "drill"
    assert scheme_label("drill", "topologies/lb-classic-asym.yaml") == LABELLED
    assert scheme_label("drill/fifo", "topologies/fig11.yaml") == f"drill/fifo ({DRILL_ASYMMETRIC})"
    assert scheme_label("drill", "topologies/lb-classic-fail.yaml") == LABELLED
    for other in ("ecmp", "rps", "letflow", "conga", "talb", "conga/fifo"):
        assert scheme_label(other, "topologies/lb-classic-asym.yaml") == other


def test_summary_paragraph_only_where_drill_ran_asymmetric():
    class Run:
        def __init__(self, scheme, topology):
            self.scheme, self.topology = scheme, topology
    assert caveat_md([Run("drill", "topologies/lb-classic-sym.yaml"),
                      Run("ecmp", "topologies/lb-classic-asym.yaml")]) == []
    md = caveat_md([Run("drill", "topologies/fig11-4spine.yaml")])
    assert md and md[0].startswith(f"**{DRILL_ASYMMETRIC}** on fig11-4spine")


def _asymmetric_stems() -> set[str]:
    return {p.stem for p in (REPO / "topologies").glob("*.yaml")
            if fabric_kind(str(p.relative_to(REPO))) != "symmetric"}


SUMMARIES = sorted(p for p in (REPO / "results").glob("*/summary.md"))


@pytest.mark.parametrize("summary", SUMMARIES, ids=lambda p: p.parent.name)
def test_committed_summaries_label_every_asymmetric_drill_row(summary):
    """Every table row of an asymmetric fabric whose scheme cell is DRILL
    carries the label; no row of a symmetric fabric does."""
    asym = _asymmetric_stems()
    rows = [line for line in summary.read_text().splitlines() if line.startswith("| ")]
    with open(summary.parent / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    fabrics = {Path(r["topology"]).stem for r in runs}
    drill_ran_asym = any(r["scheme"] == "drill" and Path(r["topology"]).stem in asym for r in runs)
    # a sweep on asymmetric fabrics only: every DRILL cell of every table (the
    # pairs tables name no fabric in their rows)
    only_asym = fabrics <= asym
    seen = 0
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        drill = [c for c in cells if c == "drill" or c.startswith("drill ") or c.startswith("drill/")]
        if not drill:
            continue
        if cells[0] in asym or only_asym:
            assert all(DRILL_ASYMMETRIC in c for c in drill), line[:160]
            seen += 1
        elif cells[0] in {p.stem for p in (REPO / "topologies").glob("*.yaml")}:
            assert not any(DRILL_ASYMMETRIC in c for c in drill), line[:160]
    # DRILL ran on an asymmetric fabric (a sweep without DRILL only names it in
    # the directions it could not test: "not run (drill)")
    if drill_ran_asym and any(f"| {stem} |" in summary.read_text() for stem in asym) and \
            "| drill" in summary.read_text():
        assert seen and f"**{DRILL_ASYMMETRIC}**" in summary.read_text()


@pytest.mark.parametrize("plots", sorted((REPO / "results").glob("*/plots.json")),
                         ids=lambda p: p.parent.name)
def test_committed_figures_label_drills_line_on_asymmetric_fabrics(plots):
    asym = _asymmetric_stems()
    for name, panels in json.loads(plots.read_text()).items():
        on_asym = any(stem in name for stem in asym)
        for lines in panels.values():
            for label in lines:
                if label.split(" ")[0].split("/")[0] == "drill":
                    assert (DRILL_ASYMMETRIC in label) == on_asym, (name, label)


@pytest.mark.parametrize("doc", ["README.md", "results/README.md", "results/lb-classic/README.md"])
def test_readmes_say_it(doc):
    assert DRILL_ASYMMETRIC in (REPO / doc).read_text().replace("\n", " ").replace("**", "")
