"""Where the testbed keeps its run-time state.

Everything lives under /run/talb (tmpfs: gone after a reboot, like the
namespaces themselves). Maps are pinned on a bpffs mounted by the project at
/run/talb/bpffs, not /sys/fs/bpf: `ip netns exec` remounts /sys and hides
/sys/fs/bpf from processes inside a namespace (DESIGN §4).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

RUN_DIR = Path(os.environ.get("TALB_RUN_DIR", "/run/talb"))
BPFFS_DIR = RUN_DIR / "bpffs"
REPO_ROOT = Path(__file__).resolve().parent.parent
# The eBPF C sources: packaged as talb/bpf by a (non-editable) install
# (pyproject.toml maps bpf/ there); in a checkout they are <checkout>/bpf.
_PACKAGED_BPF = Path(__file__).resolve().parent / "bpf"
BPF_SRC_DIR = _PACKAGED_BPF if _PACKAGED_BPF.is_dir() else REPO_ROOT / "bpf"

DEFAULT_PREFIX = "talb"
# Letters and digits only: namespaces are named "<prefix>-<node>", so a prefix
# without '-' can never match another prefix's namespaces in a prefix scan.
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")


def check_prefix(prefix: str) -> str:
    if not PREFIX_RE.match(prefix or ""):
        raise ValueError(
            f"prefix: must be 1-12 lowercase letters or digits starting with a letter, got {prefix!r}"
        )
    return prefix


def state_dir(prefix: str) -> Path:
    return RUN_DIR / check_prefix(prefix)


def state_file(prefix: str) -> Path:
    return state_dir(prefix) / "state.json"


def pin_dir(prefix: str, switch: str | None = None) -> Path:
    base = BPFFS_DIR / check_prefix(prefix)
    return base / switch if switch else base


def netns_name(prefix: str, node: str) -> str:
    return f"{check_prefix(prefix)}-{node}"
