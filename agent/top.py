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

# Sized for an 80-column terminal (8 columns, 72 characters at most): a
# port name is an interface name (at most 15 characters), the units sit in
# the headers' second line, and every number is at most 7 characters wide.
PORT_WIDTH = 15
BAR_WIDTH = 5


def _bar(x: float | None, width: int = BAR_WIDTH) -> str:
    if x is None:
        return "-"
    n = round(max(0.0, min(1.0, x)) * width)
    return f"{'█' * n}{'·' * (width - n)}{x * 100:4.0f}%"


def _ms(s: float | None) -> str:
    """Milliseconds in at most 7 characters, 3-4 significant digits."""
    if s is None:
        return "-"
    ms = s * 1e3
    return f"{ms:.2f}" if ms < 100 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def _fit(name: str, width: int = PORT_WIDTH) -> str:
    """``name`` cut in the middle to ``width`` (its end tells ports apart)."""
    if len(name) <= width:
        return name
    head = (width - 1) // 2
    return f"{name[:head]}…{name[len(name) - (width - 1 - head):]}"


def _switch_table(name: str, sw: dict) -> Table:
    pcm, weight = {}, {}
    for g in sw["groups"]:
        for port, p, w in zip(g["ports"], g["pcm"], g["weights"]):
            pcm[port], weight[port] = p, w
    title = f"{name}  scheme {sw.get('scheme') or '-'}"
    if sw.get("tensors") is not None:
        title += f"  tensors {sw['tensors']}"
    t = Table(title=title, title_justify="left", expand=False, box=box.SIMPLE_HEAD,
              show_edge=False, pad_edge=False)
    for col, justify in (("port", "left"), ("link", "left"), ("utilisation", "left"),
                         ("E[W]\nms", "right"), ("qdisc\nms", "right"),
                         ("backlog\nbytes", "right"), ("PCM", "right"), ("weight", "right")):
        t.add_column(col, justify=justify, no_wrap=True)
    for p in sw["ports"]:
        has = p["name"] in pcm
        t.add_row(_fit(p["name"]), "up" if p["up"] else "[red]down[/]",
                  _bar(p["utilization"]), _ms(p["delay_model"]), _ms(p["delay_measured"]),
                  "-" if p["backlog_bytes"] is None else str(p["backlog_bytes"]),
                  f"{pcm[p['name']]:.3f}" if has else "-",
                  f"{weight[p['name']]:.3f}" if has else "-")
    return t


def render(prefix: str, now: float | None = None) -> Group:
    """One frame: a header per agent, a table per switch."""
    return render_snapshots(read_snapshots(prefix), prefix, now)


def render_snapshots(snaps: list[dict], prefix: str, now: float | None = None) -> Group:
    """:func:`render` of given snapshots (what the agents of ``prefix`` wrote)."""
    now = time.time() if now is None else now
    if not snaps:
        return Group(Text(f"no agent is running for prefix '{prefix}' "
                          f"(start one: talb agent --prefix {prefix})", style="yellow"))
    parts = []
    for s in snaps:
        age = now - s["written"]
        loop = s.get("loop", {})
        # two lines, each within 80 columns for any prefix and an IPv4 address
        head = Text(f"agent pid {s['pid']} ({s.get('switch') or 'testbed ' + s['prefix']}), "
                    f"metrics http://{s['metrics']}/metrics\n"
                    f"window {s['config']['window_s'] * 1e3:g} ms, PCM delay "
                    f"{s['config']['pcm_delay']}, windows {loop.get('windows', 0)} "
                    f"(slow {loop.get('slow', 0)}, missed {loop.get('missed', 0)})")
        if age > STALE_AFTER_S:
            head.append(f"\n[stale: {age:.0f} s old, agent not running?]", style="red")
        parts.append(head)
        for name, sw in s["switches"].items():
            parts += [Text(""), _switch_table(name, sw)]
    return Group(*parts)
