"""Link emulation on one egress interface, applied in one place (like Mininet's addLink(bw=)).

    htb 1: default 10                 (handles in hex, as tc prints them)
      class 1:1                       rate = ceil = link rate
        class 1:10, 1:11, ...         band b: rate = link * w_b / sum(w), ceil = link
          bfifo 10:, 11:, ...         limit = queue.limit bytes

The data path picks band b by setting skb->priority to classid 1:(0x10+b);
anything else lands in band 0. The bfifo backlog is the switch port's queue.

How a link is paced (the topology's ``shaping``; docs/performance.md (f)):

* ``true`` (exact): HTB as above. A backlogged class sends while it has
  tokens and then arms its watchdog (an hrtimer) for the next packet's
  tokens, so every packet leaves when the link would have serialised it:
  about one timer per packet per hop at the rates used here. In a VM a
  timer costs an exit to program it and one to take its interrupt: that,
  not the load balancer, is where a shaped fabric's CPU goes.
* ``batched``: the same tree with sch_htb's ``htb_hysteresis`` on, a
  module parameter and so *machine-wide*: a class that may send goes on
  until it owes cburst bytes, then waits until it owes nothing. Burst and
  cburst are installed at half the topology's, so a link idle for long
  still sends at most ``queue.burst`` bytes back to back, and a backlogged
  one sends clumps of up to burst/2 bytes at its average rate: one timer
  per clump. Rates, byte limits and drops stay as the topology states;
  packet spacing within a clump does not (a flowlet or DRE timer shorter
  than burst/2 at the link rate sees each clump apart). The builder sets
  the parameter; `talb testbed down` of the last batched testbed clears it.
  An exact testbed is refused while it is set; every other HTB on the
  machine (`talb attach`'s bands, Mininet's TCLinks) is batched too meanwhile.
* ``false``: no qdisc at all (veth's noqueue): raw forwarding speed.

Queueing (docs/experiments.md, "Queueing"): a running fabric's switch ports
can be switched between the topology's queue (``bands``) and one FIFO per
port holding the same bytes (``fifo``: one band of limit x bands) and back,
by :func:`set_switch_queues`. Hosts keep the topology's queue either way.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from pyroute2.netlink.rtnl.tcmsg import plugins, sched_pfifo

from common.excerpt import shown

from .params import BATCHED, Queue

# pyroute2 has no bfifo plugin; bfifo's options (tc_fifo_qopt: a byte limit)
# are laid out exactly like pfifo's (a packet limit).
plugins.setdefault("bfifo", sched_pfifo)

ROOT = 0x10000  # 1:
PARENT_CLASS = 0x10001  # 1:1
FIRST_BAND = 0x10  # band b is class 1:(0x10+b) with a bfifo (0x10+b):
TC_H_ROOT = 0xFFFFFFFF
#: how a fabric's switch ports queue: the topology's queue (its priority
#: bands), or one FIFO per port with the same total bytes
QUEUEINGS = ("bands", "fifo")


def band_classid(band: int) -> int:
    return ROOT | (FIRST_BAND + band)


def band_qdisc_handle(band: int) -> int:
    return (FIRST_BAND + band) << 16


#: sch_htb's mode hysteresis: machine-wide, read at every dequeue
HYSTERESIS = Path("/sys/module/sch_htb/parameters/htb_hysteresis")


def hysteresis() -> bool:
    """Whether sch_htb's htb_hysteresis is on (False if this kernel has none)."""
    try:
        return HYSTERESIS.read_text().strip() != "0"
    except FileNotFoundError:
        return False


def set_hysteresis(on: bool) -> None:
    if on and not HYSTERESIS.exists():
        raise OSError(f"shaping: batched needs sch_htb's htb_hysteresis parameter, and {HYSTERESIS} "
                      "is not there (HTB not loaded, or a kernel without it)")
    if HYSTERESIS.exists():
        HYSTERESIS.write_text("1" if on else "0")


def batched_queue(queue: Queue) -> Queue:
    """The queue ``batched`` installs: burst and cburst halved (a class in
    hysteresis overdraws by cburst, so after idle it sends up to burst +
    cburst: the topology's burst)."""
    return dataclasses.replace(queue, burst=max(1, queue.burst // 2), cburst=max(1, queue.cburst // 2))


def apply(ipr, index: int, rate_bps: int, mtu: int, queue: Queue, shaping=True) -> None:
    """Install HTB + per-band bfifo as the root qdisc of interface `index`
    (``shaping``: the topology's; ``batched`` halves burst and cburst)."""
    if shaping == BATCHED:
        queue = batched_queue(queue)
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


def fifo_of(queue: Queue) -> Queue:
    """One FIFO holding what the bands hold together: a single band of
    ``limit`` x (number of bands) bytes, the same burst, cburst and quantum.
    A queue with one band is its own FIFO."""
    return dataclasses.replace(queue, limit=queue.limit * len(queue.bands), bands=(1,))


def queue_for(queue: Queue, queueing: str) -> Queue:
    """The switch ports' queue under ``queueing`` (QUEUEINGS) for a topology's ``queue``."""
    if queueing not in QUEUEINGS:
        raise ValueError(f"queueing: one of {', '.join(QUEUEINGS)}, got {shown(queueing)}")
    return queue if queueing == "bands" else fifo_of(queue)


def reinstall(ipr, index: int, rate_bps: int, mtu: int, queue: Queue, shaping=True) -> None:
    """Replace interface ``index``'s root qdisc tree by :func:`apply`'s for
    ``queue`` (the clsact qdisc, where the data path's programs hang, is not
    the root and stays). Packets queued in the old tree are dropped: call it
    on an idle port."""
    try:
        ipr.tc("del", index=index, handle=ROOT, parent=TC_H_ROOT)
    except Exception as exc:  # noqa: BLE001 - only "no root qdisc to delete" is fine
        if getattr(exc, "code", None) not in (2, 22):       # ENOENT, EINVAL: none there
            raise
    apply(ipr, index, rate_bps, mtu, queue, shaping)


def set_switch_queues(topo, prefix: str, queue: Queue) -> int:
    """Reinstall every switch port of testbed ``prefix`` (built from
    ``topo``) with ``queue``, at each port's link rate; hosts' ports are
    left alone. Returns the number of ports done."""
    from pyroute2 import IPRoute

    from common.paths import netns_name

    done = 0
    for sw in topo.switches:
        with IPRoute(netns=netns_name(prefix, sw.name), flags=0) as ipr:
            for port in topo.ports(sw.name):
                found = ipr.link_lookup(ifname=port.name)
                if not found:
                    raise LookupError(f"no interface {port.name} in {netns_name(prefix, sw.name)}")
                reinstall(ipr, found[0], port.rate_bps, topo.switch_mtu, queue, topo.shaping)
                done += 1
    return done
