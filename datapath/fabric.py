"""Attach the switch data path to every switch of a built fabric.

The programs are compiled once (datapath/compiled.py). For each switch
namespace: load the TC program with maps of its own, attach it at
ingress of every port, pin its maps, then install the forwarding state the
topology implies (ports, forwarding groups, scheme). Every host gets the
tagging program (datapath/host_loader.py) at egress of its interface, maps
pinned at common.paths.pin_dir(prefix, host). The processes that do
this may exit afterwards: attached filters keep the programs, pins keep the
maps, and later commands (status, the agent) work from the pins alone.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable

from pyroute2 import netns as nsctl

from common import paths
from datapath import timers
from datapath.control import (program_switch, read_config, set_port_rates, set_scheme,
                              set_talb_config, set_timers)
from datapath.host_loader import HostDatapath
from datapath.loader import SwitchDatapath
from datapath.maps import SwitchMaps
from datapath.program import (FILTER_HANDLE, FILTER_PRIO, TC_PARENTS, ensure_bpffs,
                              link_ifindexes)
from datapath.schemes import registry as scheme_registry
from datapath.schemes.spec import SwitchView
from netns_topology.netlink_batch import NetlinkBatch, NetlinkError, open_rtnl_socket


def program_fabric(topo, prefix: str, switch: str, maps: SwitchMaps,
                   scheme: str | None = None, ifindex: dict[str, int] | None = None) -> None:
    """(Re)install one switch's ports and forwarding groups from the topology
    (``ifindex``: its ports' indexes when known, else looked up)."""
    netns = paths.netns_name(prefix, switch)
    ports = topo.ports(switch)
    if ifindex is None:
        ifindex = link_ifindexes(netns, [p.name for p in ports])
    port_rows = [(p.name, ifindex[p.name], p.kind == "host", p.up) for p in ports]
    groups = {ip: [ifindex[name] for name in names]
              for ip, names in topo.forwarding_groups(switch).items()}
    # The hash seed stays the loader's per-switch default (from the namespace
    # name): reproducible, and no two switches hash alike.
    # Leaves are numbered in topology order (a scheme's install hook gets
    # them, datapath/schemes/spec.py SwitchView); a switch without hosts is a spine
    leaves = sorted({h.leaf for h in topo.hosts}, key=[s.name for s in topo.switches].index)
    install_switch(
        maps, port_rows, groups, scheme=scheme or topo.scheme,
        n_bands=len(topo.queue.bands), layers_per_band=topo.queue.layers_per_band,
        port_rates={ifindex[p.name]: (p.rate_bps, topo.queue.limit * len(topo.queue.bands),
                                      topo.queue.burst) for p in ports},
        leaf_id=leaves.index(switch) if switch in leaves else None,
        host_leaves={h.ip: leaves.index(h.leaf) for h in topo.hosts},
        timer_values=timers.for_topology(topo))


def install_switch(maps: SwitchMaps, port_rows, groups, *, scheme: str, n_bands: int,
                   layers_per_band: int, port_rates: dict, leaf_id: int | None,
                   host_leaves: dict, timer_values) -> None:
    """One switch's whole forwarding state, from a fabric talb built
    (:func:`program_fabric`) or one it was given (testbed/attach.py)."""
    program_switch(maps, port_rows, groups, scheme=scheme)
    # Packets are marked into the priority bands the topology's queues have
    # (bpf: skb->priority = 1:(0x10+band)); the two must agree.
    set_talb_config(maps, n_bands=n_bands, layers_per_band=layers_per_band)
    # The data path's queue estimates model each port's HTB: its rate and
    # burst, and its queue's size (one bfifo of queue.limit per band).
    set_port_rates(maps, port_rates)
    # Each scheme's own state (datapath/schemes/<name>.py, Scheme.install), for
    # every scheme: `talb scheme` may switch to any of them later.
    view = SwitchView(leaf_id=leaf_id, host_leaves=dict(host_leaves))
    for s in scheme_registry.SCHEMES:
        if s.install is not None:
            s.install(maps, view)
    # The timers (a flowlet gap, a decay period): multiples of the fabric's frame
    # time at its slowest multipath link (datapath/timers.py, docs/schemes.md).
    # Only here, on a fresh data path: `talb scheme --param` overrides them.
    set_timers(maps, timer_values)


def switch_configs(topo, prefix: str, scheme: str | None = None) -> dict[str, dict]:
    """{switch: its config (control.read_config)} of a running fabric, after
    setting ``scheme`` on every switch when given (what a run records).
    On an XDP fabric a scheme XDP cannot run is refused
    (datapath.xdp.XdpError) before any switch changes."""
    if scheme:
        from netns_topology.state import read_state

        if read_state(prefix).get("datapath") == "xdp":
            from datapath.xdp import check_scheme

            check_scheme(scheme)
    out = {}
    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            if scheme:
                set_scheme(maps, scheme)
            out[sw.name] = read_config(maps)
    return out


def _origin(obj) -> str:
    if obj.origin == "compiled":
        return f"compiled in {obj.compile_seconds:.2f} s"
    return "compiled before (cache)"


def _block_signals() -> None:
    """Signals go to the main thread (Python runs handlers there anyway): a
    signal pending for a loading thread makes the verifier give up (EAGAIN),
    and the main thread's children exiting send SIGCHLD all the time."""
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())


class FabricLoad:
    """Every node's programs of ``topo``, loaded from the moment this is made.

    Loading needs no namespace (programs and maps are not bound to one), so
    `testbed up` starts it before building the fabric: ``jobs`` threads
    (default: one per CPU) create each node's maps and have the kernel
    verify its copy of the programs -- ``BPF_PROG_LOAD`` runs without the
    GIL -- while the main thread builds namespaces and links. bcc compiles
    each source once, in the first thread that needs it, or not at all on a
    cache hit (datapath/compiled.py). :meth:`attach` then attaches, pins and
    programs each node as its load completes; :meth:`close` (always) waits
    for the threads and drops what was not attached.
    """

    def __init__(self, topo, prefix: str, jobs: int | None = None, datapath: str = "bpf"):
        self.topo = topo
        self.prefix = prefix
        self.xdp = datapath == "xdp"
        switch_cls = SwitchDatapath
        if self.xdp:
            from datapath.xdp import XdpSwitchDatapath

            switch_cls = XdpSwitchDatapath
        nodes = [(switch_cls, sw.name) for sw in topo.switches]
        nodes += [(HostDatapath, h.name) for h in topo.hosts]
        workers = max(1, min(jobs or os.cpu_count() or 1, len(nodes) or 1))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="talb-load",
                                        initializer=_block_signals)
        self._dps = {name: cls(paths.netns_name(prefix, name), paths.pin_dir(prefix, name))
                     for cls, name in nodes}
        #: node -> (wall s, CPU s of its loading thread: mostly the kernel's verifier)
        self.load_seconds: dict[str, tuple[float, float]] = {}
        #: attach(): seconds waiting for loads, and attaching/pinning/programming
        self.attach_seconds = {"wait_s": 0.0, "attach_s": 0.0}
        self._futures = {self._pool.submit(self._timed_load, name, dp): name
                         for name, dp in self._dps.items()}
        self._host_xdp = None
        if self.xdp:
            from datapath.xdp import HostXdpPass

            # one XDP_PASS program for every host's interface (no maps)
            self._host_xdp = HostXdpPass(None, paths.pin_dir(prefix))   # pins nothing
            self._futures[self._pool.submit(self._host_xdp.load)] = None

    def _timed_load(self, name: str, dp):
        wall, cpu = time.monotonic(), time.thread_time()
        dp.load()
        self.load_seconds[name] = (time.monotonic() - wall, time.thread_time() - cpu)
        return dp

    def timings(self) -> dict:
        """Where loading and attaching went: per kind of node (switch, host)
        the summed wall and thread-CPU seconds of the loads (the kernel's
        verifier, BPF_PROG_LOAD, runs in the loading thread), and the
        attach step's waiting and working seconds."""
        hosts = {h.name for h in self.topo.hosts}
        out = {}
        for kind in ("switch", "host"):
            rows = [v for n, v in self.load_seconds.items() if (n in hosts) == (kind == "host")]
            out[f"{kind}_nodes"] = len(rows)
            out[f"{kind}_wall_s"] = round(sum(r[0] for r in rows), 4)
            out[f"{kind}_cpu_s"] = round(sum(r[1] for r in rows), 4)
        return {**out, **{f"attach_{k}": round(v, 4) for k, v in self.attach_seconds.items()}}

    def attach(self, progress: Callable[[str], None] = lambda _m: None) -> None:
        """Attach, pin and program every node as its load completes (the
        fabric must be built); the first failure propagates."""
        ensure_bpffs()
        reported = set()
        hosts = {h.name: h for h in self.topo.hosts}
        total = sum(1 for name in self._futures.values() if name is not None)
        done = 0
        waited = time.monotonic()
        for future in as_completed(self._futures):
            started = time.monotonic()
            self.attach_seconds["wait_s"] += started - waited
            name = self._futures[future]
            dp = future.result()
            if name is None:        # the hosts' XDP_PASS: attached with each host
                continue
            done += 1
            cls = type(dp)
            if cls not in reported:
                reported.add(cls)
                progress(f"{cls.SOURCE.name}: {_origin(cls.compiled())}")
            if name in hosts:
                self._attach(dp, [hosts[name].iface])
                dp.pin()
                what = f"tagging program on {name}"
                if self.xdp:
                    self._attach_host_xdp(hosts[name])
                    what += " and XDP_PASS"
            else:
                ports = self.topo.ports(name)
                ifindex = self._attach(dp, [p.name for p in ports])
                dp.pin()
                program_fabric(self.topo, self.prefix, name, dp.maps, ifindex=ifindex)
                what = f"data path on {name}: {len(ports)} ports, scheme {self.topo.scheme}"
            dp.close()
            progress(f"{what} ({done}/{total})")
            waited = time.monotonic()
            self.attach_seconds["attach_s"] += waited - started

    def _attach(self, dp, ifnames: list[str]) -> dict[str, int] | None:
        """``dp.attach(ifnames)``; for TC programs the same requests (clsact,
        then our filter, direct-action) in one batch on a netlink socket of
        the node's namespace, the ports found by name there (no IPRoute per
        node, no lookup per port: netns_topology/netlink_batch.py). The
        ports' indexes (None for XDP, attached by its own class)."""
        if self.xdp:
            dp.attach(ifnames)
            return None
        nsctl.pushns(dp.netns)      # this thread only; sockets stay where they are made
        try:
            sock = open_rtnl_socket()
            try:
                index = {}
                for ifname in ifnames:
                    try:
                        index[ifname] = socket.if_nametoindex(ifname)
                    except OSError:
                        raise OSError(errno.ENODEV, f"no device {ifname!r} in netns "
                                                    f"{dp.netns}") from None
            except BaseException:
                sock.close()
                raise
        finally:
            nsctl.popns()
        try:
            batch = NetlinkBatch(sock)
            batch.tc_on(index.values(), "add", "clsact")
            batch.tc_on(index.values(), "replace-filter", "bpf", FILTER_HANDLE, fd=dp.prog_fd,
                        name=dp.PROG_NAME, parent=TC_PARENTS[dp.TC_DIRECTION],
                        prio=FILTER_PRIO, classid=1, direct_action=True)
            try:
                batch.flush()
            except NetlinkError as exc:
                raise OSError(exc.errno, f"attaching {dp.PROG_NAME} at {dp.TC_DIRECTION} of "
                                         f"{', '.join(ifnames)} ({dp.netns}): {exc}") from exc
        finally:
            sock.close()
        return index

    def _attach_host_xdp(self, host) -> None:
        """XDP_PASS on the host's interface, so that the leaf's
        XDP_REDIRECT into it lands, and its transmit checksum offload off
        (datapath/xdp.py)."""
        from datapath.xdp import HostXdpPass, host_checksum_offload_off

        self._host_xdp_ready()
        netns = paths.netns_name(self.prefix, host.name)
        on_host = HostXdpPass(netns, self._host_xdp.pin_dir)
        on_host.node = self._host_xdp.node     # the one load: attach it here too
        try:
            on_host.attach([host.iface])
        finally:
            on_host.node = None
        host_checksum_offload_off(netns, host.iface)

    def _host_xdp_ready(self) -> None:
        for future, name in self._futures.items():
            if name is None:
                future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for dp in self._dps.values():
            dp.close()
        if self._host_xdp is not None:
            self._host_xdp.close()

    def __enter__(self) -> "FabricLoad":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def attach_fabric(topo, prefix: str, progress: Callable[[str], None] = lambda _m: None,
                  jobs: int | None = None, load: FabricLoad | None = None,
                  datapath: str = "bpf") -> None:
    """Attach every switch's and host's program (TaLB host side, docs/design.md
    §4: the tagging program at egress of each host's interface, whose
    pins workload/tensor_sender.py finds), loading them ``jobs`` nodes at a
    time unless a :class:`FabricLoad` started already (``load``, which the
    caller closes). A failure in any node propagates (and `testbed up` rolls
    back)."""
    if load is not None:
        load.attach(progress)
        return
    with FabricLoad(topo, prefix, jobs, datapath=datapath) as fresh:
        fresh.attach(progress)
