"""common/paths.py: root-only files and directories, checked names."""
from __future__ import annotations

import os
import re
import stat

import pytest

from common import paths


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def umask0():
    old = os.umask(0)
    yield
    os.umask(old)


def test_private_dir_makes_and_fixes_0700_but_leaves_others_alone(tmp_path, umask0, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setattr(paths, "RUN_DIR", run)
    os.chmod(tmp_path, 0o755)
    deep = paths.private_dir(run / "p" / "ids" / "h0")
    assert [mode(d) for d in (deep, deep.parent, deep.parent.parent, run)] == [0o700] * 4
    assert mode(tmp_path) == 0o755  # above RUN_DIR: not ours
    os.chmod(run / "p", 0o755)  # left by an older version: fixed on reuse
    paths.private_dir(run / "p")
    assert mode(run / "p") == 0o700 and mode(tmp_path) == 0o755

    elsewhere = tmp_path / "mine"  # outside RUN_DIR: only what it made
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    paths.private_dir(elsewhere / "a" / "b")
    assert mode(elsewhere) == 0o755
    assert mode(elsewhere / "a") == mode(elsewhere / "a" / "b") == 0o700


def test_private_files_are_0600_whatever_the_umask_or_their_old_mode(tmp_path, umask0):
    new = tmp_path / "new.lock"
    os.close(paths.private_file(new, os.O_RDWR))
    assert mode(new) == 0o600
    old = tmp_path / "agent.pid"
    old.write_text("1\n")
    os.chmod(old, 0o666)
    paths.write_private(old, "2\n")
    assert mode(old) == 0o600 and old.read_text() == "2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.pid", "new.lock"]  # no tmp left


HOSTILE = ["../../etc", "a;rm -rf", "$(id)", "`id`", "a/b", "..", "a b", "talb\n", "-x", "Talb",
           "abcdefghijklm", ""]


@pytest.mark.parametrize("bad", HOSTILE)
def test_prefixes_and_node_names_that_could_escape_are_refused(bad):
    with pytest.raises(ValueError, match=r"^prefix: .*" + re.escape(repr(bad))):
        paths.state_dir(bad)
    with pytest.raises(ValueError, match="^prefix: "):
        paths.pin_dir(bad)
    with pytest.raises(ValueError, match=r"^node: .*" + re.escape(repr(bad))):
        paths.netns_name("talb", bad)
    if bad:  # pin_dir(prefix, "") is the prefix's own directory
        with pytest.raises(ValueError, match="^node: "):
            paths.pin_dir("talb", bad)


def test_paths_of_switches_hosts_and_addresses_are_checked():
    from agent.snapshot import snapshot_path
    from workload.id_slots import slot_dir

    with pytest.raises(ValueError, match="^switch: "):
        snapshot_path("talb", "../../etc/x")
    with pytest.raises(ValueError, match="^host: "):
        slot_dir("talb", "../h0")
    with pytest.raises(ValueError):
        slot_dir(None, None, "../../198.18.0.1")
    assert slot_dir(None, None, "198.18.0.1").name == "addr-198.18.0.1"


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "a b", "$(id)", "x;y", "n\n", "", "x" * 65])
def test_hand_given_namespaces_are_checked(bad):
    with pytest.raises(ValueError, match=r"^--netns: "):
        paths.check_netns(bad, "--netns")


def test_usual_namespace_names_pass():
    for ok in ("talb-leaf0", "sw1", "ns_a.b", "T1"):
        assert paths.check_netns(ok) == ok
