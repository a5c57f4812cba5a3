"""What a scheme declares about itself: one :class:`Scheme` record per scheme
module (``datapath/schemes/<name>.py``, beside its C in
``bpf/include/talb/schemes/<name>.h``), collected by
:mod:`datapath.schemes.registry`.

The record holds what the rest of the project used to type out per scheme:
its parameters (``talb scheme --param``), whether XDP can run it, whether
TaLB may hand it untagged packets, its decision counters (the agent's
metrics), its clock need, where it decides, its paper and its Python model.
Everything that lists schemes iterates the registry (docs/schemes.md,
"Adding a scheme").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

#: Param.type of a parameter whose value is another scheme's name (TaLB's fallback)
SCHEME_NAME = "scheme"


@dataclass(frozen=True)
class Param:
    """One ``talb scheme NAME --param KEY=VALUE`` key."""

    name: str                   # the --param key
    field: str                  # the struct talb_config field (datapath.structs.TalbConfig)
    type: str                   # "int", or SCHEME_NAME
    lo: int | None              # the range checked before anything is written
    hi: int | None
    default: int | str          # the C default (its header's TALB_DEFAULT_*), before timers
    unit: str                   # "us", or "" (a count, a shift)
    help: str                   # one line: what it sets
    timer: str | None = None    # the datapath.timers.Timers field it follows (the link rate)

    def describe(self) -> str:
        """``flowlet_us 500 us* (1..10000000)`` / ``d 2 (1..4)`` /
        ``fallback ecmp``: name, default, unit, range; ``*``: the default
        follows the link rate."""
        unit = f" {self.unit}" if self.unit else ""
        derived = "*" if self.timer else ""
        bounds = f" ({self.lo}..{self.hi})" if self.lo is not None else ""
        return f"{self.name} {self.default}{unit}{derived}{bounds}"


@dataclass(frozen=True)
class SwitchView:
    """Where a switch sits in its fabric, as a scheme's ``install`` hook gets
    it (datapath.fabric.install_switch)."""

    leaf_id: int | None                 # its leaf's number (topology order); None: a spine
    host_leaves: Mapping[str, int]      # every host's IPv4 address -> its leaf's number


@dataclass(frozen=True)
class Scheme:
    """One load-balancing scheme, declared once in its module as ``SCHEME``."""

    name: str                   # lower case: the CLI's, the topology files', TALB_SCHEME_<NAME>
    id: int                     # TALB_SCHEME_<NAME> (checked by the registry)
    title: str                  # as prose writes it: "LetFlow"
    description: str            # one line
    paper: str                  # short citation
    decides: str                # where and per what it decides: "every switch, per flowlet"
    params: tuple[Param, ...]
    xdp: bool                   # the XDP entry point runs it
    xdp_why: str                # why it can (xdp) or why XDP refuses it (not xdp)
    #: None: TaLB may hand it untagged packets; else the reason it may not,
    #: as the error says it
    not_a_fallback: str | None
    #: decision counter (datapath.control.read_counters name) -> the case it
    #: counts (the agent's talb_decisions_total{scheme, case})
    decisions: tuple[tuple[str, str], ...]
    clock: bool                 # reads bpf_ktime_get_ns (its header: TALB_SF_CLOCK or _CLOCK_HOOK)
    #: decided in the main program (no program of its own, no tail call:
    #: datapath/loader.py INLINE_SCHEMES, its header TALB_SF_INLINE); else its program
    #: talb_scheme_<name> (TALB_SF_PROGRAM)
    inline: bool
    model: Callable             # the Python model's entry point, checked against the C
    # --- optional hooks (leave them out when the scheme has none) -----------------------
    # The shared control plane (datapath/control.py, datapath/fabric.py) calls
    # them for every scheme that has them, so that it names no scheme.
    #: ``install(maps, view: SwitchView)``: the scheme's own state, written when
    #: a switch's forwarding state is installed, whatever scheme is in force
    #: (a later ``talb scheme`` switches to it without a reinstall)
    install: Callable | None = None
    #: ``config_view(cfg: datapath.structs.TalbConfig) -> dict``: what
    #: ``control.read_config`` shows of config fields the scheme uses that are
    #: not its parameters (those it shows from ``params``)
    config_view: Callable | None = None
    #: functions the scheme adds to the control plane (on a switch's maps, or
    #: what a caller needs to predict the data path), reachable as
    #: ``datapath.control.<function name>`` as well as from its module
    control: tuple[Callable, ...] = ()

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def has_fallback(self) -> bool:
        """It hands some packets to another scheme (a SCHEME_NAME parameter),
        and so also takes that scheme's parameters."""
        return any(p.type == SCHEME_NAME for p in self.params)
