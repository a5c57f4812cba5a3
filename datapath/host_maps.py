"""The host data path's maps (bpf/host_tc.c), seen from Python.

* Constants come from ``bpf/include/talb/host_constants.h``, parsed at import
  with common/c_constants.py's parser (``HOST_CONST`` and the names below).
* ctypes mirrors of ``bpf/include/talb/host_structs.h``: :class:`HostFlowKey`,
  :class:`HostIsn`, :class:`HostDesc`, :class:`HostRing`, :class:`HostWire`.
* :class:`HostMaps`: one host's maps, opened from its pin directory
  (``common.paths.pin_dir(prefix, host)``) by name, each a typed
  :class:`datapath.maps.Map` whose layout is checked against these mirrors
  (an :class:`datapath.maps.MapSet`).
  Needs no bcc: the tensor-sending library uses it inside host namespaces.
"""
from __future__ import annotations

import ctypes
import ipaddress
from pathlib import Path
from types import MappingProxyType

from common.c_constants import constant, counter_names, parse_constants
from common.paths import BPF_SRC_DIR
from datapath import bpf_syscall as sc
from datapath.maps import MapSet

__all__ = [
    "HOST_CONSTANTS_H", "HOST_CONST", "HOST_RING_SLOTS", "HOST_ISN_ACTIVE",
    "HOST_COUNTER_NAMES", "HostFlowKey", "HostIsn", "HostDesc", "HostRing", "HostWire",
    "HostSeqDesc", "HostSeqRing", "HOST_SEQ_RING_SLOTS", "HOST_MAX_SENDMSG_FLOWS",
    "HOST_MAX_WIRE_TENSORS", "HOST_WIRE_STALE_NS",
    "HOST_MAP_SPECS", "HostMaps",
]

HOST_CONSTANTS_H = Path(BPF_SRC_DIR) / "include" / "talb" / "host_constants.h"
HOST_CONST = MappingProxyType(parse_constants(HOST_CONSTANTS_H))


def _host_constants_h(name: str) -> int:
    return constant(HOST_CONST, name, HOST_CONSTANTS_H)


HOST_RING_SLOTS = _host_constants_h("HOST_RING_SLOTS")
HOST_MAX_TAGGED_FLOWS = _host_constants_h("HOST_MAX_TAGGED_FLOWS")
HOST_MAX_FLOWS = _host_constants_h("HOST_MAX_FLOWS")
HOST_MAX_WIRE_TENSORS = _host_constants_h("HOST_MAX_WIRE_TENSORS")
HOST_MAX_SENDMSG_FLOWS = _host_constants_h("HOST_MAX_SENDMSG_FLOWS")
HOST_SEQ_RING_SLOTS = _host_constants_h("HOST_SEQ_RING_SLOTS")
HOST_WIRE_STALE_NS = _host_constants_h("HOST_WIRE_STALE_NS")
HOST_ISN_ACTIVE = _host_constants_h("HOST_ISN_ACTIVE")
HOST_OPT_VERSION = _host_constants_h("HOST_OPT_VERSION")
HOST_OPT_F_LAST = _host_constants_h("HOST_OPT_F_LAST")
HOST_NR_COUNTERS = _host_constants_h("HOST_NR_COUNTERS")


#: counter index -> name ("tagged", "pure_ack", "untagged_no_ring", ...)
HOST_COUNTER_NAMES = counter_names(HOST_CONST, "HOST_CNT_", HOST_NR_COUNTERS, HOST_CONSTANTS_H)


# --- structs (mirrors of bpf/include/talb/host_structs.h) ---------------------
# Each mirror is named after its C struct (naming rule: datapath/structs.py).
class HostFlowKey(ctypes.BigEndianStructure):
    """flow_isn and flow_rings key (struct host_flow_key): a flow as the
    host sends it, network byte order as in the headers. Not the switch's
    flowlets key (datapath.structs.FlowKey: host byte order, with the protocol)."""

    _fields_ = [
        ("saddr", ctypes.c_uint32),
        ("daddr", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
    ]

    @classmethod
    def of(cls, saddr, sport: int, daddr, dport: int) -> "HostFlowKey":
        return cls(int(ipaddress.IPv4Address(saddr)), int(ipaddress.IPv4Address(daddr)),
                   sport, dport)

    @classmethod
    def of_socket(cls, sock) -> "HostFlowKey":
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


class HostSeqDesc(ctypes.Structure):
    """One write of an unmodified process in TCP sequence space (struct
    host_seq_desc): ``range`` = seq_start | seq_end << 32."""

    _fields_ = [
        ("range", ctypes.c_uint64),
        ("tensor_id", ctypes.c_uint32),
        ("len_pkts", ctypes.c_uint16),
        ("mss", ctypes.c_uint16),
        ("layer", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 7),
    ]

    @classmethod
    def of(cls, seq_start: int, seq_end: int, tensor_id: int, layer: int, len_pkts: int,
           mss: int) -> "HostSeqDesc":
        return cls(((seq_end & 0xFFFFFFFF) << 32) | (seq_start & 0xFFFFFFFF), tensor_id,
                   len_pkts, mss, layer)

    @property
    def seq_start(self) -> int:
        return self.range & 0xFFFFFFFF

    @property
    def seq_end(self) -> int:
        return self.range >> 32

    @property
    def empty(self) -> bool:
        return self.seq_start == self.seq_end


class HostSeqRing(ctypes.Structure):
    _fields_ = [("desc", HostSeqDesc * HOST_SEQ_RING_SLOTS)]

    def live(self) -> list[HostSeqDesc]:
        return [d for d in self.desc if not d.empty]


class HostWire(ctypes.Structure):
    """When one tensor's tagged packets passed the host's TC egress
    (CLOCK_MONOTONIC ns, the clock of ``time.monotonic_ns``): its first
    packet, the first pass of the packet with its last byte (0 until then),
    its latest packet (retransmissions included), and how many passed."""

    _fields_ = [
        ("first_ns", ctypes.c_uint64),
        ("last_ns", ctypes.c_uint64),
        ("latest_ns", ctypes.c_uint64),
        ("packets", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]

    @property
    def last_seen(self) -> bool:
        """The packet carrying the tensor's last byte went out."""
        return self.last_ns != 0


assert ctypes.sizeof(HostFlowKey) == 12 and ctypes.sizeof(HostDesc) == 20
assert ctypes.sizeof(HostWire) == 32 and ctypes.sizeof(HostSeqDesc) == 24


# --- one host --------------------------------------------------------------------
#: map name (as declared in bpf/include/talb/host_maps.h and pinned) ->
#: (key type, value type, kernel map type)
HOST_MAP_SPECS = MappingProxyType({
    "flow_isn": (HostFlowKey, HostIsn, sc.BPF_MAP_TYPE_LRU_HASH),
    "flow_rings": (HostFlowKey, HostRing, sc.BPF_MAP_TYPE_HASH),
    "sendmsg_rings": (HostFlowKey, HostSeqRing, sc.BPF_MAP_TYPE_LRU_HASH),
    "tensor_wire": (ctypes.c_uint32, HostWire, sc.BPF_MAP_TYPE_LRU_HASH),
    "counters": (ctypes.c_uint32, ctypes.c_uint64, sc.BPF_MAP_TYPE_PERCPU_ARRAY),
})


class HostMaps(MapSet):
    """All maps of one host's data path, as attributes named like the maps
    (``.flow_isn``, ``.flow_rings``, ``.sendmsg_rings``, ``.tensor_wire``, ``.counters``). Open with
    ``HostMaps(pin_dir)`` (from pins, any process, no bcc) or
    ``HostMaps.from_fds({name: fd})``."""

    SPECS = HOST_MAP_SPECS
    MISSING_HINT = (": no TaLB host program is pinned there, or one of an older build "
                    "(`talb testbed up` attaches it to every host; `talb testbed down` "
                    "first for a testbed built before)")

    def read_counters(self) -> dict[str, int]:
        """{counter name: packets}, summed over CPUs."""
        return {name: self.counters.get(i, 0) for i, name in enumerate(HOST_COUNTER_NAMES)
                if not name.startswith("reserved_")}

    def wire_times(self, tensor_ids) -> dict[int, HostWire]:
        """{tensor_id: HostWire} for those of ``tensor_ids`` the host has an
        entry for (one lookup each: a run asks for its own tensors, never
        for the whole map). An entry may be an older tensor of the same id
        (ids come back after ~17.5 min): callers check its times against
        the tensor's own (workload.measure.join_tensors does)."""
        out = {}
        for tid in tensor_ids:
            w = self.tensor_wire.get(tid)
            if w is not None:
                out[tid] = w
        return out
