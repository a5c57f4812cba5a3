"""`talb run`'s engine on a live fabric: PS and ring all-reduce of a tiny
model over tagged TCP between host namespaces, every byte checked, the
results file well formed; a worker that dies ends the run and leaves no
process behind.

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, scheme talb).
"""
from __future__ import annotations

import json
import os
import signal

import pytest

from common import paths
from netns_topology.state import load_topology_of
from workload.experiment import RunConfig, RunError, run
from workload.patterns import allreduce, ps
from workload.patterns.common import HEADER
from workload.scaling import scaling_for
from helpers import processes_in_hosts, up_fabric
from tiny_model import tiny_profile

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
ITERATIONS = 3


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, TOPOLOGY, agent=True).prefix


def _run(fabric, tmp_path, arch, workers, servers=1, **kw):
    opts = dict(iterations=ITERATIONS, warmup=1, partition_bytes=100_000, credit_bytes=200_000,
                target_link_bps=100e6, prefix=fabric, out=str(tmp_path / f"{arch}.json"),
                timeout_s=240)
    cfg = RunConfig(model="tiny", arch=arch, workers=workers, servers=servers, **{**opts, **kw})
    return run(cfg, profile=tiny_profile(), scaling=scaling_for(100e6, 100e6))


def _check_results_file(r, arch, workers):
    on_disk = json.loads(open(r["path"]).read())
    for key in ("format", "config", "software", "fabric", "model", "scaling", "scheduler",
                "placement", "load", "summary", "flags", "headline", "iterations", "tensors",
                "cpu_samples"):
        assert key in on_disk, key
    head = on_disk["headline"]
    assert head["arch"] == arch and head["samples_per_s"] == on_disk["summary"]["speed"]["samples_per_s"]
    assert head["all_fct_mean_s"] == on_disk["summary"]["tensors"]["by_class"]["all"]["mean_s"] > 0
    assert all(not isinstance(v, (dict, list)) for v in head.values())
    assert on_disk["config"]["arch"] == arch and on_disk["config"]["workers"] == workers
    assert len(on_disk["software"]["commit"]) == 40
    assert on_disk["fabric"]["topology"]["hosts_per_leaf"] == 3
    assert set(on_disk["fabric"]["host_link_bps"].values()) == {100_000_000}
    assert on_disk["scaling"]["testbed_link_bps"] == 100e6
    assert on_disk["fabric"]["agent"]["config"]["window_s"] > 0       # the agent's settings
    assert {c["scheme"] for c in on_disk["fabric"]["switch_config"].values()} == {"talb"}
    assert isinstance(on_disk["flags"]["cpu_bound"], bool)
    assert on_disk["cpu_samples"], "no CPU sample taken during the run"
    # the CPU guard measures the forwarding directly: softirq per CPU (issue 36)
    ncpu = os.cpu_count()
    assert all(len(x["softirq_per_cpu"]) == len(x["busy_per_cpu"]) == ncpu
               and 0 <= x["softirq"] <= x["cpu_busy"] <= 1 for x in on_disk["cpu_samples"])
    guard = on_disk["summary"]["cpu_guard"]
    assert guard["version"] == 2 and guard["flagged"] == on_disk["flags"]["cpu_bound"]
    assert guard["windows"] == 0 or guard["softirq_measured"]
    assert len(on_disk["tensors"]) == len(r["tensors"])
    assert [i["iteration"] for i in on_disk["iterations"]] == list(range(ITERATIONS))
    assert all(i["complete"] and i["time_s"] > 0 for i in on_disk["iterations"])
    assert on_disk["summary"]["speed"]["samples_per_s"] > 0


def _check_offered_load(r, fabric):
    """summary.offered_load (issue 18): per leaf, training + background
    bytes to other leaves over the span x the leaf's uplinks; the training
    part is the cross-leaf tensors' bytes, counted here from the placement;
    the run's summary prints it."""
    from talb import cli_run

    topo = load_topology_of(fabric)
    leaf = {h.name: h.leaf for h in topo.hosts}
    nodes = [leaf[h] for h in r["placement"]["workers"] + r["placement"]["servers"]]
    ol = r["summary"]["offered_load"]
    assert ol["span_s"] == pytest.approx(r["training_s"])
    cross = {name: 0 for name in ol["leaves"]}
    for t in r["tensors"]:
        if nodes[t["src"]] != nodes[t["dst"]]:
            cross[nodes[t["src"]]] += t["bytes"]
    assert len(set(nodes)) == 2 and all(cross.values())   # traffic crosses the fabric both ways
    for name, b in ol["leaves"].items():
        assert b["capacity_bps"] == 2 * 100e6                  # 2 spines x 100 Mbit/s
        assert b["training_bytes"] == cross[name]
        assert b["training"] == pytest.approx(cross[name] * 8 / (ol["span_s"] * 200e6))
        assert 0 < b["training"] < 1.5
        assert b["total"] == pytest.approx(b["training"] + b["background"])
        assert b["forwarded"] is not None and b["sent"] is not None and b["leaf_up_drops"] >= 0
    assert ol["max_total"] == max(b["total"] for b in ol["leaves"].values())
    assert ol["leaves"][ol["max_leaf"]]["total"] == ol["max_total"]
    with cli_run.console.capture() as cap:
        cli_run.print_summary(r)
    b = ol["leaves"][ol["max_leaf"]]
    assert (f"offered uplink load: {b['training']:.2f} training + {b['background']:.2f} "
            f"background = {b['total']:.2f} on {ol['max_leaf']} (max") in cap.get()
    return ol


def _check_every_byte(r):
    tensors = r["tensors"]
    assert tensors, "no tensor sent"
    bad = [t["key"] for t in tensors if t["censored"] or not t["ok"]]
    assert not bad, f"tensors lost or corrupted: {bad[:10]}"
    assert r["summary"]["tensors"]["corrupted"] == 0
    assert len({(t["src"], t["tensor_id"]) for t in tensors}) == len(tensors), "tensor ids reused"
    assert all(t["fct_s"] > 0 for t in tensors)
    b = r["summary"]["bytes"]
    assert b["payload_sent_all_iterations"] == b["expected_all_iterations"]


def test_parameter_server_run(fabric, tmp_path):
    workers, servers = 3, 2
    r = _run(fabric, tmp_path, "ps", workers, servers)
    _check_every_byte(r)
    _check_results_file(r, "ps", workers)
    model = tiny_profile().total_bytes       # scale 1: testbed bytes = model bytes (no floor hit)
    for w in range(workers):
        for it in range(ITERATIONS):
            push = sum(t["bytes"] - HEADER.size for t in r["tensors"]
                       if t["kind"] == "push" and t["src"] == w and t["iteration"] == it)
            pull = sum(t["bytes"] - HEADER.size for t in r["tensors"]
                       if t["kind"] == "pull" and t["dst"] == w and t["iteration"] == it)
            assert push == pull == model, (w, it, push, pull)
    assert r["placement"]["servers"] and len(r["placement"]["workers"]) == workers
    n_parts = r["model"]["partitions"]
    assert len(r["tensors"]) == 2 * workers * n_parts * ITERATIONS
    assert r["summary"]["bytes"]["expected_per_iteration"] == ps.bytes_per_iteration(
        _parts(r), workers, servers)
    # trailing tensors: one per worker, layer and measured iteration
    assert r["summary"]["tensors"]["trailing"]["n"] == workers * 3 * (ITERATIONS - 1)
    # load 0: no background; every tensor byte that crosses a leaf's uplinks is
    # in what their queues sent (with the frames' headers, the ACKs, retransmissions)
    ol = _check_offered_load(r, fabric)
    for b in ol["leaves"].values():
        assert b["background"] == 0 and b["background_bytes"] == 0
        assert b["training"] <= b["sent"] < 1.3 * b["training"], b


def test_parameter_server_keeps_priority_order(fabric, tmp_path):
    """ByteScheduler's rule on the live system: once a layer's gradients
    are ready (its backward step ended), no partition of a later layer
    starts before every partition of that layer has. Overlap is real: the
    back layers' pushes start before the front layers' gradients exist.
    A credit of one partition makes every later layer wait its turn."""
    workers = 2
    r = _run(fabric, tmp_path, "ps", workers, 1, credit_bytes=1)
    _check_every_byte(r)
    ready = {(e["node"], e["iteration"], e["layer"]): e["t_ready_ns"] for e in r["layers"]}
    assert len(ready) == workers * ITERATIONS * 3
    pushes = [t for t in r["tensors"] if t["kind"] == "push"]
    assert all(t["t_admit_ns"] is not None and t["t_admit_ns"] <= t["t_start_ns"] for t in pushes)
    violations, overtakes, overlapped = [], 0, 0
    for q in pushes:
        for layer in range(q["layer"]):
            t_ready = ready[(q["src"], q["iteration"], layer)]
            if t_ready < q["t_admit_ns"]:
                late = [p["key"] for p in pushes if p["src"] == q["src"] and
                        p["iteration"] == q["iteration"] and p["layer"] == layer and
                        p["t_admit_ns"] > q["t_admit_ns"]]
                violations += [(q["key"], k) for k in late]
            else:
                overlapped += 1      # q went out before layer's gradients existed
    for w in range(workers):
        for it in range(ITERATIONS):
            mine = sorted((p for p in pushes if p["src"] == w and p["iteration"] == it),
                          key=lambda p: p["t_admit_ns"])
            layers = [p["layer"] for p in mine]
            overtakes += sum(1 for a, b in zip(layers, layers[1:]) if b < a)
    assert not violations, f"lower-priority partitions started while higher ones waited: {violations[:5]}"
    # forward wait: an iteration's first forward step starts only once layer 0 is back
    done = {(e["node"], e["iteration"], e["layer"]): e["t_done_ns"] for e in r["layers"]}
    for i in r["iterations"][1:]:
        for w, t_start in i["worker_start_ns"].items():
            assert t_start >= done[(int(w), i["iteration"] - 1, 0)], (w, i["iteration"])
    assert overlapped > 0, "no push started during back-propagation: nothing overlapped"
    assert overtakes > 0, "no higher-priority layer ever overtook: the check saw no preemption"


def _parts(r):
    from workload.scheduler import partition_model
    return partition_model(tiny_profile(), 100_000)


def test_ring_allreduce_run(fabric, tmp_path):
    workers = 4
    r = _run(fabric, tmp_path, "allreduce", workers)
    _check_every_byte(r)
    _check_results_file(r, "allreduce", workers)
    parts = _parts(r)
    steps = 2 * (workers - 1)
    assert len(r["tensors"]) == workers * len(parts) * steps * ITERATIONS
    per_worker = allreduce.bytes_per_iteration(parts, workers, r["scaling"]["min_tensor_bytes"])
    for w in range(workers):
        sent = sum(t["bytes"] - HEADER.size for t in r["tensors"]
                   if t["src"] == w and t["iteration"] == 1)
        assert sent == per_worker["send_per_worker"]
        # each step of each partition is its own tensor, to the ring successor
        assert {t["dst"] for t in r["tensors"] if t["src"] == w} == {(w + 1) % workers}
    kinds = {t["kind"] for t in r["tensors"]}
    assert kinds == {"reduce", "gather"}


def test_run_with_background_load(fabric, tmp_path):
    """Load 0.2 of web-search flows from the workers during training: the
    flows are recorded, training still delivers every byte, nothing stays."""
    r = _run(fabric, tmp_path, "ps", 2, 1, load=0.2, seed=4, background_size_scale=0.05)
    _check_every_byte(r)
    bg = r["summary"]["background"]
    assert bg["flows"] > 0 and bg["done"] > 0 and bg["failed"] == 0, bg
    params = r["load"]["background"]["params"]
    # sizes by --background-size-scale, not the tensors' byte scale (1 here)
    assert params["size_scale"] == 0.05
    assert params["effective_mean_bytes"] == pytest.approx(0.05 * params["cdf_mean_bytes"])
    # every switch port's queue was read: drops by where the port leads
    topo = load_topology_of(fabric)
    drops = r["summary"]["port_drops"]
    assert set(drops["by_kind"]) == {"to_host", "leaf_up", "spine_down"}
    assert {(sw, p) for sw, ports in drops["ports"].items() for p in ports} == \
        {(sw.name, p.name) for sw in topo.switches for p in topo.ports(sw.name)}
    assert all(v >= 0 for v in drops["by_kind"].values())
    sent_up = sum(p["sent_bytes"] for ports in drops["ports"].values() for p in ports.values()
                  if p["kind"] == "leaf_up")
    # each background flow finished while training ran crossed exactly one leaf
    # uplink (the counters are the training's: read when the nodes are done)
    pairing = r["pairing"]
    nodes_done_ns = pairing["t0_ns"] + 1e9 * pairing["nodes_done_s"]
    assert sent_up >= sum(f["size_bytes"] for f in r["load"]["background"]["flows"]
                          if f["status"] == "done" and f["end_ns"] <= nodes_done_ns)
    assert params["load"] == 0.2 and params["senders"] and \
        set(params["senders"]) <= set(r["placement"]["workers"])
    assert isinstance(r["load"]["background_covered"], bool)
    # the whole plan runs, not cut at training's end: every flow starts
    assert bg["not_started"] == 0, bg
    last_planned_s = max(f["planned_start_ns"] for f in r["load"]["background"]["flows"]) / 1e9 \
        - pairing["t0_ns"] / 1e9
    assert pairing["end_s"] > last_planned_s
    # the background part: planned sizes of the workers' flows planned in the span
    ol = _check_offered_load(r, fabric)
    leaf = {h.name: h.leaf for h in topo.hosts}
    span0 = min(t["t_start_ns"] for t in r["tensors"])
    span1 = max(t["t_delivered_ns"] for t in r["tensors"])
    for name, b in ol["leaves"].items():
        assert b["background_bytes"] == sum(
            f["size_bytes"] for f in r["load"]["background"]["flows"]
            if leaf[f["src"]] == name and span0 <= f["planned_start_ns"] <= span1)
    assert sum(b["background_bytes"] for b in ol["leaves"].values()) > 0
    assert not processes_in_hosts(fabric)


def test_a_failed_worker_ends_the_run_and_leaves_nothing(fabric, tmp_path):
    pids = {}

    def killer(ev):
        if ev.get("ev") == "iter" and ev["it"] == 1 and "n0" in pids and not pids.get("killed"):
            os.kill(pids["n0"], signal.SIGKILL)
            pids["killed"] = True

    cfg = RunConfig(model="tiny", arch="ps", workers=3, servers=1, iterations=50, warmup=1,
                    partition_bytes=100_000, credit_bytes=200_000, target_link_bps=100e6,
                    prefix=fabric, out=str(tmp_path / "fail.json"), timeout_s=120, load=0.2)
    with pytest.raises(RunError, match=r"node n\d+ \((worker|server) on h\d\) failed") as exc:
        run(cfg, profile=tiny_profile(), scaling=scaling_for(100e6, 100e6),
            on_nodes=pids.update, on_event=killer)
    assert pids.get("killed"), "the worker was never killed: the test checked nothing"
    node_pids = [v for k, v in pids.items() if k.startswith("n")]
    assert len(node_pids) == 4
    alive = [p for p in node_pids if os.path.exists(f"/proc/{p}")]
    assert not alive, f"processes left running: {alive}"
    assert not processes_in_hosts(fabric), "background or node processes left in the hosts"
    assert not (tmp_path / "fail.json").exists()
    assert "nodes.log" in str(exc.value)


KILLED_RUNNER = """
import os, signal, sys
sys.path.insert(0, {tests!r})
from tiny_model import tiny_profile
from workload.experiment import RunConfig, run
from workload.scaling import scaling_for

def on_nodes(pids):
    open({pidfile!r}, "w").write(" ".join(map(str, pids.values())))
    os.kill(os.getpid(), signal.SIGKILL)       # no finally, no clean-up code runs

run(RunConfig(model="tiny", arch="ps", workers=2, iterations=1000, prefix={prefix!r},
              out={out!r}), profile=tiny_profile(), scaling=scaling_for(100e6, 100e6),
    on_nodes=on_nodes)
"""


def test_nodes_die_with_a_killed_run(fabric, tmp_path):
    """SIGKILL of the process running the experiment: the kernel ends its
    nodes too (PR_SET_PDEATHSIG), nothing keeps running in the hosts."""
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "pids"
    script = KILLED_RUNNER.format(tests=str(paths.REPO_ROOT / "tests"), pidfile=str(pidfile),
                                  prefix=fabric, out=str(tmp_path / "r.json"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3

    def running(pid):
        try:
            state = open(f"/proc/{pid}/status").read().split("State:")[1].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"          # a zombie is dead, waiting for init to reap it
    deadline = time.monotonic() + 5
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if running(p)]
    assert not processes_in_hosts(fabric)


def test_three_layer_model_run(fabric, tmp_path):
    """--model threelayer (TaLB sec. V-A) end to end: L0's tensors are short
    and L1/L2's long at target scale, whatever the testbed's bytes."""
    cfg = RunConfig(model="threelayer", arch="ps", workers=2, servers=1, iterations=2, warmup=1,
                    target_link_bps=1e9, prefix=fabric, out=str(tmp_path / "3l.json"),
                    timeout_s=240)
    r = run(cfg)
    _check_every_byte(r)
    classes = {(t["layer"], t["class"]) for t in r["tensors"]}
    assert classes == {(0, "short"), (1, "long"), (2, "long")}, classes
    by_class = r["summary"]["tensors"]["by_class"]
    assert by_class["short"]["n"] > 0 and by_class["long"]["n"] > 0 and by_class["medium"]["n"] == 0
