"""Link emulation on one egress interface, applied in one place (like Mininet's addLink(bw=)).

    htb 1: default 10                 (handles in hex, as tc prints them)
      class 1:1                       rate = ceil = link rate
        class 1:10, 1:11, ...         band b: rate = link * w_b / sum(w), ceil = link
          bfifo 10:, 11:, ...         limit = queue.limit bytes

The data path picks band b by setting skb->priority to classid 1:(0x10+b);
anything else lands in band 0. The bfifo backlog is the switch port's queue.
"""
from __future__ import annotations

from pyroute2.netlink.rtnl.tcmsg import plugins, sched_pfifo

from .params import Queue

# pyroute2 has no bfifo plugin; bfifo's options (tc_fifo_qopt: a byte limit)
# are laid out exactly like pfifo's (a packet limit).
plugins.setdefault("bfifo", sched_pfifo)

ROOT = 0x10000  # 1:
PARENT_CLASS = 0x10001  # 1:1
FIRST_BAND = 0x10  # band b is class 1:(0x10+b) with a bfifo (0x10+b):


def band_classid(band: int) -> int:
    return ROOT | (FIRST_BAND + band)


def band_qdisc_handle(band: int) -> int:
    return (FIRST_BAND + band) << 16


def apply(ipr, index: int, rate_bps: int, mtu: int, queue: Queue) -> None:
    """Install HTB + per-band bfifo as the root qdisc of interface `index`."""
    frame = mtu + 14  # HTB counts the Ethernet header
    # pyroute2 takes integer rates as bytes/s (strings like "100mbit" become floats).
    rate = rate_bps // 8
    common = {"burst": queue.burst, "cburst": queue.cburst, "mtu": frame}
    ipr.tc("add", "htb", index, ROOT, default=FIRST_BAND)
    # An explicit quantum everywhere: HTB would otherwise derive it from r2q and warn at high rates.
    ipr.tc("add-class", "htb", index, PARENT_CLASS, parent=ROOT, rate=rate, ceil=rate,
           quantum=queue.quantum or frame, **common)
    total, lightest = sum(queue.bands), min(queue.bands)
    for band, weight in enumerate(queue.bands):
        ipr.tc("add-class", "htb", index, band_classid(band), parent=PARENT_CLASS,
               rate=max(1, rate * weight // total), ceil=rate,
               quantum=(queue.quantum or frame) * weight // lightest, **common)
        ipr.tc("add", "bfifo", index, band_qdisc_handle(band), parent=band_classid(band), limit=queue.limit)
