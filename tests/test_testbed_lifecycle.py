"""`talb testbed up/down/status` as a user drives them: the CLI, bad input,
repeated commands, and clean-up after a crash."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
import yaml

from common import paths
from netns_topology.teardown import namespaces
from testbed import lifecycle
from conftest import new_prefix
from helpers import free_port

pytestmark = pytest.mark.live

TALB = [sys.executable, "-m", "talb.cli"]
# The agent is tested on its own below; elsewhere it would only compete for a port.
SMALL = ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1", "--no-agent"]


def talb(*args, timeout=120):
    return subprocess.run([*TALB, *args], capture_output=True, text=True, timeout=timeout)


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def assert_nothing_left(prefix):
    assert namespaces(prefix) == []
    assert not paths.pin_dir(prefix).exists()
    assert not paths.state_dir(prefix).exists()


@pytest.fixture
def prefix(request, bcc):
    p = new_prefix()
    request.addfinalizer(lambda: lifecycle.down(p))
    return p


def test_up_status_down_through_the_cli(prefix):
    links_before = root_links()
    up = talb("testbed", "up", "--prefix", prefix, *SMALL)
    assert up.returncode == 0, up.stderr + up.stdout
    assert "h0" in up.stdout and "198.18." in up.stdout

    st = talb("testbed", "status", "--prefix", prefix, "--json")
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert [h["name"] for h in status["hosts"]] == ["h0", "h1"]
    assert {s["name"] for s in status["switches"]} == {"spine0", "leaf0", "leaf1"}
    assert all(s["scheme"] == "ecmp" for s in status["switches"])
    assert status["hosts"][0]["namespace"] == f"{prefix}-h0"

    shell = talb("shell", "h0", "--prefix", prefix, "--", "ping", "-c1", "-W2", status["hosts"][1]["ip"])
    assert shell.returncode == 0, shell.stdout + shell.stderr

    scheme = talb("scheme", "ecmp", "--prefix", prefix)
    assert scheme.returncode == 0 and "leaf0: ecmp" in scheme.stdout, scheme.stderr
    bogus = talb("scheme", "nosuch", "--prefix", prefix)
    assert bogus.returncode == 1 and "nosuch" in bogus.stderr and "Traceback" not in bogus.stderr

    down = talb("testbed", "down", "--prefix", prefix)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(prefix)
    assert root_links() <= links_before, "down left links in the root namespace"

    again = talb("testbed", "down", "--prefix", prefix)
    assert again.returncode == 0 and "nothing to remove" in again.stdout


@pytest.mark.parametrize("args, field", [
    (["--spines", "0"], "spines"),
    (["--link-rate", "10 furlongs"], "link_rate"),
    (["--hosts-per-leaf", "300"], "hosts_per_leaf"),
    (["--queue-limit", "lots"], "limit"),
])
def test_bad_flags_name_the_field_and_build_nothing(prefix, args, field):
    result = talb("testbed", "up", "--prefix", prefix, *args)
    assert result.returncode == 1
    assert field in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert_nothing_left(prefix)


def test_bad_topology_file_is_named(prefix, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("spines: 2\nleavez: 3\n")
    result = talb("testbed", "up", "--prefix", prefix, "--topology", str(bad))
    assert result.returncode == 1 and "leavez" in result.stderr, result.stderr
    missing = talb("testbed", "up", "--prefix", prefix, "--topology", str(tmp_path / "nope.yaml"))
    assert missing.returncode != 0 and "nope.yaml" in missing.stderr
    assert_nothing_left(prefix)


def test_bad_prefix_is_refused(bcc):
    result = talb("testbed", "up", "--prefix", "Bad-Prefix")
    assert result.returncode == 1 and "prefix" in result.stderr


def _made_for(bad: str, before: set[str]) -> list[str]:
    """Namespaces and run-time entries that ``bad`` could have made (other
    testbeds may come and go meanwhile: only names containing it count)."""
    from pyroute2 import netns

    tail = bad.rsplit("/", 1)[-1] or bad
    names = [n for n in netns.listnetns() if tail in n]
    names += [n for n in set(os.listdir(paths.RUN_DIR)) - before if tail in n]
    return names + [str(p) for p in (paths.RUN_DIR / bad / "state.json",
                                     paths.BPFFS_DIR / bad) if p.exists()]


@pytest.mark.parametrize("bad", ["../../etc", "a;rm -rf", "$(id)", "a b", "x" * 13, "talb\n"])
def test_hostile_prefixes_are_refused_before_anything_is_made(bcc, bad):
    before = set(os.listdir(paths.RUN_DIR))
    for args in (["testbed", "up", *SMALL], ["testbed", "down"], ["agent"]):
        result = talb(*args, "--prefix", bad)
        assert result.returncode == 1, (args, result.stdout + result.stderr)
        assert "prefix: must be 1-12 lowercase" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert _made_for(bad, before) == []


@pytest.mark.parametrize("bad", ["a/b", "../../etc", "h0;reboot", "$(id)", "abcdefghijklmnop"])
def test_hostile_node_names_in_a_topology_file_are_refused(prefix, tmp_path, bad):
    topo = tmp_path / "bad.yaml"
    topo.write_text(yaml.safe_dump({"switches": ["s0"], "hosts": ["h0", "h1", bad],
                                    "links": [{"between": [h, "s0"]} for h in ("h0", "h1", bad)]}))
    result = talb("testbed", "up", "--prefix", prefix, "--topology", str(topo), "--no-agent")
    assert result.returncode == 1
    assert "hosts[2].name: must be 1-12 lowercase" in result.stderr and repr(bad) in result.stderr
    assert_nothing_left(prefix)


@pytest.mark.parametrize("args, message", [
    (["--switch", "../../etc"], "--switch: must be"), (["--switch", "leaf0;id"], "--switch: must be"),
    # the agent learns a switch from its fabric only: no namespace or pins of its own
    (["--switch", "leaf0", "--netns", "../../proc/1/ns/net"], "--netns: gone"),
    (["--switch", "leaf0", "--pin-dir", "/tmp"], "--pin-dir: gone"),
])
def test_hostile_agent_switch_and_netns_are_refused(prefix, args, message):
    result = talb("agent", "--prefix", prefix, *args)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "talb attach --fabric FILE --no-agent" in result.stderr or message.startswith("--switch")
    assert_nothing_left(prefix)


def test_status_without_a_testbed_says_so(prefix):
    result = talb("testbed", "status", "--prefix", prefix)
    assert result.returncode == 1 and "no testbed" in result.stderr


def test_up_replace_rebuilds(prefix):
    assert talb("testbed", "up", "--prefix", prefix, *SMALL).returncode == 0
    refused = talb("testbed", "up", "--prefix", prefix, *SMALL)
    assert refused.returncode == 1 and "already up" in refused.stderr
    replaced = talb("testbed", "up", "--prefix", prefix, "--replace", "--spines", "2",
                    "--leaves", "2", "--hosts-per-leaf", "1", "--no-agent")
    assert replaced.returncode == 0, replaced.stderr
    st = lifecycle.status(prefix)
    assert {s["name"] for s in st["switches"]} == {"spine0", "spine1", "leaf0", "leaf1"}


def test_down_after_a_killed_up_removes_everything(prefix):
    """SIGKILL `up` half-way (no chance to clean up): `down` still removes it all."""
    proc = subprocess.Popen([*TALB, "testbed", "up", "--prefix", prefix, "--no-agent",
                             "--spines", "2", "--leaves", "4", "--hosts-per-leaf", "3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(namespaces(prefix)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert namespaces(prefix), "up was killed before it made anything"
    assert paths.state_file(prefix).exists(), "the state file is written before anything is built"
    lifecycle.down(prefix)
    assert_nothing_left(prefix)


def test_failed_up_leaves_nothing(prefix, monkeypatch):
    """A failure while attaching the data path rolls back the whole fabric."""
    import datapath.fabric
    from netns_topology import LeafSpine

    def broken(*_a, **_k):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(datapath.fabric, "attach_fabric", broken)
    with pytest.raises(RuntimeError, match="injected"):
        lifecycle.up(LeafSpine(spines=1, leaves=2, hosts_per_leaf=1), prefix)
    assert_nothing_left(prefix)


def test_kernel_bridge_datapath_forwards_without_programs(prefix):
    """--datapath bridge: the baseline fabric; STP must converge before it forwards."""
    from workload.netexec import ping

    up = talb("testbed", "up", "--prefix", prefix, "--datapath", "bridge", *SMALL)
    assert up.returncode == 0, up.stderr
    st = lifecycle.status(prefix)
    assert st["datapath"] == "bridge" and not paths.pin_dir(prefix).exists()
    h1 = st["hosts"][1]["ip"]
    deadline = time.monotonic() + 30
    while not ping(f"{prefix}-h0", h1, count=1, timeout_s=1):
        assert time.monotonic() < deadline, "the bridge fabric never forwarded"
    scheme = talb("scheme", "--prefix", prefix)
    assert scheme.returncode == 1 and "kernel bridge" in scheme.stderr


def alive(pid: int, wait: float = 5.0) -> bool:
    """Still running after `wait` s? A zombie (killed, waiting for init to reap it) is not."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        time.sleep(0.1)
    return True


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` listens on (/proc: its
    socket inodes matched against its namespace's tcp and tcp6 tables)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                addr, port = fields[1].split(":")
                raw = b"".join(int(addr[i:i + 8], 16).to_bytes(4, "little")
                               for i in range(0, len(addr), 8))
                found.add((socket.inet_ntop(family, raw), int(port, 16)))
    return found


def test_up_starts_the_agent_and_down_stops_it(prefix):
    import urllib.request

    from agent.daemon import running_pid

    port = free_port()
    up = talb("testbed", "up", "--prefix", prefix, "--metrics-port", str(port),
              *[a for a in SMALL if a != "--no-agent"])
    assert up.returncode == 0, up.stderr + up.stdout
    pid = running_pid(prefix)
    assert pid and lifecycle.status(prefix)["agent_pid"] == pid
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert b"talb_port_pcm" in resp.read()
    assert listening(pid) == {("127.0.0.1", port)}, "the agent listens beyond loopback"
    assert talb("testbed", "down", "--prefix", prefix).returncode == 0
    assert not alive(pid), "down left the agent running"
    assert_nothing_left(prefix)


def test_second_testbed_agent_takes_the_next_free_metrics_port(prefix):
    """Two testbeds up at once, neither given --metrics-port: the second's
    agent finds the first's port taken and serves on the next free one,
    says which, and `status`, the monitoring targets and a run's recorded
    agent settings name it. An explicit --metrics-port that is taken stays
    an error naming the flag and the value, and builds nothing."""
    import re
    import urllib.request

    from agent.config import DEFAULT_METRICS_PORT, METRICS_PORT_TRIES
    from agent.daemon import log_file, running_pid
    from talb import monitoring
    from workload.run_record import agent_settings

    second, third = new_prefix(), new_prefix()   # `prefix`'s fixture takes the first down
    agent_args = [a for a in SMALL if a != "--no-agent"]
    served = {}
    try:
        for p in (prefix, second):
            up = talb("testbed", "up", "--prefix", p, *agent_args)
            assert up.returncode == 0, up.stderr + up.stdout
            m = re.search(r"metrics http://127\.0\.0\.1:(\d+)/metrics", up.stdout)
            assert m, up.stdout
            served[p] = port = int(m[1])
            assert DEFAULT_METRICS_PORT <= port < DEFAULT_METRICS_PORT + METRICS_PORT_TRIES
            if port != DEFAULT_METRICS_PORT:  # the default was taken: it says so, and where
                assert f"({DEFAULT_METRICS_PORT} is in use" in up.stdout, up.stdout
                assert (f"metrics port {DEFAULT_METRICS_PORT} on 127.0.0.1 is in use" in
                        log_file(p).read_text())
        assert served[prefix] != served[second]
        for p, port in served.items():
            pid = running_pid(p)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                assert f'pid="{pid}"'.encode() in resp.read()   # its own agent answers
            assert listening(pid) == {("127.0.0.1", port)}
            st = talb("testbed", "status", "--prefix", p, "--json")
            assert json.loads(st.stdout)["agent_metrics"] == f"127.0.0.1:{port}", st.stdout
            st = talb("testbed", "status", "--prefix", p)
            assert f"agent pid {pid} (metrics http://127.0.0.1:{port}/metrics)" in st.stdout
            targets = {e["labels"]["testbed"]: e["targets"] for e in monitoring.agent_targets()}
            assert targets[p] == [f"127.0.0.1:{port}"]
            recorded = agent_settings(p)   # what `talb run` writes into its results
            assert recorded["metrics"] == f"127.0.0.1:{port}"
            assert recorded["config"]["metrics_port"] == port
        taken = served[second]
        bad = talb("testbed", "up", "--prefix", third, "--metrics-port", str(taken), *agent_args)
        assert bad.returncode == 1, bad.stdout
        assert f"--metrics-port: cannot serve on 127.0.0.1:{taken}: Address already in use" \
            in " ".join(bad.stderr.split()), bad.stderr
        assert_nothing_left(third)
    finally:
        for p in (second, third):
            lifecycle.down(p)


def private_modes(root) -> dict[str, str]:
    """Every path under ``root`` (itself too) with group or other permission bits: {path: mode}."""
    found = {}
    for path in (root, *root.rglob("*")):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            found[str(path)] = oct(mode)
    return found


def test_metrics_addr_binds_only_where_told(prefix):
    from agent.daemon import running_pid

    bad = talb("testbed", "up", "--prefix", prefix, "--metrics-addr", "0.0.0.0;id", *SMALL[:-1])
    assert bad.returncode == 1 and "--metrics-addr" in bad.stderr, bad.stderr
    assert_nothing_left(prefix)  # refused before anything was built
    port = free_port()
    up = talb("testbed", "up", "--prefix", prefix, "--metrics-addr", "127.0.0.2",
              "--metrics-port", str(port), *SMALL[:-1])
    assert up.returncode == 0, up.stderr + up.stdout
    assert listening(running_pid(prefix)) == {("127.0.0.2", port)}


def test_state_and_pins_are_root_only_whatever_the_umask(prefix):
    """State, pid, lock, log and snapshot files, id-slot locks and pinned maps:
    directories 0700, files 0600, under umask 0 and in a state directory left
    world-readable by an older version."""
    from agent.daemon import running_pid
    from agent.snapshot import snapshot_path
    from workload.id_slots import SlotIds, slot_dir

    old = paths.state_dir(prefix)
    old.mkdir(parents=True)
    os.chmod(old, 0o755)
    (old / "agent.log").write_text("an older run's log\n")
    os.chmod(old / "agent.log", 0o644)
    up = subprocess.run([*TALB, "testbed", "up", "--prefix", prefix, "--metrics-port", str(free_port()),
                         *[a for a in SMALL if a != "--no-agent"]],
                        capture_output=True, text=True, timeout=120, umask=0)
    assert up.returncode == 0, up.stderr + up.stdout
    assert running_pid(prefix)
    mask = os.umask(0)
    try:
        ids = SlotIds(slot_dir(prefix, "h0"))  # what a tensor sender on h0 claims
        ids.claim()
    finally:
        os.umask(mask)
    try:
        deadline = time.monotonic() + 10
        while not snapshot_path(prefix).exists():
            assert time.monotonic() < deadline, "the agent wrote no snapshot"
            time.sleep(0.1)
        state, pins = paths.state_dir(prefix), paths.pin_dir(prefix)
        made = {p.name for p in state.rglob("*")}
        assert {"state.json", "agent.pid", "agent.lock", "agent.start.lock", "agent.log",
                "agent.json", "ids", "h0"} <= made, made
        assert any(n.startswith("slot-") for n in made), made
        assert {p.name for p in pins.rglob("*")} >= {"leaf0", "h0", "config", "flow_isn"}
        for top in (paths.RUN_DIR, paths.BPFFS_DIR):  # their other entries are not ours to walk
            assert not stat.S_IMODE(top.stat().st_mode) & 0o077, f"{top} is open to others"
        assert private_modes(state) == {}
        assert private_modes(pins) == {}
    finally:
        ids.release()


def test_agent_refuses_the_bridge_datapath(prefix):
    result = talb("testbed", "up", "--prefix", prefix, "--datapath", "bridge", "--agent", *SMALL[:-1])
    assert result.returncode == 1 and "agent" in result.stderr, result.stderr
    assert_nothing_left(prefix)


# --- the test suite's own clean-up (tests/conftest.py) --------------------------------
def user_style_prefix() -> str:
    """A valid user prefix that reads like a dead test run's (t<pid><letters>, the
    pid not running): what the old clean-up, matching names, would have removed."""
    return next(f"t{n}exp" for n in (42, 4242, 42424, 424242, 4242424)
                if not os.path.exists(f"/proc/{n}"))


def test_cleanup_removes_a_dead_runs_recorded_prefix_and_keeps_the_rest(bcc, tmp_path, monkeypatch):
    """Session start takes down a prefix recorded by a process that is gone,
    and nothing else: not a user's testbed whose name looks like a test's,
    not a prefix whose recording process still runs."""
    from netns_topology import LeafSpine, build, teardown
    import conftest

    # A registry of this test's own: another pytest session starting meanwhile
    # (its session start cleans the shared one) must not take our dead prefix first.
    registry = tmp_path / "run" / "test-prefixes"
    monkeypatch.setattr(conftest, "registry_dir", lambda: registry)
    user = user_style_prefix()
    if namespaces(user) or paths.state_dir(user).exists():
        pytest.fail(f"a testbed {user!r} exists on this machine; this test would build over it")
    # a prefix recorded by a test run that then died
    # PYTHONPATH: the checkout's packages, whatever an installed talb holds
    made = subprocess.run([sys.executable, "-c", "import conftest; print(conftest.new_prefix())"],
                          cwd=os.path.dirname(__file__), capture_output=True, text=True, check=True,
                          env={**os.environ, "TALB_RUN_DIR": str(registry.parent),
                               "PYTHONPATH": str(paths.REPO_ROOT)})
    stale = made.stdout.strip()
    owner, start = conftest.recorded_prefixes()[stale]
    assert not conftest.owner_alive(owner, start)
    live = new_prefix()  # recorded by this (running) process
    small = LeafSpine(spines=1, leaves=1, hosts_per_leaf=1)
    try:
        for prefix in (user, stale, live):
            build(small, prefix)
        paths.state_dir(stale).mkdir(parents=True, exist_ok=True)

        removed = conftest.remove_stale_test_prefixes()

        assert stale in removed and user not in removed and live not in removed
        assert namespaces(stale) == [] and not paths.state_dir(stale).exists()
        assert stale not in conftest.recorded_prefixes()
        assert len(namespaces(user)) == 3  # h0, leaf0, spine0
        assert len(namespaces(live)) == 3 and live in conftest.recorded_prefixes()
    finally:
        for prefix in (user, stale, live):
            teardown(prefix)
        (conftest.registry_dir() / stale).unlink(missing_ok=True)
