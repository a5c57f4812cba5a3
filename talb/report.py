"""`talb report RESULTS`: a finished run's (or a sweep's) key panels as PNG,
from its results files, with matplotlib -- for readers without Grafana.

Reads `talb run`'s results files (workload/run_record.py, format
``talb-run/1``), of which it needs only::

    {"config": {"scheme": "talb", "model": "vgg19", "arch": "ps", "load": 0.4,
                "workers": 4, ...},
     "model": {"batch_size": 32, ...}, "scaling": {"time_scale": 1.0, ...},
     "iterations": [{"iteration": 3, "time_s": 1.9, "warmup": false}, ...],
     "tensors":    [{"layer": 0, "class": "short", "bytes": 24000, "fct_s": 0.004,
                     "warmup": false}, ...],
     "background": [{"size_bytes": 51000, "fct_s": 0.012}, ...]}   (optional)

or the same with ``"run": {"run_id", "scheme", "model", "arch", "load"}`` in
place of ``config`` and ``duration_s``/``samples_per_s`` per iteration. The
run id is the file's name. ``fct_s`` null = censored (never finished):
counted, never plotted as 0; warm-up iterations and tensors are left out.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

RUN_FIELDS = ("run_id", "scheme", "model", "arch", "load")


class ReportError(ValueError):
    """Bad or unreadable results: the message names the file and the field."""


def _need(obj: dict, key: str, where: str):
    if key not in obj:
        raise ReportError(f"{where}: missing field {key!r}")
    return obj[key]


def load_results(path: Path) -> dict:
    """One results file (read by workload/run_record.py read_record),
    normalised to {run, iterations, tensors, background}."""
    from workload.run_record import RecordError, read_record

    try:
        data = read_record(Path(path))
    except OSError as exc:
        raise ReportError(f"{path}: not a readable JSON results file ({exc})") from None
    except RecordError as exc:
        raise ReportError(str(exc)) from None
    if "run" in data:
        run = dict(data["run"])
    else:
        cfg = _need(data, "config", str(path))
        run = {"run_id": Path(path).stem, "scheme": cfg.get("scheme") or "fabric",
               **{k: _need(cfg, k, f"{path}: config") for k in ("model", "arch", "load")}}
    for key in RUN_FIELDS:
        _need(run, key, f"{path}: run")
    # samples/s at the target scale (measure.speed): workers x batch x time_scale / time
    try:
        per_iteration = (data["config"]["workers"] * data["model"]["batch_size"]
                         * data["scaling"]["time_scale"])
    except (KeyError, TypeError):
        per_iteration = None
    iters = []
    for i, it in enumerate(data.get("iterations", [])):
        if it.get("warmup"):
            continue
        if "duration_s" not in it and "time_s" not in it:
            raise ReportError(f"{path}: iterations[{i}]: missing field 'time_s'")
        took = it.get("duration_s", it.get("time_s"))
        if took is None:
            continue  # an iteration that never completed
        speed = it.get("samples_per_s", per_iteration / took if per_iteration and took > 0 else None)
        iters.append({"iteration": it.get("iteration", i), "duration_s": took, "samples_per_s": speed})
    tensors = []
    for i, t in enumerate(data.get("tensors", [])):
        for key in ("layer", "class", "fct_s"):
            _need(t, key, f"{path}: tensors[{i}]")
        if not t.get("warmup"):
            tensors.append(t)
    background = data.get("background")
    if not isinstance(background, list):  # a runner may nest the flows under load.background
        nested = (data.get("load") or {}).get("background")
        background = nested.get("flows", []) if isinstance(nested, dict) else []
    from workload.measure import rejudge

    guard = rejudge(data)       # an older file: judged again by the current rule
    cpu_bound = bool(guard.get("flagged", False))
    return {"path": str(path), "run": run, "iterations": iters, "tensors": tensors,
            "background": background,
            # a CPU-bound run measured the machine, not the scheme: say so on the page
            "cpu_bound": cpu_bound, "cpu_reason": guard.get("reason", "")}


def find_results(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out.extend(sorted(p.glob("*.json")) if p.is_dir() else [p])
    if not out:
        raise ReportError(f"RESULTS: no results files in {', '.join(paths)}")
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of finished values; nan if none."""
    vals = sorted(values)
    if not vals:
        return math.nan
    return vals[max(0, math.ceil(q / 100 * len(vals)) - 1)]


def fcts(records: list[dict], **match) -> list[float]:
    return [r["fct_s"] for r in records if r.get("fct_s") is not None
            and all(r.get(k) == v for k, v in match.items())]


def _label(run: dict) -> str:
    return f"{run['scheme']} {run['model']} {run['arch']} load {run['load']} ({run['run_id']})"


def _cdf(ax, values: list[float], label: str) -> None:
    vals = sorted(values)
    if vals:
        ax.step([v * 1e3 for v in vals], [(i + 1) / len(vals) for i in range(len(vals))],
                where="post", label=label)


def _log_x(ax) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels overlap on a short range


def _integer_x(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax, what: str, where: str = " in this run") -> None:
    ax.text(0.5, 0.5, f"no {what}{where}", ha="center", va="center",
            transform=ax.transAxes, color="grey")


def render_run(res: dict, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run, iters, tensors, bg = res["run"], res["iterations"], res["tensors"], res["background"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    fig.suptitle(f"talb run: {_label(run)}" + ("  [CPU-BOUND: not a measure of the scheme]"
                                                 if res.get("cpu_bound") else ""),
                 fontsize=13, color="tab:red" if res.get("cpu_bound") else "black")

    ax = axes[0][0]
    ax.plot([it.get("iteration", i) for i, it in enumerate(iters)],
            [it["duration_s"] for it in iters], marker="o")
    ax.set(title="Iteration time", xlabel="iteration", ylabel="seconds")
    ax.set_ylim(bottom=0)
    _integer_x(ax)

    ax = axes[0][1]
    speeds = [(it.get("iteration", i), it["samples_per_s"]) for i, it in enumerate(iters)
              if it.get("samples_per_s") is not None]
    ax.plot([s[0] for s in speeds], [s[1] for s in speeds], marker="o", color="tab:green")
    ax.set(title="Training speed (target scale)", xlabel="iteration", ylabel="samples/s")
    ax.set_ylim(bottom=0)
    _integer_x(ax)
    if not speeds:
        _empty(ax, "speed")

    ax = axes[0][2]
    for cls in ("short", "medium", "long"):
        vals = fcts(tensors, **{"class": cls})
        if vals:
            _cdf(ax, vals, f"{cls} (n={len(vals)}, p99 {percentile(vals, 99) * 1e3:.1f} ms)")
    ax.set(title="Tensor FCT CDF by class", xlabel="FCT (ms)", ylabel="fraction of tensors")
    if fcts(tensors):
        _log_x(ax)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "finished tensor")

    ax = axes[1][0]
    layers = sorted({t["layer"] for t in tensors})
    means = [_mean(fcts(tensors, layer=layer)) * 1e3 for layer in layers]
    p99 = [percentile(fcts(tensors, layer=layer), 99) * 1e3 for layer in layers]
    ax.bar([x - 0.2 for x in layers], means, width=0.4, label="mean")
    ax.bar([x + 0.2 for x in layers], p99, width=0.4, label="p99")
    ax.set(title="Tensor FCT by layer (0 = front)", xlabel="layer", ylabel="FCT (ms)")
    _integer_x(ax)
    ax.legend(fontsize=8)

    ax = axes[1][1]
    bvals = fcts(bg)
    _cdf(ax, bvals, f"background (n={len(bvals)}, p99 {percentile(bvals, 99) * 1e3:.1f} ms)")
    ax.set(title="Background flow FCT CDF", xlabel="FCT (ms)", ylabel="fraction of flows")
    if bvals:
        _log_x(ax)
        ax.legend(fontsize=8)
    else:
        _empty(ax, "background flows")

    ax = axes[1][2]
    ax.axis("off")
    censored = sum(1 for t in tensors if t.get("fct_s") is None)
    lines = [f"{k}: {run[k]}" for k in RUN_FIELDS] + [
        f"iterations (after warm-up): {len(iters)}",
        f"mean iteration: {_mean([it['duration_s'] for it in iters]):.3f} s",
        f"tensors: {len(tensors)} ({censored} censored)",
        f"short FCT mean / p99: {_ms(_mean(fcts(tensors, **{'class': 'short'})))} / "
        f"{_ms(percentile(fcts(tensors, **{'class': 'short'}), 99))}",
        f"long FCT mean / p99: {_ms(_mean(fcts(tensors, **{'class': 'long'})))} / "
        f"{_ms(percentile(fcts(tensors, **{'class': 'long'}), 99))}",
        f"background flows: {len(bvals)} finished of {len(bg)} planned, "
        f"p99 {_ms(percentile(bvals, 99))}",
    ] + (textwrap.wrap(f"CPU-bound: {res.get('cpu_reason', '')}", 52) if res.get("cpu_bound") else [])
    ax.text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=10)
    fig.tight_layout()
    path = out / f"{_safe(run['run_id'])}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def render_sweep(results: list[dict], out: Path) -> Path:
    """Several runs: short/long tensor p99, iteration time and background p99
    against load, one line per scheme (and model)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[float, dict]]] = {}
    for res in results:
        r = res["run"]
        series.setdefault(f"{r['scheme']} {r['model']} {r['arch']}", []).append((float(r["load"]), res))
    def p99_ms(records: list[dict], **match) -> float:
        return percentile(fcts(records, **match), 99) * 1e3

    panels = [
        ("Short tensor FCT p99", "ms", lambda s: p99_ms(s["tensors"], **{"class": "short"})),
        ("Long tensor FCT p99", "ms", lambda s: p99_ms(s["tensors"], **{"class": "long"})),
        ("Mean iteration time", "s", lambda s: _mean([it["duration_s"] for it in s["iterations"]])),
        ("Background FCT p99", "ms", lambda s: p99_ms(s["background"])),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(20, 5))
    fig.suptitle(f"talb sweep: {len(results)} runs", fontsize=13)
    by_load = len({load for pts in series.values() for load, _ in pts}) > 1
    names = sorted(series)
    for ax, (title, unit, fn) in zip(axes, panels):
        drawn = False
        for k, name in enumerate(names):
            pts = sorted(series[name], key=lambda p: p[0])
            ys = [fn(p[1]) for p in pts]
            if all(math.isnan(y) for y in ys):
                continue
            drawn = True
            if by_load:  # a line per scheme/model over the loads
                ax.plot([p[0] for p in pts], ys, marker="o", label=name, color=f"C{k}")
            else:        # one load: a bar per scheme/model (mean of its runs)
                finite = [y for y in ys if not math.isnan(y)]
                ax.bar(k, sum(finite) / len(finite), label=name, color=f"C{k}")
        ax.set(title=title, ylabel=unit, xlabel="background load" if by_load else "")
        if not by_load:
            ax.set_xticks(range(len(names)), names, rotation=15, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.margins(y=0.1)
        if drawn and by_load:
            ax.legend(fontsize=8)
        elif not drawn:
            _empty(ax, "data", "")
    fig.tight_layout()
    path = out / "sweep.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def render(paths: list[str], out_dir: str | None = None) -> list[Path]:
    """PNGs for every results file (one per run) and, for several, the sweep."""
    files = find_results(paths)
    results = [load_results(f) for f in files]
    out = Path(out_dir) if out_dir else files[0].with_name(f"{files[0].stem}-report")
    out.mkdir(parents=True, exist_ok=True)
    written = [render_run(res, out) for res in results]
    if len(results) > 1:
        written.append(render_sweep(results, out))
    return written


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1e3:.2f} ms"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name)) or "run"
