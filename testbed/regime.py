"""The regime a testbed runs in (issue 36; docs/experiments.md, "Regime"):
its switch buffers, ECN marking at the switches, the hosts' ECN
negotiation and congestion control. Changed on a running testbed between
runs, like its queueing (testbed.lifecycle.set_queueing), and recorded in
its state file (netns_topology.state.regime_of), which every results file
copies.

* ``buffer``: ``deep`` (the topology's queue) or ``scaled`` (each switch
  port's queue from the paper's 512 KB at 100 Gbit/s and the run's time
  scale, netns_topology/buffers.py). Under either queueing: a FIFO port
  holds what its bands would.
* ``ecn``: the switches mark CE above K (bpf/include/talb/ecn.h, a phantom
  queue per port and band set up here with the port's rate, K, limit,
  burst and installed bands), and every host negotiates ECN
  (net.ipv4.tcp_ecn = 1; off: 2, the kernel's default: answer ECN, never
  ask for it).
* ``tcp_cc``: the hosts' default congestion control (None: the topology's
  tcp_cc); ``dctcp-bpf`` registers our BPF DCTCP for as long as a testbed
  uses it (datapath/tcp_cc.py) and unregisters it when the last one stops.

Hosts' own queues are left as the topology says: the buffers scaled are
the switches' (the paper's 512 KB is a switch port's).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from common import paths
from common.excerpt import shown
from netns_topology.state import (TestbedError, queueing_of, read_state, regime_of, require_root,
                                  write_state)

#: The regimes a sweep names (experiments/sweep/plan.py, `talb bench --regime`):
#: name -> (buffer, ECN, the hosts' congestion control; None: the topology's).
#: "deep" is every run before issue 36 (a RunSpec leaves it out: regime None).
#: The ECN regimes run DCTCP as the paper does (sec. V-A), ours as BPF
#: (this kernel has no tcp_dctcp; datapath/tcp_cc.py).
NAMED = {
    "deep": ("deep", False, None),
    "scaled": ("scaled", False, None),
    "deep-ecn": ("deep", True, "dctcp-bpf"),
    "scaled-ecn": ("scaled", True, "dctcp-bpf"),
}

#: net.ipv4.tcp_ecn: 1 asks for ECN on outgoing connections and answers it;
#: 2 (the kernel's default) only answers
TCP_ECN_ON, TCP_ECN_DEFAULT = "1", "2"


def _write_host_sysctls(prefix: str, topo, values: dict[str, str]) -> None:
    from pyroute2 import netns

    for h in topo.hosts:
        netns.pushns(paths.netns_name(prefix, h.name))
        try:
            for key, value in values.items():
                Path("/proc/sys", key.replace(".", "/")).write_text(value)
        finally:
            netns.popns()


def _testbeds_using_dctcp_bpf(but: str) -> list[str]:
    """Other testbeds whose recorded regime uses dctcp-bpf."""
    from datapath.tcp_cc import DCTCP_BPF

    out = []
    for d in sorted(paths.RUN_DIR.glob("*/state.json")) if paths.RUN_DIR.exists() else []:
        prefix = d.parent.name
        if prefix == but:
            continue
        try:
            if (read_state(prefix).get("regime") or {}).get("tcp_cc") == DCTCP_BPF:
                out.append(prefix)
        except Exception:  # noqa: BLE001 - another testbed's broken state is not ours to judge
            continue
    return out


def _switch_ports(topo, prefix: str, queueing: str, buffer: str, time_scale: float | None,
                  install: bool) -> dict:
    """Every switch port's effective buffer ({switch: {port: PortBuffer}}),
    with the ifindexes; ``install``: reinstall each port's qdisc with it."""
    from pyroute2 import IPRoute

    from netns_topology import buffers, qdisc

    out = {}
    for sw in topo.switches:
        out[sw.name] = {}
        with IPRoute(netns=paths.netns_name(prefix, sw.name), flags=0) as ipr:
            for port in topo.ports(sw.name):
                found = ipr.link_lookup(ifname=port.name)
                if not found:
                    raise TestbedError(f"regime: no interface {port.name} in "
                                       f"{paths.netns_name(prefix, sw.name)}")
                buf = buffers.port_buffer(topo.queue, queueing, buffer, port.rate_bps,
                                          topo.switch_mtu, time_scale)
                if install:
                    qdisc.reinstall(ipr, found[0], port.rate_bps, topo.switch_mtu,
                                    buffers.queue_with(topo.queue, queueing, buf), topo.shaping)
                out[sw.name][port.name] = (found[0], buf)
    return out


def _program_switches(topo, prefix: str, queueing: str, ports: dict, ecn: bool) -> None:
    """Each switch's ECN setup (on/off) and DRILL's queue limits (the
    port's bytes in force)."""
    from datapath import control
    from datapath.maps import SwitchMaps
    from netns_topology import qdisc

    queue = qdisc.batched_queue(topo.queue) if topo.shaping == qdisc.BATCHED else topo.queue
    weights = list(topo.queue.bands) if queueing == "bands" else [1]
    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            control.set_port_rates(maps, {ix: (buf.port_bps, buf.total, queue.burst)
                                          for ix, buf in ports[sw.name].values()})
            control.set_ecn(maps, {ix: {"rate_bps": buf.port_bps, "k_bytes": buf.k,
                                        "limit_bytes": buf.per_band, "burst_bytes": queue.burst,
                                        "weights": weights}
                                   for ix, buf in ports[sw.name].values()} if ecn else None)


def set_regime(prefix: str, *, buffer: str = "deep", ecn: bool = False, tcp_cc: str | None = None,
               time_scale: float | None = None) -> dict:
    """Put testbed ``prefix`` in this regime (see the module); the switch
    ports must be idle (their queues are reinstalled when the buffers
    change). Returns the record (:func:`netns_topology.state.regime_of`).
    On a failure the testbed is put back as it was."""
    from datapath import tcp_cc as cc
    from netns_topology import buffers, topology_from_dict

    if buffer not in buffers.BUFFERS:
        raise TestbedError(f"--buffer: one of {', '.join(buffers.BUFFERS)}, got {shown(buffer)}")
    if buffer == "scaled" and time_scale is None:
        raise TestbedError("--buffer scaled: needs the run's time scale (training runs have one; "
                           "background-only runs do not)")
    require_root()
    state = read_state(prefix)
    if state.get("status") != "up":
        raise TestbedError(f"regime: testbed '{prefix}' is {state.get('status')}, not up")
    topo = topology_from_dict(state["topology"])
    if not topo.shaping and (buffer != "deep" or ecn):
        raise TestbedError(f"regime: testbed '{prefix}' has no port queues (shaping: false)")
    if ecn and state.get("datapath") != "bpf":
        raise TestbedError(f"--ecn: the switches mark with the bpf data path's TC programs; "
                           f"testbed '{prefix}' forwards with {state.get('datapath')!r}")
    want_cc = tcp_cc or topo.tcp_cc
    try:
        cc.check(want_cc)
    except cc.TcpCcError as exc:
        raise TestbedError(str(exc)) from None
    before = regime_of(prefix, state)
    queueing = queueing_of(prefix, state)["mode"]
    # the qdiscs change only when the buffers do (deep ones do not depend on the time scale)
    reinstall = (buffer, time_scale if buffer == "scaled" else None) != \
        (before["buffer"], before.get("time_scale") if before["buffer"] == "scaled" else None)
    registered_here = False
    try:
        if want_cc == cc.DCTCP_BPF:
            registered_here = cc.register()
        ports = _switch_ports(topo, prefix, queueing, buffer, time_scale, reinstall)
        if topo.shaping:
            _program_switches(topo, prefix, queueing, ports, ecn)
        _write_host_sysctls(prefix, topo, {
            "net.ipv4.tcp_ecn": TCP_ECN_ON if ecn else TCP_ECN_DEFAULT,
            "net.ipv4.tcp_congestion_control": cc.kernel_name(want_cc)})
    except BaseException:
        try:        # as it was
            if before.get("buffer") != buffer or before.get("ecn") != ecn or \
                    before.get("tcp_cc") != want_cc:
                _apply_record(prefix, topo, before)
            if registered_here:
                cc.unregister()
        except Exception:  # noqa: BLE001 - the first failure is the one to report
            pass
        raise
    if before.get("tcp_cc") == cc.DCTCP_BPF and want_cc != cc.DCTCP_BPF and \
            not _testbeds_using_dctcp_bpf(prefix):
        cc.unregister()
    record = {"buffer": buffer, "ecn": bool(ecn),
              "host_tcp_ecn": int(TCP_ECN_ON if ecn else TCP_ECN_DEFAULT), "tcp_cc": want_cc,
              "tcp_cc_kernel": cc.kernel_name(want_cc), "time_scale": time_scale,
              "k_rule": {"target_k_s": buffers.TARGET_K_S,
                         "k_floor_frames": buffers.K_FLOOR_FRAMES},
              "buffer_rule": {"target_bytes": buffers.TARGET_BUFFER_BYTES,
                              "target_bps": buffers.TARGET_BUFFER_BPS,
                              "floor_frames": buffers.FLOOR_FRAMES},
              "queueing": queueing,
              "ports": {sw: {p: buf.to_dict() for p, (_ix, buf) in ps.items()}
                        for sw, ps in ports.items()}}
    state = read_state(prefix)
    if buffer == "deep" and not ecn and want_cc == topo.tcp_cc:
        state.pop("regime", None)
    else:
        state["regime"] = record
    write_state(prefix, state)
    return regime_of(prefix, state)


def release_dctcp_bpf(prefix: str) -> bool:
    """After testbed ``prefix`` is gone: unregister dctcp-bpf unless another
    testbed's regime uses it. True if it was unregistered."""
    from datapath import tcp_cc as cc

    if not cc.registered() or _testbeds_using_dctcp_bpf(prefix):
        return False
    cc.unregister()
    return True


def _apply_record(prefix: str, topo, record: dict) -> None:
    set_regime(prefix, buffer=record.get("buffer", "deep"), ecn=bool(record.get("ecn")),
               tcp_cc=record.get("tcp_cc") if record.get("tcp_cc") != topo.tcp_cc else None,
               time_scale=record.get("time_scale"))


def reapply(prefix: str) -> None:
    """The recorded regime installed again (after the switch ports'
    queueing changed: a FIFO port holds its bands' bytes, and the phantom
    queues follow the bands installed)."""
    state = read_state(prefix)
    rec = state.get("regime")
    if rec:
        from netns_topology import topology_from_dict

        topo = topology_from_dict(state["topology"])
        state.pop("regime")
        write_state(prefix, state)
        _apply_record(prefix, topo, rec)


@contextmanager
def regime_for_run(prefix: str, *, buffer: str | None, ecn: bool | None, tcp_cc: str | None,
                   time_scale: float | None, built: bool, say=lambda _m: None) -> Iterator[dict]:
    """The regime asked for (None fields: as the testbed is now) in force
    while the block runs; yields its record. On a testbed the run did not
    build, the one before is put back after it, also on failure (on one
    it built too: nothing it registered outlives the run). ``built`` is
    kept for the callers' symmetry with the other run settings."""
    before = regime_of(prefix)
    if buffer is None and ecn is None and tcp_cc is None:
        yield before
        return
    want = dict(buffer=before["buffer"] if buffer is None else buffer,
                ecn=before["ecn"] if ecn is None else ecn,
                tcp_cc=tcp_cc or before["tcp_cc"],
                time_scale=time_scale)
    now = set_regime(prefix, **want)
    if (now["buffer"], now["ecn"], now["tcp_cc"]) != (before["buffer"], before["ecn"],
                                                      before["tcp_cc"]):
        say(f"regime: buffers {now['buffer']}, ECN {'on' if now['ecn'] else 'off'}, "
            f"tcp_cc {now['tcp_cc']} (was {before['buffer']}, "
            f"{'on' if before['ecn'] else 'off'}, {before['tcp_cc']})")
    try:
        yield now
    finally:
        # also on a testbed built for the run: nothing (dctcp-bpf) outlives it
        from netns_topology import topology_from_dict
        from netns_topology.state import exists

        if exists(prefix):
            state = read_state(prefix)
            if state.get("status") == "up":
                _apply_record(prefix, topology_from_dict(state["topology"]), before)
