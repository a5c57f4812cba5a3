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
    # CPU saturated, links far from their rate: flagged.
    assert measure.cpu_guard([win(0.99, 0.3)] * 4 + [win(0.5, 0.2)], True)["flagged"]
    # A link at line rate no longer excuses a saturated window (issue 36):
    # a parameter-server incast puts one there in nearly every window.
    g = measure.cpu_guard([win(0.99, 0.95)] * 5, True)
    assert g["flagged"] and g["saturated_windows"] == 5 and g["peak_host_link_util_when_saturated"] == 0.95
    # fig10-paper CONGA FIFO load 0.3 seed 2 (4 of 7) and mpi RPS seed 5 (9 of 20)
    assert measure.cpu_guard([win(0.95, 1.1)] * 4 + [win(0.5, 0.4)] * 3, True)["flagged"]
    assert measure.cpu_guard([win(0.95, 0.9)] * 9 + [win(0.5, 0.4)] * 11, True)["flagged"]
    # Saturated in too few windows: 1 of 10, and just under the share (19 of 100).
    assert not measure.cpu_guard([win(0.99, 0.1)] + [win(0.3, 0.1)] * 9, True)["flagged"]
    assert not measure.cpu_guard([win(0.9, 0.1)] * 19 + [win(0.89, 0.1)] * 81, True)["flagged"]
    assert measure.cpu_guard([win(0.9, 0.1)] * 20 + [win(0.89, 0.1)] * 80, True)["flagged"]
    # Without link counters the same rule.
    assert measure.cpu_guard([win(0.99, 0.0)] * 3, False)["flagged"]
    g = measure.cpu_guard([], True)
    assert not g["flagged"] and g["windows"] == 0


def test_cpu_guard_flags_one_cpu_pinned_by_forwarding():
    """Softirq per CPU: one CPU saturated, at least half of it forwarding,
    is a saturated window even when the CPUs together are not."""
    def win(per_busy, per_soft):
        return {"t_s": 0, "cpu_busy": sum(per_busy) / len(per_busy),
                "softirq": sum(per_soft) / len(per_soft), "busy_per_cpu": per_busy,
                "softirq_per_cpu": per_soft, "host_link_util": {}}
    pinned = win([0.97, 0.40], [0.60, 0.05])       # 69% together, cpu0 pinned by softirq
    user_busy = win([0.97, 0.40], [0.10, 0.05])    # cpu0 pinned by a process: not forwarding
    quiet = win([0.30, 0.30], [0.10, 0.10])
    g = measure.cpu_guard([pinned] * 2 + [quiet] * 8)
    assert g["flagged"] and g["forwarding_pinned_windows"] == 2 and g["softirq_measured"]
    assert g["softirq_max_cpu"] == 0.60 and g["softirq_mean"] == pytest.approx((0.325 * 2 + 0.1 * 8) / 10)
    g = measure.cpu_guard([user_busy] * 2 + [quiet] * 8)
    assert not g["flagged"] and g["forwarding_pinned_windows"] == 0
    # A window exactly at the thresholds counts; just under does not.
    assert measure.cpu_guard([win([0.90, 0.1], [0.50, 0.0])])["flagged"]
    assert not measure.cpu_guard([win([0.90, 0.1], [0.49, 0.0])])["flagged"]


def test_cpu_window_from_proc_stat_readings():
    """Shares per window from two /proc/stat readings (busy, total, softirq)."""
    prev = {"all": (100, 200, 10), "cpu0": (60, 100, 8), "cpu1": (40, 100, 2)}
    cur = {"all": (250, 400, 70), "cpu0": (150, 200, 62), "cpu1": (100, 200, 8)}
    w = measure.cpu_window(prev, cur)
    assert w["cpu_busy"] == 0.75 and w["softirq"] == 0.30
    assert w["busy_per_cpu"] == [0.9, 0.6] and w["softirq_per_cpu"] == [0.54, 0.06]
    now = measure.read_cpu_stat()       # this machine's /proc/stat: one line per CPU
    assert set(now) == {"all"} | {f"cpu{i}" for i in range(len(now) - 1)}
    assert all(0 <= soft <= busy <= total for busy, total, soft in now.values())


def test_rejudge_applies_the_new_rule_to_old_results():
    """A results file of the old rule (a link at 80% excused the window):
    judged again from its recorded window counts, the old verdict kept."""
    old = {"flags": {"cpu_bound": False},
           "summary": {"cpu_guard": {"flagged": False, "windows": 7, "saturated_windows": 4,
                                     "cpu_bound_windows": 0, "cpu_busy_mean": 0.8,
                                     "reason": "CPUs saturated in 4/7 windows, 0 of them ..."}}}
    g = measure.rejudge(old)
    assert g["flagged"] and g["rejudged"] and g["saturated_share"] == pytest.approx(4 / 7)
    assert g["old"] == {"flagged": False, "reason": "CPUs saturated in 4/7 windows, 0 of them ..."}
    assert "softirq not recorded" in g["reason"]
    old["summary"]["cpu_guard"].update(windows=20, saturated_windows=3)
    assert not measure.rejudge(old)["flagged"]
    # an old guard without the count: every recorded sample counts
    res = {"flags": {"cpu_bound": False},
           "summary": {"cpu_guard": {"flagged": False, "windows": 4, "reason": "x"}},
           "cpu_samples": [{"cpu_busy": 0.95}, {"cpu_busy": 0.2}, {"cpu_busy": 0.3},
                           {"cpu_busy": 0.3}, {"cpu_busy": 0.3}]}
    g = measure.rejudge(res)
    assert g["flagged"] and g["windows"] == 5 and g["saturated_windows"] == 1
    # a file judged by the current rule keeps its verdict
    new = measure.cpu_guard([{"t_s": 0, "cpu_busy": 0.95, "host_link_util": {}}])
    assert measure.rejudge({"flags": {"cpu_bound": True}, "summary": {"cpu_guard": new}}) == new


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
