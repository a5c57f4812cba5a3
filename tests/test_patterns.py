"""Communication patterns and measurement without a fabric: the bytes each
pattern moves per iteration, sharding, censoring, summaries, counters."""
from __future__ import annotations

import zlib

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
            "layer": layer, "bytes": 1000, "tensor_id": zlib.crc32(k.encode()), "t_ns": t}


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


MS = 1_000_000


def _txw(k, t_admit, t_start, t_kernel, dst=9, layer=0, src=0, tid=None):
    ev = {**_tx(k, 1, layer, dst, t_start), "src": src, "t_admit_ns": t_admit,
          "t_kernel_ns": t_kernel}
    if tid is not None:              # else _tx's id from k
        ev["tensor_id"] = tid
    return ev


def _wire(first, last, packets=3, last_seen=True, latest=None):
    return {"first_ns": first, "last_ns": last if last_seen else 0,
            "latest_ns": latest if latest is not None else last, "packets": packets}


def test_each_fct_definition_from_its_own_stamps():
    """admitted 0, send() 1 ms, first byte to the kernel 2 ms, first packet on
    the wire 10 ms, last 14 ms, delivered 15 ms: FCT 14 ms (hand-off), network
    FCT 5 ms, send-buffer wait 8 ms, scheduler wait 2 ms."""
    events = [_txw("a", 0, 1 * MS, 2 * MS), {"ev": "rx", "k": "a", "ok": True, "t_ns": 15 * MS}]
    wire = {(0, events[0]["tensor_id"]): _wire(10 * MS, 14 * MS, latest=16 * MS)}
    (t,) = measure.join_tensors(events, lambda tx: 50_000, warmup=0, wire=wire)
    assert (t["t_admit_ns"], t["t_start_ns"], t["t_kernel_ns"], t["t_wire_first_ns"],
            t["t_wire_last_ns"], t["t_delivered_ns"]) == (0, MS, 2 * MS, 10 * MS, 14 * MS, 15 * MS)
    assert t["t_done_ns"] == t["t_delivered_ns"] and t["wire_packets"] == 3
    assert t["t_wire_latest_ns"] == 16 * MS      # a probe after delivery: only here
    assert t["fct_s"] == pytest.approx(0.014) and t["netfct_s"] == pytest.approx(0.005)
    assert t["sendbuf_wait_s"] == pytest.approx(0.008) and t["sched_wait_s"] == pytest.approx(0.002)
    b = measure.tensor_summary([t])["by_class"]["short"]
    assert b["mean_s"] == pytest.approx(0.014) and b["netfct"]["mean_s"] == pytest.approx(0.005)
    assert b["netfct"]["p99_s"] == pytest.approx(0.005) and b["wire_missing"] == 0
    assert b["sendbuf_wait"]["mean_s"] == pytest.approx(0.008)
    assert b["sched_wait"]["mean_s"] == pytest.approx(0.002)


def test_missing_wire_times_are_counted_never_made_up():
    """b has no entry, c's entry is older than its hand-off to the kernel
    (another tensor that had the same id), d never arrived (censored, not
    missing), e is from before t_kernel_ns existed: none gets a network FCT;
    the summary counts b, c, e as wire_missing beside a's network FCT. A
    tensor whose LAST packet never passed keeps its first time but no last."""
    events = [_txw("a", None, 0, MS, tid=1), _txw("b", None, 0, MS, tid=2),
              _txw("c", None, 0, 50 * MS, tid=3), _txw("d", None, 0, MS, tid=4),
              _tx("e", 1, 0, 9, 0), _txw("f", None, 0, MS, tid=6)]
    events += [{"ev": "rx", "k": k, "ok": True, "t_ns": 100 * MS} for k in "abcef"]
    e_id = events[4]["tensor_id"]
    wire = {(0, 1): _wire(2 * MS, 3 * MS), (0, 3): _wire(5 * MS, 6 * MS),
            (0, 4): _wire(2 * MS, 3 * MS), (0, 6): _wire(2 * MS, 90 * MS, last_seen=False),
            (1, e_id): _wire(MS, MS)}                # another node's tensor with e's id
    by = {t["key"]: t for t in measure.join_tensors(events, lambda tx: 50_000, 0, wire=wire)}
    assert by["a"]["netfct_s"] == pytest.approx(0.098)
    for k in "bce":
        assert by[k]["netfct_s"] is None and by[k]["t_wire_first_ns"] is None, k
        assert by[k]["sendbuf_wait_s"] is None and by[k]["fct_s"] == pytest.approx(0.1), k
    assert by["e"]["t_kernel_ns"] is None and by["e"]["sched_wait_s"] is None
    assert by["d"]["censored"] and by["d"]["netfct_s"] is None
    assert by["f"]["t_wire_first_ns"] == 2 * MS and by["f"]["t_wire_last_ns"] is None
    assert by["f"]["netfct_s"] == pytest.approx(0.098)
    b = measure.tensor_summary(list(by.values()))["by_class"]["all"]
    assert (b["n"], b["censored"], b["netfct"]["n"], b["wire_missing"]) == (5, 1, 2, 3)
    # no wire times at all (results from before them): every delivered tensor missing
    old = measure.join_tensors(events, lambda tx: 50_000, 0)
    assert measure.tensor_summary(old)["by_class"]["all"]["wire_missing"] == 5
    assert measure.tensor_summary(old)["by_class"]["all"]["netfct"]["mean_s"] is None


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
