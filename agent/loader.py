"""Load, attach and pin a switch's data path (bpf/switch_tc.c).

    ensure_bpffs()
    dp = SwitchDatapath("talb-leaf1", pin_dir("talb", "leaf1"))
    dp.load()                      # bcc compile + kernel verify (SCHED_CLS)
    dp.attach(["eth0", "eth1"])    # clsact + ingress bpf filter, direct-action
    dp.pin()                       # every map at <pin_dir>/<map name>
    dp.close()                     # the process may exit now: the filters
                                   # keep the program, the pins the maps
    ...
    SwitchDatapath("talb-leaf1", pin).detach(["eth0", "eth1"])
    remove_pins(pin)

bcc only rewrites map operations in its main source file, so the project's
own headers (``#include "talb/..."``) are expanded into one text before
compiling, with ``#line`` markers so that errors still name the real files.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import zlib
from pathlib import Path

from agent import bpf_syscall as sc
from agent.maps import CFG_RELEASE_SK, CONST, MAP_SPECS, SCHEMES, SwitchMaps, TalbConfig

try:
    from talb.paths import BPF_SRC_DIR, BPFFS_DIR
except ImportError:  # pragma: no cover
    BPF_SRC_DIR = Path(__file__).resolve().parent.parent / "bpf"
    BPFFS_DIR = Path("/run/talb/bpffs")

__all__ = [
    "ensure_bpffs", "is_bpffs", "expand_source", "SwitchDatapath", "remove_pins",
    "PROG_NAME", "FILTER_PRIO", "FILTER_HANDLE", "default_hash_seed", "ingress_filter",
]

SWITCH_SRC = Path(BPF_SRC_DIR) / "switch_tc.c"
INCLUDE_DIR = Path(BPF_SRC_DIR) / "include"
PROG_NAME = "talb_switch_tc"
# Our filter at clsact ingress: fixed priority and handle, so attach can
# replace it in place and detach can remove exactly it.
FILTER_PRIO = 1
FILTER_HANDLE = 1
TC_H_CLSACT_INGRESS = "ffff:fff2"
TC_H_CLSACT_EGRESS = "ffff:fff3"
BPF_FS_MAGIC = 0xCAFE4A11

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


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
    remounts /sys and hides /sys/fs/bpf inside namespaces (DESIGN section 4).
    """
    path = Path(path)
    if is_bpffs(path):
        return path
    path.mkdir(parents=True, exist_ok=True)
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    ret = libc.mount(b"bpf", os.fsencode(path), b"bpf", ctypes.c_ulong(0), None)
    if ret != 0:
        err = ctypes.get_errno()
        if not (err == errno.EBUSY and is_bpffs(path)):
            raise OSError(err, f"mount -t bpf bpf {path}: {os.strerror(err)}")
    return path


# --- source ----------------------------------------------------------------
def expand_source(path: str | os.PathLike = SWITCH_SRC,
                  include_dirs: tuple[str | os.PathLike, ...] = (INCLUDE_DIR,)) -> str:
    """``path`` with every ``#include "..."`` found under ``include_dirs``
    (or next to the including file) expanded in place, each file once,
    with ``#line`` markers. ``#include <...>`` is left to the compiler."""
    seen: set[Path] = set()

    def find(name: str, here: Path) -> Path | None:
        for d in (here.parent, *map(Path, include_dirs)):
            p = (d / name).resolve()
            if p.is_file():
                return p
        return None

    def expand(p: Path) -> str:
        seen.add(p)
        out = [f'#line 1 "{p}"\n']
        for i, line in enumerate(p.read_text().splitlines(keepends=True), 1):
            m = _INCLUDE_RE.match(line)
            inc = find(m.group(1), p) if m else None
            if inc is None:
                out.append(line)
                continue
            if inc not in seen:
                out.append(expand(inc))
            out.append(f'#line {i + 1} "{p}"\n')
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        return "".join(out)

    return expand(Path(path).resolve())


def default_hash_seed(name: str) -> int:
    """A stable per-switch seed (different switches hash differently, which
    avoids hash polarisation across hops)."""
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


def _ipr(netns: str | None):
    from pyroute2 import IPRoute

    # flags=0: never create the namespace when it is missing (pyroute2 would).
    return IPRoute(netns=netns, flags=0) if netns else IPRoute()


def _ifindex(ipr, ifname: str, netns: str | None) -> int:
    idx = ipr.link_lookup(ifname=ifname)
    if not idx:
        raise OSError(errno.ENODEV, f"no device {ifname!r} in netns {netns or '(current)'}")
    return idx[0]


def ingress_filter(netns: str | None, ifname: str) -> dict | None:
    """Our bpf filter at clsact ingress of ``ifname`` (netlink message as a
    dict with 'name'), or None if not attached."""
    from pyroute2.netlink.exceptions import NetlinkError

    with _ipr(netns) as ipr:
        idx = _ifindex(ipr, ifname, netns)
        try:
            filters = ipr.get_filters(idx, parent=TC_H_CLSACT_INGRESS)
        except NetlinkError:
            return None
        for f in filters:
            if f.get("handle") != FILTER_HANDLE or f.get_attr("TCA_KIND") != "bpf":
                continue
            opts = f.get_attr("TCA_OPTIONS")
            name = opts.get_attr("TCA_BPF_NAME") if opts is not None else None
            if name and name.startswith(PROG_NAME):
                return {"ifname": ifname, "ifindex": idx, "name": name}
    return None


class SwitchDatapath:
    """The data path of one switch: program + maps, attached to its ports.

    ``netns``: the switch's network namespace (None: the current one).
    ``pin_dir``: where :meth:`pin` puts the maps (``talb.paths.pin_dir``).
    """

    def __init__(self, netns: str | None, pin_dir: str | os.PathLike):
        self.netns = netns
        self.pin_dir = Path(pin_dir)
        self.bpf = None
        self.fn = None
        self._maps: SwitchMaps | None = None

    # -- program --
    def load(self, *, release_sk: bool = True, hash_seed: int | None = None,
             reuse_pins: bool = False, cflags: tuple[str, ...] = ()) -> "SwitchDatapath":
        """Compile bpf/switch_tc.c with bcc and load it (SCHED_CLS).

        Fresh maps get the default config: ECMP, ``hash_seed`` (default:
        per-switch, from the namespace name), CFG_RELEASE_SK if
        ``release_sk``; for TaLB: ECMP as the fallback for untagged
        packets, TALB_MAX_TENSORS live tensors, TALB_DEFAULT_IDLE_US idle
        timeout, one priority band (agent.control.set_talb_config changes
        them). ``reuse_pins=True`` binds the program to the maps
        already pinned in ``pin_dir`` (state and config kept) when they all
        exist."""
        from bcc import BPF

        if self.bpf is not None:
            return self
        flags = [f"-I{INCLUDE_DIR}", *cflags]
        reusing = reuse_pins and all((self.pin_dir / n).exists() for n in MAP_SPECS)
        if reusing:
            SwitchMaps(self.pin_dir).close()  # layout check before binding to them
            flags.append(f'-DTALB_PIN_DIR="{self.pin_dir}"')
        text = expand_source(SWITCH_SRC)
        try:
            self.bpf = BPF(text=text.encode(), cflags=flags)
            self.fn = self.bpf.load_func(PROG_NAME.encode(), BPF.SCHED_CLS)
        except Exception as exc:
            self.close()
            raise RuntimeError(f"loading {SWITCH_SRC} ({self.netns}): {exc}") from exc
        if not reusing:
            seed = default_hash_seed(self.netns or str(self.pin_dir)) if hash_seed is None else hash_seed
            self.maps.config[0] = TalbConfig(
                scheme=SCHEMES["ecmp"], hash_seed=seed,
                flags=CFG_RELEASE_SK if release_sk else 0,
                fallback_scheme=SCHEMES["ecmp"],
                tensor_limit=CONST["TALB_MAX_TENSORS"],
                tensor_idle_us=CONST["TALB_DEFAULT_IDLE_US"],
                n_bands=1, layers_per_band=CONST["TALB_DEFAULT_LAYERS_PER_BAND"])
        return self

    @property
    def prog_fd(self) -> int:
        self._need_loaded()
        return self.fn.fd

    @property
    def maps(self) -> SwitchMaps:
        """The loaded program's maps (valid until :meth:`close`)."""
        self._need_loaded()
        if self._maps is None:
            self._maps = SwitchMaps.from_fds({n: self.bpf[n.encode()].map_fd for n in MAP_SPECS})
        return self._maps

    def _need_loaded(self) -> None:
        if self.bpf is None:
            raise RuntimeError("SwitchDatapath: load() first")

    # -- tc --
    def attach(self, ifnames) -> None:
        """clsact qdisc + our bpf filter (direct-action) at ingress of each
        port. Idempotent: an existing filter of ours is replaced in place."""
        self._need_loaded()
        from pyroute2.netlink.exceptions import NetlinkError

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
                    ipr.tc("replace-filter", "bpf", idx, FILTER_HANDLE, fd=self.fn.fd,
                           name=self.fn.name.decode() if isinstance(self.fn.name, bytes)
                           else self.fn.name, parent=TC_H_CLSACT_INGRESS,
                           prio=FILTER_PRIO, classid=1, direct_action=True)
                except NetlinkError as exc:
                    raise OSError(exc.code, f"tc filter replace dev {ifname} ingress bpf "
                                            f"({self.netns}): {exc}") from exc

    def detach(self, ifnames, *, missing_ok: bool = True) -> None:
        """Remove our ingress filter from each port, and the clsact qdisc when
        nothing else is left on it. Works without load() (after a restart).
        Ports (or namespaces) that are gone are skipped if ``missing_ok``."""
        from pyroute2.netlink.exceptions import NetlinkError

        try:
            ipr = _ipr(self.netns)
        except Exception as exc:
            if missing_ok and not (Path("/run/netns") / str(self.netns)).exists():
                return
            raise OSError(errno.ENOENT, f"netns {self.netns}: {exc}") from exc
        with ipr:
            for ifname in ifnames:
                idx = ipr.link_lookup(ifname=ifname)
                if not idx:
                    if missing_ok:
                        continue
                    raise OSError(errno.ENODEV, f"no device {ifname!r} in netns {self.netns}")
                idx = idx[0]
                try:
                    ipr.tc("del-filter", "bpf", idx, FILTER_HANDLE,
                           parent=TC_H_CLSACT_INGRESS, prio=FILTER_PRIO)
                except NetlinkError as exc:
                    if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
                        raise OSError(exc.code, f"tc filter del dev {ifname} ingress "
                                                f"({self.netns}): {exc}") from exc
                try:
                    left = (list(ipr.get_filters(idx, parent=TC_H_CLSACT_INGRESS))
                            + list(ipr.get_filters(idx, parent=TC_H_CLSACT_EGRESS)))
                except NetlinkError:
                    continue  # no clsact
                if not left:
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
        self.pin_dir.mkdir(parents=True, exist_ok=True)
        for name in MAP_SPECS:
            path = self.pin_dir / name
            fd = self.bpf[name.encode()].map_fd
            if path.exists():
                try:
                    old = sc.obj_get(path)
                    try:
                        same = sc.map_info(old).id == sc.map_info(fd).id
                    finally:
                        os.close(old)
                except OSError:
                    same = False
                if same:
                    continue
                path.unlink()
            sc.obj_pin(fd, path)
        return self.pin_dir

    def close(self) -> None:
        """Drop this process's references (fds). Attached filters keep the
        program, pins keep the maps."""
        if self._maps is not None:
            self._maps.close()
            self._maps = None
        if self.bpf is not None:
            try:
                self.bpf.cleanup()
            except Exception:
                pass
        self.bpf = None
        self.fn = None

    def __enter__(self) -> "SwitchDatapath":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
