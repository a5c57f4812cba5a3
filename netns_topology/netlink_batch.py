"""rtnetlink requests to one namespace, sent together: one socket kept open
per namespace, many requests per ``send``, the acks read back in one go.

pyroute2 compiles every request (:class:`pyroute2.IPBatch`: the IPRoute API,
nothing sent). Compiling, not the kernel, is what a request costs (about
1 ms for a veth or an HTB class, against tens of microseconds in the kernel),
and a fabric repeats the same requests: every host's eth0 gets the same
queue, every port is brought up the same way. So each distinct request is
compiled once per process and its bytes reused with a fresh sequence number.
That needs requests that name interfaces by index, never by name: the
builder gives every interface of a new namespace its index (lo is 1).

    batch = NetlinkBatch(sock)            # an AF_NETLINK socket opened in the namespace
    batch.link("add", index=2, ifname="br0", kind="bridge")
    batch.tc("add", "htb", 2, 0x10000, default=0x10)
    batch.flush()                         # NetlinkError naming the first refused request
"""
from __future__ import annotations

import os
import socket
import struct
import threading

from pyroute2 import IPBatch
from pyroute2.netlink import NLMSG_ERROR, nlmsgerr

__all__ = ["NetlinkBatch", "NetlinkError", "open_rtnl_socket", "compiled"]

_HEADER = struct.Struct("=IHHII")   # struct nlmsghdr: len, type, flags, seq, pid
_FLAGS_OFFSET = 6                 # flags (u16), then seq (u32)
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
_TCM_IFINDEX = _HEADER.size + 4   # struct tcmsg: family, pad1, pad2, then ifindex
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
#: requests per send: their acks must fit the socket's receive buffer (an
#: error ack carries the whole request back, an HTB class ~2 KB)
_PER_SEND = 64
_RCVBUF = 1 << 20

_compiler = None
_compiled: dict[tuple, bytes] = {}
_lock = threading.Lock()


class NetlinkError(OSError):
    """The kernel refused a request: errno, the request and the kernel's message."""


def open_rtnl_socket() -> socket.socket:
    """A NETLINK_ROUTE socket in the calling thread's network namespace
    (a socket stays in the namespace it was made in)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)   # the kernel says why it refused
        sock.bind((0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def compiled(method: str, *args, **kwargs) -> bytes:
    """The bytes of ``IPRoute.<method>(*args, **kwargs)`` as pyroute2 would
    send them (sequence number aside), compiled once per process."""
    global _compiler
    key = (method, args, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    with _lock:
        data = _compiled.get(key)
        if data is None:
            if _compiler is None:
                _compiler = IPBatch()
            _compiler.reset()
            getattr(_compiler, method)(*args, **kwargs)
            data = bytes(_compiler.batch)
            if not data:
                raise ValueError(f"{method}{args}: pyroute2 compiled no request")
            _compiled[key] = data
        return data


class NetlinkBatch:
    """Requests queued for one rtnetlink socket; :meth:`flush` sends them
    and raises :class:`NetlinkError` for the first the kernel refused (the
    ones before it are done; the ones after it may be too)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._queue: list[tuple[bytes, str]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._queue)

    def _add(self, method: str, args, kwargs) -> None:
        what = f"{method} {' '.join(map(str, args))} " + \
               " ".join(f"{k}={v}" for k, v in kwargs.items())
        self._queue.append((compiled(method, *args, **kwargs), what.strip()))

    def link(self, *args, **kwargs) -> None:
        self._add("link", args, kwargs)

    def addr(self, *args, **kwargs) -> None:
        self._add("addr", args, kwargs)

    def neigh(self, *args, **kwargs) -> None:
        self._add("neigh", args, kwargs)

    def route(self, *args, **kwargs) -> None:
        self._add("route", args, kwargs)

    def tc(self, *args, **kwargs) -> None:
        self._add("tc", args, kwargs)

    def tc_on(self, indexes, command: str, kind: str, handle: int = 0, **kwargs) -> None:
        """``tc(command, kind, index, handle, **kwargs)`` for each of
        ``indexes``: compiled once, the interface index set in each copy
        (struct tcmsg's tcm_ifindex; the requests differ in nothing else)."""
        indexes = list(indexes)
        if not indexes:
            return
        data = compiled("tc", command, kind, indexes[0], handle, **kwargs)
        if len(data) != _HEADER.unpack_from(data, 0)[0]:
            raise ValueError(f"tc {command} {kind}: more than one message compiled")
        for index in indexes:
            msg = bytearray(data)
            struct.pack_into("=i", msg, _TCM_IFINDEX, index)
            self._queue.append((bytes(msg), f"tc {command} {kind} dev #{index} "
                                             + " ".join(f"{k}={v}" for k, v in kwargs.items())))

    def flush(self) -> int:
        """Send every queued request; the number sent."""
        queue, self._queue = self._queue, []
        for start in range(0, len(queue), _PER_SEND):
            self._send(queue[start:start + _PER_SEND])
        return len(queue)

    def _send(self, chunk: list[tuple[bytes, str]]) -> None:
        buf = bytearray()
        pending: dict[int, str] = {}
        for data, what in chunk:
            # one compiled buffer may hold several messages (pyroute2 never
            # does that for these requests, but every one is acked)
            offset = 0
            while offset < len(data):
                length, _type, flags = _HEADER.unpack_from(data, offset)[:3]
                if flags & NLM_F_DUMP == NLM_F_DUMP:
                    raise ValueError(f"{what}: a dump request has no place in a batch")
                self._seq += 1
                msg = bytearray(data[offset:offset + length])
                # every request acked, so that reading the acks knows when it is done
                struct.pack_into("=HI", msg, _FLAGS_OFFSET, flags | NLM_F_ACK, self._seq)
                pending[self._seq] = what
                buf += msg
                offset += (length + 3) & ~3
        self.sock.send(buf)
        first_error = None
        while pending:
            data = self.sock.recv(_RCVBUF)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, mtype, _flags, seq, _pid = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    break
                if mtype == NLMSG_ERROR and seq in pending:
                    what = pending.pop(seq)
                    code = struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                    if code and first_error is None:
                        first_error = (what, -code, _ext_ack(data[offset:offset + length]))
                offset += (length + 3) & ~3
        if first_error is not None:
            what, code, message = first_error
            text = os.strerror(code) + (f" ({message})" if message else "")
            raise NetlinkError(code, f"{text}: {what}")


def _ext_ack(raw: bytes) -> str:
    """The kernel's extended-ack message of an error ack, or ''."""
    try:
        msg = nlmsgerr(raw)
        msg.decode()
        return msg.get_attr("NLMSGERR_ATTR_MSG") or ""
    except Exception:  # noqa: BLE001 - the errno alone still says what failed
        return ""

