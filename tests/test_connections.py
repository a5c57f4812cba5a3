"""Connection models without a fabric (workload/patterns/connections.py):
--connections values, the dispatch of tensors onto a pair's connections
over real loopback TCP (a pool puts a tensor on an idle connection only,
and makes it wait while none is), the bench plan's arms, keys and errors.
The models on a live fabric: tests/test_connections_live.py."""
from __future__ import annotations

import array
import fcntl
import socket
import termios
import threading
import time

import pytest
from click.testing import CliRunner

from experiments.sweep.kinds import build_plan
from experiments.sweep.plan import PlanError, RunSpec, arm, arm_split
from talb.cli import main
from workload.patterns import connections
from workload.patterns.connections import Lanes


# --- values ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value,want", [("pair", ("pair", None)), ("class", ("class", None)),
                                        ("pool:1", ("pool", 1)), ("pool:64", ("pool", 64)),
                                        ("pool:08", ("pool", 8))])
def test_good_values_parse(value, want):
    assert connections.parse(value) == want


@pytest.mark.parametrize("value", ["pool:0", "pool:x", "foo", "pool:65", "pool", "pool:", "POOL:4",
                                   "pool:-1", "", None])
def test_bad_values_name_the_option_and_value(value):
    with pytest.raises(ValueError) as e:
        connections.parse(value)
    assert str(e.value).startswith("--connections: ") and repr(value) in str(e.value)


def test_canonical_names_one_model_one_way():
    assert connections.canonical("pool:08") == "pool:8" == connections.canonical("pool:8")


@pytest.mark.parametrize("value", ["pool:0", "pool:x", "foo"])
def test_talb_run_refuses_a_bad_model_before_building(value):
    r = CliRunner().invoke(main, ["run", "--model", "alexnet", "--arch", "ps", "--workers", "2",
                                  "--prefix", "t0clirun", "--connections", value])
    assert r.exit_code != 0
    assert "--connections" in r.output and repr(value) in r.output, r.output


def test_talb_run_model_none_refuses_connections():
    r = CliRunner().invoke(main, ["run", "--model", "none", "--prefix", "t0clirun", "--load", "0.5",
                                  "--connections", "pool:4"])
    assert r.exit_code != 0 and "--connections" in r.output and "'pool:4'" in r.output, r.output


def test_help_explains_the_models():
    out = CliRunner().invoke(main, ["run", "--help"]).output
    assert "--connections" in out and "pool:N" in out and "V-A" in out
    out = CliRunner().invoke(main, ["bench", "--help"]).output
    assert "--connections" in out and "pair,pool:8" in out


# --- dispatch over real TCP ------------------------------------------------------------------
class LoopSender:
    """What Lanes needs of a TensorSender, on a plain loopback socket:
    write a tensor, and its SIOCOUTQ (bytes not yet acknowledged)."""

    def __init__(self, sock):
        self.sock = sock
        self.sent: list[str] = []

    def unacked_bytes(self) -> int:
        buf = array.array("i", [0])
        fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, buf)
        return buf[0]

    def send(self, name: str, nbytes: int) -> None:
        self.sock.sendall(b"x" * nbytes)
        self.sent.append(name)


@pytest.fixture
def pairs(request):
    """n connected loopback TCP pairs with small buffers: (sending socket, receiving socket)."""
    made = []

    def make(n):
        srv = socket.create_server(("127.0.0.1", 0))
        for _ in range(n):
            a = socket.socket()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
            a.connect(srv.getsockname())
            b, _ = srv.accept()
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
            made.append((a, b))
        srv.close()
        return made[-n:]
    yield make
    for a, b in made:
        a.close()
        b.close()


def _drain(sock, nbytes):
    got = 0
    while got < nbytes:
        got += len(sock.recv(min(65536, nbytes - got)))


def _draining(sock, nbytes) -> threading.Thread:
    """A thread reading ``nbytes`` from ``sock`` (join it before the test ends)."""
    t = threading.Thread(target=_drain, args=(sock, nbytes), daemon=True)
    t.start()
    return t


def _job(name, nbytes, log):
    def job(conn):
        log.append((name, conn.index, time.monotonic()))
        conn.sender.send(name, nbytes)
    return job


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


BIG = 2_000_000        # far over the buffers: its ACKs stop until the receiver reads


def test_pool_puts_a_tensor_on_an_idle_connection_and_waits_while_none_is(pairs):
    """pool:2. A large tensor whose receiver does not read stays
    unacknowledged: its connection is busy. The next tensor takes the other
    connection; with both busy a tensor waits, and goes on the first
    connection to become idle once its receiver reads."""
    (a0, b0), (a1, b1) = pairs(2)
    lanes = Lanes("pool", [a0, a1], [LoopSender(a0), LoopSender(a1)])
    log = []
    lanes.send(0, _job("big0", BIG, log))
    _until(lambda: len(log) == 1)
    lanes.send(1, _job("small", 1000, log))
    _until(lambda: len(log) == 2)
    _drain(b1, 1000)                   # read and acknowledged: connection 1 idle again
    lanes.send(2, _job("big1", BIG, log))
    _until(lambda: len(log) == 3)
    lanes.send(3, _job("waits", 1000, log))
    time.sleep(0.3)
    assert len(log) == 3, log          # both busy: it waits
    t_release = time.monotonic()
    r0 = _draining(b0, BIG + 1000)
    _until(lambda: len(log) == 4)
    r1 = _draining(b1, BIG)
    lanes.close()
    r0.join(5)
    r1.join(5)
    on = {name: (conn, t) for name, conn, t in log}
    assert on["big0"][0] == 0 and on["small"][0] == 1 and on["big1"][0] == 1
    assert on["waits"][0] == 0 and on["waits"][1] >= t_release


def test_pool_keeps_admission_order_for_waiting_tensors(pairs):
    """Tensors waiting for an idle connection leave in key (admission) order."""
    [(a, b)] = pairs(1)
    lanes = Lanes("pool", [a], [LoopSender(a)])
    log = []
    lanes.send(0, _job("stall", 300_000, log))
    time.sleep(0.1)
    for k in (5, 3, 4):
        lanes.send(k, _job(f"t{k}", 1000, log))
    time.sleep(0.1)
    reader = _draining(b, 300_000 + 3000)
    lanes.close()
    reader.join(5)
    assert [x[0] for x in log] == ["stall", "t3", "t4", "t5"]


def test_class_gives_each_class_its_connection_and_writer(pairs):
    """A long tensor stalled on class 2's connection does not hold class 0's."""
    (a0, b0), (a1, b1) = pairs(2)
    lanes = Lanes("class", [a0, a1], [LoopSender(a0), LoopSender(a1)], classes=[0, 2])
    log = []
    lanes.send(0, _job("long", 2_000_000, log), cls=2)
    time.sleep(0.1)
    lanes.send(1, _job("short", 1000, log), cls=0)
    _drain(b0, 1000)                   # arrives while "long" is still being written
    assert [x[0] for x in log] == ["long", "short"] and log[0][1] == 1 and log[1][1] == 0
    reader = _draining(b1, 2_000_000)
    lanes.close()
    reader.join(5)


def test_pair_inline_writes_in_the_callers_thread(pairs):
    [(a, b)] = pairs(1)
    lanes = Lanes("pair", [a], [LoopSender(a)], inline=True)
    who = []
    lanes.send(0, lambda c: who.append((threading.get_ident(), c.index)))
    assert who == [(threading.get_ident(), 0)] and lanes.threads == []
    with pytest.raises(ValueError):
        Lanes("pool", [a], [LoopSender(a)], inline=True)


def test_replies_go_on_the_connection_named_first(pairs):
    """send_on: an ack on its request's connection, before that connection's queued tensors."""
    [(a, b)] = pairs(1)
    lanes = Lanes("pair", [a], [LoopSender(a)])
    log = []
    lanes.send((0,), _job("stall", 300_000, log))
    time.sleep(0.1)
    lanes.send((1, 0), _job("pull", 1000, log))
    lanes.send_on(0, (0, 0), _job("ack", 10, log))
    reader = _draining(b, 301_010)
    lanes.close()
    reader.join(5)
    assert [x[0] for x in log] == ["stall", "ack", "pull"]


# --- the bench plan --------------------------------------------------------------------------
def test_pair_keeps_the_committed_keys_and_other_models_are_new_runs():
    r = build_plan("quick", schemes=["ecmp"], loads=[0.8], seeds=[1]).runs[0]
    assert r.connections == "pair" and "connections" not in r.params()
    plan = build_plan("quick", schemes=["ecmp", "talb"], loads=[0.8], seeds=[1],
                      connections=["pair", "pool:08", "class"])
    assert plan.counts("connections") == {"pair": 2, "pool:8": 2, "class": 2}
    pair = [x for x in plan.runs if x.connections == "pair"]
    assert {x.key() for x in pair} == {x.key() for x in build_plan(
        "quick", schemes=["ecmp", "talb"], loads=[0.8], seeds=[1]).runs}
    assert len({x.key() for x in plan.runs}) == 6
    assert [x.params().get("connections") for x in plan.runs] == [None, None, "pool:8", "pool:8",
                                                                  "class", "class"]
    assert "ecmp/pool:8 load 0.8" in plan.runs[2].label()


def test_arms_name_queueing_and_connections():
    assert arm("ecmp") == "ecmp" and arm("ecmp", "fifo", "pool:8") == "ecmp/fifo/pool:8"
    assert arm_split("ecmp/pool:8") == ("ecmp", "bands", "pool:8")
    assert arm_split("talb/fifo") == ("talb", "fifo", "pair")


def test_the_seed_rule_pairs_talb_and_baselines_on_the_same_connections():
    plan = build_plan("fig10", schemes=["ecmp", "talb"], connections=["pair", "pool:8"])
    assert set(plan.seed_rule.pairs) == {("talb", "ecmp"), ("talb/pool:8", "ecmp/pool:8")}


@pytest.mark.parametrize("value", ["pool:0", "pool:x", "foo"])
def test_bench_refuses_a_bad_model(value):
    with pytest.raises(PlanError) as e:
        build_plan("quick", connections=["pair", value])
    assert str(e.value).startswith("--connections: ") and repr(value) in str(e.value)
    r = CliRunner().invoke(main, ["bench", "--connections", f"pair,{value}", "--dry-run",
                                  "--out", "/tmp/t0conns-never"])
    assert r.exit_code != 0 and "--connections" in r.output and repr(value) in r.output, r.output


def test_background_only_presets_refuse_connections():
    with pytest.raises(PlanError, match="--connections"):
        build_plan("lb-classic-quick", connections=["pool:8"])


def test_runspec_from_an_old_record_is_pair():
    old = RunSpec(topology="topologies/fig10.yaml", scheme="ecmp", model="threelayer", arch="ps",
                  workers=4, servers=1, load=0.8, seed=1, target_link_bps=100e9,
                  scaling_mode="both", iterations=4, warmup=1)
    assert old.connections == "pair"


# --- what the results make of it ---------------------------------------------------------------
def test_a_tensors_wait_for_its_connection_is_its_own_number():
    """conn_wait: from when a tensor could go to its hand-off to the socket
    (before the FCT's start); None where a record has no such time."""
    from workload.measure import join_tensors, tensor_summary

    base = {"ev": "tx", "kind": "pull", "src": 2, "dst": 0, "it": 1, "pid": 0, "step": 0,
            "layer": 0, "bytes": 1000, "tensor_id": 7, "t_kernel_ns": 5_000_000,
            "t_admit_ns": None}
    events = [{**base, "k": "a", "t_queued_ns": 1_000_000, "t_ns": 4_000_000, "conn": 3,
               "ports": [7101, 40000]},
              {**base, "k": "b", "tensor_id": 8, "t_ns": 4_000_000},
              {"ev": "rx", "k": "a", "ok": True, "t_ns": 9_000_000},
              {"ev": "rx", "k": "b", "ok": True, "t_ns": 9_000_000}]
    a, b = join_tensors(events, lambda tx: 1000, warmup=0)
    assert a["conn_wait_s"] == pytest.approx(0.003) and a["fct_s"] == pytest.approx(0.005)
    assert a["conn"] == 3 and a["ports"] == [7101, 40000]
    assert b["conn_wait_s"] is None and b["conn"] == 0 and b["ports"] is None
    block = tensor_summary([a, b])["by_class"]["all"]
    assert block["conn_wait"]["n"] == 1 and block["conn_wait"]["mean_s"] == pytest.approx(0.003)


def test_head_of_line_is_per_connection():
    """Two tensors of one pair on two connections do not wait for each other."""
    from experiments.sweep.results import service_times

    def t(conn, start, done):
        return {"src": 0, "dst": 2, "conn": conn, "t_start_ns": start, "t_done_ns": done,
                "fct_s": (done - start) / 1e9, "warmup": False}
    same = service_times([t(0, 0, 10_000_000), t(0, 1_000_000, 12_000_000)])
    apart = service_times([t(0, 0, 10_000_000), t(1, 1_000_000, 12_000_000)])
    assert [s for _, s in same] == pytest.approx([0.010, 0.002])
    assert [s for _, s in apart] == pytest.approx([0.010, 0.011])


# --- a sweep over connection models, from fake results ----------------------------------------
def _fake(spec):
    """Short AFCT: ECMP 100 ms on a pair's connection, 60 on a pool; TaLB 80% of ECMP's on each."""
    fct = {"pair": 0.100, "pool:8": 0.060}[spec.connections] * (0.8 if spec.scheme == "talb" else 1)
    fct *= 1 + 0.01 * spec.seed + (0.002 * spec.seed ** 2 if spec.scheme == "talb" else 0)
    head = {"scheme": spec.scheme, "queueing": "bands", "connections": spec.connections,
            "samples_per_s": 10 / fct, "iteration_time_s": fct, "cpu_bound": False}
    for cls in ("short", "long", "all", "trailing"):
        head.update({f"{cls}_fct_mean_s": fct, f"{cls}_fct_p99_s": 2 * fct, f"{cls}_censored": 0,
                     f"{cls}_netfct_mean_s": fct / 2, f"{cls}_netfct_p99_s": fct,
                     f"{cls}_conn_wait_mean_s": 0.001})
    return {"format": "talb-run/1", "config": {"workers": 4, "servers": 1, "arch": "ps"},
            "model": {"batch_size": 32}, "placement": {"workers": [], "servers": []},
            "fabric": {"queueing": {"mode": "bands"}}, "scaling": {"time_scale": 1.0},
            "connections": {"model": spec.connections}, "flags": {"cpu_bound": False},
            "headline": head, "software": {"commit": "c0ffee"}, "tensors": [],
            "summary": {"cpu_guard": {"flagged": False, "cpu_busy_mean": 0.5, "reason": "test"}}}


def test_a_sweep_over_models_pairs_by_seed_and_compares_like_with_like(tmp_path):
    import json

    from experiments.sweep.kinds import finish
    from experiments.sweep.runner import run_plan

    p = build_plan("quick", schemes=["ecmp", "talb"],
                   loads=[0.8], seeds=3, connections=["pair", "pool:8"])
    run_plan(p, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake(s))), progress=False)
    res = finish(p, tmp_path)
    rows = res["rows"]
    assert {(r["connections"], r["connections_in_effect"]) for r in rows} == {
        ("pair", "pair"), ("pool:8", "pool:8")}
    assert all(r["all_conn_wait_mean_s"] == 0.001 for r in rows)
    csv = (tmp_path / "runs.csv").read_text().splitlines()[0].split(",")
    assert "connections" in csv and "connections_in_effect" in csv
    # TaLB against ECMP on the same connections, once per model
    afct = [r for r in res["paper_vs_ours"] if r["number"] == "short-flow AFCT vs ECMP"]
    assert len(afct) == 2
    pool = next(r for r in afct if "pool:8 connections" in r["where"])
    pair = next(r for r in afct if "pool:8" not in r["where"])
    for r in (pool, pair):
        assert r["n"] == 3 and r["pair"].ratio == pytest.approx(0.8, rel=0.02)
    # paired.csv pairs the models of one scheme too, by seed
    paired = (tmp_path / "paired.csv").read_text()
    assert ",talb,talb/pool:8,short_fct_mean_s," in paired
    # every arm's runs of a seed were paired (one background plan, one start)
    md = (tmp_path / "summary.md").read_text()
    assert "| connections | pair, pool:8 |" in md                 # effective parameters
    assert "talb/pool:8" in md and "ecmp/pool:8" in md
    for panels in res["plots"].values():
        for lines in panels.values():
            assert sorted(lines) == ["ecmp", "ecmp/pool:8", "talb", "talb/pool:8"]
