"""The switch data path's maps, seen from Python.

* :class:`Map`: a typed view of one map fd (get/set/delete/items; per-CPU
  values summed, or per CPU). Opened from a pin, it checks the kernel's key
  and value sizes against the mirror (datapath/structs.py) and refuses a
  mismatch.
* :class:`MapSet`: a data path's maps, opened from its pin directory (or
  from fds) by name, each a checked :class:`Map`; :class:`SwitchMaps` is one
  switch's (datapath/host_maps.py's HostMaps a host's). Needs no bcc and no
  program reload: ``talb testbed status`` and the agent use it on a running
  data path.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from common.c_constants import CONST
from datapath import bpf_syscall as sc
from datapath.structs import (CongaDre, CongaMetric, DrillMem, EcnPort, EcnQueue, Flowlet, FlowKey,
                              FwdGroup,
                              GroupState, IPv4Key, PortInfo, PortQueue, PortRate, PortSlot, PortStats,
                              RouteSlot,
                              TalbConfig, TalbScratch, TensorEgress, TensorEntry,
                              TensorKey)

__all__ = ["Map", "MapLayoutError", "MapSet", "SwitchMaps", "MAP_SPECS", "possible_cpus"]


# --- Map ------------------------------------------------------------------------
class MapLayoutError(ValueError):
    """A pinned map does not have the layout this code expects."""


@lru_cache(maxsize=1)
def possible_cpus() -> int:
    """Number of possible CPUs (per-CPU map values have one slot each)."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n = max(n, int(hi or lo) + 1)
    return n


def _round8(n: int) -> int:
    return (n + 7) & ~7


def _sum_values(values: list):
    first = values[0]
    if isinstance(first, int):
        return sum(values)
    total = type(first)()
    for name, ftype in first._fields_:
        if not issubclass(ftype, ctypes._SimpleCData):
            raise TypeError(f"cannot sum per-CPU field {name} of {type(first).__name__}")
        setattr(total, name, sum(getattr(v, name) for v in values))
    return total


class Map:
    """A typed view of one BPF map.

    Keys may be given as ``key_type`` instances, as the argument of its
    constructor (an int for integer keys, ``IPv4Key(int)``) or, for a struct
    key, as a tuple of its ``of`` (``("10.0.0.1", tensor_id)``, a
    common.wire.WireTensorKey, for ``TensorKey``); values of simple
    ctypes types come back as Python ints, structs as ctypes instances.
    For per-CPU maps ``get`` sums over CPUs; ``get_percpu`` lists them.
    """

    def __init__(self, fd: int, key_type, value_type, *, name: str | None = None,
                 expect_type: int | None = None, owns_fd: bool = True,
                 where: str | None = None, expect_entries: int | None = None):
        self.fd = -1
        self._owns_fd = False
        self.key_type = key_type
        self.value_type = value_type
        self.key_size = ctypes.sizeof(key_type)
        self.value_size = ctypes.sizeof(value_type)
        self.info = sc.map_info(fd)
        self.name = name or self.info.name
        self.percpu = self.info.percpu
        self._check(where or f"map {self.name!r} (id {self.info.id})", expect_type,
                    expect_entries)
        self.fd = fd  # the caller keeps the fd if the checks fail
        self._owns_fd = owns_fd

    def _check(self, where: str, expect_type: int | None = None,
               expect_entries: int | None = None) -> None:
        info = self.info
        problems = []
        if info.key_size != self.key_size:
            problems.append(f"key size {info.key_size} != {self.key_size} "
                            f"({self.key_type.__name__})")
        if info.value_size != self.value_size:
            problems.append(f"value size {info.value_size} != {self.value_size} "
                            f"({self.value_type.__name__})")
        if expect_type is not None and info.type != expect_type:
            problems.append(f"type {info.type_name} != "
                            f"{sc.BPF_MAP_TYPE_NAMES.get(expect_type, expect_type)}")
        if expect_entries is not None and info.max_entries != expect_entries:
            problems.append(f"max_entries {info.max_entries} != {expect_entries}")
        if problems:
            raise MapLayoutError(
                f"{where}: kernel map layout does not match datapath/structs.py: "
                + "; ".join(problems)
                + ". The map was made by a different build of bpf/; reload the data path "
                  "(talb testbed down && talb testbed up).")

    @classmethod
    def from_pin(cls, path: str | os.PathLike, key_type, value_type, *,
                 expect_type: int | None = None, expect_entries: int | None = None) -> "Map":
        """Open the map pinned at ``path``; MapLayoutError if it does not fit."""
        fd = sc.obj_get(path)
        try:
            return cls(fd, key_type, value_type, name=Path(path).name,
                       expect_type=expect_type, where=str(path), expect_entries=expect_entries)
        except BaseException:
            os.close(fd)
            raise

    # -- conversion --
    def _key(self, key):
        if isinstance(key, tuple):
            key = self.key_type.of(*key)
        elif not isinstance(key, self.key_type):
            key = self.key_type(key)
        return key

    def _value_from(self, raw: bytes):
        v = self.value_type.from_buffer_copy(raw[: self.value_size])
        return v.value if isinstance(v, ctypes._SimpleCData) else v

    def _value_to(self, value) -> bytes:
        if not isinstance(value, self.value_type):
            value = self.value_type(value)
        raw = bytes(value)
        if self.percpu:  # the same value on every CPU
            raw = raw.ljust(_round8(self.value_size), b"\0") * possible_cpus()
        return raw

    # -- operations --
    def get_percpu(self, key) -> list | None:
        if not self.percpu:
            raise TypeError(f"map {self.name!r} is not per-CPU")
        stride = _round8(self.value_size)
        raw = sc.map_lookup(self.fd, self._key(key), stride * possible_cpus())
        if raw is None:
            return None
        return [self._value_from(raw[i * stride:(i + 1) * stride]) for i in range(possible_cpus())]

    def get(self, key, default=None):
        if self.percpu:
            values = self.get_percpu(key)
            return default if values is None else _sum_values(values)
        raw = sc.map_lookup(self.fd, self._key(key), self.value_size)
        return default if raw is None else self._value_from(raw)

    def __getitem__(self, key):
        v = self.get(key)
        if v is None:
            raise KeyError(key)
        return v

    def set(self, key, value, flags: int = sc.BPF_ANY) -> None:
        sc.map_update(self.fd, self._key(key), self._value_to(value), flags)

    __setitem__ = set

    def delete(self, key) -> bool:
        return sc.map_delete(self.fd, self._key(key))

    def keys(self):
        key = None
        while True:
            raw = sc.map_get_next_key(self.fd, key, self.key_size)
            if raw is None:
                return
            k = self.key_type.from_buffer_copy(raw)
            yield k.value if isinstance(k, ctypes._SimpleCData) else k
            key = raw

    def items(self):
        """(key, value) pairs; keys deleted meanwhile are skipped."""
        for k in list(self.keys()):
            v = self.get(k)
            if v is not None:
                yield k, v

    def clear(self) -> None:
        """Delete every key (hash maps) / zero every value (arrays)."""
        if self.info.type in (sc.BPF_MAP_TYPE_ARRAY, sc.BPF_MAP_TYPE_PERCPU_ARRAY):
            for k in range(self.info.max_entries):
                self.set(k, self.value_type())
        else:
            for k in list(self.keys()):
                self.delete(k)

    def pin(self, path: str | os.PathLike) -> None:
        sc.obj_pin(self.fd, path)

    def close(self) -> None:
        if getattr(self, "_owns_fd", False) and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"Map({self.name!r}, fd={self.fd}, {self.info!r})"


# --- a set of maps ------------------------------------------------------------------
class MapSet:
    """All maps of one data path, as attributes named like the maps, each a
    typed :class:`Map` whose layout is checked. Open with ``cls(pin_dir)``
    (from pins; works in any process, no bcc) or ``cls.from_fds({name: fd})``.

    A subclass names its maps in ``SPECS``: map name (as declared in bpf/
    and pinned) -> (key type, value type, kernel map type); ``NAMES`` follows
    from it. ``MISSING_HINT`` ends the error for missing pins.
    """

    SPECS: MappingProxyType = MappingProxyType({})
    #: map name -> max_entries, for maps whose size is part of the layout
    #: (an index past an older map's end would be lost, not refused)
    ENTRIES: MappingProxyType = MappingProxyType({})
    NAMES: tuple[str, ...] = ()
    MISSING_HINT = ""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.NAMES = tuple(cls.SPECS)

    def __init__(self, pin_dir: str | os.PathLike | None = None):
        self.pin_dir = Path(pin_dir) if pin_dir is not None else None
        self.maps: dict[str, Map] = {}
        if pin_dir is None:
            return
        missing = [n for n in self.NAMES if not (self.pin_dir / n).exists()]
        if missing:
            raise FileNotFoundError(
                f"{self.pin_dir}: no pinned map(s) {', '.join(missing)}{self.MISSING_HINT}")
        try:
            for n, (kt, vt, mtype) in self.SPECS.items():
                self.maps[n] = Map.from_pin(self.pin_dir / n, kt, vt, expect_type=mtype,
                                            expect_entries=self.ENTRIES.get(n))
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_fds(cls, fds: dict[str, int]):
        """Wrap maps by fd (e.g. bcc's ``table.map_fd``); the fds are dup'ed."""
        self = cls(None)
        try:
            for n, (kt, vt, mtype) in cls.SPECS.items():
                fd = os.dup(fds[n])
                try:
                    self.maps[n] = Map(fd, kt, vt, name=n, expect_type=mtype,
                                       expect_entries=cls.ENTRIES.get(n))
                except BaseException:
                    os.close(fd)
                    raise
        except BaseException:
            self.close()
            raise
        return self

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

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- one switch -------------------------------------------------------------------
#: map name (as declared in bpf/include/talb/maps.h, or a scheme's header, and pinned) ->
#: (key type, value type, kernel map type)
MAP_SPECS = MappingProxyType({
    "ports": (ctypes.c_uint32, PortInfo, sc.BPF_MAP_TYPE_HASH),
    "port_slots": (ctypes.c_uint32, PortSlot, sc.BPF_MAP_TYPE_ARRAY),
    "port_stats": (ctypes.c_uint32, PortStats, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "fwd": (IPv4Key, ctypes.c_uint32, sc.BPF_MAP_TYPE_HASH),
    "route_slots": (ctypes.c_uint32, RouteSlot, sc.BPF_MAP_TYPE_ARRAY),
    "groups": (ctypes.c_uint32, FwdGroup, sc.BPF_MAP_TYPE_HASH),
    "config": (ctypes.c_uint32, TalbConfig, sc.BPF_MAP_TYPE_ARRAY),
    "counters": (ctypes.c_uint32, ctypes.c_uint64, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "tensors": (TensorKey, TensorEntry, sc.BPF_MAP_TYPE_HASH),
    "group_state": (ctypes.c_uint32, GroupState, sc.BPF_MAP_TYPE_ARRAY),
    "group_swept": (ctypes.c_uint32, GroupState, sc.BPF_MAP_TYPE_ARRAY),
    "tensor_count": (ctypes.c_uint32, ctypes.c_uint32, sc.BPF_MAP_TYPE_ARRAY),
    "tensor_egress": (TensorKey, TensorEgress, sc.BPF_MAP_TYPE_LRU_HASH),
    "scheme_progs": (ctypes.c_uint32, ctypes.c_uint32, sc.BPF_MAP_TYPE_PROG_ARRAY),
    "scheme_scratch": (ctypes.c_uint32, TalbScratch, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "rng": (ctypes.c_uint32, ctypes.c_uint32, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "flowlets": (FlowKey, Flowlet, sc.BPF_MAP_TYPE_LRU_HASH),
    "port_rate": (ctypes.c_uint32, PortRate, sc.BPF_MAP_TYPE_ARRAY),
    "port_queue": (ctypes.c_uint32, PortQueue, sc.BPF_MAP_TYPE_ARRAY),
    "drill_mem": (ctypes.c_uint32, DrillMem, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "conga_dre": (ctypes.c_uint32, CongaDre, sc.BPF_MAP_TYPE_ARRAY),
    "conga_to_leaf": (ctypes.c_uint32, CongaMetric, sc.BPF_MAP_TYPE_ARRAY),
    "conga_from_leaf": (ctypes.c_uint32, CongaMetric, sc.BPF_MAP_TYPE_ARRAY),
    "conga_fb_cursor": (ctypes.c_uint32, ctypes.c_uint32, sc.BPF_MAP_TYPE_ARRAY),
    "conga_leaf_of": (IPv4Key, ctypes.c_uint32, sc.BPF_MAP_TYPE_HASH),
    "ecn_port": (ctypes.c_uint32, EcnPort, sc.BPF_MAP_TYPE_ARRAY),
    "ecn_queue": (ctypes.c_uint32, EcnQueue, sc.BPF_MAP_TYPE_ARRAY),
})


class SwitchMaps(MapSet):
    """All maps of one switch's data path, as attributes named like the maps
    (``.ports``, ``.port_slots``, ``.port_stats``, ``.fwd``, ``.route_slots``, ``.groups``, ``.config``,
    ``.counters``, ``.tensors``, ``.group_state``, ``.group_swept``,
    ``.tensor_count``, ``.tensor_egress``, ``.scheme_progs``, ``.scheme_scratch``, ``.rng``, ``.flowlets``, ``.port_rate``, ``.port_queue``,
    ``.drill_mem``, ``.conga_dre``, ``.conga_to_leaf``, ``.conga_from_leaf``,
    ``.conga_fb_cursor``, ``.conga_leaf_of``, ``.ecn_port``, ``.ecn_queue``). Open with ``SwitchMaps(pin_dir)`` (from pins; works in
    any process, no bcc) or ``SwitchMaps.from_fds({name: fd})``."""

    SPECS = MAP_SPECS
    #: counters: a decision counter per scheme id at CNT_DECISION_BASE + id;
    #: scheme_progs: a program per id (issue 37 grew both to 16 schemes)
    ENTRIES = MappingProxyType({"counters": CONST["TALB_NR_COUNTERS"],
                                "scheme_progs": CONST["TALB_MAX_SCHEMES"]})
    MISSING_HINT = " (is the switch's data path loaded? `talb testbed status`)"
