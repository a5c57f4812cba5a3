"""Egress queue readings from the kernel: a switch port's qdisc backlog is the
switch's port queue (docs/design.md §3), so this is the ground truth for queueing.

One netlink socket per namespace is kept open: opening one costs far more
than a dump, and callers sample many times a second.
"""
from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute

ROOT_HANDLE = 0x10000  # HTB root "1:" on every emulated port


@dataclass(frozen=True)
class QueueReading:
    backlog_bytes: int
    backlog_packets: int
    drops: int
    sent_bytes: int
    sent_packets: int


class QdiscReader:
    """Reads the root qdisc of ports in one namespace."""

    def __init__(self, netns: str):
        self.netns = netns
        self._ipr = IPRoute(netns=netns, flags=0)  # flags=0: never create a missing namespace
        self._index: dict[str, int] = {}

    def _ifindex(self, ifname: str) -> int:
        if ifname not in self._index:
            found = self._ipr.link_lookup(ifname=ifname)
            if not found:
                raise LookupError(f"no interface {ifname} in namespace {self.netns}")
            self._index[ifname] = found[0]
        return self._index[ifname]

    def read(self, ifname: str) -> QueueReading:
        index = self._ifindex(ifname)
        for qdisc in self._ipr.get_qdiscs(index=index):
            if qdisc["handle"] != ROOT_HANDLE:
                continue
            stats = dict(qdisc.get_attr("TCA_STATS2")["attrs"])
            basic, queue = stats["TCA_STATS_BASIC"], stats["TCA_STATS_QUEUE"]
            return QueueReading(queue["backlog"], queue["qlen"], queue["drops"],
                                basic["bytes"], basic["packets"])
        raise LookupError(f"no root qdisc 1: on {ifname} in namespace {self.netns}")

    def class_bytes(self, ifname: str) -> dict[int, int]:
        """Bytes sent per HTB class of a port: {classid: bytes} (bands are 1:10, 1:11, ...)."""
        index = self._ifindex(ifname)
        out = {}
        for cls in self._ipr.get_classes(index=index):
            stats = dict(cls.get_attr("TCA_STATS2")["attrs"])
            out[cls["handle"]] = stats["TCA_STATS_BASIC"]["bytes"]
        return out

    def close(self) -> None:
        self._ipr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
