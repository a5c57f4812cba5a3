"""The testbed's life cycle: up, down, status, set_queueing, set_rto_min.

`up` validates, builds the fabric (netns_topology), attaches the switch data
path (datapath.fabric) and records what it made in a state file (read by
netns_topology/state.py). Any failure on the way — an exception, Ctrl-C —
tears down everything made so far, so a failed `up` never leaves half a
fabric behind. `down` works from the state
file *and* a prefix scan, so it also cleans up after a crashed or killed `up`.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from typing import Callable

from common import paths
from common.excerpt import shown
from netns_topology.state import (DATAPATHS, PROGRAM_DATAPATHS, TestbedError, exists, queueing_of,
                                  read_state, regime_of, require_root, rto_min_of, write_state)
from netns_topology.teardown import namespaces  # this prefix's, by a /run/netns scan

Progress = Callable[[str], None]


def _quiet(_msg: str) -> None:
    pass


def set_queueing(prefix: str, queueing: str) -> dict:
    """Switch every switch port of the running testbed to ``queueing``:
    ``bands`` (the topology's queue) or ``fifo`` (one FIFO per port holding
    the same bytes; netns_topology/qdisc.py). Hosts' ports, the data path's
    band marks and the agent's view of the ports stay as the topology says
    (docs/experiments.md, "Queueing"). Nothing is done when the ports
    already queue so; the ports must be idle (queued packets are dropped).
    Recorded in the state file (:func:`queueing_of`); returns the record."""
    from netns_topology import qdisc, topology_from_dict

    if queueing not in qdisc.QUEUEINGS:
        raise TestbedError(f"queueing: one of {', '.join(qdisc.QUEUEINGS)}, got {shown(queueing)}")
    require_root()
    state = read_state(prefix)
    now = queueing_of(prefix, state)
    if now["mode"] == queueing:
        return now
    if state.get("status") != "up":
        raise TestbedError(f"queueing: testbed '{prefix}' is {state.get('status')}, not up")
    topo = topology_from_dict(state["topology"])
    if not topo.shaping:
        raise TestbedError(f"queueing: testbed '{prefix}' has no port queues (shaping: false)")
    queue = qdisc.queue_for(topo.queue, queueing)
    try:
        qdisc.set_switch_queues(topo, prefix, queue)
    except BaseException:
        try:        # as it was: a port left without its queue would not shape its link
            qdisc.set_switch_queues(topo, prefix, qdisc.queue_for(topo.queue, now["mode"]))
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            pass
        raise
    record = {"mode": queueing, "switch_queue": queue.to_dict(),
              "topology_queue": topo.queue.to_dict()}
    if queueing == "bands":
        state.pop("queueing", None)
    else:
        state["queueing"] = record
    write_state(prefix, state)
    if state.get("regime"):     # its buffers and phantom queues follow the new queueing
        from testbed.regime import reapply

        reapply(prefix)
    return record


def set_rto_min(prefix: str, value) -> int | None:
    """Set the hosts' minimum TCP RTO of the running testbed: ``value`` a
    duration (``10ms``, ``0.01s``) or whole milliseconds, or ``kernel`` /
    ``default`` / None for no route metric (the kernel's 200 ms). Every
    host's route to the fabric is replaced as the builder makes it
    (netns_topology.builder.set_host_route: a locked RTAX_RTO_MIN metric,
    or none); connections opened from then on use it. Nothing is done when
    it is in force already. Recorded in the state file while it differs
    from the topology's ``rto_min`` (netns_topology.state.rto_min_of,
    `talb testbed status`); returns the value in force, ms or None."""
    from pyroute2 import IPRoute

    from netns_topology import topology_from_dict
    from netns_topology.builder import set_host_route
    from netns_topology.errors import TopologyError
    from netns_topology.params import check_rto_min_setting

    try:
        ms = check_rto_min_setting("rto_min", value)
    except TopologyError as exc:
        raise TestbedError(str(exc)) from None
    require_root()
    state = read_state(prefix)
    now = rto_min_of(prefix, state)
    if now == ms:
        return now
    if state.get("status") != "up":
        raise TestbedError(f"rto_min: testbed '{prefix}' is {state.get('status')}, not up")
    topo = topology_from_dict(state["topology"])

    def route_all(rto):
        for h in topo.hosts:
            with IPRoute(netns=paths.netns_name(prefix, h.name), flags=0) as ipr:
                set_host_route(ipr, h, rto)
    try:
        route_all(ms)
    except BaseException:
        try:        # as it was: no host left with another minimum RTO than recorded
            route_all(now)
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            pass
        raise
    if ms == topo.rto_min:
        state.pop("rto_min", None)
    else:
        state["rto_min"] = {"ms": ms}
    write_state(prefix, state)
    return ms


def up(topo, prefix: str = paths.DEFAULT_PREFIX, *, datapath: str = "bpf",
       replace: bool = False, agent: dict | None = None, progress: Progress = _quiet) -> dict:
    """Build `topo` under `prefix` and attach the data path; returns the state.

    ``agent``: start the PCM agent (`talb agent`) for the testbed, with these
    AgentConfig options (``{}`` for the defaults); None: no agent. A failure
    to start it fails `up` like any other step (everything is removed)."""
    _check_before_building(topo, prefix, datapath, agent)
    require_root()
    if exists(prefix):
        if not replace:
            raise TestbedError(
                f"a testbed with prefix '{prefix}' is already up "
                f"({len(namespaces(prefix))} namespaces); run `talb testbed down --prefix {prefix}` "
                f"first, use --replace, or pick another --prefix")
        progress(f"replacing the existing testbed '{prefix}'")
        down(prefix, progress=progress)

    started = time.monotonic()
    state = {
        "prefix": prefix,
        "status": "building",
        "pid": os.getpid(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "datapath": datapath,
        "topology": topo.to_dict(),
    }
    # Written first, so that a crash from here on is found by `down`.
    write_state(prefix, state)
    try:
        breakdown = _build_and_attach(topo, prefix, datapath, started, progress)
        # where `up` went (`talb bench build --breakdown`)
        state.update(status="up", build_seconds=round(time.monotonic() - started, 2),
                     breakdown=breakdown)
        state.pop("pid")
        write_state(prefix, state)  # the agent reads the topology from it
        if agent is not None:
            _start_agent(prefix, agent, progress)
    except BaseException as exc:
        progress(f"failed ({type(exc).__name__}: {exc}); removing what was built")
        down(prefix)
        raise
    return state


def _check_before_building(topo, prefix: str, datapath: str, agent: dict | None) -> None:
    """Everything `up` can refuse before it touches the machine: prefix, data
    path (and XDP's limits), the agent's options, bcc for this Python."""
    paths.check_prefix(prefix)
    if datapath not in DATAPATHS:
        raise TestbedError(f"datapath: must be one of {', '.join(DATAPATHS)}, got {shown(datapath)}")
    if agent is not None and datapath not in PROGRAM_DATAPATHS:
        raise TestbedError("agent: the kernel-bridge data path has no maps for an agent "
                           "to manage (use --no-agent with --datapath bridge)")
    if datapath == "xdp":
        from datapath.xdp import XdpError, check_pcm_delay, check_topology

        try:
            check_topology(topo)
            if agent is not None:
                check_pcm_delay(agent.get("pcm_delay", "model"))
        except XdpError as exc:
            raise TestbedError(str(exc)) from None
    if agent is not None:
        from agent.config import AgentConfig

        AgentConfig(**agent)  # a bad --metrics-addr fails before anything is built
    if datapath in PROGRAM_DATAPATHS:
        from common.bcc_bindings import check as check_bcc

        check_bcc()     # no bcc for this Python: say so before anything is built


def _build_and_attach(topo, prefix: str, datapath: str, started: float, progress) -> dict:
    """The namespaces, links and queues built, the data path's programs
    loaded (verified while the fabric is built) and attached; returns where
    the time went. The programs' loader is closed on every path."""
    from netns_topology import build

    load = None
    try:
        if datapath in PROGRAM_DATAPATHS:
            from datapath.fabric import FabricLoad

            # the kernel verifies every node's programs while the fabric is built
            load = FabricLoad(topo, prefix, datapath=datapath)
        breakdown = {"before_build_s": _since_process_start(started),
                     "build": build(topo, prefix, progress=progress)}
        if datapath in PROGRAM_DATAPATHS:
            from datapath.fabric import attach_fabric

            attached = time.monotonic()
            attach_fabric(topo, prefix, progress=progress, load=load)
            load.close()
            breakdown["attach_total_s"] = round(time.monotonic() - attached, 4)
            breakdown["load"] = load.timings()
    except BaseException:
        if load is not None:
            load.close()
        raise
    return breakdown


def _start_agent(prefix: str, agent: dict, progress) -> None:
    """The PCM agent in the background, and where its metrics and log are."""
    from agent.config import DEFAULT_METRICS_PORT
    from agent.daemon import metrics_endpoint, start_background

    pid = start_background(prefix, **agent)
    where = metrics_endpoint(prefix)
    taken = ""
    if agent.get("metrics_port") is None and where \
            and not where.endswith(f":{DEFAULT_METRICS_PORT}"):
        taken = f" ({DEFAULT_METRICS_PORT} is in use: another testbed's agent?)"
    served = f"metrics http://{where}/metrics{taken}, " if where else ""
    progress(f"agent running (pid {pid}), {served}"
             f"log {paths.state_dir(prefix) / 'agent.log'}")


def _since_process_start(now: float) -> float | None:
    """Seconds from this process's start to monotonic ``now`` (interpreter
    start, imports, checks): /proc's start time, in clock ticks since boot."""
    try:
        fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME) - (time.monotonic() - now)
        return round(boot_now - started, 3)
    except (OSError, ValueError, IndexError):
        return None


def _was_batched(prefix: str) -> bool:
    from netns_topology.params import BATCHED

    try:
        return read_state(prefix).get("topology", {}).get("shaping") == BATCHED
    except TestbedError:
        return False


def down(prefix: str = paths.DEFAULT_PREFIX, *, progress: Progress = _quiet) -> dict:
    """Remove namespaces, pinned maps and the state file of `prefix`. Idempotent."""
    from netns_topology import teardown

    paths.check_prefix(prefix)
    require_root()
    from agent.daemon import stop_background

    if paths.attach_file(prefix).exists():  # a fabric `talb attach` loaded: undo that
        from testbed.attach import detach

        detach(prefix, progress=progress)
    if stop_background(prefix):  # first: it holds maps and netlink sockets
        progress("stopped the agent")
    removed = teardown(prefix)
    if removed:
        progress(f"removed {len(removed)} namespaces")
    pins = paths.pin_dir(prefix)
    had_pins = pins.exists()
    if had_pins:
        from datapath.loader import remove_pins

        remove_pins(pins)
        progress(f"removed pinned maps under {pins}")
    had_state = paths.state_dir(prefix).exists()
    batched = _was_batched(prefix)
    used_dctcp_bpf = _used_dctcp_bpf(prefix)
    shutil.rmtree(paths.state_dir(prefix), ignore_errors=True)
    if used_dctcp_bpf:
        from testbed.regime import release_dctcp_bpf

        if release_dctcp_bpf(prefix):
            progress("the last testbed using dctcp-bpf: unregistered it")
    if batched:
        from netns_topology.state import release_batched

        if release_batched(prefix):
            progress("the last batched testbed: sch_htb's htb_hysteresis is off again")
    return {"prefix": prefix, "namespaces": removed, "pins": had_pins, "state": had_state}


def _used_dctcp_bpf(prefix: str) -> bool:
    """Whether the testbed's recorded regime uses dctcp-bpf (a crashed run's)."""
    try:
        return (read_state(prefix).get("regime") or {}).get("tcp_cc") == "dctcp-bpf"
    except Exception:  # noqa: BLE001 - no state, no regime
        return False


def status(prefix: str = paths.DEFAULT_PREFIX) -> dict:
    """What is up: hosts, switches with ports, rates and live counters."""
    from netns_topology import topology_from_dict

    require_root()
    state = read_state(prefix)
    topo = topology_from_dict(state["topology"])
    present = set(namespaces(prefix))
    hosts = [{
        "name": h.name, "namespace": paths.netns_name(prefix, h.name),
        "ip": h.ip, "mac": h.mac, "leaf": h.leaf, "iface": h.iface,
    } for h in topo.hosts]
    switches = []
    for sw in topo.switches:
        ns = paths.netns_name(prefix, sw.name)
        counters = (_switch_counters(prefix, sw.name)
                    if state.get("datapath") in PROGRAM_DATAPATHS else {})
        ports = []
        for port_id, port in enumerate(topo.ports(sw.name)):
            stats = counters.get("ports", {}).get(port_id, {})
            ports.append({
                "name": port.name, "peer": port.peer, "kind": port.kind,
                "rate_bps": port.rate_bps, "up": port.up,
                "tx_bytes": stats.get("tx_bytes"), "tx_packets": stats.get("tx_packets"),
                "rx_bytes": stats.get("rx_bytes"), "rx_packets": stats.get("rx_packets"),
            })
        switches.append({"name": sw.name, "role": sw.role, "namespace": ns,
                         "scheme": counters.get("scheme"), "ports": ports,
                         "counters": counters.get("counters", {}),
                         "timers": counters.get("timers")})
    expected = {h["namespace"] for h in hosts} | {s["namespace"] for s in switches}
    missing = sorted(expected - present)
    from agent.daemon import metrics_endpoint, running_pid
    from datapath import timers

    pid = running_pid(prefix)
    return {"prefix": prefix, "status": state["status"], "datapath": state.get("datapath"),
            "agent_pid": pid, "agent_metrics": metrics_endpoint(prefix),
            "agent_window_s": _agent_window(prefix) if pid else None,
            "queueing": queueing_of(prefix, state)["mode"],
            "created": state.get("created"), "build_seconds": state.get("build_seconds"),
            # in force (the topology's, or set since: set_rto_min); None: the kernel's 200 ms
            "rto_min_ms": rto_min_of(prefix, state),
            "rto_min_topology_ms": topo.rto_min,
            # buffers, ECN, the hosts' congestion control (testbed/regime.py)
            "regime": {k: v for k, v in regime_of(prefix, state).items() if k != "ports"},
            "timers": timers.for_topology(topo).to_dict(),
            "hosts": hosts, "switches": switches, "missing_namespaces": missing}


def _agent_window(prefix: str) -> float | None:
    """The running agent's window (its snapshot), None before its first one."""
    from agent.snapshot import snapshot_path

    try:
        return json.loads(snapshot_path(prefix).read_text())["config"]["window_s"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _switch_counters(prefix: str, switch: str) -> dict:
    from datapath.control import read_config, read_counters, read_port_stats
    from datapath.maps import SwitchMaps
    from datapath.schemes.registry import SCHEMES

    # the config fields whose defaults follow the link rate: each scheme's
    # parameters with a timer (datapath/schemes/<name>.py)
    timer_fields = tuple(dict.fromkeys(p.field for s in SCHEMES for p in s.params if p.timer))

    pin = paths.pin_dir(prefix, switch)
    if not pin.exists():
        return {}
    maps = SwitchMaps(pin)
    try:
        cfg = read_config(maps)
        return {"ports": read_port_stats(maps), "counters": read_counters(maps),
                "scheme": cfg["scheme"],
                # in force on the switch: derived at `up` (datapath/timers.py) or set since
                "timers": {k: cfg[k] for k in timer_fields}}
    finally:
        maps.close()
