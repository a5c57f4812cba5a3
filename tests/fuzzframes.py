"""Frames for the fuzz tests (tests/test_fuzz.py), built with ``struct``,
and reference models of what the programs make of them.

* Builders: :func:`eth`, :func:`ipv4`, :func:`tcp`, :func:`udp`,
  :func:`icmp`, :func:`talb_opt`, :func:`conga_opt`, :func:`ip_checksum`.
  Any field may be given any value (bad lengths, versions, IHL ...); a
  length or checksum left out is computed.
* :class:`SwitchFrames`: a seeded stream of frames for the switch program,
  each with the port it arrives on and its kind -- TaLB options valid and
  not (random fields and lengths, bad version, LAST, pkt_idx past
  tensor_len, tensor_len 0/1, the option not first), tensors sent packet by
  packet (so the tensor table sees hits, completions, late and midstream
  packets), CONGA options, other IPv4 options, fragments, bad IHL, VLAN,
  ARP, IPv6, TCP/UDP/ICMP/other protocols, frames truncated at every
  offset, tiny and oversized ones.
* :func:`switch_parse`: bpf/include/talb/decision.h ``talb_extract`` and
  parsing_helpers.h ``parse_talb_option`` in Python -- what the switch
  must conclude from a frame before any scheme decides.
* :class:`HostFrames` and :class:`HostModel`: frames for the host tagger
  (bpf/host_tc.c) and a model of it: the counter each frame must be
  counted under and the exact bytes of a tagged frame.

Scapy is ~10k frames/s; these builders are ~20x faster. test_fuzz.py
cross-checks a sample against scapy's dissection.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

# --- numbers (bpf/include/talb/constants.h, host_constants.h) ------------------------
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
OPT_TALB = 0x9E
OPT_TALB_LEN = 12
OPT_CONGA = 0x9F
OPT_CONGA_LEN = 8
F_LAST = 0x04
IP_MF = 0x2000
IP_OFFSET = 0x1FFF
TCP_SYN, TCP_ACK, TCP_FIN, TCP_RST, TCP_PSH = 0x02, 0x10, 0x01, 0x04, 0x08
#: the largest frame BPF_PROG_TEST_RUN takes for an skb program (PAGE_SIZE
#: minus NET_SKB_PAD and the aligned skb_shared_info, net/bpf/test_run.c);
#: test_fuzz.py probes the kernel's real limit
TEST_RUN_MAX = 4096 - 64 - 320
ETH_HLEN = 14

MAC_A = bytes.fromhex("02000000000a")
MAC_B = bytes.fromhex("02000000000b")


def ip4(s: str) -> bytes:
    return bytes(int(x) for x in s.split("."))


# --- builders ---------------------------------------------------------------------------
def csum16(data: bytes) -> int:
    """RFC 1071 Internet checksum of ``data``."""
    if len(data) & 1:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_checksum(hdr: bytes) -> bytes:
    """``hdr`` (an IPv4 header) with its checksum field filled in."""
    h = bytearray(hdr)
    h[10:12] = b"\0\0"
    h[10:12] = struct.pack("!H", csum16(bytes(h)))
    return bytes(h)


def ip_checksum_ok(hdr: bytes) -> bool:
    return csum16(hdr) == 0


def eth(etype: int, payload: bytes = b"", dst: bytes = MAC_B, src: bytes = MAC_A) -> bytes:
    return dst + src + struct.pack("!H", etype) + payload


def ipv4(src: bytes, dst: bytes, proto: int, payload: bytes = b"", options: bytes = b"", *,
         ihl: int | None = None, tot_len: int | None = None, version: int = 4,
         frag: int = 0x4000, ident: int = 0, ttl: int = 64, tos: int = 0,
         csum: int | None = None) -> bytes:
    """An IPv4 header and ``payload``. ``options`` are padded with EOL to a
    multiple of 4; ``ihl``/``tot_len``/``csum`` default to the right values."""
    options += b"\0" * (-len(options) % 4)
    if ihl is None:
        ihl = 5 + len(options) // 4
    if tot_len is None:
        tot_len = 20 + len(options) + len(payload)
    h = struct.pack("!BBHHHBBH4s4s", (version << 4) | (ihl & 0xF), tos, tot_len & 0xFFFF,
                    ident, frag, ttl, proto, 0, src, dst) + options
    h = ip_checksum(h) if csum is None else h[:10] + struct.pack("!H", csum) + h[12:]
    return h + payload


def tcp(sport: int, dport: int, seq: int = 1, ack: int = 1, flags: int = TCP_ACK,
        payload: bytes = b"", options: bytes = b"", doff: int | None = None) -> bytes:
    options += b"\0" * (-len(options) % 4)
    if doff is None:
        doff = 5 + len(options) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                       (doff & 0xF) << 4, flags, 65535, 0, 0) + options + payload


def udp(sport: int, dport: int, payload: bytes = b"", length: int | None = None) -> bytes:
    if length is None:
        length = 8 + len(payload)
    return struct.pack("!HHHH", sport, dport, length & 0xFFFF, 0) + payload


def icmp(typ: int = 8, code: int = 0, payload: bytes = b"") -> bytes:
    return struct.pack("!BBHHH", typ, code, 0, 1, 1) + payload


def talb_opt(tensor_id: int, layer: int = 0, tensor_len: int = 1, pkt_idx: int = 0,
             last: bool = False, version: int = 1, *, flags: int | None = None,
             length: int = OPT_TALB_LEN, typ: int = OPT_TALB) -> bytes:
    """The 12 bytes of a TaLB option (docs/design.md §4); ``length`` is only
    the length byte, ``flags`` (if given) the whole flags byte."""
    if flags is None:
        flags = (version & 3) | (F_LAST if last else 0)
    return struct.pack("!BBIBBHH", typ, length & 0xFF, tensor_id & 0xFFFFFFFF, layer & 0xFF,
                       flags & 0xFF, tensor_len & 0xFFFF, pkt_idx & 0xFFFF)


def conga_opt(src_leaf: int = 0, lbtag: int = 0, ce: int = 0, fb_lbtag: int = 0,
              fb_metric: int = 0, flags: int = 1, *, length: int = OPT_CONGA_LEN,
              typ: int = OPT_CONGA) -> bytes:
    """The 8 bytes of CONGA's option (conga_option.h)."""
    return bytes([typ, length & 0xFF, src_leaf & 0xFF, lbtag & 0xFF, ce & 0xFF,
                  fb_lbtag & 0xFF, fb_metric & 0xFF, flags & 0xFF])


# --- the switch's parse, in Python ------------------------------------------------------
@dataclass
class Parsed:
    """What talb_extract concludes. ``reason``: the CNT_PASS_* counter name
    when the frame goes to the stack before routing (else None);
    ``counts``: the informational counters it bumps (opt_*, ip_options,
    ip_fragment)."""
    reason: str | None = None
    counts: list = field(default_factory=list)
    saddr: bytes = b""
    daddr: bytes = b""
    ihl: int = 0
    seen: bool = False
    strippable: bool = False
    tagged: bool = False
    last: bool = False
    tensor_id: int = 0
    layer: int = 0
    tensor_len: int = 0
    pkt_idx: int = 0
    opt_offset: int = 0
    conga: bool = False          # a valid CONGA option first (parse_conga_option)


def _talb_walk(opts: bytes, p: Parsed) -> str | None:
    """parse_talb_option: the CNT_OPT_* name it returns (None for 0)."""
    optlen = len(opts)
    off = 0
    for _ in range(40):
        if off >= optlen:
            return None
        typ = opts[off]
        if typ == 0:
            return None
        if typ == 1:
            off += 1
            continue
        if typ == OPT_TALB:
            p.seen = True
        if off + 2 > optlen:
            return "opt_truncated" if typ == OPT_TALB else "opt_overrun"
        ln = opts[off + 1]
        if typ != OPT_TALB:
            if ln < 2 or off + ln > optlen:
                return "opt_overrun"
            off += ln
            continue
        if ln != OPT_TALB_LEN:
            return "opt_bad_len"
        if off + OPT_TALB_LEN > optlen:
            return "opt_truncated"
        p.strippable = off == 0 and optlen == OPT_TALB_LEN
        p.opt_offset = off
        _, _, tid, layer, flags, tlen, idx = struct.unpack_from("!BBIBBHH", opts, off)
        p.tensor_id, p.layer, p.tensor_len, p.pkt_idx = tid, layer, tlen, idx
        p.last = bool(flags & F_LAST)
        if flags & 3 != 1:
            return "opt_bad_version"
        if tlen == 0:
            return "opt_zero_len"
        return "opt_tagged"
    return None


def switch_parse(frame: bytes) -> Parsed:
    """bpf/include/talb/decision.h talb_extract (with parse_talb_option and
    parse_conga_option) on ``frame``."""
    p = Parsed()
    n = len(frame)
    if n < 14:
        p.reason = "pass_malformed"
        return p
    if frame[12:14] != b"\x08\x00":
        p.reason = "pass_not_ipv4"
        return p
    if n < 34 or frame[14] >> 4 != 4:
        p.reason = "pass_malformed"
        return p
    ihl = frame[14] & 0xF
    hlen = ihl * 4
    tot_len = struct.unpack_from("!H", frame, 16)[0]
    if hlen < 20 or tot_len < hlen or 14 + hlen > n:
        p.reason = "pass_malformed"
        return p
    p.ihl = ihl
    p.saddr, p.daddr = frame[26:30], frame[30:34]
    proto = frame[23]
    if ihl > 5:
        r = _talb_walk(frame[34:14 + hlen], p)
        if r == "opt_tagged":
            p.tagged = True
            if p.opt_offset:
                p.counts.append("opt_not_first")
        else:
            p.counts.append("ip_options")
        if r:
            p.counts.append(r)
        c = frame[34:42]
        p.conga = (hlen >= 28 and c[0] == OPT_CONGA and c[1] == OPT_CONGA_LEN
                   and c[7] & 3 == 1)
    frag = struct.unpack_from("!H", frame, 20)[0]
    if frag & (IP_MF | IP_OFFSET):
        p.counts.append("ip_fragment")
        return p
    l4 = 14 + hlen
    if proto == 6:
        if l4 + 20 > n or frame[l4 + 12] >> 4 < 5 or l4 + (frame[l4 + 12] >> 4) * 4 > n:
            p.reason = "pass_malformed"
    elif proto == 17:
        if l4 + 8 > n or struct.unpack_from("!H", frame, l4 + 4)[0] < 8:
            p.reason = "pass_malformed"
    return p


def strip_first_option(frame: bytes, nbytes: int) -> bytes:
    """``frame`` without the ``nbytes`` right after its IPv4 base header:
    IHL, total length and checksum fixed, as the switch strips an option.
    The checksum is computed afresh: equal to the switch's incremental
    update when the frame's checksum was right."""
    hlen = (frame[14] & 0xF) * 4
    ip = bytearray(frame[14:34])
    ip[0] -= nbytes // 4
    ip[2:4] = struct.pack("!H", (struct.unpack_from("!H", ip, 2)[0] - nbytes) & 0xFFFF)
    return frame[:14] + ip_checksum(bytes(ip) + frame[34 + nbytes:14 + hlen]) + frame[14 + hlen:]


# --- switch frames ----------------------------------------------------------------------
@dataclass
class SwitchNet:
    """What the frame generator needs to know of the fuzzed switch."""
    sources: tuple            # sender addresses (bytes)
    routed: tuple             # destinations with a route (bytes)
    unrouted: tuple           # destinations without one
    ingresses: tuple          # (port name, weight)


class SwitchFrames:
    """A seeded stream of ``(frame, ingress port name, kind)``."""

    KINDS = {
        # kind: weight
        "tensor": 30, "talb_random": 10, "talb_not_first": 5, "conga": 8,
        "ip_options": 6, "fragment": 4, "bad_ihl": 4, "bad_ip": 3, "vlan": 2, "arp": 2,
        "ipv6": 2, "other_l2": 1, "tcp": 6, "udp": 4, "icmp": 3, "other_proto": 2,
        "truncated": 6, "random_bytes": 2, "big": 1,
    }

    def __init__(self, rng: random.Random, net: SwitchNet):
        self.rng = rng
        self.net = net
        self.kinds = list(self.KINDS)
        self.weights = list(self.KINDS.values())
        self.ingress_names = [n for n, _ in net.ingresses]
        self.ingress_w = [w for _, w in net.ingresses]
        # live tensors: (src, dst, tid) -> [layer, tensor_len, next idx, sport]
        self.tensors: dict = {}
        self._trunc_template = None
        self._trunc_off = 0

    # -- pieces
    def _addr(self):
        r = self.rng
        src = r.choice(self.net.sources)
        if r.random() < 0.08:
            dst = r.choice(self.net.unrouted)
        else:
            dst = r.choice(self.net.routed)
        return src, dst

    def _payload(self, lo=0, hi=64):
        n = self.rng.randint(lo, hi)
        return self.rng.randbytes(n)

    def _l4(self, proto=None):
        r = self.rng
        proto = proto if proto is not None else r.choice((6, 6, 6, 17, 1))
        if proto == 6:
            opts = b"\x01\x01\x08\x0a" + r.randbytes(8) if r.random() < 0.3 else b""
            return 6, tcp(r.randint(1, 65535), r.choice((5201, 80, r.randint(1, 65535))),
                          r.getrandbits(32), r.getrandbits(32), r.getrandbits(8),
                          self._payload(), opts)
        if proto == 17:
            return 17, udp(r.randint(1, 65535), r.randint(1, 65535), self._payload())
        return 1, icmp(r.choice((0, 8, 3, 11)), 0, self._payload(0, 32))

    def _other_option(self) -> bytes:
        r = self.rng
        c = r.randrange(7)
        if c == 0:
            return b"\x01"                                  # NOP
        if c == 1:
            return b"\x07\x07\x04" + r.randbytes(4)         # record route
        if c == 2:
            return b"\x44\x0c\x05\x00" + r.randbytes(8)     # timestamp
        if c == 3:
            return b"\x94\x04\x00\x00"                      # router alert
        if c == 4:                                          # any type, any length
            t = r.choice((0x02, 0x05, 0x82, 0x83, 0x89, r.randrange(256)))
            n = r.randint(0, 10)
            return bytes([t, r.choice((n + 2, r.randrange(256)))]) + r.randbytes(n)
        if c == 5:
            return conga_opt(*(r.randrange(256) for _ in range(5)), flags=r.randrange(256))
        return r.randbytes(r.randint(1, 6))

    def _random_talb(self) -> bytes:
        r = self.rng
        c = r.randrange(10)
        tid = r.choice((r.getrandbits(32), r.randrange(16)))
        layer, tlen, idx = r.randrange(256), r.choice((0, 1, 2, r.randrange(65536))), \
            r.choice((0, 1, r.randrange(65536)))
        if c == 0:          # bad length byte
            return talb_opt(tid, layer, tlen, idx, length=r.choice((0, 1, 2, 8, 11, 13, 16,
                                                                    r.randrange(256))))
        if c == 1:          # bad version (and any other flag bits)
            return talb_opt(tid, layer, tlen, idx, flags=r.choice((0, 2, 3, 4, 6, 7))
                            | (r.randrange(32) << 3))
        if c == 2:          # tensor_len 0 or 1
            return talb_opt(tid, layer, r.choice((0, 1)), idx, last=r.random() < 0.5)
        if c == 3:          # pkt_idx >= tensor_len
            tlen = r.randint(1, 20)
            return talb_opt(tid, layer, tlen, tlen + r.randrange(100), last=r.random() < 0.3)
        if c == 4:          # cut short (the header ends inside it)
            return talb_opt(tid, layer, tlen, idx)[:r.randint(1, 11)]
        if c == 5:          # all random
            return bytes([OPT_TALB]) + r.randbytes(11)
        return talb_opt(tid, layer, tlen, idx, last=r.random() < 0.2,
                        flags=None if r.random() < 0.8 else r.randrange(256))

    def _ip(self, options=b"", proto=None, l4=None, src=None, dst=None, **kw):
        s, d = self._addr()
        if proto is None:
            proto, l4 = self._l4()
        return eth(ETH_P_IP, ipv4(src or s, dst or d, proto, l4, options,
                                  ident=self.rng.getrandbits(16), **kw))

    def _tensor(self):
        """The next packet of a tensor: mostly in order, sometimes a
        retransmission, a skipped first packet, LAST, or a new tensor."""
        r = self.rng
        if not self.tensors or r.random() < 0.15:
            src, dst = self._addr()
            tid = r.randrange(64) if r.random() < 0.7 else r.getrandbits(32)
            key = (src, dst, tid)
            tlen = r.choice((1, 2, 3, 5, 8, 20, r.randint(1, 300)))
            self.tensors[key] = [r.randrange(12), tlen, 0 if r.random() < 0.9 else
                                 r.randint(1, tlen), r.randint(1024, 65535)]
            if len(self.tensors) > 200:
                self.tensors.pop(next(iter(self.tensors)))
        key = r.choice(list(self.tensors)) if r.random() < 0.5 else next(reversed(self.tensors))
        src, dst, tid = key
        layer, tlen, idx, sport = self.tensors[key]
        if r.random() < 0.05 and idx:           # retransmission of an earlier packet
            i = r.randrange(idx)
        else:
            i = idx
            self.tensors[key][2] = idx + 1
        last = i + 1 >= tlen or r.random() < 0.03
        if last and i >= idx:
            self.tensors.pop(key, None)
        opt = talb_opt(tid, layer, tlen, i, last)
        if r.random() < 0.05:
            opt += self._other_option()          # more behind ours
        return self._ip(opt, src=src, dst=dst, proto=6,
                        l4=tcp(sport, 5201, r.getrandbits(32), 1, TCP_ACK | TCP_PSH,
                               self._payload(1, 64)))

    # -- kinds
    def frame(self, kind: str) -> bytes:
        r = self.rng
        if kind == "tensor":
            return self._tensor()
        if kind == "talb_random":
            return self._ip(self._random_talb())
        if kind == "talb_not_first":
            before = b"".join(self._other_option() for _ in range(r.randint(1, 3)))
            return self._ip((before + self._random_talb())[:40])
        if kind == "conga":
            o = conga_opt(r.randrange(70), r.randrange(10), r.choice((0, 0, r.randrange(10))),
                          r.randrange(10),
                          r.randrange(10), r.choice((1, 1, 5, 0, 2, r.randrange(256))),
                          length=r.choice((8, 8, 8, r.randrange(256))))
            if r.random() < 0.5:
                o += self._random_talb() if r.random() < 0.3 else talb_opt(
                    r.randrange(64), r.randrange(12), r.randint(1, 8), r.randrange(8))
            if r.random() < 0.2:
                o += self._other_option()
            return self._ip(o[:40])
        if kind == "ip_options":
            opts = b"".join(self._other_option() for _ in range(r.randint(1, 5)))
            return self._ip(opts[:40])
        if kind == "fragment":
            frag = r.choice((IP_MF, IP_MF | r.randint(1, IP_OFFSET), r.randint(1, IP_OFFSET)))
            opt = talb_opt(r.randrange(64), 0, 3, 0) if r.random() < 0.3 else b""
            return self._ip(opt, frag=frag | (r.random() < 0.3) * 0x4000)
        if kind == "bad_ihl":
            c = r.randrange(3)
            if c == 0:
                return self._ip(ihl=r.randrange(5))
            if c == 1:                  # claims more header than the frame has
                f = self._ip(talb_opt(1, 0, 2, 0) if r.random() < 0.5 else b"")
                cut = r.randint(34, min(len(f), 14 + 59))
                f = bytearray(f[:cut])
                f[14] = 0x40 | r.randint(max(5, (cut - 14) // 4 + 1), 15)
                return bytes(f)
            return self._ip(ihl=r.randint(6, 15))   # options are the L4 header's bytes
        if kind == "bad_ip":
            c = r.randrange(3)
            if c == 0:
                return self._ip(version=r.choice((0, 5, 6, 15)))
            if c == 1:                              # total length below the header
                return self._ip(talb_opt(2, 0, 2, 0) if r.random() < 0.5 else b"",
                                tot_len=r.randrange(0, 33))
            return self._ip(tot_len=r.randrange(65536), csum=r.getrandbits(16))
        if kind == "vlan":
            inner = self._ip(talb_opt(r.randrange(64), 0, 4, 0) if r.random() < 0.5 else b"")
            return inner[:12] + struct.pack("!HH", ETH_P_8021Q, r.randrange(4096)) + inner[12:]
        if kind == "arp":
            return eth(ETH_P_ARP, struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, r.choice((1, 2)))
                       + MAC_A + r.choice(self.net.sources) + b"\0" * 6
                       + r.choice(self.net.routed), dst=b"\xff" * 6)
        if kind == "ipv6":
            pl = self._payload(8, 64)
            return eth(ETH_P_IPV6, struct.pack("!IHBB", 6 << 28, len(pl), 17, 64)
                       + r.randbytes(32) + pl)
        if kind == "other_l2":
            return eth(r.choice((0x88CC, 0x88E5, 0x0842, r.randrange(65536))),
                       self._payload(0, 80))
        if kind in ("tcp", "udp", "icmp"):
            proto, l4 = self._l4({"tcp": 6, "udp": 17, "icmp": 1}[kind])
            if proto == 17 and r.random() < 0.1:
                l4 = l4[:4] + struct.pack("!H", r.randrange(8)) + l4[6:]   # UDP length < 8
            if proto == 6 and r.random() < 0.1:
                l4 = l4[:12] + bytes([r.randrange(16) << 4]) + l4[13:]     # any data offset
            return self._ip(proto=proto, l4=l4)
        if kind == "other_proto":
            return self._ip(proto=r.choice((0, 2, 47, 50, 132, 255)), l4=self._payload())
        if kind == "truncated":
            return self._truncated()
        if kind == "random_bytes":
            f = bytearray(self._ip(self._random_talb() if r.random() < 0.5 else b""))
            for _ in range(r.randint(1, 8)):
                i = r.randrange(14, len(f))
                f[i] = r.randrange(256)
            return bytes(f)
        if kind == "big":
            n = r.choice((TEST_RUN_MAX, r.randint(1500, TEST_RUN_MAX)))
            opt = talb_opt(r.randrange(64), r.randrange(12), r.randint(1, 9), 0) \
                if r.random() < 0.5 else b""
            proto = r.choice((6, 17))
            hdr = 14 + 20 + len(opt) + (20 if proto == 6 else 8)
            body = r.randbytes(max(0, n - hdr))
            l4 = tcp(40000, 5201, 1, 1, TCP_ACK, body) if proto == 6 else udp(1, 2, body)
            return self._ip(opt, proto=proto, l4=l4)
        raise ValueError(kind)

    def _truncated(self) -> bytes:
        """One frame cut at every offset in turn: a template (a tagged TCP
        frame, sometimes with other options or a CONGA option) is cut at
        14, 15, ... its full length, then a new template."""
        r = self.rng
        if self._trunc_template is None or self._trunc_off > len(self._trunc_template):
            opts = talb_opt(r.randrange(64), r.randrange(12), r.randint(2, 9), 0)
            c = r.randrange(4)
            if c == 1:
                opts = b"\x01\x01\x01\x01" + opts
            elif c == 2:
                opts = conga_opt(0, 1, 2) + opts
            elif c == 3:
                opts = b""
            proto, l4 = self._l4(r.choice((6, 17)))
            self._trunc_template = self._ip(opts, proto=proto, l4=l4)
            self._trunc_off = 14
        f = self._trunc_template[:self._trunc_off]
        self._trunc_off += 1
        return f

    def next(self):
        """(frame, ingress, kind)"""
        r = self.rng
        kind = r.choices(self.kinds, self.weights)[0]
        ingress = r.choices(self.ingress_names, self.ingress_w)[0]
        return self.frame(kind), ingress, kind


def kernel_refuses(frame: bytes) -> bool:
    """Whether BPF_PROG_TEST_RUN refuses ``frame`` (EINVAL) before any
    program sees it: shorter than an Ethernet header, longer than
    TEST_RUN_MAX, or an IPv4 / IPv6 EtherType without room for the base
    header (6.x kernels check these: measured on 6.18)."""
    n = len(frame)
    if n < ETH_HLEN or n > TEST_RUN_MAX:
        return True
    et = frame[12:14]
    return (et == b"\x08\x00" and n < ETH_HLEN + 20) or (et == b"\x86\xdd" and n < ETH_HLEN + 40)


#: frames the kernel refuses to test-run (shorter than Ethernet's header,
#: longer than a page allows): (frame, kind)
def rejected_frames(rng: random.Random) -> list:
    out = [(b"", "empty"), (b"\x01", "one_byte")]
    out += [(rng.randbytes(n), f"short_{n}") for n in range(2, ETH_HLEN)]
    big = eth(ETH_P_IP, ipv4(ip4("198.18.0.1"), ip4("198.18.1.4"), 17,
                             udp(1, 2, rng.randbytes(9000 - 42))))
    out += [(big, "jumbo_9000"), (big[:TEST_RUN_MAX + 1], "one_past_the_limit")]
    out += [(big[:n], f"ipv4_{n}") for n in range(ETH_HLEN, ETH_HLEN + 20)]
    return out


# --- host frames and model --------------------------------------------------------------


@dataclass
class HostState:
    """What the host program's maps hold, as the model sees it."""
    isn: dict = field(default_factory=dict)      # key -> (isn, flags)
    rings: dict = field(default_factory=dict)    # key -> [(start, end, tid, len, mss, layer)] * 32
    wire: dict = field(default_factory=dict)     # tid -> [tagged packets, LAST seen] (tensor_wire)


def host_desc_of(ring, off: int):
    for d in ring:
        start, end = d[0], d[1]
        if (off - start) & 0xFFFFFFFF < (end - start) & 0xFFFFFFFF:
            return d
    return None


class HostModel:
    """bpf/host_tc.c in Python: ``run(frame, gso_size)`` -> (counter name,
    expected output bytes), updating the state as the program updates its
    maps."""

    def __init__(self, state: HostState):
        self.st = state

    def run(self, frame: bytes, gso_size: int = 0):
        n = len(frame)
        if n < 14:
            return "malformed", frame
        if frame[12:14] != b"\x08\x00":
            return "not_tcp", frame
        if n < 34 or frame[14] >> 4 != 4:
            return "malformed", frame
        ihl = frame[14] & 0xF
        hlen = ihl * 4
        tot_len = struct.unpack_from("!H", frame, 16)[0]
        if hlen < 20 or tot_len < hlen or 14 + hlen > n:
            return "malformed", frame
        if frame[23] != 6:
            return "not_tcp", frame
        if struct.unpack_from("!H", frame, 20)[0] & (IP_MF | IP_OFFSET):
            return "untagged_fragment", frame
        l4 = 14 + hlen
        if l4 + 20 > n:
            return "malformed", frame
        doff = frame[l4 + 12] >> 4
        if doff < 5 or l4 + doff * 4 > n:
            return "malformed", frame
        payload = tot_len - hlen - doff * 4
        if payload < 0:
            return "malformed", frame
        sport, dport, seq = struct.unpack_from("!HHI", frame, l4)
        flags = frame[l4 + 13]
        key = (frame[26:30], frame[30:34], sport, dport)
        if flags & TCP_SYN:
            if not flags & TCP_ACK:
                v = (seq, 1)
            else:
                old = self.st.isn.get(key)
                v = (seq, old[1] if old and old[0] == seq else 0)
            self.st.isn[key] = v
            self.st.rings.pop(key, None)
            return "isn_learned", frame
        if payload == 0:
            return "pure_ack", frame
        ring = self.st.rings.get(key)
        if ring is None:
            return "untagged_no_ring", frame
        isn = self.st.isn.get(key)
        if isn is None:
            return "untagged_no_isn", frame
        off = (seq - isn[0] - 1) & 0xFFFFFFFF
        d = host_desc_of(ring, off)
        if d is None:
            return "untagged_no_descriptor", frame
        if ihl != 5:
            return "untagged_ip_options", frame
        if gso_size:
            return "untagged_gso", frame
        start, end, tid, len_pkts, mss, layer = d
        rel = (off - start) & 0xFFFFFFFF
        idx = (rel // mss if mss else 0) & 0xFFFF
        fl = 1
        if (rel + payload) & 0xFFFFFFFF >= (end - start) & 0xFFFFFFFF:
            fl |= F_LAST
        ip = bytearray(frame[14:34])
        ip[0] = 0x48                      # version 4 (parsed), IHL 8
        ip[2:4] = struct.pack("!H", (tot_len + 12) & 0xFFFF)
        hdr = ip_checksum(bytes(ip) + talb_opt(tid, layer, len_pkts, idx, flags=fl))
        w = self.st.wire.setdefault(tid, [0, False])
        w[0] += 1
        w[1] = w[1] or bool(fl & F_LAST)
        return "tagged", frame[:14] + hdr + frame[34:]


class HostFrames:
    """A seeded stream of ``(frame, gso_size, kind)`` for the host tagger,
    over a few flows: some with a ring and an ISN (tagged when a segment
    falls in a descriptor), some with only one of them, some with neither.
    ``rings()`` gives the rings to install (the state's copy is the model's)."""

    KINDS = {"data": 40, "syn": 1, "ack": 5, "ip_options": 4, "fragment": 3, "gso": 2,
             "not_tcp": 4, "l2": 3, "truncated": 6, "bad_ip": 4, "bad_tcp": 3,
             "random_bytes": 3, "big": 1}

    def __init__(self, rng: random.Random):
        self.rng = rng
        r = rng
        self.flows = []
        for i in range(8):
            self.flows.append((ip4(f"198.18.0.{1 + i % 2}"), ip4(f"198.18.1.{i}"),
                               r.randint(1024, 65535), r.choice((5201, 5001))))
        self.kinds = list(self.KINDS)
        self.weights = list(self.KINDS.values())
        self._trunc = None
        self._trunc_off = 0
        self.plan: dict = {}      # key -> (isn, ring)

    def new_plan(self, state: HostState):
        """Fresh ISNs and rings for the flows (flows 0-4: both, 5: ring
        only, 6: ISN only, 7: neither); written to ``state``. Returns
        ``{key: ring}`` and ``{key: (isn, flags)}`` to install."""
        r = self.rng
        rings, isns = {}, {}
        for i, key in enumerate(self.flows):
            isn = r.choice((r.getrandbits(32), 0xFFFFFFFF - r.randrange(50000), 0))
            base = r.choice((0, r.getrandbits(32)))
            ring, start = [], base
            for slot in range(32):
                if r.random() < 0.15:
                    ring.append((0, 0, 0, 0, 0, 0))      # empty slot
                    continue
                size = r.choice((1, 100, 1448, r.randint(1, 30000)))
                mss = r.choice((1448, 536, 9000, r.randint(1, 65535), 0))
                lp = (-(-size // mss) if mss else 1) & 0xFFFF
                ring.append(((start & 0xFFFFFFFF), (start + size) & 0xFFFFFFFF,
                             r.getrandbits(32), lp, mss, r.randrange(256)))
                start += size + (r.randrange(3000) if r.random() < 0.1 else 0)
            r.shuffle(ring)
            if i <= 5:
                rings[key] = ring
            if i <= 4 or i == 6:
                isns[key] = (isn, r.randrange(2))
            self.plan[key] = (isn, base, start, [d for d in ring if d[0] != d[1]])
        state.rings = {k: list(v) for k, v in rings.items()}
        state.isn = dict(isns)
        state.wire = {}                                  # tensor_wire is emptied with the plan
        return rings, isns

    def _seq(self, key):
        r = self.rng
        isn, base, end, descs = self.plan[key]
        c = r.random()
        if c < 0.8:
            off = r.randint(base, max(base, end - 1))
        elif c < 0.9:
            off = r.getrandbits(32)
        else:
            off = end + r.randrange(100)
        return (isn + 1 + off) & 0xFFFFFFFF

    def _aligned(self, key):
        """A segment as TCP sends a tensor: at a multiple of the MSS inside a
        descriptor, ending at the next multiple or exactly at the tensor's
        end (LAST), sometimes one byte short of it or past it."""
        r = self.rng
        isn, _, _, descs = self.plan[key]
        start, end, _, _, mss, _ = r.choice(descs)
        size = (end - start) & 0xFFFFFFFF
        step = min(mss or 1448, 1400)
        k = r.choice((0, r.randrange(max(1, -(-size // step))), max(0, (size - 1) // step)))
        off = k * step
        n = min(step, size - off) if off < size else 1
        n = max(1, n + r.choice((0, 0, 0, -1, 1)))
        return (isn + 1 + start + off) & 0xFFFFFFFF, n

    def _seg(self, key=None, flags=TCP_ACK | TCP_PSH, payload=None, options=b"", **ip):
        r = self.rng
        key = key or r.choice(self.flows)
        s, d, sp, dp = key
        seq = None
        if payload is None:
            if self.plan[key][3] and r.random() < 0.5:
                seq, n = self._aligned(key)
            else:
                n = r.choice((1, 10, 100, 1448, r.randint(1, 1500)))
            payload = r.randbytes(n)
        topts = b"\x01\x01\x08\x0a" + r.randbytes(8) if r.random() < 0.5 else b""
        seq = self._seq(key) if seq is None else seq
        return eth(ETH_P_IP, ipv4(s, d, 6, tcp(sp, dp, seq, r.getrandbits(32),
                                               flags, payload, topts), options,
                                  ident=r.getrandbits(16), **ip))

    def frame(self, kind: str):
        r = self.rng
        if kind == "data":
            return self._seg(), 0
        if kind == "syn":       # mostly on the flows without a ring: a SYN drops it
            key = r.choice(self.flows if r.random() < 0.3 else self.flows[6:])
            s, d, sp, dp = key
            fl = TCP_SYN | (TCP_ACK if r.random() < 0.5 else 0)
            seq = self.plan[key][0] if r.random() < 0.5 else r.getrandbits(32)
            return eth(ETH_P_IP, ipv4(s, d, 6, tcp(sp, dp, seq, 0, fl))), 0
        if kind == "ack":
            return self._seg(flags=r.choice((TCP_ACK, TCP_ACK | TCP_FIN, TCP_RST)),
                             payload=b""), 0
        if kind == "ip_options":
            opts = r.choice((b"\x01\x01\x01\x01", talb_opt(1, 2, 3, 0),
                             b"\x94\x04\x00\x00", r.randbytes(r.randint(1, 40))))
            return self._seg(options=opts), 0
        if kind == "fragment":
            return self._seg(frag=r.choice((IP_MF, r.randint(1, IP_OFFSET)))), 0
        if kind == "gso":
            return self._seg(payload=r.randbytes(r.randint(1, 3000))), r.randint(1, 1448)
        if kind == "not_tcp":
            s, d = r.choice(self.flows)[:2]
            p = r.choice((17, 1, 47))
            l4 = udp(1, 2, r.randbytes(20)) if p == 17 else icmp() if p == 1 else b"x" * 8
            return eth(ETH_P_IP, ipv4(s, d, p, l4)), 0
        if kind == "l2":
            c = r.randrange(3)
            if c == 0:
                f = self._seg()
                return f[:12] + struct.pack("!HH", ETH_P_8021Q, 5) + f[12:], 0
            if c == 1:
                return eth(ETH_P_ARP, r.randbytes(28)), 0
            return eth(ETH_P_IPV6, r.randbytes(r.randint(0, 80))), 0
        if kind == "truncated":
            if self._trunc is None or self._trunc_off > len(self._trunc):
                self._trunc = self._seg(payload=r.randbytes(r.randint(1, 40)))
                self._trunc_off = 14
            f = self._trunc[:self._trunc_off]
            self._trunc_off += 1
            return f, 0
        if kind == "bad_ip":
            c = r.randrange(4)
            if c == 0:
                return self._seg(tot_len=r.randrange(65536)), 0   # payload from tot_len
            if c == 1:
                return self._seg(ihl=r.randrange(16)), 0
            if c == 2:
                return self._seg(version=r.choice((0, 6, 15))), 0
            return self._seg(csum=r.getrandbits(16)), 0             # bad checksum: tagged anyway
        if kind == "bad_tcp":
            f = bytearray(self._seg())
            f[34 + 12] = r.randrange(16) << 4
            return bytes(f), 0
        if kind == "random_bytes":
            f = bytearray(self._seg())
            for _ in range(r.randint(1, 6)):
                i = r.randrange(14, len(f))
                f[i] = r.randrange(256)
            return bytes(f), 0
        if kind == "big":
            n = r.randint(1500, TEST_RUN_MAX - 12)
            return self._seg(payload=r.randbytes(n - 66)), 0
        raise ValueError(kind)

    def next(self):
        """(frame, gso_size, kind)"""
        kind = self.rng.choices(self.kinds, self.weights)[0]
        f, gso = self.frame(kind)
        return f, gso, kind
