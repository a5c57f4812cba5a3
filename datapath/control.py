"""Control plane of one switch: program its forwarding state, publish TaLB's
port congestion metrics, read its counters and tensor table, through its
maps (:class:`datapath.maps.SwitchMaps`).

Works on pinned maps alone (no bcc, no reload), so ``talb testbed``, the
agent and tests all program switches the same way.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import ipaddress
import os
import struct
import time
from contextlib import contextmanager
from typing import Callable, Iterable, Mapping, Sequence

from common.c_constants import (CFG_RELEASE_SK, CONST, COUNTER_NAMES, DEFAULT_SCHEME, MAX_BANDS,
                                PORT_HOST, PORT_UP, SCHEME_NAMES, SCHEMES, TALB_COUNT_LIVE,
                                TALB_COUNT_SWEPT, TALB_MAX_GROUP_PORTS, TALB_MAX_PORTS,
                                TALB_MAX_TENSORS, TALB_TENSOR_DONE)
from datapath import bpf_syscall as sc
from datapath import talb_native
from datapath.maps import SwitchMaps
from datapath.schemes import registry as scheme_registry
from datapath.schemes import talb as talb_scheme
from datapath.schemes.spec import SCHEME_NAME
from datapath.structs import FwdGroup, GroupState, IPv4Key, PortInfo, PortSlot, RouteSlot

__all__ = [
    "SchemeError", "scheme_id_of", "port_flags", "program_switch", "read_port_stats", "read_ports",
    "read_counters",
    "read_config", "config_update", "set_scheme", "scheme_params", "SCHEME_PARAMS", "set_timers",
    "parse_params", "set_port_rates", "set_release", "set_hash_seed", "set_ecn", "read_ecn",
    "set_talb_config",
    "publish_pcm", "GroupPublisher", "read_groups", "read_tensor_table", "read_live_layers", "sweep_tensors",
    "clear_tensor_table", "TALB_COUNTERS",
]
#: each scheme's own control-plane functions (``Scheme.control``), by name: they
#: live in the scheme's module and are found here too (:func:`__getattr__`)
SCHEME_CONTROL = {f.__name__: f for s in scheme_registry.SCHEMES for f in s.control}
__all__ += list(SCHEME_CONTROL)


def __getattr__(name: str):
    """``control.<name>`` of a scheme's control-plane function (PEP 562)."""
    try:
        return SCHEME_CONTROL[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


#: the counters `talb table` shows (names as in read_counters)
TALB_COUNTERS = (
    "talb_hit", "talb_case1", "talb_case2", "talb_threshold", "talb_fallback",
    "talb_table_full", "talb_reroute", "talb_aged", "talb_inserted", "talb_completed",
    "talb_late", "talb_midstream",
    "decision_talb", "opt_tagged", "opt_truncated", "opt_bad_len", "opt_bad_version",
    "opt_zero_len", "opt_overrun", "opt_not_first", "stripped", "drop_opt_position",
    "drop_strip_fail",
)

#: one port as program_switch takes it: (ifname, ifindex, is_host_port, up)
SwitchPortTuple = tuple[str, int, bool, bool]


class SchemeError(ValueError):
    """Unknown scheme name, or a parameter it does not take."""


def scheme_id_of(name: str) -> int:
    """The data path's id of scheme ``name`` (any case); SchemeError (a
    ValueError) when no such scheme. Callers check a user's --scheme with
    it before touching a fabric."""
    key = str(name).lower()
    if key not in SCHEMES:
        raise SchemeError(f"unknown scheme {name!r}; known: {', '.join(SCHEMES)}")
    return SCHEMES[key]


def _fallback_id(name: str, what: str) -> int:
    """The id of a scheme TaLB may hand untagged packets to."""
    fid = scheme_id_of(name)
    refused = scheme_registry.get(SCHEME_NAMES[fid]).not_a_fallback
    if refused:
        raise SchemeError(f"{what}: {refused}")
    return fid


def port_flags(is_host: bool, up: bool) -> int:
    """The ``ports`` map's flags of a port (``PortInfo.flags``)."""
    return (PORT_HOST if is_host else 0) | (PORT_UP if up else 0)


def program_switch(maps: SwitchMaps, ports: Sequence[SwitchPortTuple],
                   groups: Mapping[str, Sequence[int]], scheme: str | None = DEFAULT_SCHEME,
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
    keeps the current seed (the loader sets a per-switch default);
    ``scheme=None`` with ``hash_seed=None`` leaves the config map untouched
    (the agent's regrouping: config belongs to the user, and a
    read-modify-write of it would revert a `talb scheme` landing meanwhile).

    TaLB: a new group gets neutral values (every PCM 0, order = group
    order, plain round-robin schedule, threshold TALB_PCM_ONE) until
    :func:`publish_pcm` replaces them; a group already installed keeps what
    was published. Group ids that are new or go away get their TaLB state
    cleared (live-layer counts, WRR cursor, and the tensor entries counted
    in them), so a reused id never inherits another group's tensors.

    Returns ``{"ports": n, "routes": n, "groups": {group_id: [ifindex]}}``.
    """
    scheme_id = None if scheme is None else scheme_id_of(scheme)
    by_ifindex = _port_table(ports)
    routes = _route_table(groups, by_ifindex)
    _install_ports(maps, by_ifindex)
    group_ids, gone_ids = _install_groups(maps, set(routes.values()))
    _install_routes(maps, routes, group_ids)
    _remove_groups(maps, set(group_ids.values()), gone_ids)
    # config: only when asked to set something in it
    if scheme_id is not None or hash_seed is not None:
        with config_update(maps) as cfg:
            if scheme_id is not None:
                cfg.scheme = scheme_id
            if hash_seed is not None:
                cfg.hash_seed = int(hash_seed) & 0xFFFFFFFF
    return {
        "ports": len(by_ifindex),
        "routes": len(routes),
        "groups": {gid: list(t) for t, gid in sorted(group_ids.items(), key=lambda x: x[1])},
    }


def _port_table(ports: Sequence[SwitchPortTuple]) -> dict[int, tuple[int, int]]:
    """{ifindex: (port id, flags)} of program_switch's ``ports``; ValueError
    for too many, a malformed entry, an ifindex twice or two ports the data
    path would keep in one slot (ifindex % TALB_PORT_SLOTS, bpf/include/talb/maps.h)."""
    if len(ports) > TALB_MAX_PORTS:
        raise ValueError(f"ports: {len(ports)} ports, at most TALB_MAX_PORTS={TALB_MAX_PORTS}")
    by_ifindex: dict[int, tuple[int, int]] = {}
    by_slot: dict[int, tuple[str, int]] = {}
    for pid, spec in enumerate(ports):
        try:
            ifname, ifindex, is_host, up = spec
        except (TypeError, ValueError):
            raise ValueError(f"ports[{pid}]: expected (ifname, ifindex, is_host_port, up), "
                             f"got {spec!r}") from None
        ifindex = int(ifindex)
        if not 0 < ifindex < 1 << 32:
            raise ValueError(f"ports[{pid}] ({ifname}): ifindex {ifindex} is not a device index")
        if ifindex in by_ifindex:
            raise ValueError(f"ports[{pid}] ({ifname}): ifindex {ifindex} listed twice")
        twin = by_slot.get(slot_of(ifindex))
        if twin is not None:
            raise ValueError(
                f"ports[{pid}] ({ifname}): ifindex {ifindex} and port {twin[0]} (ifindex "
                f"{twin[1]}) differ by a multiple of {_PORT_SLOTS}, and the data path keeps a "
                f"switch's ports at ifindex % {_PORT_SLOTS} (TALB_PORT_SLOTS): recreate one "
                f"of the two links so that it gets another ifindex")
        by_slot[slot_of(ifindex)] = (ifname, ifindex)
        by_ifindex[ifindex] = (pid, port_flags(is_host, up))
    return by_ifindex


_PORT_SLOTS = CONST["TALB_PORT_SLOTS"]


def slot_of(ifindex: int) -> int:
    """The port_slots index of a port at ``ifindex`` (talb_port_get)."""
    return ifindex & (_PORT_SLOTS - 1)


def _route_table(groups: Mapping[str, Sequence[int]],
                 by_ifindex: dict) -> dict[int, tuple[int, ...]]:
    """{destination address as an int: its ports}; ValueError for a bad
    address, too many ports or a port the switch does not have."""
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
    return routes


def _install_ports(maps: SwitchMaps, by_ifindex: dict[int, tuple[int, int]]) -> None:
    """The ports map, and the same ports in port_slots at ifindex %
    TALB_PORT_SLOTS with their ifindex (what the data path reads,
    bpf/include/talb/maps.h talb_port_get): new and changed ports first,
    stale ones last, a stale port's slot emptied only when no new port took
    it. A slot is one 8-byte value, written whole."""
    for ifindex, (pid, flags) in by_ifindex.items():
        maps.ports[ifindex] = PortInfo(pid, flags)
        maps.port_slots[slot_of(ifindex)] = PortSlot(ifindex, pid, flags)
    taken = {slot_of(i) for i in by_ifindex}
    for ifindex in list(maps.ports.keys()):
        if ifindex not in by_ifindex:
            if slot_of(ifindex) not in taken:
                maps.port_slots[slot_of(ifindex)] = PortSlot(0, 0, 0)
            maps.ports.delete(ifindex)


def _install_groups(maps: SwitchMaps, wanted: set[tuple[int, ...]]
                    ) -> tuple[dict[tuple[int, ...], int], set[int]]:
    """Every wanted port tuple a group: a tuple already installed keeps its
    id, a new one takes the lowest free id, its TaLB state cleared, its
    group written with neutral TaLB data. ({tuple: group id}, the ids of
    installed groups no longer wanted)."""
    installed = {tuple(g.ports()): gid for gid, g in maps.groups.items()}
    tuple_to_id: dict[tuple[int, ...], int] = {}
    used = set(installed.values())
    next_id = 0
    for t in sorted(wanted, key=lambda t: (installed.get(t, 1 << 32), t)):
        if t in installed:
            tuple_to_id[t] = installed[t]
            continue
        while next_id in used:
            next_id += 1
        tuple_to_id[t] = next_id
        used.add(next_id)
    fresh_ids = {gid for t, gid in tuple_to_id.items() if t not in installed}
    _reset_group_state(maps, fresh_ids)
    for t, gid in tuple_to_id.items():
        if gid in fresh_ids:
            maps.groups[gid] = FwdGroup.of(t)
    return tuple_to_id, set(installed.values()) - set(tuple_to_id.values())


_ROUTE_SLOT_BITS = CONST["TALB_ROUTE_SLOT_BITS"]
_ROUTE_HASH_MUL = CONST["TALB_ROUTE_HASH_MUL"]
_ROUTE_SLOT_USED = CONST["ROUTE_SLOT_USED"]


def route_slot_of(addr: int) -> tuple[int, int]:
    """(route_slots index, the address as the data path reads it) of the
    IPv4 address ``addr`` (an int, host order): talb_route's arithmetic on
    the wire's bytes loaded as a little-endian u32."""
    wire = int.from_bytes(addr.to_bytes(4, "big"), "little")
    return ((wire * _ROUTE_HASH_MUL) & 0xFFFFFFFF) >> (32 - _ROUTE_SLOT_BITS), wire


def _install_routes(maps: SwitchMaps, routes: dict[int, tuple[int, ...]],
                    group_ids: dict[tuple[int, ...], int]) -> None:
    """The fwd map: every destination to its group, then stale ones
    removed; route_slots (what the data path reads first) with it: a
    route takes its slot unless another route of this table holds it
    (that one keeps it; the other is found in fwd). Slots are written after
    fwd has the route and emptied before fwd loses it, so a packet finds
    its route in one or the other all along."""
    for key, t in routes.items():
        maps.fwd[IPv4Key(key)] = group_ids[t]
    taken: dict[int, int] = {}      # slot -> address it holds after this call
    for key in sorted(routes):
        slot, wire = route_slot_of(key)
        cur = maps.route_slots[slot]
        owner = cur.daddr if cur.flags & _ROUTE_SLOT_USED else None
        if slot in taken or (owner is not None and owner != wire
                             and int.from_bytes(owner.to_bytes(4, "little"), "big") in routes):
            continue    # another route of the table holds it: this one is in fwd
        taken[slot] = wire
        gid = group_ids[routes[key]]
        if owner != wire or cur.group_id != gid:
            maps.route_slots[slot] = RouteSlot(wire, gid, _ROUTE_SLOT_USED)
    for k in list(maps.fwd.keys()):
        if k.addr not in routes:
            slot, wire = route_slot_of(k.addr)
            if taken.get(slot) is None and maps.route_slots[slot].daddr == wire:
                maps.route_slots[slot] = RouteSlot(0, 0, 0)
            maps.fwd.delete(k)


def _remove_groups(maps: SwitchMaps, keep: set[int], gone_ids: set[int]) -> None:
    """Groups no route uses any more removed (after fwd stopped naming
    them), and the TaLB state of the ids that went away cleared."""
    for gid in list(maps.groups.keys()):
        if gid not in keep:
            maps.groups.delete(gid)
    _reset_group_state(maps, gone_ids)


# --- runtime config -------------------------------------------------------------
def read_config(maps: SwitchMaps) -> dict:
    """``config[0]`` as names and effective values: the shared fields, then
    every scheme's parameters by their config field (its default where the
    field holds 0 and 0 is out of the parameter's range: never set) and what
    its ``config_view`` hook adds (datapath/schemes/spec.py)."""
    cfg = maps.config[0]
    out = {
        "scheme": _scheme_name(cfg.scheme),
        "hash_seed": cfg.hash_seed,
        "release_sk": bool(cfg.flags & CFG_RELEASE_SK),
        "flags": cfg.flags,
        "n_bands": max(1, cfg.n_bands),
        "layers_per_band": cfg.layers_per_band or CONST["TALB_DEFAULT_LAYERS_PER_BAND"],
    }
    for s in scheme_registry.SCHEMES:
        for p in s.params:
            raw = getattr(cfg, p.field)
            if p.type == SCHEME_NAME:
                out[p.field] = _scheme_name(raw)
            else:
                out[p.field] = p.default if raw == 0 and p.lo is not None and p.lo > 0 else raw
        if s.config_view is not None:
            out.update(s.config_view(cfg))
    return out


def _scheme_name(sid: int) -> str:
    return SCHEME_NAMES.get(sid, f"scheme{sid}")


@contextmanager
def config_update(maps: SwitchMaps):
    """``config[0]`` to change in the block, written back at its end (not
    after an error). The array's one value can only be replaced whole, so
    each read-modify-write holds an flock on the switch's pin directory:
    two writers at once (`talb scheme` and `talb release` from two shells)
    never lose one's change. Maps opened by fd (no pin directory) are one
    process's: no lock."""
    fd = None
    pin_dir = getattr(maps, "pin_dir", None)
    if pin_dir is not None:
        fd = os.open(pin_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        cfg = maps.config[0]
        yield cfg
        maps.config[0] = cfg
    finally:
        if fd is not None:
            os.close(fd)


# --- schemes and their parameters ---------------------------------------------------
#: scheme -> {parameter: (read_config / TalbConfig field, least, largest)}: what
#: ``talb scheme NAME --param key=value`` sets (docs/schemes.md: defaults and why),
#: from each scheme's declaration (datapath/schemes/<name>.py, SCHEME.params).
#: A fallback (a scheme-name parameter) is a scheme name; its scheme also takes
#: the fallback's parameters.
SCHEME_PARAMS: Mapping[str, Mapping[str, tuple]] = {
    s.name: {p.name: (p.field, p.lo, p.hi) for p in s.params} for s in scheme_registry.SCHEMES}


def parse_params(items: Iterable[str]) -> dict[str, str]:
    """``["d=2", "m=1"]`` -> ``{"d": "2", "m": "1"}`` (the CLI's --param);
    SchemeError naming an item without ``=`` or given twice."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise SchemeError(f"--param {item!r}: expected key=value")
        if key in out:
            raise SchemeError(f"--param {key}: given twice ({out[key]!r}, {value!r})")
        out[key] = value
    return out


def _params_of(scheme: str, fallback: str | None = None) -> dict[str, tuple]:
    params = dict(SCHEME_PARAMS.get(scheme, {}))
    if scheme in scheme_registry.BY_NAME and scheme_registry.get(scheme).has_fallback and fallback:
        params.update(SCHEME_PARAMS.get(fallback, {}))
    return params


def scheme_params(maps: SwitchMaps) -> dict:
    """The effective parameters of the scheme in force (defaults resolved),
    ``{}`` for a scheme without any; a scheme with a fallback (a scheme-name
    parameter) includes its fallback's."""
    cfg = read_config(maps)
    scheme = cfg["scheme"]
    out = {}
    for key, (field, _lo, _hi) in _params_of(scheme, cfg["fallback_scheme"]).items():
        out[key] = cfg[field]
    return out


def set_scheme(maps: SwitchMaps, name: str, params: Mapping[str, object] | None = None) -> dict:
    """Switch the load-balancing scheme at run time (no reload), with its
    parameters (``{"d": 2}``; strings as from the CLI are parsed). The
    scheme and its parameters land in one write of config[0]: a packet sees
    the old configuration or the new one, never a mix. SchemeError for an
    unknown or not implemented scheme, a key the scheme does not take, or a
    value out of range -- naming the key and the value. Returns the
    effective parameters (:func:`scheme_params`)."""
    scheme_id = scheme_id_of(name)
    scheme = SCHEME_NAMES[scheme_id]
    params = dict(params or {})
    with config_update(maps) as cfg:    # an error below: nothing written
        _apply_scheme(cfg, scheme_id, scheme, params)
    return scheme_params(maps)


def _apply_scheme(cfg, scheme_id: int, scheme: str, params: dict) -> None:
    fallback = SCHEME_NAMES.get(cfg.fallback_scheme)
    if "fallback" in params:
        if not scheme_registry.get(scheme).has_fallback:
            having = "/".join(s.title for s in scheme_registry.SCHEMES if s.has_fallback)
            raise SchemeError(f"--param fallback={params['fallback']}: only {having} has a "
                              f"fallback scheme (for untagged packets), not {scheme}")
        fid = _fallback_id(params["fallback"], f"--param fallback={params['fallback']}")
        cfg.fallback_scheme = fid
        fallback = SCHEME_NAMES[fid]
    known = _params_of(scheme, fallback)
    for key, raw in params.items():
        if key == "fallback":
            continue
        if key not in known:
            takes = ", ".join(known) or "no parameters"
            raise SchemeError(f"--param {key}={raw}: {scheme} takes {takes}")
        field, lo, hi = known[key]
        try:
            value = int(str(raw), 0)
        except ValueError:
            raise SchemeError(f"--param {key}={raw}: not an integer") from None
        if not lo <= value <= hi:
            raise SchemeError(f"--param {key}={raw}: must be {lo}..{hi}")
        setattr(cfg, field, value)
    cfg.scheme = scheme_id


def set_timers(maps: SwitchMaps, timers) -> dict:
    """Write the timers derived from the link rate (:class:`datapath.timers.Timers`)
    into the switch's config in one write: every scheme parameter that
    follows one (``Param.timer``: a flowlet gap, a decay period; docs/schemes.md,
    "Timers follow the link rate").
    `talb testbed up` does it once, before any traffic; a later ``talb
    scheme --param`` overrides any of them. Returns the scheme's effective
    parameters."""
    with config_update(maps) as cfg:
        for p in TIMED_PARAMS:
            setattr(cfg, p.field, int(getattr(timers, p.timer)))
    return scheme_params(maps)


#: the parameters that follow the link rate, one per config field (a shared
#: parameter, the flowlet gap, is declared by each scheme that takes it)
TIMED_PARAMS = tuple({p.field: p for s in scheme_registry.SCHEMES for p in s.params
                      if p.timer}.values())


# --- links: each port's rate and queue, what the data path's queue estimates drain at ---
def set_port_rates(maps: SwitchMaps, rates: Mapping[int, tuple]) -> None:
    """``{ifindex: (rate_bps, queue_limit_bytes[, burst_bytes])}`` for
    installed ports: the data path's queue estimates drain at this
    rate behind a token bucket of this burst (the port's HTB) and never
    exceed this limit. Ports left out keep what they have."""
    from datapath.structs import PortRate

    installed = read_ports(maps)
    for ifindex, spec in rates.items():
        rate_bps, limit, burst = (*spec, 0) if len(spec) == 2 else spec
        if ifindex not in installed:
            raise ValueError(f"set_port_rates: ifindex {ifindex} is not a port of the switch")
        if rate_bps < 0 or not 0 <= limit < 2**32 or not 0 <= burst < 2**32:
            raise ValueError(f"set_port_rates: ifindex {ifindex}: rate {rate_bps} bit/s, "
                             f"limit {limit} B, burst {burst} B out of range")
        maps.port_rate[installed[ifindex]["port_id"]] = PortRate(
            int(rate_bps) // 8, int(limit), int(burst))


def set_release(maps: SwitchMaps, on: bool) -> None:
    """First-hop socket release (CFG_RELEASE_SK, docs/design.md §3) on/off."""
    with config_update(maps) as cfg:
        cfg.flags = (cfg.flags | CFG_RELEASE_SK) if on else (cfg.flags & ~CFG_RELEASE_SK)


def set_ecn(maps: SwitchMaps, ports: Mapping[int, dict] | None) -> None:
    """ECN marking at the egress ports (CFG_ECN, bpf/include/talb/ecn.h):
    ``{ifindex: {"rate_bps", "k_bytes", "limit_bytes", "burst_bytes",
    "weights"}}`` turns it on with each listed port's phantom queue set up
    (``weights``: the bands as the port's qdisc is installed now, one per
    band, at most MAX_BANDS; ``limit_bytes``: one band's), every phantom
    queue emptied; None turns it off (the setup stays, unused)."""
    from datapath.structs import EcnPort, EcnQueue

    flag = CONST["CFG_ECN"]
    if ports is None:
        with config_update(maps) as cfg:
            cfg.flags &= ~flag
        return
    installed = read_ports(maps)
    rows = {}
    for ifindex, p in ports.items():
        if ifindex not in installed:
            raise ValueError(f"set_ecn: ifindex {ifindex} is not a port of the switch")
        w = list(p["weights"])
        if not 1 <= len(w) <= MAX_BANDS or not all(1 <= x <= 255 for x in w):
            raise ValueError(f"set_ecn: ifindex {ifindex}: weights 1..255, one per band "
                             f"(1..{MAX_BANDS} bands), got {w!r}")
        for f in ("k_bytes", "limit_bytes", "burst_bytes"):
            if not 0 <= int(p[f]) < 2**32:
                raise ValueError(f"set_ecn: ifindex {ifindex}: {f} {p[f]!r} out of range")
        if int(p["rate_bps"]) <= 0:
            raise ValueError(f"set_ecn: ifindex {ifindex}: rate_bps must be positive, "
                             f"got {p['rate_bps']!r}")
        rows[installed[ifindex]["port_id"]] = EcnPort(
            int(p["rate_bps"]) // 8, int(p["k_bytes"]), int(p["limit_bytes"]),
            int(p["burst_bytes"]), (ctypes.c_uint8 * MAX_BANDS)(*w), 0)
    for port_id, row in rows.items():
        maps.ecn_port[port_id] = row
        maps.ecn_queue[port_id] = EcnQueue()
    with config_update(maps) as cfg:
        cfg.flags |= flag


def read_ecn(maps: SwitchMaps) -> dict:
    """``{"on": bool, "ports": {port_id: {"k_bytes", "rate_bps", "queue_bytes"
    (each band's phantom backlog, as last updated)}}}`` for the set-up ports."""
    on = bool(maps.config[0].flags & CONST["CFG_ECN"])
    out = {}
    for p in read_ports(maps).values():
        e = maps.ecn_port.get(p["port_id"])
        if e is None or not e.bytes_per_s:
            continue
        q = maps.ecn_queue.get(p["port_id"])
        out[p["port_id"]] = {"k_bytes": e.k_bytes, "rate_bps": e.bytes_per_s * 8,
                             "queue_bytes": list(q.bytes) if q is not None else []}
    return {"on": on, "ports": out}


def set_hash_seed(maps: SwitchMaps, seed: int) -> None:
    with config_update(maps) as cfg:
        cfg.hash_seed = int(seed) & 0xFFFFFFFF


def set_talb_config(maps: SwitchMaps, *, fallback: str | None = None,
                    tensor_limit: int | None = None, tensor_idle_us: int | None = None,
                    n_bands: int | None = None, layers_per_band: int | None = None) -> dict:
    """Set TaLB's run-time knobs (None: keep). ``fallback``: scheme for
    untagged packets under TaLB (one that may be a fallback: not talb);
    ``tensor_limit``: live tensor entries, 1..TALB_MAX_TENSORS;
    ``tensor_idle_us``: idle timeout of an entry; ``n_bands``: priority
    bands of the egress HTB (1..TALB_MAX_BANDS, as the topology's
    ``queue.bands``); ``layers_per_band``: layers per tagged band."""
    with config_update(maps) as cfg:
        if fallback is not None:
            cfg.fallback_scheme = _fallback_id(fallback, "fallback")
        # field: (value, largest allowed, the range as the error names it); 1 is the least
        limits = {
            "tensor_limit": (tensor_limit, TALB_MAX_TENSORS,
                             f"1..TALB_MAX_TENSORS={TALB_MAX_TENSORS}"),
            "tensor_idle_us": (tensor_idle_us, 0xFFFFFFFF, "1..2^32-1"),
            "n_bands": (n_bands, CONST["TALB_MAX_BANDS"],
                        f"1..TALB_MAX_BANDS={CONST['TALB_MAX_BANDS']}"),
            "layers_per_band": (layers_per_band, 256, "1..256"),
        }
        for field, (value, hi, text) in limits.items():
            if value is None:
                continue
            if not 1 <= int(value) <= hi:
                raise ValueError(f"{field}: {text}, got {value}")
            setattr(cfg, field, int(value))
    return read_config(maps)


# --- TaLB: groups, PCM, tensor table ---------------------------------------------------
def _find_group(maps: SwitchMaps, group_ifindexes: Sequence[int],
                group_id: int | None = None) -> tuple[int, FwdGroup]:
    want = [int(x) for x in group_ifindexes]
    if group_id is not None:  # the caller's id: one lookup instead of a walk of the map
        g = maps.groups.get(group_id)
        if g is not None and g.ports() == want:
            return group_id, g
    for gid, g in maps.groups.items():
        if g.ports() == want:
            return gid, g
    raise ValueError(f"publish_pcm: no group with ports {want} installed "
                     f"(groups: {[g.ports() for _, g in maps.groups.items()]})")


def publish_pcm(maps: SwitchMaps, group_ifindexes: Sequence[int],
                pcm: Mapping[int, float], threshold: float | None = None, *,
                group_id: int | None = None) -> int:
    """Publish the port congestion metrics of one forwarding group.

    ``group_ifindexes``: the group's ports, in its order (as installed by
    :func:`program_switch`); ``pcm``: ``{ifindex: P_i}`` with P_i in [0, 1]
    (Eq. 5) for each of them; ``threshold``: CASE 1's S in [0, 1] (None:
    1.0, the largest PCM Eq. 5 yields -- see docs/talb-decisions.md).

    Computes the port order by PCM (lowest first) and the smooth-WRR
    schedule for weights ``1 - P_i`` (datapath/schemes/talb.py) and replaces the
    group in one map update: the data path sees the old publication or the
    new one, never a mix. ``group_id``: where the caller expects the group
    (a hint: if that id holds other ports, the group is searched by its
    ports as without it). Returns the group id."""
    gid, g = _find_group(maps, group_ifindexes, group_id)
    ports = g.ports()
    missing = [x for x in ports if x not in pcm]
    if missing:
        raise ValueError(f"publish_pcm: no PCM for port(s) {missing} of group {ports}")
    fixed = [talb_scheme.pcm_to_fixed(pcm[x]) for x in ports]
    new = FwdGroup.of(
        ports, pcm=fixed, order=talb_scheme.fixed_pcm_order(fixed),
        threshold=talb_scheme.PCM_ONE if threshold is None else talb_scheme.pcm_to_fixed(threshold),
        schedule=talb_scheme.smooth_wrr_schedule(talb_scheme.fixed_wrr_weights(fixed)))
    new.flags = g.flags
    maps.groups[gid] = new
    return gid


# FwdGroup as bytes: the header (n_ports, flags, ifindex[]) the control plane
# installs, the TaLB part (threshold .. sched[]) publish_pcm replaces.
_GROUP_SIZE = ctypes.sizeof(FwdGroup)
_TALB_OFFSET = FwdGroup.threshold.offset
_TALB_PART = struct.Struct(f"=IHH{TALB_MAX_GROUP_PORTS}H{TALB_MAX_GROUP_PORTS}B"
                           f"{talb_scheme.SCHED_MAX}B")
_U32 = struct.Struct("=I")
if (_TALB_OFFSET + _TALB_PART.size != _GROUP_SIZE or FwdGroup.flags.offset != 4
        or FwdGroup.ifindex.offset != 8 or FwdGroup.pcm.offset - _TALB_OFFSET != 8):
    raise ImportError("struct fwd_group's layout does not match GroupPublisher's encoding")
_ENOTSUPP = 524  # the kernel's internal "operation not supported" (no errno name)


def _talb_part(fixed: Sequence[int], threshold: int) -> bytes:
    """The TaLB part of a group as publish_pcm writes it (FwdGroup.of's
    zero padding included), for fixed-point PCMs in group order."""
    n = len(fixed)
    order = sorted(range(n), key=fixed.__getitem__)  # stable: ties keep group order
    schedule = talb_scheme.cached_schedule(tuple(talb_scheme.fixed_wrr_weights(fixed)))
    pad = TALB_MAX_GROUP_PORTS - n
    return _TALB_PART.pack(threshold, len(schedule), 0, *fixed, *(0,) * pad, *order,
                           *(0,) * pad, *schedule,
                           *(0,) * (talb_scheme.SCHED_MAX - len(schedule)))


class GroupPublisher:
    """:func:`publish_pcm` for a set of groups at once, as the agent's window
    does it: one BPF_MAP_LOOKUP_BATCH reads the groups map, one
    BPF_MAP_UPDATE_BATCH writes the groups whose value changes, the ctypes
    buffers made once. The map ends exactly as after one publish_pcm per
    group (tests/test_agent_live.py compares the two): a group that already
    holds the value publish_pcm would write is not written again, and one
    that is no longer where it was expected (reprogrammed meanwhile) goes
    through publish_pcm itself (which finds it by its ports, or raises).

    ``groups``: ``[(group_id, ifindexes in group order), ...]``. Kernels
    without the batch commands (< 5.6) get per-group lookups and updates.
    ``native``: compute the groups' orders and smooth-WRR schedules in C
    (datapath.talb_native, the same bytes; Python where it cannot be built);
    False: in Python."""

    def __init__(self, maps: SwitchMaps, groups: Sequence[tuple[int, Sequence[int]]],
                 native: bool = True):
        self.maps = maps
        self._groups = []
        for gid, members in groups:
            members = [int(x) for x in members]
            n = len(members)
            if not 0 < n <= TALB_MAX_GROUP_PORTS:
                raise ValueError(f"group {gid}: {n} ports, 1..TALB_MAX_GROUP_PORTS="
                                 f"{TALB_MAX_GROUP_PORTS}")
            ifx = struct.pack(f"={TALB_MAX_GROUP_PORTS}I",
                              *members, *(0,) * (TALB_MAX_GROUP_PORTS - n))
            # [gid, key bytes, members, n_ports bytes, ifindex[] bytes,
            #  last (fixed PCMs, fixed S), their TaLB part, the (PCMs, S) they came from,
            #  the group's slot (its position here; the C code keeps its last fixed PCMs)]
            self._groups.append([gid, _U32.pack(gid), members, _U32.pack(n), ifx, None, b"",
                                 None, len(self._groups)])
        m = maps.groups
        self._read = sc.MapBatch(m.fd, 4, _GROUP_SIZE, m.info.max_entries, "groups")
        self._write = sc.MapBatch(m.fd, 4, _GROUP_SIZE, max(1, len(self._groups)), "groups")
        self._read_keys = memoryview(self._read.keys).cast("B").cast("I")
        self._read_values = memoryview(self._read.values).cast("B")
        self._write_keys = memoryview(self._write.keys).cast("B")
        self._write_values = memoryview(self._write.values).cast("B")
        self.batched = True
        # fixed point and TaLB parts in C when it can be built (None: in Python)
        self._native = talb_native.parts(len(self._groups)) if native else None
        # the whole batched publication in one C call (talb_publish) where it can be
        self._sizes = [len(g[2]) for g in self._groups]
        self._c_publish = self._native.publication(
            m.fd, self._read, self._write, [(g[0], g[2]) for g in self._groups]) \
            if self._native is not None else None
        self._fixed_s: dict = {}
        # the last thresholds given and their fixed point (_publish_c)
        self._thr_given: list | None = None
        self._thr_fixed: list = []
        #: groups written and left alone (already holding the value) so far
        self.written = self.unchanged = 0
        self._snapshot: bytes | None = None   # the groups map as last read (batched)
        self._quiet: tuple | None = None      # last call's (pcms, thresholds) if it did nothing

    def _current(self, same_inputs: bool = False) -> dict[int, bytes] | None:
        """{group id: value} of our groups as the map holds them now; None
        when ``same_inputs`` and the whole map is byte for byte as the last
        call found it (the last publication wrote nothing: nothing to do)."""
        if self.batched:
            try:
                count = self._read.lookup()
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP):
                    raise
                self.batched = False
            else:
                snapshot = bytes(self._read_keys[:count]) + bytes(
                    self._read_values[:count * _GROUP_SIZE])
                if same_inputs and snapshot == self._snapshot:
                    return None  # the map is as the last window left it
                self._snapshot = snapshot
                where = dict(zip(self._read_keys[:count].tolist(), range(count)))
                values, out = self._read_values, {}
                for g in self._groups:
                    i = where.get(g[0])
                    if i is not None:
                        out[g[0]] = bytes(values[i * _GROUP_SIZE:(i + 1) * _GROUP_SIZE])
                return out
        out = {}
        for g in self._groups:
            raw = sc.map_lookup(self.maps.groups.fd, g[1], _GROUP_SIZE)
            if raw is not None:
                out[g[0]] = raw
        return out

    def input_buffer(self) -> tuple[object, int] | None:
        """(the C publication's P_i input, a ctypes double array; its stride)
        -- group k's P_i in group order go at entries ``k * stride ...`` --
        for a caller that computes the PCMs in C and writes them there
        itself, then calls :meth:`publish_buffered`; None without the C
        publication (then :meth:`publish`)."""
        if self._c_publish is None or not self.batched:
            return None
        return self._c_publish.pcm_buffer, TALB_MAX_GROUP_PORTS

    def publish_buffered(self, thresholds: Sequence[float | None],
                         pcms_of: Callable[[], list[list[float]]]
                         ) -> list[ValueError | None] | None:
        """:meth:`publish` for the P_i the caller wrote into
        :meth:`input_buffer` (the same map, the same result); ``pcms_of()``:
        those P_i as :meth:`publish` takes them, made only when a group must
        go the slow way (moved, or a PCM that cannot be encoded). None: the C
        publication is not (or no longer) available: call :meth:`publish`."""
        if self._c_publish is None or not self.batched:
            return None
        if len(thresholds) != len(self._groups):
            raise ValueError(f"publish: {len(self._groups)} groups, got {len(thresholds)} "
                             f"thresholds")
        return self._publish_c(None, thresholds, pcms_of)

    def publish(self, pcms: Sequence[Sequence[float]],
                thresholds: Sequence[float | None]) -> list[ValueError | None]:
        """``pcms[k]``: group k's P_i per position (group order), ``thresholds[k]``
        its S (None: 1.0), as :func:`publish_pcm` takes them. Per group: None
        when published, or the ValueError publish_pcm raised for it."""
        if len(pcms) != len(self._groups) or len(thresholds) != len(self._groups):
            raise ValueError(f"publish: {len(self._groups)} groups, got {len(pcms)} PCM lists "
                             f"and {len(thresholds)} thresholds")
        if self._c_publish is not None and self.batched:
            done = self._publish_c(pcms, thresholds)
            if done is not None:
                return done
        to_fixed = talb_scheme.pcm_to_fixed
        one = talb_scheme.PCM_ONE
        # The last call wrote nothing and found every group in place: if the
        # PCMs are the same and the map has not moved since, neither will it now.
        quiet, self._quiet = self._quiet, None
        same = quiet is not None and quiet[0] == pcms and quiet[1] == thresholds
        current = self._current(same)
        if current is None:
            self._quiet = quiet
            self.unchanged += len(self._groups)
            return [None] * len(self._groups)
        moved = False  # written through publish_pcm
        errors: list[ValueError | None] = []
        changed = []
        placed = []  # (group, its value in the map) of the groups where we expect them
        stale = []   # groups whose TaLB part must be recomputed
        todo = []    # (group, PCMs, S) of changed inputs, for the C code
        native = self._native
        for g, pcm, s in zip(self._groups, pcms, thresholds):
            gid, _key, members, n_bytes, ifx, last, _part, given, _slot = g
            if len(pcm) != len(members):
                raise ValueError(f"publish: group {gid} has {len(members)} ports, "
                                 f"got {len(pcm)} PCMs")
            cur = current.get(gid)
            n = len(members)
            if cur is None or cur[:4] != n_bytes or cur[8:8 + 4 * n] != ifx[:4 * n]:
                # not where we expect it: publish_pcm searches it by its ports
                moved = True
                try:
                    publish_pcm(self.maps, members, dict(zip(members, pcm)), s, group_id=gid)
                except ValueError as exc:
                    errors.append(exc)
                    continue
                self.written += 1
                errors.append(None)
                continue
            if given is None or given[0] != pcm or given[1] != s:
                if native is not None:  # fixed point, compared and the part made in C
                    todo.append((g, pcm, s))
                    placed.append((g, cur))
                    errors.append(None)
                    continue
                # pcm_to_fixed; its clamps and NaN check only where they can matter
                fixed = [round(p * one) if 0.0 <= p <= 1.0 else to_fixed(p) for p in pcm]
                state = (fixed, one if s is None else to_fixed(s))
                if state != last:
                    g[5] = state
                    stale.append(g)
                g[7] = (list(pcm), s)
            placed.append((g, cur))
            errors.append(None)
        if todo:
            self._refresh(todo)
        if stale:
            self._parts(stale)
        for g, cur in placed:
            value = cur[:8] + g[4] + g[6]  # flags as installed, as publish_pcm keeps them
            if value != cur:
                changed.append((g[1], value))
            else:
                self.unchanged += 1
        if changed:
            self._store(changed)
        if not changed and not moved:
            self._quiet = ([list(p) for p in pcms], list(thresholds))
        return errors

    def _publish_c(self, pcms, thresholds,
                   pcms_of: Callable[[], list[list[float]]] | None = None
                   ) -> list[ValueError | None] | None:
        """:meth:`publish` in one C call (talb_publish: read, parts, write);
        groups not where expected the slow way, as the Python path does.
        ``pcms`` None: the P_i are in the publication's buffer already
        (:meth:`publish_buffered`), ``pcms_of()`` makes them where needed.
        None: the kernel has no batch operations (the Python path takes over)."""
        one, to_fixed = talb_scheme.PCM_ONE, talb_scheme.pcm_to_fixed
        if pcms is not None and list(map(len, pcms)) != self._sizes:
            for g, pcm in zip(self._groups, pcms):
                if len(pcm) != len(g[2]):
                    raise ValueError(f"publish: group {g[0]} has {len(g[2])} ports, "
                                     f"got {len(pcm)} PCMs")
        if thresholds != self._thr_given:  # usually the same S window after window
            fixed_s = self._fixed_s
            if len(fixed_s) > 64:
                fixed_s.clear()
            for s in set(thresholds):
                if s not in fixed_s:
                    fixed_s[s] = one if s is None else to_fixed(s)
            self._thr_fixed = [fixed_s[s] for s in thresholds]
            self._thr_given = list(thresholds)
        if pcms is None:
            rc, status = self._c_publish.buffered(self._thr_fixed)
        else:
            rc, status = self._c_publish(pcms, self._thr_fixed)
        if rc == talb_native.PUBLISH_NAN:  # pcm_to_fixed raises as publish_pcm would
            for pcm in pcms if pcms is not None else pcms_of():
                for p in pcm:
                    to_fixed(p)
            raise AssertionError("talb_publish saw a NaN that pcm_to_fixed did not")
        if rc <= talb_native.PUBLISH_BAD_GROUP:
            k = talb_native.PUBLISH_BAD_GROUP - rc
            raise ValueError(f"talb_publish: group {self._groups[k][0]} cannot be encoded: "
                             f"{(pcms if pcms is not None else pcms_of())[k]}")
        if rc < 0:
            if -rc in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP):
                self.batched = False
                self._native.forget()   # the Python path remakes every part
                return None
            raise OSError(-rc, f"publishing groups (BPF_MAP_*_BATCH groups): {os.strerror(-rc)}")
        self.written += rc
        if talb_native.PUB_MOVED not in status:
            self.unchanged += len(status) - rc
            return [None] * len(status)
        if pcms is None:
            pcms = pcms_of()
        errors: list[ValueError | None] = []
        for g, pcm, s, st in zip(self._groups, pcms, thresholds, status):
            if st == talb_native.PUB_MOVED:   # publish_pcm searches it by its ports
                members = g[2]
                try:
                    publish_pcm(self.maps, members, dict(zip(members, pcm)), s, group_id=g[0])
                except ValueError as exc:
                    errors.append(exc)
                    continue
                self.written += 1
            elif st == talb_native.PUB_UNCHANGED:
                self.unchanged += 1
            errors.append(None)
        return errors

    def _refresh(self, todo: list[tuple[list, Sequence[float], float | None]]) -> None:
        """In C: each group's PCMs to fixed point, its TaLB part remade where
        they (or S) changed -- what the Python path does with ``last``."""
        one, to_fixed = talb_scheme.PCM_ONE, talb_scheme.pcm_to_fixed
        fixed_s = self._fixed_s  # S in fixed point, by S (usually one value, 1.0)
        if len(fixed_s) > 64:
            fixed_s.clear()
        for _g, _pcm, s in todo:
            if s not in fixed_s:
                fixed_s[s] = one if s is None else to_fixed(s)
        parts = self._native.refresh([(g[8], pcm, fixed_s[s]) for g, pcm, s in todo])
        if parts is None:  # a NaN PCM: pcm_to_fixed raises as publish_pcm would
            for _g, pcm, _s in todo:
                for p in pcm:
                    to_fixed(p)
            raise AssertionError("talb_refresh saw a NaN that pcm_to_fixed did not")
        for (g, pcm, s), part in zip(todo, parts):
            if part is not None:
                g[6] = part
            g[7] = (list(pcm), s)

    def _parts(self, stale: list[list]) -> None:
        """The TaLB part of each group in ``stale`` from its (fixed PCMs, fixed
        S), in Python (without the C code; with it, :meth:`_refresh`)."""
        for g in stale:
            g[6] = _talb_part(*g[5])

    def _store(self, changed: list[tuple[bytes, bytes]]) -> None:
        if self.batched:
            keys, values = self._write_keys, self._write_values
            for j, (key, value) in enumerate(changed):
                keys[j * 4:(j + 1) * 4] = key
                values[j * _GROUP_SIZE:(j + 1) * _GROUP_SIZE] = value
            try:
                self._write.update(len(changed))
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, _ENOTSUPP):
                    raise
                self.batched = False
            else:
                self.written += len(changed)
                return
        for key, value in changed:
            sc.map_update(self.maps.groups.fd, key, value)
        self.written += len(changed)


def read_groups(maps: SwitchMaps) -> dict[int, dict]:
    """``{group_id: {"ports": [ifindex], "pcm": [float], "order", "threshold",
    "schedule"}}``."""
    out = {}
    for gid, g in sorted(maps.groups.items()):
        d = g.talb()
        out[gid] = {"ports": g.ports(),
                    "pcm": [talb_scheme.pcm_from_fixed(x) for x in d["pcm"]],
                    "order": d["order"], "threshold": talb_scheme.pcm_from_fixed(d["threshold"]),
                    "schedule": d["schedule"]}
    return out


def _monotonic_ns() -> int:
    # bpf_ktime_get_ns() is CLOCK_MONOTONIC
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def read_tensor_table(maps: SwitchMaps, now_ns: int | None = None, *,
                      include_done: bool = False) -> list[dict]:
    """The live tensor table (Table I), oldest first: ``src (the sender's
    IPv4 address), tensor_id, tensor_len, received, prev_port (ifindex),
    layer, group_id, done, first_seen_ns, last_seen_ns, age_s, idle_s``. A
    tensor is (src, tensor_id): ids are unique per sending host only.
    ``include_done``: also
    the completed tensors kept for late packets (retransmissions) until
    they are idle."""
    now = _monotonic_ns() if now_ns is None else now_ns
    rows = []
    for key, e in maps.tensors.items():
        done = bool(e.flags & TALB_TENSOR_DONE)
        if done and not include_done:
            continue
        rows.append({"done": done, "src": key.src,
            "tensor_id": key.tensor_id, "tensor_len": e.tensor_len, "received": e.received,
            "prev_port": e.prev_port, "layer": e.layer, "group_id": e.group_id,
            "first_seen_ns": e.first_seen_ns, "last_seen_ns": e.last_seen_ns,
            "age_s": max(0, now - e.first_seen_ns) / 1e9,
            "idle_s": max(0, now - e.last_seen_ns) / 1e9,
        })
    rows.sort(key=lambda r: (r["first_seen_ns"], ipaddress.IPv4Address(r["src"]),
                             r["tensor_id"]))
    return rows


def read_live_layers(maps: SwitchMaps) -> dict[int, dict[int, int]]:
    """``{group_id: {layer: live tensors}}`` as the data path sees them
    (group_state minus group_swept), for installed groups."""
    out = {}
    for gid in sorted(maps.groups.keys()):
        st, sw = maps.group_state.get(gid), maps.group_swept.get(gid)
        if st is not None:
            out[gid] = talb_scheme.live_counts(st, sw)
    return out


def tensor_occupancy(maps: SwitchMaps) -> int:
    n = (maps.tensor_count.get(TALB_COUNT_LIVE, 0) - maps.tensor_count.get(TALB_COUNT_SWEPT, 0))
    n = (n + 2**31) % 2**32 - 2**31
    return max(0, n)


def sweep_tensors(maps: SwitchMaps, idle_s: float | None = None,
                  now_ns: int | None = None) -> int:
    """Remove tensor entries idle for more than ``idle_s`` (None: twice the
    configured tensor_idle_us for live entries, once for done ones) --
    tensors whose last packets never came, so that the data path would
    only notice them on a hit that never happens, and completed ones, whose
    room new tensors need (the map never evicts: schemes/talb.h).

    Why twice for live entries: user space cannot take part in the data path's atomic
    retire (schemes/talb.h talb_retire), so it keeps well clear of entries
    the data path may still touch. The data path forgets an entry idle for
    tensor_idle_us by itself on its next packet; the sweeper only takes
    what stayed idle for twice that. (A packet for an entry idle that long,
    arriving in the microseconds between this function's read and its
    delete, could still make the live count off by one.)

    The data path adds to group_state and tensor_count atomically; user
    space cannot, so it records its removals in group_swept and
    tensor_count[TALB_COUNT_SWEPT] (written by this function only: one
    sweeper per switch at a time). An entry counts as swept only if this
    delete removed it (a racing data-path removal accounts for itself).
    Completed (done) entries are removed too, without accounting: they
    are no longer counted as live. Returns the number removed."""
    if idle_s is None:
        done_s = read_config(maps)["tensor_idle_us"] / 1e6
        live_s = 2 * done_s
    else:
        done_s = live_s = idle_s
    now = _monotonic_ns() if now_ns is None else now_ns
    removed: dict[int, dict[int, int]] = {}
    total = removed_all = 0
    for key, e in list(maps.tensors.items()):
        limit_s = done_s if e.flags & TALB_TENSOR_DONE else live_s
        if now - e.last_seen_ns <= limit_s * 1e9:
            continue
        if maps.tensors.delete(key):
            removed_all += 1
            if e.flags & TALB_TENSOR_DONE:   # no longer counted as live
                continue
            removed.setdefault(e.group_id, {}).setdefault(e.layer, 0)
            removed[e.group_id][e.layer] += 1
            total += 1
    for gid, layers in removed.items():
        sw = maps.group_swept.get(gid)
        if sw is None:
            continue
        for layer, k in layers.items():
            sw.live[layer] = (sw.live[layer] + k) & 0xFFFFFFFF
            sw.tensors = (sw.tensors + k) & 0xFFFFFFFF
        maps.group_swept[gid] = sw
    if total:
        maps.tensor_count[TALB_COUNT_SWEPT] = (
            maps.tensor_count.get(TALB_COUNT_SWEPT, 0) + total) & 0xFFFFFFFF
    return removed_all


def _reset_group_state(maps: SwitchMaps, gids) -> None:
    """Forget the TaLB state of groups (new or removed ids): their tensor
    entries, live-layer counts and WRR cursor."""
    gids = {g for g in gids if 0 <= g < maps.group_state.info.max_entries}
    if not gids:
        return
    gone = 0
    for key, e in list(maps.tensors.items()):
        if e.group_id in gids and maps.tensors.delete(key) and not e.flags & TALB_TENSOR_DONE:
            gone += 1
    for gid in gids:
        maps.group_state[gid] = GroupState()
        maps.group_swept[gid] = GroupState()
    if gone:
        maps.tensor_count[TALB_COUNT_SWEPT] = (
            maps.tensor_count.get(TALB_COUNT_SWEPT, 0) + gone) & 0xFFFFFFFF


def clear_tensor_table(maps: SwitchMaps) -> None:
    """Empty the tensor table and every group's TaLB state (tests, resets;
    races with packets in flight: use on an idle switch)."""
    for key in list(maps.tensors.keys()):
        maps.tensors.delete(key)
    maps.group_state.clear()
    maps.group_swept.clear()
    maps.tensor_count.clear()


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


# A scheme's control function may not take a name of the control plane's own:
# the control plane's would win, and the scheme's be unreachable here.
_TAKEN = sorted(set(SCHEME_CONTROL) & set(globals()))
if _TAKEN:
    raise scheme_registry.RegistryError(
        f"{', '.join(_TAKEN)}: a scheme's control function (Scheme.control) takes a name "
        f"datapath/control.py defines; name it after the scheme")
