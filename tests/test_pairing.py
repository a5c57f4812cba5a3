"""Pairing of runs at one seed (issue 17, item 2): the start barrier of the
nodes and of the background sources, and the plan's digest. No namespaces:
real processes on this host, real TCP over loopback."""
from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import time

import pytest

from talb import paths
from workload.background import BgHost, FlowSizeCDF, plan_digest, plan_flows
from workload.patterns.common import wait_for_go

HOSTS = [BgHost(f"h{i}", f"ns-h{i}", f"198.18.{i // 2}.{i % 2 + 1}", f"leaf{i // 2}")
         for i in range(4)]


def _events(text: str) -> list[dict]:
    return [json.loads(x) for x in text.splitlines() if x.startswith("{")]


def test_wait_for_go_sleeps_until_the_start_instant(capsys):
    t0 = time.monotonic_ns() + 100_000_000
    assert wait_for_go(7, io.StringIO(f"go {t0}\n")) == t0
    woke = time.monotonic_ns()
    assert t0 <= woke < t0 + 50_000_000
    set_, go = _events(capsys.readouterr().out)
    assert set_["ev"] == "set" and set_["node"] == 7 and set_["t_ns"] < t0
    assert go["ev"] == "go" and go["t0_ns"] == t0 and t0 <= go["t_ns"] <= woke
    assert go["t_recv_ns"] < t0


def test_wait_for_go_past_instant_goes_at_once(capsys):
    t0 = time.monotonic_ns() - 1_000_000_000
    t = time.monotonic()
    assert wait_for_go(0, io.StringIO(f"go {t0}\n")) == t0
    assert time.monotonic() - t < 0.05


@pytest.mark.parametrize("line, what", [("", "EOF"), ("stop\n", "'stop"), ("go soon\n", "soon")])
def test_wait_for_go_refuses_anything_but_go(line, what, capsys):
    with pytest.raises(RuntimeError, match="expected 'go T_NS'") as exc:
        wait_for_go(1, io.StringIO(line))
    assert what in str(exc.value)


def _cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])        # utime + stime


def test_node_barrier_blocks_without_burning_cpu_and_wakes_on_time():
    """A process at the barrier waits in a blocking read (no CPU), then
    wakes at the instant it is given, within a few ms."""
    code = ("from workload.patterns.common import wait_for_go\n"
            "import sys\nwait_for_go(int(sys.argv[1]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "3"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=str(paths.REPO_ROOT))
    try:
        first = json.loads(proc.stdout.readline())
        assert first["ev"] == "set" and first["node"] == 3
        before = _cpu_ticks(proc.pid)
        time.sleep(0.5)
        assert _cpu_ticks(proc.pid) - before <= 1, "the barrier burns CPU while it waits"
        t0 = time.monotonic_ns() + 200_000_000
        proc.stdin.write(f"go {t0}\n")
        proc.stdin.close()
        go = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert go["ev"] == "go" and go["t0_ns"] == t0
    assert 0 <= go["t_ns"] - t0 < 5_000_000, f"woke {(go['t_ns'] - t0) / 1e6:.2f} ms after t0"


def test_background_source_starts_flows_at_t0_plus_their_offsets(tmp_path):
    """The background source waits for "go T0", then opens each flow at T0 +
    its planned offset (a sink on loopback reads them)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = [sys.executable, "-m", "workload.background"]
    sink = subprocess.Popen([*app, "sink", "--port", str(port)], stdout=subprocess.PIPE, text=True,
                            cwd=str(paths.REPO_ROOT))
    source = None
    try:
        assert "ready" in json.loads(sink.stdout.readline())
        offsets = [50_000_000, 120_000_000]
        schedule = [{"flow": i, "dst_ip": "127.0.0.1", "port": port, "size": 10_000 * (i + 1),
                     "offset_ns": off} for i, off in enumerate(offsets)]
        path = tmp_path / "schedule.json"
        path.write_text(json.dumps(schedule))
        source = subprocess.Popen([*app, "source", "--schedule", str(path)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=str(paths.REPO_ROOT))
        assert json.loads(source.stdout.readline()) == {"ready": 2}
        time.sleep(0.3)                       # ready, yet nothing starts before "go"
        t0 = time.monotonic_ns() + 100_000_000
        source.stdin.write(f"go {t0}\n")
        source.stdin.close()
        out = source.stdout.read()           # to its exit: both flows done
        assert source.wait(timeout=20) == 0
    finally:
        for p in (source, sink):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    starts = {e["flow"]: e["t_start_ns"] for e in _events(out) if e.get("event") == "start"}
    done = {e["flow"] for e in _events(out) if e.get("event") == "done"}
    assert done == {0, 1}
    for i, off in enumerate(offsets):
        assert 0 <= starts[i] - (t0 + off) < 20_000_000, (i, (starts[i] - t0 - off) / 1e6)


def test_source_without_go_exits_with_an_error(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text("[]")
    r = subprocess.run([sys.executable, "-m", "workload.background", "source", "--schedule",
                        str(path)], input="", capture_output=True, text=True, timeout=30,
                       cwd=str(paths.REPO_ROOT))
    assert r.returncode == 2 and "expected 'go T0_NS'" in r.stderr


def test_plan_digest_names_the_plan():
    cdf = FlowSizeCDF.named("websearch")
    kw = dict(load=0.5, capacity_bps=100e6, cdf=cdf, duration_s=5.0)
    a, b = plan_flows(HOSTS, seed=3, **kw), plan_flows(HOSTS, seed=3, **kw)
    assert plan_digest(a) == plan_digest(b) and len(plan_digest(a)) == 64
    assert plan_digest(plan_flows(HOSTS, seed=4, **kw)) != plan_digest(a)
    longer = plan_flows(HOSTS, seed=3, **{**kw, "duration_s": 6.0})
    assert longer[:len(a)] == a and plan_digest(longer) != plan_digest(a)
