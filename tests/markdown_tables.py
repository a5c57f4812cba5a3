"""Reading the tables of the project's markdown (README.md, a sweep's
summary.md) back into rows, so tests can hold what the text says against
what the data gives.

* :func:`section`: the text of one ``## ``/``### `` heading, up to the next
  heading of the same or a higher level.
* :func:`grids`, :func:`tables`: every pipe table in a text, as lists of
  cells or as rows by the header's cells.
* :func:`verdict_cells`: how many cells of a summary's table of TaLB against
  each scheme hold a verdict.
"""
from __future__ import annotations


def section(md: str, heading: str) -> str:
    """The body under the first heading whose text starts with ``heading``."""
    lines = md.splitlines()
    for i, line in enumerate(lines):
        level = len(line) - len(line.lstrip("#"))
        if level and line[level:].strip().startswith(heading):
            body = []
            for nxt in lines[i + 1:]:
                nl = len(nxt) - len(nxt.lstrip("#"))
                if nl and nl <= level and nxt[nl:nl + 1] == " ":
                    break
                body.append(nxt)
            return "\n".join(body)
    raise KeyError(f"no heading starting {heading!r}")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def grids(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every pipe table (a header line, a ``|---|`` line, rows) in ``text``, as
    its header's cells and its rows' cells (for headers that repeat a name)."""
    out, lines, i = [], text.splitlines(), 0
    while i + 1 < len(lines):
        head, rule = lines[i].strip(), lines[i + 1].strip()
        if head.startswith("|") and rule.startswith("|") and set(rule) <= set("|-: "):
            cols, rows, i = _cells(head), [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((cols, rows))
        else:
            i += 1
    return out


def tables(text: str) -> list[list[dict[str, str]]]:
    """Every pipe table in ``text``, each a list of rows by the header's cells."""
    return [[dict(zip(cols, row)) for row in rows] for cols, rows in grids(text)]


def verdict_cells(md: str) -> int:
    """The cells of a summary's table of TaLB against each scheme that hold a
    verdict ("interval; verdict"; "-; -" where the outcome was not measured)."""
    body = section(md, "Paired comparisons: TaLB against each scheme")
    return sum(1 for row in tables(body)[0] for cell in row.values()
               if ";" in cell and not cell.endswith("; -"))
