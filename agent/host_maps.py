"""The host data path's maps (bpf/host_tc.c), seen from Python.

* Constants come from ``bpf/include/talb/host_constants.h``, parsed at import
  with agent/maps.py's parser (``HOST_CONST`` and the names below).
* ctypes mirrors of ``bpf/include/talb/host_structs.h``: :class:`FlowKey`,
  :class:`HostIsn`, :class:`HostDesc`, :class:`HostRing`.
* :class:`HostMaps`: one host's maps, opened from its pin directory
  (``talb.paths.pin_dir(prefix, host)``) by name, each a typed
  :class:`agent.maps.Map` whose layout is checked against these mirrors.
  Needs no bcc: the tensor-sending library uses it inside host namespaces.
"""
from __future__ import annotations

import ctypes
import ipaddress
import os
from pathlib import Path
from types import MappingProxyType

from agent import bpf_syscall as sc
from agent.maps import Map, parse_constants

try:
    from talb.paths import BPF_SRC_DIR
except ImportError:  # pragma: no cover
    BPF_SRC_DIR = Path(__file__).resolve().parent.parent / "bpf"

__all__ = [
    "HOST_CONSTANTS_H", "HOST_CONST", "HOST_RING_SLOTS", "HOST_ISN_ACTIVE",
    "HOST_COUNTER_NAMES", "FlowKey", "HostIsn", "HostDesc", "HostRing",
    "HOST_MAP_SPECS", "HostMaps",
]

HOST_CONSTANTS_H = Path(BPF_SRC_DIR) / "include" / "talb" / "host_constants.h"
HOST_CONST = MappingProxyType(parse_constants(HOST_CONSTANTS_H))


def _c(name: str) -> int:
    try:
        return HOST_CONST[name]
    except KeyError:
        raise RuntimeError(f"{HOST_CONSTANTS_H}: no integer #define {name}") from None


HOST_RING_SLOTS = _c("HOST_RING_SLOTS")
HOST_MAX_TAGGED_FLOWS = _c("HOST_MAX_TAGGED_FLOWS")
HOST_MAX_FLOWS = _c("HOST_MAX_FLOWS")
HOST_ISN_ACTIVE = _c("HOST_ISN_ACTIVE")
HOST_OPT_VERSION = _c("HOST_OPT_VERSION")
HOST_OPT_F_LAST = _c("HOST_OPT_F_LAST")
HOST_NR_COUNTERS = _c("HOST_NR_COUNTERS")


def _counter_names() -> tuple[str, ...]:
    names: list[str | None] = [None] * HOST_NR_COUNTERS
    for k, v in HOST_CONST.items():
        if not k.startswith("HOST_CNT_"):
            continue
        if not 0 <= v < HOST_NR_COUNTERS:
            raise RuntimeError(f"{HOST_CONSTANTS_H}: {k}={v} outside counters[{HOST_NR_COUNTERS}]")
        if names[v] is not None:
            raise RuntimeError(f"{HOST_CONSTANTS_H}: {k} and HOST_CNT_{names[v].upper()} "
                               f"share index {v}")
        names[v] = k[len("HOST_CNT_"):].lower()
    return tuple(n if n is not None else f"reserved_{i}" for i, n in enumerate(names))


#: counter index -> name ("tagged", "pure_ack", "untagged_no_ring", ...)
HOST_COUNTER_NAMES = _counter_names()


# --- structs (mirrors of bpf/include/talb/host_structs.h) ---------------------
class FlowKey(ctypes.BigEndianStructure):
    """A flow as the host sends it (network byte order, as in the headers)."""

    _fields_ = [
        ("saddr", ctypes.c_uint32),
        ("daddr", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
    ]

    @classmethod
    def of(cls, saddr, sport: int, daddr, dport: int) -> "FlowKey":
        return cls(int(ipaddress.IPv4Address(saddr)), int(ipaddress.IPv4Address(daddr)),
                   sport, dport)

    @classmethod
    def of_socket(cls, sock) -> "FlowKey":
        """The key of a connected IPv4 TCP socket's outgoing packets."""
        (laddr, lport), (raddr, rport) = sock.getsockname()[:2], sock.getpeername()[:2]
        return cls.of(laddr, lport, raddr, rport)

    def __str__(self) -> str:
        return (f"{ipaddress.IPv4Address(self.saddr)}:{self.sport} -> "
                f"{ipaddress.IPv4Address(self.daddr)}:{self.dport}")


class HostIsn(ctypes.Structure):
    _fields_ = [("isn", ctypes.c_uint32), ("flags", ctypes.c_uint32)]

    @property
    def active(self) -> bool:
        """The ISN came from our SYN (connect()), not our SYN-ACK (accept())."""
        return bool(self.flags & HOST_ISN_ACTIVE)


class HostDesc(ctypes.Structure):
    _fields_ = [
        ("stream_start", ctypes.c_uint32),
        ("stream_end", ctypes.c_uint32),
        ("tensor_id", ctypes.c_uint32),
        ("len_pkts", ctypes.c_uint16),
        ("mss", ctypes.c_uint16),
        ("layer", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 3),
    ]

    @property
    def empty(self) -> bool:
        return self.stream_start == self.stream_end


class HostRing(ctypes.Structure):
    _fields_ = [("desc", HostDesc * HOST_RING_SLOTS)]


assert ctypes.sizeof(FlowKey) == 12 and ctypes.sizeof(HostDesc) == 20


# --- one host --------------------------------------------------------------------
#: map name (as declared in bpf/include/talb/host_maps.h and pinned) ->
#: (key type, value type, kernel map type)
HOST_MAP_SPECS = MappingProxyType({
    "flow_isn": (FlowKey, HostIsn, sc.BPF_MAP_TYPE_LRU_HASH),
    "flow_rings": (FlowKey, HostRing, sc.BPF_MAP_TYPE_HASH),
    "counters": (ctypes.c_uint32, ctypes.c_uint64, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
})


class HostMaps:
    """All maps of one host's data path, as attributes named like the maps
    (``.flow_isn``, ``.flow_rings``, ``.counters``). Open with
    ``HostMaps(pin_dir)`` (from pins, any process, no bcc) or
    ``HostMaps.from_fds({name: fd})``."""

    NAMES = tuple(HOST_MAP_SPECS)

    def __init__(self, pin_dir: str | os.PathLike | None = None):
        self.pin_dir = Path(pin_dir) if pin_dir is not None else None
        self.maps: dict[str, Map] = {}
        if pin_dir is None:
            return
        missing = [n for n in self.NAMES if not (self.pin_dir / n).exists()]
        if missing:
            raise FileNotFoundError(
                f"{self.pin_dir}: no pinned map(s) {', '.join(missing)}: no TaLB host program "
                f"is pinned there (`talb testbed up` attaches it to every host)")
        try:
            for n, (kt, vt, mtype) in HOST_MAP_SPECS.items():
                self.maps[n] = Map.from_pin(self.pin_dir / n, kt, vt, expect_type=mtype)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_fds(cls, fds: dict[str, int]) -> "HostMaps":
        """Wrap maps by fd (e.g. bcc's ``table.map_fd``); the fds are dup'ed."""
        self = cls(None)
        try:
            for n, (kt, vt, mtype) in HOST_MAP_SPECS.items():
                fd = os.dup(fds[n])
                try:
                    self.maps[n] = Map(fd, kt, vt, name=n, expect_type=mtype)
                except BaseException:
                    os.close(fd)
                    raise
        except BaseException:
            self.close()
            raise
        return self

    def read_counters(self) -> dict[str, int]:
        """{counter name: packets}, summed over CPUs."""
        return {name: self.counters.get(i, 0) for i, name in enumerate(HOST_COUNTER_NAMES)
                if not name.startswith("reserved_")}

    def __getattr__(self, name: str) -> Map:
        maps = self.__dict__.get("maps", {})
        if name in maps:
            return maps[name]
        raise AttributeError(name)

    def __getitem__(self, name: str) -> Map:
        return self.maps[name]

    def close(self) -> None:
        for m in self.maps.values():
            m.close()
        self.maps = {}

    def __enter__(self) -> "HostMaps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
