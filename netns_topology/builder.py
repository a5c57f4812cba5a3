"""Turn a Topo into network namespaces joined by veths (docs/design.md §3), via netlink.

All-or-nothing: any failure tears down whatever this build made and raises
BuildError naming the step and node. Interfaces come up last, so no packet
crosses a half-configured link.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import time
from pathlib import Path

from pyroute2 import IPRoute

from common.paths import check_prefix, netns_name

from . import offloads, qdisc
from .errors import BuildError, TopologyError
from .params import BATCHED
from .namespace import create_namespace
from .netlink_batch import NetlinkBatch, open_rtnl_socket
from .teardown import namespaces, teardown
from .topo import Topo

NUD_PERMANENT = 0x80
RT_TABLE_MAIN = 254
RTAX_RTO_MIN = 13  # route metric (linux/rtnetlink.h); its bit in RTAX_LOCK locks it
# Kernel STP minimums (centiseconds): ports forward after 2 x forward_delay.
STP = {"br_stp_state": 1, "br_forward_delay": 200, "br_hello_time": 100, "br_max_age": 600}
_IPV4_SYSCTL = Path("/proc/sys/net/ipv4")
LO_IFINDEX = 1       # a new namespace's loopback
FIRST_IFINDEX = 2    # the builder numbers a node's ports from here, in link order; br0 last

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


def _write_sysctls(values: dict[str, str]) -> None:
    # /proc/sys/net shows the namespace of the thread that opens it: called
    # on the thread that made the namespace (create_namespace's ``inside``).
    for key, value in values.items():
        Path("/proc/sys", key.replace(".", "/")).write_text(value)


class _Node:
    """What the build keeps open in one node's namespace, all made from
    inside it: an rtnetlink socket with its batch of requests, a socket
    for ethtool's ioctls and the namespace's fd (a veth's peer is born in
    it). Interfaces get their indexes from the builder (lo is 1), so no
    request needs a lookup."""

    def __init__(self, sysctls: dict[str, str]):
        self.rtnl = self.ethtool = None
        self.nsfd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.rtnl = open_rtnl_socket()
            self.ethtool = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.batch = NetlinkBatch(self.rtnl)
            _write_sysctls(sysctls)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for sock in (self.rtnl, self.ethtool):
            if sock is not None:
                sock.close()
        if self.nsfd is not None:
            os.close(self.nsfd)
        self.rtnl = self.ethtool = self.nsfd = None


class _Build:
    def __init__(self, topo: Topo, prefix: str, progress):
        self.topo, self.prefix, self.progress = topo, prefix, progress
        self.hosts = {h.name: h for h in topo.hosts}
        self.nodes = [s.name for s in topo.switches] + list(self.hosts)
        self.io: dict[str, _Node] = {}
        #: node -> {interface: its index}: ports in link order from 2, then br0
        self.ifindex: dict[str, dict[str, int]] = {}
        for node in self.nodes:
            names = [port.name for port in topo.ports(node)]
            if node not in self.hosts:
                names.append("br0")
            self.ifindex[node] = {name: FIRST_IFINDEX + i for i, name in enumerate(names)}
        self.step, self.node = "namespaces", None
        #: seconds per step (recorded in the state file: `talb bench build --breakdown`)
        self.seconds: dict[str, float] = {}

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
            started = time.monotonic()
            step()
            self.seconds[step.__name__] = round(time.monotonic() - started, 4)

    def close(self) -> None:
        # Open sockets and fds pin their namespace: close them before any teardown.
        for io in self.io.values():
            io.close()
        self.io.clear()

    def _flush(self, node: str) -> None:
        self.io[node].batch.flush()

    def _port_mtu(self, node: str) -> int:
        return self.topo.mtu if node in self.hosts else self.topo.switch_mtu

    def namespaces(self) -> None:
        for i, node in enumerate(self.nodes, 1):
            self._at("namespaces", node)
            # No IPv6 on the fabric: no RS/ND/MLD chatter in the queues.
            sysctls = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
            if node in self.hosts:
                sysctls["net.ipv4.tcp_congestion_control"] = self.topo.tcp_cc
                # No TCP metrics cache: a connection must not start from the RTT,
                # RTO and reordering an earlier run's connections to the same host
                # left behind (measured: the same run's short-tensor AFCT drifted
                # from 34 to ~80 ms over 45 repeats; flushing the cache undid it).
                sysctls["net.ipv4.tcp_no_metrics_save"] = "1"
            self.io[node] = create_namespace(self.ns(node), lambda s=sysctls: _Node(s))
            self.io[node].batch.link("set", index=LO_IFINDEX, state="up")
            self._flush(node)
            self._done(i, len(self.nodes))

    def _end(self, node: str, ifname: str) -> dict:
        attrs = {"index": self.ifindex[node][ifname], "mtu": self._port_mtu(node)}
        if node in self.hosts:
            # One MTU-sized packet per skb, as on a real switch (offloads off too).
            attrs.update(address=self.hosts[node].mac, gso_max_segs=1)
        return attrs

    def _per_node(self, items, queue) -> None:
        """``queue(item)`` for each (node, ...) item, each node's requests
        sent when its last item is queued; progress per item."""
        last = {item[0]: i for i, item in enumerate(items)}
        for i, item in enumerate(items):
            self._at(self.step, item[0])
            queue(item)
            if last[item[0]] == i:
                self._flush(item[0])
            self._done(i + 1, len(items))

    def links(self) -> None:
        self.step = "links"
        # Both ends are born in their namespaces with their final names and
        # indexes: nothing ever appears in the root namespace.
        links = sorted(self.topo.links, key=lambda link: self.nodes.index(link.a))
        self._per_node([(link.a, link) for link in links], lambda item: self.io[item[0]].batch.link(
            "add", ifname=item[1].a_port, kind="veth", **self._end(item[1].a, item[1].a_port),
            peer={"ifname": item[1].b_port, "net_ns_fd": self.io[item[1].b].nsfd,
                  **self._end(item[1].b, item[1].b_port)}))

    def switches(self) -> None:
        self.step = "switches"

        def queue(item):
            switch = item[0]
            batch, index = self.io[switch].batch, self.ifindex[switch]
            batch.link("add", index=index["br0"], ifname="br0", kind="bridge",
                       mtu=self.topo.switch_mtu, **STP)
            for port in self.topo.ports(switch):
                batch.link("set", index=index[port.name], master=index["br0"])
        self._per_node([(switch.name,) for switch in self.topo.switches], queue)

    def addresses(self) -> None:
        self.step = "hosts"
        hosts = list(self.hosts.values())

        def queue(item):
            host = self.hosts[item[0]]
            batch, index = self.io[host.name].batch, self.ifindex[host.name][host.iface]
            batch.addr("add", index=index, address=host.ip, prefixlen=host.prefixlen)
            # Static ARP: no broadcast resolution through the fabric, no timing noise.
            for other in hosts:
                if other is not host:
                    batch.neigh("add", dst=other.ip, lladdr=other.mac, ifindex=index,
                                state=NUD_PERMANENT)
        self._per_node([(host.name,) for host in hosts], queue)

    def _interfaces(self):
        for link in self.topo.links:
            yield link.a, link.a_port, link
            yield link.b, link.b_port, link

    def offloads(self) -> None:
        # ethtool's "tso/gso/gro off": the feature bits ethtool maps them to,
        # one ETHTOOL_SFEATURES ioctl per interface (netns_topology/offloads.py)
        interfaces = list(self._interfaces())
        for i, (node, ifname, _) in enumerate(interfaces, 1):
            self._at("offloads", node)
            offloads.disable(self.io[node].ethtool, ifname)
            self._done(i, len(interfaces))

    def queues(self) -> None:
        if not self.topo.shaping:
            return
        if self.topo.shaping == BATCHED:  # machine-wide (netns_topology/qdisc.py)
            qdisc.set_hysteresis(True)
        self.step = "queues"
        self._per_node(list(self._interfaces()), lambda item: qdisc.apply(
            self.io[item[0]].batch, self.ifindex[item[0]][item[1]], item[2].rate_bps,
            self._port_mtu(item[0]), self.topo.queue, self.topo.shaping))

    def bring_up(self) -> None:
        self.step = "up"

        def queue(item):
            node = item[0]
            # A link that is down stays down at both ends.
            names = [port.name for port in self.topo.ports(node) if port.up]
            for ifname in names + (["br0"] if node not in self.hosts else []):
                self.io[node].batch.link("set", index=self.ifindex[node][ifname], state="up")
        self._per_node([(node,) for node in self.nodes], queue)

    def routes(self) -> None:
        """``rto_min``: the hosts' minimum TCP RTO, as a locked RTAX_RTO_MIN
        metric of the route to the fabric (:func:`set_host_route`). Absent:
        routes stay as the kernel made them."""
        if self.topo.rto_min is None:
            return
        self.step = "routes"
        self._per_node([(host.name,) for host in self.hosts.values()], lambda item: self.io[item[0]].batch.route(
            "replace", **host_route(self.hosts[item[0]], self.topo.rto_min,
                                    self.ifindex[item[0]][self.hosts[item[0]].iface])))


def host_route(host, rto_min: int | None, oif: int) -> dict:
    """The arguments of ``IPRoute.route("replace", ...)`` for ``host``'s
    route to the fabric through interface ``oif`` (:func:`set_host_route`)."""
    net = ipaddress.IPv4Interface(f"{host.ip}/{host.prefixlen}").network
    metrics = {} if rto_min is None else {
        "metrics": {"rto_min": rto_min, "lock": 1 << RTAX_RTO_MIN}}
    return dict(dst=str(net.network_address), dst_len=net.prefixlen, oif=oif,
                table=RT_TABLE_MAIN, proto="kernel", scope="link", prefsrc=host.ip, **metrics)


def set_host_route(ipr: IPRoute, host, rto_min: int | None) -> None:
    """Replace ``host``'s route to the fabric (the one its address made when
    its interface came up: the fabric's network on its interface, from its
    address) by the same route with a locked RTAX_RTO_MIN metric of
    ``rto_min`` ms, or, None, with no metric (the kernel's 200 ms). The
    kernel reads the metric only when it is locked, as iproute2's
    ``rto_min`` sets it. ``ipr``: an IPRoute in the host's namespace. The
    builder's step and testbed.lifecycle.set_rto_min (a live testbed) both
    call this."""
    ipr.route("replace", **host_route(host, rto_min, ipr.link_lookup(ifname=host.iface)[0]))


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


def build(topo: Topo, prefix: str, progress=None) -> dict[str, float]:
    """Build `topo` as namespaces `<prefix>-<node>`; all or nothing.
    Returns the seconds each step took."""
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
    return work.seconds
