"""Load, attach and pin a switch's data path (bpf/switch_tc.c).

    ensure_bpffs()
    dp = SwitchDatapath("talb-leaf1", pin_dir("talb", "leaf1"))
    dp.load()                      # compile once (cached) + kernel verify (SCHED_CLS)
    dp.attach(["eth0", "eth1"])    # clsact + ingress bpf filter, direct-action
    dp.pin()                       # every map at <pin_dir>/<map name>
    dp.close()                     # the process may exit now: the filters
                                   # keep the program, the pins the maps
    ...
    SwitchDatapath("talb-leaf1", pin).detach(["eth0", "eth1"])
    remove_pins(pin)

The life cycle itself (compile once, per-switch maps, tc, pins) is datapath/program.py's, shared with
the hosts' program (datapath/host_loader.py); this module adds what is the
switch's: its source, its maps and their default config.
"""
from __future__ import annotations

import os
import zlib
from pathlib import Path

from common.c_constants import CFG_RELEASE_SK, CONST, SCHEME_HEADERS, SCHEMES
from datapath import program
from datapath.maps import SwitchMaps
from datapath.program import (  # noqa: F401  (re-exported: other modules import them from here)
    BPF_FS_MAGIC, BPF_SRC_DIR, BPFFS_DIR, FILTER_HANDLE, FILTER_PRIO, INCLUDE_DIR,
    TC_H_CLSACT_EGRESS, TC_H_CLSACT_INGRESS, BpfDatapath, ensure_bpffs, find_filter, is_bpffs,
    remove_pins,
)
from datapath.schemes import registry as scheme_registry
from datapath.schemes.spec import SCHEME_NAME
from datapath.structs import TalbConfig

__all__ = [
    "ensure_bpffs", "is_bpffs", "expand_source", "SwitchDatapath", "remove_pins",
    "PROG_NAME", "FILTER_PRIO", "FILTER_HANDLE", "default_hash_seed", "ingress_filter",
    # re-exported from datapath/program.py
    "BPF_FS_MAGIC", "BPFFS_DIR", "TC_H_CLSACT_EGRESS", "TC_H_CLSACT_INGRESS",
]

SWITCH_SRC = Path(BPF_SRC_DIR) / "switch_tc.c"
PROG_NAME = "talb_switch_tc"
#: schemes decided in the main program (no program of their own: SCHEME.inline
#: of their declaration): ECMP, and TaLB (a tail call cost more than its table
#: hit: docs/schemes.md)
INLINE_SCHEMES = tuple(s.name for s in scheme_registry.SCHEMES if s.inline)
#: scheme -> its program in bpf/switch_tc.c (``talb_scheme_<name>``),
#: tail-called through the scheme_progs map at the scheme's id. Every other
#: scheme of the registry has one: a TALB_SCHEME_* define without its entry
#: point fails the load.
SCHEME_PROGS = {name: f"talb_scheme_{name}" for name in SCHEMES if name not in INLINE_SCHEMES}
#: the scheme a fresh switch starts with: the one whose header is TALB_SF_DEFAULT
DEFAULT_SCHEME_ID = next(h.id for h in SCHEME_HEADERS.values() if h.has("DEFAULT"))
#: config field -> its default, from every scheme's declared parameters
#: (a scheme-name parameter, TaLB's fallback, as the scheme's id)
PARAM_DEFAULTS = {p.field: SCHEMES[p.default] if p.type == SCHEME_NAME else p.default
                  for s in scheme_registry.SCHEMES for p in s.params}


def expand_source(path: str | os.PathLike = SWITCH_SRC,
                  include_dirs: tuple[str | os.PathLike, ...] = (INCLUDE_DIR,)) -> str:
    """:func:`datapath.program.expand_source`, of bpf/switch_tc.c by default."""
    return program.expand_source(path, include_dirs)


def default_hash_seed(name: str) -> int:
    """A stable per-switch seed (different switches hash differently, which
    avoids hash polarisation across hops)."""
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


def ingress_filter(netns: str | None, ifname: str) -> dict | None:
    """Our bpf filter at clsact ingress of ``ifname`` (netlink message as a
    dict with 'name'), or None if not attached."""
    return find_filter(netns, ifname, "ingress", PROG_NAME)


class SwitchDatapath(BpfDatapath):
    """The data path of one switch: program + maps, attached to its ports
    (clsact ingress).

    ``netns``: the switch's network namespace (None: the current one).
    ``pin_dir``: where :meth:`pin` puts the maps (``common.paths.pin_dir``).
    """

    SOURCE = SWITCH_SRC
    PROG_NAME = PROG_NAME
    MAPS_CLASS = SwitchMaps
    TC_DIRECTION = "ingress"
    PROGRAMS = (PROG_NAME, *SCHEME_PROGS.values())

    def load(self, *, release_sk: bool = True, hash_seed: int | None = None,
             reuse_pins: bool = False, cflags: tuple[str, ...] = ()) -> "SwitchDatapath":
        """Load bpf/switch_tc.c's programs (SCHED_CLS): the main one and
        every scheme's, compiled by bcc once per process and cached across
        builds (datapath/compiled.py), verified for this switch with maps of
        its own.

        Fresh maps get the default config: the default scheme (the header
        with TALB_SF_DEFAULT: ECMP), ``hash_seed`` (default: per-switch,
        from the namespace name), CFG_RELEASE_SK if ``release_sk``, one
        priority band, and every scheme's parameters at the defaults its
        record declares (:data:`PARAM_DEFAULTS`: TaLB's fallback, table
        size and idle timeout, LetFlow's flowlet gap, DRILL's d and m,
        CONGA's DRE and aging: docs/schemes.md). datapath.control's
        set_scheme and set_talb_config change them. ``reuse_pins=True`` binds the program to the maps
        already pinned in ``pin_dir`` (state and config kept) when they all
        exist."""
        fresh = self._compile(reuse_pins=reuse_pins, cflags=cflags)
        try:
            self._load_scheme_progs()
        except Exception as exc:
            self.close()
            raise RuntimeError(f"loading the scheme programs of {self.SOURCE} "
                               f"({self.netns}): {exc}") from exc
        if fresh:
            self.init_maps(release_sk=release_sk, hash_seed=hash_seed)
        return self

    def _load_scheme_progs(self) -> None:
        """Put every scheme's program of this load in scheme_progs at its id
        (on reused pins too: the array then points at this load's programs)."""
        for scheme, fn_name in SCHEME_PROGS.items():
            self.maps.scheme_progs[SCHEMES[scheme]] = self.node.prog_fds[fn_name]

    def init_maps(self, *, release_sk: bool = True, hash_seed: int | None = None) -> None:
        """The default config (see :meth:`load`) in the fresh ``config`` map."""
        if hash_seed is None:
            hash_seed = default_hash_seed(self.netns or str(self.pin_dir))
        self.maps.config[0] = TalbConfig(
            scheme=DEFAULT_SCHEME_ID, hash_seed=hash_seed,
            flags=CFG_RELEASE_SK if release_sk else 0,
            n_bands=1, layers_per_band=CONST["TALB_DEFAULT_LAYERS_PER_BAND"],
            **PARAM_DEFAULTS)
