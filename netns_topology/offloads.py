"""``ethtool -K IFACE tso off gso off gro off`` without a process per
interface: one ETHTOOL_SFEATURES ioctl (pyroute2's ethtool structures) on a
socket of the interface's namespace.

ethtool maps "tso" to every ``tx-tcp*-segmentation`` feature, "gso" to
``tx-generic-segmentation`` and "gro" to ``rx-gro``; the kernel names its
features once for all devices (ETH_SS_FEATURES), so the request is built
once per process and reused for every interface.
"""
from __future__ import annotations

import ctypes
import fcntl
import fnmatch
import socket
import threading

from pyroute2.ethtool.ioctl import (ETHTOOL_SFEATURES, IFNAMSIZ, SIOCETHTOOL, EthtoolSfeatures,
                                    IfReq, IoctlEthtool, feature_bits_to_blocks)

#: the features `ethtool -K ... tso off gso off gro off` turns off
OFF = ("tx-tcp*-segmentation", "tx-generic-segmentation", "rx-gro")
#: ETHTOOL_SFEATURES's positive result: some wish could not be met (a fixed
#: feature); the features above are never fixed on a veth
_ETHTOOL_F_WISH = 1

_request: EthtoolSfeatures | None = None
_lock = threading.Lock()


def _features_off(sock: socket.socket, ifname: str) -> EthtoolSfeatures:
    global _request
    with _lock:
        if _request is None:
            probe = IoctlEthtool()
            try:
                probe.sock.close()
                probe.sock = sock     # the interface's namespace
                probe.change_ifname(ifname)
                names = probe.get_stringset()
            finally:
                probe.sock = None
            req = EthtoolSfeatures(cmd=ETHTOOL_SFEATURES, size=feature_bits_to_blocks(len(names)))
            matched = 0
            for bit, name in enumerate(names):
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in OFF):
                    req.features[bit // 32].changed |= 1 << (bit % 32)   # valid; requested 0: off
                    matched += 1
            if matched < len(OFF):
                raise OSError(f"the kernel names no feature for some of {', '.join(OFF)}")
            _request = req
        return _request


def disable(sock: socket.socket, ifname: str) -> None:
    """Turn TSO, GSO and GRO off on ``ifname``, in ``sock``'s namespace."""
    req = _features_off(sock, ifname)
    ifreq = IfReq()
    name = ifname.encode()
    if len(name) >= IFNAMSIZ:
        raise ValueError(f"interface name {ifname!r} is longer than {IFNAMSIZ - 1} bytes")
    ifreq.ifr_name = (ctypes.c_uint8 * IFNAMSIZ)(*name.ljust(IFNAMSIZ, b"\0"))
    ifreq.sfeatures = ctypes.pointer(req)
    result = fcntl.ioctl(sock, SIOCETHTOOL, ifreq)
    if result and result & ~_ETHTOOL_F_WISH:
        raise OSError(f"ethtool features of {ifname}: the kernel answered {result:#x}")
