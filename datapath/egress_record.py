"""What a switch's data path recorded of tensor integrity: the ports each
tagged tensor left it by (map ``tensor_egress``, bpf/include/talb/tensor_egress.h).

Every switch program marks, for every tagged packet it forwards into the
fabric, its tensor's egress port -- under TC and XDP alike, whatever the
scheme. ``talb send`` reads its tensors' entries from the senders' leaves
(:func:`read_egress`): under XDP, where captures cannot see a redirected
frame, this is what its split check runs on; under TC it is checked
against the captures.

An entry is one (source address, tensor id) since that key's first packet
after TALB_EGRESS_STALE_NS of silence, so a tensor that reuses a recent
id (ids come back, and tests force them) shares its entry with the earlier
one: :func:`read_egress` says so (``Recorded.older``) rather than mixing
two tensors' ports into one. Opened from the switch's pins: no bcc.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from common.wire import WireTensorKey
from datapath.maps import MapLayoutError, SwitchMaps
from datapath.program import link_names

__all__ = ["Recorded", "open_record", "read_egress", "port_names", "CLOCK_SLACK_NS"]

#: How far an entry's times may lag the senders' clock: under a scheme that
#: reads no clock the data path stamps with bpf_ktime_get_coarse_ns, the
#: time of the last tick (10 ms at HZ=100, the slowest tick Linux has).
CLOCK_SLACK_NS = 20_000_000


@dataclass(frozen=True)
class Recorded:
    """One tensor's entry, its ports named: ``ports`` the ports it left by
    (its first packet's first), ``packets`` the tagged packets forwarded
    (retransmissions included), ``first_ns``/``latest_ns`` CLOCK_MONOTONIC.
    ``older``: the entry began before the tensor did (by more than
    CLOCK_SLACK_NS) -- it holds an earlier tensor of the same (source, id)
    too, so its ports are not this one's."""
    ports: tuple[str, ...]
    packets: int
    first_ns: int
    latest_ns: int
    older: bool = False


def port_names(maps: SwitchMaps, netns: str | None) -> dict[int, str]:
    """{port id: interface name} of every port of the switch (``ports``,
    ifindex -> port id; its interfaces in ``netns``, None: this one)."""
    names = link_names(netns)
    return {info.port_id: names.get(ifindex, f"ifindex{ifindex}")
            for ifindex, info in maps.ports.items()}


def read_egress(maps: SwitchMaps, started: dict[WireTensorKey, int],
                names: dict[int, str]) -> dict[WireTensorKey, Recorded]:
    """{key: Recorded} for those of ``started`` (key -> when its sender
    began it, CLOCK_MONOTONIC ns) the switch has an entry for: one lookup
    each, never the whole map. ``names``: {port id: name} (:func:`port_names`);
    a port without one is named ``port<id>``."""
    out = {}
    for key, t_start in started.items():
        e = maps.tensor_egress.get(tuple(key))
        if e is None:
            continue
        ids = sorted(e.port_ids, key=lambda i: i != e.first_port)
        out[key] = Recorded(tuple(names.get(i, f"port{i}") for i in ids), e.packets,
                            e.first_ns, e.latest_ns,
                            older=e.first_ns + CLOCK_SLACK_NS < t_start)
    return out


def open_record(pin_dir: str | os.PathLike) -> tuple[SwitchMaps | None, str]:
    """(the switch's maps from its pins, "") or (None, why there is no
    record: no data path there -- the kernel bridge -- or one built before
    ``tensor_egress`` existed)."""
    if not Path(pin_dir).is_dir():
        return None, "no switch data path pinned (the kernel bridge forwards)"
    try:
        return SwitchMaps(pin_dir), ""
    except FileNotFoundError:
        return None, ("its data path was built before the switches kept a record "
                      "(`talb testbed up --replace` rebuilds it)")
    except MapLayoutError as exc:
        return None, str(exc)
