"""PNGs shaped like the paper's figures: one line per scheme (or agent
setting), mean over seeds with 95% error bars.

Every figure's drawn lines are read back from the matplotlib axes before
saving and returned (and written to plots.json): what each panel shows,
for the tests and for readers.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from common.c_constants import SCHEMES  # noqa: E402
from experiments.sweep.labels import scheme_label  # noqa: E402
from experiments.sweep.plan import arm  # noqa: E402
from experiments.sweep.results import est  # noqa: E402

MS = 1e3
#: figure kind -> panels: (metric, title, unit scale, y label)
FCT_PANELS = [("short_fct_mean_s", "(a) short flows: AFCT", MS, "ms"),
              ("short_fct_p99_s", "(b) short flows: p99 FCT", MS, "ms"),
              ("long_fct_mean_s", "(c) long flows: AFCT", MS, "ms"),
              ("all_fct_mean_s", "(d) all tensors: AFCT", MS, "ms")]
MOTIVATION_PANELS = [("trailing_fct_p99_s", "(a) trailing tensors: p99 FCT", MS, "ms"),
                     ("samples_per_s", "(b) training speed", 1, "samples/s")]
MPI_PANELS = [("iteration_time_s", "(a) MPI iteration time", MS, "ms"),
              ("samples_per_s", "(b) training speed", 1, "samples/s")]
TORCH_PANELS = [("iteration_time_s", "(a) PyTorch DDP iteration time", MS, "ms"),
                ("samples_per_s", "(b) training speed", 1, "samples/s")]
ABLATION_PANELS = FCT_PANELS[:2] + [("all_fct_mean_s", "(c) all tensors: AFCT", MS, "ms")]
#: the registry's id order (ecmp, rps, letflow, drill, conga, talb): the committed figures' order
SCHEME_ORDER = tuple(SCHEMES)


def group_by(pts, keys):
    """{(values of ``keys``): the points with them}: one figure per group."""
    out: dict[tuple, list] = {}
    for p in pts:
        out.setdefault(tuple(p[k] for k in keys), []).append(p)
    return out


def series_order(names):
    """Schemes in the paper's order; an arm (``ecmp/fifo``, plan.arm) after its scheme."""
    def key(s):
        scheme = str(s).split("/")[0]
        return (SCHEME_ORDER.index(scheme) if scheme in SCHEME_ORDER else 99, str(s))
    return sorted(names, key=key)


def draw_panel(ax, pts, *, x, series, metric, scale, title, ylabel, xlabel, xscale=1.0,
               legend=True, label=str):
    """One panel: a line per ``series(p)`` of ``metric`` over ``x``, mean
    with its 95% error bar, the lines dodged side by side; ``label(name)``
    the line's legend (labels.scheme_label: DRILL on an asymmetric fabric)."""
    names = series_order({series(p) for p in pts})
    xvals = sorted({p[x] * xscale for p in pts})
    span = (xvals[-1] - xvals[0]) or abs(xvals[0]) or 1.0
    dodge = 0.012 * span        # series side by side, so error bars at one x stay apart
    for i, name in enumerate(names):
        shift = (i - (len(names) - 1) / 2) * dodge
        mine = sorted((p for p in pts if series(p) == name), key=lambda p: p[x])
        xs, ys, errs = [], [], []
        for p in mine:
            e = est(p, metric)
            if e.mean is None:
                continue
            xs.append(p[x] * xscale + shift)
            ys.append(e.mean * scale)
            errs.append((e.half_width or 0.0) * scale)
        if xs:
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label(name))
    ax.set_title(title, fontsize=10)
    if len(xvals) == 1:          # one point per series, dodged: label only the true x
        ax.set_xticks(xvals)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.containers and legend:
        if len(names) > 6:       # many lines (ablation): the legend beside the panel
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        else:
            ax.legend(fontsize=8)


#: reference speeds drawn as black lines: (gap metric, label, line style). The
#: speed a gap is measured from is samples/s / (1 - gap) (experiments/sweep/results.py).
BOUNDS = [("ideal_gap", "ideal (compute-bound)", "--"),
          ("access_gap", "host-link bound (no balancer beats it)", ":")]


def _bounds(ax, pts, x: str, xscale: float = 1.0) -> None:
    """Each bound as a black line over x (mean over the points at that x);
    plain lines, not error bars: the manifest counts only the series."""
    drawn = False
    for gap, label, style in BOUNDS:
        at: dict = {}
        for p in pts:
            g, sp = p["est"][gap].mean, p["est"]["samples_per_s"].mean
            if g is not None and sp and g < 1:
                at.setdefault(p[x] * xscale, []).append(sp / (1 - g))
        if at:
            xs = sorted(at)
            ys = [sum(at[v]) / len(at[v]) for v in xs]
            if len(xs) == 1:
                ax.axhline(ys[0], ls=style, color="k", lw=1, label=label)
            else:
                ax.plot(xs, ys, ls=style, color="k", lw=1, label=label)
            drawn = True
    if drawn:
        ax.legend(fontsize=7)


def _lines(fig) -> dict:
    """{panel title: {line label: points}} read from the figure's axes."""
    out = {}
    for ax in fig.axes:
        out[ax.get_title()] = {c.get_label(): len(c.lines[0].get_xdata()) for c in ax.containers}
    return out


def save_figure(fig, path: Path, manifest: dict) -> None:
    """Write ``fig`` to ``path``, its drawn lines into ``manifest`` (plots.json)."""
    manifest[path.name] = _lines(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_name(parts) -> str:
    """A file name from a group's values: ``leafspine-load0.8``, ``10G``."""
    def one(p):
        if isinstance(p, float) and p >= 1e6:          # a link rate
            return f"{p / 1e9:g}G"
        if isinstance(p, float):
            return f"load{p:g}"
        if str(p).endswith((".yaml", ".yml")):          # a topology file
            return str(p).rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return str(p).replace("/", "-")                  # e.g. a placement h0+h1/h2
    return "-".join(one(p) for p in parts)


def _axes(pts) -> tuple[tuple, callable]:
    """The keys that split the figures further (placements, when the sweep
    ran more than one) and the suffix of a series' name (its minimum RTO,
    when the sweep ran more than one: one line per scheme and RTO)."""
    split = tuple(k for k in ("placement",) if len({p.get(k, "spread") for p in pts}) > 1)
    rtos = len({p.get("rto_min") for p in pts}) > 1

    def suffix(p):
        return f"/rto={p['rto_min']}" if rtos and p.get("rto_min") is not None else ""
    return split, suffix


def render(kind: str, pts: list[dict], out: Path, title: str) -> dict:
    """Draw the sweep's figures into ``out``; returns the manifest."""
    out = Path(out)
    manifest: dict = {}
    if kind in ("fct_vs_load", "ablation", "motivation", "mpi", "torch"):
        panels = {"fct_vs_load": FCT_PANELS, "ablation": ABLATION_PANELS,
                  "motivation": MOTIVATION_PANELS, "mpi": MPI_PANELS,
                  "torch": TORCH_PANELS}[kind]
        split, suffix = _axes(pts)
        keys = ("topology", "model", "arch", "target_link_bps") + \
            (("agent",) if kind != "ablation" else ()) + split
        if kind == "ablation":
            series = lambda p: (p["agent"] if p["scheme"] == "talb" else f"{p['scheme']} (reference)") + suffix(p)  # noqa: E731
        else:
            series = lambda p: arm(p["scheme"], p["queueing"], p.get("connections", "pair")) + suffix(p)  # noqa: E731
        for gkey, gpts in group_by(pts, keys).items():
            fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
            def label(name, topo=gkey[0]):
                return scheme_label(name, topo)
            for i, (ax, (metric, ptitle, scale, unit)) in enumerate(zip(axes[0], panels)):
                draw_panel(ax, gpts, x="load", series=series, metric=metric, scale=scale,
                           title=ptitle, ylabel=unit, xlabel="load",
                           legend=kind != "ablation" or i == len(panels) - 1, label=label)
            if kind == "motivation":
                _bounds(axes[0][-1], gpts, "load")
            fig.suptitle(f"{title} — {figure_name(gkey)}", fontsize=10)
            save_figure(fig, out / f"{kind}-{figure_name(gkey)}.png", manifest)
    elif kind == "speed_vs_rate":
        split, suffix = _axes(pts)
        for gkey, gpts in group_by(pts, ("topology", "arch", "load", "agent") + split).items():
            models = sorted({p["model"] for p in gpts})
            fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
            for ax, model in zip(axes[0], models):
                draw_panel(ax, [p for p in gpts if p["model"] == model], x="target_link_bps",
                       series=lambda p: arm(p["scheme"], p["queueing"],
                                            p.get("connections", "pair")) + suffix(p),
                       metric="samples_per_s", scale=1,
                       label=lambda name, topo=gkey[0]: scheme_label(name, topo),
                       title=model, ylabel="samples/s (target scale)",
                       xlabel="target link rate (Gbit/s)", xscale=1e-9)
                _bounds(ax, [p for p in gpts if p["model"] == model], "target_link_bps", 1e-9)
            fig.suptitle(f"{title} — {figure_name(gkey)}", fontsize=10)
            save_figure(fig, out / f"{kind}-{figure_name(gkey)}.png", manifest)
    else:
        raise ValueError(f"figure: unknown kind {kind!r}")
    (out / "plots.json").write_text(json.dumps(manifest, indent=1))
    return manifest
