"""Checks for single fields of a topology, each raising TopologyError(field, ...).

Field names are the YAML keys, so an error points at the line to fix.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from common.c_constants import DEFAULT_SCHEME, MAX_BANDS, SCHEMES
from common.excerpt import shown

from .errors import TopologyError
from .units import format_rate, format_size, parse_rate, parse_size

MIN_RATE, MAX_RATE = 1_000, 100_000_000_000
_WORD = re.compile(r"^[a-z][a-z0-9_]{0,31}\Z")  # \Z: "$" also matches before a final "\n"


def check_keys(field: str, mapping: dict, allowed) -> None:
    for key in mapping:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(sorted(allowed))})"
            raise TopologyError(field, f"unknown field {shown(key)}{hint}")


def check_int(field: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise TopologyError(field, f"must be an integer between {lo} and {hi}, got {shown(value)}")
    return value


def check_bool(field: str, value) -> bool:
    if not isinstance(value, bool):
        raise TopologyError(field, f"must be true or false, got {shown(value)}")
    return value


#: ``shaping: batched``: HTB with sch_htb's (machine-wide) mode hysteresis,
#: netns_topology/qdisc.py
BATCHED = "batched"


def check_shaping(field: str, value) -> bool | str:
    """true (every link paced packet by packet), false (no link emulation)
    or ``batched`` (links send in clumps of up to half the queue's burst)."""
    if isinstance(value, bool) or value == BATCHED:
        return value
    raise TopologyError(field, f"must be true, false or {BATCHED}, got {shown(value)}")


def check_rate(field: str, value) -> int:
    try:
        bps = parse_rate(value)
    except ValueError as exc:
        raise TopologyError(field, str(exc)) from None
    if not MIN_RATE <= bps <= MAX_RATE:
        raise TopologyError(field, f"must be between {format_rate(MIN_RATE)} and "
                                   f"{format_rate(MAX_RATE)}, got {shown(value)}")
    return bps


def check_size(field: str, value, lo: int = 1, hi: int = 10**9) -> int:
    try:
        nbytes = parse_size(value)
    except ValueError as exc:
        raise TopologyError(field, str(exc)) from None
    if not lo <= nbytes <= hi:
        raise TopologyError(field, f"must be between {lo} and {hi} bytes, got {shown(value)}")
    return nbytes


def check_word(field: str, value) -> str:
    if not isinstance(value, str) or not _WORD.match(value):
        raise TopologyError(field, f"must be a lowercase word, got {shown(value)}")
    return value


#: Linux TCP's bounds on the retransmission timeout (TCP_RTO_MAX is 120 s);
#: the route metric is whole milliseconds (and rounds up to the kernel's
#: jiffies: 4 ms at HZ=250).
MIN_RTO_MIN_MS, MAX_RTO_MIN_MS = 1, 120_000
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(ms|s)\s*\Z")


def check_rto_min(field: str, value) -> int | None:
    """``rto_min: 10ms`` (or ``0.01s``, or the integer 10: milliseconds) ->
    10: the hosts' minimum TCP retransmission timeout, whole milliseconds;
    None (absent): the kernel's default (200 ms)."""
    if value is None:
        return None
    m = _DURATION.match(value.lower()) if isinstance(value, str) else None
    if m or (isinstance(value, int) and not isinstance(value, bool)):
        ms = float(m.group(1)) * (1000 if m.group(2) == "s" else 1) if m else value
        if ms != int(ms):
            raise TopologyError(field, f"must be whole milliseconds (the route metric's unit), "
                                       f"got {shown(value)}")
        if not MIN_RTO_MIN_MS <= ms <= MAX_RTO_MIN_MS:
            raise TopologyError(field, f"must be between {MIN_RTO_MIN_MS}ms and "
                                       f"{MAX_RTO_MIN_MS // 1000}s, got {shown(value)}")
        return int(ms)
    raise TopologyError(field, f"must be a duration like 10ms or 0.2s (a plain integer: "
                               f"milliseconds; absent: the kernel's 200ms), got {shown(value)}")


def format_rto_min(ms: int) -> str:
    """10 -> ``"10ms"`` (check_rto_min reads it back)."""
    return f"{ms}ms"


#: The words a per-run setting of the minimum RTO takes for "no route metric":
#: the kernel's own minimum, 200 ms.
KERNEL_RTO_MIN = ("kernel", "default")


def check_rto_min_setting(field: str, value) -> int | None:
    """A minimum RTO set on a live testbed (`talb run --rto-min`, `talb
    bench --rto-min`, testbed.lifecycle.set_rto_min): what
    :func:`check_rto_min` takes (a duration, or an integer of ms), or ``kernel`` /
    ``default`` (any case) or None -> None, no route metric (the kernel's
    200 ms)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in KERNEL_RTO_MIN):
        return None
    if (isinstance(value, str) and _DURATION.match(value.lower())) or \
            (isinstance(value, int) and not isinstance(value, bool)):
        return check_rto_min(field, value)      # whole ms, in range: its errors
    raise TopologyError(field, f"must be a duration like 10ms or 0.2s, or kernel (no route "
                               f"metric: the kernel's 200ms), got {shown(value)}")


def format_rto_min_setting(ms: int | None) -> str:
    """10 -> ``"10ms"``, None -> ``"kernel"`` (check_rto_min_setting reads it back)."""
    return "kernel" if ms is None else format_rto_min(ms)


def check_scheme(field: str, value) -> str:
    if value not in SCHEMES:
        raise TopologyError(field, f"must be one of {', '.join(SCHEMES)}, got {shown(value)}")
    return value


@dataclass(frozen=True)
class Queue:
    """Per-egress queue: HTB leaf classes (one per band) over byte-limited bfifos.

    ``bands`` are WFQ weights: band b gets rate link*w_b/sum(w) and may borrow
    up to the link rate. ``quantum`` (None: the interface's frame size) is what
    the lowest-weight band sends per round when bands borrow; heavier bands get
    proportionally more, so spare capacity is shared by weight too.
    """

    limit: int = 150_000
    burst: int = 15_000
    cburst: int = 15_000
    quantum: int | None = None
    bands: tuple[int, ...] = (1,)
    # Tagged packets go to band 1 + layer // layers_per_band (the last band
    # takes the rest); band 0 is untagged traffic. The switches mark packets
    # with this mapping (datapath/fabric.py), so it lives with the bands.
    layers_per_band: int = 1

    @classmethod
    def from_value(cls, field: str, value) -> "Queue":
        if isinstance(value, Queue):
            return value
        if not isinstance(value, dict):
            raise TopologyError(field, f"must be a mapping like {{limit: 150kb, bands: [1]}}, got {shown(value)}")
        check_keys(field, value, ("limit", "burst", "cburst", "quantum", "bands", "layers_per_band"))
        sizes = {k: check_size(f"{field}.{k}", value[k]) for k in ("limit", "burst", "cburst", "quantum")
                 if value.get(k) is not None}
        bands = value.get("bands", [1])
        if not isinstance(bands, (list, tuple)) or not 1 <= len(bands) <= MAX_BANDS:
            raise TopologyError(f"{field}.bands", f"must be a list of 1 to {MAX_BANDS} weights, got {shown(bands)}")
        weights = tuple(check_int(f"{field}.bands[{i}]", w, 1, 1000) for i, w in enumerate(bands))
        per = check_int(f"{field}.layers_per_band", value.get("layers_per_band", 1), 1, 256)
        return cls(bands=weights, layers_per_band=per, **sizes)

    def to_dict(self) -> dict:
        d = {k: format_size(getattr(self, k)) for k in ("limit", "burst", "cburst")}
        if self.quantum is not None:
            d["quantum"] = format_size(self.quantum)
        d["bands"] = list(self.bands)
        d["layers_per_band"] = self.layers_per_band
        return d


# Topology-wide parameters: name -> (default, check). Topo validates on assignment.
PARAMS = {
    "mtu": (1500, lambda f, v: check_int(f, v, 576, 9000)),
    "switch_mtu": (1600, lambda f, v: check_int(f, v, 588, 9216)),
    "host_link_rate": (100_000_000, check_rate),
    "link_rate": (100_000_000, check_rate),
    "queue": (Queue(), Queue.from_value),
    "tcp_cc": ("cubic", check_word),
    "scheme": (DEFAULT_SCHEME, check_scheme),
    # false: no HTB/bfifo at all (veth's default noqueue). Only for measuring
    # raw forwarding speed: without link emulation no queue ever forms.
    # batched: HTB in its hysteresis mode, ~1.5x the packets per CPU-second,
    # packets leave in clumps (netns_topology/qdisc.py, docs/performance.md).
    "shaping": (True, check_shaping),
    # Hosts' minimum TCP RTO, as a metric of their routes (builder.py);
    # None: the kernel's default, 200 ms.
    "rto_min": (None, check_rto_min),
}
