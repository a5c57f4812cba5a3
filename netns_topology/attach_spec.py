"""The fabric file of `talb attach`: a fabric talb did not build, described.

    name: mn                  # state /run/talb/<name>/, pins /run/talb/bpffs/<name>/
    link_rate: 20mbit         # every port's rate unless the port says (agent, timers)
    queue_limit: 150kb        # a port's buffer, for the agent's delay model
    scheme: ecmp              # ecmp, rps, letflow, drill, conga, talb, presto or wcmp
    queue: {bands: [1, 4, 2, 1], limit: 40kb}   # optional: priority bands on every
                              # port (HTB + bfifo per band, as `talb testbed up`'s
                              # queue:); a port's own queue: overrides, queue: false
                              # keeps that port's queue as it is
    replace_qdisc: false      # true: bands may replace a root qdisc that is there
    switches:
      - name: leaf1
        netns: null           # the namespace `talb attach` runs in (default);
                              # or a name under /run/netns; or pid: 1234
        remote: false         # true: on another machine (routed through,
                              # attached by that machine's `talb attach`)
        machine: srv1         # or: the machine it is on (`talb attach --cluster`
                              # attaches each machine's part through its Dask
                              # worker; every switch names one, none is remote)
        ports:
          - {iface: l1-eth1, to: h1}
          - {iface: l1-eth3, to: spine1, rate: 20mbit, queue: {bands: [1, 2]}}
    hosts:
      - name: h1
        ip: 10.0.0.1
        iface: h1-eth0        # with netns or pid: the tagger goes there
        pid: 4242             # or netns: NAME; neither: not reachable, no tagger

A port faces a switch or a host by name. The k-th port of switch A that
faces B is linked to the k-th port of B that faces A. Every check here is
static (names, addresses, links); that interfaces exist is checked when
attaching (testbed/attach.py). Errors name the field and the value
(:class:`netns_topology.errors.TopologyError`).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from pathlib import Path

import re

from common.c_constants import DEFAULT_SCHEME, SCHEMES
from common.excerpt import shown
from common.paths import NETNS_RE, NODE_RE, PREFIX_RE

from .errors import TopologyError
from .params import Queue, check_bool, check_rate
from .topo import shortest_path_groups
from .units import parse_size

DEFAULT_NAME = "attach"
DEFAULT_LINK_RATE = 100_000_000
DEFAULT_QUEUE_LIMIT = 150_000
IFNAMSIZ = 15
#: a machine's name: a host name (``srv1``, ``rack2-n07.lab``) or a Dask worker's --name
MACHINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")


@dataclass(frozen=True)
class AttachPort:
    iface: str
    to: str
    kind: str          # "host" or "fabric"
    rate_bps: int
    queue: Queue | None = None  # priority bands attach installs; None: the port's own queue


@dataclass(frozen=True)
class AttachSwitch:
    name: str
    netns: str | None  # a name under /run/netns, or None
    pid: int | None    # its namespace is /proc/<pid>/ns/net
    ports: tuple[AttachPort, ...]
    remote: bool = False  # on another machine: routed through, attached there
    machine: str | None = None  # the machine it is on (a file spread over machines)


@dataclass(frozen=True)
class AttachHost:
    name: str
    ip: str
    iface: str | None
    netns: str | None
    pid: int | None

    @property
    def reachable(self) -> bool:
        """Its namespace is known: the tagger can be loaded there."""
        return self.iface is not None and (self.netns is not None or self.pid is not None)


@dataclass
class AttachFabric:
    name: str
    link_rate: int
    queue_limit: int
    scheme: str
    switches: list[AttachSwitch]
    hosts: list[AttachHost]
    links: list[tuple[str, str, str, str]] = field(default_factory=list)  # switch-switch
    replace_qdisc: bool = False  # bands may replace a root qdisc attach did not create

    def bands_of(self, switch: str) -> tuple[int, int]:
        """(n_bands, layers_per_band) the switch marks packets for: its
        ports' bands (they agree, fabric_from_dict checks), or (1, 0): one
        band, no port asked for more."""
        queues = [p.queue for p in self.switch(switch).ports if p.queue is not None]
        return (len(queues[0].bands), queues[0].layers_per_band) if queues else (1, 0)

    def port_buffer(self, port: AttachPort) -> int:
        """A port's buffer for the agent's delay model and DRILL: one band's
        bfifo where attach installs bands, else the file's queue_limit."""
        return port.queue.limit if port.queue is not None else self.queue_limit

    def machines(self) -> list[str]:
        """The machines the file spreads over, in the file's order ([] when
        its switches name none)."""
        return list(dict.fromkeys(s.machine for s in self.switches if s.machine is not None))

    def part(self, machine: str) -> "AttachFabric":
        """``machine``'s part of a fabric spread over machines: the same file
        without machine: keys, every other machine's switches remote, and their hosts (those
        their ports face) routed to but not reached from here (no tagger)."""
        if machine not in self.machines():
            raise TopologyError("machine", f"no switch is on machine {shown(machine)} (the file's "
                                           f"machines: {', '.join(self.machines())})")
        mine = {s.name for s in self.switches if s.machine == machine}
        here = {p.to for s in self.switches if s.name in mine for p in s.ports if p.kind == "host"}
        # a plain one-machine file (the docs' per-server file): no machine: keys
        switches = [replace(s, machine=None) if s.name in mine
                    else replace(s, remote=True, netns=None, pid=None, machine=None)
                    for s in self.switches]
        hosts = [h if h.name in here else replace(h, iface=None, netns=None, pid=None)
                 for h in self.hosts]
        return replace(self, switches=switches, hosts=hosts)

    def switch(self, name: str) -> AttachSwitch:
        return next(s for s in self.switches if s.name == name)

    def leaf_of(self, host: str) -> str:
        return next(s.name for s in self.switches for p in s.ports if p.to == host)

    def forwarding_groups(self, switch: str) -> dict[str, list[str]]:
        """{host ip: interfaces of ``switch`` on shortest paths to it}, as
        talb routes its own fabrics (topo.shortest_path_groups)."""
        links = list(self.links)
        links += [(s.name, p.iface, p.to, "") for s in self.switches for p in s.ports
                  if p.kind == "host"]
        return shortest_path_groups(switch, [s.name for s in self.switches], links,
                                    {h.name: h.ip for h in self.hosts})

    def slowest_multipath_rate(self) -> int:
        """The slowest port of any group with more than one port (the
        timers' and the agent window's reference, datapath/timers.py)."""
        rates = []
        for s in self.switches:
            by_iface = {p.iface: p.rate_bps for p in s.ports}
            for ports in self.forwarding_groups(s.name).values():
                if len(set(ports)) > 1:
                    rates += [by_iface[p] for p in ports]
        return min(rates or [p.rate_bps for s in self.switches for p in s.ports])

    def to_dict(self) -> dict:
        def node(n):
            d = {"name": n.name}
            if n.netns is not None:
                d["netns"] = n.netns
            if n.pid is not None:
                d["pid"] = n.pid
            return d
        def port(p):
            d = {"iface": p.iface, "to": p.to, "rate": p.rate_bps}
            d["queue"] = p.queue.to_dict() if p.queue is not None else False
            return d
        return {
            "name": self.name, "link_rate": self.link_rate, "queue_limit": self.queue_limit,
            "scheme": self.scheme, "replace_qdisc": self.replace_qdisc,
            "switches": [{**node(s), **({"remote": True} if s.remote else {}),
                          **({"machine": s.machine} if s.machine is not None else {}),
                          "ports": [port(p) for p in s.ports]} for s in self.switches],
            "hosts": [{**node(h), "ip": h.ip, **({"iface": h.iface} if h.iface else {})}
                      for h in self.hosts],
        }


def _keys(where: str, d, allowed: set[str], required: set[str] = frozenset()) -> dict:
    if not isinstance(d, dict):
        # the whole file when where is "": say what it holds, not all of it
        raise TopologyError(where or "file", f"must be a mapping, got {shown(d, '' if where else 'YAML')}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise TopologyError(f"{where}.{unknown[0]}" if where else unknown[0],
                            f"unknown field (known: {', '.join(sorted(allowed))})")
    for key in sorted(required):
        if key not in d:
            raise TopologyError(f"{where}.{key}" if where else key, "missing")
    return d


def _new_node(where: str, raw: dict, kind: str, nodes: dict[str, str]) -> str:
    """A host's or switch's name, checked and unique among all nodes; recorded."""
    name = _name(f"{where}.name", raw["name"])
    if name in nodes:
        raise TopologyError(f"{where}.name", f"{shown(name)} is already a node")
    nodes[name] = kind
    return name


def _name(where: str, value) -> str:
    if not isinstance(value, str) or not NODE_RE.match(value):
        raise TopologyError(where, f"must be 1-12 lowercase letters/digits starting with a letter, "
                                   f"got {shown(value)}")
    return value


def _iface(where: str, value) -> str:
    if not isinstance(value, str) or not value or len(value) > IFNAMSIZ or "/" in value \
            or any(c.isspace() for c in value) or value in (".", ".."):
        raise TopologyError(where, f"must be an interface name (1-{IFNAMSIZ} characters, no '/' "
                                   f"or spaces), got {shown(value)}")
    return value


def _where(where: str, d: dict) -> tuple[str | None, int | None]:
    netns, pid = d.get("netns"), d.get("pid")
    if netns is not None and pid is not None:
        raise TopologyError(f"{where}.pid", f"give netns or pid, not both (netns {shown(netns)}, pid {shown(pid)})")
    if netns is not None and (not isinstance(netns, str) or not NETNS_RE.match(netns) or ".." in netns):
        raise TopologyError(f"{where}.netns", f"must be a namespace name under /run/netns, got {shown(netns)}")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid < 1):
        raise TopologyError(f"{where}.pid", f"must be a process id (an integer >= 1), got {shown(pid)}")
    return netns, pid


def fabric_from_dict(data) -> AttachFabric:
    """Check an attach file's contents and return the fabric; TopologyError
    naming the field (``switches[1].ports[0].to``) and the value otherwise."""
    _keys("", data, {"name", "link_rate", "queue_limit", "scheme", "switches", "hosts", "queue",
                     "replace_qdisc"}, {"switches", "hosts"})
    settings = _settings(data)
    raw_sw, raw_hosts = _node_lists(data)
    nodes: dict[str, str] = {}          # name -> "host" / "switch"
    hosts = _hosts(raw_hosts, nodes)
    for i, s in enumerate(raw_sw):      # every name first: a port may face a later switch
        w = f"switches[{i}]"
        _keys(w, s, {"name", "netns", "pid", "ports", "remote", "machine"}, {"name", "ports"})
        _new_node(w, s, "switch", nodes)
    seen_iface: dict[tuple, str] = {}
    switches = [_switch(f"switches[{i}]", s, raw_sw, nodes, seen_iface, settings)
                for i, s in enumerate(raw_sw)]
    _check_each_host_faced_once(hosts, switches)
    return AttachFabric(settings.name, settings.link_rate, settings.queue_limit, settings.scheme,
                        switches, hosts, _links(switches), settings.replace_qdisc)


@dataclass(frozen=True)
class _Settings:
    """The file's fabric-wide fields, checked."""

    name: str
    link_rate: int
    queue_limit: int
    scheme: str
    default_queue: Queue | None  # the ports' queue unless a port names its own
    replace_qdisc: bool


def _settings(data: dict) -> _Settings:
    name = data.get("name", DEFAULT_NAME)
    if not isinstance(name, str) or not PREFIX_RE.match(name):
        raise TopologyError("name", f"must be 1-12 lowercase letters/digits starting with a letter, "
                                    f"got {shown(name)}")
    link_rate = check_rate("link_rate", data.get("link_rate", DEFAULT_LINK_RATE))
    queue_limit = data.get("queue_limit", DEFAULT_QUEUE_LIMIT)
    try:
        queue_limit = parse_size(queue_limit) if isinstance(queue_limit, str) else queue_limit
    except ValueError as exc:
        raise TopologyError("queue_limit", str(exc)) from None
    if isinstance(queue_limit, bool) or not isinstance(queue_limit, int) or queue_limit < 1600:
        raise TopologyError("queue_limit", f"must be a size of at least 1600 bytes, got {shown(queue_limit)}")
    scheme = data.get("scheme", DEFAULT_SCHEME)
    if scheme not in SCHEMES:
        raise TopologyError("scheme", f"must be one of {', '.join(SCHEMES)}, got {shown(scheme)}")
    default_queue = _queue("queue", data.get("queue"))
    replace_qdisc = check_bool("replace_qdisc", data.get("replace_qdisc", False))
    return _Settings(name, link_rate, queue_limit, scheme, default_queue, replace_qdisc)


def _node_lists(data: dict) -> tuple[list, list]:
    raw_sw, raw_hosts = data["switches"], data["hosts"]
    if not isinstance(raw_sw, list) or not raw_sw:
        raise TopologyError("switches", f"must be a non-empty list, got {shown(raw_sw)}")
    if not isinstance(raw_hosts, list) or not raw_hosts:
        raise TopologyError("hosts", f"must be a non-empty list, got {shown(raw_hosts)}")
    return raw_sw, raw_hosts


def _hosts(raw_hosts: list, nodes: dict[str, str]) -> list[AttachHost]:
    """Every host checked (name, unique address, interface, namespace); names recorded in ``nodes``."""
    hosts, ips = [], {}
    for i, h in enumerate(raw_hosts):
        w = f"hosts[{i}]"
        _keys(w, h, {"name", "ip", "iface", "netns", "pid"}, {"name", "ip"})
        hname = _new_node(w, h, "host", nodes)
        try:
            ip = str(ipaddress.IPv4Address(h["ip"]))
        except (ValueError, TypeError):
            raise TopologyError(f"{w}.ip", f"not an IPv4 address: {shown(h['ip'])}") from None
        if ip in ips:
            raise TopologyError(f"{w}.ip", f"{ip} is also host {ips[ip]}'s address")
        ips[ip] = hname
        iface = _iface(f"{w}.iface", h["iface"]) if h.get("iface") is not None else None
        netns, pid = _where(w, h)
        if (netns is not None or pid is not None) and iface is None:
            raise TopologyError(f"{w}.iface", f"host {hname} has a namespace but no interface: "
                                              "name the one facing its switch")
        hosts.append(AttachHost(hname, ip, iface, netns, pid))
    return hosts


def _switch(w: str, s: dict, raw_sw: list, nodes: dict[str, str], seen_iface: dict,
            settings: _Settings) -> AttachSwitch:
    """One switch checked: where it is (namespace, remote, machine) and its ports."""
    netns, pid = _where(w, s)
    remote = s.get("remote", False)
    if not isinstance(remote, bool):
        raise TopologyError(f"{w}.remote", f"must be true or false, got {shown(remote)}")
    if remote and (netns is not None or pid is not None):
        raise TopologyError(f"{w}.remote", "a remote switch has no namespace here "
                                           "(drop netns/pid, or remote)")
    machine = _machine(w, s, raw_sw)
    ports = s["ports"]
    if not isinstance(ports, list) or not ports:
        raise TopologyError(f"{w}.ports", f"must be a non-empty list, got {shown(ports)}")
    # the namespace its interfaces are in: an interface name is unique there
    where = ("remote", s["name"]) if remote else ("netns", netns) if netns is not None \
        else ("pid", pid) if pid is not None else ("local", None)
    made = [_port(f"{w}.ports[{j}]", p, s["name"], where, nodes, seen_iface, settings)
            for j, p in enumerate(ports)]
    _same_bands(w, made)
    return AttachSwitch(s["name"], netns, pid, tuple(made), remote, machine)


def _port(pw: str, p: dict, switch: str, where: tuple, nodes: dict[str, str], seen_iface: dict,
          settings: _Settings) -> AttachPort:
    """One switch port checked: its interface (unique in its namespace), the
    node it faces, its rate and queue (the file's unless it names its own)."""
    _keys(pw, p, {"iface", "to", "rate", "queue"}, {"iface", "to"})
    iface = _iface(f"{pw}.iface", p["iface"])
    if (where, iface) in seen_iface:
        raise TopologyError(f"{pw}.iface", f"{shown(iface)} is also a port of "
                                           f"{seen_iface[(where, iface)]} in the same namespace")
    seen_iface[(where, iface)] = switch
    to = p["to"]
    if to not in nodes:
        raise TopologyError(f"{pw}.to", f"faces unknown node {shown(to)} (switches and hosts: "
                                        f"{', '.join(nodes)})")
    if to == switch:
        raise TopologyError(f"{pw}.to", f"a port of {to} cannot face {to} itself")
    rate = check_rate(f"{pw}.rate", p["rate"]) if p.get("rate") is not None else settings.link_rate
    queue = _queue(f"{pw}.queue", p["queue"]) if "queue" in p else settings.default_queue
    return AttachPort(iface, to, nodes[to] == "host" and "host" or "fabric", rate, queue)


def _check_each_host_faced_once(hosts: list[AttachHost], switches: list[AttachSwitch]) -> None:
    for h in hosts:
        facing = [(s.name, p.iface) for s in switches for p in s.ports if p.to == h.name]
        if not facing:
            raise TopologyError("hosts", f"no switch port faces host {shown(h.name)} ({h.ip}): add a port "
                                         f"with 'to: {h.name}'")
        if len(facing) > 1:
            raise TopologyError("hosts", f"host {shown(h.name)} is faced by {len(facing)} ports "
                                         f"({', '.join(f'{a}:{b}' for a, b in facing)}); a host hangs "
                                         "off one switch port")


def _links(switches: list[AttachSwitch]) -> list[tuple[str, str, str, str]]:
    """(switch, iface, switch, iface) of every link between switches: the
    ports two switches have facing each other, paired in order, at one rate."""
    links = []
    for a in switches:
        for b in switches:
            if a.name >= b.name:
                continue
            ab = [p for p in a.ports if p.to == b.name]
            ba = [p for p in b.ports if p.to == a.name]
            if len(ab) != len(ba):
                raise TopologyError("switches", f"{a.name} has {len(ab)} port(s) facing {b.name} but "
                                                f"{b.name} has {len(ba)} facing {a.name}: each link "
                                                "needs a port at both ends")
            for pa, pb in zip(ab, ba):
                if pa.rate_bps != pb.rate_bps:
                    raise TopologyError("switches", f"link {a.name}:{pa.iface} - {b.name}:{pb.iface}: "
                                                    f"rates differ ({pa.rate_bps} vs {pb.rate_bps} bit/s)")
                links.append((a.name, pa.iface, b.name, pb.iface))
    return links


def _machine(where: str, s: dict, raw_sw: list) -> str | None:
    """A switch's ``machine:``; every switch names one or none does (a
    switch without would be attached nowhere), and none is also remote
    (the other machines' switches are the remote ones of each part)."""
    machine = s.get("machine")
    if machine is None:
        named = next((i for i, o in enumerate(raw_sw)
                      if isinstance(o, dict) and o.get("machine") is not None), None)
        if named is not None:
            raise TopologyError(f"{where}.machine", f"missing: switches[{named}] names its machine, "
                                                    "so every switch does (the one it is on)")
        return None
    if not isinstance(machine, str) or not MACHINE_RE.match(machine):
        raise TopologyError(f"{where}.machine", f"must be a host name or a Dask worker's --name "
                                                f"(letters, digits, '.', '_', '-'), got {shown(machine)}")
    if s.get("remote"):
        raise TopologyError(f"{where}.remote", "a switch with a machine is attached on that machine "
                                               "(drop remote: --cluster attaches every machine's part)")
    return machine


def _queue(where: str, value) -> Queue | None:
    """A ``queue:`` field: the topology YAML's (Queue.from_value: bands,
    limit, burst, cburst, quantum, layers_per_band); absent, null or false:
    no bands, the port keeps its own queue."""
    if value is None or value is False:
        return None
    if value is True:
        raise TopologyError(where, "must be a mapping like {bands: [1, 4, 2, 1], limit: 40kb}, "
                                   "or false (no bands), got True")
    return Queue.from_value(where, value)


def _same_bands(where: str, ports: list[AttachPort]) -> None:
    """A switch marks packets for one set of bands (its n_bands and
    layers_per_band): the ports with bands must agree on both."""
    first = None
    for j, p in enumerate(ports):
        if p.queue is None:
            continue
        shape = (len(p.queue.bands), p.queue.layers_per_band)
        if first is None:
            first = (j, shape)
        elif shape != first[1]:
            raise TopologyError(f"{where}.ports[{j}].queue",
                                f"{shape[0]} bands of {shape[1]} layer(s), but {where}.ports"
                                f"[{first[0]}] has {first[1][0]} of {first[1][1]}: a switch marks "
                                "packets for one set of bands (weights and limits may differ)")


def read_fabric_file(path: str | Path) -> AttachFabric:
    """Read and check an attach file (YAML)."""
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TopologyError("--fabric", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError("--fabric", f"{path} is not valid YAML: {exc}") from None
    return fabric_from_dict(data)
