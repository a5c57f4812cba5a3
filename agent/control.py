"""Control plane of one switch, first piece: program its forwarding state
and read its counters through its maps (:class:`agent.maps.SwitchMaps`).

Works on pinned maps alone (no bcc, no reload), so ``talb testbed``, the
agent and tests all program switches the same way.
"""
from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping, Sequence

from agent.maps import (
    CFG_RELEASE_SK, COUNTER_NAMES, IMPLEMENTED_SCHEMES, PORT_HOST, PORT_UP, SCHEME_NAMES,
    SCHEMES, TALB_MAX_GROUP_PORTS, TALB_MAX_PORTS, FwdGroup, IPv4Key, PortInfo, SwitchMaps,
)

__all__ = [
    "SchemeError", "program_switch", "read_port_stats", "read_ports", "read_counters",
    "read_config", "set_scheme", "set_release", "set_hash_seed", "flow_hash", "ecmp_index",
]

PortSpec = tuple  # (ifname, ifindex, is_host_port, up)


class SchemeError(ValueError):
    """Unknown scheme name, or one the data path does not implement yet."""


def _scheme_id(name: str) -> int:
    key = str(name).lower()
    if key not in SCHEMES:
        raise SchemeError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}")
    if key not in IMPLEMENTED_SCHEMES:
        raise SchemeError(
            f"scheme {name!r} is not implemented in the data path yet "
            f"(implemented: {', '.join(sorted(IMPLEMENTED_SCHEMES))})")
    return SCHEMES[key]


def program_switch(maps: SwitchMaps, ports: Sequence[PortSpec],
                   groups: Mapping[str, Sequence[int]], scheme: str = "ecmp",
                   hash_seed: int | None = None) -> dict:
    """Install a switch's ports, forwarding groups and config.

    ``ports``: ``[(ifname, ifindex, is_host_port, up), ...]`` in a stable
    order; a port's id is its position (it indexes ``port_stats``).
    ``groups``: ``{"10.0.0.2": [ifindex, ...]}`` -- candidate egress ports
    per destination host, every ifindex one of ``ports`` (repeat one to
    weight it). Destinations sharing a port tuple (same ports, same order)
    share a group id; a tuple already installed keeps its id.

    Order of writes keeps the data path consistent at every step: ports,
    then groups (each replaced atomically: hash map), then fwd, then stale
    fwd entries and unused groups removed, then config. ``hash_seed=None``
    keeps the current seed (the loader sets a per-switch default).

    Returns ``{"ports": n, "routes": n, "groups": {group_id: [ifindex]}}``.
    """
    scheme_id = _scheme_id(scheme)
    if len(ports) > TALB_MAX_PORTS:
        raise ValueError(f"ports: {len(ports)} ports, at most TALB_MAX_PORTS={TALB_MAX_PORTS}")
    by_ifindex: dict[int, tuple[int, int]] = {}
    for pid, spec in enumerate(ports):
        try:
            ifname, ifindex, is_host, up = spec
        except (TypeError, ValueError):
            raise ValueError(f"ports[{pid}]: expected (ifname, ifindex, is_host_port, up), "
                             f"got {spec!r}") from None
        if int(ifindex) in by_ifindex:
            raise ValueError(f"ports[{pid}] ({ifname}): ifindex {ifindex} listed twice")
        flags = (PORT_HOST if is_host else 0) | (PORT_UP if up else 0)
        by_ifindex[int(ifindex)] = (pid, flags)

    routes: dict[int, tuple[int, ...]] = {}
    for dst, members in groups.items():
        try:
            key = int(ipaddress.IPv4Address(dst))
        except ValueError:
            raise ValueError(f"groups: {dst!r} is not an IPv4 address") from None
        members = tuple(int(x) for x in members)
        if len(members) > TALB_MAX_GROUP_PORTS:
            raise ValueError(f"groups[{dst}]: {len(members)} ports, at most "
                             f"TALB_MAX_GROUP_PORTS={TALB_MAX_GROUP_PORTS}")
        unknown = [x for x in members if x not in by_ifindex]
        if unknown:
            raise ValueError(f"groups[{dst}]: ifindex {unknown} not among the switch's ports")
        routes[key] = members

    # ports (new and changed first, stale last)
    for ifindex, (pid, flags) in by_ifindex.items():
        maps.ports[ifindex] = PortInfo(pid, flags)
    for ifindex in list(maps.ports.keys()):
        if ifindex not in by_ifindex:
            maps.ports.delete(ifindex)

    # groups: keep the ids of tuples already installed
    installed = {tuple(g.ports()): gid for gid, g in maps.groups.items()}
    wanted = sorted(set(routes.values()), key=lambda t: (installed.get(t, 1 << 32), t))
    tuple_to_id: dict[tuple[int, ...], int] = {}
    used = set(installed.values())
    next_id = 0
    for t in wanted:
        if t in installed:
            tuple_to_id[t] = installed[t]
            continue
        while next_id in used:
            next_id += 1
        tuple_to_id[t] = next_id
        used.add(next_id)
    for t, gid in tuple_to_id.items():
        maps.groups[gid] = FwdGroup.of(t)

    # fwd
    for key, t in routes.items():
        maps.fwd[IPv4Key(key)] = tuple_to_id[t]
    for k in list(maps.fwd.keys()):
        if k.addr not in routes:
            maps.fwd.delete(k)
    keep = set(tuple_to_id.values())
    for gid in list(maps.groups.keys()):
        if gid not in keep:
            maps.groups.delete(gid)

    # config
    cfg = maps.config[0]
    cfg.scheme = scheme_id
    if hash_seed is not None:
        cfg.hash_seed = int(hash_seed) & 0xFFFFFFFF
    maps.config[0] = cfg
    return {
        "ports": len(by_ifindex),
        "routes": len(routes),
        "groups": {gid: list(t) for t, gid in sorted(tuple_to_id.items(), key=lambda x: x[1])},
    }


# --- runtime config -------------------------------------------------------------
def read_config(maps: SwitchMaps) -> dict:
    cfg = maps.config[0]
    return {
        "scheme": SCHEME_NAMES.get(cfg.scheme, f"scheme{cfg.scheme}"),
        "hash_seed": cfg.hash_seed,
        "release_sk": bool(cfg.flags & CFG_RELEASE_SK),
        "flags": cfg.flags,
    }


def set_scheme(maps: SwitchMaps, name: str) -> None:
    """Switch the load-balancing scheme at run time (no reload).
    SchemeError for an unknown or not yet implemented scheme."""
    scheme_id = _scheme_id(name)
    cfg = maps.config[0]
    cfg.scheme = scheme_id
    maps.config[0] = cfg


def set_release(maps: SwitchMaps, on: bool) -> None:
    """First-hop socket release (CFG_RELEASE_SK, DESIGN section 3) on/off."""
    cfg = maps.config[0]
    cfg.flags = (cfg.flags | CFG_RELEASE_SK) if on else (cfg.flags & ~CFG_RELEASE_SK)
    maps.config[0] = cfg


def set_hash_seed(maps: SwitchMaps, seed: int) -> None:
    cfg = maps.config[0]
    cfg.hash_seed = int(seed) & 0xFFFFFFFF
    maps.config[0] = cfg


# --- counters ------------------------------------------------------------------------
_STAT_FIELDS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")


def read_ports(maps: SwitchMaps) -> dict[int, dict]:
    """``{ifindex: {"port_id", "host", "up"}}`` as installed."""
    return {
        ifindex: {"port_id": p.port_id, "host": bool(p.flags & PORT_HOST),
                  "up": bool(p.flags & PORT_UP)}
        for ifindex, p in maps.ports.items()
    }


def read_port_stats(maps: SwitchMaps, port_ids: Iterable[int] | None = None) -> dict[int, dict]:
    """``{port_id: {"rx_packets", "rx_bytes", "tx_packets", "tx_bytes"}}``
    summed over CPUs, for the installed ports (or ``port_ids``)."""
    if port_ids is None:
        port_ids = sorted(p.port_id for _, p in maps.ports.items())
    out = {}
    for pid in port_ids:
        s = maps.port_stats.get(pid)
        out[pid] = {f: getattr(s, f) for f in _STAT_FIELDS} if s is not None else \
            dict.fromkeys(_STAT_FIELDS, 0)
    return out


def read_counters(maps: SwitchMaps) -> dict[str, int]:
    """``{name: value}`` for every named counter (CNT_* in constants.h,
    lower case without the prefix), summed over CPUs."""
    out = {}
    for idx, name in enumerate(COUNTER_NAMES):
        if name.startswith("reserved_"):
            continue
        out[name] = maps.counters.get(idx, 0)
    return out


# --- reference of the data path's hash (bpf/include/talb/hash.h) ------------------
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h: int, k: int) -> int:
    k = (k * 0xCC9E2D51) & _M32
    k = _rotl(k, 15)
    k = (k * 0x1B873593) & _M32
    h ^= k
    h = _rotl(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


def flow_hash(saddr, daddr, sport: int, dport: int, proto: int, seed: int) -> int:
    """The data path's 5-tuple hash (MurmurHash3 x86_32 over saddr, daddr,
    sport<<16|dport, proto as host-order 32-bit words)."""
    h = seed & _M32
    h = _mix(h, int(ipaddress.IPv4Address(saddr)))
    h = _mix(h, int(ipaddress.IPv4Address(daddr)))
    h = _mix(h, ((sport & 0xFFFF) << 16) | (dport & 0xFFFF))
    h = _mix(h, proto & 0xFF)
    h ^= 16
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


def ecmp_index(n_ports: int, saddr, daddr, sport: int, dport: int, proto: int,
               seed: int) -> int:
    """Index into a group of ``n_ports`` (>= 2) that ECMP picks for a flow."""
    return flow_hash(saddr, daddr, sport, dport, proto, seed) % n_ports
