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

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Callable

from common import paths
from datapath import timers
from datapath.control import (program_switch, read_config, set_conga_leaves, set_port_rates,
                              set_scheme, set_talb_config, set_timers)
from datapath.host_loader import HostDatapath
from datapath.loader import SwitchDatapath
from datapath.maps import SwitchMaps
from datapath.program import ensure_bpffs, link_ifindexes


def program_fabric(topo, prefix: str, switch: str, maps: SwitchMaps,
                   scheme: str | None = None) -> None:
    """(Re)install one switch's ports and forwarding groups from the topology."""
    netns = paths.netns_name(prefix, switch)
    ports = topo.ports(switch)
    ifindex = link_ifindexes(netns, [p.name for p in ports])
    port_rows = [(p.name, ifindex[p.name], p.kind == "host", p.up) for p in ports]
    groups = {ip: [ifindex[name] for name in names]
              for ip, names in topo.forwarding_groups(switch).items()}
    # The hash seed stays the loader's per-switch default (from the namespace
    # name): reproducible, and no two switches hash alike.
    # CONGA: leaves are numbered in topology order; a switch without hosts
    # is a spine
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
    # DRILL's queue estimates model each port's HTB: its rate and burst, and
    # its queue's size (one bfifo of queue.limit per band).
    set_port_rates(maps, port_rates)
    set_conga_leaves(maps, leaf_id, host_leaves)
    # Flowlet gap, CONGA's T_dre and aging: multiples of the fabric's frame
    # time at its slowest multipath link (datapath/timers.py, docs/schemes.md).
    # Only here, on a fresh data path: `talb scheme --param` overrides them.
    set_timers(maps, timer_values)


def switch_configs(topo, prefix: str, scheme: str | None = None) -> dict[str, dict]:
    """{switch: its config (control.read_config)} of a running fabric, after
    setting ``scheme`` on every switch when given (what a run records)."""
    out = {}
    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            if scheme:
                set_scheme(maps, scheme)
            out[sw.name] = read_config(maps)
    return out


def _attach_switch(topo_dict: dict, prefix: str, name: str) -> str:
    """Load, attach, pin and program one switch (runs in a worker process)."""
    from netns_topology import topology_from_dict

    topo = topology_from_dict(topo_dict)
    pin = paths.pin_dir(prefix, name)
    with SwitchDatapath(paths.netns_name(prefix, name), pin) as datapath:
        datapath.load()
        datapath.attach([p.name for p in topo.ports(name)])
        datapath.pin()
    with SwitchMaps(pin) as maps:
        program_fabric(topo, prefix, name, maps)
    return f"data path on {name}: {len(topo.ports(name))} ports, scheme {topo.scheme}"


def _attach_host(prefix: str, name: str, iface: str) -> str:
    """TaLB host side (DESIGN section 4): the tagging program at egress of the
    host's interface; workload/tensor_sender.py finds its pins."""
    with HostDatapath(paths.netns_name(prefix, name), paths.pin_dir(prefix, name)) as hdp:
        hdp.load().attach([iface])
        hdp.pin()
    return f"tagging program on {name}"


def _origin(obj) -> str:
    if obj.origin == "compiled":
        return f"compiled in {obj.compile_seconds:.2f} s"
    return f"compiled before ({obj.origin})"


def attach_fabric(topo, prefix: str, progress: Callable[[str], None] = lambda _m: None,
                  jobs: int | None = None) -> None:
    """Attach every switch's and host's program, `jobs` nodes at a time.

    bcc compiles each program once, here, before the workers fork (or takes
    it from the cache of earlier builds: datapath/compiled.py); each node
    then only creates its maps and has the kernel verify its copy of the
    programs (~0.5 s of CPU a switch), which spreads over the cores. A
    failure in any node propagates (and `testbed up` rolls back).
    """
    ensure_bpffs()
    for cls in (SwitchDatapath, HostDatapath):
        obj = cls.compiled()
        progress(f"{cls.SOURCE.name}: {_origin(obj)}")
    topo_dict = topo.to_dict()
    tasks = [(_attach_switch, (topo_dict, prefix, sw.name)) for sw in topo.switches]
    tasks += [(_attach_host, (prefix, h.name, h.iface)) for h in topo.hosts]
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    # fork: the workers need nothing but these arguments, and start at once.
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(fn, *args) for fn, args in tasks]
        for done, future in enumerate(as_completed(futures), 1):
            progress(f"{future.result()} ({done}/{len(tasks)})")
