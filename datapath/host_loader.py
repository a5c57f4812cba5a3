"""Load, attach and pin a sending host's data path (bpf/host_tc.c).

    ensure_bpffs()
    dp = HostDatapath("talb-h0", pin_dir("talb", "h0"))
    dp.load()               # compile once (cached) + kernel verify (SCHED_CLS)
    dp.attach(["eth0"])     # clsact + egress bpf filter, direct-action
    dp.pin()                # flow_isn, flow_rings, counters at <pin_dir>/<name>
    dp.close()              # the filter keeps the program, the pins the maps
    ...
    HostDatapath("talb-h0", pin).detach(["eth0"])
    remove_pins(pin)

The program tags the host's outgoing tensor packets with the TaLB IPv4 option
(docs/design.md §4); workload/tensor_sender.py writes the descriptors it
needs into the pinned ``flow_rings``. TCP connections must be opened after
the program is attached (it learns each flow's ISN from its SYN / SYN-ACK).
Same life cycle as datapath/loader.py's SwitchDatapath (datapath/program.py), at
egress instead of ingress.
"""
from __future__ import annotations

from pathlib import Path

from datapath.host_maps import HostMaps
from datapath.program import (  # noqa: F401  (ensure_bpffs, remove_pins: see the example above)
    BPF_SRC_DIR, BpfDatapath, ensure_bpffs, find_filter, remove_pins,
)

__all__ = ["HostDatapath", "HOST_SRC", "HOST_PROG_NAME", "egress_filter",
           "ensure_bpffs", "remove_pins"]   # the last two re-exported from datapath/program.py

HOST_SRC = Path(BPF_SRC_DIR) / "host_tc.c"
HOST_PROG_NAME = "talb_host_tc"


def egress_filter(netns: str | None, ifname: str) -> dict | None:
    """Our bpf filter at clsact egress of ``ifname`` ({'ifname', 'ifindex',
    'name'}), or None if not attached."""
    return find_filter(netns, ifname, "egress", HOST_PROG_NAME)


class HostDatapath(BpfDatapath):
    """The tagging program of one host and its maps (clsact egress).

    ``netns``: the host's network namespace (None: the current one).
    ``pin_dir``: where :meth:`pin` puts the maps (``common.paths.pin_dir(prefix,
    host)``: the library finds them there).

    ``load(reuse_pins=True)`` binds the program to the maps pinned in
    ``pin_dir`` when they all exist: learned ISNs and live rings survive a
    reload, so open connections keep being tagged. Fresh maps start empty.
    """

    SOURCE = HOST_SRC
    PROG_NAME = HOST_PROG_NAME
    MAPS_CLASS = HostMaps
    TC_DIRECTION = "egress"

    def attach(self, ifnames=("eth0",)) -> None:
        """:meth:`BpfDatapath.attach`, to the host's eth0 by default."""
        super().attach(ifnames)

    def detach(self, ifnames=("eth0",), *, missing_ok: bool = True, keep_clsact=()) -> None:
        """:meth:`BpfDatapath.detach`, from the host's eth0 by default."""
        super().detach(ifnames, missing_ok=missing_ok, keep_clsact=keep_clsact)
