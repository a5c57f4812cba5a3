"""The ``bpf()`` system call through ctypes.

bcc 0.26's libbcc has no wrapper for BPF_PROG_TEST_RUN and the agent must
work from pinned maps without bcc, so the few commands the project needs are
issued here directly: pin/get objects, map creation and element operations,
program loads (each node's copy of a program compiled once:
datapath/compiled.py), object info and test runs. Layouts follow
``union bpf_attr`` in include/uapi/linux/bpf.h; each command only uses its
own member, zero-padded to the size the kernel checks (it rejects non-zero
bytes past the fields it knows).

Every failure raises ``OSError(errno, "<operation> <detail>: <strerror>")``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import os
import platform

__all__ = [
    "BPF_MAP_TYPE_HASH", "BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_PERCPU_HASH",
    "BPF_MAP_TYPE_PERCPU_ARRAY", "BPF_MAP_TYPE_NAMES", "BPF_ANY", "BPF_NOEXIST",
    "BPF_EXIST", "MapInfo", "SkBuff", "map_create", "obj_pin", "obj_get",
    "map_lookup", "map_update", "map_delete", "map_get_next_key",
    "obj_get_info_by_fd", "map_info", "ProgInfo", "prog_info", "prog_test_run", "close",
    "prog_load", "BPF_PROG_TYPE_SCHED_CLS", "VERIFIER_INSN_LIMIT", "PreparedCall", "MapBatch",
    "BPF_PROG_TYPE_XDP", "XdpMd", "BPF_F_TEST_XDP_LIVE_FRAMES", "XDP_ABORTED", "XDP_DROP",
    "XDP_PASS", "XDP_TX", "XDP_REDIRECT", "prog_get_fd_by_id", "prog_verify", "VerifierStats",
    "BPF_LOG_LEVEL2", "BPF_LOG_STATS", "BPF_PROG_TYPE_RAW_TRACEPOINT",
]

# --- commands (enum bpf_cmd) ---------------------------------------------
BPF_MAP_CREATE = 0
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_PROG_LOAD = 5
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_LOOKUP_BATCH = 24
BPF_MAP_UPDATE_BATCH = 26

# --- map types (enum bpf_map_type), the ones the project uses -------------
BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PROG_ARRAY = 3
BPF_MAP_TYPE_PERCPU_HASH = 5
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_LRU_HASH = 9
BPF_MAP_TYPE_LRU_PERCPU_HASH = 10
BPF_MAP_TYPE_DEVMAP = 14
BPF_MAP_TYPE_DEVMAP_HASH = 25
BPF_MAP_TYPE_NAMES = {
    BPF_MAP_TYPE_HASH: "hash",
    BPF_MAP_TYPE_ARRAY: "array",
    BPF_MAP_TYPE_PROG_ARRAY: "prog_array",
    BPF_MAP_TYPE_PERCPU_HASH: "percpu_hash",
    BPF_MAP_TYPE_PERCPU_ARRAY: "percpu_array",
    BPF_MAP_TYPE_LRU_HASH: "lru_hash",
    BPF_MAP_TYPE_LRU_PERCPU_HASH: "lru_percpu_hash",
    BPF_MAP_TYPE_DEVMAP: "devmap",
    BPF_MAP_TYPE_DEVMAP_HASH: "devmap_hash",
}
PERCPU_MAP_TYPES = frozenset(
    {BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH}
)

# --- program types (enum bpf_prog_type) -------------------------------------
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PROG_TYPE_XDP = 6
BPF_PROG_TYPE_RAW_TRACEPOINT = 17

# --- XDP (enum xdp_action; BPF_PROG_TEST_RUN flags) ---------------------------
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
#: test run of an XDP program on "live" frames: XDP_REDIRECT and XDP_TX are
#: executed (Linux 5.18); no data out, no ctx out
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1

# --- update flags ----------------------------------------------------------
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

BPF_OBJ_NAME_LEN = 16
BPF_TAG_SIZE = 8
#: BPF_COMPLEXITY_LIMIT_INSNS (kernel/bpf/verifier.c): instructions the
#: verifier may process for one program (all paths, all subprograms)
VERIFIER_INSN_LIMIT = 1_000_000
# sizeof(union bpf_attr) grows with kernels; the kernel accepts any size up
# to a page as long as bytes it does not know are zero.
_ATTR_SIZE = 128

_NR_BPF = {
    "x86_64": 321,
    "aarch64": 280,
    "arm64": 280,
    "riscv64": 280,
    "i386": 357,
    "i686": 357,
    "armv7l": 386,
    "ppc64le": 361,
    "s390x": 351,
}


def _syscall_nr() -> int:
    m = platform.machine()
    if m not in _NR_BPF:
        raise OSError(_errno.ENOSYS, f"bpf(): unknown syscall number for machine {m!r}")
    return _NR_BPF[m]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long
_NR = None


# --- union bpf_attr members -------------------------------------------------
class _MapCreateAttr(ctypes.Structure):
    _fields_ = [
        ("map_type", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("inner_map_fd", ctypes.c_uint32),
        ("numa_node", ctypes.c_uint32),
        ("map_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _MapElemAttr(ctypes.Structure):
    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("_pad0", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),  # or next_key
        ("flags", ctypes.c_uint64),
    ]


class _MapBatchAttr(ctypes.Structure):
    """``batch`` member (BPF_MAP_*_BATCH)."""

    _fields_ = [
        ("in_batch", ctypes.c_uint64),
        ("out_batch", ctypes.c_uint64),
        ("keys", ctypes.c_uint64),
        ("values", ctypes.c_uint64),
        ("count", ctypes.c_uint32),
        ("map_fd", ctypes.c_uint32),
        ("elem_flags", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


class _ProgLoadAttr(ctypes.Structure):
    """The BPF_PROG_LOAD member up to ``prog_name`` (no BTF, no attach type)."""

    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


class _ObjAttr(ctypes.Structure):
    _fields_ = [
        ("pathname", ctypes.c_uint64),
        ("bpf_fd", ctypes.c_uint32),
        ("file_flags", ctypes.c_uint32),
    ]


class _TestRunAttr(ctypes.Structure):
    _fields_ = [
        ("prog_fd", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("data_in", ctypes.c_uint64),
        ("data_out", ctypes.c_uint64),
        ("repeat", ctypes.c_uint32),
        ("duration", ctypes.c_uint32),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_uint64),
        ("ctx_out", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    ]


class _InfoAttr(ctypes.Structure):
    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    ]


class _BpfMapInfo(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("btf_vmlinux_value_type_id", ctypes.c_uint32),
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("btf_key_type_id", ctypes.c_uint32),
        ("btf_value_type_id", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
        ("map_extra", ctypes.c_uint64),
    ]


class _BpfProgInfo(ctypes.Structure):
    """``struct bpf_prog_info`` up to ``attach_btf_id`` (6.x uapi). Every
    pointer member stays 0: the kernel then fills in only the scalars."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * BPF_TAG_SIZE),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
        ("ifindex", ctypes.c_uint32),
        ("gpl_compatible", ctypes.c_uint32),  # bit 0; the rest padding
        ("netns_dev", ctypes.c_uint64),
        ("netns_ino", ctypes.c_uint64),
        ("nr_jited_ksyms", ctypes.c_uint32),
        ("nr_jited_func_lens", ctypes.c_uint32),
        ("jited_ksyms", ctypes.c_uint64),
        ("jited_func_lens", ctypes.c_uint64),
        ("btf_id", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("nr_func_info", ctypes.c_uint32),
        ("nr_line_info", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("jited_line_info", ctypes.c_uint64),
        ("nr_jited_line_info", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("jited_line_info_rec_size", ctypes.c_uint32),
        ("nr_prog_tags", ctypes.c_uint32),
        ("prog_tags", ctypes.c_uint64),
        ("run_time_ns", ctypes.c_uint64),
        ("run_cnt", ctypes.c_uint64),
        ("recursion_misses", ctypes.c_uint64),
        ("verified_insns", ctypes.c_uint32),
        ("attach_btf_obj_id", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class XdpMd(ctypes.Structure):
    """``struct xdp_md``: the context of an XDP program. As ``ctx`` of a
    test run: ``data`` 0, ``data_end`` the packet's length, ``data_meta``
    and ``egress_ifindex`` 0; ``ingress_ifindex`` (with
    ``rx_queue_index``) names the arrival device, which must exist in the
    caller's network namespace."""

    _fields_ = [
        ("data", ctypes.c_uint32),
        ("data_end", ctypes.c_uint32),
        ("data_meta", ctypes.c_uint32),
        ("ingress_ifindex", ctypes.c_uint32),
        ("rx_queue_index", ctypes.c_uint32),
        ("egress_ifindex", ctypes.c_uint32),
    ]


class SkBuff(ctypes.Structure):
    """``struct __sk_buff`` (uapi, 6.1 layout): the context of a TC program.

    As ``ctx`` of a test run, the kernel reads only mark, priority,
    ingress_ifindex, ifindex, cb, tstamp, wire_len, gso_segs, gso_size and
    hwtstamp (the rest must be 0). ``ifindex`` names the device the packet is
    on (it must exist in the caller's network namespace).
    """

    _fields_ = [
        ("len", ctypes.c_uint32),
        ("pkt_type", ctypes.c_uint32),
        ("mark", ctypes.c_uint32),
        ("queue_mapping", ctypes.c_uint32),
        ("protocol", ctypes.c_uint32),
        ("vlan_present", ctypes.c_uint32),
        ("vlan_tci", ctypes.c_uint32),
        ("vlan_proto", ctypes.c_uint32),
        ("priority", ctypes.c_uint32),
        ("ingress_ifindex", ctypes.c_uint32),
        ("ifindex", ctypes.c_uint32),
        ("tc_index", ctypes.c_uint32),
        ("cb", ctypes.c_uint32 * 5),
        ("hash", ctypes.c_uint32),
        ("tc_classid", ctypes.c_uint32),
        ("data", ctypes.c_uint32),
        ("data_end", ctypes.c_uint32),
        ("napi_id", ctypes.c_uint32),
        ("family", ctypes.c_uint32),
        ("remote_ip4", ctypes.c_uint32),
        ("local_ip4", ctypes.c_uint32),
        ("remote_ip6", ctypes.c_uint32 * 4),
        ("local_ip6", ctypes.c_uint32 * 4),
        ("remote_port", ctypes.c_uint32),
        ("local_port", ctypes.c_uint32),
        ("data_meta", ctypes.c_uint32),
        ("flow_keys", ctypes.c_uint64),
        ("tstamp", ctypes.c_uint64),
        ("wire_len", ctypes.c_uint32),
        ("gso_segs", ctypes.c_uint32),
        ("sk", ctypes.c_uint64),
        ("gso_size", ctypes.c_uint32),
        ("tstamp_type", ctypes.c_uint8),
        ("_pad", ctypes.c_uint8 * 3),
        ("hwtstamp", ctypes.c_uint64),
    ]


assert ctypes.sizeof(SkBuff) == 192, ctypes.sizeof(SkBuff)


class MapInfo:
    """What the kernel says about a map (``struct bpf_map_info``)."""

    __slots__ = ("type", "type_name", "id", "key_size", "value_size", "max_entries",
                 "map_flags", "name")

    def __init__(self, raw: _BpfMapInfo):
        self.type = raw.type
        self.type_name = BPF_MAP_TYPE_NAMES.get(raw.type, f"type{raw.type}")
        self.id = raw.id
        self.key_size = raw.key_size
        self.value_size = raw.value_size
        self.max_entries = raw.max_entries
        self.map_flags = raw.map_flags
        self.name = raw.name.decode(errors="replace")

    @property
    def percpu(self) -> bool:
        return self.type in PERCPU_MAP_TYPES

    def __repr__(self) -> str:
        return (f"MapInfo(name={self.name!r}, type={self.type_name}, id={self.id}, "
                f"key_size={self.key_size}, value_size={self.value_size}, "
                f"max_entries={self.max_entries})")


def _bpf(cmd: int, attr: ctypes.Structure, what: str) -> int:
    global _NR
    if _NR is None:
        _NR = _syscall_nr()
    buf = ctypes.create_string_buffer(_ATTR_SIZE)
    ctypes.memmove(buf, ctypes.addressof(attr), ctypes.sizeof(attr))
    ret = _libc.syscall(_NR, ctypes.c_int(cmd), buf, ctypes.c_uint(_ATTR_SIZE))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    # copy back: some commands write into the attr (test run, info)
    ctypes.memmove(ctypes.addressof(attr), buf, ctypes.sizeof(attr))
    return ret


class _BatchAttrPage(ctypes.Structure):
    """``union bpf_attr``'s batch member, zero-padded to _ATTR_SIZE: passed to
    the kernel as is (no copy per call)."""

    _fields_ = _MapBatchAttr._fields_ + [
        ("_pad", ctypes.c_uint8 * (_ATTR_SIZE - ctypes.sizeof(_MapBatchAttr)))]


class _ElemAttrPage(ctypes.Structure):
    _fields_ = _MapElemAttr._fields_ + [
        ("_pad", ctypes.c_uint8 * (_ATTR_SIZE - ctypes.sizeof(_MapElemAttr)))]


class PreparedCall:
    """One bpf() command whose attr is made once and reused: a call is the
    syscall alone (no attr allocated, copied in or out). The caller changes
    the fields of :attr:`attr` between calls; the kernel's write-backs
    (a batch's ``count``) land in it directly.

    For loops that issue the same command every few milliseconds (the
    agent's window); :func:`_bpf` is the general path."""

    def __init__(self, cmd: int, attr: ctypes.Structure, what: str):
        global _NR
        if _NR is None:
            _NR = _syscall_nr()
        if ctypes.sizeof(attr) != _ATTR_SIZE:
            raise ValueError(f"{what}: attr of {ctypes.sizeof(attr)} bytes, not {_ATTR_SIZE}")
        self.attr, self.what = attr, what
        self._args = (ctypes.c_long(_NR), ctypes.c_int(cmd), ctypes.byref(attr),
                      ctypes.c_uint(_ATTR_SIZE))

    def __call__(self) -> int:
        ret = _libc.syscall(*self._args)
        if ret < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{self.what}: {os.strerror(err)}")
        return ret

    def try_call(self) -> int:
        """The call; a failure returns ``-errno`` instead of raising."""
        ret = _libc.syscall(*self._args)
        return -ctypes.get_errno() if ret < 0 else ret


class MapBatch:
    """BPF_MAP_LOOKUP_BATCH / BPF_MAP_UPDATE_BATCH on one map with key and
    value buffers made once, for up to ``capacity`` entries (kernel >= 5.6;
    arrays and hashes). Per-CPU maps: ``value_size`` is the whole per-CPU
    value (round8(size) * possible CPUs).

    :meth:`lookup` reads from the start of the map into :attr:`keys` /
    :attr:`values` and returns the count; :meth:`update` writes the first
    ``count`` entries of the buffers (the caller fills them) in one call,
    each element replaced atomically as by BPF_MAP_UPDATE_ELEM."""

    def __init__(self, fd: int, key_size: int, value_size: int, capacity: int,
                 name: str = ""):
        if capacity <= 0:
            raise ValueError(f"MapBatch {name}: capacity must be > 0, got {capacity}")
        self.fd, self.key_size, self.value_size = fd, key_size, value_size
        self.capacity, self.name = capacity, name or f"fd={fd}"
        self.keys = ctypes.create_string_buffer(key_size * capacity)
        self.values = ctypes.create_string_buffer(value_size * capacity)
        self._out_batch = ctypes.create_string_buffer(max(8, key_size))
        self._lookup_attr = _BatchAttrPage(out_batch=_ptr(self._out_batch), keys=_ptr(self.keys),
                                           values=_ptr(self.values), map_fd=fd)
        self._update_attr = _BatchAttrPage(keys=_ptr(self.keys), values=_ptr(self.values),
                                           map_fd=fd)
        self._lookup = PreparedCall(BPF_MAP_LOOKUP_BATCH, self._lookup_attr,
                                    f"BPF_MAP_LOOKUP_BATCH {self.name}")
        self._update = PreparedCall(BPF_MAP_UPDATE_BATCH, self._update_attr,
                                    f"BPF_MAP_UPDATE_BATCH {self.name}")

    def lookup(self, count: int | None = None) -> int:
        """Read up to ``count`` (default: capacity) entries from the start of
        the map; the number read. A hash map with more entries than fit
        raises ENOSPC."""
        a = self._lookup_attr
        a.in_batch = 0
        a.count = self.capacity if count is None else count
        ret = self._lookup.try_call()
        # ENOENT: the batch reached the end of the map; the entries before it are valid.
        if ret < 0 and ret != -_errno.ENOENT:
            raise OSError(-ret, f"BPF_MAP_LOOKUP_BATCH {self.name}: {os.strerror(-ret)}")
        return a.count

    def update(self, count: int, flags: int = BPF_ANY) -> None:
        """Write the first ``count`` (key, value) pairs of the buffers."""
        if not 0 < count <= self.capacity:
            raise ValueError(f"BPF_MAP_UPDATE_BATCH {self.name}: count {count} not in "
                             f"1..{self.capacity}")
        a = self._update_attr
        a.count, a.elem_flags = count, flags
        ret = self._update.try_call()
        if ret < 0:
            done = a.count  # the kernel reports how many it wrote before failing
            raise OSError(-ret, f"BPF_MAP_UPDATE_BATCH {self.name} ({done} of {count} "
                                f"written): {os.strerror(-ret)}")


def _ptr(buf) -> int:
    return ctypes.addressof(buf) if buf is not None else 0


def _as_buffer(data, size: int | None, what: str):
    """bytes / bytearray / ctypes object -> a ctypes buffer of ``size`` bytes."""
    raw = bytes(data)  # bytes, bytearray, memoryview or any ctypes object
    if size is not None and len(raw) != size:
        raise ValueError(f"{what}: expected {size} bytes, got {len(raw)}")
    return ctypes.create_string_buffer(raw, len(raw)) if raw else ctypes.create_string_buffer(1)


# --- objects ----------------------------------------------------------------
def map_create(map_type: int, key_size: int, value_size: int, max_entries: int,
               name: str = "", flags: int = 0) -> int:
    """Create a map, return its fd (each node's maps: datapath/compiled.py)."""
    attr = _MapCreateAttr(map_type=map_type, key_size=key_size, value_size=value_size,
                          max_entries=max_entries, map_flags=flags,
                          map_name=name.encode()[:BPF_OBJ_NAME_LEN - 1])
    return _bpf(BPF_MAP_CREATE, attr,
                f"BPF_MAP_CREATE type={map_type} key={key_size} value={value_size} "
                f"max_entries={max_entries}")


#: bytes of verifier log kept for the error of a program that fails to load
#: (the kernel keeps the end of a longer log)
PROG_LOAD_LOG_SIZE = 4 << 20
#: lines of that log the error message quotes (the last ones: where it failed)
PROG_LOAD_LOG_LINES = 30
#: the verifier gives up with EAGAIN when a signal is pending for the loading
#: thread (a child exiting: SIGCHLD); tries before that error is reported
PROG_LOAD_EAGAIN_TRIES = 5


def prog_load(insns: bytes, *, prog_type: int = BPF_PROG_TYPE_SCHED_CLS, license: str = "GPL",
              name: str = "") -> int:
    """Verify and load a program of raw instructions (8 bytes each; map
    references already resolved to fds: ``ld_imm64`` with src_reg
    BPF_PSEUDO_MAP_FD), return its fd. The first try asks for no log (the
    verifier runs fastest so); a failure is loaded again with one, and the
    ``OSError`` names the program and quotes the log's last lines."""
    insns = bytes(insns)
    if not insns or len(insns) % 8:
        raise ValueError(f"prog_load {name or '(unnamed)'}: {len(insns)} bytes of "
                         "instructions, not a positive multiple of 8")
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license.encode())
    what = f"BPF_PROG_LOAD {name or '(unnamed)'} ({len(insns) // 8} insns)"

    def attr(log=None):
        return _ProgLoadAttr(prog_type=prog_type, insn_cnt=len(insns) // 8, insns=_ptr(code),
                             license=_ptr(lic), log_level=1 if log is not None else 0,
                             log_size=len(log) if log is not None else 0, log_buf=_ptr(log),
                             prog_name=name.encode()[:BPF_OBJ_NAME_LEN - 1])
    for attempt in range(PROG_LOAD_EAGAIN_TRIES):
        try:
            return _bpf(BPF_PROG_LOAD, attr(), what)
        except OSError as first:
            if first.errno == _errno.EAGAIN and attempt + 1 < PROG_LOAD_EAGAIN_TRIES:
                continue     # a signal came during verification: again, as libbpf does
            if first.errno in (_errno.EPERM, _errno.ENOMEM):
                raise
            break
    log = ctypes.create_string_buffer(PROG_LOAD_LOG_SIZE)
    for attempt in range(PROG_LOAD_EAGAIN_TRIES):
        try:
            return _bpf(BPF_PROG_LOAD, attr(log), what)  # a flaky first failure
        except OSError as exc:
            if exc.errno == _errno.EAGAIN and attempt + 1 < PROG_LOAD_EAGAIN_TRIES:
                continue
            text = log.value.decode(errors="replace").rstrip()
            tail = "\n".join(text.splitlines()[-PROG_LOAD_LOG_LINES:])
            raise OSError(exc.errno, f"{exc.strerror}; verifier log (last lines):\n{tail}"
                          if tail else exc.strerror) from None
    raise AssertionError("unreachable")


#: BPF_PROG_LOAD log levels (include/linux/bpf_verifier.h BPF_LOG_*): every
#: instruction with its state (2), and the statistics line alone (4)
BPF_LOG_LEVEL2 = 2
BPF_LOG_STATS = 4


class VerifierStats:
    """The verifier's own account of one accepted program: the statistics
    line of its log (``processed N insns (limit L) max_states_per_insn M
    total_states T peak_states P mark_read R``). ``insns`` is what
    ``bpf_prog_info.verified_insns`` reports too; ``peak_states`` the most
    states it kept at once, ``total_states`` all it stored for pruning."""

    __slots__ = ("insns", "max_states_per_insn", "total_states", "peak_states", "mark_read",
                 "verify_us", "log")

    def __init__(self, log: str):
        import re

        m = re.search(r"processed (\d+) insns \(limit \d+\) max_states_per_insn (\d+) "
                      r"total_states (\d+) peak_states (\d+) mark_read (\d+)", log)
        if not m:
            raise ValueError(f"no statistics line in the verifier log: {log[-200:]!r}")
        (self.insns, self.max_states_per_insn, self.total_states, self.peak_states,
         self.mark_read) = (int(x) for x in m.groups())
        t = re.search(r"verification time (\d+) usec", log)
        self.verify_us = int(t.group(1)) if t else None     # the kernel's own clock
        self.log = log

    def __repr__(self) -> str:
        return (f"VerifierStats(insns={self.insns}, total_states={self.total_states}, "
                f"peak_states={self.peak_states}, max_states_per_insn={self.max_states_per_insn})")


def prog_verify(insns: bytes, *, prog_type: int = BPF_PROG_TYPE_SCHED_CLS,
                license: str = "GPL", name: str = "", log_level: int = BPF_LOG_STATS,
                log_size: int = 1 << 16) -> tuple[int, VerifierStats]:
    """Load a program as :func:`prog_load` does, with a verifier log of
    ``log_level`` (statistics only by default): ``(fd, VerifierStats)``.
    For tools (bench/verifier_states.py); the data path loads without a log
    (faster). ``log_level`` BPF_LOG_LEVEL2 | BPF_LOG_STATS logs every
    instruction processed: give it a ``log_size`` of tens of MiB."""
    insns = bytes(insns)
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license.encode())
    log = ctypes.create_string_buffer(log_size)
    what = f"BPF_PROG_LOAD {name or '(unnamed)'} ({len(insns) // 8} insns, log {log_level})"
    attr = _ProgLoadAttr(prog_type=prog_type, insn_cnt=len(insns) // 8, insns=_ptr(code),
                         license=_ptr(lic), log_level=log_level, log_size=log_size,
                         log_buf=_ptr(log), prog_name=name.encode()[:BPF_OBJ_NAME_LEN - 1])
    for attempt in range(PROG_LOAD_EAGAIN_TRIES):
        try:
            fd = _bpf(BPF_PROG_LOAD, attr, what)
            break
        except OSError as exc:
            if exc.errno == _errno.EAGAIN and attempt + 1 < PROG_LOAD_EAGAIN_TRIES:
                continue
            tail = "\n".join(log.value.decode(errors="replace").splitlines()[-PROG_LOAD_LOG_LINES:])
            raise OSError(exc.errno, f"{exc.strerror}; verifier log (last lines):\n{tail}") from None
    return fd, VerifierStats(log.raw.split(b"\0", 1)[0].decode(errors="replace"))


def obj_pin(fd: int, path: str | os.PathLike) -> None:
    """Pin a map or program fd at ``path`` on a bpffs."""
    p = ctypes.create_string_buffer(os.fsencode(path))
    _bpf(BPF_OBJ_PIN, _ObjAttr(pathname=_ptr(p), bpf_fd=fd), f"BPF_OBJ_PIN {path}")


def obj_get(path: str | os.PathLike, flags: int = 0) -> int:
    """Open a pinned object, return a new fd (close it with :func:`close`)."""
    p = ctypes.create_string_buffer(os.fsencode(path))
    return _bpf(BPF_OBJ_GET, _ObjAttr(pathname=_ptr(p), file_flags=flags), f"BPF_OBJ_GET {path}")


def close(fd: int) -> None:
    os.close(fd)


# --- map elements -----------------------------------------------------------
def map_lookup(fd: int, key, value_size: int) -> bytes | None:
    """Value bytes for ``key`` (bytes or ctypes), or None if absent.

    For per-CPU maps ``value_size`` must be the per-CPU size rounded up to 8
    times the number of possible CPUs."""
    k = _as_buffer(key, None, "map_lookup key")
    v = ctypes.create_string_buffer(value_size)
    try:
        _bpf(BPF_MAP_LOOKUP_ELEM, _MapElemAttr(map_fd=fd, key=_ptr(k), value=_ptr(v)),
             f"BPF_MAP_LOOKUP_ELEM fd={fd}")
    except OSError as exc:
        if exc.errno == _errno.ENOENT:
            return None
        raise
    return v.raw


def map_update(fd: int, key, value, flags: int = BPF_ANY) -> None:
    k = _as_buffer(key, None, "map_update key")
    v = _as_buffer(value, None, "map_update value")
    _bpf(BPF_MAP_UPDATE_ELEM,
         _MapElemAttr(map_fd=fd, key=_ptr(k), value=_ptr(v), flags=flags),
         f"BPF_MAP_UPDATE_ELEM fd={fd}")


def map_delete(fd: int, key) -> bool:
    """Delete ``key``; False if it was absent."""
    k = _as_buffer(key, None, "map_delete key")
    try:
        _bpf(BPF_MAP_DELETE_ELEM, _MapElemAttr(map_fd=fd, key=_ptr(k)),
             f"BPF_MAP_DELETE_ELEM fd={fd}")
    except OSError as exc:
        if exc.errno == _errno.ENOENT:
            return False
        raise
    return True


def map_get_next_key(fd: int, key, key_size: int) -> bytes | None:
    """The key after ``key`` (None: the first key), or None at the end."""
    k = _as_buffer(key, None, "map_get_next_key key") if key is not None else None
    nk = ctypes.create_string_buffer(key_size)
    try:
        _bpf(BPF_MAP_GET_NEXT_KEY, _MapElemAttr(map_fd=fd, key=_ptr(k), value=_ptr(nk)),
             f"BPF_MAP_GET_NEXT_KEY fd={fd}")
    except OSError as exc:
        if exc.errno == _errno.ENOENT:
            return None
        raise
    return nk.raw


# --- info -------------------------------------------------------------------
def obj_get_info_by_fd(fd: int, info: ctypes.Structure) -> ctypes.Structure:
    """Fill ``info`` (a bpf_*_info ctypes struct) for ``fd``; returns it."""
    attr = _InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, f"BPF_OBJ_GET_INFO_BY_FD fd={fd}")
    return info


def map_info(fd: int) -> MapInfo:
    """Type, id, key/value size, max_entries and name of the map ``fd``."""
    return MapInfo(obj_get_info_by_fd(fd, _BpfMapInfo()))


class ProgInfo:
    """What the kernel says about a loaded program (``struct bpf_prog_info``):
    id, name, size after translation and JIT, and ``verified_insns`` -- the
    instructions the verifier processed to accept it (0 on kernels before
    5.16, which do not report it), to be held against
    :data:`VERIFIER_INSN_LIMIT`."""

    __slots__ = ("id", "name", "type", "xlated_len", "jited_len", "verified_insns",
                 "nr_jited_ksyms")

    def __init__(self, raw: _BpfProgInfo):
        self.id = raw.id
        self.name = raw.name.decode(errors="replace")
        self.type = raw.type
        self.xlated_len = raw.xlated_prog_len
        self.jited_len = raw.jited_prog_len
        self.verified_insns = raw.verified_insns
        self.nr_jited_ksyms = raw.nr_jited_ksyms  # 1 + BPF-to-BPF subprograms

    @property
    def verifier_share(self) -> float:
        """verified_insns as a share of the verifier's limit."""
        return self.verified_insns / VERIFIER_INSN_LIMIT

    def __repr__(self) -> str:
        return (f"ProgInfo(id={self.id}, name={self.name!r}, "
                f"verified_insns={self.verified_insns}, xlated={self.xlated_len} B)")


class _IdAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("next_id", ctypes.c_uint32),
                ("open_flags", ctypes.c_uint32)]


def prog_get_fd_by_id(prog_id: int) -> int:
    """A new fd of the loaded program ``prog_id`` (close it)."""
    return _bpf(BPF_PROG_GET_FD_BY_ID, _IdAttr(id=prog_id), f"BPF_PROG_GET_FD_BY_ID {prog_id}")


def prog_info(fd: int) -> ProgInfo:
    """Id, name, sizes and ``verified_insns`` of the program ``fd``."""
    return ProgInfo(obj_get_info_by_fd(fd, _BpfProgInfo()))


# --- test run ----------------------------------------------------------------
def prog_test_run(prog_fd: int, data: bytes, ctx=None, repeat: int = 1,
                  data_out_size: int | None = None, flags: int = 0, batch_size: int = 0):
    """Run a loaded program on ``data`` with BPF_PROG_TEST_RUN.

    ``ctx`` (optional): bytes or a ctypes struct (for TC programs
    :class:`SkBuff`, e.g. ``SkBuff(ifindex=...)``). Returns
    ``(retval, data_out, duration_ns, ctx_out)``: duration is the kernel's
    mean per run, ctx_out has ctx's type (None without ctx).

    The kernel builds an skb from ``data`` (at least 14 bytes: EINVAL
    below), on device ``ctx.ifindex`` (default loopback) of the caller's
    network namespace, with a dummy socket as ``skb->sk``. Redirects are not
    executed (the program's return code tells), but helpers that transmit
    themselves (bpf_clone_redirect) do transmit.

    XDP programs take :class:`XdpMd` (``data_end`` = the packet's length);
    ``flags=BPF_F_TEST_XDP_LIVE_FRAMES`` executes their redirects
    (``batch_size`` frames at a time, 0: the kernel's 64) and gives no
    data or ctx back.
    """
    data = bytes(data)
    din = ctypes.create_string_buffer(data, len(data)) if data else None
    out_size = data_out_size if data_out_size is not None else max(len(data), 1) + 256
    dout = ctypes.create_string_buffer(out_size)
    live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
    if live:
        out_size, dout = 0, None
    attr = _TestRunAttr(prog_fd=prog_fd, data_size_in=len(data), data_size_out=out_size,
                        data_in=_ptr(din), data_out=_ptr(dout), repeat=repeat, flags=flags,
                        batch_size=batch_size)
    cin = cout = None
    if ctx is not None:
        cin = _as_buffer(ctx, None, "prog_test_run ctx")
        csize = len(cin.raw) if not isinstance(ctx, ctypes.Structure) else ctypes.sizeof(ctx)
        cout = ctypes.create_string_buffer(csize)
        attr.ctx_in, attr.ctx_size_in = _ptr(cin), csize
        if not live:
            attr.ctx_out, attr.ctx_size_out = _ptr(cout), csize
    _bpf(BPF_PROG_TEST_RUN, attr,
         f"BPF_PROG_TEST_RUN prog_fd={prog_fd} data={len(data)}B repeat={repeat}")
    data_out = dout.raw[: attr.data_size_out] if dout is not None else b""
    ctx_out = None
    if ctx is not None:
        raw = cout.raw[: attr.ctx_size_out]
        if isinstance(ctx, ctypes.Structure):
            ctx_out = type(ctx).from_buffer_copy(raw.ljust(ctypes.sizeof(ctx), b"\0"))
        else:
            ctx_out = raw
    return attr.retval, data_out, attr.duration, ctx_out
