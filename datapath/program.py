"""The life cycle of a tc BPF program and its pinned maps, for any node.

:class:`BpfDatapath` loads a program of bpf/, attaches it as a
clsact bpf filter (direct-action) to interfaces, pins its maps and lets the
process go; a subclass names the program (``SOURCE``, ``PROG_NAME``), its
maps (``MAPS_CLASS``) and the clsact hook (``TC_DIRECTION``), and may fill fresh maps
(:meth:`BpfDatapath.init_maps`). datapath/loader.py (switches, ingress) and
datapath/host_loader.py (hosts, egress) are the two.

The source is expanded into one text (datapath/source.py), and bcc
compiles it once per process (the result is cached across builds:
datapath/compiled.py); every node then gets maps of its own -- or binds
its pinned ones by fd -- and its own kernel-verified copy of the
programs: no per-node compile.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from common.bcc_bindings import BccUnavailable
from common.paths import BPF_SRC_DIR, BPFFS_DIR, private_dir  # noqa: F401  (BPF_SRC_DIR re-exported)
from datapath import bpf_syscall as sc
from datapath import compiled
from datapath.compiled import NodeObject
from datapath.maps import MapSet
from datapath.source import INCLUDE_DIR, expand_source  # noqa: F401  (re-exported)

__all__ = [
    "BpfDatapath", "clsact_present", "ensure_bpffs", "is_bpffs", "expand_source", "find_filter", "link_ifindexes",
    "link_names",
    "remove_pins",
    "INCLUDE_DIR", "FILTER_PRIO", "FILTER_HANDLE", "TC_H_CLSACT_INGRESS", "TC_H_CLSACT_EGRESS",
    "VERIFIER_BUDGET_SHARE", "BPF_SRC_DIR",
]

# Our filter at a clsact hook: fixed priority and handle, so attach can
# replace it in place and detach can remove exactly it.
FILTER_PRIO = 1
FILTER_HANDLE = 1
TC_H_CLSACT_INGRESS = "ffff:fff2"
TC_H_CLSACT_EGRESS = "ffff:fff3"
TC_PARENTS = {"ingress": TC_H_CLSACT_INGRESS, "egress": TC_H_CLSACT_EGRESS}
BPF_FS_MAGIC = 0xCAFE4A11
#: Share of the verifier's 1M-instruction limit (bpf_syscall.VERIFIER_INSN_LIMIT)
#: a program of the project may use. Half: the count moves with clang and
#: kernel versions (a verifier that prunes less on another kernel, a clang
#: that spills differently), and a program that needs the last of the
#: budget fails to load on a machine where it passed here
#: (tests/test_verifier_budget.py holds every program to it).
VERIFIER_BUDGET_SHARE = 0.5


# --- bpffs --------------------------------------------------------------------
def is_bpffs(path: str | os.PathLike) -> bool:
    """True if ``path`` is the root of a mounted bpf filesystem."""
    path = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                mnt = fields[4].encode().decode("unicode_escape")
                if mnt == path and fields[sep + 1] == "bpf":
                    return True
    except OSError:
        pass
    return False


def ensure_bpffs(path: str | os.PathLike = BPFFS_DIR) -> Path:
    """Mount a bpffs at ``path`` unless one is there already (idempotent).

    The project pins on its own bpffs, not /sys/fs/bpf: ``ip netns exec``
    remounts /sys and hides /sys/fs/bpf inside namespaces (docs/design.md §4).
    """
    path = Path(path)
    if not is_bpffs(path):
        private_dir(path)
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        ret = libc.mount(b"bpf", os.fsencode(path), b"bpf", ctypes.c_ulong(0), None)
        if ret != 0:
            err = ctypes.get_errno()
            if not (err == errno.EBUSY and is_bpffs(path)):
                raise OSError(err, f"mount -t bpf bpf {path}: {os.strerror(err)}")
    if path.resolve() == Path(BPFFS_DIR).resolve():
        os.chmod(path, 0o700)  # a bpffs root is 1777: ours holds nothing for other users
    return path


def remove_pins(pin_dir: str | os.PathLike) -> None:
    """Unlink everything under ``pin_dir`` and the directory itself. The maps
    go away once nothing (attached program, open fd) uses them. Missing dir:
    nothing to do."""
    pin_dir = Path(pin_dir)
    if not pin_dir.exists():
        return
    for p in sorted(pin_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if p.is_dir() and not p.is_symlink():
            p.rmdir()
        else:
            p.unlink()
    pin_dir.rmdir()


# --- tc -------------------------------------------------------------------------
def _ipr(netns: str | None):
    from pyroute2 import IPRoute

    # flags=0: never create the namespace when it is missing (pyroute2 would).
    return IPRoute(netns=netns, flags=0) if netns else IPRoute()


def each_link(netns: str | None, ifnames, *, missing_ok: bool):
    """(an open IPRoute, ifname, ifindex) for each named interface of
    ``netns``, for detaching programs. Gone interfaces, or the whole
    namespace gone, are skipped when ``missing_ok``; else OSError."""
    try:
        ipr = _ipr(netns)
    except Exception as exc:
        if missing_ok and not (Path("/run/netns") / str(netns)).exists():
            return
        raise OSError(errno.ENOENT, f"netns {netns}: {exc}") from exc
    with ipr:
        for ifname in ifnames:
            idx = ipr.link_lookup(ifname=ifname)
            if not idx:
                if missing_ok:
                    continue
                raise OSError(errno.ENODEV, f"no device {ifname!r} in netns {netns}")
            yield ipr, ifname, idx[0]


def _ifindex(ipr, ifname: str, netns: str | None) -> int:
    idx = ipr.link_lookup(ifname=ifname)
    if not idx:
        raise OSError(errno.ENODEV, f"no device {ifname!r} in netns {netns or '(current)'}")
    return idx[0]


def link_ifindexes(netns: str | None, names: list[str]) -> dict[str, int]:
    """``{name: ifindex}`` of the links ``names`` in ``netns`` (None: this
    namespace); OSError(ENODEV) naming the first that is missing."""
    with _ipr(netns) as ipr:
        return {name: _ifindex(ipr, name, netns) for name in names}


def link_names(netns: str | None) -> dict[int, str]:
    """``{ifindex: name}`` of every link in ``netns`` (None: this namespace)."""
    with _ipr(netns) as ipr:
        return {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}


def clsact_present(netns: str | None, ifname: str) -> bool:
    """``ifname`` has a clsact qdisc (someone else's, or ours)."""
    with _ipr(netns) as ipr:
        idx = _ifindex(ipr, ifname, netns)
        return any(q.get_attr("TCA_KIND") == "clsact" for q in ipr.get_qdiscs(idx))


def find_filter(netns: str | None, ifname: str, direction: str, prog_name: str) -> dict | None:
    """Our bpf filter running ``prog_name`` at clsact ``direction``
    ("ingress"/"egress") of ``ifname`` ({'ifname', 'ifindex', 'name'}), or
    None if not attached."""
    from pyroute2.netlink.exceptions import NetlinkError

    with _ipr(netns) as ipr:
        idx = _ifindex(ipr, ifname, netns)
        try:
            filters = ipr.get_filters(idx, parent=TC_PARENTS[direction])
        except NetlinkError:
            return None
        for f in filters:
            if f.get("handle") != FILTER_HANDLE or f.get_attr("TCA_KIND") != "bpf":
                continue
            opts = f.get_attr("TCA_OPTIONS")
            name = opts.get_attr("TCA_BPF_NAME") if opts is not None else None
            if name and name.startswith(prog_name):
                return {"ifname": ifname, "ifindex": idx, "name": name}
    return None


# --- one program -------------------------------------------------------------------
class BpfDatapath:
    """One node's program + maps, attached to its interfaces.

    ``netns``: the node's network namespace (None: the current one).
    ``pin_dir``: where :meth:`pin` puts the maps (``common.paths.pin_dir``).
    """

    #: the program's C file (its ``#include "talb/..."`` are expanded)
    SOURCE: Path
    #: its tc function, the name the filter shows
    PROG_NAME: str
    #: the set of maps it declares; all of them are pinned
    MAPS_CLASS: type[MapSet]
    #: the clsact hook of the filter: "ingress" or "egress"
    TC_DIRECTION: str

    #: the functions of SOURCE loaded as programs, the entry point first
    PROGRAMS: tuple[str, ...] = ()
    #: the type they are loaded as (datapath/xdp.py: BPF_PROG_TYPE_XDP)
    PROG_TYPE: int = sc.BPF_PROG_TYPE_SCHED_CLS

    def __init__(self, netns: str | None, pin_dir: str | os.PathLike):
        self.netns = netns
        self.pin_dir = Path(pin_dir)
        self.node: NodeObject | None = None
        self._maps: MapSet | None = None

    @classmethod
    def programs_to_load(cls) -> tuple[str, ...]:
        return cls.PROGRAMS or (cls.PROG_NAME,)

    @classmethod
    def compiled(cls, cflags: tuple[str, ...] = ()) -> "compiled.CompiledObject":
        """SOURCE compiled with ``cflags``: once per process, and cached across
        builds (datapath/compiled.py)."""
        try:
            return compiled.get(cls.SOURCE, cls.programs_to_load(), cflags)
        except BccUnavailable:
            raise       # about this Python, not about SOURCE: its message stands alone
        except Exception as exc:
            raise RuntimeError(f"compiling {cls.SOURCE}: {exc}") from exc

    # -- program --
    def load(self, *, reuse_pins: bool = False, cflags: tuple[str, ...] = ()) -> "BpfDatapath":
        """Load SOURCE's programs (SCHED_CLS) with maps of their own: compiled
        by bcc once (:meth:`compiled`), verified by the kernel for this node;
        fresh maps get :meth:`init_maps`. ``reuse_pins=True`` binds the
        programs to the maps already pinned in ``pin_dir`` (their state kept)
        when they all exist."""
        if self._compile(reuse_pins=reuse_pins, cflags=cflags):
            self.init_maps()
        return self

    def init_maps(self) -> None:
        """Fill maps the load just created (not reused pins): nothing here."""

    def _compile(self, *, reuse_pins: bool, cflags: tuple[str, ...]) -> bool:
        """Load this node's instance unless loaded already; True if that made
        fresh maps."""
        if self.node is not None:
            return False
        obj = self.compiled(tuple(cflags))
        reusing = reuse_pins and all((self.pin_dir / n).exists() for n in self.MAPS_CLASS.SPECS)
        pinned: dict[str, int] = {}
        try:
            if reusing:
                self.MAPS_CLASS(self.pin_dir).close()  # layout check before binding to them
                for name in self.MAPS_CLASS.SPECS:
                    pinned[name] = sc.obj_get(self.pin_dir / name)
            self.node = NodeObject(obj, map_fds=pinned, prog_type=self.PROG_TYPE)
        except Exception as exc:
            self.close()
            raise RuntimeError(f"loading {self.SOURCE} ({self.netns}): {exc}") from exc
        finally:
            for fd in pinned.values():
                os.close(fd)
        return not reusing

    @property
    def prog_fd(self) -> int:
        self._need_loaded()
        return self.node.prog_fds[self.PROG_NAME]

    def map_fd(self, name: str) -> int:
        """The fd of map ``name`` of this load (valid until :meth:`close`)."""
        self._need_loaded()
        return self.node.map_fds[name]

    def programs(self) -> dict[str, "sc.ProgInfo"]:
        """What the kernel says about each program this data path loaded
        (name -> :class:`datapath.bpf_syscall.ProgInfo`: ``verified_insns``,
        sizes), the entry point first."""
        self._need_loaded()
        return {name: sc.prog_info(fd) for name, fd in self.node.prog_fds.items()}

    @property
    def maps(self) -> MapSet:
        """The loaded program's maps (valid until :meth:`close`)."""
        self._need_loaded()
        if self._maps is None:
            self._maps = self.MAPS_CLASS.from_fds(self.node.map_fds)
        return self._maps

    def _need_loaded(self) -> None:
        if self.node is None:
            raise RuntimeError(f"{type(self).__name__}: load() first")

    # -- tc --
    def attach(self, ifnames) -> None:
        """clsact qdisc + our bpf filter (direct-action) at TC_DIRECTION of
        each interface. Idempotent: an existing filter of ours is replaced in
        place."""
        self._need_loaded()
        from pyroute2.netlink.exceptions import NetlinkError

        name, fd = self.PROG_NAME, self.prog_fd
        with _ipr(self.netns) as ipr:
            for ifname in ifnames:
                idx = _ifindex(ipr, ifname, self.netns)
                try:
                    ipr.tc("add", "clsact", idx)
                except NetlinkError as exc:
                    if exc.code != errno.EEXIST:
                        raise OSError(exc.code, f"tc qdisc add dev {ifname} clsact "
                                                f"({self.netns}): {exc}") from exc
                try:
                    ipr.tc("replace-filter", "bpf", idx, FILTER_HANDLE, fd=fd, name=name,
                           parent=TC_PARENTS[self.TC_DIRECTION], prio=FILTER_PRIO, classid=1,
                           direct_action=True)
                except NetlinkError as exc:
                    raise OSError(exc.code, f"tc filter replace dev {ifname} {self.TC_DIRECTION} "
                                            f"bpf ({self.netns}): {exc}") from exc

    def detach(self, ifnames, *, missing_ok: bool = True, keep_clsact=()) -> None:
        """Remove our filter from each interface, and the clsact qdisc when
        nothing else is left on it, unless the interface is in
        ``keep_clsact`` (a clsact that was there before us). Works without load() (after a restart).
        Interfaces (or namespaces) that are gone are skipped if ``missing_ok``."""
        from pyroute2.netlink.exceptions import NetlinkError

        for ipr, ifname, idx in each_link(self.netns, ifnames, missing_ok=missing_ok):
            try:
                ipr.tc("del-filter", "bpf", idx, FILTER_HANDLE,
                       parent=TC_PARENTS[self.TC_DIRECTION], prio=FILTER_PRIO)
            except NetlinkError as exc:
                if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
                    raise OSError(exc.code, f"tc filter del dev {ifname} {self.TC_DIRECTION} "
                                            f"({self.netns}): {exc}") from exc
            try:
                left = (list(ipr.get_filters(idx, parent=TC_H_CLSACT_INGRESS))
                        + list(ipr.get_filters(idx, parent=TC_H_CLSACT_EGRESS)))
            except NetlinkError:
                continue  # no clsact
            if not left and ifname not in keep_clsact:
                try:
                    ipr.tc("del", "clsact", idx)
                except NetlinkError as exc:
                    if exc.code not in (errno.ENOENT, errno.EINVAL):
                        raise OSError(exc.code, f"tc qdisc del dev {ifname} clsact "
                                                f"({self.netns}): {exc}") from exc

    # -- pins --
    def pin(self) -> Path:
        """Pin every map as <pin_dir>/<map name> (on the project's bpffs).
        Idempotent: a pin of the same map is kept, another one replaced."""
        self._need_loaded()
        if self.pin_dir.resolve().is_relative_to(Path(BPFFS_DIR).resolve()):
            ensure_bpffs()
        private_dir(self.pin_dir)
        for name in self.MAPS_CLASS.SPECS:
            path = self.pin_dir / name
            fd = self.node.map_fds[name]
            same = False
            if path.exists():
                try:
                    old = sc.obj_get(path)
                    try:
                        same = sc.map_info(old).id == sc.map_info(fd).id
                    finally:
                        os.close(old)
                except OSError:
                    pass
                if not same:
                    path.unlink()
            if not same:
                sc.obj_pin(fd, path)
            # root-only, also a pin kept from before: the pin's mode is what
            # guards BPF_OBJ_GET, i.e. reading and writing the map
            os.chmod(path, 0o600)
        return self.pin_dir

    def close(self) -> None:
        """Drop this process's references (fds). Attached filters keep the
        program, pins keep the maps."""
        if self._maps is not None:
            self._maps.close()
            self._maps = None
        if self.node is not None:
            self.node.close()
        self.node = None

    def __enter__(self) -> "BpfDatapath":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
