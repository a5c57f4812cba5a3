"""Shared test plumbing.

* Every test that builds namespaces uses a prefix of its own,
  ``t<pid><letters>``, so tests never touch a user's testbed (prefix
  ``talb``) or each other.
* Tests only ever remove what they made. :func:`new_prefix` records each
  prefix with its owner (the pytest process: pid and start time) under
  ``/run/talb/test-prefixes`` before anything is built. At session start the
  recorded prefixes whose owner is gone (a crashed run) are taken down and
  their records dropped; nothing is ever removed for what its name looks
  like (``t42exp`` is a valid user prefix). At session end a prefix that
  left nothing behind drops its record.
* A live testbed for a test module: tests/helpers.py :func:`up_fabric`
  (a new prefix, and a finalizer that takes the testbed down).
* Under CI=true a test that would be skipped for lack of root or a kernel
  feature fails instead: a CI run that skips the namespace tests is a failed run.
* A test marked ``alone`` needs the machine (nearly) to itself: before it
  runs, the ``alone`` fixture waits, bounded, until the CPUs are mostly
  idle (:data:`ALONE_BUSY_MAX`). Never idle: it fails under CI, skips
  locally. Most live tests need no such thing: they judge averages over
  many windows with margins that hold on a busy 2-CPU machine.
"""
from __future__ import annotations

import itertools
import os
import string
import time
from pathlib import Path

import pytest

from common import paths

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
_letters = itertools.count()


def pytest_addoption(parser):
    parser.addoption("--fuzz-frames", type=int, default=None, metavar="N",
                     help="frames per program for tests/test_fuzz.py "
                          "(default: $TALB_FUZZ_FRAMES or 100000)")


def skip_or_fail(reason: str) -> None:
    """Skip locally; fail under CI, where a skipped namespace test is a failed run."""
    if IN_CI:
        pytest.fail(f"required for CI but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


# --- tests that need the machine alone --------------------------------------------------
#: An ``alone`` test starts once the whole machine's CPU time over one sample
#: of /proc/stat was at most this share busy (every CPU counted: 0.25 of a
#: 2-CPU machine is half of one CPU). An idle fabric and its agent (5 ms
#: windows: ~7% of one core) stay well under it; one other busy process
#: (50%) or a parallel test run does not. TALB_ALONE_BUSY_MAX overrides it.
ALONE_BUSY_MAX = float(os.environ.get("TALB_ALONE_BUSY_MAX", "0.25"))
#: How long an ``alone`` test waits for the machine before it gives up, s
#: (TALB_ALONE_WAIT_S overrides it).
ALONE_WAIT_S = float(os.environ.get("TALB_ALONE_WAIT_S", "120"))
#: One sample of /proc/stat spans this long, s.
ALONE_SAMPLE_S = 1.0


def cpu_jiffies(stat_text: str | None = None) -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's
    ``cpu`` line: idle and iowait are not busy; guest time is already in
    user and nice, so it is not added again."""
    if stat_text is None:
        with open("/proc/stat") as f:
            stat_text = f.readline()
    fields = stat_text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat's cpu line: {stat_text[:80]!r}")
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(ticks)
    return total - ticks[3] - ticks[4], total


def cpu_busy_share(sample_s: float = ALONE_SAMPLE_S) -> float:
    """The share of all CPUs' time spent busy over the next ``sample_s``."""
    b0, t0 = cpu_jiffies()
    time.sleep(sample_s)
    b1, t1 = cpu_jiffies()
    return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


def wait_until_alone(limit_s: float = ALONE_WAIT_S, busy_max: float = ALONE_BUSY_MAX,
                     sample=cpu_busy_share, clock=time.monotonic, say=print
                     ) -> tuple[bool, float, list[float]]:
    """Sample the CPUs until one sample is at most ``busy_max`` busy or
    ``limit_s`` passed: (idle seen, seconds waited, the samples)."""
    start = clock()
    seen: list[float] = []
    told = False
    while True:
        seen.append(sample())
        waited = clock() - start
        if seen[-1] <= busy_max:
            return True, waited, seen
        if waited >= limit_s:
            return False, waited, seen
        if not told:
            say(f"\n[alone] the CPUs are {seen[-1]:.0%} busy (this test runs at "
                f"<= {busy_max:.0%}): waiting up to {limit_s:.0f} s for the machine")
            told = True


@pytest.fixture
def alone(request):
    """Wait (bounded) for a mostly idle machine; added to every test marked
    ``alone`` after its other fixtures, so the sample sees what the test
    itself started (a fabric, an agent) and nothing of its own work yet."""
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def say(msg: str) -> None:  # shown at once, not in the test's captured output
        with capture.global_and_fixture_disabled():
            print(msg, flush=True)

    ok, waited, seen = wait_until_alone(say=say)
    if not ok:
        skip_or_fail(f"needs the machine alone: the CPUs stayed busy for {waited:.0f} s "
                     f"(samples {', '.join(f'{s:.0%}' for s in seen[-5:])}; this test "
                     f"runs at <= {ALONE_BUSY_MAX:.0%}, see ALONE_BUSY_MAX in tests/conftest.py)")
    if waited >= ALONE_SAMPLE_S * 1.5:
        say(f"\n[alone] waited {waited:.0f} s for the machine (last sample {seen[-1]:.0%} busy)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("alone") and "alone" not in item.fixturenames:
            item.fixturenames.append("alone")


# --- the registry of prefixes tests made -----------------------------------------------
def registry_dir() -> Path:
    # '-' is never in a prefix, so this cannot be a testbed's state directory.
    return paths.RUN_DIR / "test-prefixes"


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with the pid, an
    identity a recycled pid does not repeat. None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def record_prefix(prefix: str, pid: int | None = None) -> Path:
    """Record ``prefix`` as made by process ``pid`` (this one by default)."""
    pid = os.getpid() if pid is None else pid
    registry_dir().mkdir(parents=True, exist_ok=True)
    rec = registry_dir() / paths.check_prefix(prefix)
    tmp = rec.with_name(f".{prefix}.{os.getpid()}")
    tmp.write_text(f"{pid} {_start_time(pid)}\n")
    tmp.replace(rec)
    return rec


def recorded_prefixes() -> dict[str, tuple[int, str]]:
    """{prefix: (owner pid, owner start time)} of every record."""
    out = {}
    d = registry_dir()
    for rec in d.iterdir() if d.is_dir() else ():
        if rec.name.startswith("."):
            continue
        try:
            pid, start = rec.read_text().split()
            out[rec.name] = (int(pid), start)
        except (OSError, ValueError):  # half-written by a killed run: its owner is gone
            out[rec.name] = (-1, "")
    return out


def owner_alive(pid: int, start: str) -> bool:
    return pid > 0 and _start_time(pid) == start


def new_prefix() -> str:
    n = next(_letters)
    suffix = ""
    while True:
        suffix = string.ascii_lowercase[n % 26] + suffix
        n //= 26
        if n == 0:
            break
    prefix = f"t{os.getpid()}{suffix}"[:12]
    if os.geteuid() == 0:  # without root nothing can be built, so nothing to record
        record_prefix(prefix)
    return prefix


def _left_nothing(prefix: str) -> bool:
    from netns_topology.teardown import namespaces

    return (not namespaces(prefix) and not paths.pin_dir(prefix).exists()
            and not paths.state_dir(prefix).exists())


def remove_stale_test_prefixes() -> list[str]:
    """Take down every recorded prefix whose owner is gone, then drop its
    record: the prefixes removed. A prefix nobody recorded is never touched."""
    if os.geteuid() != 0:
        return []
    from testbed import lifecycle

    removed = []
    for prefix, (pid, start) in sorted(recorded_prefixes().items()):
        if owner_alive(pid, start):
            continue
        try:
            paths.check_prefix(prefix)
        except ValueError:  # not a record new_prefix wrote: leave it to a human
            continue
        lifecycle.down(prefix)
        (registry_dir() / prefix).unlink(missing_ok=True)
        removed.append(prefix)
    return removed


def pytest_sessionstart(session):
    try:
        removed = remove_stale_test_prefixes()
        if removed:
            print(f"removed what crashed test runs left: {', '.join(removed)}")
    except Exception as exc:  # never block a run on clean-up of an older one
        print(f"warning: could not remove stale test prefixes: {exc}")


def pytest_sessionfinish(session):
    """Drop this run's records of prefixes that left nothing behind; a
    leftover keeps its record, so the next run removes it."""
    if os.geteuid() != 0:
        return
    me = os.getpid()
    for prefix, (pid, _start) in recorded_prefixes().items():
        try:
            if pid == me and _left_nothing(prefix):
                (registry_dir() / prefix).unlink(missing_ok=True)
        except Exception as exc:
            print(f"warning: could not check test prefix {prefix}: {exc}")


@pytest.fixture(scope="session")
def root():
    if os.geteuid() != 0:
        skip_or_fail("needs root (network namespaces, BPF)")


@pytest.fixture(scope="session")
def bcc(root):
    from common.bcc_bindings import BccUnavailable, import_bcc

    try:
        return import_bcc()     # this Python's own bcc, or Debian's bindings (checked)
    except BccUnavailable as exc:
        skip_or_fail(f"bcc not usable ({exc}); run `make setup`")
