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

from common import paths
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


# --- the summary's check -----------------------------------------------------------------
from experiments.sweep import pairing as pc  # noqa: E402
from experiments.sweep.results import CELL_FIELDS  # noqa: E402

MB = 1_000_000


def _row(scheme, seed, *, load=0.8, offset_ms=1.0, plan="p", delivered=20 * MB, status="ok",
         agent="default", recorded=True, covered=True, done=100):
    cell = {f: None for f in CELL_FIELDS} | {"topology": "topologies/fig10.yaml", "load": load,
                                              "model": "threelayer"}
    if not recorded:
        return {**cell, "scheme": scheme, "agent": agent, "seed": seed, "status": status,
                **{f: None for f in pc.FIELDS}, "pairing_recorded": False}
    return {**cell, "scheme": scheme, "agent": agent, "seed": seed, "status": status,
            "pairing_recorded": True, "start_offset_s": offset_ms / 1e3,
            "bg_plan": plan and plan + "0" * 15, "bg_planned_flows": 100 if plan else None,
            "bg_planned_bytes": 20 * MB if plan else None, "bg_started": 100 if plan else None,
            "bg_done": done if plan else None, "bg_censored": 100 - done if plan else None,
            "bg_delivered_bytes": delivered if plan else None, "bg_covered": covered if plan else None,
            "bg_start_lag_max_s": 0.004 if plan else None}


def test_pairing_check_on_constructed_rows():
    rows = [
        # seed 1: paired (offsets 0.8 ms apart, every byte delivered)
        _row("ecmp", 1, offset_ms=1.0), _row("talb", 1, offset_ms=1.8), _row("rps", 1),
        # seed 2: TaLB started training 12 ms later into the plan
        _row("ecmp", 2), _row("talb", 2, offset_ms=13.0),
        # seed 3: one run delivered 5% less background (flows censored)
        _row("ecmp", 3), _row("talb", 3, delivered=19 * MB, done=97),
        # seed 4: different plans
        _row("ecmp", 4, plan="a"), _row("talb", 4, plan="b"),
        # seed 5: CPU-bound TaLB run: not counted, so nothing to pair with ECMP
        _row("ecmp", 5), _row("talb", 5, offset_ms=40.0, status="cpu_bound"),
        # seed 6: within the tolerances (0.5% fewer bytes, 4 ms); TaLB outlasted the plan
        _row("ecmp", 6), _row("talb", 6, delivered=int(19.9 * MB), offset_ms=5.0, covered=False),
    ]
    groups = pc.check(rows, CELL_FIELDS)
    by = {g["seed"]: g for g in groups}
    assert sorted(by) == [1, 2, 3, 4, 6]
    assert by[1]["status"] == "held" and by[1]["runs"] == ["ecmp", "rps", "talb"]
    assert by[1]["offset_spread_s"] == pytest.approx(0.0008)
    assert by[2]["status"] == "not held" and "offsets 12.0 ms apart" in by[2]["problems"][0]
    assert by[3]["status"] == "not held" and by[3]["delivered_spread"] == pytest.approx(0.05)
    assert by[4]["problems"] == ["background plans differ"]
    assert by[6]["status"] == "held" and by[6]["uncovered"] == ["talb"]
    line = pc.verdict_line(groups)
    assert line.startswith("**Pairing did not hold** at 3 of 5 seeds checked")
    assert "seed 2: training-start offsets 12.0 ms apart (ecmp 1.0, talb 13.0 ms)" in line
    assert "seed 3: background bytes delivered 5.0% apart (talb 19.00, ecmp 20.00 MB)" in line
    assert "seed 4: background plans differ" in line and "seed 6" not in line.split(".")[0]
    assert "In 1 run(s) training outlasted the background plan" in line
    md = "\n".join(pc.markdown(groups))
    assert "## Pairing" in md and "| load 0.8, seed 1 | 3 | 100 flows, 20.00 MB | 100 | 100 | 20.00 | 1.0–1.8 | 4 | held |" in md
    assert "| load 0.8, seed 3 | 2 | 100 flows, 20.00 MB | 100 | ecmp 100, talb 97 | ecmp 20.00, talb 19.00 |" in md


def test_pairing_held_everywhere_and_agents_pair_too():
    rows = [_row(s, seed, load=load, agent=a) for load in (0.2, 0.8) for seed in (1, 2)
            for s, a in (("ecmp", "default"), ("talb", "default"), ("talb", "w1-0"))]
    groups = pc.check(rows, CELL_FIELDS)
    assert len(groups) == 4 and all(g["status"] == "held" for g in groups)
    assert groups[0]["runs"] == ["ecmp", "talb", "talb/w1-0"]
    assert pc.verdict_line(groups) == (
        "**Pairing held** at every seed of every point (4 checked: identical background plans, "
        "background bytes delivered within 1%, training-start offsets within 5 ms).")
    assert "| load 0.2, seed 1 | 3 |" in "\n".join(pc.markdown(groups))
    # queueing arms of one seed share its plan too (the factorial decomposition pairs them)
    fifo = [{**_row("ecmp", 1), "queueing": "fifo"}, {**_row("ecmp", 1), "queueing": "bands"},
            {**_row("talb", 1, offset_ms=9.0), "queueing": "fifo"}]
    (g,) = pc.check(fifo, CELL_FIELDS)
    assert g["runs"] == ["ecmp", "ecmp/fifo", "talb/fifo"] and g["status"] == "not held"


def test_pairing_without_background_checks_the_offsets():
    rows = [_row("ecmp", 1, load=0.0, plan=None), _row("talb", 1, load=0.0, plan=None, offset_ms=9)]
    (g,) = pc.check(rows, CELL_FIELDS)
    assert g["background"] is False and g["status"] == "not held"
    assert "| load 0, seed 1 | 2 | none | - | - | - | 1.0–9.0 | - | **not held**" in \
        "\n".join(pc.markdown([g]))


def test_pairing_not_recorded_in_old_runs():
    old = [_row("ecmp", 1, recorded=False), _row("talb", 1, recorded=False)]
    groups = pc.check(old, CELL_FIELDS)
    assert groups[0]["status"] == "not recorded"
    assert pc.verdict_line(groups).startswith("**Pairing not recorded.**")
    assert pc.markdown(groups)[2].startswith("**Pairing not recorded.**")
    assert len(pc.markdown(groups)) == 4                        # no table of nothing
    mixed = pc.check(old + [_row("ecmp", 2), _row("talb", 2)], CELL_FIELDS)
    line = pc.verdict_line(mixed)
    assert line.startswith("**Pairing held** at every seed where it was recorded (1: ")
    assert "Not recorded at 1 (runs from before pairing was recorded: load 0.8, seed 1)" in line
    assert pc.verdict_line([]).startswith("**Pairing**: no seed")


def test_pairing_fields_of_a_results_file():
    assert pc.fields({"headline": {}}) == {f: None for f in pc.FIELDS} | {"pairing_recorded": False}
    res = {"pairing": {"start_offset_s": 0.0012, "background": {
        "plan_sha256": "ab" * 32, "planned_flows": 5, "planned_bytes": 1000, "started": 5,
        "done": 4, "censored": 1, "delivered_bytes": 900, "covered": True,
        "start_lag_max_s": 0.002}}}
    f = pc.fields(res)
    assert f["pairing_recorded"] and f["start_offset_s"] == 0.0012 and f["bg_plan"] == "ab" * 8
    assert (f["bg_done"], f["bg_censored"], f["bg_delivered_bytes"], f["bg_covered"],
            f["bg_start_lag_max_s"]) == (4, 1, 900, True, 0.002)
    assert pc.fields({"pairing": {"start_offset_s": 0.001, "background": None}})["bg_plan"] is None


def test_sweep_summary_shows_the_pairing(tmp_path):
    """Results files with a pairing record: runs.csv has the columns and
    summary.md the verdict and the table."""
    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.runner import run_plan
    from test_sweep import _fake_results

    def fake(spec, path):
        res = _fake_results(spec)
        res["pairing"] = {"start_offset_s": 0.001 + 0.0001 * len(spec.scheme), "background": {
            "plan_sha256": f"{spec.seed:064x}", "planned_flows": 50 * spec.seed,
            "planned_bytes": 10 * MB, "started": 50 * spec.seed, "done": 50 * spec.seed,
            "censored": 0, "delivered_bytes": 10 * MB, "covered": True}}
        path.write_text(json.dumps(res))

    p = build_plan(None, schemes=["ecmp", "talb"],
                   loads=[0.8], seeds=2)
    run_plan(p, tmp_path, run_fn=fake, progress=False)
    res = finish(p, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert md.count("**Pairing held** at every seed of every point (2 checked") == 3
    assert "## Pairing" in md and "| load 0.8, seed 2 | 2 | 100 flows, 10.00 MB | 100 | 100 |" in md
    assert all(r["pairing_recorded"] and r["bg_plan"] for r in res["rows"])
    assert "start_offset_s" in (tmp_path / "runs.csv").read_text().splitlines()[0]
