"""Send tensors over an ordinary TCP socket, tagged with the TaLB option.

    from workload.tensor_sender import TensorSender
    with TensorSender(sock) as tx:            # sock: a connected IPv4 TCP socket
        rec = tx.send(tensor_bytes, layer=3)  # -> TensorRecord(tensor_id, ...)

The receiver reads the plain byte stream: nothing is added to it. What makes
the packets carry the TaLB header (docs/design.md §4, "How a host knows
tensor boundaries (TCP)") is the host's TC egress program (bpf/host_tc.c,
attached by ``talb testbed up``). Before each tensor's bytes are written to
the socket, this library puts a descriptor ``{stream_start, stream_end,
tensor_id, layer, len_pkts, mss}`` into the flow's ring, a pinned map of the
host; the program turns each data segment's sequence number into a stream
offset (it learned the ISN from the SYN) and tags the segment with the
descriptor that owns its first byte. Retransmissions carry the same tag.

The ring (``flow_rings``: 4-tuple -> HOST_RING_SLOTS descriptors) is
rewritten as one map value per tensor; one TensorSender per socket, and no
other thread writing to that socket meanwhile. Plain writes to the socket
between tensors are fine (untagged: the stream offset is read from the kernel
at every send; best with MSG_EOR, see below). Limits:

* Ring overrun. A slot is reused only once the kernel reports every byte of
  its tensor acknowledged (``tcpi_bytes_acked``; acked bytes are never
  retransmitted), so a retransmission always finds its descriptor. With all
  HOST_RING_SLOTS slots holding unacknowledged tensors, ``send`` waits up to
  ``overrun_timeout`` seconds, then raises :class:`RingOverrunError` (the
  tensor is not sent). This also bounds a flow to HOST_RING_SLOTS tensors in
  flight.
* Segment boundaries. Each tensor is written with MSG_EOR, which tells TCP
  never to append later bytes to the tensor's last skb (neither when queueing
  nor when collapsing retransmissions), so every tensor starts a segment and
  is cut at MSS boundaries from its first byte: tensor_len = ceil(bytes /
  MSS) (TCP_MAXSEG when the tensor is queued), pkt_idx = (offset - start) //
  MSS and LAST on the packet with the tensor's last byte are then exact (the
  switches end a tensor on LAST or on tensor_len packets). Without MSG_EOR
  TCP coalesces the tail of one tensor with the head of the next; the program
  tags such a segment with the tensor owning its first byte (docs/design.md
  §4), and a small tensor could vanish inside its predecessor's segment. Not
  exact: an MSS change (PMTU) under a tensor, and plain writes just before a
  tensor without MSG_EOR (their last segment may take the tensor's head,
  which then leaves untagged).
* tensor_len is 16 bits: at most 65535 packets per tensor (~94 MB at MSS
  1448); partition larger tensors.

tcpi_bytes_acked counts our SYN on connect()ed sockets but not on accept()ed
ones (checked on kernel 6.18: 1 and 0 after the handshake); the program
records which side opened the flow with its ISN (HOST_ISN_ACTIVE), and the
library subtracts the SYN accordingly.
"""
from __future__ import annotations

import array
import errno
import fcntl
import ipaddress
import json
import math
import os
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from common import paths
from common.excerpt import shown
from datapath import bpf_syscall as sc
from datapath.host_maps import (HOST_MAX_TAGGED_FLOWS, HOST_RING_SLOTS, HostDesc, HostFlowKey,
                                HostMaps, HostRing)
from workload.id_slots import DEFAULT_CLAIM_TIMEOUT, SlotIds, host_ids, slot_dir
from workload.snowflake import Snowflake

__all__ = [
    "TensorSender", "TensorRecord", "HostLocation", "TensorSenderError", "RingOverrunError",
    "locate_host", "MAX_TENSOR_PKTS",
]

MAX_TENSOR_PKTS = 0xFFFF        # tensor_len is a 16-bit field (docs/design.md §4)
_U32 = 0xFFFFFFFF
# struct tcp_info (include/uapi/linux/tcp.h): __u64 tcpi_bytes_acked at byte 120.
_TCP_INFO_LEN = 128
_TCPI_BYTES_ACKED = 120
_SIOCGSKNS = 0x894C             # socket -> fd of its network namespace
_NETNS_DIR = Path("/run/netns")
_POLL_S = 0.001


class TensorSenderError(RuntimeError):
    """The socket or the host cannot send tagged tensors; the message says why."""


class RingOverrunError(TensorSenderError):
    """Every descriptor slot of the flow's ring holds a tensor that is not
    fully acknowledged yet, and ``overrun_timeout`` passed."""


@dataclass(frozen=True)
class TensorRecord:
    """What was sent. Stream offsets count the connection's payload bytes
    from 0 (not modulo 2^32); the tensor is [stream_start, stream_end).
    ``t_kernel_ns``: ``time.monotonic_ns()`` just before the tensor's first
    byte was handed to the kernel (its first ``send`` call, after any wait
    for a free ring slot): where the socket buffer's wait begins."""

    tensor_id: int
    layer: int
    nbytes: int
    len_pkts: int
    mss: int
    stream_start: int
    stream_end: int
    t_kernel_ns: int | None = None


@dataclass(frozen=True)
class HostLocation:
    """A host of a running testbed: where its data path's maps are pinned."""

    prefix: str
    host: str
    index: int          # position among the topology's hosts
    pin_dir: Path


def _netns_id(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _socket_netns(sock: socket.socket) -> tuple[int, int]:
    """(dev, inode) of the network namespace the socket lives in (which may
    not be the calling thread's)."""
    fd = fcntl.ioctl(sock.fileno(), _SIOCGSKNS)
    try:
        return _netns_id(fd)
    finally:
        os.close(fd)


def locate_host(sock: socket.socket) -> HostLocation:
    """The testbed host whose network namespace holds ``sock``: every
    ``/run/talb/*/state.json`` (written by ``talb testbed up``; /run stays
    visible under ``ip netns exec``) names a prefix and its hosts, whose
    namespaces are ``/run/netns/<prefix>-<host>``."""
    from netns_topology import topology_from_dict

    want = _socket_netns(sock)
    for state_file in sorted(paths.RUN_DIR.glob("*/state.json")):
        try:
            state = json.loads(state_file.read_text())
            prefix = paths.check_prefix(state["prefix"])
            hosts = topology_from_dict(state["topology"]).hosts
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not a testbed's: not ours to judge
        for index, host in enumerate(hosts):
            try:
                fd = os.open(_NETNS_DIR / paths.netns_name(prefix, host.name), os.O_RDONLY)
            except OSError:
                continue
            try:
                if _netns_id(fd) == want:
                    return HostLocation(prefix, host.name, index, paths.pin_dir(prefix, host.name))
            finally:
                os.close(fd)
    for attach_file in sorted(paths.RUN_DIR.glob("*/attach.json")):  # `talb attach`
        try:
            state = json.loads(attach_file.read_text())
            name = paths.check_prefix(state["name"])
            hosts = [(h, rec["netns"], rec["pin"]) for h, rec in state["hosts"].items()]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        for index, (host, netns, pin) in enumerate(hosts):
            try:
                fd = os.open(_NETNS_DIR / netns, os.O_RDONLY)
            except (OSError, TypeError):
                continue
            try:
                if _netns_id(fd) == want:
                    return HostLocation(name, host, index, Path(pin))
            finally:
                os.close(fd)
    raise TensorSenderError(
        f"no TaLB host program found for socket {_describe(sock)}: its network namespace is not "
        f"a host of any testbed under {paths.RUN_DIR} (`talb testbed up` builds one and attaches "
        f"the host program to every host); for a host set up by hand, pass pin_dir=")


def _describe(sock: socket.socket) -> str:
    try:
        laddr = "%s:%d" % sock.getsockname()[:2]
    except OSError:
        laddr = "?"
    try:
        raddr = "%s:%d" % sock.getpeername()[:2]
    except OSError:
        raddr = "(not connected)"
    return f"{laddr} -> {raddr} (fd {sock.fileno()})"


_generators: dict[int, Snowflake] = {}
_generators_lock = threading.Lock()


def _shared_generator(worker_id: int) -> Snowflake:
    """One default-layout generator per explicit worker id in this process,
    so that two senders given one worker id never make the same id."""
    with _generators_lock:
        if worker_id not in _generators:
            _generators[worker_id] = Snowflake(worker_id)
        return _generators[worker_id]


def _host_ids(location: HostLocation | None, key: HostFlowKey, timeout: float) -> SlotIds:
    if location is not None:
        return host_ids(slot_dir(location.prefix, location.host), timeout=timeout,
                        label=f"host {location.host} of testbed {location.prefix}")
    address = str(ipaddress.IPv4Address(key.saddr))
    return host_ids(slot_dir(None, None, address), timeout=timeout, label=f"host {address}")


class TensorSender:
    """Tags the tensors sent on one connected IPv4 TCP socket.

    ``pin_dir``: the host's pinned maps (default: found from the socket's
    network namespace, see :func:`locate_host`). Tensor ids: by default
    from a worker slot this process claims on the host (workload/id_slots.py:
    unique across every process and connection of the host; waits up to
    ``ids_timeout`` seconds for a free slot, then raises IdSlotsExhausted).
    ``worker_id``: a Snowflake worker id of your choosing instead, which
    bypasses the allocator (two processes given one worker id make the same
    ids); ``ids``: a generator of your own (anything with ``next_id()``).
    ``overrun_timeout``: seconds ``send`` waits for a free ring slot (None:
    forever).
    """

    def __init__(self, sock: socket.socket, *, worker_id: int | None = None,
                 pin_dir: str | os.PathLike | None = None, ids: Snowflake | None = None,
                 overrun_timeout: float | None = 10.0,
                 ids_timeout: float = DEFAULT_CLAIM_TIMEOUT):
        if not isinstance(sock, socket.socket):
            raise TypeError(f"sock: must be a socket.socket, got {type(sock).__name__}")
        if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM:
            raise TensorSenderError(
                f"sock: must be an IPv4 TCP socket (the TaLB header is an IPv4 option), got "
                f"family {sock.family!r}, type {sock.type!r}")
        try:
            sock.getpeername()
        except OSError:
            raise TensorSenderError(f"sock: not connected ({_describe(sock)}); connect() or "
                                    "accept() first") from None
        if overrun_timeout is not None and not overrun_timeout >= 0:
            raise ValueError(f"overrun_timeout: must be >= 0 seconds or None, got {shown(overrun_timeout)}")
        self.sock = sock
        self.key = HostFlowKey.of_socket(sock)
        self.overrun_timeout = overrun_timeout
        location = None
        if pin_dir is None or (worker_id is None and ids is None):
            try:
                location = locate_host(sock)
            except TensorSenderError:
                if pin_dir is None:
                    raise
        self.pin_dir = Path(pin_dir) if pin_dir is not None else location.pin_dir
        if ids is None:
            if worker_id is None:
                ids = _host_ids(location, self.key, ids_timeout)
                ids.claim()  # fail here, not at the first send, when the host is full
            else:
                ids = _shared_generator(worker_id)
        elif worker_id is not None and worker_id != getattr(ids, "worker_id", None):
            raise ValueError(f"worker_id: {worker_id} differs from ids.worker_id="
                             f"{getattr(ids, 'worker_id', None)}; "
                             "give one or the other")
        self.ids = ids
        self._closed = False
        try:
            self.maps = HostMaps(self.pin_dir)
        except FileNotFoundError as exc:
            raise TensorSenderError(f"socket {_describe(sock)}: {exc}") from None
        try:
            isn = self.maps.flow_isn.get(self.key)
            if isn is None:
                raise TensorSenderError(
                    f"socket {_describe(sock)}: the host program never saw this connection open "
                    f"(no ISN for {self.key} in {self.pin_dir / 'flow_isn'}), so its packets cannot "
                    "be tagged: open connections after the host program is attached (`talb "
                    "testbed up` attaches it before anything runs)")
            # tcpi_bytes_acked counts our SYN only when we sent it (connect()).
            self._syn_acked = 1 if isn.active else 0
            self._ring = HostRing()
            self._slots: list[TensorRecord | None] = [None] * HOST_RING_SLOTS
            self._write_ring(sc.BPF_NOEXIST)  # claim the flow: one writer per ring
        except BaseException:
            self.maps.close()
            raise

    # -- kernel state of the socket --
    def _bytes_acked(self) -> int:
        """Stream bytes the peer has acknowledged (cumulatively)."""
        raw = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
        (acked,) = struct.unpack_from("=Q", raw, _TCPI_BYTES_ACKED)
        return max(acked - self._syn_acked, 0)

    def _outq(self) -> int:
        buf = array.array("i", [0])
        fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, buf)  # SIOCOUTQ: write_seq - snd_una
        return buf[0]

    def unacked_bytes(self) -> int:
        """Bytes written to the socket and not yet acknowledged by the peer
        (SIOCOUTQ): 0 when everything sent so far has been acknowledged
        (the pool connection model's "idle", workload/patterns/connections.py)."""
        return self._outq()

    def stream_offset(self) -> int:
        """Offset of the next byte written to the socket: acked + unacked
        bytes, from two system calls. An ACK landing between them moves its
        bytes from one count to the other after the first was read, and the
        sum comes out short by them; two readings in a row can be short by
        the same amount (equal ACKs), so agreeing sums prove nothing (a
        tensor described that way began inside the bytes before it, whose
        last packet then carried its tag: docs/talb-decisions.md). So the
        acked count is read again after the queue: unchanged, no ACK came in
        between (the kernel moves bytes_acked and snd_una together, under
        the socket lock), and the sum is exact."""
        acked = self._bytes_acked()
        while True:
            outq = self._outq()
            again = self._bytes_acked()
            if again == acked:
                return acked + outq
            acked = again

    # -- ring --
    def _free_slot(self, layer: int, nbytes: int, start: int) -> int:
        """A slot for the next tensor: slots of fully acknowledged tensors
        are emptied; with none free, wait for the oldest tensor's ACK."""
        deadline = None if self.overrun_timeout is None else time.monotonic() + self.overrun_timeout
        while True:
            acked = self._bytes_acked()
            for i, rec in enumerate(self._slots):
                if rec is not None and rec.stream_end <= acked:
                    self._slots[i] = None
                    self._ring.desc[i] = HostDesc()
            if None in self._slots:
                return self._slots.index(None)
            if deadline is not None and time.monotonic() >= deadline:
                oldest = min((r for r in self._slots if r is not None), key=lambda r: r.stream_start)
                raise RingOverrunError(
                    f"socket {_describe(self.sock)}: ring overrun: all {HOST_RING_SLOTS} descriptors "
                    f"hold unacknowledged tensors; the oldest, tensor {oldest.tensor_id:#010x} "
                    f"(layer {oldest.layer}, stream bytes [{oldest.stream_start}, "
                    f"{oldest.stream_end})), is acknowledged only up to byte {acked} after "
                    f"{self.overrun_timeout:g} s, so the next tensor (layer {layer}, {nbytes} bytes "
                    f"at stream byte {start}) was not sent: reusing the slot would leave that "
                    "tensor's retransmissions untagged. Is the receiver reading? "
                    "(overrun_timeout=None waits forever)")
            time.sleep(_POLL_S)

    def _write_ring(self, flags: int = sc.BPF_ANY) -> None:
        try:
            self.maps.flow_rings.set(self.key, self._ring, flags)
        except OSError as exc:
            if exc.errno == errno.EEXIST:
                raise TensorSenderError(
                    f"socket {_describe(self.sock)}: another TensorSender already describes this "
                    f"connection ({self.key} in {self.pin_dir / 'flow_rings'}); one per socket: "
                    "use that one, or close() it first") from None
            if exc.errno == errno.E2BIG:
                raise TensorSenderError(
                    f"socket {_describe(self.sock)}: flow_rings in {self.pin_dir} is full "
                    f"(HOST_MAX_TAGGED_FLOWS={HOST_MAX_TAGGED_FLOWS} tagged flows on this host); "
                    "close() senders that are done") from exc
            raise

    # -- API --
    def send(self, data, layer: int) -> TensorRecord:
        """Send one tensor (any bytes-like object) of ``layer`` (0..255, 0 =
        front layer = highest priority); returns once every byte is in the
        socket's send buffer. Blocks like ``sendall`` (and raises what it
        raises: a tensor cut short keeps the descriptor of the bytes that
        went out). Written with MSG_EOR: the tensor's bytes share no
        segment with the next write."""
        try:
            view = memoryview(data).cast("B")
        except TypeError:
            raise TypeError(f"data: must be a bytes-like object (bytes, bytearray, memoryview, a "
                            f"contiguous array), got {type(data).__name__}") from None
        nbytes = view.nbytes
        if nbytes == 0:
            raise ValueError("data: empty tensor (0 bytes); a tensor has at least one byte")
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= 255:
            raise ValueError(f"layer: must be an integer 0..255 (8-bit tensor_layer), got {shown(layer)}")
        if self._closed:
            raise TensorSenderError(f"socket {_describe(self.sock)}: this TensorSender is closed")
        mss = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        len_pkts = math.ceil(nbytes / mss)
        if len_pkts > MAX_TENSOR_PKTS:
            raise ValueError(f"data: {nbytes} bytes are {len_pkts} packets at MSS {mss}, over the "
                             f"16-bit tensor_len ({MAX_TENSOR_PKTS} packets); partition the tensor")
        start = self.stream_offset()
        slot = self._free_slot(layer, nbytes, start)
        tensor_id = self.ids.next_id()
        self._ring.desc[slot] = HostDesc(start & _U32, (start + nbytes) & _U32, tensor_id,
                                         len_pkts, mss, layer)
        self._write_ring()  # before the first byte leaves
        rec = TensorRecord(tensor_id, layer, nbytes, len_pkts, mss, start, start + nbytes,
                           time.monotonic_ns())
        self._slots[slot] = rec
        sent = 0
        try:
            while sent < nbytes:
                sent += self.sock.send(view[sent:], socket.MSG_EOR)
        except BaseException:
            if sent:
                self._slots[slot] = TensorRecord(rec.tensor_id, layer, sent, len_pkts, mss,
                                                 start, start + sent, rec.t_kernel_ns)
                self._ring.desc[slot].stream_end = (start + sent) & _U32
            else:
                self._slots[slot] = None
                self._ring.desc[slot] = HostDesc()
            self._write_ring()
            raise
        return rec

    def close(self, *, wait: bool = True) -> None:
        """Remove the flow's ring. With ``wait`` (default), first wait (up
        to ``overrun_timeout``) until every tensor sent is acknowledged, so
        that no retransmission of it leaves untagged. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if wait and self.sock.fileno() >= 0:
                last = max((r.stream_end for r in self._slots if r is not None), default=0)
                deadline = None if self.overrun_timeout is None else \
                    time.monotonic() + self.overrun_timeout
                while self._bytes_acked() < last and \
                        (deadline is None or time.monotonic() < deadline):
                    time.sleep(_POLL_S)
        except OSError:
            pass  # socket closed or reset: nothing left to retransmit
        finally:
            self.maps.flow_rings.delete(self.key)
            self.maps.close()

    def __enter__(self) -> "TensorSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TensorSender({self.key}, pin_dir={str(self.pin_dir)!r}, ids={self.ids!r})"
