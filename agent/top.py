"""``talb top``: the agent's view of every switch, live in the terminal.

Reads the snapshot files the agents of a prefix write every second
(``/run/talb/<prefix>/agent*.json``): no Prometheus needed, and it works
for one agent per testbed as well as one per switch.
"""
from __future__ import annotations

import time

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from agent.snapshot import read_snapshots

STALE_AFTER_S = 3.0  # a snapshot older than this: its agent is not running


def _bar(x: float | None, width: int = 8) -> str:
    if x is None:
        return "-"
    n = round(max(0.0, min(1.0, x)) * width)
    return f"{'█' * n}{'·' * (width - n)} {x * 100:3.0f}%"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def _switch_table(name: str, sw: dict) -> Table:
    pcm, weight = {}, {}
    for g in sw["groups"]:
        for port, p, w in zip(g["ports"], g["pcm"], g["weights"]):
            pcm[port], weight[port] = p, w
    title = f"{name}  scheme {sw.get('scheme') or '-'}"
    if sw.get("tensors") is not None:
        title += f"  tensors {sw['tensors']}"
    t = Table(title=title, title_justify="left", expand=False, box=box.SIMPLE_HEAD)
    for col, justify in (("port", "left"), ("up", "left"), ("utilisation", "left"),
                         ("E[W] ms", "right"), ("qdisc ms", "right"), ("backlog B", "right"),
                         ("PCM", "right"), ("weight", "right")):
        t.add_column(col, justify=justify, no_wrap=True)
    for p in sw["ports"]:
        has = p["name"] in pcm
        t.add_row(p["name"], "up" if p["up"] else "[red]down[/]",
                  _bar(p["utilization"]), _ms(p["delay_model"]), _ms(p["delay_measured"]),
                  "-" if p["backlog_bytes"] is None else str(p["backlog_bytes"]),
                  f"{pcm[p['name']]:.3f}" if has else "-",
                  f"{weight[p['name']]:.3f}" if has else "-")
    return t


def render(prefix: str, now: float | None = None) -> Group:
    """One frame: a header per agent, a table per switch."""
    now = time.time() if now is None else now
    snaps = read_snapshots(prefix)
    if not snaps:
        return Group(Text(f"no agent is running for prefix '{prefix}' "
                          f"(start one: talb agent --prefix {prefix})", style="yellow"))
    parts = []
    for s in snaps:
        age = now - s["written"]
        loop = s.get("loop", {})
        head = Text(f"agent pid {s['pid']} ({s.get('switch') or 'testbed ' + s['prefix']}), "
                    f"window {s['config']['window_s'] * 1e3:g} ms, PCM delay "
                    f"{s['config']['pcm_delay']}, windows {loop.get('windows', 0)}, "
                    f"slow {loop.get('slow', 0)}, missed {loop.get('missed', 0)}, "
                    f"metrics http://{s['metrics']}/metrics")
        if age > STALE_AFTER_S:
            head.append(f"  [stale: {age:.0f} s old, agent not running?]", style="red")
        parts.append(head)
        for name, sw in s["switches"].items():
            parts.append(_switch_table(name, sw))
    return Group(*parts)
