"""`sudo talb` after `make setup`: scripts/talb-link.sh links the venv's talb
into /usr/local/bin (on sudo's secure_path and root's PATH), idempotently,
never replacing or removing a `talb` that is not ours; `make clean` removes
ours. Exercised on a fake venv and bin directory (never the real venv: a
write through the link would land in it), plus one check of the real link
that `make setup` made."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "talb-link.sh"
# Debian 12's /etc/sudoers (sudo 1.9.13p3-1+deb12u4), line 11:
DEBIAN_SECURE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEBIAN_SUDOERS = f'''Defaults\tenv_reset
Defaults\tmail_badpass
Defaults\tsecure_path="{DEBIAN_SECURE_PATH}"
Defaults\tuse_pty
root\tALL=(ALL:ALL) ALL
%sudo\tALL=(ALL:ALL) ALL
@includedir /etc/sudoers.d
'''


@pytest.fixture
def place(tmp_path):
    """A fake venv whose talb says who it is, an empty bin dir, Debian's sudoers."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    talb = venv / "bin" / "talb"
    talb.write_text('#!/bin/sh\necho "fake talb $*"\n')
    talb.chmod(0o755)
    sudoers = tmp_path / "sudoers"
    sudoers.write_text(DEBIAN_SUDOERS.replace("/usr/local/bin", str(tmp_path / "bin")))
    return tmp_path


def link(place: Path, action: str, venv: Path | None = None, sudoers: Path | None = None):
    env = {**os.environ, "VENV": str(venv or place / "venv"), "TALB_BIN_DIR": str(place / "bin"),
           "TALB_SUDOERS": str(sudoers or place / "sudoers")}
    return subprocess.run(["bash", str(SCRIPT), action], env=env, capture_output=True, text=True,
                          timeout=30)


def on_secure_path(place: Path, *args: str):
    """`talb ARGS` resolved as sudo does: through the secure_path only."""
    path = DEBIAN_SECURE_PATH.replace("/usr/local/bin", str(place / "bin"))
    return subprocess.run(["env", "-i", f"PATH={path}", "talb", *args], capture_output=True,
                          text=True, timeout=30)


def test_install_links_the_venvs_talb_idempotently_and_clean_removes_it(place):
    first = link(place, "install")
    assert first.returncode == 0, first.stderr
    dest = place / "bin" / "talb"
    assert dest.is_symlink() and os.readlink(dest) == str(place / "venv" / "bin" / "talb")
    assert dest.lstat().st_uid == os.geteuid()   # root's, when set up as root
    assert "linked" in first.stdout and first.stderr == ""
    again = link(place, "install")
    assert again.returncode == 0 and "(present)" in again.stdout and again.stderr == ""
    run = on_secure_path(place, "testbed", "status")
    assert run.returncode == 0 and run.stdout == "fake talb testbed status\n", run.stderr
    gone = link(place, "remove")
    assert gone.returncode == 0 and not dest.exists() and not dest.is_symlink()
    assert (place / "venv" / "bin" / "talb").is_file()   # the venv's own talb untouched
    assert link(place, "remove").returncode == 0   # nothing left: no error


def test_a_worktrees_venv_link_makes_the_same_link_and_its_clean_leaves_it(place):
    """A checkout whose .venv links to a shared venv links the venv's real
    path (valid whichever checkout made it), and its `make clean`, which
    removes only its .venv link, leaves the shared venv's talb on the PATH."""
    (place / "wt").mkdir()
    (place / "wt" / ".venv").symlink_to(place / "venv")
    assert link(place, "install", venv=place / "wt" / ".venv").returncode == 0
    dest = place / "bin" / "talb"
    assert os.readlink(dest) == str(place / "venv" / "bin" / "talb")
    assert "(present)" in link(place, "install").stdout   # the shared venv's own: same link
    kept = link(place, "remove", venv=place / "wt" / ".venv")
    assert kept.returncode == 0 and dest.is_symlink() and "stays" in kept.stdout


@pytest.mark.parametrize("foreign", ["file", "other checkout", "dangling"])
def test_a_talb_that_is_not_ours_is_never_replaced_or_removed(place, foreign):
    dest = place / "bin" / "talb"
    dest.parent.mkdir()
    if foreign == "file":
        dest.write_text("#!/bin/sh\necho someone else's talb\n")
        dest.chmod(0o755)
    else:
        other = place / "other" / ".venv" / "bin" / "talb"
        if foreign == "other checkout":
            other.parent.mkdir(parents=True)
            other.write_text("#!/bin/sh\necho other checkout\n")
            other.chmod(0o755)
        dest.symlink_to(other)
    before = (os.readlink(dest) if dest.is_symlink() else None,
              dest.read_text() if dest.exists() else None)
    r = link(place, "install")
    assert r.returncode == 0, r.stderr                     # setup goes on
    assert f"{dest} is a" in r.stderr and "not this checkout's talb: left alone" in r.stderr
    assert f"sudo {place / 'venv'}/bin/talb" in r.stderr  # what to type instead
    assert link(place, "remove").returncode == 0
    after = (os.readlink(dest) if dest.is_symlink() else None,
             dest.read_text() if dest.exists() else None)
    assert after == before


def test_a_secure_path_without_the_bin_dir_is_reported(place, tmp_path):
    strict = tmp_path / "strict-sudoers"
    strict.write_text('Defaults secure_path="/usr/sbin:/usr/bin:/sbin:/bin"\n')
    r = link(place, "install", sudoers=strict)
    assert r.returncode == 0 and "sudo's secure_path (/usr/sbin:/usr/bin:/sbin:/bin) lacks" in r.stderr
    r = link(place, "install")   # Debian's: has it, nothing to say
    assert r.returncode == 0 and r.stderr == ""
    r = link(place, "install", sudoers=tmp_path / "no-sudo-here")
    assert r.returncode == 0 and r.stderr == ""


def test_setup_installs_the_link_and_clean_removes_it():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert 'bash "$REPO/scripts/talb-link.sh" install' in setup
    clean = subprocess.run(["make", "-n", "-C", str(REPO), "clean"], capture_output=True,
                           text=True, check=True).stdout
    assert "scripts/talb-link.sh remove" in clean
    # remove before the venv goes: the link is told ours by its target
    assert clean.index("talb-link.sh remove") < clean.index("rm -rf")


def test_the_real_link_runs_talb_as_sudo_and_root_find_it():
    """After `make setup`: `talb` through Debian's secure_path (what `sudo
    talb` resolves) and through root's PATH is this venv's talb; with sudo
    installed, `sudo talb` itself."""
    import sys

    real = Path("/usr/local/bin/talb")
    venv_talb = (Path(sys.prefix) / "bin" / "talb").resolve()
    if not (real.is_symlink() and real.resolve() == venv_talb):
        pytest.skip(f"{real} is not this venv's talb (make setup links it; "
                    f"another checkout's stays)")
    r = subprocess.run(["env", "-i", f"PATH={DEBIAN_SECURE_PATH}", "talb", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "talb testbed up" in r.stdout, r.stderr
    assert shutil.which("talb", path=DEBIAN_SECURE_PATH) == str(real)
    if shutil.which("sudo") and os.geteuid() == 0:
        r = subprocess.run(["sudo", "-n", "talb", "--help"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "talb testbed up" in r.stdout, r.stderr
