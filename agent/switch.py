"""One switch, each window: read its counters, compute U, E[W] and the PCM
of every multipath group, publish them to its maps.

Readings are immutable snapshots (:class:`SwitchReading`); the metrics
exporter and the snapshot file read the latest one from other threads.

A window keeps its numbers as plain lists (one per quantity, one entry per
port) and builds the :class:`SwitchReading` only when someone asks for
``latest`` (a scrape, the snapshot file): at a window a millisecond, 64
ports' reading objects cost more than the window's own work.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from agent import pcm as pcm_math
from agent import pcm_native
from agent.config import AgentConfig
from agent.linkstate import LinkWatcher
from agent.routing import PortSpec
from agent.rtnl import QdiscStats, Rtnl
from agent.window import ColumnWindow
from common.c_constants import COUNTER_NAMES
from datapath.control import GroupPublisher, read_config, tensor_occupancy
from datapath.maps import SwitchMaps
from datapath.statsread import PerCpuArrayReader

log = logging.getLogger("talb.agent")

_TX_BYTES, _TX_PACKETS = 3, 2  # fields of struct port_stats
_NONE_FAILED: frozenset = frozenset()   # no group failed to publish


@dataclass(frozen=True)
class PortReading:
    name: str
    kind: str
    rate_bps: int
    up: bool
    tx_bytes: int                  # cumulative, from the kernel
    tx_packets: int
    utilization: float | None      # None until the first window
    delay_model: float | None      # seconds
    delay_measured: float | None   # seconds, from the latest qdisc reading
    backlog_bytes: int | None
    qdisc_drops: int | None        # cumulative, root qdisc of the port


@dataclass(frozen=True)
class GroupReading:
    gid: int
    label: str                     # port names joined by "+"
    ports: tuple[str, ...]         # distinct ports, group order
    pcm: tuple[float, ...]
    weights: tuple[float, ...]     # normalised 1 - P_i


@dataclass(frozen=True)
class SwitchReading:
    name: str
    t: float                       # monotonic time of the reading
    dt: float | None               # length of the window it closes
    ports: tuple[PortReading, ...]
    groups: tuple[GroupReading, ...]
    counters: dict                 # CNT_* name -> packets (latest housekeeping)
    scheme: str | None
    tensors: int | None            # live tensor table entries


@dataclass(frozen=True)
class _Port:
    spec: PortSpec
    ifindex: int
    port_id: int
    max_wait_s: float              # the buffer's drain time (M/D/1 cap)


@dataclass(frozen=True)
class _Group:
    gid: int
    members: tuple[int, ...]       # ifindexes as installed (publish_pcm's key)
    distinct: tuple[int, ...]
    names: tuple[str, ...]
    positions: tuple[int, ...] | None  # each member's index in ``distinct`` (None: the same)
    at: tuple[int, ...]            # each distinct port's position in the monitor's ports

    @property
    def label(self) -> str:
        return "+".join(self.names)


class _Frozen:
    """A window's numbers as the C window left them (a bytes copy of its
    buffers, pcm_native.SwitchWindowC.frozen) and the groups it published:
    turned into lists only when a reading is built from them (:func:`_thawed`)."""

    __slots__ = ("native", "data", "plan", "failed")

    def __init__(self, native, data: tuple, plan: list[_Group], failed):
        self.native, self.data, self.plan, self.failed = native, data, plan, failed

    def thaw(self) -> tuple:
        """(totals, util, d_model, groups) as the list path keeps them."""
        totals, util, d_model, pcms = self.native.thaw(self.data)
        failed = self.failed
        groups = tuple((g, p) for k, (g, p) in enumerate(zip(self.plan, pcms))
                       if k not in failed)
        return totals, util, d_model, groups


def _thawed(raw: tuple) -> tuple:
    """A window's raw numbers (SwitchMonitor._raw) with lists throughout."""
    frozen = raw[3]
    if not isinstance(frozen, _Frozen):
        return raw
    totals, util, d_model, groups = frozen.thaw()
    return (*raw[:3], totals, util, d_model, *raw[6:8], groups, raw[9])


class SwitchMonitor:
    """The agent's handle on one switch: maps (from pins), netlink sockets,
    the window state."""

    def __init__(self, name: str, netns: str | None, pin_dir: str | os.PathLike,
                 config: AgentConfig):
        self.name, self.netns, self.config = name, netns, config
        self.maps = SwitchMaps(pin_dir)
        self.rtnl = self.links = None
        try:
            self.rtnl = Rtnl(netns)
            self.links = LinkWatcher(netns, self.rtnl)
            self._counters = PerCpuArrayReader(self.maps.counters, len(COUNTER_NAMES),
                                               config.read_strategy)
        except BaseException:
            self.close()
            raise
        self._ports: list[_Port] = []
        self._groups: list[_Group] = []
        self._window = ColumnWindow()
        self._qdiscs: dict[int, QdiscStats] = {}
        self._slow = {"counters": {}, "scheme": None, "tensors": None}
        self._raw: tuple | None = None         # the latest window's numbers
        self._built: tuple | None = None       # (raw, its SwitchReading)
        self._buffered = False                 # the C window feeds the C publication (_gather)
        self._up: tuple[bool, ...] = ()
        self._up_version = None
        #: False: each window computes the PCMs but writes nothing to the
        #: maps (bench/agent_loop.py times the window without publish_pcm).
        self.publishes = True

    # -- set-up --------------------------------------------------------------
    def bind(self, specs: list[PortSpec]) -> None:
        """Attach the port descriptions (rates, buffers) to installed port ids."""
        installed = {ifindex: p.port_id for ifindex, p in self.maps.ports.items()}
        ports = []
        for spec in specs:
            ifindex = self.links.ifindex(spec.name)
            if ifindex not in installed:
                raise LookupError(f"switch {self.name}: port {spec.name} (ifindex {ifindex}) "
                                  f"is not installed in its maps")
            ports.append(_Port(spec, ifindex, installed[ifindex],
                               spec.queue_limit_bytes * 8 / spec.rate_bps))
        self._ports = ports
        self._ifindexes = tuple(p.ifindex for p in ports)
        pids = [p.port_id for p in ports]
        # port_stats entries in port order (None: entry i is port i)
        self._pids = None if pids == list(range(len(pids))) else pids
        self._model = pcm_math.PortModel([p.spec.rate_bps for p in ports],
                                         [p.max_wait_s for p in ports])
        self._up_version = None
        self._reader = PerCpuArrayReader(self.maps.port_stats,
                                         max(p.port_id for p in ports) + 1,
                                         self.config.read_strategy)
        self._native = None   # a window read by this binding's ports (refresh_groups makes it)
        self.refresh_groups()

    @property
    def read_strategy(self) -> str:
        return self._reader.strategy

    def refresh_groups(self) -> None:
        """Re-read the installed groups (after a reprogramming)."""
        names = {p.ifindex: p.spec.name for p in self._ports}
        at = {p.ifindex: i for i, p in enumerate(self._ports)}
        groups = []
        for gid, g in sorted(self.maps.groups.items()):
            members = tuple(g.ports())
            distinct = tuple(dict.fromkeys(members))
            if len(distinct) < 2:  # one port: no decision, nothing to publish
                continue
            if any(x not in names for x in distinct):
                log.warning("%s: group %d has ports outside the switch's ports: %s",
                            self.name, gid, members)
                continue
            positions = tuple(distinct.index(x) for x in members)
            groups.append(_Group(gid, members, distinct, tuple(names[x] for x in distinct),
                                 None if members == distinct else positions,
                                 tuple(at[x] for x in distinct)))
        self._publisher = GroupPublisher(self.maps, [(g.gid, g.members) for g in groups])
        self._pcm = pcm_math.GroupPcm([g.at for g in groups], self.config.w1, self.config.w2,
                                      n_ports=len(self._ports))
        self._groups = groups
        s = self.config.threshold
        self._thresholds = None if s == "max" else [s] * len(groups)
        self._native = self._native_window(self._native)
        self._buffered = self._native is not None and self._gather(self._native)

    def _gather(self, native) -> bool:
        """Let the C window write each group's PCMs where the C publication
        reads them (pcm_native.SwitchWindowC.gather): a loaded window then
        hands no PCM list to Python and back. Only where the PCMs are the
        window's own (model delay) and S does not depend on them (not
        ``--threshold max``); True if set up."""
        if self.config.pcm_delay == "measured" or self._thresholds is None:
            return False
        target = self._publisher.input_buffer()
        if target is None:
            return False
        buffer, stride = target
        idx = [-1] * (stride * len(self._groups))
        start = 0   # group k's PCMs (per distinct port) in the window's flat list
        for k, g in enumerate(self._groups):
            for i in range(len(g.members)):
                idx[k * stride + i] = start + (i if g.positions is None else g.positions[i])
            start += len(g.distinct)
        native.gather(buffer, idx)
        return True

    def _native_window(self, before):
        """The whole window (read, deltas, model; the groups' PCMs with the
        model's delay) in one C call (agent/pcm_native.py), where it can be:
        the batch read strategy and the C code built; else None (the Python
        path: reader, ColumnWindow, PortModel, GroupPcm). ``before``: the
        window it replaces (its last reading carried over)."""
        if self._reader.strategy != "batch":
            return None
        reader, ports = self._reader, self._ports
        model = self._model
        native = pcm_native.switch_window(
            self.maps.port_stats.fd, reader.n, reader.ncpu, reader.fields,
            [p.port_id for p in ports], _TX_BYTES, _TX_PACKETS, model.capacities,
            model.max_waits, model.idle_delays, pcm_math.FULL_FRAME_BYTES,
            None if self.config.pcm_delay == "measured" else [g.at for g in self._groups],
            self.config.w1, self.config.w2)
        if native is not None and before is not None:
            native.carry_over(before)
        return native

    def down_ports(self) -> list[str]:
        return [p.spec.name for p in self._ports if not self.links.up(p.spec.name)]

    # -- each window ---------------------------------------------------------------
    def poll_links(self) -> bool:
        return self.links.poll()

    def window(self, now: float, read_qdiscs: bool) -> None:
        """Read, compute and publish one window ending at monotonic ``now``
        (its reading: :attr:`latest`)."""
        pcms = None
        native = self._native
        if native is not None:
            rc = native.read(now)
            if rc == pcm_native.MATHS_DONE and self._buffered:
                self._window_buffered(now, native, read_qdiscs)
                return
            totals, win = native.result(rc)
            if win is not None:
                dt, deltas, util, d_model, pcms = win
                win = (dt, deltas) if util is None else win
        else:
            totals = self._reader.columns((_TX_BYTES, _TX_PACKETS))
            if self._pids is not None:
                totals = [[col[i] for i in self._pids] for col in totals]
            win = self._window.advance(now, self._ifindexes, totals)
        if read_qdiscs:
            self._qdiscs = self.rtnl.root_qdiscs()
        qdiscs = self._qdiscs
        dt = util = d_model = None
        groups: tuple = ()
        if win is not None:
            if len(win) == 5:          # the C window computed the model (and the PCMs)
                dt, _deltas, util, d_model, pcms = win
            else:
                dt, (tx_bytes, tx_packets) = win
                util, d_model = self._model.window(tx_bytes, tx_packets, dt)
                pcms = None
            if self.config.pcm_delay == "measured":
                delay = [q.backlog_bytes * 8 / c if (q := qdiscs.get(x)) else 0.0
                         for x, c in zip(self._ifindexes, self._model.capacities)]
            else:
                delay = d_model
            plan, pcm = self._groups, self._pcm  # a failed publication re-reads the groups
            if pcms is None:
                pcms = pcm.window(util, delay)
            failed = self._publish(plan, pcms) if self.publishes else ()
            groups = tuple(zip(plan, pcms)) if not failed else tuple(
                (g, p) for k, (g, p) in enumerate(zip(plan, pcms)) if k not in failed)
        self._raw = (now, dt, self._ports, totals, util, d_model, qdiscs, self._up_states(),
                     groups, self._slow)

    def _window_buffered(self, now: float, native, read_qdiscs: bool) -> None:
        """:meth:`window` once the C window has computed the PCMs and written
        them where the C publication reads them (:meth:`_gather`): no number
        of the window becomes a Python object here; the reading's lists are
        made from a bytes copy of the buffers when it is read (:class:`_Frozen`)."""
        data = native.frozen()
        if read_qdiscs:
            self._qdiscs = self.rtnl.root_qdiscs()
        plan = self._groups  # a failed publication re-reads the groups
        failed = self._publish_buffered(plan, native, data) if self.publishes else ()
        self._raw = (now, native.dt, self._ports, _Frozen(native, data, plan, failed), None,
                     None, self._qdiscs, self._up_states(), (), self._slow)

    def _up_states(self) -> tuple[bool, ...]:
        """Each port usable, now (recomputed only when link state moved)."""
        if self._up_version != self.links.version:
            self._up = tuple(self.links.up(p.spec.name) for p in self._ports)
            self._up_version = self.links.version
        return self._up

    @property
    def latest(self) -> SwitchReading | None:
        """The latest window's reading, built on first use (any thread)."""
        raw, built = self._raw, self._built
        if raw is None:
            return None
        if built is not None and built[0] is raw:
            return built[1]
        reading = self._reading(raw)
        self._built = (raw, reading)
        return reading

    def latest_numbers(self) -> tuple | None:
        """The latest window's numbers as lists -- (now, dt, ports, totals,
        util, d_model, qdiscs, up, groups, slow), what the reading is built
        from -- or None before the first window (tests compare windows by it)."""
        raw = self._raw
        return None if raw is None else _thawed(raw)

    def _reading(self, raw: tuple) -> SwitchReading:
        (now, dt, ports, (tx_bytes, tx_packets), util, d_model, qdiscs, up, groups,
         slow) = _thawed(raw)
        readings = []
        for i, p in enumerate(ports):
            q = qdiscs.get(p.ifindex)
            readings.append(PortReading(
                p.spec.name, p.spec.kind, p.spec.rate_bps, up[i], tx_bytes[i], tx_packets[i],
                None if util is None else util[i], None if d_model is None else d_model[i],
                pcm_math.measured_delay(q.backlog_bytes, p.spec.rate_bps) if q else None,
                q.backlog_bytes if q else None, q.drops if q else None))
        return SwitchReading(
            self.name, now, dt, tuple(readings),
            tuple(GroupReading(g.gid, g.label, g.names, tuple(pcm),
                               tuple(pcm_math.wrr_weights(pcm))) for g, pcm in groups),
            slow["counters"], slow["scheme"], slow["tensors"])

    def _publish(self, plan: list[_Group], pcms: list[list[float]]) -> set[int] | frozenset:
        """Every group's PCMs (per distinct port) to the maps, as publish_pcm
        would write them one group at a time; the positions in ``plan`` of
        the groups not published."""
        s = self.config.threshold
        errors = self._publisher.publish(
            [pcm if g.positions is None else [pcm[i] for i in g.positions]
             for g, pcm in zip(plan, pcms)],
            [max(pcm) for pcm in pcms] if s == "max" else [s] * len(plan))
        return self._failed(errors)

    def _publish_buffered(self, plan: list[_Group], native, data: tuple) -> set[int] | frozenset:
        """:meth:`_publish` for PCMs the C window wrote into the publication's
        input (``data``: its :meth:`frozen` copy, turned into lists only if a
        group must go the slow way)."""
        def pcms_of():  # as _publish hands them over: member order
            pcms = native.thaw(data)[3]
            return [pcm if g.positions is None else [pcm[i] for i in g.positions]
                    for g, pcm in zip(plan, pcms)]
        errors = self._publisher.publish_buffered(self._thresholds, pcms_of)
        if errors is None:  # no C publication any more (no batch commands): the lists
            errors = self._publisher.publish(pcms_of(), self._thresholds)
        return self._failed(errors)

    def _failed(self, errors: list) -> set[int] | frozenset:
        """The positions of the groups a publication could not write; the
        groups re-read if there are any."""
        if not any(errors):   # the usual window: every group published
            return _NONE_FAILED
        failed = set()
        for k, exc in enumerate(errors):
            if exc is not None:
                # Reprogrammed behind our back (talb testbed, another tool): re-read.
                log.warning("%s: %s; re-reading the groups", self.name, exc)
                failed.add(k)
        if failed:
            self.refresh_groups()
        return failed

    # -- less often -------------------------------------------------------------------
    def housekeeping(self, read_qdiscs: bool) -> None:
        """Data-path counters, scheme and tensor table size (and the qdiscs,
        when the window does not read them)."""
        values = self._counters.read()
        self._slow = {
            "counters": {n: v[0] for n, v in zip(COUNTER_NAMES, values)
                         if not n.startswith("reserved_")},
            "scheme": read_config(self.maps)["scheme"],
            "tensors": tensor_occupancy(self.maps),
        }
        if read_qdiscs:
            self._qdiscs = self.rtnl.root_qdiscs()

    def close(self) -> None:
        if self.links is not None:
            self.links.close()
        if self.rtnl is not None:
            self.rtnl.close()
        self.maps.close()
