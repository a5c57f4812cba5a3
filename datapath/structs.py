"""ctypes mirrors of ``bpf/include/talb/structs.h``: the switch data path's
keys and values as user space reads and writes them.

Their sizes come from the constants of constants.h (common/c_constants.py);
datapath/maps.py opens a pinned map only when the kernel's key and value
sizes equal these mirrors'. ``FwdGroup.of``, ``TensorKey.of``, ``FlowKey.of``
and ``IPv4Key.of`` build keys and values from plain values.
"""
from __future__ import annotations

import ctypes
import ipaddress

from common.c_constants import (MAX_BANDS, TALB_DRILL_MAX_M, TALB_MAX_GROUP_PORTS, TALB_MAX_PORTS,
                                TALB_NR_LAYERS, TALB_PCM_ONE, TALB_SCHED_MAX)

__all__ = [
    "PortInfo", "PortSlot", "RouteSlot", "PortStats", "FwdGroup", "TalbConfig", "IPv4Key", "TensorKey", "TensorEntry", "TensorEgress",
    "GroupState", "FlowKey", "Flowlet", "PortRate", "PortQueue", "DrillMem", "TalbScratch",
    "CongaDre", "CongaMetric",
]


# Naming rule: a ctypes mirror is its C struct's name in CamelCase (struct
# tensor_key -> TensorKey, struct host_flow_key -> datapath.host_maps.HostFlowKey)
# and no other class takes that name: a Python model of a data-path struct is
# named Model... (datapath.schemes.drill.ModelPortQueue), a plain value for where
# it lives (common.wire.WireTensorKey). A map key that is a bare C integer is
# named for what it holds (IPv4Key).
class PortInfo(ctypes.Structure):
    _fields_ = [("port_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class PortSlot(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("port_id", ctypes.c_uint16),
                ("flags", ctypes.c_uint16)]


class RouteSlot(ctypes.Structure):
    """route_slots value (talb/structs.h struct route_slot): ``daddr`` as on
    the wire (the address's bytes read as a little-endian u32 here)."""

    _fields_ = [("daddr", ctypes.c_uint32), ("group_id", ctypes.c_uint16),
                ("flags", ctypes.c_uint16)]


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
    the same key as common.wire.WireTensorKey, the form every tool uses."""

    _fields_ = [("saddr", ctypes.c_uint32), ("tensor_id", ctypes.c_uint32)]

    @classmethod
    def of(cls, src, tensor_id: int) -> "TensorKey":
        return cls(int(ipaddress.IPv4Address(src)), tensor_id)

    @property
    def src(self) -> str:
        return str(ipaddress.IPv4Address(self.saddr))

    def as_tuple(self) -> tuple[str, int]:
        """``(src, tensor_id)``: equal to common.wire.WireTensorKey of the same tensor."""
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


class TensorEgress(ctypes.Structure):
    """The ports one tagged tensor left a switch by into the fabric: mirror
    of struct tensor_egress (bpf/include/talb/tensor_egress.h). Times are
    CLOCK_MONOTONIC ns (``time.monotonic_ns``'s clock)."""

    _fields_ = [
        ("first_ns", ctypes.c_uint64),
        ("latest_ns", ctypes.c_uint64),
        ("port_mask", ctypes.c_uint64),
        ("packets", ctypes.c_uint32),
        ("first_port", ctypes.c_uint16),
        ("pad", ctypes.c_uint16),
    ]

    @property
    def port_ids(self) -> list[int]:
        """The port ids it left by, lowest first."""
        return [i for i in range(TALB_MAX_PORTS) if self.port_mask >> i & 1]

    @property
    def split(self) -> bool:
        return len(self.port_ids) > 1


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
        ("presto_cell_bytes", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32 * 2),
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
    is the key of the Python models (datapath/schemes/letflow.py)."""

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


class EcnPort(ctypes.Structure):
    """A port's ECN marking setup (struct ecn_port; user space writes):
    link rate, K, one band's limit, the shaper's burst, the installed
    bands' weights (0: no such band)."""

    _fields_ = [("bytes_per_s", ctypes.c_uint64), ("k_bytes", ctypes.c_uint32),
                ("limit_bytes", ctypes.c_uint32), ("burst_bytes", ctypes.c_uint32),
                ("weight", ctypes.c_uint8 * MAX_BANDS), ("pad", ctypes.c_uint32)]


class EcnQueue(ctypes.Structure):
    """The data path's phantom queue of a port (struct ecn_queue): each
    band's bytes and the bucket's credit at last_ns."""

    _fields_ = [("last_ns", ctypes.c_uint64), ("credit", ctypes.c_uint64),
                ("bytes", ctypes.c_uint32 * MAX_BANDS)]


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
