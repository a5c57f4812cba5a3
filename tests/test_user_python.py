"""talb installed into the user's own Python -- a pyenv or conda CPython,
whose sys.path has no Debian dist-packages and so no bcc (common/bcc_bindings.py).

The Python is a real second interpreter when the machine has one (pyenv's
CPythons >= 3.11, as talb requires, the newest first); else the stand-in is
a venv of /usr/bin/python3 made *without* --system-site-packages, whose
sys.path lacks dist-packages exactly like a pyenv Python's. talb goes into a
venv of it with a plain ``pip install <checkout>`` (not editable: what a
user does), and every command runs as the user runs it, in its own process.
The venv (its dependencies) is kept under /tmp between runs, one per
checkout and interpreter, locked while a session uses it; talb itself is
reinstalled from the checkout each session.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common import bcc_bindings, paths
from conftest import new_prefix

REPO = Path(__file__).resolve().parent.parent
CACHE = Path("/tmp/talb-test-user-python")
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _version(python: Path) -> tuple[int, ...] | None:
    try:
        r = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:3])"],
                           capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    return tuple(map(int, r.stdout.split())) if r.returncode == 0 else None


def second_python() -> tuple[Path, bool]:
    """(interpreter, is_a_second_one): the newest pyenv CPython >= 3.11 that
    is not Debian's; else Debian's, for a venv without system site packages."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = []
    for python in root.glob("versions/*/bin/python3"):
        v = _version(python)
        if v and v >= (3, 11) and python.resolve() != SYSTEM_PYTHON.resolve():
            found.append((v, python))
    if found:
        return max(found)[1], True
    return SYSTEM_PYTHON, False


def _copy_checkout(dest: Path) -> Path:
    # pip builds in the source tree; a copy keeps build/ out of the checkout
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
        "results", "runs"))
    return dest


def _pip(python: Path, *args: str) -> None:
    r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def user_venv(root, bcc, tmp_path_factory):
    """A venv of the second Python with talb installed from this checkout;
    its bin directory."""
    python, second = second_python()
    v = _version(python)
    print(f"\nuser Python: {python} {'.'.join(map(str, v))}"
          f"{'' if second else ' (stand-in: a venv without system site packages)'}")
    key = hashlib.sha256(f"{REPO}|{python.resolve()}|{v}".encode()
                         + (REPO / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = CACHE / key
    CACHE.mkdir(parents=True, exist_ok=True)
    lock = open(CACHE / f"{key}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)     # one session per venv at a time
    try:
        src = _copy_checkout(tmp_path_factory.mktemp("user-python") / "talb")
        stamp = venv / ".deps-installed"
        if not stamp.exists():
            shutil.rmtree(venv, ignore_errors=True)
            r = subprocess.run([str(python), "-m", "venv", str(venv)], capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            _pip(venv / "bin" / "python", str(src))
            stamp.touch()
        else:
            _pip(venv / "bin" / "python", "--no-deps", "--force-reinstall", str(src))
        probe = subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sys, importlib.util as u;"
                                "print(any('dist-packages' in p for p in sys.path),"
                                " u.find_spec('bcc') is not None)"],
                               capture_output=True, text=True, timeout=30)
        # the premise: this Python cannot import bcc by itself
        assert probe.stdout.split() == ["False", "False"], probe.stdout + probe.stderr
        yield venv / "bin"
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def _talb(bindir: Path, *args: str, env: dict | None = None, timeout: int = 300):
    """``talb ARGS`` from the user's venv, in a directory outside the checkout."""
    run_env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", bcc_bindings.ENV_DIR)}
    run_env["PATH"] = f"{bindir}:{run_env.get('PATH', '')}"
    run_env.update(env or {})
    return subprocess.run([str(bindir / "talb"), *args], capture_output=True, text=True,
                          cwd="/", env=run_env, timeout=timeout)


def _down(prefix: str) -> None:
    from netns_topology.state import exists
    from testbed import lifecycle

    if exists(prefix):
        lifecycle.down(prefix)


def test_testbed_up_from_the_users_python_uses_debians_bindings(user_venv, tmp_path):
    from netns_topology.state import load_topology_of

    prefix = new_prefix()
    # an empty cache of compiled programs: bcc compiles in this Python
    env = {"TALB_BPF_CACHE": str(tmp_path / "bpf-cache")}
    try:
        up = _talb(user_venv, "testbed", "up", "--prefix", prefix, "--spines", "1",
                   "--hosts-per-leaf", "1", "--no-agent", env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "switch_tc.c: compiled in" in up.stdout, up.stdout
        assert "Traceback" not in up.stderr, up.stderr
        # one note, saying which Python and which bindings and libbcc
        notes = [line for line in up.stderr.splitlines() if line.startswith("note:")]
        assert len(notes) == 1, up.stderr
        theirs = bcc_bindings.bindings_version(bcc_bindings.debian_bindings())
        assert str(user_venv / "python") in notes[0] and f"bcc {theirs} from" in notes[0]
        assert re.search(r"with \S+/libbcc\.so\.0\.\d+\.\d+$", notes[0]), notes[0]
        # the fabric forwards through the switch programs bcc compiled here
        h1 = next(h for h in load_topology_of(prefix).hosts if h.name == "h1")
        ping = _talb(user_venv, "shell", "--prefix", prefix, "h0", "--", "ping", "-c", "2",
                     "-W", "2", h1.ip, timeout=60)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        down = _talb(user_venv, "testbed", "down", "--prefix", prefix, timeout=120)
        assert down.returncode == 0, down.stderr
    finally:
        _down(prefix)


def _short_error(proc, prefix: str) -> str:
    """The CLI's failure as a user must see it: exit 1, no traceback, a
    couple of lines, nothing built."""
    from netns_topology.state import exists

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error:") and len(lines) <= 3, proc.stderr
    assert not exists(prefix) and not list(Path("/run/netns").glob(f"{prefix}-*"))
    return proc.stderr


def test_without_the_bindings_talb_says_which_python_and_what_to_do(user_venv, tmp_path):
    prefix = new_prefix()
    try:
        proc = _talb(user_venv, "testbed", "up", "--prefix", prefix,
                     env={bcc_bindings.ENV_DIR: str(tmp_path)})     # holds no bcc
        err = _short_error(proc, prefix)
    finally:
        _down(prefix)
    python, _ = second_python()
    version = ".".join(map(str, _version(python)))
    assert f"{user_venv / 'python'} (Python {version}) cannot import bcc" in err, err
    assert f"{bcc_bindings.ENV_DIR}={tmp_path} holds no bcc package" in err, err
    assert "sudo apt-get install python3-bpfcc" in err, err
    assert "/usr/bin/python3 -m venv --system-site-packages" in err, err


def test_without_dpkg_talb_says_so(user_venv):
    # a machine that is not Debian: no dpkg on the PATH to ask for python3-bpfcc
    prefix = new_prefix()
    try:
        err = _short_error(_talb(user_venv, "testbed", "up", "--prefix", prefix,
                                 env={"PATH": str(user_venv)}), prefix)
    finally:
        _down(prefix)
    assert "cannot import bcc, and there is no dpkg to find Debian's python3-bpfcc with" in err, err
    assert "sudo apt-get install python3-bpfcc" in err, err


def test_bindings_of_another_version_than_libbcc_are_refused(user_venv, tmp_path):
    theirs = tmp_path / "bcc"
    shutil.copytree(bcc_bindings.debian_bindings(), theirs,
                    ignore=shutil.ignore_patterns("__pycache__"))
    real = bcc_bindings.bindings_version(theirs)
    major, minor, patch = map(int, real.split("."))
    other = f"{major}.{minor + 1}.{patch}"
    (theirs / "version.py").write_text(f"__version__ = '{other}'\n")
    prefix = new_prefix()
    try:
        err = _short_error(_talb(user_venv, "testbed", "up", "--prefix", prefix,
                                 env={bcc_bindings.ENV_DIR: str(tmp_path)}), prefix)
    finally:
        _down(prefix)
    assert f"(bcc {other}) do not match" in err, err
    assert re.search(rf"libbcc\.so\.{real} \({real}\)", err), err


def test_an_unrelated_bcc_package_is_named_as_such(user_venv, tmp_path):
    # PyPI's 'bcc' is a lattice library: importable, but not bcc's bindings
    (tmp_path / "bcc").mkdir()
    (tmp_path / "bcc" / "__init__.py").write_text("'''N-dim invertible BCC lattice'''\n")
    prefix = new_prefix()
    try:
        err = _short_error(_talb(user_venv, "testbed", "up", "--prefix", prefix,
                                 env={"PYTHONPATH": str(tmp_path)}), prefix)
    finally:
        _down(prefix)
    assert f"({tmp_path / 'bcc'}) is not bcc's BPF bindings" in err, err
    assert "pip uninstall bcc" in err, err


# --- in this process: what the checks read ---------------------------------------------
def test_dpkg_names_the_bindings_debians_python_imports(bcc):
    found = bcc_bindings.debian_bindings()
    assert found == Path(bcc.__file__).parent
    assert bcc_bindings.bindings_version(found) == bcc.__version__
    assert bcc_bindings.debian_bindings("python3-no-such-package-talb") is None


def test_the_libbcc_loaded_is_the_one_the_bindings_call(bcc):
    lib = bcc_bindings.loaded_libbcc()
    assert lib.resolve().name == f"libbcc.so.{bcc.__version__}"
    # this Python imports bcc itself: nothing to note, nothing imported from elsewhere
    assert bcc_bindings.check() == ""
    assert bcc_bindings.find().source == "own"
    assert bcc_bindings.import_bcc() is bcc
