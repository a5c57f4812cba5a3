"""Where the testbed keeps its run-time state.

Everything lives under /run/talb (tmpfs: gone after a reboot, like the
namespaces themselves). Maps are pinned on a bpffs mounted by the project at
/run/talb/bpffs, not /sys/fs/bpf: `ip netns exec` remounts /sys and hides
/sys/fs/bpf from processes inside a namespace (docs/design.md §4). All of it is
root-only (directories 0700, files and pins 0600), set explicitly by
:func:`private_dir` and :func:`private_file` whatever the umask: pins give
read/write access to the maps, lock files are the agent's and id slots'
mutual exclusion, and state files name pids that `down` signals.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from common.excerpt import shown

RUN_DIR = Path(os.environ.get("TALB_RUN_DIR", "/run/talb"))
BPFFS_DIR = RUN_DIR / "bpffs"
REPO_ROOT = Path(__file__).resolve().parent.parent
# The eBPF C sources: packaged as common/bpf by a (non-editable) install
# (pyproject.toml maps bpf/ there); in a checkout they are <checkout>/bpf.
_PACKAGED_BPF = Path(__file__).resolve().parent / "bpf"
BPF_SRC_DIR = _PACKAGED_BPF if _PACKAGED_BPF.is_dir() else REPO_ROOT / "bpf"

DEFAULT_PREFIX = "talb"
# Letters and digits only: namespaces are named "<prefix>-<node>", so a prefix
# without '-' can never match another prefix's namespaces in a prefix scan.
# \Z, not $: "$" also matches before a final newline ("talb\n").
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,11}\Z")
# Node (host, switch) names: part of namespace and pin paths, and a switch's
# port is named after its peer, so 12 characters leave room for a "-N"
# parallel-link suffix within IFNAMSIZ (15).
NODE_RE = re.compile(r"^[a-z][a-z0-9]{0,11}\Z")
# A namespace given by hand (`talb agent --netns`): a file under /run/netns.
NETNS_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.match(prefix or ""):
        raise ValueError(
            f"prefix: must be 1-12 lowercase letters or digits starting with a letter, got {shown(prefix)}"
        )
    return prefix


PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600


def _ours(d: Path) -> bool:
    return d == RUN_DIR or RUN_DIR in d.parents


def check_node(name: str, field: str = "node") -> str:
    if not isinstance(name, str) or not NODE_RE.match(name):
        raise ValueError(f"{field}: must be 1-12 lowercase letters or digits starting with a "
                         f"letter, got {shown(name)}")
    return name


def check_netns(name: str, field: str = "netns") -> str:
    if not isinstance(name, str) or not NETNS_RE.match(name) or ".." in name:
        raise ValueError(f"{field}: must be 1-64 letters, digits, '_', '.' or '-' (no '..'), "
                         f"got {shown(name)}")
    return name


def private_dir(path: str | os.PathLike) -> Path:
    """``mkdir -p`` that leaves 0700 on ``path``, on the directories it made
    and on those up to RUN_DIR: mkdir -p gives parents the umask's mode, and
    a directory left by an older version or another umask is fixed on reuse."""
    path = Path(path)
    existing = next(p for p in (path, *path.parents) if p.exists())
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    for d in (path, *path.parents):
        made = existing in d.parents
        if d != path and not made and not _ours(d):
            break
        os.chmod(d, PRIVATE_DIR_MODE)
    return path


def private_file(path: str | os.PathLike, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """An fd of ``path``, created or reused with mode 0600 (fchmod: the
    create mode goes through the umask, and a reused file keeps its own)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` by ``text`` atomically (a reader never sees half a
    file), mode 0600."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(private_file(tmp), "w") as f:
        f.write(text)
    tmp.replace(path)


def state_dir(prefix: str) -> Path:
    return RUN_DIR / check_prefix(prefix)


def state_file(prefix: str) -> Path:
    return state_dir(prefix) / "state.json"


def pin_dir(prefix: str, switch: str | None = None) -> Path:
    base = BPFFS_DIR / check_prefix(prefix)
    return base / check_node(switch) if switch else base


def netns_name(prefix: str, node: str) -> str:
    return f"{check_prefix(prefix)}-{check_node(node)}"


def attach_file(name: str) -> Path:
    """What `talb attach --fabric FILE` did on a fabric it did not build
    (testbed/attach.py); `talb detach` undoes exactly that."""
    return state_dir(name) / "attach.json"


def attach_netns_name(name: str, node: str) -> str:
    """The name `talb attach` gives a node's namespace that it reaches by pid
    (``ip netns attach``; never ``<prefix>-<node>``, a testbed's)."""
    return f"talb.{check_prefix(name)}.{check_node(node)}"


def cluster_attach_file(name: str) -> Path:
    """Where `talb attach --cluster` keeps which machine's worker attached
    which part of fabric ``name`` (on the machine it ran on; "attach-cluster"
    has a '-', so it is never a prefix's directory)."""
    return RUN_DIR / "attach-cluster" / f"{check_prefix(name)}.json"
