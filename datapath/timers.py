"""Scheme and agent timers that follow the link rate (docs/schemes.md,
"Timers follow the link rate").

Every timer is a multiple of one unit, the fabric's **frame slot** S: the
time the slowest link a switch chooses among (a member of a multipath
forwarding group; leaf uplinks on a leaf-spine) takes to send one full
frame -- the hosts' MTU plus the 14-byte Ethernet header, as HTB counts
it -- rounded up to a whole ``SLOT_GRID_US``. At 100 Mbit/s and MTU 1500
that is 1514 B = 121.12 us -> 125 us, and every rule below gives exactly
the value the fabric used before timers followed the rate:

================================  =========================  ===========
timer                             rule                       100 Mbit/s
================================  =========================  ===========
flowlet gap (LetFlow, CONGA)      4 x max(S, base RTT)       500 us
CONGA T_dre                       1 S                        125 us
CONGA tau = T_dre / alpha         8 S (alpha = 1/8 kept)     1 ms
CONGA remote-metric age           160 S                      20 ms
agent window T (TaLB's PCM)       max(40 S, 5 ms)            5 ms
DRILL                             no timer (per packet)      --
================================  =========================  ===========

An explicit value always wins: ``talb scheme NAME --param flowlet_us=..``
(dre_us, age_us) writes the switch's config, ``--window-ms`` sets the
agent's window; the derived values are what a testbed starts with
(datapath/fabric.py) and what an agent started without a window uses
(agent/daemon.py). ``--param flowlet_us=auto`` goes back to the derived
value.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from datapath.schemes import registry as scheme_registry

#: HTB counts the Ethernet header (docs/design.md §3): a full frame is MTU + 14.
ETH_HEADER_BYTES = 14
#: The slot is rounded up to this grid: config fields are whole microseconds,
#: and rounding up never makes a timer shorter than its multiple of the
#: frame time (121.12 us -> 125 us at 100 Mbit/s, as docs/schemes.md's T_dre).
SLOT_GRID_US = 5
#: Base RTT of a leaf-spine-leaf path on veth, unloaded: 60-90 us measured
#: (docs/design.md §9); the upper end, so that the flowlet gap outlasts it.
BASE_RTT_US = 90
#: Multiples of the slot (docs/schemes.md gives the reason for each).
FLOWLET_SLOTS = 4
CONGA_DRE_SLOTS = 1
CONGA_ALPHA_SHIFT = 3           # alpha = 1/8: tau = 8 T_dre = 8 slots
CONGA_AGE_SLOTS = 160
WINDOW_SLOTS = 40
#: The agent's shortest derived window: its CPU cost (agent/config.py,
#: DEFAULT_WINDOW_S) -- faster links keep 5 ms windows.
WINDOW_FLOOR_US = 5_000
#: ``talb scheme --param`` keys of the timers -> the Timers field they follow:
#: the parameters a scheme declares with ``timer=`` (datapath/schemes/<name>.py)
PARAM_FIELDS = {p.name: p.timer for s in scheme_registry.SCHEMES for p in s.params if p.timer}
#: The parameters' ranges (their declarations): a derived value is clamped
#: into them (only links far below 1 Mbit/s reach the top).
_TOP = {p.timer: p.hi for s in scheme_registry.SCHEMES for p in s.params if p.timer}
FLOWLET_MAX_US = _TOP["flowlet_us"]
DRE_MAX_US = _TOP["conga_dre_us"]
AGE_MAX_US = _TOP["conga_age_us"]
WINDOW_MAX_US = 10_000_000


@dataclass(frozen=True)
class Timers:
    """The derived timers of one fabric, and what they were derived from."""

    rate_bps: int            # the slowest multipath link
    frame_bytes: int         # hosts' MTU + 14
    frame_us: float          # frame_bytes at rate_bps
    slot_us: int             # frame_us rounded up to SLOT_GRID_US
    flowlet_us: int
    conga_dre_us: int
    conga_alpha_shift: int
    conga_age_us: int
    window_us: int

    @property
    def conga_tau_us(self) -> int:
        return self.conga_dre_us << self.conga_alpha_shift

    @property
    def window_s(self) -> float:
        return self.window_us / 1e6

    def to_dict(self) -> dict:
        d = asdict(self)
        d["frame_us"] = round(self.frame_us, 3)
        d["conga_tau_us"] = self.conga_tau_us
        d["window_s"] = self.window_s
        d["rules"] = {
            "slot": f"frame time ({self.frame_bytes} B at the slowest multipath link) "
                    f"rounded up to {SLOT_GRID_US} us",
            "flowlet_us": f"{FLOWLET_SLOTS} x max(slot, base RTT {BASE_RTT_US} us)",
            "conga_dre_us": f"{CONGA_DRE_SLOTS} slot",
            "conga_tau_us": f"{1 << CONGA_ALPHA_SHIFT} slots (alpha = 2^-{CONGA_ALPHA_SHIFT})",
            "conga_age_us": f"{CONGA_AGE_SLOTS} slots",
            "window_us": f"max({WINDOW_SLOTS} slots, {WINDOW_FLOOR_US} us)",
        }
        return d


def frame_time_us(rate_bps: int, mtu: int) -> float:
    """Microseconds a full frame (``mtu`` + 14 bytes) takes at ``rate_bps``."""
    if rate_bps <= 0:
        raise ValueError(f"rate: must be > 0 bit/s, got {rate_bps}")
    return (mtu + ETH_HEADER_BYTES) * 8 * 1e6 / rate_bps


def frame_slot_us(rate_bps: int, mtu: int) -> int:
    """The frame time rounded up to a whole ``SLOT_GRID_US`` (at least one)."""
    # a hair below the grid point is float noise, not a frame time above it
    grid = math.ceil(frame_time_us(rate_bps, mtu) / SLOT_GRID_US - 1e-9)
    return max(1, grid) * SLOT_GRID_US


def derive(rate_bps: int, mtu: int = 1500) -> Timers:
    """Every timer for a fabric whose slowest multipath link runs at
    ``rate_bps`` and whose hosts send ``mtu``-byte packets."""
    slot = frame_slot_us(rate_bps, mtu)
    return Timers(
        rate_bps=int(rate_bps), frame_bytes=mtu + ETH_HEADER_BYTES,
        frame_us=frame_time_us(rate_bps, mtu), slot_us=slot,
        flowlet_us=min(FLOWLET_SLOTS * max(slot, BASE_RTT_US), FLOWLET_MAX_US),
        conga_dre_us=min(CONGA_DRE_SLOTS * slot, DRE_MAX_US),
        conga_alpha_shift=CONGA_ALPHA_SHIFT,
        conga_age_us=min(CONGA_AGE_SLOTS * slot, AGE_MAX_US),
        window_us=min(max(WINDOW_SLOTS * slot, WINDOW_FLOOR_US), WINDOW_MAX_US))


def slowest_multipath_rate(topo) -> int:
    """The rate of the slowest link that is up and a member of some switch's
    multipath forwarding group (where a scheme chooses, and a flow's packets
    are spaced by that link); without any: the slowest fabric link, else the
    slowest link."""
    rates = {}
    for sw in topo.switches:
        by_name = {p.name: p for p in topo.ports(sw.name)}
        for members in topo.forwarding_groups(sw.name).values():
            if len(members) > 1:
                rates.update({(sw.name, n): by_name[n].rate_bps for n in members})
    if rates:
        return min(rates.values())
    links = [link for link in topo.links if link.up] or list(topo.links)
    fabric = [link.rate_bps for link in links if link.kind == "fabric"]
    if fabric:
        return min(fabric)
    if links:
        return min(link.rate_bps for link in links)
    return topo.link_rate


def for_topology(topo) -> Timers:
    """The timers of a :class:`netns_topology.Topo`."""
    return derive(slowest_multipath_rate(topo), topo.mtu)


def for_prefix(prefix: str) -> Timers | None:
    """The timers of testbed ``prefix`` (from its state file), or None when
    no testbed of that prefix is up (or its state is not readable)."""
    from netns_topology.state import TestbedError, load_topology_of

    try:
        return for_topology(load_topology_of(prefix))
    except (TestbedError, OSError):   # none up; not root (the caller says so)
        return None
