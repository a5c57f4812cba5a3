"""Attach the switch data path to every switch of a built fabric.

For each switch namespace: compile and load the TC program, attach it at
ingress of every port, pin its maps, then install the forwarding state the
topology implies (ports, forwarding groups, scheme). Every host gets the
tagging program (agent/host_loader.py) at egress of its interface, maps
pinned at talb.paths.pin_dir(prefix, host). The processes that do
this may exit afterwards: attached filters keep the programs, pins keep the
maps, and later commands (status, the agent) work from the pins alone.
"""
from __future__ import annotations

from typing import Callable

from pyroute2 import IPRoute

from agent.control import program_switch
from agent.host_loader import HostDatapath
from agent.loader import SwitchDatapath, ensure_bpffs
from agent.maps import SwitchMaps
from talb import paths


def _ifindexes(netns: str, names: list[str]) -> dict[str, int]:
    with IPRoute(netns=netns, flags=0) as ipr:  # flags=0: never create a missing namespace
        found = {}
        for name in names:
            idx = ipr.link_lookup(ifname=name)
            if not idx:
                raise RuntimeError(f"port {name} missing in namespace {netns}")
            found[name] = idx[0]
    return found


def program_fabric(topo, prefix: str, switch: str, maps: SwitchMaps,
                   scheme: str | None = None) -> None:
    """(Re)install one switch's ports and forwarding groups from the topology."""
    netns = paths.netns_name(prefix, switch)
    ports = topo.ports(switch)
    ifindex = _ifindexes(netns, [p.name for p in ports])
    port_rows = [(p.name, ifindex[p.name], p.kind == "host", p.up) for p in ports]
    groups = {ip: [ifindex[name] for name in names]
              for ip, names in topo.forwarding_groups(switch).items()}
    # The hash seed stays the loader's per-switch default (from the namespace
    # name): reproducible, and no two switches hash alike.
    program_switch(maps, port_rows, groups, scheme=scheme or topo.scheme)


def attach_fabric(topo, prefix: str, progress: Callable[[str], None] = lambda _m: None) -> None:
    ensure_bpffs()
    switches = list(topo.switches)
    for n, sw in enumerate(switches, 1):
        netns = paths.netns_name(prefix, sw.name)
        pin = paths.pin_dir(prefix, sw.name)
        datapath = SwitchDatapath(netns, pin)
        try:
            datapath.load()
            datapath.attach([p.name for p in topo.ports(sw.name)])
            datapath.pin()
        finally:
            datapath.close()
        maps = SwitchMaps(pin)
        try:
            program_fabric(topo, prefix, sw.name, maps)
        finally:
            maps.close()
        progress(f"data path on {sw.name} ({n}/{len(switches)}): "
                 f"{len(topo.ports(sw.name))} ports, scheme {topo.scheme}")
    # --- TaLB host side (DESIGN section 4): tag tensor packets at egress of
    # every host's interface; workload/tensor_sender.py finds the pins. ---
    for n, host in enumerate(topo.hosts, 1):
        with HostDatapath(paths.netns_name(prefix, host.name), paths.pin_dir(prefix, host.name)) as hdp:
            hdp.load().attach([host.iface])
            hdp.pin()
        progress(f"tagging program on {host.name} ({n}/{len(topo.hosts)})")
