"""A non-editable install carries what talb needs at run time: the eBPF C
sources (bpf/, packaged as common/bpf), found by common.paths outside a checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_carries_every_bpf_source_and_talb_finds_them(tmp_path):
    # Build from a copy: an in-tree build leaves build/ behind, whose stale
    # files would end up in later wheels.
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
        "results"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (wheel,) = (tmp_path / "dist").glob("talb-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    sources = {p.relative_to(REPO / "bpf").as_posix() for p in (REPO / "bpf").rglob("*")
               if p.is_file() and p.suffix in (".c", ".h")}
    assert "switch_tc.c" in sources and "include/talb/maps.h" in sources
    missing = sorted(s for s in sources if f"common/bpf/{s}" not in names)
    assert not missing, f"not in the wheel: {missing}"
    # every Python package of the checkout (a new subpackage must be listed in pyproject)
    packages = {p.relative_to(REPO).as_posix() for p in REPO.glob("*/**/__init__.py")
                if not p.relative_to(REPO).parts[0].startswith((".", "tests", "build"))}
    assert "workload/models/__init__.py" in packages
    missing = sorted(p for p in packages if p not in names)
    assert not missing, f"packages not in the wheel (add them to pyproject.toml): {missing}"
    # the C helpers the agent builds at run time (common/native.py)
    helpers = {p.relative_to(REPO).as_posix() for d in ("agent", "datapath")
               for p in (REPO / d).glob("*.c")}
    assert {"agent/pcm_window.c", "datapath/talb_parts.c"} <= helpers
    missing = sorted(h for h in helpers if h not in names)
    assert not missing, f"C helpers not in the wheel: {missing}"

    # the unpacked wheel alone on the path, run from elsewhere: common.paths
    # points into it, and the loaders (which read bpf/ headers at import) import
    site = tmp_path / "site"
    probe = ("import common.paths as p, datapath.loader as l, datapath.host_loader as h;"
             "print(p.__file__); print(p.BPF_SRC_DIR); print(l.SWITCH_SRC.is_file(), h.HOST_SRC.is_file())")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)
    assert r.returncode == 0, r.stderr
    module, bpf_dir, found = r.stdout.splitlines()
    assert Path(module).is_relative_to(site) and Path(bpf_dir) == site / "common" / "bpf", r.stdout
    assert found == "True True", r.stdout
