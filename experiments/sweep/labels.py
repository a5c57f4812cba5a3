"""What a scheme's results may be called, by the fabric they ran on.

DRILL (Ghorbani et al., SIGCOMM 2017, its section on asymmetry)
decomposes an asymmetric fabric into symmetric components, puts each
flow on one component and sprays its packets only within it. This data path's DRILL does not: it
chooses among every up port of a group by queue length, on any fabric.
Its results on an asymmetric fabric (links of different rates, or one
down: kind "asymmetric" or "failed") therefore do not test DRILL's claim, and every summary table,
figure legend and README sentence says so with :data:`DRILL_ASYMMETRIC`
(issue 36, item 6). The summaries and plots take the label from here, so
a new sweep carries it.
"""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

#: the label of an asymmetric fabric's DRILL results
DRILL_ASYMMETRIC = "DRILL without its asymmetry handling"


@functools.lru_cache(maxsize=None)
def fabric_kind(topology: str) -> str:
    """'failed' when a leaf-spine link is down, or a leaf-spine pair has
    fewer links than another (a failed parallel link left out, the routes
    converged: topologies/lb-classic-fail.yaml); else 'asymmetric' when the
    links differ in rate; else 'symmetric'."""
    from common import paths
    from netns_topology import load_topology

    path = Path(topology) if Path(topology).is_absolute() else paths.REPO_ROOT / topology
    links = [link for link in load_topology(path).links if link.kind == "fabric"]
    per_pair = Counter(frozenset((link.a, link.b)) for link in links if link.up)
    if not all(link.up for link in links) or len(set(per_pair.values())) > 1:
        return "failed"
    return "asymmetric" if len({link.rate_bps for link in links}) > 1 else "symmetric"


def _is_drill(name: str) -> bool:
    return str(name).split("/")[0].split(" ")[0] == "drill"


def scheme_label(name: str, topology: str) -> str:
    """``name`` (a scheme, or an arm such as ``drill/fifo``) as a table or a
    legend shows it on ``topology``: DRILL on an asymmetric fabric with
    :data:`DRILL_ASYMMETRIC` after it."""
    if _is_drill(name) and fabric_kind(topology) != "symmetric":
        return f"{name} ({DRILL_ASYMMETRIC})"
    return str(name)


def caveat_md(runs) -> list[str]:
    """The summary's paragraph on DRILL when ``runs`` (RunSpecs) ran it on
    an asymmetric fabric; nothing otherwise."""
    fabrics = sorted({Path(r.topology).stem for r in runs
                      if _is_drill(r.scheme) and fabric_kind(r.topology) != "symmetric"})
    if not fabrics:
        return []
    return [f"**{DRILL_ASYMMETRIC}** on {', '.join(fabrics)} (asymmetric: a link slower than "
            f"the others, or down). DRILL's paper (SIGCOMM 2017) splits an asymmetric "
            f"fabric into symmetric components and sprays a flow only within one; this data path's "
            f"DRILL does not, so its results there do not test DRILL's claims. Every DRILL row and "
            f"line on that fabric is labelled so.", ""]
