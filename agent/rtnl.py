"""A lean rtnetlink client for the agent's per-window reads: link flags and
root-qdisc statistics of every port of a namespace, one dump each.

pyroute2 decodes every attribute of every message into Python objects
(~0.4 ms per port read, docs/design.md §6); the loop needs five numbers per qdisc
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
from contextlib import closing
from dataclasses import dataclass
from typing import Callable, NamedTuple

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


class QdiscStats(NamedTuple):
    """A root qdisc's statistics (a tuple: a dump builds one per port per
    window, and a frozen dataclass cost three times as much to make)."""
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
    """(type, sequence number, payload start, end) of each message in buf[:n]."""
    off = 0
    while off + _NLMSG.size <= n:
        length, kind, _flags, seq, _pid = _NLMSG.unpack_from(buf, off)
        if length < _NLMSG.size:
            return
        yield kind, seq, off + _NLMSG.size, off + length
        off += (length + 3) & ~3


DRAIN_TIMEOUT_S = 1.0  # the rest of an abandoned dump is in the kernel's hands: it comes at once
DUMP_ATTEMPTS = 3      # EBUSY (another dump still running on the socket) -> drain it, ask again


class Rtnl:
    """Dumps over one netlink socket in one namespace.

    Every reply is matched to its request by sequence number: a dump
    abandoned half-way (an exception in its reader) leaves the rest of its
    replies, and its DONE, in the socket; they are drained at once and, if
    any remain, skipped by the next dump (never taken for its own end). A
    dump refused with EBUSY (the kernel runs one dump per socket; another
    request's is unfinished) is asked again once that one is read out."""

    def __init__(self, netns: str | None):
        self.netns = netns
        self.sock = netns_socket(netns)
        self._seq = 0
        self._buf = bytearray(_RCVBUF)

    def _dump(self, msg_type: int, body: bytes):
        for _attempt in range(DUMP_ATTEMPTS):
            self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
            seq = self._seq
            hdr = _NLMSG.pack(_NLMSG.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP,
                              seq, 0)
            self.sock.send(hdr + body)
            finished = False
            try:
                for kind, mseq, start, end in self._replies():
                    if mseq != seq:
                        continue  # a stale reply of an abandoned request
                    if kind == NLMSG_DONE:
                        finished = True
                        return
                    if kind == NLMSG_ERROR:
                        finished = True
                        code = -struct.unpack_from("=i", self._buf, start)[0]
                        if code == errno.EBUSY:
                            break
                        if code:
                            raise OSError(code, f"rtnetlink dump {msg_type} in {self.netns}: "
                                                f"{os.strerror(code)}")
                        return
                    yield kind, start, end
            finally:
                if not finished:
                    self._drain(lambda s: s == seq)
            # EBUSY: an abandoned dump of another request still runs on this
            # socket (the kernel runs one at a time): read it to its end, ask again
            self._drain(lambda s: s != seq)
        raise OSError(errno.EBUSY, f"rtnetlink dump {msg_type} in {self.netns}: "
                                   f"{os.strerror(errno.EBUSY)} after {DUMP_ATTEMPTS} attempts")

    def _replies(self):
        view = memoryview(self._buf)
        while True:
            n = self.sock.recv_into(view)
            yield from _messages(self._buf, n)

    def _drain(self, ends: Callable[[int], bool]) -> None:
        """Read and drop replies up to the DONE or error of a sequence
        number for which ``ends(seq)``."""
        self.sock.settimeout(DRAIN_TIMEOUT_S)
        try:
            for kind, mseq, _start, _end in self._replies():
                if kind in (NLMSG_DONE, NLMSG_ERROR) and ends(mseq):
                    return
        except OSError:  # timeout or a broken socket: the seq check covers what is left
            pass
        finally:
            self.sock.settimeout(None)

    def links(self) -> dict[int, LinkState]:
        out = {}
        with closing(self._dump(RTM_GETLINK, _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0))) as dump:
            for kind, start, end in dump:
                if kind == RTM_NEWLINK:
                    link = parse_link(self._buf, start, end)
                    out[link.ifindex] = link
        return out

    def root_qdiscs(self) -> dict[int, QdiscStats]:
        """ifindex -> statistics of the interface's root qdisc."""
        out = {}
        # closing: an error here drains the rest of the dump at once (Rtnl._dump)
        with closing(self._dump(RTM_GETQDISC, _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))) as dump:
            for kind, start, end in dump:
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
    """TCA_STATS2's BASIC and QUEUE of one qdisc message's attributes
    buf[off:end]. The attribute walks of :func:`_attrs`, written out: this
    runs for every port every window in measured mode (64 ports: ~2 us a
    port here, ~3.6 through the generators)."""
    nla = _NLA.unpack_from
    while off + 4 <= end:
        length, kind = nla(buf, off)
        if length < 4:
            return None
        if kind & NLA_F_MASK == TCA_STATS2:
            basic = queue = None
            soff, send = off + 4, off + length
            while soff + 4 <= send:
                slen, skind = nla(buf, soff)
                if slen < 4:
                    break
                skind &= NLA_F_MASK
                if skind == TCA_STATS_BASIC and slen - 4 >= _BASIC.size:
                    basic = _BASIC.unpack_from(buf, soff + 4)
                elif skind == TCA_STATS_QUEUE and slen - 4 >= _QUEUE.size:
                    queue = _QUEUE.unpack_from(buf, soff + 4)
                soff += (slen + 3) & ~3
            if basic is None or queue is None:
                return None
            return QdiscStats(queue[1], queue[0], queue[2], basic[0], basic[1])
        off += (length + 3) & ~3
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
            for kind, _seq, start, end in _messages(self._buf, n):
                if kind in (RTM_NEWLINK, RTM_DELLINK):
                    out.append((kind == RTM_DELLINK, parse_link(self._buf, start, end)))

    def close(self) -> None:
        self.sock.close()
