"""talb on a fabric it did not build: `talb attach --fabric FILE`, `talb detach`.

The fabric file (netns_topology/attach_spec.py) names the switches, their
ports and what each port faces, and the hosts. :func:`attach` loads the
switch program at ingress of every described port (the same loader and the
same forwarding code as a fabric talb builds: datapath.loader.SwitchDatapath,
datapath.fabric.install_switch, groups from topo.shortest_path_groups), the
host tagger on every host whose namespace it can reach, and starts the agent.

What it does is recorded, step by step *before* each step, in
``/run/talb/<name>/attach.json``; :func:`detach` undoes exactly that and
nothing else: our filters (and a clsact qdisc only where there was none),
our pins, the namespace names it gave processes (``ip netns attach``: the
namespace itself belongs to its process and stays), the agent. Interfaces,
addresses, qdiscs and bridges it did not create are left alone. A failed
attach undoes what it did.

Priority bands (HTB + a bfifo per band, netns_topology/qdisc.py, the one
place that installs them for `talb testbed up` too) go only on the ports
whose ``queue:`` asks, at the port's rate. A port whose root qdisc is not
the kernel's default (handle 0:, e.g. pfifo_fast, noqueue, mq, fq_codel)
is refused unless the file says ``replace_qdisc: true``; detach deletes
the root qdisc attach made, which leaves the port with the kernel's
default qdisc (not a replaced one: that is gone).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from common import paths
from netns_topology.state import TestbedError, read_record, require_root

Progress = Callable[[str], None]

#: a tagged packet is 12 bytes longer than the host's MTU (the TaLB option)
OPTION_BYTES = 12


def _quiet(_msg: str) -> None:
    pass


def attached(name: str) -> bool:
    return paths.attach_file(name).exists()


def read_attach(name: str) -> dict:
    """The attach record of ``name``; TestbedError when nothing is attached."""
    return read_record(paths.attach_file(name),
                       f"nothing is attached under the name '{name}' "
                       f"(`talb attach --fabric FILE` attaches; the file's 'name' field)", "")


def _write(state: dict) -> None:
    path = paths.attach_file(state["name"])
    paths.private_dir(path.parent)
    paths.write_private(path, json.dumps(state, indent=2))


def fabric_of(name: str):
    """The attached fabric (an AttachFabric), from its record."""
    from netns_topology.attach_spec import fabric_from_dict

    return fabric_from_dict(read_attach(name)["fabric"])


def _netns_path(ns: str) -> Path:
    return Path("/run/netns") / ns


def _resolve_netns(state: dict, where: str, node, progress: Progress) -> str | None:
    """The namespace name to reach ``node`` in (None: this one). A node given
    by pid gets a name (``ip netns attach``), recorded for detach."""
    if node.netns is not None:
        if not _netns_path(node.netns).exists():
            raise TestbedError(f"{where}.netns: no namespace {node.netns!r} under /run/netns")
        return node.netns
    if node.pid is None:
        return None
    if not Path(f"/proc/{node.pid}/ns/net").exists():
        raise TestbedError(f"{where}.pid: no process {node.pid} (node {node.name})")
    ns = paths.attach_netns_name(state["name"], node.name)
    if _netns_path(ns).exists():
        raise TestbedError(f"{where}.pid: namespace name {ns} is taken already "
                           f"(`talb detach --name {state['name']}` removes a stale one)")
    state["namespaces"].append(ns)  # before: a half-made name is removed too
    _write(state)
    proc = subprocess.run(["ip", "netns", "attach", ns, str(node.pid)], capture_output=True, text=True)
    if proc.returncode:
        raise TestbedError(f"{where}.pid: ip netns attach {ns} {node.pid}: {proc.stderr.strip()}")
    progress(f"namespace of {node.name} (pid {node.pid}) named {ns}")
    return ns


def _mtus(netns: str | None, ifaces: list[str]) -> dict[str, int]:
    from pyroute2 import IPRoute

    with (IPRoute(netns=netns, flags=0) if netns else IPRoute()) as ipr:
        out = {}
        for name in ifaces:
            idx = ipr.link_lookup(ifname=name)
            out[name] = ipr.get_links(idx[0])[0].get_attr("IFLA_MTU")
        return out


def _link_attr(netns: str | None, iface: str, attr: str):
    from pyroute2 import IPRoute

    with (IPRoute(netns=netns, flags=0) if netns else IPRoute()) as ipr:
        return ipr.get_links(ipr.link_lookup(ifname=iface)[0])[0].get_attr(attr)


def _check_interfaces(fabric, ns_of: dict) -> None:
    """Every described interface exists; switch ports have room for the
    TaLB option where hosts get the tagger. TestbedError naming the field."""
    from datapath.program import link_ifindexes

    for i, sw in enumerate(fabric.switches):
        for j, p in enumerate(sw.ports if not sw.remote else ()):
            try:
                link_ifindexes(ns_of[sw.name], [p.iface])
            except OSError:
                raise TestbedError(f"switches[{i}].ports[{j}].iface: no interface {p.iface!r} in "
                                   f"{ns_of[sw.name] or 'this namespace'} (switch {sw.name})") from None
    host_mtu = 0
    for i, h in enumerate(fabric.hosts):
        if not h.reachable:
            continue
        try:
            host_mtu = max(host_mtu, _mtus(ns_of[h.name], [h.iface])[h.iface])
            segs = _link_attr(ns_of[h.name], h.iface, "IFLA_GSO_MAX_SEGS")
        except (IndexError, OSError):
            raise TestbedError(f"hosts[{i}].iface: no interface {h.iface!r} in "
                               f"{ns_of[h.name]} (host {h.name})") from None
        if segs != 1:
            # TCP always builds GSO skbs; the tagger tags one packet per skb
            raise TestbedError(
                f"hosts[{i}].iface: {h.iface} (host {h.name}) has gso_max_segs {segs}: the "
                f"tagger needs one MTU-sized packet per skb (ip link set dev {h.iface} "
                f"gso_max_segs 1, in its namespace), or leave the host without the tagger")
    if not host_mtu:
        return
    for i, sw in enumerate(fabric.switches):
        if sw.remote:
            continue
        for j, (iface, mtu) in enumerate(_mtus(ns_of[sw.name], [p.iface for p in sw.ports]).items()):
            if mtu < host_mtu + OPTION_BYTES:
                raise TestbedError(
                    f"switches[{i}].ports[{j}].iface: {iface} (switch {sw.name}) has MTU {mtu}, "
                    f"but tagged packets from hosts of MTU {host_mtu} are {OPTION_BYTES} bytes "
                    f"longer: set it to at least {host_mtu + OPTION_BYTES} (ip link set {iface} "
                    f"mtu {host_mtu + OPTION_BYTES}), or leave the hosts without the tagger")


def _root_qdisc(ns: str | None, iface: str) -> tuple[str, int]:
    """(kind, handle) of ``iface``'s root qdisc; handle 0: the kernel's default."""
    from pyroute2 import IPRoute

    from netns_topology.qdisc import TC_H_ROOT

    with (IPRoute(netns=ns, flags=0) if ns else IPRoute()) as ipr:
        for qd in ipr.get_qdiscs(ipr.link_lookup(ifname=iface)[0]):
            if qd["parent"] == TC_H_ROOT:
                return qd.get_attr("TCA_KIND"), qd["handle"]
    return "none", 0


def _handle(handle: int) -> str:
    return f"{handle >> 16:x}:"


def _check_qdiscs(fabric, ns_of: dict) -> None:
    """Ports asking for bands have the kernel's default root qdisc, or the
    file allows replacing theirs. TestbedError naming the field."""
    if fabric.replace_qdisc:
        return
    for i, sw in enumerate(fabric.switches):
        for j, p in enumerate(sw.ports if not sw.remote else ()):
            if p.queue is None:
                continue
            kind, handle = _root_qdisc(ns_of[sw.name], p.iface)
            if handle != 0:
                raise TestbedError(
                    f"switches[{i}].ports[{j}].queue: port {p.iface} already has a root qdisc "
                    f"{kind} {_handle(handle)} that attach did not create; bands would replace it "
                    f"(drop queue: for this port, or set replace_qdisc: true: detach then leaves "
                    f"the kernel's default qdisc, not {kind})")


def _install_bands(sw, ns: str | None, state: dict, progress: Progress) -> None:
    """HTB + bfifo per band on the ports of ``sw`` that ask, each recorded
    before it is installed."""
    from pyroute2 import IPRoute

    from netns_topology import qdisc
    from netns_topology.qdisc import TC_H_ROOT

    for p in sw.ports:
        if p.queue is None:
            continue
        kind, handle = _root_qdisc(ns, p.iface)
        state["qdiscs"].append({"switch": sw.name, "netns": ns, "iface": p.iface,
                                "before": f"{kind} {_handle(handle)}"})
        _write(state)
        mtu = _mtus(ns, [p.iface])[p.iface]
        with (IPRoute(netns=ns, flags=0) if ns else IPRoute()) as ipr:
            index = ipr.link_lookup(ifname=p.iface)[0]
            if handle != 0:  # replace_qdisc: true (checked before)
                ipr.tc("del", index=index, handle=handle, parent=TC_H_ROOT)
            qdisc.apply(ipr, index, p.rate_bps, mtu, p.queue)
        progress(f"{len(p.queue.bands)} bands on {sw.name}:{p.iface} at {p.rate_bps / 1e6:g} Mbit/s"
                 + (f" (replaced {kind} {_handle(handle)})" if handle else ""))


def _remove_bands(rec: dict) -> None:
    """Delete the root qdisc attach installed on a port (the kernel puts
    its default back), if it is still ours: HTB 1:."""
    from pyroute2 import IPRoute

    from netns_topology.qdisc import ROOT, TC_H_ROOT

    ns = rec["netns"]
    with (IPRoute(netns=ns, flags=0) if ns else IPRoute()) as ipr:
        found = ipr.link_lookup(ifname=rec["iface"])
        if not found:
            return  # the interface is gone, and our qdisc with it
        if _root_qdisc(ns, rec["iface"]) == ("htb", ROOT):
            ipr.tc("del", index=found[0], handle=ROOT, parent=TC_H_ROOT)


def _attach_switch(fabric, sw, ns: str | None, state: dict, timer_values) -> None:
    from datapath.fabric import install_switch
    from datapath.loader import SwitchDatapath
    from datapath.maps import SwitchMaps
    from datapath.program import clsact_present, link_ifindexes

    ifaces = [p.iface for p in sw.ports]
    pin = paths.pin_dir(state["name"], sw.name)
    state["switches"][sw.name] = {
        "netns": ns, "pin": str(pin), "ports": ifaces,
        "clsact_before": [i for i in ifaces if clsact_present(ns, i)]}
    _write(state)
    with SwitchDatapath(ns, pin) as dp:
        dp.load()
        dp.attach(ifaces)
        dp.pin()
    ifindex = link_ifindexes(ns, ifaces)
    rows = [(p.iface, ifindex[p.iface], p.kind == "host", True) for p in sw.ports]
    groups = {ip: [ifindex[n] for n in names] for ip, names in fabric.forwarding_groups(sw.name).items()}
    leaves = [s.name for s in fabric.switches if any(p.kind == "host" for p in s.ports)]
    # packets are marked into the bands this switch's ports have (one band: none asked)
    n_bands, per_band = fabric.bands_of(sw.name)
    with SwitchMaps(pin) as maps:
        install_switch(maps, rows, groups, scheme=state["scheme"], n_bands=n_bands,
                       layers_per_band=per_band or _layers_per_band(),
                       port_rates={ifindex[p.iface]: _port_model(fabric, p) for p in sw.ports},
                       leaf_id=leaves.index(sw.name) if sw.name in leaves else None,
                       host_leaves={h.ip: leaves.index(fabric.leaf_of(h.name)) for h in fabric.hosts},
                       timer_values=timer_values)


def _port_model(fabric, port) -> tuple[int, int, int]:
    """(rate, buffer, burst) of a port for DRILL's and CONGA's queue model:
    the bands' bytes together where attach installs them (as
    datapath.fabric does), else the file's queue_limit."""
    if port.queue is not None:
        return port.rate_bps, port.queue.limit * len(port.queue.bands), port.queue.burst
    return port.rate_bps, fabric.queue_limit, 15_000


def _layers_per_band() -> int:
    from common.c_constants import CONST

    return CONST["TALB_DEFAULT_LAYERS_PER_BAND"]


def _attach_host(host, ns: str, state: dict) -> None:
    from datapath.host_loader import HostDatapath
    from datapath.program import clsact_present

    pin = paths.pin_dir(state["name"], host.name)
    state["hosts"][host.name] = {"netns": ns, "pin": str(pin), "iface": host.iface,
                                 "clsact_before": clsact_present(ns, host.iface)}
    _write(state)
    with HostDatapath(ns, pin) as hdp:
        hdp.load().attach([host.iface])
        hdp.pin()


def attach(fabric, *, scheme: str | None = None, agent: dict | None = None,
           progress: Progress = _quiet) -> dict:
    """Attach talb to ``fabric`` (an AttachFabric); returns the record.
    ``scheme``: instead of the file's; ``agent``: AgentConfig options of
    the agent to start (None: no agent)."""
    from datapath import timers
    from datapath.control import scheme_id_of
    from datapath.program import ensure_bpffs

    name = fabric.name
    scheme = scheme or fabric.scheme
    try:
        scheme_id_of(scheme)
    except ValueError as exc:
        raise TestbedError(f"--scheme: {exc}") from None
    require_root()
    if paths.state_file(name).exists():
        raise TestbedError(f"name: '{name}' is a testbed's prefix (talb testbed up): give the fabric "
                           f"file another name")
    if attached(name):
        raise TestbedError(f"name: a fabric is already attached as '{name}'; "
                           f"`talb detach --name {name}` first")
    window = timers.derive(fabric.slowest_multipath_rate())
    state = {"name": name, "status": "attaching", "pid": os.getpid(), "fabric": fabric.to_dict(),
             "scheme": scheme, "namespaces": [], "switches": {}, "qdiscs": [], "hosts": {},
             "agent": None}
    _write(state)  # first: a crash from here on is undone by `talb detach`
    try:
        ns_of = {}
        for i, sw in enumerate(fabric.switches):
            if not sw.remote:
                ns_of[sw.name] = _resolve_netns(state, f"switches[{i}]", sw, progress)
        for i, h in enumerate(fabric.hosts):
            if h.reachable:
                ns_of[h.name] = _resolve_netns(state, f"hosts[{i}]", h, progress)
        _check_interfaces(fabric, ns_of)
        _check_qdiscs(fabric, ns_of)
        ensure_bpffs()
        for sw in fabric.switches:
            if sw.remote:
                continue
            _attach_switch(fabric, sw, ns_of[sw.name], state, window)
            progress(f"data path on {sw.name}: {len(sw.ports)} ports, scheme {scheme}")
            _install_bands(sw, ns_of[sw.name], state, progress)
        for h in fabric.hosts:
            if h.reachable:
                _attach_host(h, ns_of[h.name], state)
                progress(f"tagging program on {h.name} ({h.iface})")
        state.update(status="up")
        state.pop("pid")
        _write(state)
        if agent is not None:
            from agent.daemon import start_background

            opts = {"window_s": window.window_s, **{k: v for k, v in agent.items() if v is not None}}
            pid = start_background(name, **opts)
            state["agent"] = {"pid": pid}
            _write(state)
            progress(f"agent running (pid {pid}), log {paths.state_dir(name) / 'agent.log'}")
    except BaseException as exc:
        progress(f"failed ({type(exc).__name__}: {exc}); undoing what was done")
        detach(name)
        raise
    return state


def detach(name: str, *, progress: Progress = _quiet) -> dict:
    """Undo what :func:`attach` recorded under ``name``, and nothing else."""
    from agent.daemon import stop_background
    from datapath.host_loader import HostDatapath
    from datapath.loader import SwitchDatapath
    from datapath.program import remove_pins

    paths.check_prefix(name)
    require_root()
    state = read_attach(name)
    done = {"name": name, "agent": False, "switches": [], "qdiscs": [], "hosts": [],
            "namespaces": []}
    if stop_background(name):
        done["agent"] = True
        progress("stopped the agent")
    errors = []  # every step is tried; the record stays while one failed

    def step(what: str, fn) -> bool:
        try:
            fn()
            return True
        except Exception as exc:  # noqa: BLE001 - reported below, the others still undone
            errors.append(f"{what}: {type(exc).__name__}: {exc}")
            return False

    for sw, rec in state.get("switches", {}).items():
        if step(f"switch {sw}", lambda rec=rec: (
                SwitchDatapath(rec["netns"], rec["pin"]).detach(
                    rec["ports"], keep_clsact=rec["clsact_before"]),
                remove_pins(rec["pin"]))):
            done["switches"].append(sw)
            progress(f"detached {sw} ({len(rec['ports'])} ports)")
    for rec in state.get("qdiscs", []):
        if step(f"bands on {rec['switch']}:{rec['iface']}", lambda rec=rec: _remove_bands(rec)):
            done["qdiscs"].append(f"{rec['switch']}:{rec['iface']}")
            progress(f"removed the bands of {rec['switch']}:{rec['iface']} "
                     f"(the kernel's default qdisc is back)")
    for host, rec in state.get("hosts", {}).items():
        if step(f"host {host}", lambda rec=rec: (
                HostDatapath(rec["netns"], rec["pin"]).detach(
                    [rec["iface"]], keep_clsact=[rec["iface"]] if rec["clsact_before"] else []),
                remove_pins(rec["pin"]))):
            done["hosts"].append(host)
            progress(f"detached the tagger of {host}")
    for ns in state.get("namespaces", []):
        if _netns_path(ns).exists():
            # unmounts the name only: the namespace is its process's and stays
            proc = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True)
            if proc.returncode:
                errors.append(f"ip netns delete {ns}: {proc.stderr.strip()}")
            else:
                done["namespaces"].append(ns)
    if errors:
        raise TestbedError(f"detach '{name}': " + "; ".join(errors)
                           + " (the record is kept: fix and run `talb detach` again)")
    base = paths.pin_dir(name)
    if base.is_dir() and not any(base.iterdir()):
        base.rmdir()
    shutil.rmtree(paths.state_dir(name), ignore_errors=True)
    return done


def uplinks(name: str) -> dict[str, list[tuple[str | None, str]]]:
    """{leaf: [(its namespace, interface) of each port facing a switch]} of
    an attached fabric (what `talb send` captures on)."""
    state = read_attach(name)
    fabric = fabric_of(name)
    out = {}
    for sw in fabric.switches:
        if sw.name not in state["switches"]:  # remote
            continue
        ns = state["switches"][sw.name]["netns"]
        out[sw.name] = [(ns, p.iface) for p in sw.ports if p.kind == "fabric"]
    return out


def host_netns(name: str, host: str) -> str | None:
    rec = read_attach(name).get("hosts", {}).get(host)
    return rec["netns"] if rec else None


#: the switch config fields a scheme and its parameters live in (datapath/control.py's
#: SCHEME_PARAMS): what :func:`set_scheme` saves and :func:`restore_scheme` puts back
def _scheme_fields() -> list[str]:
    from datapath.control import SCHEME_PARAMS

    return ["scheme", *dict.fromkeys(f for params in SCHEME_PARAMS.values()
                                     for f, _lo, _hi in params.values())]


def set_scheme(name: str, scheme_name: str | None, params: dict | None = None) -> dict:
    """Show (``scheme_name`` None) or switch the scheme of every switch
    attached here under ``name``. Returns ``{"schemes": {switch: scheme},
    "saved": {switch: {field: value}}}``; ``saved`` is what
    :func:`restore_scheme` puts back. A switch that refuses (SchemeError)
    leaves the ones switched before it as they were."""
    from datapath.control import config_update, read_config
    from datapath.maps import SwitchMaps

    fields = _scheme_fields()
    schemes, saved = {}, {}
    try:
        for sw, rec in read_attach(name)["switches"].items():
            with SwitchMaps(rec["pin"]) as maps:
                if scheme_name:
                    from datapath.control import set_scheme as set_one

                    with config_update(maps) as cfg:
                        before = {f: getattr(cfg, f) for f in fields}
                    set_one(maps, scheme_name, params or {})
                    saved[sw] = before
                schemes[sw] = read_config(maps)["scheme"]
    except BaseException:
        restore_scheme(name, saved)
        raise
    return {"schemes": schemes, "saved": saved}


def restore_scheme(name: str, saved: dict) -> None:
    """Put back the scheme fields :func:`set_scheme` saved (``{switch:
    {field: value}}``) of the switches attached here under ``name``."""
    from datapath.control import config_update
    from datapath.maps import SwitchMaps

    switches = read_attach(name)["switches"]
    for sw, before in saved.items():
        with SwitchMaps(switches[sw]["pin"]) as maps, config_update(maps) as cfg:
            for f, v in before.items():
                setattr(cfg, f, v)
