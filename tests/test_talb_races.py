"""Several CPUs deciding for one tensor at once (issue 16): the tensor table
of bpf/include/talb/schemes/talb.h must place every packet of a tensor on
one port however two CPUs interleave.

Two kinds of test, both on the real program under BPF_PROG_TEST_RUN:

* deterministic ones put the table into the state another CPU leaves it in
  mid-way (an entry stamped after this CPU read its clock; an entry
  already retired by another CPU) and check the next packet;
* two-CPU ones run the two packets of each race on both CPUs at once, one
  thread pinned to each, thousands of times, and read per CPU which port
  each packet took (port_stats is a per-CPU map). On the old table (aging
  in unsigned arithmetic, completion as a delete and a re-insert, the loser
  of an insert keeping its own choice) these split tensors.

The switch, its ports and packets are test_talb_switch.py's.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from conftest import skip_or_fail
from helpers import loaded_switch
from test_talb_switch import (N_PORTS, SRC, UPLINKS, TC_ACT_REDIRECT, Switch, ecmp_port,
                              hdr, pkt)

pytestmark = pytest.mark.bpf

# Two-CPU trials per race (TALB_RACE_TRIALS for a longer run). On the old
# table 3,000 trials split 1 (first/next packet) and 7 (LAST/resend)
# tensors; the new one has split none in 3 x 20,000 of each.
TRIALS = int(os.environ.get("TALB_RACE_TRIALS", "6000"))


@pytest.fixture(scope="module")
def sw(bcc):
    with loaded_switch("race", N_PORTS, mtu=1600) as (name, dp, ifindex):
        yield Switch(name, dp, ifindex)


def clock_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)   # bpf_ktime_get_ns


def put_entry(sw, tensor_id, port, *, layer=1, tensor_len=100, received=1,
              last_seen_ns=None, done=False):
    """A table entry as another CPU would have written it, counted live
    (group_state, tensor_count) unless done, as the data path counts it."""
    from common.c_constants import TALB_COUNT_LIVE, TALB_TENSOR_DONE
    from datapath.structs import TensorEntry, TensorKey

    now = clock_ns()
    sw.maps.tensors.set(TensorKey.of(SRC, tensor_id), TensorEntry(
        first_seen_ns=now, last_seen_ns=now if last_seen_ns is None else last_seen_ns,
        flags=TALB_TENSOR_DONE if done else 0, prev_port=sw.ifindex[port],
        group_id=sw.gid, received=received, tensor_len=tensor_len, layer=layer))
    if not done:
        st = sw.maps.group_state.get(sw.gid)
        st.live[layer] += 1
        st.tensors += 1
        sw.maps.group_state.set(sw.gid, st)
        sw.maps.tensor_count.set(TALB_COUNT_LIVE,
                                 sw.maps.tensor_count.get(TALB_COUNT_LIVE, 0) + 1)


def other_port(sw, port):
    """A port a new tensor would not take: every PCM 0 but ``port``'s."""
    sw.publish([1.0 if p == port else 0.0 for p in UPLINKS])


# --- deterministic: the states another CPU leaves behind -------------------------------
def test_entry_stamped_after_our_clock_read_is_not_idle(sw):
    """Another CPU stamped last_seen_ns after this CPU read `now`: the entry
    lies ahead of the clock. Unsigned, now - last_seen wrapped to ~2^64 ns,
    the live tensor was "idle", forgotten and placed again elsewhere."""
    sw.reset(idle_us=1_000_000)
    other_port(sw, "p3")                        # a new decision would avoid p3
    put_entry(sw, 0x5EED0001, "p3", last_seen_ns=clock_ns() + 50_000_000)
    for i in range(1, 6):
        assert sw.send(pkt(hdr(0x5EED0001, layer=1, pkt_idx=i))) == "p3"
    c = sw.counters()
    assert c["talb_aged"] == 0 and c["talb_hit"] == 5 and c["talb_case2"] == 0
    assert sw.live() == {1: 1}


def test_entry_idle_longer_than_the_limit_still_ages(sw):
    """The signed comparison still forgets a really idle entry."""
    sw.reset(idle_us=1000)
    put_entry(sw, 0x5EED0002, "p3", last_seen_ns=clock_ns() - 50_000_000)
    sw.send(pkt(hdr(0x5EED0002, layer=1, pkt_idx=0)))
    c = sw.counters()
    assert c["talb_aged"] == 1 and c["talb_inserted"] == 1
    assert sw.live() == {1: 1}                  # retired once, counted again once


def test_completion_keeps_the_entry_for_the_next_packet(sw):
    """The LAST packet marks its entry done in place: a retransmission right
    after it (on another CPU, in the old code's gap between delete and
    re-insert) finds the entry, never the fallback."""
    from datapath.structs import TensorKey

    sw.reset()
    port = sw.send(pkt(hdr(0x5EED0003, layer=2, tensor_len=4)))
    key = TensorKey.of(SRC, 0x5EED0003)
    other_port(sw, port)
    assert sw.send(pkt(hdr(0x5EED0003, layer=2, tensor_len=4, pkt_idx=3, last=True))) == port
    e = sw.maps.tensors.get(key)
    assert e is not None and e.prev_port == sw.ifindex[port]
    assert sw.send(pkt(hdr(0x5EED0003, layer=2, tensor_len=4, pkt_idx=1))) == port
    c = sw.counters()
    assert c["talb_midstream"] == 0 and c["talb_late"] == 1 and c["talb_completed"] == 1


def test_a_tensor_leaves_the_live_counts_exactly_once(sw):
    """LAST twice (two CPUs completing one tensor), LAST after ageing
    (completion racing the ageing of its entry): the live count drops by
    one, never two."""
    from datapath import control

    sw.reset()                                   # never idle (IDLE_NEVER, ~72 min)
    put_entry(sw, 0x5EED0004, "p2", layer=5, tensor_len=3)
    put_entry(sw, 0x5EED0005, "p2", layer=5, tensor_len=3)
    assert sw.live() == {5: 2}
    sw.send(pkt(hdr(0x5EED0004, layer=5, tensor_len=3, pkt_idx=2, last=True)))
    sw.send(pkt(hdr(0x5EED0004, layer=5, tensor_len=3, pkt_idx=2, last=True)))
    assert sw.live() == {5: 1} and control.tensor_occupancy(sw.maps) == 1
    # an entry another CPU already retired and that then ages: not again
    put_entry(sw, 0x5EED0006, "p2", layer=5, tensor_len=3, done=True,
              last_seen_ns=clock_ns() - 5000 * 10**9)
    sw.send(pkt(hdr(0x5EED0006, layer=5, tensor_len=3, pkt_idx=1)))
    assert sw.live() == {5: 1} and control.tensor_occupancy(sw.maps) == 1
    assert sw.counters()["talb_completed"] == 1


# --- deterministic: another CPU's insert between our lookup and our insert --------------
@pytest.fixture(scope="module")
def hooked(bcc):
    """The switch compiled with -DTALB_TEST_INTERLEAVE: a test can make
    another CPU's insert of one tensor happen between this packet's lookup
    and its own insert (schemes/talb.h talb_other_cpu)."""
    with loaded_switch("racehook", N_PORTS, cflags=("-DTALB_TEST_INTERLEAVE",),
                       mtu=1600) as (name, dp, ifindex):
        yield Switch(name, dp, ifindex)


def _interleave_type():
    """Mirror of bpf's struct talb_interleave (schemes/talb.h, TALB_TEST_INTERLEAVE)."""
    import ctypes

    from datapath.structs import TensorEntry, TensorKey

    class TalbInterleave(ctypes.Structure):
        _fields_ = [("key", TensorKey), ("armed", ctypes.c_uint64), ("entry", TensorEntry)]
    return TalbInterleave


def arm_other_cpu(sw, tensor_id, port, *, done, layer=1, tensor_len=50):
    """The entry another CPU inserts for tensor_id, on port, at the moment
    this CPU is between its lookup and its insert."""
    import ctypes

    from datapath.maps import Map

    kind = _interleave_type()
    table = Map(sw.dp.map_fd("test_interleave"), ctypes.c_uint32, kind, owns_fd=False)
    x = kind()
    x.key.saddr = int.from_bytes(bytes(map(int, SRC.split("."))), "big")
    x.key.tensor_id = tensor_id
    x.armed = 1
    now = clock_ns()
    x.entry.first_seen_ns = x.entry.last_seen_ns = now
    x.entry.flags = 1 if done else 0
    x.entry.prev_port = sw.ifindex[port]
    x.entry.group_id = sw.gid
    x.entry.received = 1
    x.entry.tensor_len = tensor_len
    x.entry.layer = layer
    table[0] = x
    return lambda: table[0].armed


def test_first_packet_whose_insert_loses_follows_the_winner(hooked):
    """Packet 0 of a new tensor: TaLB places it on p4; meanwhile another
    CPU met packet 1 (unknown yet) and remembered the fallback's port p2.
    The old code kept p4 for packet 0: the tensor split."""
    sw = hooked
    sw.reset()
    sw.publish([1.0, 1.0, 1.0, 0.0])                    # new tensors: p4
    armed = arm_other_cpu(sw, 0x5EED0010, "p2", done=True)
    assert sw.send(pkt(hdr(0x5EED0010, layer=1, pkt_idx=0))) == "p2"
    assert not armed()                                  # the interleaving happened
    assert sw.send(pkt(hdr(0x5EED0010, layer=1, pkt_idx=2))) == "p2"
    c = sw.counters()
    assert c["talb_joined"] == 1 and c["talb_inserted"] == 0
    assert sw.live() == {}                              # not counted: not inserted


def test_midway_packet_whose_remember_loses_follows_the_winner(hooked):
    """Packet 1 of a tensor not in the table yet takes the fallback's port;
    meanwhile another CPU placed its packet 0 on p4. The old code sent
    packet 1 to the fallback's port anyway: the tensor split."""
    sw = hooked
    sw.reset()
    sport = next(s for s in range(41000, 42000) if ecmp_port(sw, s) != "p4")
    armed = arm_other_cpu(sw, 0x5EED0011, "p4", done=False)
    assert sw.send(pkt(hdr(0x5EED0011, layer=1, pkt_idx=1), sport=sport)) == "p4"
    assert not armed()
    c = sw.counters()
    assert c["talb_midstream"] == 1 and c["talb_joined"] == 1


# --- two CPUs at once --------------------------------------------------------------------
class TwoCpus:
    """Two threads, one pinned to each CPU, each in the switch's namespace,
    that run one packet each per trial, released together."""

    def __init__(self, sw, cpus):
        self.sw, self.cpus = sw, cpus
        self.start = threading.Barrier(3)
        self.done = threading.Barrier(3)
        self.packets: list[bytes | None] = [None, None]
        self.verdicts = [None, None]
        self.error: BaseException | None = None
        self.stop = False
        self.threads = [threading.Thread(target=self._worker, args=(i,), daemon=True)
                        for i in range(2)]
        for t in self.threads:
            t.start()

    def _worker(self, i):
        from pyroute2 import netns

        from datapath import bpf_syscall as sc

        try:
            os.sched_setaffinity(0, {self.cpus[i]})     # this thread only
            netns.setns(self.sw.netns)                  # this thread only
            ctx = sc.SkBuff(ifindex=self.sw.ifindex["p0"])
            while True:
                self.start.wait()
                if self.stop:
                    return
                self.verdicts[i] = sc.prog_test_run(self.sw.dp.prog_fd, self.packets[i],
                                                    ctx=ctx)[0]
                self.done.wait()
        except BaseException as exc:        # reported by the main thread
            self.error = exc
            self.start.abort()
            self.done.abort()

    def tx_per_cpu(self) -> list[dict[str, int]]:
        """tx packets per port name, for each of the two CPUs."""
        out = [{}, {}]
        for name in self.sw.port_names:
            pid = self.sw.port_names.index(name)
            per = self.sw.maps.port_stats.get_percpu(pid)
            for k, cpu in enumerate(self.cpus):
                out[k][name] = per[cpu].tx_packets
        return out

    def trial(self, a: bytes, b: bytes) -> tuple[str, str]:
        """Run a on the first CPU and b on the second at once: their ports."""
        before = self.tx_per_cpu()
        self.packets[:] = [a, b]
        self.start.wait()
        self.done.wait()
        after = self.tx_per_cpu()
        ports = []
        for k in range(2):
            assert self.verdicts[k] == TC_ACT_REDIRECT
            moved = [p for p in after[k] if after[k][p] != before[k][p]]
            assert len(moved) == 1, (k, moved)
            ports.append(moved[0])
        return ports[0], ports[1]

    def close(self):
        self.stop = True
        try:
            self.start.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture
def two_cpus(sw):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        skip_or_fail("two CPUs needed to race two packets")
    tc = TwoCpus(sw, cpus[:2])
    yield tc
    tc.close()
    if tc.error is not None:
        raise tc.error


def split_report(splits, trials, counters) -> str:
    keys = ("talb_midstream", "talb_joined", "talb_inserted", "talb_late", "talb_aged")
    return f"{len(splits)} of {trials} tensors split, e.g. {splits[:3]}; " + \
        ", ".join(f"{k}={counters.get(k)}" for k in keys)


def test_first_packet_and_next_packet_on_two_cpus_take_one_port(sw, two_cpus):
    """Packet 0 (a new tensor, placed by TaLB) and packet 1 (unknown yet:
    the fallback's port, remembered) of each tensor at once. Whichever
    insert wins places the tensor; the other packet follows it. TaLB's
    choice and the fallback's differ by construction (every PCM 1 but
    p4's; a flow ECMP sends elsewhere)."""
    sw.reset()
    sw.publish([1.0, 1.0, 1.0, 0.0])                    # new tensors: p4
    sport = next(s for s in range(41000, 42000) if ecmp_port(sw, s) != "p4")
    splits = []
    for t in range(TRIALS):
        tid = 0x7A000000 + t
        a = pkt(hdr(tid, layer=1, tensor_len=50, pkt_idx=0), sport=sport)
        b = pkt(hdr(tid, layer=1, tensor_len=50, pkt_idx=1), sport=sport)
        pa, pb = two_cpus.trial(a, b) if t % 2 else two_cpus.trial(b, a)[::-1]
        if pa != pb:
            splits.append((hex(tid), pa, pb))
    c = sw.counters()
    assert not splits, split_report(splits, TRIALS, c)
    # both orders happened: some packets 1 ran before their packet 0 was in
    assert c["talb_midstream"] > 0 and c["talb_inserted"] > 0


def test_last_packet_and_retransmission_on_two_cpus_take_one_port(sw, two_cpus):
    """A tensor's LAST packet on one CPU, a retransmission of an earlier one
    on the other. The old completion (delete, then re-insert done) left a
    gap in which the retransmission was "unknown midway" and took the
    fallback's port."""
    sw.reset()
    sport = next(s for s in range(41000, 42000) if ecmp_port(sw, s) != "p4")
    splits = []
    for t in range(TRIALS):
        tid = 0x7B000000 + t
        sw.publish([1.0, 1.0, 1.0, 0.0])                # placed on p4
        assert sw.send(pkt(hdr(tid, layer=1, tensor_len=8, pkt_idx=0), sport=sport)) == "p4"
        last = pkt(hdr(tid, layer=1, tensor_len=8, pkt_idx=7, last=True), sport=sport)
        again = pkt(hdr(tid, layer=1, tensor_len=8, pkt_idx=3), sport=sport)
        pa, pb = two_cpus.trial(last, again) if t % 2 else two_cpus.trial(again, last)[::-1]
        if pa != "p4" or pb != "p4":
            splits.append((hex(tid), pa, pb))
    c = sw.counters()
    assert not splits, split_report(splits, TRIALS, c)
    assert c["talb_midstream"] == 0 and c["talb_completed"] == TRIALS
    assert sw.live() == {}                  # each tensor left the live count once
