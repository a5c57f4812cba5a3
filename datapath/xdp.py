"""The switch data path as XDP programs (`--datapath xdp`): bpf/switch_xdp.c.

The same decision core as the TC data path (bpf/switch_tc.c compiled
against the XDP context, talb/ctx.h), the same maps (SwitchMaps: the
agent, `talb scheme`, `testbed status` work unchanged), loaded as
BPF_PROG_TYPE_XDP and attached in native (driver) mode to every switch
port. For line-rate runs and real NICs, where no emulated queue is wanted.

    dp = XdpSwitchDatapath("talb-leaf1", pin_dir("talb", "leaf1")).load()
    dp.attach(["h0", "spine0"])      # IFLA_XDP, driver mode
    dp.pin(); dp.close()
    ...
    XdpSwitchDatapath("talb-leaf1", pin).detach(["h0", "spine0"])

What XDP mode cannot do (docs/architecture.md, "XDP entry point"), and
:func:`check_scheme` / :func:`check_topology` refuse with an error naming
the option and value:

* a redirected frame skips the egress qdisc (veth's ndo_xdp_xmit puts it
  on the peer's ring): no link shaping (HTB), no port queues, no priority
  bands -- a topology with ``shaping: true`` is refused;
* so no scheme that reads a queue: DRILL (its per-port estimate models
  the port's HTB queue), and TaLB with DRILL as its fallback; the agent's
  ``--pcm-delay measured`` (qdisc backlog) is refused too.

veth delivers an XDP_REDIRECT only to a peer that runs an XDP program
(or has NAPI, which needs GRO: the fabric keeps GRO off), so each host's
interface gets :class:`HostXdpPass` (XDP_PASS), and each host's transmit
checksum offload is turned off: a redirected frame loses the skb's
"checksum to be completed" state, and the receiver would drop it as bad.
"""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

from datapath import bpf_syscall as sc
from datapath.loader import SCHEME_PROGS, SwitchDatapath
from datapath.maps import MapSet
from datapath.program import BPF_SRC_DIR, BpfDatapath, _ifindex, each_link
from datapath.program import _ipr as _ipr_for
from datapath.schemes import registry as scheme_registry

__all__ = ["XdpSwitchDatapath", "HostXdpPass", "XdpError", "XDP_SCHEMES", "XDP_REFUSED",
           "check_scheme", "check_topology", "check_pcm_delay", "xdp_prog_name",
           "host_checksum_offload_off", "XDP_FLAGS_DRV_MODE"]

XDP_SRC = Path(BPF_SRC_DIR) / "switch_xdp.c"
HOST_XDP_SRC = Path(BPF_SRC_DIR) / "host_xdp.c"
PROG_NAME = "talb_switch_xdp"
HOST_PROG_NAME = "talb_host_xdp"

# linux/if_link.h
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2

#: schemes the XDP entry point runs, and why each one can; and the ones it
#: refuses, and why (each scheme's declaration: SCHEME.xdp, SCHEME.xdp_why)
XDP_SCHEMES = {s.name: s.xdp_why for s in scheme_registry.SCHEMES if s.xdp}
XDP_REFUSED = {s.name: s.xdp_why for s in scheme_registry.SCHEMES if not s.xdp}


class XdpError(ValueError):
    """A setting XDP mode cannot honour (the message names option and value)."""


def check_scheme(scheme: str, fallback: str | None = None, *, option: str = "--scheme") -> None:
    """Refuse a scheme (or TaLB's fallback) XDP mode cannot run."""
    if scheme in XDP_REFUSED:
        raise XdpError(f"--datapath xdp cannot run {option} {scheme}: {XDP_REFUSED[scheme]} "
                       f"(XDP runs: {', '.join(XDP_SCHEMES)})")
    if scheme in scheme_registry.BY_NAME and scheme_registry.get(scheme).has_fallback \
            and fallback in XDP_REFUSED:
        raise XdpError(f"--datapath xdp cannot run {scheme} with fallback {fallback}: "
                       f"{XDP_REFUSED[fallback]}")


def check_pcm_delay(pcm_delay: str) -> None:
    if pcm_delay == "measured":
        raise XdpError("--datapath xdp cannot use --pcm-delay measured: it reads the egress "
                       "qdisc's backlog, and XDP_REDIRECT bypasses the qdisc (use "
                       "--pcm-delay model)")


def check_topology(topo) -> None:
    """Refuse what a topology asks that XDP mode cannot do: link shaping
    (and with it queues and priority bands), a scheme that reads a queue."""
    if topo.shaping:
        raise XdpError("--datapath xdp cannot shape links (topology shaping: true): "
                       "XDP_REDIRECT hands a frame to the peer veth past the egress qdisc, "
                       "so there is no HTB rate, no port queue and no priority band; "
                       "use shaping: false (`talb testbed up --datapath xdp` sets it unless "
                       "the topology file says otherwise)")
    check_scheme(topo.scheme)


def xdp_prog_name(netns: str | None, ifname: str) -> str | None:
    """The name of the XDP program attached to ``ifname`` (driver or
    generic mode), or None."""
    with _ipr_for(netns) as ipr:
        idx = _ifindex(ipr, ifname, netns)
        link = ipr.get_links(idx)[0]
    xdp = link.get_attr("IFLA_XDP")
    if xdp is None:
        return None
    prog_id = (xdp.get_attr("IFLA_XDP_PROG_ID") or xdp.get_attr("IFLA_XDP_DRV_PROG_ID")
               or xdp.get_attr("IFLA_XDP_SKB_PROG_ID"))
    if not prog_id:
        return None
    return _prog_name_by_id(prog_id)


def _prog_name_by_id(prog_id: int) -> str:
    fd = sc.prog_get_fd_by_id(prog_id)
    try:
        return sc.prog_info(fd).name
    finally:
        os.close(fd)


class _XdpAttach:
    """attach/detach as an XDP program (IFLA_XDP) instead of a tc filter."""

    XDP_FLAGS = XDP_FLAGS_DRV_MODE

    def attach(self, ifnames) -> None:
        """Our program on each interface, in driver mode (replacing one that
        is there)."""
        self._need_loaded()
        from pyroute2.netlink.exceptions import NetlinkError

        with _ipr_for(self.netns) as ipr:
            for ifname in ifnames:
                idx = _ifindex(ipr, ifname, self.netns)
                try:
                    ipr.link("set", index=idx, xdp={"attrs": [
                        ("IFLA_XDP_FD", self.prog_fd), ("IFLA_XDP_FLAGS", self.XDP_FLAGS)]})
                except NetlinkError as exc:
                    raise OSError(exc.code, f"ip link set dev {ifname} xdpdrv "
                                            f"{self.PROG_NAME} ({self.netns}): {exc}") from exc

    def detach(self, ifnames, *, missing_ok: bool = True, keep_clsact=()) -> None:
        """No XDP program on each interface (gone interfaces or namespace:
        skipped if ``missing_ok``)."""
        from pyroute2.netlink.exceptions import NetlinkError

        for ipr, ifname, idx in each_link(self.netns, ifnames, missing_ok=missing_ok):
            try:
                ipr.link("set", index=idx, xdp={"attrs": [
                    ("IFLA_XDP_FD", -1), ("IFLA_XDP_FLAGS", self.XDP_FLAGS)]})
            except NetlinkError as exc:
                if exc.code not in (errno.ENOENT, errno.ENODEV):
                    raise OSError(exc.code, f"ip link set dev {ifname} xdp off "
                                            f"({self.netns}): {exc}") from exc


class XdpSwitchDatapath(_XdpAttach, SwitchDatapath):
    """A switch's data path as XDP programs: :class:`SwitchDatapath` with
    bpf/switch_xdp.c, BPF_PROG_TYPE_XDP and IFLA_XDP attach. Maps, pins,
    config and the scheme programs' tail calls are the TC data path's."""

    SOURCE = XDP_SRC
    PROG_NAME = PROG_NAME
    PROGRAMS = (PROG_NAME, *SCHEME_PROGS.values())
    PROG_TYPE = sc.BPF_PROG_TYPE_XDP


class _NoMaps(MapSet):
    pass


class HostXdpPass(_XdpAttach, BpfDatapath):
    """XDP_PASS on a host's interface: lets the switch's XDP_REDIRECT into
    it land (veth needs an XDP program at the receiving end)."""

    SOURCE = HOST_XDP_SRC
    PROG_NAME = HOST_PROG_NAME
    MAPS_CLASS = _NoMaps
    TC_DIRECTION = "ingress"
    PROG_TYPE = sc.BPF_PROG_TYPE_XDP

    def pin(self) -> Path:     # no maps
        return self.pin_dir


def host_checksum_offload_off(netns: str, ifname: str) -> None:
    """``ethtool -K ifname tx off`` in ``netns``: the host computes its
    checksums (an XDP-redirected frame cannot carry "checksum partial")."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ethtool", "-K", ifname, "tx", "off"],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"ethtool -K {ifname} tx off ({netns}): {out.stderr.strip()}")
