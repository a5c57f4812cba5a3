"""Shared test plumbing.

* Every test that builds namespaces uses a prefix of its own,
  ``t<pid><letters>``, so tests never touch a user's testbed (prefix
  ``talb``) or each other.
* At session start, namespaces left by a crashed run (a ``t<pid>...``
  prefix whose pid is dead) are removed, so a crash never breaks the next run.
* Under CI=true a test that would be skipped for lack of root or a kernel
  feature fails instead: a CI run that skips the namespace tests is a failed run.
"""
from __future__ import annotations

import itertools
import os
import re
import string

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_letters = itertools.count()
_STALE_RE = re.compile(r"^t(\d+)([a-z]+)-")


def skip_or_fail(reason: str) -> None:
    """Skip locally; fail under CI, where a skipped namespace test is a failed run."""
    if IN_CI:
        pytest.fail(f"required for CI but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def new_prefix() -> str:
    n = next(_letters)
    suffix = ""
    while True:
        suffix = string.ascii_lowercase[n % 26] + suffix
        n //= 26
        if n == 0:
            break
    return f"t{os.getpid()}{suffix}"[:12]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_test_namespaces() -> None:
    if os.geteuid() != 0 or not os.path.isdir("/run/netns"):
        return
    stale = set()
    for name in os.listdir("/run/netns"):
        m = _STALE_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            stale.add(f"t{m.group(1)}{m.group(2)}")
    if not stale:
        return
    from talb import testbed

    for prefix in sorted(stale):
        testbed.down(prefix)


def pytest_sessionstart(session):
    try:
        _remove_stale_test_namespaces()
    except Exception as exc:  # never block a run on clean-up of an older one
        print(f"warning: could not remove stale test namespaces: {exc}")


@pytest.fixture(scope="session")
def root():
    if os.geteuid() != 0:
        skip_or_fail("needs root (network namespaces, BPF)")


@pytest.fixture(scope="session")
def bcc(root):
    try:
        import bcc as _bcc  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"bcc not importable ({exc}); run `make setup`")
    return _bcc
