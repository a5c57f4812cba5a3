"""Every command README.md shows runs, as shown, and gives a result the tool
itself does not flag (issue 39 item 5).

The commands are read from README.md's ``sh`` blocks, not copied here: a
command added to the README without a test here fails
``test_the_readme_shows_only_the_commands_run_here``. Each runs in its own
process, as a user types it, with three changes a shared test machine needs:
``sudo`` is dropped (the tests run as root), ``talb`` is this venv's, and every
testbed gets a prefix of the test's own (``--prefix``, ``PREFIX=`` for make)
so that no user's testbed, and no other test, is touched. Where the README's
command is long, its quick variant runs: ``make test`` with one test file.

The training run is the one the README offers a newcomer first: it must
finish without the run's own warnings (background flows past what the
hosts open without saturating the CPUs) and without the CPU guard flagging
it, i.e. a fabric and load two CPUs carry. The guard reads the whole
machine's CPUs, so that test is ``alone`` (tests/conftest.py): it waits for
the machine to be nearly idle first.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from conftest import new_prefix, skip_or_fail

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[1]
#: README's sections with commands, in order, each run by one test below
SECTIONS = ("Two commands", "A short tour", "TaLB in a minute", "A training run and a sweep")


def readme_commands() -> dict[str, list[str]]:
    """README's ``sh`` blocks by section: one command a line, continuation
    lines joined, comments dropped."""
    text = (REPO / "README.md").read_text()
    out: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading = part.splitlines()[0].strip()
        for block in re.findall(r"^```sh\n(.*?)^```", part, re.S | re.M):
            joined = block.replace("\\\n", " ")
            for line in joined.splitlines():
                cmd = line.split(" #")[0].strip()
                if cmd and not cmd.startswith("#"):
                    out.setdefault(heading, []).append(" ".join(cmd.split()))
    return out


def _venv() -> Path:
    if sys.prefix == sys.base_prefix:
        skip_or_fail("not running from a venv: `make setup` makes one, `make test` uses it")
    return Path(sys.prefix)


def _talb_argv(cmd: str, prefix: str | None) -> list[str]:
    """A README `sudo talb ...` line as this test runs it: this venv's talb,
    `--prefix PREFIX` after the command's name (before any `--`)."""
    from talb.cli import main

    words = shlex.split(cmd)
    if words[0] == "sudo":
        words = words[1:]
    assert words[0] == "talb", cmd
    i, group = 1, main
    while isinstance(group, click.Group) and i < len(words) and words[i] in group.commands:
        group = group.commands[words[i]]
        i += 1
    talb = Path(sys.prefix) / "bin" / "talb"
    argv = [str(talb)] if talb.exists() else [sys.executable, "-m", "talb.cli"]
    extra = ["--prefix", prefix] if prefix else []
    return argv + words[1:i] + extra + words[i:]


def run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw)
    print(f"$ {shlex.join(argv)}\n{r.stdout}{r.stderr}")
    return r


def _ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}: {(r.stderr or r.stdout)[-2000:]}"
    return r.stdout + r.stderr


@pytest.fixture
def prefix(request, bcc):
    from testbed import lifecycle

    p = new_prefix()
    request.addfinalizer(lambda: lifecycle.down(p))
    return p


def test_the_readme_shows_only_the_commands_run_here():
    cmds = readme_commands()
    assert list(cmds) == list(SECTIONS), f"README sections with commands: {list(cmds)}"
    assert cmds["Two commands"] == ["sudo make testbed", "sudo make test"]
    for section in SECTIONS[1:]:
        assert all(c.startswith("sudo talb ") for c in cmds[section]), cmds[section]


def test_two_commands_and_the_short_tour(prefix, tmp_path):
    """`make testbed` (set-up, the default fabric, the demo) and `make test`
    (with one test file), then the tour on that fabric, down to nothing left."""
    from netns_topology.teardown import namespaces

    venv = _venv()
    # make setup links talb onto sudo's PATH: here into a directory of the test's
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "VENV": str(venv), "TALB_BIN_DIR": str(bin_dir),
           "TALB_SUDOERS": str(tmp_path / "sudoers")}
    (tmp_path / "sudoers").write_text(f'Defaults\tsecure_path="{bin_dir}:/usr/bin:/bin"\n')
    make = ["make", "-s", "-C", str(REPO), f"VENV={venv}"]

    testbed, test = readme_commands()["Two commands"]
    assert shlex.split(testbed)[1:] == ["make", "testbed"]
    out = _ok(run(make + ["testbed", f"PREFIX={prefix}"], 300, env=env))
    pairs = re.search(r"(\d+)/(\d+) pairs answered", out)
    assert pairs and pairs.group(1) == pairs.group(2), out[-1500:]
    assert (bin_dir / "talb").resolve() == (venv / "bin" / "talb").resolve()

    tour = readme_commands()["A short tour"]
    assert [shlex.split(c)[1:3] for c in tour] == [
        ["talb", "testbed"], ["talb", "shell"], ["talb", "scheme"], ["talb", "testbed"]]
    status = _ok(run(_talb_argv(tour[0], prefix), 60))
    assert "h0" in status and "leaf0" in status and "spine1" in status
    ping = _ok(run(_talb_argv(tour[1], prefix), 60))
    assert "3 received, 0% packet loss" in ping
    schemes = _ok(run(_talb_argv(tour[2], None), 60))
    for name in ("ecmp", "rps", "letflow", "drill", "conga", "talb"):
        assert re.search(rf"^│ {name} ", schemes, re.M), name
    _ok(run(_talb_argv(tour[3], prefix), 120))
    assert namespaces(prefix) == []

    assert shlex.split(test)[1:] == ["make", "test"]
    out = _ok(run(make + ["test", "PYTEST_ARGS=-q -p no:cacheprovider tests/test_wire.py"], 300,
                  env=env))
    assert re.search(r"\d+ passed", out) and "failed" not in out, out[-1500:]


def test_talb_in_a_minute(prefix):
    """A TaLB fabric, tensors from four workers verified and each on one
    uplink, the tensor tables and counters, a scheme switch, down."""
    from netns_topology.teardown import namespaces

    up, send, table, scheme, down = readme_commands()["TaLB in a minute"]
    _ok(run(_talb_argv(up, prefix), 180))
    out = _ok(run(_talb_argv(send, prefix), 300))
    verified = re.search(r"(\d+)/(\d+) tensors verified; (\d+) split", out)
    assert verified, out[-1500:]
    assert verified.group(1) == verified.group(2) != "0" and verified.group(3) == "0"
    out = _ok(run(_talb_argv(table, prefix), 60))
    counts = {k: sum(int(n) for n in re.findall(rf"\b{k} (\d+)", out)) for k in ("hit", "case1", "case2")}
    assert counts["hit"] > 0 and counts["case1"] + counts["case2"] > 0, counts   # TaLB placed them
    assert re.search(r"^leaf0 \(scheme talb", out, re.M), out[-1500:]
    _ok(run(_talb_argv(scheme, prefix), 60))
    # what each switch runs now: `talb scheme` without a name, as docs/usage.md shows
    out = _ok(run(_talb_argv("sudo talb scheme", prefix), 60))
    assert re.findall(r"^(\w+): (\w+)$", out, re.M) == [
        ("spine0", "ecmp"), ("spine1", "ecmp"), ("leaf0", "ecmp"), ("leaf1", "ecmp")], out
    _ok(run(_talb_argv(down, prefix), 120))
    assert namespaces(prefix) == []


@pytest.mark.alone  # the CPU guard judges the whole machine: another job's CPU is in its verdict
def test_a_training_run_two_cpus_carry_and_a_sweep_plan(prefix, tmp_path):
    """The README's first training run finishes unflagged: no warning of its
    own, its CPUs not the bottleneck by its CPU guard, its fabric removed;
    the sweep's dry run lists its plan."""
    from netns_topology.teardown import namespaces

    train, sweep = readme_commands()["A training run and a sweep"]
    results = tmp_path / "run.json"
    out = _ok(run(_talb_argv(train, prefix) + ["--out", str(results)], 900))
    assert "warning" not in out.lower(), out[-2000:]
    assert "not CPU-bound" in out and "CPU-bound run" not in out, out[-2000:]
    assert "past saturation" not in out, out[-2000:]
    res = json.loads(results.read_text())
    assert res["flags"]["cpu_bound"] is False, res["summary"]["cpu_guard"]
    assert namespaces(prefix) == []

    out = _ok(run(_talb_argv(sweep, None), 120))
    assert re.search(r"\b\d+ runs?\b", out), out[-1500:]
