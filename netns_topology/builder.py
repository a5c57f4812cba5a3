"""Turn a Topo into network namespaces joined by veths (DESIGN §3), via netlink.

All-or-nothing: any failure tears down whatever this build made and raises
BuildError naming the step and node. Interfaces come up last, so no packet
crosses a half-configured link.
"""
from __future__ import annotations

import ipaddress
import logging
import subprocess
from pathlib import Path

from pyroute2 import IPRoute, netns

from common.paths import check_prefix, netns_name

from . import qdisc
from .errors import BuildError, TopologyError
from .params import BATCHED
from .namespace import create_namespace
from .teardown import namespaces, teardown
from .topo import Topo

NUD_PERMANENT = 0x80
RT_TABLE_MAIN = 254
RTAX_RTO_MIN = 13  # route metric (linux/rtnetlink.h); its bit in RTAX_LOCK locks it
# Kernel STP minimums (centiseconds): ports forward after 2 x forward_delay.
STP = {"br_stp_state": 1, "br_forward_delay": 200, "br_hello_time": 100, "br_max_age": 600}
_IPV4_SYSCTL = Path("/proc/sys/net/ipv4")
_ETHTOOL_BATCH = 32

log = logging.getLogger("talb.topology")


def _prepare_tcp_cc(name: str) -> None:
    """Fail early on an unknown algorithm; let namespaces use it as their default.

    A namespace other than the initial one may only make an algorithm its
    default if the global tcp_allowed_congestion_control lists it (EPERM
    otherwise); that list starts as the kernel's default (bbr here) and reno,
    so cubic is added to it. The change is global and harmless: it is left in place.
    """
    available = (_IPV4_SYSCTL / "tcp_available_congestion_control").read_text().split()
    if name not in available:
        raise TopologyError("tcp_cc", f"{name!r} is not available in this kernel "
                                      f"(available: {', '.join(available)})")
    allowed_file = _IPV4_SYSCTL / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if name not in allowed:
        allowed_file.write_text(" ".join([*allowed, name]))


def _write_sysctls(ns: str, values: dict[str, str]) -> None:
    # /proc/sys/net shows the namespace of the thread that opens it.
    netns.pushns(ns)
    try:
        for key, value in values.items():
            Path("/proc/sys", key.replace(".", "/")).write_text(value)
    finally:
        netns.popns()


class _Build:
    def __init__(self, topo: Topo, prefix: str, progress):
        self.topo, self.prefix, self.progress = topo, prefix, progress
        self.hosts = {h.name: h for h in topo.hosts}
        self.nodes = [s.name for s in topo.switches] + list(self.hosts)
        self.ipr: dict[str, IPRoute] = {}
        self.step, self.node = "namespaces", None

    def ns(self, node: str) -> str:
        return netns_name(self.prefix, node)

    def _at(self, step: str, node: str | None) -> None:
        """Where we are, for BuildError."""
        self.step, self.node = step, node

    def _done(self, done: int, total: int) -> None:
        self.progress(f"{self.step} {done}/{total}")

    def run(self) -> None:
        for step in (self.namespaces, self.links, self.switches, self.addresses,
                     self.offloads, self.queues, self.bring_up, self.routes):
            step()

    def close(self) -> None:
        # Open sockets pin their namespace: close them before any teardown.
        for ipr in self.ipr.values():
            ipr.close()
        self.ipr.clear()

    def _index(self, node: str, ifname: str) -> int:
        return self.ipr[node].link_lookup(ifname=ifname)[0]

    def _port_mtu(self, node: str) -> int:
        return self.topo.mtu if node in self.hosts else self.topo.switch_mtu

    def namespaces(self) -> None:
        for i, node in enumerate(self.nodes, 1):
            self._at("namespaces", node)
            create_namespace(self.ns(node))
            # flags=0: never (re)create a namespace implicitly
            self.ipr[node] = IPRoute(netns=self.ns(node), flags=0)
            self.ipr[node].link("set", ifname="lo", state="up")
            # No IPv6 on the fabric: no RS/ND/MLD chatter in the queues.
            sysctls = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
            if node in self.hosts:
                sysctls["net.ipv4.tcp_congestion_control"] = self.topo.tcp_cc
                # No TCP metrics cache: a connection must not start from the RTT,
                # RTO and reordering an earlier run's connections to the same host
                # left behind (measured: the same run's short-tensor AFCT drifted
                # from 34 to ~80 ms over 45 repeats; flushing the cache undid it).
                sysctls["net.ipv4.tcp_no_metrics_save"] = "1"
            _write_sysctls(self.ns(node), sysctls)
            self._done(i, len(self.nodes))

    def _end(self, node: str) -> dict:
        attrs = {"mtu": self._port_mtu(node)}
        if node in self.hosts:
            # One MTU-sized packet per skb, as on a real switch (offloads off too).
            attrs.update(address=self.hosts[node].mac, gso_max_segs=1)
        return attrs

    def links(self) -> None:
        links = self.topo.links
        for i, link in enumerate(links, 1):
            self._at("links", link.a)
            # Both ends are born in their namespaces with their final names:
            # nothing ever appears in the root namespace.
            self.ipr[link.a].link("add", ifname=link.a_port, kind="veth", **self._end(link.a),
                                  peer={"ifname": link.b_port, "net_ns_fd": self.ns(link.b), **self._end(link.b)})
            self._done(i, len(links))

    def switches(self) -> None:
        switches = self.topo.switches
        for i, switch in enumerate(switches, 1):
            self._at("switches", switch.name)
            ipr = self.ipr[switch.name]
            ipr.link("add", ifname="br0", kind="bridge", mtu=self.topo.switch_mtu, **STP)
            bridge = self._index(switch.name, "br0")
            for port in self.topo.ports(switch.name):
                ipr.link("set", index=self._index(switch.name, port.name), master=bridge)
            self._done(i, len(switches))

    def addresses(self) -> None:
        hosts = list(self.hosts.values())
        for i, host in enumerate(hosts, 1):
            self._at("hosts", host.name)
            ipr, index = self.ipr[host.name], self._index(host.name, host.iface)
            ipr.addr("add", index=index, address=host.ip, prefixlen=host.prefixlen)
            # Static ARP: no broadcast resolution through the fabric, no timing noise.
            for other in hosts:
                if other is not host:
                    ipr.neigh("add", dst=other.ip, lladdr=other.mac, ifindex=index, state=NUD_PERMANENT)
            self._done(i, len(hosts))

    def _interfaces(self):
        for link in self.topo.links:
            yield link.a, link.a_port, link
            yield link.b, link.b_port, link

    def offloads(self) -> None:
        # ethtool's "tso/gso/gro off" each stand for several feature bits: let
        # ethtool map them, a batch of interfaces at a time.
        interfaces = list(self._interfaces())
        for start in range(0, len(interfaces), _ETHTOOL_BATCH):
            batch = [(node, subprocess.Popen(["ip", "netns", "exec", self.ns(node), "ethtool", "-K", ifname,
                                              "tso", "off", "gso", "off", "gro", "off"],
                                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
                     for node, ifname, _ in interfaces[start:start + _ETHTOOL_BATCH]]
            errors = [proc.communicate()[1] for _, proc in batch]  # the whole batch ends first
            for i, ((node, proc), err) in enumerate(zip(batch, errors), start + 1):
                self._at("offloads", node)
                if proc.returncode:
                    raise RuntimeError(f"ethtool -K failed: {err.strip()}")
                self._done(i, len(interfaces))

    def queues(self) -> None:
        if not self.topo.shaping:
            return
        if self.topo.shaping == BATCHED:  # machine-wide (netns_topology/qdisc.py)
            qdisc.set_hysteresis(True)
        interfaces = list(self._interfaces())
        for i, (node, ifname, link) in enumerate(interfaces, 1):
            self._at("queues", node)
            qdisc.apply(self.ipr[node], self._index(node, ifname), link.rate_bps,
                        self._port_mtu(node), self.topo.queue, self.topo.shaping)
            self._done(i, len(interfaces))

    def bring_up(self) -> None:
        for i, node in enumerate(self.nodes, 1):
            self._at("up", node)
            # A link that is down stays down at both ends.
            names = [port.name for port in self.topo.ports(node) if port.up]
            for ifname in names + (["br0"] if node not in self.hosts else []):
                self.ipr[node].link("set", index=self._index(node, ifname), state="up")
            self._done(i, len(self.nodes))


    def routes(self) -> None:
        """``rto_min``: the hosts' minimum TCP RTO, as a locked RTAX_RTO_MIN
        metric of the route to the fabric (:func:`set_host_route`). Absent:
        routes stay as the kernel made them."""
        if self.topo.rto_min is None:
            return
        hosts = list(self.hosts.values())
        for i, host in enumerate(hosts, 1):
            self._at("routes", host.name)
            set_host_route(self.ipr[host.name], host, self.topo.rto_min)
            self._done(i, len(hosts))


def set_host_route(ipr: IPRoute, host, rto_min: int | None) -> None:
    """Replace ``host``'s route to the fabric (the one its address made when
    its interface came up: the fabric's network on its interface, from its
    address) by the same route with a locked RTAX_RTO_MIN metric of
    ``rto_min`` ms, or, None, with no metric (the kernel's 200 ms). The
    kernel reads the metric only when it is locked, as iproute2's
    ``rto_min`` sets it. ``ipr``: an IPRoute in the host's namespace. The
    builder's step and testbed.lifecycle.set_rto_min (a live testbed) both
    call this."""
    net = ipaddress.IPv4Interface(f"{host.ip}/{host.prefixlen}").network
    metrics = {} if rto_min is None else {
        "metrics": {"rto_min": rto_min, "lock": 1 << RTAX_RTO_MIN}}
    ipr.route("replace", dst=str(net.network_address), dst_len=net.prefixlen,
              oif=ipr.link_lookup(ifname=host.iface)[0], table=RT_TABLE_MAIN, proto="kernel",
              scope="link", prefsrc=host.ip, **metrics)


def _check_pacing(topo: Topo, prefix: str) -> None:
    """An exactly shaped fabric cannot be built while sch_htb's hysteresis
    (machine-wide) is on: its links would be batched without saying so."""
    if topo.shaping is not True or not qdisc.hysteresis():
        return
    from .state import batched_testbeds

    holders = [p for p in batched_testbeds() if p != prefix]
    if not holders:
        # a leftover of a batched testbed that never came down (a killed run): nobody
        # relies on it, and leaving it on would batch this fabric without saying so
        log.warning("sch_htb's htb_hysteresis was on with no batched testbed up "
                    "(a leftover): turned off for exact pacing")
        qdisc.set_hysteresis(False)
        return
    raise TopologyError("shaping", f"true (exact pacing) needs sch_htb's htb_hysteresis off, and it is "
                                   f"on, machine-wide: testbed(s) {', '.join(holders)} with "
                                   "shaping: batched are up. Tear those down, or build this one "
                                   "with shaping: batched too")


def build(topo: Topo, prefix: str, progress=None) -> None:
    """Build `topo` as namespaces `<prefix>-<node>`; all or nothing."""
    check_prefix(prefix)
    topo.validate()
    existing = namespaces(prefix)
    if existing:
        shown = ", ".join(existing[:3]) + (", ..." if len(existing) > 3 else "")
        raise BuildError("check", None, f"namespaces with prefix {prefix!r} already exist ({shown}); "
                                        "tear them down first")
    _prepare_tcp_cc(topo.tcp_cc)
    _check_pacing(topo, prefix)
    work = _Build(topo, prefix, progress or (lambda message: None))
    try:
        work.run()
    except BaseException as exc:
        work.close()
        cleanup = ""
        try:
            teardown(prefix)
        except Exception as again:  # report both; the original failure matters most
            cleanup = f" (and clean-up failed: {again}; run teardown again)"
        if not isinstance(exc, Exception):  # Ctrl-C, SystemExit: clean up, then let it go on
            raise
        raise BuildError(work.step, work.node, f"{type(exc).__name__}: {exc}{cleanup}") from exc
    work.close()
