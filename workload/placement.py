"""Where a run's workers and servers sit (`talb run --placement`,
`talb bench --placement`; docs/workload.md, "Placement").

* ``spread`` (the default, every run before issue 18): hosts taken leaf by
  leaf in turn (h0 of leaf0, h0 of leaf1, ..., h1 of leaf0, ...), workers
  first, then servers.
* ``remote``: no worker on a leaf with a server (parameter server). Servers
  first, from the last leaf backwards; workers then fill the leaves from
  the first one, leaf by leaf, skipping every leaf that holds a server, so
  every tensor crosses the fabric and meets a load-balancing decision.
  Ring all-reduce has no servers: ``remote`` places its workers as
  ``spread`` does (neighbours on different leaves).
* explicit: ``WORKERS/SERVERS``, the hosts of each joined by ``+``, workers
  before the slash, servers after: ``h0+h1+h4+h5/h2``; ring all-reduce
  names its workers only (``h0+h4+h1+h5``). The hosts must be the
  fabric's, each once, as many as --workers and --servers say.

The background load's senders follow the placement (:func:`bg_senders`).
"""
from __future__ import annotations

import re

from common.excerpt import shown

#: the named placements (an explicit one is anything else that parses)
MODES = ("spread", "remote")
_HOST = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")      # a topology's node names (params.check_word)
SYNTAX = "spread, remote, or WORKERS/SERVERS with hosts joined by + (h0+h1+h4+h5/h2)"


def _need(cond: bool, value, what: str) -> None:
    if not cond:
        raise ValueError(f"--placement: {what}, got {shown(value)}")


def parse(value: str, arch: str = "ps") -> tuple[str, list[str], list[str]]:
    """``value`` -> (mode, workers, servers): ("spread" | "remote", [], [])
    or ("explicit", [host, ...], [host, ...]); checked for its syntax,
    duplicates and (``arch``) a servers' part only where there are servers;
    ValueError naming --placement and the value."""
    _need(isinstance(value, str) and value.strip() != "", value, f"one of {SYNTAX}")
    v = value.strip()
    if v in MODES:
        return v, [], []
    _need("+" in v or "/" in v, value, f"one of {SYNTAX}")
    w_part, slash, s_part = v.partition("/")
    workers = [h.strip() for h in w_part.split("+")]
    servers = [h.strip() for h in s_part.split("+")] if slash and s_part.strip() else []
    for h in workers + servers:
        _need(bool(_HOST.match(h)), value, f"host names joined by + ({h!r} is not one); {SYNTAX}")
    dup = sorted({h for h in workers + servers if (workers + servers).count(h) > 1})
    _need(not dup, value, f"each host once ({', '.join(dup)} named twice)")
    if arch == "ps":
        _need(bool(slash and servers), value, "the servers after a slash (WORKERS/SERVERS, "
                                              "e.g. h0+h1/h2)")
    else:
        _need(not servers, value, "ring all-reduce has no servers: name its workers only "
                                  "(h0+h1+h2)")
    return "explicit", workers, servers


def canonical(value: str, arch: str = "ps") -> str:
    """The placement as runs record and keys hash it: the mode, or the
    explicit hosts without blanks."""
    mode, workers, servers = parse(value, arch)
    if mode != "explicit":
        return mode
    return "+".join(workers) + (f"/{'+'.join(servers)}" if servers else "")


def place(topo, arch: str, workers: int, servers: int, placement: str = "spread") -> dict:
    """Hosts for the nodes: ``{"workers": [Host], "servers": [Host]}``
    (workers first in node order); ValueError naming the flag when the
    fabric cannot hold them so."""
    mode, w_names, s_names = parse(placement, arch)
    n_servers = servers if arch == "ps" else 0
    by_leaf: dict[str, list] = {}
    for h in topo.hosts:
        by_leaf.setdefault(h.leaf, []).append(h)
    if mode == "explicit":
        return _explicit(topo, placement, w_names, s_names, workers, n_servers)
    need = workers + n_servers
    if need > len(topo.hosts):
        raise ValueError(f"--workers/--servers: {need} nodes need {need} hosts, the fabric has "
                         f"{len(topo.hosts)} ({', '.join(h.name for h in topo.hosts)})")
    if mode == "remote" and n_servers:
        return _remote(by_leaf, workers, n_servers)
    order = []
    for i in range(max(len(v) for v in by_leaf.values())):
        order += [v[i] for v in by_leaf.values() if i < len(v)]
    return {"workers": order[:workers], "servers": order[workers:need]}


def _remote(by_leaf: dict, workers: int, servers: int) -> dict:
    leaves = list(by_leaf)
    s_groups, s_leaves, taken = [], [], 0          # from the last leaf backwards
    for leaf in reversed(leaves):
        if taken == servers:
            break
        s_groups.append(by_leaf[leaf][:servers - taken])
        s_leaves.append(leaf)
        taken += len(s_groups[-1])
    free = [h for leaf in leaves if leaf not in s_leaves for h in by_leaf[leaf]]
    if len(free) < workers:
        raise ValueError(
            f"--placement: remote puts no worker on a server's leaf; the {servers} server(s) take "
            f"{', '.join(reversed(s_leaves))}, which leaves {len(free)} host(s) on other leaves for "
            f"{workers} workers (fewer --workers or --servers, a fabric with more hosts, or "
            f"--placement spread), got 'remote'")
    return {"workers": free[:workers], "servers": [h for g in reversed(s_groups) for h in g]}


def _explicit(topo, value: str, w_names: list, s_names: list, workers: int,
              servers: int) -> dict:
    hosts = {h.name: h for h in topo.hosts}
    unknown = [h for h in w_names + s_names if h not in hosts]
    _need(not unknown, value, f"no host {', '.join(unknown)} in the fabric (hosts: "
                              f"{', '.join(hosts)})")
    _need(len(w_names) == workers, value, f"{len(w_names)} worker host(s) named, --workers is "
                                          f"{workers}")
    _need(len(s_names) == servers, value, f"{len(s_names)} server host(s) named, --servers is "
                                          f"{servers}")
    return {"workers": [hosts[h] for h in w_names], "servers": [hosts[h] for h in s_names]}


def mode_of(placement: str) -> str:
    """``spread``, ``remote`` or ``explicit``."""
    return placement if placement in MODES else "explicit"


def bg_senders(topo, placement: str, hosts: dict) -> tuple[list[str], str]:
    """The background load's senders and the rule that chose them. Under
    ``spread`` the workers (as the paper, and every run before issue 18:
    their background plans, keys and results stay as they were). Under
    ``remote`` and explicit placements every host of the fabric: remote puts
    the workers on few leaves, and workers-only senders would then load
    those leaves' uplinks alone, at up to leaves x the nominal load; from
    every host the load spreads over every leaf's uplinks as its capacity
    (workload.background.uplink_capacity_bps, all leaves' uplinks) assumes."""
    if mode_of(placement) == "spread":
        return [h.name for h in hosts["workers"]], "workers"
    return [h.name for h in topo.hosts], "every host"
