"""Load, attach and pin a sending host's data path (bpf/host_tc.c).

    ensure_bpffs()
    dp = HostDatapath("talb-h0", pin_dir("talb", "h0"))
    dp.load()               # bcc compile + kernel verify (SCHED_CLS)
    dp.attach(["eth0"])     # clsact + egress bpf filter, direct-action
    dp.pin()                # flow_isn, flow_rings, counters at <pin_dir>/<name>
    dp.close()              # the filter keeps the program, the pins the maps
    ...
    HostDatapath("talb-h0", pin).detach(["eth0"])
    remove_pins(pin)

The program tags the host's outgoing tensor packets with the TaLB IPv4 option
(DESIGN section 4); workload/tensor_sender.py writes the descriptors it
needs into the pinned ``flow_rings``. TCP connections must be opened after
the program is attached (it learns each flow's ISN from its SYN / SYN-ACK).
Same conventions as agent/loader.py's SwitchDatapath, at egress instead of
ingress.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from agent import bpf_syscall as sc
from agent.host_maps import HOST_MAP_SPECS, HostMaps
from agent.loader import (
    BPFFS_DIR, FILTER_HANDLE, FILTER_PRIO, INCLUDE_DIR, TC_H_CLSACT_EGRESS,
    TC_H_CLSACT_INGRESS, _ifindex, _ipr, ensure_bpffs, expand_source,
)

try:
    from talb.paths import BPF_SRC_DIR
except ImportError:  # pragma: no cover
    BPF_SRC_DIR = Path(__file__).resolve().parent.parent / "bpf"

__all__ = ["HostDatapath", "HOST_SRC", "HOST_PROG_NAME", "egress_filter"]

HOST_SRC = Path(BPF_SRC_DIR) / "host_tc.c"
HOST_PROG_NAME = "talb_host_tc"


def egress_filter(netns: str | None, ifname: str) -> dict | None:
    """Our bpf filter at clsact egress of ``ifname`` ({'ifname', 'ifindex',
    'name'}), or None if not attached."""
    from pyroute2.netlink.exceptions import NetlinkError

    with _ipr(netns) as ipr:
        idx = _ifindex(ipr, ifname, netns)
        try:
            filters = ipr.get_filters(idx, parent=TC_H_CLSACT_EGRESS)
        except NetlinkError:
            return None
        for f in filters:
            if f.get("handle") != FILTER_HANDLE or f.get_attr("TCA_KIND") != "bpf":
                continue
            opts = f.get_attr("TCA_OPTIONS")
            name = opts.get_attr("TCA_BPF_NAME") if opts is not None else None
            if name and name.startswith(HOST_PROG_NAME):
                return {"ifname": ifname, "ifindex": idx, "name": name}
    return None


class HostDatapath:
    """The tagging program of one host and its maps.

    ``netns``: the host's network namespace (None: the current one).
    ``pin_dir``: where :meth:`pin` puts the maps (``talb.paths.pin_dir(prefix,
    host)``: the library finds them there).
    """

    def __init__(self, netns: str | None, pin_dir: str | os.PathLike):
        self.netns = netns
        self.pin_dir = Path(pin_dir)
        self.bpf = None
        self.fn = None
        self._maps: HostMaps | None = None

    # -- program --
    def load(self, *, reuse_pins: bool = False, cflags: tuple[str, ...] = ()) -> "HostDatapath":
        """Compile bpf/host_tc.c with bcc and load it (SCHED_CLS).
        ``reuse_pins=True`` binds the program to the maps pinned in
        ``pin_dir`` when they all exist: learned ISNs and live rings survive a
        reload, so open connections keep being tagged."""
        from bcc import BPF

        if self.bpf is not None:
            return self
        flags = [f"-I{INCLUDE_DIR}", *cflags]
        if reuse_pins and all((self.pin_dir / n).exists() for n in HOST_MAP_SPECS):
            HostMaps(self.pin_dir).close()  # layout check before binding to them
            flags.append(f'-DTALB_HOST_PIN_DIR="{self.pin_dir}"')
        try:
            self.bpf = BPF(text=expand_source(HOST_SRC).encode(), cflags=flags)
            self.fn = self.bpf.load_func(HOST_PROG_NAME.encode(), BPF.SCHED_CLS)
        except Exception as exc:
            self.close()
            raise RuntimeError(f"loading {HOST_SRC} ({self.netns}): {exc}") from exc
        return self

    @property
    def prog_fd(self) -> int:
        self._need_loaded()
        return self.fn.fd

    @property
    def maps(self) -> HostMaps:
        """The loaded program's maps (valid until :meth:`close`)."""
        self._need_loaded()
        if self._maps is None:
            self._maps = HostMaps.from_fds({n: self.bpf[n.encode()].map_fd for n in HOST_MAP_SPECS})
        return self._maps

    def _need_loaded(self) -> None:
        if self.bpf is None:
            raise RuntimeError("HostDatapath: load() first")

    # -- tc --
    def attach(self, ifnames=("eth0",)) -> None:
        """clsact qdisc + our bpf filter (direct-action) at egress of each
        interface. Idempotent: an existing filter of ours is replaced."""
        self._need_loaded()
        from pyroute2.netlink.exceptions import NetlinkError

        name = self.fn.name.decode() if isinstance(self.fn.name, bytes) else self.fn.name
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
                    ipr.tc("replace-filter", "bpf", idx, FILTER_HANDLE, fd=self.fn.fd, name=name,
                           parent=TC_H_CLSACT_EGRESS, prio=FILTER_PRIO, classid=1,
                           direct_action=True)
                except NetlinkError as exc:
                    raise OSError(exc.code, f"tc filter replace dev {ifname} egress bpf "
                                            f"({self.netns}): {exc}") from exc

    def detach(self, ifnames=("eth0",), *, missing_ok: bool = True) -> None:
        """Remove our egress filter, and the clsact qdisc when nothing else
        is left on it. Works without load(). Interfaces (or namespaces) that
        are gone are skipped if ``missing_ok``."""
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
                           parent=TC_H_CLSACT_EGRESS, prio=FILTER_PRIO)
                except NetlinkError as exc:
                    if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV):
                        raise OSError(exc.code, f"tc filter del dev {ifname} egress "
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
        """Pin every map as <pin_dir>/<map name>. Idempotent: a pin of the
        same map is kept, another one replaced."""
        self._need_loaded()
        if self.pin_dir.resolve().is_relative_to(Path(BPFFS_DIR).resolve()):
            ensure_bpffs()
        self.pin_dir.mkdir(parents=True, exist_ok=True)
        for name in HOST_MAP_SPECS:
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
        """Drop this process's references. Attached filters keep the
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

    def __enter__(self) -> "HostDatapath":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
