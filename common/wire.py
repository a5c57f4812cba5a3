"""The TaLB header on the wire (docs/design.md §4), for scapy and for plain bytes.

A 12-byte IPv4 option, type 0x9E (copied=1, class 0, number 30: RFC 4727's
experimental number), mirrored from bpf/include/talb/talb_option.h:

    u8 type | u8 length=12 | u32 tensor_id | u8 layer | u8 flags | u16 tensor_len | u16 pkt_idx
    flags: bits 0-1 version (=1), bit 2 LAST (last packet of the tensor)

Importing this module registers ``IPOption_TaLB`` with scapy, so
``IP(raw_bytes)`` dissects the option and ``IP(options=[IPOption_TaLB(...)])``
builds it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from scapy.fields import BitEnumField, BitField, ByteField, IntField, ShortField
from scapy.layers.inet import IP, IPOption

from common.c_constants import CONST

# The numbers of bpf/include/talb/constants.h (TALB_IPOPT_*), parsed there.
OPT_TYPE = CONST["TALB_IPOPT_TYPE"]
OPT_LEN = CONST["TALB_IPOPT_LEN"]
VERSION = CONST["TALB_IPOPT_VERSION"]
VERSION_MASK = CONST["TALB_IPOPT_VERSION_MASK"]
FLAG_LAST = CONST["TALB_IPOPT_F_LAST"]
_FMT = "!BBIBBHH"  # network byte order, no padding: 12 bytes
assert struct.calcsize(_FMT) == OPT_LEN


class IPOption_TaLB(IPOption):
    name = "TaLB"
    option = OPT_TYPE & 0x1F  # scapy dispatches options on the 5-bit number
    fields_desc = [
        BitField("copy_flag", 1, 1),
        BitEnumField("optclass", 0, 2, {0: "control"}),
        BitEnumField("option", OPT_TYPE & 0x1F, 5, {OPT_TYPE & 0x1F: "talb"}),
        ByteField("length", OPT_LEN),
        IntField("tensor_id", 0),
        ByteField("layer", 0),
        BitField("flags_reserved", 0, 5),
        BitField("last", 0, 1),
        BitField("version", VERSION, 2),
        ShortField("tensor_len", 1),
        ShortField("pkt_idx", 0),
    ]


class WireTensorKey(NamedTuple):
    """What identifies one tensor fabric-wide: the sender's IPv4 address and
    its tensor_id. Ids are unique per sending host only (workload/snowflake.py),
    so every switch table and every tool that attributes packets to tensors
    keys by both (docs/talb-decisions.md). The switch's tensors map holds it
    as datapath.structs.TensorKey (the ctypes mirror of struct tensor_key); a map
    lookup accepts this form."""
    src: str            # dotted IPv4 address of the sending host
    tensor_id: int

    def __str__(self) -> str:
        return f"{self.src}/{self.tensor_id:#010x}"


@dataclass(frozen=True)
class TaLBHeader:
    tensor_id: int
    layer: int
    tensor_len: int
    pkt_idx: int
    last: bool = False
    version: int = VERSION

    def pack(self) -> bytes:
        flags = (self.version & VERSION_MASK) | (FLAG_LAST if self.last else 0)
        return struct.pack(_FMT, OPT_TYPE, OPT_LEN, self.tensor_id, self.layer, flags,
                           self.tensor_len, self.pkt_idx)

    @classmethod
    def unpack(cls, raw: bytes) -> "TaLBHeader":
        typ, length, tid, layer, flags, tlen, idx = struct.unpack(_FMT, raw[:OPT_LEN])
        if typ != OPT_TYPE or length != OPT_LEN:
            raise ValueError(f"not a TaLB option: type {typ:#x}, length {length}")
        return cls(tid, layer, tlen, idx, bool(flags & FLAG_LAST), flags & VERSION_MASK)

    def scapy(self) -> IPOption_TaLB:
        return IPOption_TaLB(tensor_id=self.tensor_id, layer=self.layer, tensor_len=self.tensor_len,
                             pkt_idx=self.pkt_idx, last=int(self.last), version=self.version)


def talb_header_of(pkt) -> TaLBHeader | None:
    """The TaLB header of a scapy packet (Ether/IP/...), or None if untagged."""
    ip = pkt[IP] if IP in pkt else None
    if ip is None:
        return None
    for opt in ip.options or []:
        if isinstance(opt, IPOption_TaLB):
            return TaLBHeader(opt.tensor_id, opt.layer, opt.tensor_len, opt.pkt_idx,
                              bool(opt.last), opt.version)
    return None


def tensor_key_of(pkt) -> WireTensorKey | None:
    """The WireTensorKey (IP source, tensor_id) of a tagged scapy packet, or None
    if untagged: the one way tools attribute a captured packet to a tensor."""
    hdr = talb_header_of(pkt)
    if hdr is None:
        return None
    return WireTensorKey(pkt[IP].src, hdr.tensor_id)
