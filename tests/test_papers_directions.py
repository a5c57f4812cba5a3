"""Issue 42's directions table (experiments/sweep/directions.py): each
paper's system against the arm it set out to beat, paired by seed, and the
interaction that says whether TaLB's effect on ECMP depends on the setting,
from runs.csv rows with known effects."""
from __future__ import annotations

import pytest

from experiments.sweep import directions

BASE = dict(status="ok", topology="topologies/talb.yaml", model="vgg19", arch="ps", workers=4,
            servers=1, load=0.3, target_link_bps=10e9, scaling_mode="bytes", iterations=6,
            warmup=1, background_cdf=None, background_size_scale=0.1, agent="default",
            queueing="bands")
#: per-seed noise common to every arm, and a little of each arm's own (+-0.4%)
NOISE = [1.0, 1.03, 0.98, 1.01, 0.99]


def _own(i: int, j: int) -> float:
    return 1 + 0.004 * ((i + j) % 3 - 1)


def _rows(speed, **extra):
    """Rows for every (scheme, axis value) in ``speed`` ({(scheme, value): samples/s})."""
    axis = extra.pop("axis")
    return [{**BASE, **extra, "scheme": scheme, axis: value, "seed": i + 1,
             "samples_per_s": s * NOISE[i] * _own(i, j)}
            for j, ((scheme, value), s) in enumerate(speed.items()) for i in range(len(NOISE))]


def _find(tab, **kw):
    return [r for r in tab if all(r.get(k) == v for k, v in kw.items())]


def test_usbyte_against_bytescheduler_and_wfbp_and_talbs_effect_by_scheduler():
    """US-Byte 1.2x ByteScheduler and 1.5x WFBP under both schemes; TaLB
    1.1x ECMP under ByteScheduler and WFBP but 1.32x under US-Byte: the
    interaction (TaLB/ECMP under US-Byte over under ByteScheduler) is 1.2."""
    speed = {("ecmp", "bytescheduler"): 10.0, ("talb", "bytescheduler"): 11.0,
             ("ecmp", "usbyte"): 12.0, ("talb", "usbyte"): 15.84,
             ("ecmp", "wfbp"): 8.0, ("talb", "wfbp"): 8.8}
    tab = directions.table(_rows(speed, axis="scheduler"))
    d = _find(tab, kind="direction", scheme="ecmp", against="bytescheduler")[0]
    assert d["n"] == 5 and d["pair"].ratio == pytest.approx(1.2, rel=0.01)
    assert d["pair"].verdict(d["p_holm"], d["p_equiv_holm"]) == "better"
    assert _find(tab, kind="direction", scheme="ecmp", against="wfbp")[0]["pair"].ratio == \
        pytest.approx(1.5, rel=0.01)
    assert _find(tab, kind="direction", scheme="talb", against="bytescheduler")[0][
        "pair"].ratio == pytest.approx(1.44, rel=0.01)
    i = _find(tab, kind="interaction", against="bytescheduler")[0]
    assert i["scheme"] == "talb vs ecmp" and i["n"] == 5
    assert i["pair"].ratio == pytest.approx(1.2, rel=0.01)
    assert i["pair"].verdict(i["p_holm"], i["p_equiv_holm"]) == "better"
    iw = _find(tab, kind="interaction", against="wfbp")[0]
    assert iw["pair"].ratio == pytest.approx(1.2, rel=0.01)
    md = "\n".join(directions.markdown(tab))
    assert "## The papers' directions (issue 42)" in md and "| scheduler | usbyte | wfbp |" in md


def test_hybrid_against_ps_and_adaptive_against_any_constant_buffer():
    """hybrid 0.9x PS (worse, the opposite of Poseidon's direction: the
    table says so); adaptive fusion against constant:64mb and against none."""
    tab = directions.table(_rows({("ecmp", "ps"): 10.0, ("ecmp", "hybrid"): 9.0}, axis="comm"))
    (d,) = _find(tab, kind="direction")
    assert (d["axis"], d["ours"], d["against"]) == ("comm", "hybrid", "ps")
    assert d["pair"].verdict(d["p_holm"], d["p_equiv_holm"]) == "worse"
    assert not _find(tab, kind="interaction")          # TaLB did not run
    fus = directions.table(_rows({("talb", None): 10.0, ("talb", "adaptive"): 13.0,
                                  ("talb", "constant:64mb"): 10.4},
                                 axis="fusion", arch="allreduce", servers=0))
    const = _find(fus, kind="direction", against="constant:64mb")[0]
    assert const["pair"].ratio == pytest.approx(1.25, rel=0.01)
    assert _find(fus, kind="direction", against=None)[0]["pair"].ratio == pytest.approx(1.3, rel=0.01)


def test_unpaired_seeds_and_cpu_bound_runs_are_left_out():
    rows = _rows({("ecmp", "bytescheduler"): 10.0, ("ecmp", "usbyte"): 11.0}, axis="scheduler")
    rows[0]["status"] = "cpu_bound"                   # ByteScheduler's seed 1
    (d,) = _find(directions.table(rows), kind="direction")
    assert d["n"] == 4
    assert directions.table([]) == [] and directions.markdown([]) == []


def test_csv_rows_carry_the_verdict():
    tab = directions.table(_rows({("ecmp", "ps"): 10.0, ("ecmp", "hybrid"): 12.0}, axis="comm"))
    (row,) = directions.csv_rows(tab)
    assert row["ratio"] == pytest.approx(1.2, rel=0.01) and row["verdict"] == "better"
    assert "pair" not in row and row["claim"].startswith("Poseidon")
