"""How TaLB's gain and its parts move from deep buffers to another regime
(experiments/sweep/regime_shift.py), on rows with a known answer, and in a
committed sweep's summary."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from experiments.sweep.regime_shift import shift_table
from experiments.sweep.results import points
from experiments.sweep.summary import _GROUP

ROOT = Path(__file__).resolve().parent.parent

#: short-tensor AFCT (ms) per seed 1-4 of TaLB (T) and ECMP (X) under bands (B) and FIFO (F);
#: deep: TaLB's routing under bands halves ECMP's; scaled: it is the same as ECMP's
DEEP = {("talb", "bands"): [10, 11, 12, 10], ("talb", "fifo"): [30, 31, 29, 33],
        ("ecmp", "bands"): [20, 22, 24, 20], ("ecmp", "fifo"): [40, 41, 45, 44]}
SCALED = {("talb", "bands"): [6, 7, 6, 5], ("talb", "fifo"): [8, 9, 9, 7],
          ("ecmp", "bands"): [6, 7, 6, 5], ("ecmp", "fifo"): [10, 11, 9, 8]}


def _rows(regimes: dict) -> list[dict]:
    rows = []
    for regime, cells in regimes.items():
        for (scheme, q), values in cells.items():
            for seed, v in enumerate(values, 1):
                if v is None:
                    continue
                rows.append({"topology": "topologies/fig10.yaml", "scheme": scheme,
                             "model": "threelayer", "arch": "ps", "workers": 4, "servers": 1,
                             "load": 0.4, "seed": seed, "target_link_bps": 100e9,
                             "scaling_mode": "both", "iterations": 4, "warmup": 1,
                             "background_cdf": "websearch", "background_size_scale": None,
                             "agent": "default", "queueing": q, "regime": regime,
                             "status": "ok", "short_netfct_mean_s": v / 1e3})
    return rows


def _got(table, effect):
    [r] = [r for r in table if r["metric"] == "short_netfct_mean_s" and r["effect"] == effect]
    return r


def test_routing_under_bands_moves_towards_the_baseline_on_known_numbers():
    rows = _rows({None: DEEP, "scaled": SCALED})
    table = shift_table(rows, points(rows), _GROUP)
    r = _got(table, "routing_bands")
    assert r["regime"] == "scaled" and r["baseline"] == "ecmp" and r["seeds"] == [1, 2, 3, 4]
    # by hand: per seed (T,B)/(X,B) is 1 when scaled and 0.5 under deep: 2 at every seed
    assert r["pair"].ratio == pytest.approx(2.0)
    # the gain (T,B)/(X,F): scaled 0.6, 0.636, 0.667, 0.625 against deep 0.25, 0.268, 0.267, 0.227
    per_seed = [(6 / 10) / (10 / 40), (7 / 11) / (11 / 41), (6 / 9) / (12 / 45),
                (5 / 8) / (10 / 44)]
    gain = _got(table, "gain")
    assert gain["pair"].ratio == pytest.approx(math.exp(sum(map(math.log, per_seed)) / 4))
    assert gain["verdict"] == "moves towards ECMP+FIFO"
    # Holm across the table's rows of the metric: never below the raw p
    assert all(x["p_holm"] >= x["pair"].p for x in table if x["pair"].p is not None)


def test_every_effect_of_a_baseline_rests_on_the_seeds_counted_in_both_regimes():
    scaled = {**SCALED, ("ecmp", "fifo"): [10, None, 9, 8]}     # seed 2's run not counted
    rows = _rows({None: DEEP, "scaled": scaled})
    table = shift_table(rows, points(rows), _GROUP)
    assert {tuple(r["seeds"]) for r in table} == {(1, 3, 4)}


def test_the_papers_design_follows_the_gain_only():
    # fig10-paper-regime's arms: TaLB with its bands, the baseline on FIFO ports
    arms = (("talb", "bands"), ("ecmp", "fifo"))
    rows = _rows({r: {a: cells[a] for a in arms} for r, cells in ((None, DEEP),
                                                                  ("scaled", SCALED))})
    table = shift_table(rows, points(rows), _GROUP)
    assert {r["effect"] for r in table} == {"gain"}
    gain = _got(table, "gain")
    full = _got(shift_table(*(lambda rs: (rs, points(rs)))(_rows({None: DEEP, "scaled": SCALED})),
                            _GROUP), "gain")
    # the same seeds and the same ratio of ratios as when all four arms ran
    assert gain["seeds"] == full["seeds"] == [1, 2, 3, 4]
    assert gain["pair"].ratio == pytest.approx(full["pair"].ratio)


def test_nothing_without_deep_runs_or_another_regime():
    rows = _rows({None: DEEP})
    assert shift_table(rows, points(rows), _GROUP) == []
    rows = _rows({"scaled": SCALED, "scaled-ecn": SCALED})
    assert shift_table(rows, points(rows), _GROUP) == []


def test_the_committed_regime_sweep_reports_the_shift():
    out = ROOT / "results" / "fig10-factorial-regime"
    md = (out / "summary.md").read_text()
    assert "## From deep buffers to each regime" in md
    csv_text = (out / "regime_shift.csv").read_text()
    # every regime other than deep, every baseline, both loads
    for word in ("scaled", "scaled-ecn", "ecmp", "rps", "conga", "routing_bands", "gain"):
        assert word in csv_text
