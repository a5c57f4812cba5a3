"""How long a fabric takes to build and tear down (`talb bench build`).

For each shape (spines x leaves x hosts per leaf) and each of ``repeats``
rounds, as whole processes, the way a user runs them:

* ``talb testbed up`` with the BPF data path, **cold** (an empty cache of
  compiled programs: bcc compiles each program once) and **warm** (the
  cache filled by an earlier build: no compiler at all), then
  ``talb testbed down``;
* ``talb testbed up --datapath bridge`` (the kernel bridge alone, no
  programs) as the floor of building namespaces, links and queues;
* Mininet's build of the same shape (bench/mininet_build.py: LinuxBridge
  switches, TCLink links at the same rate), when the system Python has
  Mininet.

"up" is the time from starting the command until the fabric is up (for
Mininet: until its ``net.start()`` returned), so interpreter start and
imports count on both sides. The cache rounds use a cache directory of
their own (``TALB_BPF_CACHE``), not the user's. Results: a table, rows for
runs.csv and a plot of seconds against nodes (:func:`write`).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from common import paths
from common.excerpt import shown

__all__ = ["SHAPES", "parse_shape", "run", "write", "mininet_available", "summarise", "ratios",
           "flat_breakdown"]

#: the shapes `talb bench build` measures by default (spines, leaves, hosts per leaf)
SHAPES = ("4x4x4", "4x8x4", "8x8x8")
MININET_SCRIPT = Path(__file__).resolve().parent / "mininet_build.py"
SYSTEM_PYTHON = "/usr/bin/python3"
#: the links of every variant (talb's default rate; Mininet's TCLink bw)
RATE_MBIT = 100
VARIANTS = ("talb cold", "talb warm", "talb bridge", "mininet")
#: the paired ratios the bench reports (up seconds, round by round)
RATIOS = (("talb warm", "mininet"), ("talb warm", "talb bridge"), ("talb bridge", "mininet"))


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"4x8x4"`` -> (spines, leaves, hosts per leaf); ValueError naming it."""
    parts = text.lower().split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"a shape is SPINESxLEAVESxHOSTS_PER_LEAF (e.g. 4x4x4), got {shown(text)}")
    return shape


def nodes_of(shape: tuple[int, int, int]) -> int:
    spines, leaves, hpl = shape
    return spines + leaves + leaves * hpl


def mininet_available() -> str | None:
    """None when the system Python imports Mininet, else why not."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} not found"
    proc = subprocess.run([SYSTEM_PYTHON, "-c", "import mininet.net"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"Mininet is not installed for {SYSTEM_PYTHON} ({last}; apt-get install mininet)"
    return None


def _talb(*args: str, env: dict | None = None) -> float:
    """Run ``talb ARGS`` to the end; its wall seconds. RuntimeError with its
    output when it fails."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "talb.cli", *args], capture_output=True,
                          text=True, env=env)
    took = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"talb {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return took


def _talb_round(shape, prefix: str, *, datapath: str, cache: Path | None) -> dict:
    from netns_topology.state import read_state

    env = dict(os.environ)
    if cache is not None:
        env["TALB_BPF_CACHE"] = str(cache)
    s, lv, h = shape
    up = _talb("testbed", "up", "--spines", str(s), "--leaves", str(lv), "--hosts-per-leaf",
               str(h), "--datapath", datapath, "--no-agent", "--prefix", prefix, env=env)
    try:
        state = read_state(prefix)
    finally:
        down = _talb("testbed", "down", "--prefix", prefix)
    build = state.get("build_seconds")
    return {"up_s": round(up, 3), "build_s": build, "down_s": round(down, 3),
            "breakdown": flat_breakdown(state.get("breakdown"), up, build)}


def flat_breakdown(recorded: dict | None, up_s: float, build_s: float | None) -> dict:
    """Where one `talb testbed up` process went, flat (seconds): ``before``
    (interpreter start, imports, checks), each build step (``build.<step>``),
    ``attach`` (the wait for the kernel's verifier and the attaching), and
    ``after`` (printing the status table and exiting: the process's time
    less the rest); ``load.*``: the loading threads' wall and CPU seconds
    summed over nodes (they overlap the build: not parts of the sum)."""
    if not recorded:
        return {}
    out = {"before": recorded.get("before_build_s")}
    for step, secs in recorded.get("build", {}).items():
        out[f"build.{step}"] = secs
    if "attach_total_s" in recorded:
        out["attach"] = recorded["attach_total_s"]
    for key, value in recorded.get("load", {}).items():
        out[f"load.{key}"] = value
    if build_s is not None and out["before"] is not None:
        out["after"] = round(up_s - out["before"] - build_s, 3)
    return {k: v for k, v in out.items() if v is not None}


def _mininet_round(shape) -> dict:
    s, lv, h = shape
    started = time.monotonic()
    proc = subprocess.run([SYSTEM_PYTHON, str(MININET_SCRIPT), str(s), str(lv), str(h),
                           str(RATE_MBIT), "mb"], capture_output=True, text=True)
    took = time.monotonic() - started
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"Mininet build failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    out = json.loads(lines[-1])
    # the process's start to net.start() returning: its whole time minus the stop
    return {"up_s": round(took - out["down_s"], 3), "build_s": out["up_s"],
            "down_s": out["down_s"]}


def run(shapes=SHAPES, repeats: int = 3, *, prefix: str = "tbuild", mininet: bool = True,
        say: Callable[[str], None] = print) -> dict:
    """Measure every shape ``repeats`` times per variant; returns
    {"rows": [...], "mininet": None or why it was left out}."""
    paths.check_prefix(prefix)
    parsed = [(name, parse_shape(name)) for name in shapes]
    why_not = mininet_available() if mininet else "--no-mininet"
    if why_not:
        say(f"Mininet left out: {why_not}")
    variants = [v for v in VARIANTS if v != "mininet" or not why_not]
    total = len(parsed) * len(variants) * repeats
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="talb-bench-build-"))
    try:
        warm = tmp / "warm"
        say(f"filling a cache of compiled programs for the warm rounds ({warm})")
        _talb_round(parsed[0][1], prefix, datapath="bpf", cache=warm)
        done = 0
        for name, shape in parsed:
            for rnd in range(1, repeats + 1):
                for variant in variants:
                    if variant == "talb cold":
                        cold = tmp / f"cold-{name}-{rnd}"
                        r = _talb_round(shape, prefix, datapath="bpf", cache=cold)
                    elif variant == "talb warm":
                        r = _talb_round(shape, prefix, datapath="bpf", cache=warm)
                    elif variant == "talb bridge":
                        r = _talb_round(shape, prefix, datapath="bridge", cache=None)
                    else:
                        r = _mininet_round(shape)
                    done += 1
                    rows.append({"shape": name, "nodes": nodes_of(shape), "variant": variant,
                                 "round": rnd, **r})
                    say(f"[{done}/{total}] {name} ({nodes_of(shape)} nodes) {variant:<11} "
                        f"round {rnd}: up {r['up_s']:.2f} s, down {r['down_s']:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows, "mininet": why_not, "repeats": repeats, "rate_mbit": RATE_MBIT,
            "kernel": os.uname().release, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def summarise(rows: list[dict]) -> list[dict]:
    """One row per (shape, variant): median, min and max of up and down."""
    out = []
    keys = sorted({(r["nodes"], r["shape"], r["variant"]) for r in rows},
                  key=lambda k: (k[0], k[1], VARIANTS.index(k[2])))
    for nodes, shape, variant in keys:
        rs = [r for r in rows if (r["shape"], r["variant"]) == (shape, variant)]
        ups, downs = [r["up_s"] for r in rs], [r["down_s"] for r in rs]
        parts = {}
        for key in dict.fromkeys(k for r in rs for k in r.get("breakdown", {})):
            values = [r["breakdown"][key] for r in rs if key in r.get("breakdown", {})]
            parts[key] = round(statistics.median(values), 4)
        out.append({"shape": shape, "nodes": nodes, "variant": variant, "n": len(rs),
                    "up_median_s": round(statistics.median(ups), 3),
                    "up_min_s": min(ups), "up_max_s": max(ups),
                    "down_median_s": round(statistics.median(downs), 3),
                    "breakdown_median_s": parts})
    return out


def ratios(rows: list[dict], a: str, b: str) -> dict[str, float]:
    """{shape: median over rounds of up(a) / up(b)}, round by round (the
    variants of a round run back to back, so a machine's drift hits both)."""
    out = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {(r["variant"], r["round"]): r["up_s"] for r in rows if r["shape"] == shape}
        pairs = [by[(a, k)] / by[(b, k)] for (v, k) in by if v == a and (b, k) in by]
        if pairs:
            out[shape] = round(statistics.median(pairs), 3)
    return out


def write(results: dict, out_dir: str | os.PathLike) -> dict[str, Path]:
    """runs.csv (every round), summary.json (results + medians) and
    build_time.png (median up seconds against nodes, one line a variant)."""
    import csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = results["rows"]
    files = {"csv": out / "runs.csv", "json": out / "summary.json", "png": out / "build_time.png"}
    with open(files["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["shape", "nodes", "variant", "round", "up_s",
                                          "build_s", "down_s"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows)
    paired = {f"{a} / {b}": ratios(rows, a, b) for a, b in RATIOS}
    files["json"].write_text(json.dumps({**results, "summary": summary, "ratios": paired},
                                        indent=2))
    _plot(summary, files["png"], results)
    return files


def _plot(summary: list[dict], path: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for variant in VARIANTS:
        pts = [s for s in summary if s["variant"] == variant]
        if not pts:
            continue
        xs = [p["nodes"] for p in pts]
        ax.errorbar(xs, [p["up_median_s"] for p in pts],
                    yerr=[[p["up_median_s"] - p["up_min_s"] for p in pts],
                          [p["up_max_s"] - p["up_median_s"] for p in pts]],
                    marker="o", capsize=3, label=variant)
        for p in pts:
            ax.annotate(p["shape"], (p["nodes"], p["up_median_s"]), fontsize=7,
                        textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("nodes (switches + hosts)")
    ax.set_ylabel("seconds until the fabric is up (median, min-max)")
    title = f"fabric build time, {results.get('cpus')} CPUs, kernel {results.get('kernel')}"
    if results.get("mininet"):
        title += "\n(Mininet not measured: " + str(results["mininet"])[:60] + ")"
    ax.set_title(title, fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
