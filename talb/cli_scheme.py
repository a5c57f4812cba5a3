"""What the CLI says about schemes, from the registry
(datapath/schemes/registry.py): the --scheme and --param help texts, and
`talb scheme --list`. A scheme added to the registry appears in all of them
with no edit here."""
from __future__ import annotations

from rich.table import Table

from datapath.schemes.registry import SCHEMES, fallback_choices


def _either(names) -> str:
    """``a, b or c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


#: "ecmp, rps, letflow, drill, conga or talb": the --scheme options' choices
SCHEME_CHOICES = _either(s.name for s in SCHEMES)


#: switch config field -> (talb scheme --param key, datapath.timers.Timers field)
#: of every parameter whose default follows the link rate
TIMER_FIELDS = {p.field: (p.name, p.timer) for s in SCHEMES for p in s.params if p.timer}


def param_help() -> str:
    """`talb scheme --param`'s help: each scheme's keys, and which follow the link rate."""
    keys = "; ".join(
        f"{s.name} {', '.join(p.name for p in s.params)}"
        + (" (and its fallback's)" if s.has_fallback else "")
        for s in SCHEMES if s.params)
    # the microsecond timers scale with the frame time (alpha_shift is a ratio)
    timed = list(dict.fromkeys(p.name for s in SCHEMES for p in s.params
                               if p.timer and p.unit == "us"))
    return (f"A parameter of the scheme (repeatable): {keys}. {', '.join(timed)} default to "
            "multiples of the fabric's frame time; =auto goes back to that. Defaults and "
            "why: docs/schemes.md.")


def _params_cell(s) -> str:
    lines = []
    for p in s.params:
        line = p.describe()
        if p.type == "scheme":
            line += f": {', '.join(fallback_choices())}"
        lines.append(line)
    return "\n".join(lines) or "-"


def scheme_table() -> Table:
    """Every scheme of the registry: where it decides, XDP, parameters
    (default, unit, range), paper."""
    t = Table(title="Load-balancing schemes (talb scheme NAME --param KEY=VALUE)",
              caption="*: the default follows the fabric's link rate (=auto goes back to it); "
                      "defaults and why: docs/schemes.md", caption_justify="left")
    for col in ("scheme", "decides", "XDP", "parameters: default (range)", "paper"):
        t.add_column(col)
    for s in SCHEMES:
        t.add_row(s.name, s.decides, "yes" if s.xdp else "no", _params_cell(s), s.paper)
    return t
