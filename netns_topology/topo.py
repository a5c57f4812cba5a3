"""Topologies as data: nodes, links, ports and forwarding groups (Mininet-style API).

A Topo is pure description; builder.build() turns it into namespaces. Every
check that can fail does so here, before anything is built.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from common.excerpt import shown
from common.paths import NODE_RE

from .errors import TopologyError
from .params import (MAX_RATE, MIN_RATE, PARAMS, check_bool, check_int, check_keys, check_rate, check_word,
                     format_rto_min)
from .units import format_rate

# RFC 2544 benchmarking range: never collides with a lab's private addressing.
HOST_NET = ipaddress.IPv4Network("198.18.0.0/15")
MAC_PREFIX = "02:74:6c"  # locally administered; 0x74 0x6c = "tl"
HOST_IFACE = "eth0"
# Switch ports are named after their peer; 12 characters leave room for a
# "-N" parallel-link suffix within IFNAMSIZ (15). Also no '/', '..', spaces
# or shell characters: names become namespace and pin paths.
_NAME = NODE_RE
_RESERVED = {"lo", "br0", HOST_IFACE}
# HTB keeps a class's burst as a u32 count of 64 ns ticks.
_HTB_MAX_BURST_SECONDS = (2**32 - 1) * 64e-9
_KEEP = object()


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    leaf: str | None  # the switch it hangs off
    iface: str = HOST_IFACE
    prefixlen: int = HOST_NET.prefixlen


@dataclass(frozen=True)
class Switch:
    name: str
    role: str


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    a_port: str
    b_port: str
    rate_bps: int
    up: bool
    kind: str  # "host" (host-switch) or "fabric" (switch-switch)


@dataclass(frozen=True)
class Port:
    name: str  # interface name inside the node's namespace
    peer: str
    peer_port: str
    rate_bps: int
    kind: str
    up: bool


@dataclass
class _LinkSpec:
    a: str
    b: str
    a_port: str
    b_port: str
    rate: int | None  # None: the topology-wide default for its kind
    up: bool


def _host_address(offset: int) -> str:
    return str(HOST_NET.network_address + offset)


def _default_mac(ip: str) -> str:
    offset = int(ipaddress.IPv4Address(ip)) - int(HOST_NET.network_address)
    return f"{MAC_PREFIX}:" + ":".join(f"{b:02x}" for b in offset.to_bytes(3, "big"))


def _check_ip(value) -> str:
    try:
        ip = ipaddress.IPv4Address(value)
    except ValueError:
        raise TopologyError("ip", f"not an IPv4 address: {shown(value)}") from None
    if ip not in HOST_NET or ip in (HOST_NET.network_address, HOST_NET.broadcast_address):
        raise TopologyError("ip", f"must be a host address in {HOST_NET} (RFC 2544 benchmarking range), got {shown(value)}")
    return str(ip)


def _check_mac(value) -> str:
    if not isinstance(value, str) or not re.match(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}\Z", value.lower()):
        raise TopologyError("mac", f"must look like 02:74:6c:00:00:01, got {shown(value)}")
    if int(value[:2], 16) & 1:
        raise TopologyError("mac", f"must be a unicast address, got {shown(value)}")
    return value.lower()


class Topo:
    """A fabric of hosts (one interface each) and switches, joined by links.

    Topology-wide parameters (mtu, switch_mtu, host_link_rate, link_rate, queue,
    tcp_cc, scheme, shaping, rto_min) are attributes, checked when set.
    """

    def __init__(self, **params):
        check_keys("", params, PARAMS)
        self._hosts: dict[str, tuple[str, str]] = {}  # name -> (ip, mac)
        self._switches: dict[str, str] = {}  # name -> role
        self._links: list[_LinkSpec] = []
        self._links_of: dict[str, list[_LinkSpec]] = {}  # node -> its links, in order
        self._views: dict[str, list] = {}  # hosts/switches/links, until the next change
        for name, (default, _) in PARAMS.items():
            setattr(self, name, params.get(name, default))

    def __setattr__(self, name, value):
        if name in PARAMS:
            value = PARAMS[name][1](name, value)
            self._changed()
        super().__setattr__(name, value)

    def _changed(self) -> None:
        self._views.clear()

    def _view(self, key: str, make) -> list:
        # The same objects until the topology changes, so `a is b` works for callers.
        if key not in self._views:
            self._views[key] = make()
        return list(self._views[key])

    # -- building the description -------------------------------------------
    def _check_new_name(self, name) -> str:
        if not isinstance(name, str) or not _NAME.match(name) or name in _RESERVED:
            raise TopologyError("name", f"must be 1-12 lowercase letters/digits starting with a letter "
                                        f"(not lo, br0, eth0), got {shown(name)}")
        if name in self._hosts or name in self._switches:
            raise TopologyError("name", f"{shown(name)} is already a node")
        return name

    def _check_nodes(self, *nodes: str) -> None:
        for node in nodes:
            if node not in self._hosts and node not in self._switches:
                raise TopologyError("between", f"unknown node {shown(node)}")

    def add_host(self, name: str, ip: str | None = None, mac: str | None = None) -> str:
        """Add a host; ip defaults to the first free 198.18.x.y (x.1-x.254), mac is derived from the ip."""
        self._check_new_name(name)
        used_ips = {ip for ip, _ in self._hosts.values()}
        if ip is None:
            k = 0
            while (ip := _host_address(256 * (k // 254) + k % 254 + 1)) in used_ips:
                k += 1
        ip = _check_ip(ip)
        if ip in used_ips:
            raise TopologyError("ip", f"{ip} is already used by another host")
        mac = _check_mac(mac) if mac is not None else _default_mac(ip)
        if mac in {m for _, m in self._hosts.values()}:
            raise TopologyError("mac", f"{mac} is already used by another host")
        self._hosts[name] = (ip, mac)
        self._changed()
        return name

    def add_switch(self, name: str, role: str = "switch") -> str:
        self._switches[self._check_new_name(name)] = check_word("role", role)
        self._changed()
        return name

    def add_link(self, a: str, b: str, rate=None, up: bool = True) -> Link:
        """Join a and b; each end's interface is named after the other node."""
        self._check_nodes(a, b)
        if a == b:
            raise TopologyError("between", f"a link needs two different nodes, got {shown(a)} twice")
        if a in self._hosts and b in self._hosts:
            raise TopologyError("between", f"hosts connect only to switches, got {shown(a)} and {shown(b)}")
        for node in (a, b):
            if node in self._hosts and self._links_of.get(node):
                raise TopologyError("between", f"host {shown(node)} already has its one link ({HOST_IFACE})")
        rate = None if rate is None else check_rate("rate", rate)
        parallel = sum(1 for spec in self._links_of.get(a, []) if {spec.a, spec.b} == {a, b})
        if parallel > 99:
            raise TopologyError("between", f"at most 100 parallel links between {shown(a)} and {shown(b)}")
        suffix = f"-{parallel}" if parallel else ""
        spec = _LinkSpec(a, b, HOST_IFACE if a in self._hosts else b + suffix,
                         HOST_IFACE if b in self._hosts else a + suffix, rate, check_bool("up", up))
        self._links.append(spec)
        self._links_of.setdefault(a, []).append(spec)
        self._links_of.setdefault(b, []).append(spec)
        self._changed()
        return self._resolve(spec)

    def set_link(self, a: str, b: str, *, rate=_KEEP, up=_KEEP) -> None:
        """Change rate (None: back to the default) and/or state of every link between a and b."""
        self._check_nodes(a, b)
        specs = [spec for spec in self._links_of.get(a, []) if {spec.a, spec.b} == {a, b}]
        if not specs:
            raise TopologyError("between", f"no link between {shown(a)} and {shown(b)}")
        for spec in specs:
            if rate is not _KEEP:
                spec.rate = None if rate is None else check_rate("rate", rate)
            if up is not _KEEP:
                spec.up = check_bool("up", up)
        self._changed()

    def validate(self) -> None:
        """Checks that involve several fields at once (single fields are checked when set)."""
        for name in self._hosts:
            if not self._links_of.get(name):
                raise TopologyError("links", f"host {shown(name)} has no link (a host hangs off one switch)")
        if self.switch_mtu < self.mtu + 12:
            raise TopologyError("switch_mtu", f"must be >= mtu + 12 ({self.mtu + 12}) to carry the "
                                              f"12-byte TaLB IPv4 option, got {self.switch_mtu}")
        frame = self.switch_mtu + 14
        for key in ("limit", "burst", "cburst"):
            if getattr(self.queue, key) < frame:
                raise TopologyError(f"queue.{key}", f"must hold a full frame ({frame} bytes at switch_mtu "
                                                    f"{self.switch_mtu}), got {getattr(self.queue, key)}")
        slowest = min((link.rate_bps for link in self.links), default=None)
        for key in ("burst", "cburst"):
            if slowest and getattr(self.queue, key) * 8 / slowest > _HTB_MAX_BURST_SECONDS:
                raise TopologyError(f"queue.{key}", f"{getattr(self.queue, key)} bytes take longer than HTB "
                                                    f"can express ({_HTB_MAX_BURST_SECONDS:.0f} s) at "
                                                    f"{format_rate(slowest)}")

    # -- reading it -----------------------------------------------------------
    def _kind(self, spec: _LinkSpec) -> str:
        return "host" if spec.a in self._hosts or spec.b in self._hosts else "fabric"

    def _resolve(self, spec: _LinkSpec) -> Link:
        kind = self._kind(spec)
        rate = spec.rate or (self.host_link_rate if kind == "host" else self.link_rate)
        return Link(spec.a, spec.b, spec.a_port, spec.b_port, rate, spec.up, kind)

    def _ports_of(self, node: str) -> list[Port]:
        ports = []
        for link in map(self._resolve, self._links_of.get(node, [])):
            if link.a == node:
                ports.append(Port(link.a_port, link.b, link.b_port, link.rate_bps, link.kind, link.up))
            elif link.b == node:
                ports.append(Port(link.b_port, link.a, link.a_port, link.rate_bps, link.kind, link.up))
        return ports

    @property
    def hosts(self) -> list[Host]:
        return self._view("hosts", lambda: [Host(name, ip, mac, next((p.peer for p in self._ports_of(name)), None))
                                            for name, (ip, mac) in self._hosts.items()])

    @property
    def switches(self) -> list[Switch]:
        return self._view("switches", lambda: [Switch(name, role) for name, role in self._switches.items()])

    @property
    def links(self) -> list[Link]:
        return self._view("links", lambda: [self._resolve(spec) for spec in self._links])

    def ports(self, node: str) -> list[Port]:
        """A node's interfaces in link order (a host has one, eth0)."""
        if node not in self._hosts and node not in self._switches:
            raise TopologyError("node", f"unknown node {shown(node)}")
        return self._ports_of(node)

    def forwarding_groups(self, switch: str) -> dict[str, list[str]]:
        """{host ip: ports of `switch` on shortest paths to that host}, over links that are up.

        A switch gets an entry only if it lies on a shortest path from some
        other host: a spine cut off from a leaf has no entry for that leaf's
        hosts, instead of a detour down to another leaf and up again.
        Unreachable hosts have no entry. Works for any graph; hosts never forward.
        """
        if switch not in self._switches:
            raise TopologyError("switch", f"unknown switch {shown(switch)}")
        links = [(spec.a, spec.a_port, spec.b, spec.b_port) for spec in self._links if spec.up]
        return shortest_path_groups(switch, list(self._switches), links,
                                    {name: ip for name, (ip, _) in self._hosts.items()})

    def to_dict(self) -> dict:
        """JSON/YAML-ready form; topology_from_dict() reads it back."""
        d = self._params_dict()
        d["switches"] = [{"name": s.name, "role": s.role} for s in self.switches]
        d["hosts"] = [{"name": h.name, "ip": h.ip, "mac": h.mac} for h in self.hosts]
        d["links"] = [self._link_dict(spec, always=True) for spec in self._links]
        return d

    def _params_dict(self) -> dict:
        d = {"mtu": self.mtu, "switch_mtu": self.switch_mtu,
             "host_link_rate": format_rate(self.host_link_rate), "link_rate": format_rate(self.link_rate),
             "queue": self.queue.to_dict(), "tcp_cc": self.tcp_cc, "scheme": self.scheme,
             "shaping": self.shaping}
        if self.rto_min is not None:  # absent: the kernel's default (and files as they were)
            d["rto_min"] = format_rto_min(self.rto_min)
        return d

    @staticmethod
    def _link_dict(spec: _LinkSpec, always: bool) -> dict | None:
        d = {"between": [spec.a, spec.b]}
        if spec.rate is not None:
            d["rate"] = format_rate(spec.rate)
        if not spec.up:
            d["up"] = False
        return d if always or len(d) > 1 else None


class LeafSpine(Topo):
    """Every leaf linked to every spine; hosts h0..h{n-1} numbered leaf by leaf.

    Host i on leaf l is 198.18.0.0 + 256*l + i + 1 (/15: one subnet for all).
    ``oversubscription`` sets the fabric rate instead of ``link_rate``:
    hosts_per_leaf * host_link_rate / (spines * oversubscription).
    """

    def __init__(self, spines: int = 2, leaves: int = 2, hosts_per_leaf: int = 2,
                 link_rate=None, host_link_rate=None, oversubscription=None, **params):
        self.spines = check_int("spines", spines, 1, 256)
        self.leaves = check_int("leaves", leaves, 1, 512)
        self.hosts_per_leaf = check_int("hosts_per_leaf", hosts_per_leaf, 1, 254)
        if host_link_rate is not None:
            params["host_link_rate"] = host_link_rate
        super().__init__(**params)
        if oversubscription is not None:
            if link_rate is not None:
                raise TopologyError("oversubscription", "give either link_rate or oversubscription, not both")
            if isinstance(oversubscription, bool) or not isinstance(oversubscription, (int, float)) \
                    or not oversubscription > 0:
                raise TopologyError("oversubscription", f"must be a number > 0, got {shown(oversubscription)}")
            link_rate = round(hosts_per_leaf * self.host_link_rate / (spines * oversubscription))
            if not MIN_RATE <= link_rate <= MAX_RATE:
                raise TopologyError("oversubscription", f"{shown(oversubscription)} gives a fabric link rate of "
                                                        f"{link_rate} bit/s, outside 1kbit..100gbit")
        if link_rate is not None:
            self.link_rate = link_rate
        self._add_nodes(self)

    def _add_nodes(self, topo: Topo) -> None:
        for s in range(self.spines):
            topo.add_switch(f"spine{s}", role="spine")
        for leaf in range(self.leaves):
            topo.add_switch(f"leaf{leaf}", role="leaf")
        for leaf in range(self.leaves):
            for i in range(self.hosts_per_leaf):
                host = topo.add_host(f"h{leaf * self.hosts_per_leaf + i}", ip=_host_address(256 * leaf + i + 1))
                topo.add_link(host, f"leaf{leaf}")
        for leaf in range(self.leaves):
            for s in range(self.spines):
                topo.add_link(f"leaf{leaf}", f"spine{s}")

    def to_dict(self) -> dict:
        """The short leaf-spine form, unless nodes or links were added by hand."""
        plain = Topo()
        self._add_nodes(plain)
        if (plain.hosts, plain.switches) != (self.hosts, self.switches) or \
                [(s.a, s.b) for s in plain._links] != [(s.a, s.b) for s in self._links]:
            return super().to_dict()
        d = {"spines": self.spines, "leaves": self.leaves, "hosts_per_leaf": self.hosts_per_leaf,
             **self._params_dict()}
        d["links"] = [o for o in (self._link_dict(spec, always=False) for spec in self._links) if o]
        return d


def shortest_path_groups(switch: str, switches: list[str], links: list[tuple[str, str, str, str]],
                         hosts: dict[str, str]) -> dict[str, list[str]]:
    """{host ip: ports of ``switch`` on shortest paths to that host}.

    ``switches``: switch names; ``links``: ``(a, a_port, b, b_port)`` of the
    links that are up (a port is an interface name of its node); ``hosts``:
    ``{host name: ip}``. :meth:`Topo.forwarding_groups` (a fabric talb
    builds) and testbed/attach.py (a fabric it was given) both route with it.

    A switch gets an entry only if it lies on a shortest path from some
    other host: a spine cut off from a leaf has no entry for that leaf's
    hosts, instead of a detour down to another leaf and up again.
    Unreachable hosts have no entry. Works for any graph; hosts never forward.
    """
    adjacency: dict[str, list[tuple[str, str]]] = {name: [] for name in switches}
    attached: dict[str, list[str]] = {}  # switch -> hosts hanging off it by a link that is up
    host_ports: dict[tuple[str, str], list[str]] = {}  # (switch, host) -> its ports facing it
    for a, a_port, b, b_port in links:
        for node, port, peer in ((a, a_port, b), (b, b_port, a)):
            if node in adjacency and peer in adjacency:
                adjacency[node].append((port, peer))
            elif node in hosts:
                attached.setdefault(peer, []).append(node)
            elif peer in hosts:
                host_ports.setdefault((node, peer), []).append(port)
    groups: dict[str, list[str]] = {}
    for leaf, leaf_hosts in attached.items():
        dist = {leaf: 0}  # hops from each switch to `leaf`
        frontier = [leaf]
        while frontier:
            next_frontier = []
            for node in frontier:
                for _, peer in adjacency[node]:
                    if peer not in dist:
                        dist[peer] = dist[node] + 1
                        next_frontier.append(peer)
            frontier = next_frontier

        def downhill(node):  # (port, peer) one hop closer to `leaf`
            return [(port, peer) for port, peer in adjacency[node] if dist.get(peer) == dist[node] - 1]

        on_path, stack = {leaf}, [node for node in attached if node in dist]
        while stack:  # walk the shortest paths from every switch that has hosts
            node = stack.pop()
            if node not in on_path:
                on_path.add(node)
                stack.extend(peer for _, peer in downhill(node))
        if switch not in on_path:
            continue
        for host in leaf_hosts:
            groups[host] = (host_ports.get((switch, host), []) if switch == leaf
                            else [port for port, _ in downhill(switch)])
    return {ip: groups[name] for name, ip in hosts.items() if name in groups}
