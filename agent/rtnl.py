"""A lean rtnetlink client for the agent's per-window reads: link flags and
root-qdisc statistics of every port of a namespace, one dump each.

pyroute2 decodes every attribute of every message into Python objects
(~0.4 ms per port read, DESIGN §6); the loop needs five numbers per qdisc
and one flag word per link, so this parses just those from the raw
messages (``struct.unpack_from`` over one receive buffer). Link changes
also arrive as RTM_NEWLINK notifications on a subscribed socket, read
without blocking once per window.

A socket belongs to the network namespace it was created in, so each is
created after ``setns(2)`` into the namespace (this thread only) and the
thread switches back at once.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
import struct
from dataclasses import dataclass

NETLINK_ROUTE = 0
CLONE_NEWNET = 0x40000000
RTMGRP_LINK = 0x1

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
IFLA_IFNAME = 3
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
TC_H_ROOT = 0xFFFFFFFF
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
NLA_F_MASK = 0x3FFF  # attribute type without the nested/byte-order bits

_NLMSG = struct.Struct("=IHHII")       # len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")     # family, type, index, flags, change
_TCMSG = struct.Struct("=BxxxiIII")    # family, ifindex, handle, parent, info
_NLA = struct.Struct("=HH")
_BASIC = struct.Struct("=QI")          # gnet_stats_basic: bytes, packets
_QUEUE = struct.Struct("=IIIII")       # qlen, backlog, drops, requeues, overlimits
_RCVBUF = 1 << 20

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@dataclass(frozen=True)
class LinkState:
    ifindex: int
    name: str
    flags: int

    @property
    def up(self) -> bool:
        """Administratively up *and* carrier (a down peer drops the carrier)."""
        return bool(self.flags & IFF_UP) and bool(self.flags & IFF_LOWER_UP)


@dataclass(frozen=True)
class QdiscStats:
    backlog_bytes: int
    qlen: int
    drops: int
    bytes: int
    packets: int


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def netns_socket(netns: str | None, groups: int = 0) -> socket.socket:
    """A NETLINK_ROUTE socket in namespace ``netns`` (None: this one),
    subscribed to ``groups``. Never creates a missing namespace."""
    if netns is None:
        return _open(groups)
    try:
        target = os.open(f"/run/netns/{netns}", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, f"no network namespace {netns!r} "
                                              f"(/run/netns/{netns})") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            return _open(groups)
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def _open(groups: int) -> socket.socket:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        s.bind((0, groups))
    except BaseException:
        s.close()
        raise
    return s


def _attrs(buf, off: int, end: int):
    """(type, payload offset, payload length) of each attribute in buf[off:end]."""
    while off + 4 <= end:
        length, kind = _NLA.unpack_from(buf, off)
        if length < 4:
            return
        yield kind & NLA_F_MASK, off + 4, length - 4
        off += (length + 3) & ~3


def _messages(buf, n: int):
    off = 0
    while off + _NLMSG.size <= n:
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(buf, off)
        if length < _NLMSG.size:
            return
        yield kind, off + _NLMSG.size, off + length
        off += (length + 3) & ~3


class Rtnl:
    """Dumps over one netlink socket in one namespace."""

    def __init__(self, netns: str | None):
        self.netns = netns
        self.sock = netns_socket(netns)
        self._seq = 0
        self._buf = bytearray(_RCVBUF)

    def _dump(self, msg_type: int, body: bytes):
        self._seq += 1
        seq = self._seq
        hdr = _NLMSG.pack(_NLMSG.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
        self.sock.send(hdr + body)
        view = memoryview(self._buf)
        while True:
            n = self.sock.recv_into(view)
            for kind, start, end in _messages(self._buf, n):
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", self._buf, start)[0]
                    if code:
                        raise OSError(code, f"rtnetlink dump {msg_type} in {self.netns}: "
                                            f"{os.strerror(code)}")
                    return
                yield kind, start, end

    def links(self) -> dict[int, LinkState]:
        out = {}
        for kind, start, end in self._dump(RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind == RTM_NEWLINK:
                link = parse_link(self._buf, start, end)
                out[link.ifindex] = link
        return out

    def root_qdiscs(self) -> dict[int, QdiscStats]:
        """ifindex -> statistics of the interface's root qdisc."""
        out = {}
        for kind, start, end in self._dump(RTM_GETQDISC, _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
            if kind != RTM_NEWQDISC:
                continue
            _fam, ifindex, _handle, parent, _info = _TCMSG.unpack_from(self._buf, start)
            if parent != TC_H_ROOT:
                continue
            stats = _qdisc_stats(self._buf, start + _TCMSG.size, end)
            if stats is not None:
                out[ifindex] = stats
        return out

    def close(self) -> None:
        self.sock.close()


def parse_link(buf, start: int, end: int) -> LinkState:
    _fam, _type, ifindex, flags, _change = _IFINFO.unpack_from(buf, start)
    name = ""
    for kind, off, length in _attrs(buf, start + _IFINFO.size, end):
        if kind == IFLA_IFNAME:
            name = bytes(buf[off:off + length]).split(b"\0", 1)[0].decode()
            break
    return LinkState(ifindex, name, flags)


def _qdisc_stats(buf, off: int, end: int) -> QdiscStats | None:
    for kind, aoff, alen in _attrs(buf, off, end):
        if kind != TCA_STATS2:
            continue
        basic = queue = None
        for skind, soff, slen in _attrs(buf, aoff, aoff + alen):
            if skind == TCA_STATS_BASIC and slen >= _BASIC.size:
                basic = _BASIC.unpack_from(buf, soff)
            elif skind == TCA_STATS_QUEUE and slen >= _QUEUE.size:
                queue = _QUEUE.unpack_from(buf, soff)
        if basic is None or queue is None:
            return None
        return QdiscStats(backlog_bytes=queue[1], qlen=queue[0], drops=queue[2],
                          bytes=basic[0], packets=basic[1])
    return None


class LinkEvents:
    """RTM_NEWLINK / RTM_DELLINK notifications of one namespace, read
    without blocking. ``overflowed`` is set when the kernel dropped
    notifications (ENOBUFS): the caller must re-read the links."""

    def __init__(self, netns: str | None):
        self.sock = netns_socket(netns, RTMGRP_LINK)
        self.sock.setblocking(False)
        self._buf = bytearray(_RCVBUF)
        self.overflowed = False

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> list[tuple[bool, LinkState]]:
        """Pending events as (deleted, link), oldest first."""
        out = []
        view = memoryview(self._buf)
        while True:
            try:
                n = self.sock.recv_into(view)
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.overflowed = True
                    continue
                raise
            for kind, start, end in _messages(self._buf, n):
                if kind in (RTM_NEWLINK, RTM_DELLINK):
                    out.append((kind == RTM_DELLINK, parse_link(self._buf, start, end)))

    def close(self) -> None:
        self.sock.close()
