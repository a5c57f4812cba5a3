"""The kernel-side tagger of unmodified processes (bpf/host_sendmsg.c):
compile, attach, configure, count, detach.

    with SendmsgTagger() as t:                       # compile + attach
        t.add_host(netns_inode, host_pin_dir, worker=3,
                   selector=Selector(ports=(5001, 5001)), rule=parse_priority("size:64K,1M"))
        ...
        t.counters()                                 # {"started": ..., "continued": ...}
        t.max_tick()                                 # largest Snowflake tick any CPU used
    # closed: detached, and the hosts' sendmsg_rings emptied (remove_host)

Knows only plain values: netns inodes, pin directories, worker numbers,
selectors. The testbed-aware part is workload/transparent_tag.py.

Also here, in one place: the priority rule's text (:func:`parse_priority`)
and a Python model of the in-kernel id generator (:class:`KernelIdModel`,
tests/test_transparent_tag.py checks its uniqueness).
"""
from __future__ import annotations

import ctypes
import math
import os
import platform
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from common.c_constants import constant, counter_names, parse_constants
from common.excerpt import shown
from common.paths import BPF_SRC_DIR
from datapath import bpf_syscall as sc
from datapath.btf import offset_of
from datapath.program import INCLUDE_DIR, expand_source

__all__ = ["SendmsgTagger", "Selector", "PriorityRule", "parse_priority", "KernelIdModel",
           "SENDMSG_COUNTER_NAMES", "DEFAULT_PRIORITY", "cpu_bits", "SendmsgHostCfg",
           "syscall_numbers", "SYSCALLS"]

SENDMSG_SRC = Path(BPF_SRC_DIR) / "host_sendmsg.c"
SENDMSG_CONSTANTS_H = Path(BPF_SRC_DIR) / "include" / "talb" / "sendmsg_constants.h"
SENDMSG_CONST = MappingProxyType(parse_constants(SENDMSG_CONSTANTS_H))


def _sendmsg_constant(name: str) -> int:
    """An integer #define of the sendmsg tagger's header (SENDMSG_CONSTANTS_H)."""
    return constant(SENDMSG_CONST, name, SENDMSG_CONSTANTS_H)


SENDMSG_RULE_MAX = _sendmsg_constant("SENDMSG_RULE_MAX")
SENDMSG_MAX_PKTS = _sendmsg_constant("SENDMSG_MAX_PKTS")
SENDMSG_NR_COUNTERS = _sendmsg_constant("SENDMSG_NR_COUNTERS")
SEL_CGROUP = _sendmsg_constant("SENDMSG_SEL_CGROUP")
SEL_PID = _sendmsg_constant("SENDMSG_SEL_PID")
SEL_PORTS = _sendmsg_constant("SENDMSG_SEL_PORTS")
RULE_SIZE = _sendmsg_constant("SENDMSG_RULE_SIZE")
RULE_PORT = _sendmsg_constant("SENDMSG_RULE_PORT")
RULE_BURST = _sendmsg_constant("SENDMSG_RULE_BURST")
TS_BITS = _sendmsg_constant("SENDMSG_TS_BITS")
SEQ_BITS = _sendmsg_constant("SENDMSG_SEQ_BITS")
WORKER_BITS = _sendmsg_constant("SENDMSG_WORKER_BITS")
UNIT_NS = _sendmsg_constant("SENDMSG_UNIT_NS")
#: counter index -> name ("writes_seen", "started", "continued", ...)
SENDMSG_COUNTER_NAMES = counter_names(SENDMSG_CONST, "SENDMSG_CNT_", SENDMSG_NR_COUNTERS,
                                      SENDMSG_CONSTANTS_H,
                                      exclude=frozenset({"SENDMSG_CNT_BITS", "SENDMSG_CNT_MAX"}))

#: Small messages first: the paper gives front layers (small layer numbers,
#: needed first by the next forward pass) the higher priority (section III,
#: "tensor layers" and the priority of CASE 1; docs/talb-decisions.md
#: "Priority bands"); without knowing the model, a short message (control,
#: a small gradient, a latency-bound all-reduce step) is the one a rank waits
#: on, so size classes put it in front.
DEFAULT_PRIORITY = "size:64K,1M"
BURST_CAP = 7   # burst: the 8th and later writes of a burst share layer 7

# ---- structs (mirrors of bpf/include/talb/sendmsg_structs.h) ----------------


class SendmsgHostCfg(ctypes.Structure):
    _fields_ = [
        ("cgroup_id", ctypes.c_uint64),
        ("burst_gap_ns", ctypes.c_uint64),
        ("tgid", ctypes.c_uint32),
        ("cgroup_level", ctypes.c_uint32),
        ("port_lo", ctypes.c_uint16),
        ("port_hi", ctypes.c_uint16),
        ("worker", ctypes.c_uint8),
        ("selector", ctypes.c_uint8),
        ("rule", ctypes.c_uint8),
        ("n_rule", ctypes.c_uint8),
        ("rule_val", ctypes.c_uint32 * SENDMSG_RULE_MAX),
        ("rule_layer", ctypes.c_uint8 * SENDMSG_RULE_MAX),
        ("default_layer", ctypes.c_uint8),
        ("reserved", ctypes.c_uint8 * 7),
    ]


class SendmsgIdgen(ctypes.Structure):
    _fields_ = [("last_tick", ctypes.c_uint64), ("seq", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


assert ctypes.sizeof(SendmsgHostCfg) == 80 and ctypes.sizeof(SendmsgIdgen) == 16


# ---- priority rules ------------------------------------------------------------
@dataclass(frozen=True)
class PriorityRule:
    """A parsed priority rule; ``text`` is its canonical form (results files)."""

    kind: int
    values: tuple[int, ...] = ()
    layers: tuple[int, ...] = ()
    default_layer: int = 0
    gap_ns: int = 0
    text: str = ""

    def layer(self, size: int, dport: int, burst_idx: int = 0) -> int:
        """The layer the kernel gives a write (the model of sendmsg_rule.h)."""
        if self.kind == RULE_SIZE:
            return next((i for i, v in enumerate(self.values) if size <= v), len(self.values))
        if self.kind == RULE_PORT:
            return next((lay for v, lay in zip(self.values, self.layers) if v == dport),
                        self.default_layer)
        return min(burst_idx, self.default_layer)


_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_TIME_UNITS = {"ns": 1, "us": 1000, "ms": 1_000_000, "s": 1_000_000_000}


def _bad(text: str, why: str) -> ValueError:
    return ValueError(f"--priority: {why}; rules are size:64K,1M (size classes, the default), "
                      f"port:5001=0,5002=3 (destination port -> layer), burst:200us (order within "
                      f"a burst of writes), got {shown(text)}")


def parse_priority(text: str | None) -> PriorityRule:
    """``size:A,B,...`` (layer = index of the first class the write fits,
    ascending sizes with K/M/G suffixes; larger writes the next layer),
    ``port:P=L,...`` (destination port P -> layer L; other ports get one
    layer after the largest listed: unlisted traffic never jumps ahead of
    listed traffic), ``burst:GAP`` (writes of a socket closer than GAP, ns/us/ms/s,
    to the previous one's end: layer 0, 1, 2, ... capped at BURST_CAP).
    None: :data:`DEFAULT_PRIORITY`."""
    text = DEFAULT_PRIORITY if text is None else text
    kind, sep, body = text.strip().partition(":")
    kind = kind.strip().lower()
    if not sep or not body.strip():
        raise _bad(text, "expected KIND:VALUES")
    items = [x.strip() for x in body.split(",")]
    if kind == "size":
        vals = []
        for it in items:
            m = re.fullmatch(r"(\d+)\s*([KMGB]?)", it, re.I)
            if not m:
                raise _bad(text, f"size {it!r} is not a number with K/M/G")
            vals.append(int(m[1]) * _SIZE_UNITS[m[2].upper()])
        if len(vals) > SENDMSG_RULE_MAX or vals != sorted(set(vals)) or vals[-1] >= 1 << 32 or vals[0] < 1:
            raise _bad(text, f"sizes must be ascending, distinct, 1 B..4 GB, at most {SENDMSG_RULE_MAX}")
        canon = ",".join(_fmt_size(v) for v in vals)
        return PriorityRule(RULE_SIZE, tuple(vals), text=f"size:{canon}")
    if kind == "port":
        ports, layers = [], []
        for it in items:
            m = re.fullmatch(r"(\d+)\s*=\s*(\d+)", it)
            if not m or not 1 <= int(m[1]) <= 65535 or int(m[2]) > 254:
                raise _bad(text, f"{it!r} is not PORT=LAYER (port 1..65535, layer 0..254)")
            if int(m[1]) in ports:
                raise _bad(text, f"port {m[1]} listed twice")
            ports.append(int(m[1]))
            layers.append(int(m[2]))
        if len(ports) > SENDMSG_RULE_MAX:
            raise _bad(text, f"at most {SENDMSG_RULE_MAX} ports")
        canon = ",".join(f"{p}={lay}" for p, lay in zip(ports, layers))
        return PriorityRule(RULE_PORT, tuple(ports), tuple(layers), max(layers) + 1,
                            text=f"port:{canon} (others {max(layers) + 1})")
    if kind == "burst":
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ns|us|ms|s)", body.strip())
        if not m or float(m[1]) <= 0:
            raise _bad(text, "the gap must be a positive time with ns/us/ms/s")
        gap = int(float(m[1]) * _TIME_UNITS[m[2]])
        return PriorityRule(RULE_BURST, default_layer=BURST_CAP, gap_ns=gap,
                            text=f"burst:{m[1]}{m[2]} (cap {BURST_CAP})")
    raise _bad(text, f"unknown rule kind {kind!r}")


def _fmt_size(v: int) -> str:
    for unit in ("G", "M", "K"):
        if v % _SIZE_UNITS[unit] == 0:
            return f"{v // _SIZE_UNITS[unit]}{unit}"
    return str(v)


# ---- selectors ----------------------------------------------------------------
@dataclass(frozen=True)
class Selector:
    """Which writes of a host to tag: exactly one of ``cgroup_id`` (with its
    ``cgroup_level``), ``tgid``, ``ports`` (inclusive, sport or dport)."""

    cgroup_id: int | None = None
    cgroup_level: int = 0
    tgid: int | None = None
    ports: tuple[int, int] | None = None

    def fill(self, cfg: SendmsgHostCfg) -> None:
        if self.cgroup_id is not None:
            cfg.selector, cfg.cgroup_id, cfg.cgroup_level = SEL_CGROUP, self.cgroup_id, self.cgroup_level
        elif self.tgid is not None:
            cfg.selector, cfg.tgid = SEL_PID, self.tgid
        elif self.ports is not None:
            cfg.selector, (cfg.port_lo, cfg.port_hi) = SEL_PORTS, self.ports
        else:
            raise ValueError("Selector: one of cgroup_id, tgid, ports")


def cpu_bits(ncpus: int | None = None) -> int:
    """ceil(log2(possible CPUs)): the sequence's high bits that name the CPU."""
    if ncpus is None:
        from common.bcc_bindings import import_bcc

        ncpus = max(import_bcc().utils.get_possible_cpus()) + 1
    return max(0, math.ceil(math.log2(ncpus))) if ncpus > 1 else 0


# ---- the id generator, modelled -----------------------------------------------
@dataclass
class KernelIdModel:
    """The per-CPU Snowflake generator of bpf/include/talb/sendmsg_ids.h, in
    Python: ``next_id(cpu, now_ns)`` is what the CPU makes for a write at
    clock ``now_ns``."""

    worker: int
    ncpus: int
    last_tick: dict[int, int] = field(default_factory=dict)
    seq: dict[int, int] = field(default_factory=dict)

    def next_id(self, cpu: int, now_ns: int) -> int:
        bits = cpu_bits(self.ncpus)
        cnt_max = (1 << (SEQ_BITS - bits)) - 1
        tick = now_ns // UNIT_NS
        last = self.last_tick.get(cpu, 0)
        if tick > last:
            last, s = tick, 0
        elif self.seq.get(cpu, 0) < cnt_max:
            s = self.seq.get(cpu, 0) + 1
        else:
            last, s = last + 1, 0
        self.last_tick[cpu], self.seq[cpu] = last, s
        seq = ((cpu & ((1 << bits) - 1)) << (SEQ_BITS - bits)) | s
        return ((((last & ((1 << TS_BITS) - 1)) << SEQ_BITS) | seq) << WORKER_BITS) | \
            (self.worker & ((1 << WORKER_BITS) - 1))

    def max_tick(self) -> int:
        return max(self.last_tick.values(), default=0)


# ---- the program ----------------------------------------------------------------
#: Per machine (platform.machine()): the pt_regs field holding the system
#: call number at sys_exit, and the numbers of write, writev, sendto, sendmsg
#: (arch/x86/entry/syscalls/syscall_64.tbl; aarch64 has the generic table,
#: include/uapi/asm-generic/unistd.h, and keeps the number in the s32
#: syscallno).
SYSCALLS = MappingProxyType({
    "x86_64": ("orig_ax", {"WRITE": 1, "WRITEV": 20, "SENDTO": 44, "SENDMSG": 46}),
    "aarch64": ("syscallno", {"WRITE": 64, "WRITEV": 66, "SENDTO": 206, "SENDMSG": 211}),
})
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def syscall_numbers(machine: str | None = None) -> tuple[str, dict[str, int]]:
    """(pt_regs field of the system call number, {"WRITE": nr, ...}) of
    ``machine`` (default: this one); ValueError naming it on any other."""
    m = platform.machine() if machine is None else machine
    m = _MACHINE_ALIASES.get(m.lower(), m.lower())
    if m not in SYSCALLS:
        raise ValueError(f"transparent tagging: the system call numbers of write/writev/sendto/"
                         f"sendmsg are known for {', '.join(SYSCALLS)} only, not for this "
                         f"machine's architecture {machine if machine is not None else platform.machine()!r}")
    field_, nrs = SYSCALLS[m]
    return field_, dict(nrs)


def _syscall_flags(machine: str | None = None) -> list[str]:
    """-D flags: NR_WRITE, ... and REGS_OFF_NR of the running kernel."""
    field_, nrs = syscall_numbers(machine)
    return [f"-DNR_{name}={nr}" for name, nr in nrs.items()] + \
        [f"-DREGS_OFF_NR={offset_of('pt_regs', field_)}"]


def _offsets() -> list[str]:
    """-D flags: the socket fields' offsets in the running kernel (BTF)."""
    fields = {
        "SK_OFF_NET": ("sock", "__sk_common.skc_net"),
        "SK_OFF_DADDR": ("sock", "__sk_common.skc_daddr"),
        "SK_OFF_RCV_SADDR": ("sock", "__sk_common.skc_rcv_saddr"),
        "SK_OFF_DPORT": ("sock", "__sk_common.skc_dport"),
        "SK_OFF_NUM": ("sock", "__sk_common.skc_num"),
        "SK_OFF_FAMILY": ("sock", "__sk_common.skc_family"),
        "SK_OFF_STATE": ("sock", "__sk_common.skc_state"),
        "NET_OFF_INUM": ("net", "ns.inum"),
        "TP_OFF_WRITE_SEQ": ("tcp_sock", "write_seq"),
        "TP_OFF_SND_UNA": ("tcp_sock", "snd_una"),
        "TP_OFF_SND_NXT": ("tcp_sock", "snd_nxt"),
        "TP_OFF_MSS_CACHE": ("tcp_sock", "mss_cache"),
        "MSG_OFF_ITER": ("msghdr", "msg_iter"),
        "ITER_OFF_COUNT": ("iov_iter", "count"),
    }
    return [f"-D{name}={offset_of(s, p)}" for name, (s, p) in fields.items()]


class SendmsgTagger:
    """One loaded, attached tracing program for any number of hosts
    (raw tracepoints tcp_sendmsg_locked, sys_exit, inet_sock_set_state:
    bpf/host_sendmsg.c says why not fentry or kprobes)."""

    def __init__(self):
        from common.bcc_bindings import import_bcc

        BPF = import_bcc().BPF

        self.bpf = None
        self.hosts: dict[int, Path] = {}
        sys_flags = _syscall_flags()    # before the compile: a clear error on other machines
        flags = [f"-I{INCLUDE_DIR}", f"-DSENDMSG_CPU_BITS={cpu_bits()}", *_offsets(), *sys_flags]
        try:
            self.bpf = BPF(text=expand_source(SENDMSG_SRC).encode(), cflags=flags)
        except Exception as exc:
            raise RuntimeError(f"loading {SENDMSG_SRC}: {exc}") from exc

    def _fd(self, name: str) -> int:
        return self.bpf[name.encode()].map_fd

    def add_host(self, netns_inode: int, pin_dir: str | os.PathLike, *, worker: int,
                 selector: Selector, rule: PriorityRule) -> None:
        """Tag the writes ``selector`` picks on the host whose netns has
        ``netns_inode``, into its maps pinned at ``pin_dir``."""
        pin_dir = Path(pin_dir)
        for name, outer in (("sendmsg_rings", "seq_rings_of"), ("flow_rings", "lib_rings_of")):
            try:
                fd = sc.obj_get(pin_dir / name)
            except OSError as exc:
                raise RuntimeError(f"{pin_dir / name}: {exc.strerror}: the host program there is "
                                   "of an older build (`talb testbed down` and up again)") from exc
            try:
                sc.map_update(self._fd(outer), struct.pack("I", netns_inode), struct.pack("I", fd))
            except OSError as exc:
                raise RuntimeError(f"{pin_dir / name}: not the shape this tagger expects "
                                   f"({exc}): the host program is of another build") from exc
            finally:
                os.close(fd)
        cfg = SendmsgHostCfg()
        cfg.worker = worker
        selector.fill(cfg)
        cfg.rule = rule.kind
        cfg.n_rule = len(rule.values)
        for i, v in enumerate(rule.values):
            cfg.rule_val[i] = v
        for i, v in enumerate(rule.layers):
            cfg.rule_layer[i] = v
        cfg.default_layer = rule.default_layer
        cfg.burst_gap_ns = rule.gap_ns
        sc.map_update(self._fd("sendmsg_hosts"), struct.pack("I", netns_inode), bytes(cfg))
        self.hosts[netns_inode] = pin_dir

    def remove_host(self, netns_inode: int) -> None:
        """Stop tagging there, and drop every ring this tagger left in the
        host's sendmsg_rings (the sockets' state goes with the program)."""
        sc.map_delete(self._fd("sendmsg_hosts"), struct.pack("I", netns_inode))
        for outer in ("seq_rings_of", "lib_rings_of"):
            sc.map_delete(self._fd(outer), struct.pack("I", netns_inode))
        pin_dir = self.hosts.pop(netns_inode, None)
        if pin_dir is not None:
            from datapath.host_maps import HostMaps

            try:
                with HostMaps(pin_dir) as maps:
                    maps.sendmsg_rings.clear()
            except (OSError, RuntimeError):
                pass  # the host is gone

    def counters(self) -> dict[str, int]:
        t = self.bpf[b"sendmsg_counters"]
        return {name: int(t.sum(ctypes.c_int(i)).value) for i, name in enumerate(SENDMSG_COUNTER_NAMES)
                if not name.startswith("reserved_")}

    def max_tick(self) -> int:
        """The largest Snowflake tick (ms of CLOCK_MONOTONIC) any CPU used."""
        vals = self.bpf[b"sendmsg_ids"][ctypes.c_int(0)]
        return max((int(v.last_tick) for v in vals), default=0)

    def close(self) -> None:
        for inode in list(self.hosts):
            self.remove_host(inode)
        if self.bpf is not None:
            self.bpf.cleanup()   # detaches
            self.bpf = None

    def __enter__(self) -> "SendmsgTagger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


