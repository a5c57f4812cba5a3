"""What each managed switch's ports are (name, rate, buffer) and how its
forwarding groups follow link state.

Two sources, one per kind of fabric (``talb agent --prefix P``, all its
switches, or ``--switch NAME``, one of them, from the same source):

* :class:`TopologyRouting` (a fabric `talb testbed up` built): the testbed's
  topology (state file) is the truth. A link is down when any port of it
  that the agent watches is down; the topology is updated
  (``set_link(a, b, up=False)``) and every switch whose forwarding state no
  longer matches it is reprogrammed (the groups ``datapath.fabric.program_fabric``
  would install), so
  that routing stays consistent across the fabric (a spine cut off from a
  leaf is also avoided by the other leaves). Links between the same two
  nodes are one link here: any of them down takes all down.
* :class:`FabricRouting` of :class:`LocalRouting` parts (a fabric `talb
  attach` loaded): each switch from its own maps and interfaces, with the
  ports' rates and buffers from the fabric file. The groups installed when
  the agent starts are the configuration; a down port is left out of them,
  a destination whose ports are all down is removed (the bridge carries it).

Either way ``program_switch`` does the writes: each group is one hash-map
value, replaced atomically. The switch's config map (scheme, hash seed,
flags) is never written here: the user owns it (one writer per field).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agent.linkstate import LinkWatcher
from common import paths
from common.c_constants import PORT_HOST
from datapath.control import port_flags, program_switch
from datapath.maps import SwitchMaps


OnError = Callable[[str, Exception], None]


@dataclass(frozen=True)
class PortSpec:
    name: str
    rate_bps: int
    kind: str                 # "host" or "fabric"
    queue_limit_bytes: int    # one band's drop-tail buffer


def installed_state(maps: SwitchMaps) -> tuple[dict, dict]:
    """(routes ``{ip: (ifindex, ...)}``, ports ``{ifindex: (port_id, flags)}``)
    as the data path has them now."""
    groups = {gid: tuple(g.ports()) for gid, g in maps.groups.items()}
    routes = {str(k): groups.get(gid, ()) for k, gid in maps.fwd.items()}
    ports = {ifindex: (p.port_id, p.flags) for ifindex, p in maps.ports.items()}
    return routes, ports


def _reprogram(maps: SwitchMaps, rows: list, routes: dict) -> None:
    """Ports, groups and routes only. The switch's config (scheme, seed,
    flags) is the user's (`talb scheme`, `talb testbed up`): the agent never
    writes it, so a scheme switched while a link flaps is never reverted by
    a read-modify-write of config[0] racing the user's."""
    program_switch(maps, rows, {ip: list(t) for ip, t in routes.items()}, scheme=None)


def _wanted_ports(rows) -> dict:
    return {ifindex: (pid, port_flags(host, up))
            for pid, (_name, ifindex, host, up) in enumerate(rows)}


class TopologyRouting:
    """Prefix mode: every switch of a testbed, routed from its topology."""

    def __init__(self, topo, prefix: str):
        self.topo, self.prefix = topo, prefix

    @property
    def switches(self) -> list[str]:
        return [s.name for s in self.topo.switches]

    def netns(self, switch: str) -> str:
        return paths.netns_name(self.prefix, switch)

    def ports(self, switch: str) -> list[PortSpec]:
        limit = self.topo.queue.limit
        return [PortSpec(p.name, p.rate_bps, p.kind, limit) for p in self.topo.ports(switch)]

    def _update_links(self, watchers: dict[str, LinkWatcher]) -> bool:
        pairs: dict[frozenset, tuple[str, str, bool, bool]] = {}
        for link in self.topo.links:
            ends = [(n, p) for n, p in ((link.a, link.a_port), (link.b, link.b_port)) if n in watchers]
            if not ends:
                continue
            key = frozenset((link.a, link.b))
            up = all(watchers[n].up(p) for n, p in ends)
            _, _, was, now = pairs.get(key, (link.a, link.b, link.up, True))
            pairs[key] = (link.a, link.b, was, now and up)
        changed = False
        for a, b, was, now in pairs.values():
            if was != now:
                self.topo.set_link(a, b, up=now)
                changed = True
        return changed

    def _wanted(self, switch: str, watcher: LinkWatcher) -> tuple[list, dict]:
        """Port rows and routes of ``switch`` as ``datapath.fabric.program_fabric``
        derives them, with ifindexes from the watcher (no netlink lookup: a
        regroup must fit in a window or two)."""
        ports = self.topo.ports(switch)
        index = {p.name: watcher.ifindex(p.name) for p in ports}
        rows = [(p.name, index[p.name], p.kind == "host", p.up) for p in ports]
        routes = {ip: tuple(index[n] for n in names)
                  for ip, names in self.topo.forwarding_groups(switch).items()}
        return rows, routes

    def sync(self, watchers: dict[str, LinkWatcher], maps: dict[str, SwitchMaps],
             on_error: OnError | None = None) -> list[str]:
        """Bring every switch in line with link state; the switches reprogrammed.
        ``on_error(switch, exc)``: a switch that fails is reported there and
        the others are still reprogrammed (None: the first error raises)."""
        self._update_links(watchers)
        done = []
        for switch, m in maps.items():
            try:
                rows, routes = self._wanted(switch, watchers[switch])
                if (routes, _wanted_ports(rows)) != installed_state(m):
                    _reprogram(m, rows, routes)
                    done.append(switch)
            except Exception as exc:
                if on_error is None:
                    raise
                on_error(switch, exc)
        return done


class LocalRouting:
    """One attached switch, from its own maps and interfaces; its ports'
    rates and buffers as described (``port_specs``, by interface name)."""

    def __init__(self, switch: str, netns: str | None, maps: SwitchMaps, watcher: LinkWatcher,
                 port_specs: dict[str, PortSpec]):
        self.switch, self._netns = switch, netns
        names = {link.ifindex: name for name, link in watcher.links.items()}
        installed = sorted(maps.ports.items(), key=lambda kv: kv[1].port_id)
        if not installed:
            raise LookupError(f"switch {switch}: no ports installed in its maps "
                              f"(is its data path programmed?)")
        self._rows = []  # (name, ifindex, is_host), by port id
        for pid, (ifindex, info) in enumerate(installed):
            if info.port_id != pid or ifindex not in names:
                raise LookupError(f"switch {switch}: installed ports are not ids 0..n-1 of "
                                  f"interfaces in {netns or 'this namespace'}")
            self._rows.append((names[ifindex], ifindex, bool(info.flags & PORT_HOST)))
        self._routes, _ = installed_state(maps)
        missing = [name for name, _, _ in self._rows if name not in port_specs]
        if missing:
            raise LookupError(f"switch {switch}: no description of port(s) {', '.join(missing)}")
        self._ports = [port_specs[name] for name, _, _ in self._rows]

    @property
    def switches(self) -> list[str]:
        return [self.switch]

    def netns(self, switch: str) -> str | None:
        return self._netns

    def ports(self, switch: str) -> list[PortSpec]:
        return list(self._ports)

    def sync(self, watchers: dict[str, LinkWatcher], maps: dict[str, SwitchMaps],
             on_error: OnError | None = None) -> list[str]:
        watcher, m = watchers[self.switch], maps[self.switch]
        up = {ifindex: watcher.up(name) for name, ifindex, _ in self._rows}
        rows = [(name, ifindex, host, up[ifindex]) for name, ifindex, host in self._rows]
        routes = {}
        for ip, members in self._routes.items():
            live = tuple(x for x in members if up.get(x))
            if live:
                routes[ip] = live
        try:
            if (routes, _wanted_ports(rows)) == installed_state(m):
                return []
            _reprogram(m, rows, routes)
        except Exception as exc:
            if on_error is None:
                raise
            on_error(self.switch, exc)
            return []
        return [self.switch]


class FabricRouting:
    """An attached fabric (testbed/attach.py): each switch routed as in
    switch mode (:class:`LocalRouting`: the groups `talb attach` installed
    are the configuration, a down port is left out of them), with the
    ports' rates and buffers from the fabric file."""

    def __init__(self, parts: dict[str, LocalRouting]):
        self._parts = parts

    @property
    def switches(self) -> list[str]:
        return list(self._parts)

    def netns(self, switch: str) -> str | None:
        return self._parts[switch].netns(switch)

    def ports(self, switch: str) -> list[PortSpec]:
        return self._parts[switch].ports(switch)

    def sync(self, watchers: dict[str, LinkWatcher], maps: dict[str, SwitchMaps],
             on_error: OnError | None = None) -> list[str]:
        done = []
        for sw, part in self._parts.items():
            done += part.sync({sw: watchers[sw]}, {sw: maps[sw]}, on_error)
        return done
