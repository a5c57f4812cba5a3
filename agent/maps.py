"""The switch data path's maps, seen from Python.

* Constants come from ``bpf/include/talb/constants.h``, parsed at import:
  that header is the one source of truth for limits, scheme ids, flags and
  counter indices (``CONST``, and the names below derived from it).
* ctypes mirrors of ``bpf/include/talb/structs.h``.
* :class:`Map`: a typed view of one map fd (get/set/delete/items; per-CPU
  values summed, or per CPU). Opened from a pin, it checks the kernel's key
  and value sizes against the mirror and refuses a mismatch.
* :class:`MapSet`: a data path's maps, opened from its pin directory (or
  from fds) by name, each a checked :class:`Map`; :class:`SwitchMaps` is one
  switch's (agent/host_maps.py's HostMaps a host's). Needs no bcc and no
  program reload: ``talb testbed status`` and the agent use it on a running
  data path.
"""
from __future__ import annotations

import ast
import ctypes
import ipaddress
import operator
import os
import re
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from agent import bpf_syscall as sc

try:
    from talb.paths import BPF_SRC_DIR
except ImportError:  # pragma: no cover - agent used without the talb package
    BPF_SRC_DIR = Path(__file__).resolve().parent.parent / "bpf"

CONSTANTS_H = Path(BPF_SRC_DIR) / "include" / "talb" / "constants.h"

__all__ = [
    "CONST", "SCHEMES", "SCHEME_NAMES", "IMPLEMENTED_SCHEMES", "COUNTER_NAMES",
    "PortInfo", "PortStats", "FwdGroup", "TalbConfig", "IPv4Key", "TensorKey", "TensorEntry",
    "GroupState", "FlowKey", "Flowlet", "PortRate", "PortQueue", "DrillMem", "TalbScratch",
    "CongaDre", "CongaMetric",
    "Map",
    "MapLayoutError", "MapSet", "SwitchMaps", "MAP_SPECS", "possible_cpus", "parse_constants",
    "constant", "counter_names",
]


# --- constants ---------------------------------------------------------------
_DEFINE_RE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+(.+?)\s*$")
_INT_RE = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
}


def _eval_expr(text: str, names: dict[str, int]) -> int | None:
    """Value of a C integer expression, or None if it is not one we accept."""
    text = _INT_RE.sub(lambda m: m.group(1), text)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return ~ev(node.operand) & 0xFFFFFFFF
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(node)

    try:
        return ev(tree)
    except (ValueError, KeyError):
        return None


def parse_constants(path: str | os.PathLike = CONSTANTS_H) -> dict[str, int]:
    """``{NAME: value}`` for every integer ``#define`` of a header."""
    names: dict[str, int] = {}
    text = Path(path).read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # block comments
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        m = _DEFINE_RE.match(line)
        if not m:
            continue
        value = _eval_expr(m.group(2), names)
        if value is not None:
            names[m.group(1)] = value
    return names


CONST = MappingProxyType(parse_constants())


def constant(consts: Mapping[str, int], name: str, header: str | os.PathLike) -> int:
    """``consts[name]``; a RuntimeError naming ``header`` if it lacks it."""
    try:
        return consts[name]
    except KeyError:
        raise RuntimeError(f"{header}: no integer #define {name}") from None


def counter_names(consts: Mapping[str, int], prefix: str, n: int, header: str | os.PathLike,
                  *, exclude: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Counter index -> name for a counters array of ``n``, from the
    ``<prefix><NAME>`` defines of ``header`` (but ``exclude``); indices
    without a name are ``reserved_<i>``. Checks range and uniqueness."""
    names: list[str | None] = [None] * n
    for k, v in consts.items():
        if not k.startswith(prefix) or k in exclude:
            continue
        if not 0 <= v < n:
            raise RuntimeError(f"{header}: {k}={v} outside counters[{n}]")
        if names[v] is not None:
            raise RuntimeError(f"{header}: {k} and {prefix}{names[v].upper()} share index {v}")
        names[v] = k[len(prefix):].lower()
    return tuple(name if name is not None else f"reserved_{i}" for i, name in enumerate(names))


def _c(name: str) -> int:
    return constant(CONST, name, CONSTANTS_H)


TALB_MAX_PORTS = _c("TALB_MAX_PORTS")
TALB_MAX_GROUP_PORTS = _c("TALB_MAX_GROUP_PORTS")
TALB_NR_COUNTERS = _c("TALB_NR_COUNTERS")
PORT_HOST = _c("PORT_HOST")
PORT_UP = _c("PORT_UP")
CFG_RELEASE_SK = _c("CFG_RELEASE_SK")
TALB_NR_LAYERS = _c("TALB_NR_LAYERS")
TALB_SCHED_MAX = _c("TALB_SCHED_MAX")
TALB_MAX_TENSORS = _c("TALB_MAX_TENSORS")
TALB_PCM_ONE = _c("TALB_PCM_ONE")
TALB_COUNT_LIVE = _c("TALB_COUNT_LIVE")
TALB_COUNT_SWEPT = _c("TALB_COUNT_SWEPT")
TALB_TENSOR_DONE = _c("TALB_TENSOR_DONE")

#: scheme name -> id, from TALB_SCHEME_<NAME>
SCHEMES = MappingProxyType({
    k[len("TALB_SCHEME_"):].lower(): v for k, v in CONST.items() if k.startswith("TALB_SCHEME_")
})
SCHEME_NAMES = MappingProxyType({v: k for k, v in SCHEMES.items()})
#: schemes the data path implements (the others fall back to ECMP there)
IMPLEMENTED_SCHEMES = frozenset({"ecmp", "rps", "letflow", "drill", "conga", "talb"})
TALB_DRILL_MAX_M = _c("TALB_DRILL_MAX_M")


#: counter index -> name ("pass_no_route", "released", "decision_ecmp", ...)
COUNTER_NAMES = counter_names(CONST, "CNT_", TALB_NR_COUNTERS, CONSTANTS_H,
                              exclude=frozenset({"CNT_DECISION_BASE"}))


# --- structs (mirrors of bpf/include/talb/structs.h) -------------------------
# Naming rule: a ctypes mirror is its C struct's name in CamelCase (struct
# tensor_key -> TensorKey, struct host_flow_key -> agent.host_maps.HostFlowKey)
# and no other class takes that name: a Python model of a data-path struct is
# named Model... (agent.schemes.drill.ModelPortQueue), a plain value for where
# it lives (talb.wire.WireTensorKey). A map key that is a bare C integer is
# named for what it holds (IPv4Key).
class PortInfo(ctypes.Structure):
    _fields_ = [("port_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class PortStats(ctypes.Structure):
    _fields_ = [
        ("rx_packets", ctypes.c_uint64),
        ("rx_bytes", ctypes.c_uint64),
        ("tx_packets", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
    ]


class FwdGroup(ctypes.Structure):
    """A forwarding group with its TaLB data (PCM per port, order, threshold
    S, smooth-WRR schedule); written whole, so the data path never sees half
    of an update."""

    _fields_ = [
        ("n_ports", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ifindex", ctypes.c_uint32 * TALB_MAX_GROUP_PORTS),
        ("threshold", ctypes.c_uint32),
        ("sched_len", ctypes.c_uint16),
        ("reserved", ctypes.c_uint16),
        ("pcm", ctypes.c_uint16 * TALB_MAX_GROUP_PORTS),
        ("order", ctypes.c_uint8 * TALB_MAX_GROUP_PORTS),
        ("sched", ctypes.c_uint8 * TALB_SCHED_MAX),
    ]

    @classmethod
    def of(cls, ifindexes, *, pcm=None, order=None, threshold=None,
           schedule=None) -> "FwdGroup":
        """A group of ``ifindexes``. TaLB data defaults to the neutral values
        (every PCM 0, order = group order, threshold = TALB_PCM_ONE, plain
        round-robin); ``pcm`` is fixed point per position."""
        ifindexes = list(ifindexes)
        n = len(ifindexes)
        if n > TALB_MAX_GROUP_PORTS:
            raise ValueError(
                f"group of {n} ports: at most TALB_MAX_GROUP_PORTS={TALB_MAX_GROUP_PORTS}")
        pcm = [0] * n if pcm is None else [int(x) for x in pcm]
        order = list(range(n)) if order is None else [int(x) for x in order]
        schedule = list(range(n)) if schedule is None else [int(x) for x in schedule]
        threshold = TALB_PCM_ONE if threshold is None else int(threshold)
        if len(pcm) != n or sorted(order) != list(range(n)):
            raise ValueError(f"pcm/order must cover the group's {n} ports: {pcm}, {order}")
        if not all(0 <= x <= TALB_PCM_ONE for x in pcm) or not 0 <= threshold <= TALB_PCM_ONE:
            raise ValueError(f"PCM and threshold are fixed point 0..{TALB_PCM_ONE}")
        if len(schedule) > TALB_SCHED_MAX or any(not 0 <= x < n for x in schedule):
            raise ValueError(f"schedule: at most {TALB_SCHED_MAX} indices < {n}, got {schedule}")
        g = cls(n_ports=n, threshold=threshold, sched_len=len(schedule))
        for i, x in enumerate(ifindexes):
            g.ifindex[i] = x
            g.pcm[i] = pcm[i]
            g.order[i] = order[i]
        for i, x in enumerate(schedule):
            g.sched[i] = x
        return g

    def ports(self) -> list[int]:
        return list(self.ifindex[: min(self.n_ports, TALB_MAX_GROUP_PORTS)])

    def talb(self) -> dict:
        """The TaLB data as plain values (fixed point as stored)."""
        n = min(self.n_ports, TALB_MAX_GROUP_PORTS)
        return {"pcm": list(self.pcm[:n]), "order": list(self.order[:n]),
                "threshold": self.threshold,
                "schedule": list(self.sched[: min(self.sched_len, TALB_SCHED_MAX)])}


class TensorKey(ctypes.Structure):
    """tensors key: mirror of struct tensor_key -- the sender's IPv4 address
    and the tensor_id, both in host byte order (as the data path parsed
    them). ``TensorKey.of("10.0.0.1", 0x12345678)``; ``.as_tuple()`` is
    the same key as talb.wire.WireTensorKey, the form every tool uses."""

    _fields_ = [("saddr", ctypes.c_uint32), ("tensor_id", ctypes.c_uint32)]

    @classmethod
    def of(cls, src, tensor_id: int) -> "TensorKey":
        return cls(int(ipaddress.IPv4Address(src)), tensor_id)

    @property
    def src(self) -> str:
        return str(ipaddress.IPv4Address(self.saddr))

    def as_tuple(self) -> tuple[str, int]:
        """``(src, tensor_id)``: equal to talb.wire.WireTensorKey of the same tensor."""
        return self.src, self.tensor_id

    def __str__(self) -> str:
        return f"{self.src}/{self.tensor_id:#010x}"


class TensorEntry(ctypes.Structure):
    """A live tensor (Table I): mirror of struct tensor_entry."""

    _fields_ = [
        ("first_seen_ns", ctypes.c_uint64),
        ("last_seen_ns", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("prev_port", ctypes.c_uint32),
        ("group_id", ctypes.c_uint32),
        ("received", ctypes.c_uint32),
        ("tensor_len", ctypes.c_uint16),
        ("layer", ctypes.c_uint8),
        ("pad", ctypes.c_uint8),
    ]


class GroupState(ctypes.Structure):
    """Per-group TaLB state (struct group_state): WRR cursor, live tensors
    and live tensors per layer."""

    _fields_ = [
        ("wrr_cursor", ctypes.c_uint32),
        ("tensors", ctypes.c_uint32),
        ("live", ctypes.c_uint32 * TALB_NR_LAYERS),
    ]


class TalbConfig(ctypes.Structure):
    _fields_ = [
        ("scheme", ctypes.c_uint32),
        ("hash_seed", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("fallback_scheme", ctypes.c_uint32),
        ("tensor_limit", ctypes.c_uint32),
        ("tensor_idle_us", ctypes.c_uint32),
        ("n_bands", ctypes.c_uint32),
        ("layers_per_band", ctypes.c_uint32),
        ("flowlet_timeout_us", ctypes.c_uint32),
        ("drill_d", ctypes.c_uint16),
        ("drill_m", ctypes.c_uint16),
        ("conga_dre_us", ctypes.c_uint32),
        ("conga_age_us", ctypes.c_uint32),
        ("conga_alpha_shift", ctypes.c_uint8),
        ("conga_q_bits", ctypes.c_uint8),
        ("conga_leaf", ctypes.c_uint8),
        ("conga_pad", ctypes.c_uint8),
        ("reserved", ctypes.c_uint32 * 3),
    ]


class CongaDre(ctypes.Structure):
    """A port's discounting rate estimator (struct conga_dre)."""

    _fields_ = [("x", ctypes.c_uint64), ("last_ns", ctypes.c_uint64)]


class CongaMetric(ctypes.Structure):
    """A CONGA table entry (struct conga_metric)."""

    _fields_ = [("metric", ctypes.c_uint32), ("valid", ctypes.c_uint32),
                ("updated_ns", ctypes.c_uint64)]


class FlowKey(ctypes.Structure):
    """flowlets key: a 5-tuple in host byte order (struct flow_key).
    ``FlowKey.of("10.0.0.1", "10.0.0.2", 40000, 5201, 6)``; ``.as_tuple()``
    is the key of the Python models (agent/schemes/letflow.py)."""

    _fields_ = [
        ("saddr", ctypes.c_uint32),
        ("daddr", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 3),
    ]

    @classmethod
    def of(cls, src, dst, sport: int, dport: int, proto: int) -> "FlowKey":
        return cls(int(ipaddress.IPv4Address(src)), int(ipaddress.IPv4Address(dst)),
                   sport, dport, proto)

    def as_tuple(self) -> tuple:
        return (str(ipaddress.IPv4Address(self.saddr)), str(ipaddress.IPv4Address(self.daddr)),
                self.sport, self.dport, self.proto)


class Flowlet(ctypes.Structure):
    """A flow's current flowlet (struct flowlet): its port and last packet."""

    _fields_ = [("last_seen_ns", ctypes.c_uint64), ("port", ctypes.c_uint32),
                ("pad", ctypes.c_uint32)]


class PortRate(ctypes.Structure):
    """A port's shaper: rate, queue limit, bucket (struct port_rate; user space writes)."""

    _fields_ = [("bytes_per_s", ctypes.c_uint64), ("limit_bytes", ctypes.c_uint32),
                ("burst_bytes", ctypes.c_uint32)]


class PortQueue(ctypes.Structure):
    """The data path's model of a port's shaper (struct port_queue): backlog
    and bucket credit at last_ns."""

    _fields_ = [("bytes", ctypes.c_uint64), ("last_ns", ctypes.c_uint64),
                ("credit", ctypes.c_uint64)]


class TalbPkt(ctypes.Structure):
    """struct talb_pkt (bpf/include/talb/pkt.h): a parsed packet, as the main
    program hands it to a scheme's program. Mirrored for the layout check
    of the pinned scheme_scratch only."""

    _fields_ = [
        ("saddr", ctypes.c_uint32), ("daddr", ctypes.c_uint32), ("daddr_be", ctypes.c_uint32),
        ("sport", ctypes.c_uint16), ("dport", ctypes.c_uint16),
        ("proto", ctypes.c_uint8), ("flags", ctypes.c_uint8), ("ip_hlen", ctypes.c_uint16),
        ("len", ctypes.c_uint32), ("ingress_ifindex", ctypes.c_uint32),
        ("tensor_id", ctypes.c_uint32), ("tensor_len", ctypes.c_uint16),
        ("pkt_idx", ctypes.c_uint16), ("layer", ctypes.c_uint8), ("pad", ctypes.c_uint8 * 3),
    ]


class TalbScratch(ctypes.Structure):
    """struct talb_scratch: what the main program passes to a scheme's program."""

    _fields_ = [("pkt", TalbPkt), ("now", ctypes.c_uint64), ("gid", ctypes.c_uint32),
                ("flags", ctypes.c_uint32)]


class DrillMem(ctypes.Structure):
    """One DRILL engine's remembered ports (struct drill_mem, per CPU)."""

    _fields_ = [("port", ctypes.c_uint32 * TALB_DRILL_MAX_M)]


class IPv4Key(ctypes.BigEndianStructure):
    """fwd key: an IPv4 address in network byte order. ``IPv4Key(int)``."""

    _fields_ = [("addr", ctypes.c_uint32)]

    @classmethod
    def of(cls, ip) -> "IPv4Key":
        return cls(int(ipaddress.IPv4Address(ip)))

    def __str__(self) -> str:
        return str(ipaddress.IPv4Address(self.addr))


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
    talb.wire.WireTensorKey, for ``TensorKey``); values of simple
    ctypes types come back as Python ints, structs as ctypes instances.
    For per-CPU maps ``get`` sums over CPUs; ``get_percpu`` lists them.
    """

    def __init__(self, fd: int, key_type, value_type, *, name: str | None = None,
                 expect_type: int | None = None, owns_fd: bool = True,
                 where: str | None = None):
        self.fd = -1
        self._owns_fd = False
        self.key_type = key_type
        self.value_type = value_type
        self.key_size = ctypes.sizeof(key_type)
        self.value_size = ctypes.sizeof(value_type)
        self.info = sc.map_info(fd)
        self.name = name or self.info.name
        self.percpu = self.info.percpu
        self._check(where or f"map {self.name!r} (id {self.info.id})", expect_type)
        self.fd = fd  # the caller keeps the fd if the checks fail
        self._owns_fd = owns_fd

    def _check(self, where: str, expect_type: int | None = None) -> None:
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
        if problems:
            raise MapLayoutError(
                f"{where}: kernel map layout does not match agent/maps.py: "
                + "; ".join(problems)
                + ". The map was made by a different build of bpf/; reload the data path "
                  "(talb testbed down && talb testbed up).")

    @classmethod
    def from_pin(cls, path: str | os.PathLike, key_type, value_type, *,
                 expect_type: int | None = None) -> "Map":
        """Open the map pinned at ``path``; MapLayoutError if it does not fit."""
        fd = sc.obj_get(path)
        try:
            return cls(fd, key_type, value_type, name=Path(path).name,
                       expect_type=expect_type, where=str(path))
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
                self.maps[n] = Map.from_pin(self.pin_dir / n, kt, vt, expect_type=mtype)
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
                    self.maps[n] = Map(fd, kt, vt, name=n, expect_type=mtype)
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
#: map name (as declared in bpf/include/talb/maps.h and pinned) ->
#: (key type, value type, kernel map type)
MAP_SPECS = MappingProxyType({
    "ports": (ctypes.c_uint32, PortInfo, sc.BPF_MAP_TYPE_HASH),
    "port_stats": (ctypes.c_uint32, PortStats, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "fwd": (IPv4Key, ctypes.c_uint32, sc.BPF_MAP_TYPE_HASH),
    "groups": (ctypes.c_uint32, FwdGroup, sc.BPF_MAP_TYPE_HASH),
    "config": (ctypes.c_uint32, TalbConfig, sc.BPF_MAP_TYPE_ARRAY),
    "counters": (ctypes.c_uint32, ctypes.c_uint64, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
    "tensors": (TensorKey, TensorEntry, sc.BPF_MAP_TYPE_HASH),
    "group_state": (ctypes.c_uint32, GroupState, sc.BPF_MAP_TYPE_ARRAY),
    "group_swept": (ctypes.c_uint32, GroupState, sc.BPF_MAP_TYPE_ARRAY),
    "tensor_count": (ctypes.c_uint32, ctypes.c_uint32, sc.BPF_MAP_TYPE_ARRAY),
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
})


class SwitchMaps(MapSet):
    """All maps of one switch's data path, as attributes named like the maps
    (``.ports``, ``.port_stats``, ``.fwd``, ``.groups``, ``.config``,
    ``.counters``, ``.tensors``, ``.group_state``, ``.group_swept``,
    ``.tensor_count``, ``.scheme_progs``, ``.scheme_scratch``, ``.rng``, ``.flowlets``, ``.port_rate``, ``.port_queue``,
    ``.drill_mem``, ``.conga_dre``, ``.conga_to_leaf``, ``.conga_from_leaf``,
    ``.conga_fb_cursor``, ``.conga_leaf_of``). Open with ``SwitchMaps(pin_dir)`` (from pins; works in
    any process, no bcc) or ``SwitchMaps.from_fds({name: fd})``."""

    SPECS = MAP_SPECS
    MISSING_HINT = " (is the switch's data path loaded? `talb testbed status`)"
