"""Communication patterns and measurement without a fabric: the bytes each
pattern moves per iteration, sharding, censoring, summaries, counters."""
from __future__ import annotations

import pytest

from tiny_model import tiny_profile
from workload import measure
from workload.patterns import allreduce, get_pattern, ps
from workload.scheduler import Partition, partition_model


def _parts(sizes, layer=0):
    return [Partition(i, layer, f"t{i}", 0, n, n) for i, n in enumerate(sizes)]


@pytest.mark.parametrize("workers,servers", [(1, 1), (4, 1), (4, 3), (5, 2)])
def test_ps_moves_the_whole_model_each_way_per_worker(workers, servers):
    parts = partition_model(tiny_profile(), 40_000)
    model = tiny_profile().total_bytes
    b = ps.bytes_per_iteration(parts, workers, servers)
    assert b["push_per_worker"] == b["pull_per_worker"] == model
    assert b["total"] == 2 * workers * model


def test_ps_shards_every_partition_once_and_evenly():
    parts = _parts([100] * 12 + [50] * 4)
    owner = ps.shard(parts, 3)
    assert sorted(owner) == [p.pid for p in parts]
    load = [sum(p.nbytes for p in parts if owner[p.pid] == s) for s in range(3)]
    assert max(load) - min(load) <= 100, load     # greedy: within one partition
    assert sum(load) == 1400


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_allreduce_sends_2_n_minus_1_over_n_of_the_model_per_worker(n):
    sizes = [n * 1000 * k for k in (1, 3, 7)]      # N divides every partition
    parts = _parts(sizes)
    b = allreduce.bytes_per_iteration(parts, n)
    assert b["send_per_worker"] * n == 2 * (n - 1) * sum(sizes)
    assert allreduce.steps(n) == 2 * (n - 1)


def test_allreduce_chunks_round_up_and_respect_the_floor():
    p = Partition(0, 0, "t", 0, 1001, 1001)
    assert allreduce.chunk_bytes(p, 4) == 251
    assert allreduce.chunk_bytes(p, 4, min_bytes=5792) == 5792


def test_unknown_pattern_names_the_flag():
    with pytest.raises(ValueError, match="arch: one of ps, allreduce, got 'mesh'"):
        get_pattern("mesh")


# --- measurement -----------------------------------------------------------------------
def _tx(k, it, layer, dst, t, kind="push"):
    return {"ev": "tx", "k": k, "kind": kind, "src": 0, "dst": dst, "it": it, "pid": 0, "step": 0,
            "layer": layer, "bytes": 1000, "tensor_id": hash(k) & 0xFFFFFFFF, "t_ns": t}


def test_censored_tensors_are_counted_never_timed():
    events = [_tx("a", 1, 0, 9, 0), _tx("b", 1, 0, 9, 0), _tx("c", 1, 1, 9, 0),
              {"ev": "rx", "k": "a", "ok": True, "t_ns": 2_000_000}]
    tensors = measure.join_tensors(events, lambda tx: 50_000, warmup=0)
    by_key = {t["key"]: t for t in tensors}
    assert by_key["a"]["fct_s"] == pytest.approx(0.002)
    assert by_key["b"]["censored"] and by_key["b"]["fct_s"] is None and not by_key["b"]["ok"]
    s = measure.tensor_summary(tensors)
    assert s["by_class"]["all"]["n"] == 1 and s["by_class"]["all"]["censored"] == 2
    assert s["by_class"]["all"]["mean_s"] == pytest.approx(0.002)   # not dragged to 0 by b, c
    assert s["by_class"]["short"]["censored"] == 2
    # layer 0 at node 9: b never finished, so the trailing tensor is censored
    assert s["trailing"]["censored"] == 2 and s["trailing"]["n"] == 0
    only_censored = measure.stats([], censored=3)
    assert only_censored["mean_s"] is None and only_censored["censored"] == 3


def test_warmup_is_excluded_and_classes_follow_target_size():
    events = [_tx("w", 0, 0, 9, 0), {"ev": "rx", "k": "w", "ok": True, "t_ns": 9_000_000_000},
              _tx("s", 1, 0, 9, 0), {"ev": "rx", "k": "s", "ok": True, "t_ns": 1_000_000},
              _tx("l", 1, 0, 9, 0), {"ev": "rx", "k": "l", "ok": True, "t_ns": 3_000_000}]
    size = {"w": 10, "s": 100_000, "l": 1_000_000}
    tensors = measure.join_tensors(events, lambda tx: size[tx["k"]], warmup=1)
    s = measure.tensor_summary(tensors)
    assert s["by_class"]["all"]["n"] == 2 and s["by_class"]["all"]["max_s"] == pytest.approx(0.003)
    assert s["by_class"]["short"]["n"] == 1 and s["by_class"]["long"]["n"] == 1
    assert measure.size_class(100_001) == "medium"


def test_p99_is_nearest_rank():
    assert measure.p99(list(range(1, 101))) == 99
    assert measure.p99(list(range(1, 201))) == 198
    assert measure.p99([5.0]) == 5.0


def test_iterations_slowest_worker_and_incomplete_ones_censored():
    ev = [{"ev": "iter", "node": w, "it": it, "t_ns": it * 1_000_000_000 + w * 100_000_000}
          for w in (0, 1) for it in range(3)]
    ev.append({"ev": "end", "node": 0, "t_ns": 3_000_000_000})   # worker 1 never finished
    its = measure.iteration_records(ev, workers=2, warmup=1)
    assert [i["complete"] for i in its] == [True, True, False]
    assert its[1]["time_s"] == pytest.approx(1.0)
    sp = measure.speed(its, workers=2, batch_size=32, time_scale=2.0)
    assert sp["iterations"] == 1 and sp["censored"] == 1
    assert sp["samples_per_s"] == pytest.approx(2 * 32 / 0.5)   # 1 s on the testbed = 0.5 s at target


def test_proc_net_parsing():
    text = ("Tcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 500 7\n"
            "TcpExt: TCPSACKReorder TCPTSReorder\nTcpExt: 3 4\n")
    t = measure.parse_proc_net(text)
    assert t[("Tcp", "RetransSegs")] == 7 and t[("TcpExt", "TCPTSReorder")] == 4
    s = measure.tcp_summary({"h0": {"retrans_segs": 7, "out_segs": 500, "sack_reorder": 3,
                                    "ts_reorder": 4, "reno_reorder": 0}})
    assert s["total"]["reordering"] == 7
    assert s["total"]["retransmit_ratio"] == pytest.approx(7 / 500)


def test_cpu_guard_rule():
    def win(busy, util):
        return {"t_s": 0, "cpu_busy": busy, "host_link_util": {"leaf0/h0": util}}
    # CPU saturated, links far from their rate: the CPU set the pace.
    assert measure.cpu_guard([win(0.99, 0.3)] * 4 + [win(0.5, 0.2)], True)["flagged"]
    # CPU saturated but a link ran at line rate: the network was the limit.
    assert not measure.cpu_guard([win(0.99, 0.95)] * 5, True)["flagged"]
    # Saturated in too few windows.
    assert not measure.cpu_guard([win(0.99, 0.1)] + [win(0.3, 0.1)] * 9, True)["flagged"]
    # One saturated window at line rate does not clear the CPU-bound others
    # (each window is judged alone: a burst into a queue reads above 100%).
    g = measure.cpu_guard([win(0.99, 1.16)] + [win(0.99, 0.3)] * 4, True)
    assert g["flagged"] and g["cpu_bound_windows"] == 4, g
    assert not measure.cpu_guard([win(0.99, 1.16)] * 4 + [win(0.99, 0.3)] * 1 + [win(0.2, 0.1)] * 5,
                                 True)["flagged"]
    # Without link counters the CPU alone decides.
    assert measure.cpu_guard([win(0.99, 0.0)] * 3, False)["flagged"]
    assert not measure.cpu_guard([], True)["flagged"]


def test_cpu_guard_counts_only_windows_while_tensors_flow():
    def win(t, busy, util):
        return {"t_s": t, "cpu_busy": busy, "host_link_util": {"leaf0/h0": util}}
    samples = [win(0.5, 1.0, 0.0), win(1.0, 1.0, 0.0),          # start-up: busy, no traffic
               win(1.5, 0.4, 0.5), win(2.0, 0.5, 0.6), win(2.5, 0.4, 0.5)]
    assert measure.cpu_guard(samples, True)["flagged"]
    g = measure.cpu_guard(samples, True, span_s=(1.1, 2.4))
    assert not g["flagged"] and g["windows"] == 3
    events = [{"ev": "tx", "t_ns": 1_100_000_000}, {"ev": "rx", "t_ns": 2_400_000_000},
              {"ev": "iter", "t_ns": 5}]
    assert measure.training_span_s(events) == (1.1, 2.4)
