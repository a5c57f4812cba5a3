"""Connection models (`talb run --connections`, workload/patterns/connections.py)
on a live fabric: real namespaces, real TCP, tagged tensors.

* pair: one connection per worker-server pair, as before.
* pool:4: a pair's tensors travel on two or more TCP flows (distinct
  ports) both ways, every tensor delivered and checked; a capture at the
  hosts shows every tagged packet of a tensor on the connection
  its record names (tagging, wire times and network FCT are per
  connection); the results file records the model.
* class: as many flows per pair as classes in use, each carrying one class.
* ring all-reduce: the models per neighbour.

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, 100 Mbit/s,
4 priority bands: the tiny model's 3 layers are 3 classes).

The benchmark (marked ``bench``: ``make bench`` or ``-m bench``) runs the
same small training under pair, class and pool:8 on fig10's fabric and
prints what each costs in CPU and threads, as ratios to pair.
"""
from __future__ import annotations

import ipaddress
import json
import math
import statistics
import struct
from collections import defaultdict

import pytest

from common import paths
from workload.experiment import RunConfig, place, run
from workload.scaling import scaling_for
from helpers import up_fabric
from tiny_model import tiny_profile

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
ITERATIONS = 3


@pytest.fixture(scope="module")
def fabric(request, bcc):
    f = up_fabric(request, TOPOLOGY, agent=True)
    return f.prefix, f.topo


def _run(prefix, tmp_path, arch, workers, connections, servers=1, **kw):
    opts = dict(iterations=ITERATIONS, warmup=1, partition_bytes=100_000, credit_bytes=200_000,
                target_link_bps=100e6, prefix=prefix, timeout_s=240,
                out=str(tmp_path / f"{arch}-{connections.replace(':', '')}.json"))
    cfg = RunConfig(model="tiny", arch=arch, workers=workers, servers=servers,
                    connections=connections, **{**opts, **kw})
    return run(cfg, profile=tiny_profile(), scaling=scaling_for(100e6, 100e6))


def _every_byte(r):
    tensors = r["tensors"]
    assert tensors, "no tensor sent"
    bad = [t["key"] for t in tensors if t["censored"] or not t["ok"]]
    assert not bad, f"tensors lost or corrupted: {bad[:10]}"
    b = r["summary"]["bytes"]
    assert b["payload_sent_all_iterations"] == b["expected_all_iterations"]
    assert all(i["complete"] for i in r["iterations"])


def _flows(r) -> dict[tuple[int, int], set]:
    """(sending node, receiving node) -> the connections (their ports) that carried tensors."""
    out = defaultdict(set)
    for t in r["tensors"]:
        out[(t["src"], t["dst"])].add(tuple(t["ports"]))
    return out


def _records_model(r, model):
    on_disk = json.loads(open(r["path"]).read())
    assert on_disk["config"]["connections"] == model
    assert on_disk["headline"]["connections"] == model
    cn = on_disk["connections"]
    assert cn["model"] == model
    assert cn["flows_carrying_tensors"] == {f"{s}>{d}": len(v) for (s, d), v in
                                            sorted(_flows(r).items())}
    nodes = r["config"]["workers"] + (r["config"]["servers"] if r["config"]["arch"] == "ps" else 0)
    assert len(cn["nodes"]) == nodes and all(c["cpu_s"] > 0 and c["threads"] >= 2
                                             for c in cn["nodes"].values())
    return cn


def test_pair_is_one_connection_per_pair(fabric, tmp_path):
    prefix, _ = fabric
    r = _run(prefix, tmp_path, "ps", 2, "pair")
    _every_byte(r)
    flows = _flows(r)
    assert len(flows) == 4 and all(len(v) == 1 for v in flows.values()), flows
    # one connection, both ways: a worker's pushes and its pulls share it
    for w in (0, 1):
        (push,), (pull,) = flows[(w, 2)], flows[(2, w)]
        assert push == pull[::-1]
    assert {t["conn"] for t in r["tensors"]} == {0}
    cn = _records_model(r, "pair")
    assert cn["classes"] is None


def _tagged_flows(pcap) -> dict[tuple[str, int], set]:
    """{(source address, tensor_id): {(source port, destination port)}} of
    the tagged packets in a capture."""
    from scapy.utils import RawPcapReader

    out = defaultdict(set)
    with RawPcapReader(str(pcap)) as reader:
        for data, _meta in reader:
            ihl = (data[14] & 0xF) * 4
            src = str(ipaddress.IPv4Address(data[26:30]))
            (tid,) = struct.unpack_from("!I", data, 14 + 20 + 2)     # the TaLB option's tensor_id
            sport, dport = struct.unpack_from("!HH", data, 14 + ihl)
            out[(src, tid)].add((sport, dport))
    return out


def test_pool_spreads_a_pairs_tensors_over_connections_and_tags_each_on_its_own(fabric, tmp_path):
    """pool:4, PS 2 workers : 1 server. Both ways, a pair's tensors travel on
    >= 2 flows (at most 4); every tensor arrives and checks; every tagged
    packet leaving a host carries its tensor's id on the very
    connection the tensor's record names, and every tensor's wire times
    fall inside its own send and delivery (network FCT is per tensor and
    per connection)."""
    from workload.capture import TAGGED_FILTER, start_capture

    prefix, topo = fabric
    hosts = place(topo, "ps", 2, 1)
    nodes = hosts["workers"] + hosts["servers"]
    ip_of = [h.ip for h in nodes]
    # what each host sends (the switches take the option off before a host's port)
    caps = [start_capture(paths.netns_name(prefix, h.name), h.iface, tmp_path / f"{h.name}.pcap",
                          direction="out", bpf_filter=TAGGED_FILTER) for h in nodes]
    try:
        r = _run(prefix, tmp_path, "ps", 2, "pool:4")
    finally:
        for cap in caps:
            cap.stop()
    _every_byte(r)
    flows = _flows(r)
    assert set(flows) == {(0, 2), (1, 2), (2, 0), (2, 1)}
    for pair, conns in flows.items():
        assert 2 <= len(conns) <= 4, (pair, conns)
    for w in (0, 1):      # one pool of 4 per pair, for both directions: 4 worker-side ports
        assert len({p[0] for p in flows[(w, 2)]} | {p[1] for p in flows[(2, w)]}) <= 4
    assert {t["conn"] for t in r["tensors"]} <= {0, 1, 2, 3}
    seen = {}
    for cap in caps:
        seen.update(_tagged_flows(cap.pcap))
    checked = 0
    for t in r["tensors"]:
        got = seen.get((ip_of[t["src"]], t["tensor_id"]))
        assert got, f"no tagged packet of {t['key']} leaving its host"
        assert got == {tuple(t["ports"])}, (t["key"], got, t["ports"])
        assert t["t_kernel_ns"] <= t["t_wire_first_ns"] <= t["t_wire_last_ns"] \
            <= t["t_delivered_ns"], t
        assert t["wire_packets"] >= math.ceil(t["bytes"] / 1448) and t["netfct_s"] <= t["fct_s"]
        checked += 1
    assert checked == len(r["tensors"]) == 2 * 2 * r["model"]["partitions"] * ITERATIONS
    cn = _records_model(r, "pool:4")
    assert r["summary"]["tensors"]["by_class"]["all"]["wire_missing"] == 0
    assert cn["classes"] is None


def test_class_has_one_flow_per_class_in_use(fabric, tmp_path):
    prefix, _ = fabric
    r = _run(prefix, tmp_path, "ps", 2, "class")
    _every_byte(r)
    cn = _records_model(r, "class")
    # talb.yaml's 4 bands: untagged, layer 0, layer 1, layers 2+: the tiny model's
    # 3 layers are 3 classes
    assert cn["classes"] == 3
    classes = {t["layer"] for t in r["tensors"]}
    assert classes == {0, 1, 2}
    for pair, conns in _flows(r).items():
        assert len(conns) == 3, (pair, conns)
    per_conn = defaultdict(set)
    for t in r["tensors"]:
        per_conn[(t["src"], t["dst"], tuple(t["ports"]))].add(t["layer"])
    assert all(len(v) == 1 for v in per_conn.values()), per_conn


@pytest.mark.parametrize("model,flows", [("pool:3", (2, 3)), ("class", (3, 3))])
def test_ring_allreduce_per_neighbour(fabric, tmp_path, model, flows):
    prefix, _ = fabric
    r = _run(prefix, tmp_path, "allreduce", 3, model)
    _every_byte(r)
    got = _flows(r)
    assert set(got) == {(0, 1), (1, 2), (2, 0)}, got       # to the successor only
    for pair, conns in got.items():
        assert flows[0] <= len(conns) <= flows[1], (pair, conns)
    assert len(r["tensors"]) == 3 * r["model"]["partitions"] * 2 * 2 * ITERATIONS
    _records_model(r, model)


# --- what each model costs ------------------------------------------------------------------
BENCH_MODELS = ("pair", "class", "pool:8")
BENCH_ROUNDS = 2


@pytest.fixture(scope="module")
def fig10_fabric(request, bcc):
    return up_fabric(request, paths.REPO_ROOT / "topologies" / "fig10.yaml", agent=True).prefix


@pytest.mark.bench
def test_cpu_cost_of_each_model(fig10_fabric, tmp_path, record_property, capsys):
    """fig10's training (three-layer model, PS 4 workers : 1 server, scaling
    both at 100G, 4 iterations, no background) under pair, class and pool:8,
    interleaved, BENCH_ROUNDS times each: the CPU guard's busy share while
    tensors flow, the nodes' own CPU seconds (per tensor too), threads per
    worker and per server, and the short tensors' network FCT; ratios to
    pair. The CPU guard judges every run as usual."""
    out = defaultdict(list)
    for k in range(BENCH_ROUNDS):
        for model in BENCH_MODELS:
            cfg = RunConfig(model="threelayer", arch="ps", workers=4, servers=1, iterations=4,
                            warmup=1, target_link_bps=100e9, scaling_mode="both", scheme="ecmp",
                            connections=model, prefix=fig10_fabric, timeout_s=300,
                            out=str(tmp_path / f"{model.replace(':', '')}-{k}.json"))
            r = run(cfg)
            _every_byte(r)
            cn, g = r["connections"], r["summary"]["cpu_guard"]
            nodes = cn["nodes"]
            out[model].append({
                "cpu_busy_mean": g["cpu_busy_mean"], "flagged": g["flagged"],
                "node_cpu_s": cn["cpu_s_total"],
                "node_cpu_ms_per_tensor": 1e3 * cn["cpu_s_total"] / len(r["tensors"]),
                "threads_worker": statistics.fmean(nodes[str(w)]["threads"] for w in range(4)),
                "threads_server": nodes["4"]["threads"],
                "training_s": r["training_s"],
                "short_netfct_ms": 1e3 * r["headline"]["short_netfct_mean_s"],
                "flows_per_direction": statistics.fmean(cn["flows_carrying_tensors"].values())})
    mean = {m: {k: statistics.fmean(x[k] for x in rs) for k in rs[0] if k != "flagged"}
            for m, rs in out.items()}
    record_property("connections_cost", {"runs": dict(out), "mean": mean})
    cols = ("cpu_busy_mean", "node_cpu_s", "node_cpu_ms_per_tensor", "threads_worker",
            "threads_server", "training_s", "short_netfct_ms", "flows_per_direction")
    with capsys.disabled():
        print(f"\n  connection models, fig10 training ({BENCH_ROUNDS} runs each; mean, ratio to pair)")
        print("  " + " | ".join(["model"] + list(cols)))
        for m in BENCH_MODELS:
            cells = [f"{mean[m][c]:.3g} ({mean[m][c] / mean['pair'][c]:.2f}x)"
                     if mean["pair"][c] else f"{mean[m][c]:.3g}" for c in cols]
            print("  " + " | ".join([m] + cells)
                  + f" | CPU-bound runs {sum(x['flagged'] for x in out[m])}")
    assert all(x["node_cpu_s"] > 0 for rs in out.values() for x in rs)
    assert mean["pool:8"]["threads_server"] > mean["pair"]["threads_server"]
