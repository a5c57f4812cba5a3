"""Helpers shared by the tests that work inside network namespaces.

* :func:`run_in`, :func:`socket_in`: a command, a socket in a namespace.
* :func:`ping`: ICMP echoes from a namespace (no ping binary needed).
* :func:`free_port`: a free TCP port on loopback (metrics, Prometheus).
* :func:`wait_for_streams`: until iperf3 clients in a namespace are sending
  (their connections established), so a test judges traffic that runs
  rather than assuming it started within a fixed sleep.
* :func:`up_fabric`: a live testbed under a prefix of the test's own,
  taken down by a finalizer (a module's ``fabric`` fixture is one call).
* :func:`spine_captures`, :func:`spines_of`, :func:`sends_at_once`: which
  spine carried each tensor while several `talb send` runs go at once.
* :func:`loaded_switch` and :class:`ProgTestSwitch`: the switch program
  loaded (not attached) in a namespace of veth ports, packets run through it
  with ``BPF_PROG_TEST_RUN`` (test_bpf_datapath.py, test_talb_switch.py).
  A test run does not execute a redirect, so the chosen egress port is
  observed through ``port_stats``.
"""
from __future__ import annotations

import os
import select
import socket
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from conftest import new_prefix, skip_or_fail


def run_in(ns: str, *cmd: str, check: bool = True, timeout: float = 30):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=check,
                          capture_output=True, text=True, timeout=timeout)


def socket_in(ns: str, *args) -> socket.socket:
    """A socket created in namespace ``ns`` (it stays there)."""
    from pyroute2 import netns

    netns.pushns(ns)
    try:
        return socket.socket(*args)
    finally:
        netns.popns()


def ping(ns: str, dst: str, count: int = 3, timeout: float = 1.0) -> int:
    """``count`` ICMP echoes from namespace ``ns``, each waited for up to
    ``timeout`` s (no ping binary needed): the number of replies received.
    scapy builds the echo (and its checksum) and parses the replies; a raw
    socket made in ``ns`` carries them (scapy's own sockets route by the
    root namespace's table)."""
    from scapy.layers.inet import ICMP, IP

    ident = os.getpid() & 0xFFFF
    ok = 0
    with socket_in(ns, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as s:
        for seq in range(count):
            s.sendto(bytes(ICMP(type="echo-request", id=ident, seq=seq) / (b"talb" * 8)), (dst, 0))
            end = time.monotonic() + timeout
            while (left := end - time.monotonic()) > 0:
                if not select.select([s], [], [], left)[0]:
                    break
                reply = IP(s.recv(2048))
                if (reply.src == dst and ICMP in reply and reply[ICMP].type == 0
                        and reply[ICMP].id == ident and reply[ICMP].seq == seq):
                    ok += 1
                    break
    return ok


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_established(ns: str) -> list[tuple[int, int]]:
    """(local port, remote port) of every established IPv4 TCP connection in
    namespace ``ns`` (its /proc/net/tcp, state 01)."""
    conns = []
    for line in run_in(ns, "cat", "/proc/net/tcp").stdout.splitlines()[1:]:
        f = line.split()
        if len(f) > 3 and f[3] == "01":
            conns.append((int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)))
    return conns


def wait_for_streams(ns: str, streams: dict[int, int], timeout: float = 15.0) -> float:
    """Until the iperf3 clients in ``ns`` all send: for each server port,
    its control connection and ``streams[port]`` data streams established
    (an iperf3 client sends as soon as its streams connect). Seconds waited;
    the test fails after ``timeout``. On a busy machine a client can start
    seconds late (its server not listening yet, a retry), so a fixed sleep
    is no proof that traffic runs."""
    start = time.monotonic()
    while True:
        conns = tcp_established(ns)
        short = {port: n for port, n in streams.items()
                 if sum(1 for _, remote in conns if remote == port) < 1 + n}
        if not short:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            import pytest

            pytest.fail(f"iperf3 clients in {ns} not all sending after {timeout:g} s: server "
                        f"ports {sorted(short)} lack streams (established: {conns})")
        time.sleep(0.05)


# --- live fabrics ------------------------------------------------------------------------
class LiveFabric(NamedTuple):
    """A testbed a test built: ``prefix, topo = fabric``."""

    prefix: str
    topo: object


def up_fabric(request, topology, *, agent: bool | dict = False, datapath: str = "bpf",
              scheme: str | None = None) -> LiveFabric:
    """`talb testbed up` under a new prefix of the test's own (conftest's
    new_prefix: recorded in the registry before anything is built), taken
    down (its agent first) by a finalizer of ``request`` whatever happens:
    call it from a fixture, which needs ``bcc`` (or ``root`` for the bridge).

    ``topology``: a topology file or a Topology object. ``agent``: True, the
    PCM agent with its metrics on a free port; a dict, those AgentConfig
    options; False, none. ``datapath``: "bpf", "xdp" or "bridge". ``scheme``:
    replaces the topology's."""
    from netns_topology import load_topology
    from testbed import lifecycle

    topo = load_topology(topology) if isinstance(topology, (str, os.PathLike)) else topology
    if scheme is not None:
        topo.scheme = scheme
    if agent is True:
        agent = {"metrics_port": free_port()}
    prefix = new_prefix()
    request.addfinalizer(lambda: lifecycle.down(prefix))
    lifecycle.up(topo, prefix, datapath=datapath, agent=agent if agent is not False else None)
    return LiveFabric(prefix, topo)


# --- which spine carried each tensor --------------------------------------------------------
@contextmanager
def spine_captures(prefix: str, directory: Path):
    """Every port of every spine of testbed ``prefix`` captured inbound
    while the block runs (pcaps in ``directory``): yields the captures,
    stopped at the end whatever happens. Read them with :func:`spines_of`."""
    from common import paths
    from netns_topology.state import load_topology_of
    from workload.capture import start_capture

    topo = load_topology_of(prefix)
    caps = []
    try:
        for spine in (s.name for s in topo.switches if s.role == "spine"):
            for p in topo.ports(spine):
                caps.append(start_capture(paths.netns_name(prefix, spine), p.name,
                                          Path(directory) / f"{spine}-{p.name}.pcap",
                                          direction="in"))
        yield caps
    finally:
        for c in caps:
            c.stop()


def spines_of(captures) -> dict:
    """{WireTensorKey: spines whose ports saw its tagged packets}. Spines name
    their ports after the leaves, so each spine's captures are read apart."""
    from workload.capture import tensor_ports

    out: dict = {}
    for c in captures:
        spine = c.netns.rsplit("-", 1)[1]
        for key in tensor_ports([c]):
            out.setdefault(key, set()).add(spine)
    return out


def spines_recorded(prefix: str, tensors) -> dict:
    """{WireTensorKey: spines whose own record (tensor_egress) holds the
    tensor}, for ``tensors`` (send.TensorResult: key and start time). The
    view that needs no capture: under XDP none sees a redirected frame. An
    entry older than its tensor (an earlier tensor of the same id) counts
    as the spine's too: it may hold this one's packets."""
    from common import paths
    from datapath.egress_record import open_record, read_egress
    from netns_topology.state import load_topology_of

    out: dict = {}
    started = {t.key: t.t_start_ns for t in tensors}
    for spine in (s.name for s in load_topology_of(prefix).switches if s.role == "spine"):
        maps, why = open_record(paths.pin_dir(prefix, spine))
        assert maps is not None, f"{spine}: {why}"
        with maps:
            for key in read_egress(maps, started, {}):
                out.setdefault(key, set()).add(spine)
    return out


def sends_at_once(prefix: str, runs: dict[str, dict], join_s: float) -> tuple[dict, list[str]]:
    """`talb send` runs at the same time, one thread each. ``runs``: {name:
    send.run's arguments after the prefix (srcs, dst, keywords)}. Returns
    ({name: SendReport}, ["name: error", ...]) once all ended (each waited
    for at most ``join_s``)."""
    from talb import send

    reports: dict = {}
    errors: list[str] = []

    def one(name: str, kw: dict) -> None:
        try:
            reports[name] = send.run(prefix, **kw)
        except Exception as exc:  # the caller asserts there are none
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=one, args=item) for item in runs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    return reports, errors


@contextmanager
def loaded_switch(suffix: str, n_ports: int, cflags: tuple[str, ...] = (), datapath_cls=None,
                  first_index: int | None = None, **link):
    """A namespace ``<new prefix>-<suffix>`` with veth pairs p<i>/q<i> for
    i < ``n_ports``, all up (and ``link`` set, e.g. mtu=1600), and the switch
    program loaded there (compiled with ``cflags``; ``datapath_cls``: SwitchDatapath, or
    datapath.xdp.XdpSwitchDatapath): yields (namespace, the data path, {name: ifindex}).
    ``first_index``: p<i> gets ifindex first_index + i (as a long-lived
    root namespace's devices have). Closes the program and removes the
    namespace afterwards."""
    from pyroute2 import IPRoute, netns

    from datapath.loader import SwitchDatapath
    from netns_topology import create_namespace

    name = f"{new_prefix()}-{suffix}"
    try:
        create_namespace(name)
    except Exception as exc:
        skip_or_fail(f"cannot create network namespace: {exc}")
    dp = None
    try:
        # no IPv6: a veth's router solicitations and MLD reports would reach
        # the program between a test's own packets and move its counters
        run_in(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
               "net.ipv6.conf.default.disable_ipv6=1")
        ifindex = {}
        with IPRoute(netns=name) as ipr:
            for i in range(n_ports):
                at = {} if first_index is None else {"index": first_index + i}
                ipr.link("add", ifname=f"p{i}", kind="veth", peer={"ifname": f"q{i}"}, **at)
            for i in range(n_ports):
                for n in (f"p{i}", f"q{i}"):
                    ifindex[n] = ipr.link_lookup(ifname=n)[0]
                    ipr.link("set", index=ifindex[n], state="up", **link)
        dp = (datapath_cls or SwitchDatapath)(name, tempfile.gettempdir() + "/unused-pins")
        dp.load(cflags=cflags)
        yield name, dp, ifindex
    finally:
        if dp is not None:
            dp.close()
        netns.remove(name)


class ProgTestSwitch:
    """A loaded switch program (:func:`loaded_switch`) and its ports p0..p<n-1>."""

    def __init__(self, netns_name, dp, ifindex, n_ports: int):
        self.netns = netns_name
        self.dp = dp
        self.maps = dp.maps
        self.ifindex = ifindex            # name -> ifindex (p<i>, q<i>)
        self.port_names = [f"p{i}" for i in range(n_ports)]

    def run(self, data: bytes, ingress: str = "p0", repeat: int = 1, full: bool = False):
        """One test run of ``data`` arriving at ``ingress``: (verdict, packet
        out), or with ``full`` also the duration and the ctx out."""
        from pyroute2 import netns

        from datapath import bpf_syscall as sc

        if self.dp.PROG_TYPE == sc.BPF_PROG_TYPE_XDP:
            ctx = sc.XdpMd(data_end=len(data), ingress_ifindex=self.ifindex[ingress])
        else:
            ctx = sc.SkBuff(ifindex=self.ifindex[ingress])
        netns.pushns(self.netns)
        try:
            ret, out, dur, ctx = sc.prog_test_run(self.dp.prog_fd, data, ctx=ctx, repeat=repeat)
        finally:
            netns.popns()
        return (ret, out, dur, ctx) if full else (ret, out)

    def tx(self) -> dict[str, int]:
        """tx packets per port name."""
        from datapath import control

        stats = control.read_port_stats(self.maps, range(len(self.port_names)))
        return {n: stats[i]["tx_packets"] for i, n in enumerate(self.port_names)}

    def counters(self) -> dict[str, int]:
        from datapath import control

        return control.read_counters(self.maps)

    def port_of(self, ifindex: int) -> str:
        return next(n for n in self.port_names if self.ifindex[n] == ifindex)


def processes_in_hosts(prefix: str) -> dict[str, list[str]]:
    """{host namespace: pids} of every host of testbed ``prefix`` that runs
    anything (after a run: what it left behind)."""
    from common import paths
    from netns_topology.state import load_topology_of

    out = {}
    for h in load_topology_of(prefix).hosts:
        ns = paths.netns_name(prefix, h.name)
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        if pids:
            out[ns] = pids
    return out
