"""`talb bench build` (bench/build_time.py): its shapes, its table and its
files; the measurement itself is a benchmark, run by hand (docs/performance.md
(e))."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_shapes_parse_or_name_the_mistake():
    from bench.build_time import nodes_of, parse_shape

    assert parse_shape("4x8x4") == (4, 8, 4) and nodes_of((4, 8, 4)) == 4 + 8 + 32
    for bad in ("4x4", "4x0x4", "ax4x4", ""):
        with pytest.raises(ValueError, match="SPINESxLEAVESxHOSTS_PER_LEAF"):
            parse_shape(bad)


def test_cli_refuses_a_bad_shape_by_flag():
    proc = subprocess.run([sys.executable, "-m", "talb.cli", "bench", "build", "--shapes",
                           "4x4"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--shapes" in proc.stderr and "'4x4'" in proc.stderr


def test_summary_csv_json_and_plot_are_written(tmp_path):
    from bench.build_time import summarise, write

    rows = [{"shape": "4x4x4", "nodes": 24, "variant": v, "round": r, "up_s": up + r / 10,
             "build_s": up, "down_s": 0.5}
            for v, up in (("talb cold", 5.0), ("talb warm", 3.0), ("mininet", 2.0))
            for r in (1, 2, 3)]
    results = {"rows": rows, "mininet": None, "repeats": 3, "kernel": "x", "cpus": 2}
    files = write(results, tmp_path / "out")
    assert all(p.exists() and p.stat().st_size > 0 for p in files.values())
    summary = json.loads(files["json"].read_text())["summary"]
    warm = next(s for s in summary if s["variant"] == "talb warm")
    assert warm["up_median_s"] == 3.2 and (warm["up_min_s"], warm["up_max_s"]) == (3.1, 3.3)
    assert [s["variant"] for s in summarise(rows)] == ["talb cold", "talb warm", "mininet"]
    assert files["csv"].read_text().count("\n") == 1 + len(rows)


def test_without_mininet_the_bench_says_why(monkeypatch):
    from bench import build_time

    monkeypatch.setattr(build_time, "SYSTEM_PYTHON", "/nonexistent/python3")
    assert "not found" in build_time.mininet_available()
    monkeypatch.setattr(build_time, "SYSTEM_PYTHON", "/bin/false")
    assert "Mininet is not installed" in build_time.mininet_available()


def test_breakdown_is_flat_and_after_is_what_is_left():
    from bench.build_time import flat_breakdown

    recorded = {"before_build_s": 0.3, "build": {"namespaces": 0.05, "links": 0.02},
                "attach_total_s": 0.4, "load": {"switch_cpu_s": 1.5}}
    flat = flat_breakdown(recorded, up_s=1.0, build_s=0.5)
    assert flat == {"before": 0.3, "build.namespaces": 0.05, "build.links": 0.02,
                    "attach": 0.4, "load.switch_cpu_s": 1.5, "after": 0.2}
    assert flat_breakdown(None, 1.0, 0.5) == {}


def test_ratios_pair_the_variants_round_by_round():
    from bench.build_time import ratios, summarise

    rows = [{"shape": "4x4x4", "nodes": 24, "variant": v, "round": r, "up_s": up * r,
             "down_s": 0.1, "breakdown": {"before": 0.1 * r}}
            for v, up in (("talb warm", 1.0), ("mininet", 2.0)) for r in (1, 2, 3)]
    assert ratios(rows, "talb warm", "mininet") == {"4x4x4": 0.5}
    assert ratios(rows, "talb warm", "talb bridge") == {}
    warm = next(s for s in summarise(rows) if s["variant"] == "talb warm")
    assert warm["breakdown_median_s"] == {"before": 0.2}
