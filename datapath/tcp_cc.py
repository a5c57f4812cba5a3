"""The hosts' TCP congestion control for a run (``--tcp-cc``), and DCTCP as
a BPF congestion control where the kernel has no DCTCP of its own.

``--tcp-cc NAME``: any algorithm the kernel offers
(net.ipv4.tcp_available_congestion_control; a module such as tcp_dctcp is
loaded on demand), or ``dctcp-bpf``: bpf/cc/dctcp_bpf.c, our DCTCP written
as a struct_ops tcp_congestion_ops, compiled with clang against the
running kernel's BTF and registered with ``bpftool struct_ops register``
while a run needs it (:func:`dctcp_bpf`), unregistered after. It
registers as ``dctcp_bpf``: the kernel takes letters, digits, ``_`` and
``.`` in a struct_ops name (bpf_obj_name_cpy), so the option's
``dctcp-bpf`` is the user's name and ``dctcp_bpf`` the kernel's
(:func:`kernel_name`). A refusal names the option and what the kernel
offers (:class:`TcpCcError`).

Congestion control is per socket; a host namespace's default
(net.ipv4.tcp_congestion_control) is what its new sockets take. A
namespace other than the initial one may only default to an algorithm
listed in the global tcp_allowed_congestion_control: the registration adds
it there (the entry goes with the algorithm when it is unregistered).
"""
from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

from common import paths
from common.excerpt import shown

SYSCTL = Path("/proc/sys/net/ipv4")
#: the option's name for our BPF DCTCP, and the kernel's (a struct_ops name)
DCTCP_BPF = "dctcp-bpf"
DCTCP_BPF_KERNEL = "dctcp_bpf"
#: the struct_ops map's name in dctcp_bpf.c (what unregister takes)
DCTCP_BPF_MAP = "dctcp_bpf"
SOURCE = paths.BPF_SRC_DIR / "cc" / "dctcp_bpf.c"
BUILD_DIR = paths.RUN_DIR / "tcp_cc"
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
#: Debian packages the BPF build needs (scripts/setup.sh installs them)
TOOLS = {"clang": "clang", "bpftool": "bpftool"}


class TcpCcError(ValueError):
    """A congestion control this kernel cannot give; the message names --tcp-cc."""


def available() -> list[str]:
    return (SYSCTL / "tcp_available_congestion_control").read_text().split()


def kernel_name(name: str) -> str:
    """``dctcp-bpf`` -> ``dctcp_bpf``; any other name as it is."""
    return DCTCP_BPF_KERNEL if name == DCTCP_BPF else name


def _modprobe(name: str) -> bool:
    """Load tcp_<name> if the kernel has it as a module (quietly)."""
    if not shutil.which("modprobe"):
        return False
    r = subprocess.run(["modprobe", "-q", f"tcp_{name}"], capture_output=True, timeout=30)
    return r.returncode == 0 and name in available()


def check(name: str) -> str:
    """``name`` if this kernel can give it (loading its module when there
    is one); ``dctcp-bpf`` when clang and bpftool are there and the kernel
    has BTF. TcpCcError otherwise, naming --tcp-cc and what is offered."""
    if not isinstance(name, str) or not name.replace("-", "_").isidentifier():
        raise TcpCcError(f"--tcp-cc: a congestion control's name, got {shown(name)}")
    if name == DCTCP_BPF:
        missing = [t for t in TOOLS if not shutil.which(t)]
        if missing:
            raise TcpCcError(f"--tcp-cc: dctcp-bpf is built with clang and registered with "
                             f"bpftool; not found: {', '.join(missing)} (scripts/setup.sh "
                             f"installs them)")
        if not VMLINUX_BTF.exists():
            raise TcpCcError(f"--tcp-cc: dctcp-bpf needs the kernel's BTF ({VMLINUX_BTF}), "
                             f"which this kernel does not have")
        return name
    if name in available() or _modprobe(name):
        return name
    hint = (" (this kernel has no tcp_dctcp; --tcp-cc dctcp-bpf registers our DCTCP written "
            "as a BPF congestion control)" if name == "dctcp" else "")
    raise TcpCcError(f"--tcp-cc: {name!r} is not available in this kernel (available: "
                     f"{', '.join(available())}; or dctcp-bpf){hint}")


def build() -> Path:
    """bpf/cc/dctcp_bpf.c compiled against the running kernel's BTF, under
    BUILD_DIR (kept by the source's and the BTF's hash: built once per kernel
    and source). Returns the object file."""
    check(DCTCP_BPF)
    btf = VMLINUX_BTF.read_bytes()
    src = SOURCE.read_bytes()
    tag = hashlib.sha256(src + btf).hexdigest()[:16]
    out = BUILD_DIR / f"dctcp_bpf-{tag}.o"
    if out.exists():
        return out
    BUILD_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    vmlinux_h = BUILD_DIR / f"vmlinux-{hashlib.sha256(btf).hexdigest()[:16]}" / "vmlinux.h"
    if not vmlinux_h.exists():
        vmlinux_h.parent.mkdir(exist_ok=True)
        with open(vmlinux_h.with_suffix(".tmp"), "w") as f:
            subprocess.run(["bpftool", "btf", "dump", "file", str(VMLINUX_BTF), "format", "c"],
                           stdout=f, check=True, timeout=120)
        vmlinux_h.with_suffix(".tmp").rename(vmlinux_h)
    tmp = out.with_suffix(".tmp")
    r = subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-D__TARGET_ARCH_x86",
                        "-I", str(vmlinux_h.parent), "-c", str(SOURCE), "-o", str(tmp)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise TcpCcError(f"--tcp-cc: dctcp-bpf does not compile: {r.stderr.strip()[-600:]}")
    tmp.rename(out)
    return out


def registered() -> bool:
    return DCTCP_BPF_KERNEL in available()


def register() -> bool:
    """Register dctcp_bpf (built first). True if this call registered it,
    False if it was registered already. TcpCcError with bpftool's words
    when the kernel refuses it."""
    if registered():
        return False
    obj = build()
    r = subprocess.run(["bpftool", "struct_ops", "register", str(obj)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode or not registered():
        raise TcpCcError(f"--tcp-cc: this kernel refused dctcp-bpf (bpftool struct_ops "
                         f"register: {(r.stderr or r.stdout).strip()[-400:]})")
    allowed = SYSCTL / "tcp_allowed_congestion_control"
    names = allowed.read_text().split()
    if DCTCP_BPF_KERNEL not in names:
        allowed.write_text(" ".join([*names, DCTCP_BPF_KERNEL]))
    return True


def unregister() -> None:
    """Unregister dctcp_bpf (nothing when it is not registered). Sockets
    still using it keep it until they close (the kernel holds it for them)."""
    if not registered():
        return
    r = subprocess.run(["bpftool", "struct_ops", "unregister", "name", DCTCP_BPF_MAP],
                       capture_output=True, text=True, timeout=60)
    if r.returncode:
        raise TcpCcError(f"dctcp-bpf: bpftool struct_ops unregister failed: "
                         f"{(r.stderr or r.stdout).strip()[-400:]}")


@contextlib.contextmanager
def dctcp_bpf() -> Iterator[None]:
    """dctcp_bpf registered while the block runs; unregistered after it if
    this block registered it (also on failure)."""
    mine = register()
    try:
        yield
    finally:
        if mine:
            unregister()
