"""Field offsets of kernel structs, read from the running kernel's BTF
(/sys/kernel/btf/vmlinux).

bcc compiles against the kernel headers it finds, which need not match the
running kernel (here: 6.1 headers, a 6.18 kernel), and has no CO-RE. The
kernel-side tagger (bpf/host_sendmsg.c) therefore reads socket fields at
offsets this module takes from the kernel's own type information and
passes as -D constants.

    offset_of("tcp_sock", "write_seq")          # bytes from the struct start
    offset_of("sock", "__sk_common.skc_net")   # anonymous members searched
"""
from __future__ import annotations

import functools
import struct
from pathlib import Path

__all__ = ["offset_of", "BtfError", "VMLINUX_BTF"]

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")

_KIND_STRUCT, _KIND_UNION, _KIND_TYPEDEF = 4, 5, 8
_MODIFIERS = (9, 10, 11, 18)  # volatile, const, restrict, type_tag
# bytes after struct btf_type, per kind (vlen-dependent ones: a function of vlen)
_EXTRA = {1: lambda v: 4, 3: lambda v: 12, 4: lambda v: 12 * v, 5: lambda v: 12 * v,
          6: lambda v: 8 * v, 13: lambda v: 8 * v, 14: lambda v: 4, 15: lambda v: 12 * v,
          17: lambda v: 4, 19: lambda v: 12 * v}


class BtfError(RuntimeError):
    """The kernel's BTF lacks a struct or field the tagger needs."""


class _Btf:
    def __init__(self, data: bytes):
        magic, _ver, _flags, hdr_len, type_off, type_len, str_off, str_len = \
            struct.unpack_from("<HBBIIIII", data, 0)
        if magic != 0xEB9F:
            raise BtfError(f"{VMLINUX_BTF}: not BTF (magic {magic:#x})")
        types = data[hdr_len + type_off: hdr_len + type_off + type_len]
        self.strs = data[hdr_len + str_off: hdr_len + str_off + str_len]
        self.types: list = [None]  # id 0: void
        self.by_name: dict[tuple[int, str], int] = {}
        pos = 0
        while pos < len(types):
            name_off, info, size_type = struct.unpack_from("<III", types, pos)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            pos += 12
            members = []
            if kind in (_KIND_STRUCT, _KIND_UNION):
                for i in range(vlen):
                    m_name, m_type, m_off = struct.unpack_from("<III", types, pos + 12 * i)
                    members.append((self.name(m_name), m_type, (m_off & 0xFFFFFF) if kflag else m_off))
            pos += _EXTRA.get(kind, lambda v: 0)(vlen)
            tid = len(self.types)
            self.types.append((kind, self.name(name_off), size_type, members))
            if kind in (_KIND_STRUCT, _KIND_UNION) and self.types[tid][1]:
                self.by_name.setdefault((kind, self.types[tid][1]), tid)

    def name(self, off: int) -> str:
        end = self.strs.index(b"\0", off)
        return self.strs[off:end].decode()

    def resolve(self, tid: int) -> int:
        while self.types[tid][0] in (_KIND_TYPEDEF, *_MODIFIERS):
            tid = self.types[tid][2]
        return tid

    def find_member(self, tid: int, name: str):
        """(bit offset, type id) of ``name`` in struct/union ``tid``, looking
        into anonymous members."""
        for m_name, m_type, m_off in self.types[tid][3]:
            if m_name == name:
                return m_off, m_type
            if not m_name:
                inner = self.resolve(m_type)
                if self.types[inner][0] in (_KIND_STRUCT, _KIND_UNION):
                    found = self.find_member(inner, name)
                    if found:
                        return m_off + found[0], found[1]
        return None


@functools.lru_cache(maxsize=1)
def _vmlinux() -> _Btf:
    try:
        return _Btf(VMLINUX_BTF.read_bytes())
    except OSError as exc:
        raise BtfError(f"{VMLINUX_BTF}: {exc.strerror} (the tagger needs a kernel with "
                       "CONFIG_DEBUG_INFO_BTF)") from exc


def offset_of(struct_name: str, path: str) -> int:
    """Byte offset of the dotted field ``path`` in ``struct struct_name``."""
    btf = _vmlinux()
    tid = btf.by_name.get((_KIND_STRUCT, struct_name))
    if tid is None:
        raise BtfError(f"{VMLINUX_BTF}: no struct {struct_name}")
    bits = 0
    for part in path.split("."):
        found = btf.find_member(btf.resolve(tid), part)
        if found is None:
            raise BtfError(f"{VMLINUX_BTF}: struct {struct_name} has no field {path} ({part})")
        bits += found[0]
        tid = found[1]
    if bits % 8:
        raise BtfError(f"{VMLINUX_BTF}: struct {struct_name}.{path} is a bit field")
    return bits // 8
