"""Fuzzing by numbers: generated frames (tests/fuzzframes.py) through the
switch program under each of the six schemes and through the host tagger,
with BPF_PROG_TEST_RUN, one test run per frame, properties checked per
frame and per batch.

How many: ``--fuzz-frames N`` (pytest option) or ``TALB_FUZZ_FRAMES=N``
frames per program (default 100,000: 700,000 over the seven programs,
~45 s on a 2-CPU machine; a quick local run: ``--fuzz-frames 5000``);
``TALB_FUZZ_SEED=S`` replays a run (the seed is printed, with the count,
in pytest's terminal summary: ``fuzz: N frames through M programs in T s,
seed S``). A failure names the seed, the batch and the frame (hex).

Switch (ports p0..p7 in a namespace of this module, as
tests/test_talb_switch.py; the egress a redirect took is learned from the
per-port tx counters, read after every redirected frame):

* the verdict is TC_ACT_OK, TC_ACT_SHOT or TC_ACT_REDIRECT; which one
  the frame's parse demands (fuzzframes.switch_parse: not IPv4, malformed,
  no route, unknown ingress -> OK and the frame untouched; an unstrippable
  TaLB option from a host port -> SHOT);
* a redirect moves exactly one port's tx counter by one: a port of the
  destination's forwarding group, up, never the ingress; the frame comes
  out as the scheme's rules say (unchanged between switches; the TaLB
  option, and CONGA's, stripped before a host port; CONGA's option pushed
  at the source leaf, its CE only raised elsewhere), with a right IPv4
  checksum;
* the counters add up, per batch: exactly one of pass_*, redirected,
  released, drop_* per frame (sum(pass_*) = frames passed, redirected =
  frames redirected, the drops = frames dropped), one decision_* per frame
  that reached a decision, the parse counters (opt_*, ip_options,
  ip_fragment, pass_not_ipv4, ...) as the model counts them, and for TaLB
  one outcome (hit, late, case1, case2, midstream, table_full, fallback)
  per frame of a multi-port group;
* map state, after each batch: the tensor table's occupancy <= the
  configured limit, and for TaLB the live counts (tensor_count
  TALB_COUNT_LIVE - SWEPT, group_state.live - group_swept.live per group
  and layer, group_state.tensors) equal the non-done entries of
  ``tensors``; other schemes leave the table empty.

Between batches the port states, PCMs, TaLB's fallback, idle timeout and
limit change, and the sweeper runs, so later batches meet a table in
another state.

Host tagger: fuzzframes.HostModel is bpf/host_tc.c in Python (tensor_wire
too: tagged packets and LAST per tensor id); every frame
must come out exactly as the model says -- byte-identical when untagged,
+12 bytes with a valid TaLB option and a right IPv4 checksum when tagged
(checked on its own as well) -- with verdict TC_ACT_OK, and the counters
must equal the model's, per batch.

A bug the tensor-state property led to has a test of its own
(test_remembered_done_entries_do_not_evict_live_tensors): done entries are
not held to tensor_limit, and once they filled the table -- then an LRU
map -- the kernel evicted live entries, whose counts leaked.

Frames the kernel refuses to test-run (shorter than 14 bytes, longer than
a page allows: 0- and 1-byte frames, 9000-byte jumbo frames) are checked
to be refused (EINVAL) and not counted as frames run.
"""
from __future__ import annotations

import ctypes
import errno
import os
import random
import struct
import time
from collections import Counter

import pytest

from common.c_constants import SCHEMES
from datapath.schemes.registry import fallback_choices
import fuzzframes as F
from helpers import ProgTestSwitch, loaded_switch

pytestmark = pytest.mark.bpf

TC_ACT_OK = 0
TC_ACT_SHOT = 2
TC_ACT_REDIRECT = 7
VERDICTS = {TC_ACT_OK: "ok", TC_ACT_SHOT: "shot", TC_ACT_REDIRECT: "redirect"}
DEFAULT_FRAMES = 100_000         # per program: 7 programs, 700,000 frames

# --- the switch under test -------------------------------------------------------------
N_PORTS = 8
HOST_PORTS = {"p0", "p5"}
DOWN_ALWAYS = {"p7"}             # in a group, never up: egress_down
SOURCES = ("198.18.0.1", "198.18.0.2", "198.18.0.3")
DST4 = "198.18.1.4"              # p1..p4: the uplinks
DST_HOST = "198.18.0.9"          # p5: a host port (the last hop)
DST_MIX = "198.18.2.2"           # p6 (switch-facing, an ingress: hairpin), p7 (down), p2
DST_W = "198.18.3.3"             # p3 twice, p4: a weighted group
GROUPS = {DST4: ("p1", "p2", "p3", "p4"), DST_HOST: ("p5",), DST_MIX: ("p6", "p7", "p2"),
          DST_W: ("p3", "p3", "p4")}
UNROUTED = ("198.18.9.9", "10.1.2.3")
INGRESSES = (("p0", 50), ("p5", 15), ("p6", 20), ("p1", 10), ("q0", 2))   # q0: not a port
LEAVES = {**{s: 0 for s in SOURCES}, DST_HOST: 0, DST4: 1, DST_MIX: 2, DST_W: 3}
SEED_HASH = 99


def fuzz_frames(config) -> int:
    n = config.getoption("--fuzz-frames", None)
    if n is None:
        n = int(os.environ.get("TALB_FUZZ_FRAMES", DEFAULT_FRAMES))
    return int(n)


def fuzz_seed() -> int:
    s = os.environ.get("TALB_FUZZ_SEED")
    return int(s, 0) if s else random.SystemRandom().getrandbits(32)


class Tally:
    """Frames run, per program, and the run's seed and time: printed at
    the end of the session."""

    def __init__(self, seed: int):
        self.seed = seed
        self.frames: dict[str, int] = {}
        self.rejected = 0
        self.kinds: Counter = Counter()
        self.verdicts: Counter = Counter()
        self.paths: dict = {}
        self.start = time.monotonic()
        self.seconds = 0.0

    def add(self, program: str, n: int) -> None:
        self.frames[program] = self.frames.get(program, 0) + n
        self.seconds = time.monotonic() - self.start

    def pytest_terminal_summary(self, terminalreporter):
        total = sum(self.frames.values())
        tr = terminalreporter
        tr.write_sep("-", "fuzz")
        tr.write_line(f"fuzz: {total} frames through {len(self.frames)} programs in "
                      f"{self.seconds:.1f} s, seed {self.seed}")
        tr.write_line("  per program: " + ", ".join(f"{k} {v}" for k, v in self.frames.items()))
        tr.write_line(f"  verdicts: {dict(sorted(self.verdicts.items()))}; refused by the "
                      f"kernel (not run): {self.rejected}")
        if tr.config.option.verbose > 0:
            for scheme, seen in self.paths.items():
                tr.write_line(f"  {scheme}: " + ", ".join(
                    f"{k} {v}" for k, v in sorted(seen.items()) if v))


@pytest.fixture(scope="module")
def tally(request):
    t = Tally(fuzz_seed())
    request.config.pluginmanager.register(t, "talb-fuzz-tally")
    return t


# --- one test run per frame, without allocations -----------------------------------------
class Runner:
    """BPF_PROG_TEST_RUN of one program on frame after frame: the attr,
    buffers and ctx made once (datapath.bpf_syscall.prog_test_run makes them
    per call, a third of the time of a run)."""

    OUT = F.TEST_RUN_MAX + 512

    def __init__(self, prog_fd: int):
        from datapath import bpf_syscall as sc

        self.sc = sc
        self.nr = sc._syscall_nr()
        self.din = ctypes.create_string_buffer(F.TEST_RUN_MAX + 16)
        self.dout = ctypes.create_string_buffer(self.OUT)
        self.ctx = sc.SkBuff()
        self.ctx_out = sc.SkBuff()
        self.attr = sc._TestRunAttr(prog_fd=prog_fd, repeat=1)
        self.attr.data_in = ctypes.addressof(self.din)
        self.attr.data_out = ctypes.addressof(self.dout)
        self.attr.ctx_in = ctypes.addressof(self.ctx)
        self.attr.ctx_out = ctypes.addressof(self.ctx_out)
        self.attr.ctx_size_in = self.attr.ctx_size_out = ctypes.sizeof(sc.SkBuff)
        self.abuf = ctypes.create_string_buffer(128)
        self.asize = ctypes.sizeof(self.attr)

    def run(self, frame: bytes, ifindex: int = 0, gso_size: int = 0):
        """(retval, frame out); OSError from the kernel (EINVAL for frames
        it refuses)."""
        n = len(frame)
        a = self.attr
        if n > len(self.din):
            din = ctypes.create_string_buffer(frame, n)   # only to be refused
            a.data_in = ctypes.addressof(din)
        else:
            ctypes.memmove(self.din, frame, n)
            a.data_in = ctypes.addressof(self.din)
        a.data_size_in = n
        a.data_size_out = self.OUT
        self.ctx.ifindex = ifindex
        self.ctx.gso_size = gso_size
        self.ctx.gso_segs = 2 if gso_size else 0
        ctypes.memmove(self.abuf, ctypes.addressof(a), self.asize)
        ret = self.sc._libc.syscall(self.nr, ctypes.c_int(self.sc.BPF_PROG_TEST_RUN),
                                    self.abuf, ctypes.c_uint(128))
        if ret < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        ctypes.memmove(ctypes.addressof(a), self.abuf, self.asize)
        return a.retval, self.dout.raw[:a.data_size_out]


class TxReader:
    """tx_packets of ports 0..n-1 (port_stats, per CPU, summed), with one
    BPF_MAP_LOOKUP_BATCH."""

    def __init__(self, map_fd: int, n: int):
        from datapath import bpf_syscall as sc
        from datapath.maps import possible_cpus

        self.sc = sc
        self.nr = sc._syscall_nr()
        self.n = n
        self.ncpu = possible_cpus()
        self.stride = 32                                  # struct port_stats
        self.keys = (ctypes.c_uint32 * n)()
        self.vals = ctypes.create_string_buffer(n * self.ncpu * self.stride)
        self.out_batch = ctypes.c_uint32()
        self.attr = sc._MapBatchAttr(in_batch=0, out_batch=ctypes.addressof(self.out_batch),
                                     keys=ctypes.addressof(self.keys),
                                     values=ctypes.addressof(self.vals), count=n,
                                     map_fd=map_fd)
        self.abuf = ctypes.create_string_buffer(128)

    def read(self) -> tuple:
        self.attr.count = self.n
        ctypes.memmove(self.abuf, ctypes.addressof(self.attr), ctypes.sizeof(self.attr))
        ret = self.sc._libc.syscall(self.nr, ctypes.c_int(self.sc.BPF_MAP_LOOKUP_BATCH),
                                    self.abuf, ctypes.c_uint(128))
        if ret < 0 and ctypes.get_errno() != errno.ENOENT:   # ENOENT: the last batch
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        q = memoryview(self.vals).cast("B").cast("Q")
        per_port = self.ncpu * 4
        return tuple(sum(q[i * per_port + c * 4 + 2] for c in range(self.ncpu))
                     for i in range(self.n))


# --- the switch -----------------------------------------------------------------------------
class FuzzSwitch(ProgTestSwitch):
    def __init__(self, netns_name, dp, ifindex):
        super().__init__(netns_name, dp, ifindex, N_PORTS)
        self.runner = Runner(dp.prog_fd)
        self.txr = TxReader(self.maps.port_stats.fd, N_PORTS)
        self.port_id = {n: i for i, n in enumerate(self.port_names)}
        self.groups = {F.ip4(d): tuple(self.port_id[p] for p in ps) for d, ps in GROUPS.items()}
        self.down = set(DOWN_ALWAYS)
        self.scheme = "ecmp"

    def port_rows(self):
        return [(n, self.ifindex[n], n in HOST_PORTS, n not in self.down)
                for n in self.port_names]

    def group_ifindexes(self):
        return {d: [self.ifindex[p] for p in ps] for d, ps in GROUPS.items()}

    def reset(self, scheme: str):
        from datapath import control

        for m in ("counters", "port_stats", "flowlets", "port_queue", "drill_mem",
                  "conga_dre", "conga_to_leaf", "conga_from_leaf", "conga_fb_cursor"):
            self.maps[m].clear()
        for gid in list(self.maps.groups.keys()):
            self.maps.groups.delete(gid)
        for k in list(self.maps.fwd.keys()):
            self.maps.fwd.delete(k)
        control.clear_tensor_table(self.maps)
        self.down = set(DOWN_ALWAYS)
        control.program_switch(self.maps, self.port_rows(), self.group_ifindexes(),
                               scheme="ecmp", hash_seed=SEED_HASH)
        control.set_release(self.maps, False)
        control.set_port_rates(self.maps, {self.ifindex[n]: (100_000_000, 150_000, 15_000)
                                           for n in self.port_names})
        control.set_conga_leaves(self.maps, 0, LEAVES)
        control.set_talb_config(self.maps, fallback="ecmp", tensor_limit=64,
                                tensor_idle_us=1_000_000, n_bands=4, layers_per_band=2)
        control.set_scheme(self.maps, scheme)
        self.scheme = scheme
        from datapath.structs import IPv4Key

        self.gid = {F.ip4(d): self.maps.fwd[IPv4Key.of(d)] for d in GROUPS}

    def shake(self, rng: random.Random):
        """Between batches: other ports down, new PCMs, TaLB's knobs, a sweep."""
        from datapath import control

        self.down = set(DOWN_ALWAYS) | set(rng.choice(((), (), ("p4",), ("p2", "p3"),
                                                       ("p1", "p2", "p3", "p4"))))
        control.program_switch(self.maps, self.port_rows(), self.group_ifindexes(),
                               scheme=None)
        # slow links: DRILL's queues and CONGA's DRE metrics fill (CE raised)
        rate = rng.choice((100_000_000, 1_000_000, 100_000))
        control.set_port_rates(self.maps, {self.ifindex[n]: (rate, 150_000, 15_000)
                                           for n in self.port_names})
        for d, ps in GROUPS.items():
            if len(ps) > 1 and rng.random() < 0.7:
                ifs = [self.ifindex[p] for p in ps]
                control.publish_pcm(self.maps, ifs, {i: rng.random() for i in ifs},
                                    threshold=rng.choice((None, rng.random())))
        if self.scheme == "talb":
            control.set_talb_config(
                self.maps, fallback=rng.choice(fallback_choices()),
                tensor_limit=rng.choice((1, 8, 64, 200)),
                tensor_idle_us=rng.choice((50, 2000, 1_000_000)))
            control.sweep_tensors(self.maps, idle_s=rng.choice((0, 0.001, 3600)))


@pytest.fixture(scope="module")
def fsw(bcc):
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})     # per-CPU rng and scratch: one CPU, a reproducible run
    try:
        with loaded_switch("fuzz", N_PORTS) as (name, dp, ifindex):
            yield FuzzSwitch(name, dp, ifindex)
    finally:
        os.sched_setaffinity(0, cpus)


def _hexdump(frame: bytes) -> str:
    return frame.hex()


class SwitchCheck:
    """Per-frame checks and the expectations a batch's counters must meet."""

    def __init__(self, sw: FuzzSwitch, scheme: str, seed: int, batch: int):
        self.sw = sw
        self.scheme = scheme
        self.where = f"seed {seed}, scheme {scheme}, batch {batch}"
        self.exp = Counter()         # exact counter values expected
        self.verdicts = Counter()
        self.decided = 0             # frames that reached a decision
        self.decided_single = 0
        self.decided_multi_tagged = 0
        self.decided_multi_untagged = 0
        self.ok_decided = 0          # passed after a decision (egress down, hairpin)
        self.push_room = 0           # CONGA pushes that cannot fit (IHL)
        self.run = 0                 # frames run (not refused by the kernel)
        self.refused = 0
        self.up_ids = {sw.port_id[p] for p in sw.port_names if p not in sw.down}

    def fail(self, msg, frame, ingress, kind):
        pytest.fail(f"{msg}\n  {self.where}, kind {kind}, ingress {ingress}, "
                    f"{len(frame)} B frame:\n  {_hexdump(frame)}", pytrace=False)

    def frame(self, frame: bytes, ingress: str, kind: str, tx_before: tuple) -> tuple:
        """Run one frame, check it: the tx counters after it."""
        sw = self.sw
        if F.kernel_refuses(frame):
            try:
                sw.runner.run(frame, sw.ifindex[ingress])
            except OSError as exc:
                if exc.errno == errno.EINVAL:
                    self.refused += 1
                    return tx_before
                raise
            self.fail("the kernel ran a frame it should refuse", frame, ingress, kind)
        self.run += 1
        p = F.switch_parse(frame)
        ret, out = sw.runner.run(frame, sw.ifindex[ingress])
        self.verdicts[ret] += 1
        if ret not in VERDICTS:
            self.fail(f"verdict {ret} is not OK/SHOT/REDIRECT", frame, ingress, kind)
        known = ingress in sw.port_id

        def expect_pass(reason):
            self.exp[reason] += 1
            if ret != TC_ACT_OK or out != frame:
                self.fail(f"expected TC_ACT_OK ({reason}) with the frame untouched, got "
                          f"{VERDICTS[ret]}{'' if out == frame else ', frame changed'}",
                          frame, ingress, kind)
            return tx_before

        if not known:
            return expect_pass("pass_unknown_ingress")
        self.exp.update(p.counts)
        if p.reason:
            return expect_pass(p.reason)
        if ingress in HOST_PORTS and p.seen and not p.strippable:
            self.exp["drop_opt_position"] += 1
            if ret != TC_ACT_SHOT:
                self.fail(f"unstrippable TaLB option from host port: expected SHOT, got "
                          f"{VERDICTS[ret]}", frame, ingress, kind)
            return tx_before
        group = sw.groups.get(p.daddr)
        if group is None:
            return expect_pass("pass_no_route")
        self.decided += 1
        if len(group) == 1:
            self.decided_single += 1
        elif p.tagged:
            self.decided_multi_tagged += 1
        else:
            self.decided_multi_untagged += 1
        if ret == TC_ACT_OK:
            self.ok_decided += 1
            if out != frame:
                self.fail("passed (TC_ACT_OK) but changed", frame, ingress, kind)
            return tx_before
        if ret == TC_ACT_SHOT:
            if not (p.seen or self.scheme == "conga"):
                self.fail("dropped without a TaLB option (not CONGA)", frame, ingress, kind)
            return tx_before
        # redirected: exactly one port's tx moved, by one
        tx = sw.txr.read()
        moved = [i for i in range(N_PORTS) if tx[i] != tx_before[i]]
        if len(moved) != 1 or tx[moved[0]] - tx_before[moved[0]] != 1:
            self.fail(f"redirect moved tx counters {[(i, tx[i] - tx_before[i]) for i in moved]}"
                      f" (expected one port, +1)", frame, ingress, kind)
        egress = moved[0]
        name = sw.port_names[egress]
        if egress not in group:
            self.fail(f"redirected to {name}, not in the group {group} of "
                      f"{'.'.join(map(str, p.daddr))}", frame, ingress, kind)
        if name == ingress:
            self.fail(f"redirected back to the ingress {name}", frame, ingress, kind)
        if egress not in self.up_ids:
            self.fail(f"redirected to {name}, which is down", frame, ingress, kind)
        self.check_output(p, frame, out, ingress, kind, name, group.index(egress), group)
        return tx

    def check_output(self, p, frame, out, ingress, kind, egress, idx, group):
        conga = self.scheme == "conga"
        csum_ok = F.ip_checksum_ok(frame[14:14 + p.ihl * 4])
        if egress in HOST_PORTS:
            want = frame
            strip = p.strippable
            if conga and p.conga:
                want = F.strip_first_option(want, F.OPT_CONGA_LEN)
                strip = (want[14] & 0xF == 8 and want[34] == F.OPT_TALB
                         and want[35] == F.OPT_TALB_LEN)
            if p.seen:
                if not strip:
                    self.fail("an unstrippable TaLB option was let out to a host port",
                              frame, ingress, kind)
                want = F.strip_first_option(want, F.OPT_TALB_LEN)
            self._same(want, out, csum_ok, "last hop", frame, ingress, kind)
            return
        if not conga:
            if out != frame:
                self.fail("changed between switches", frame, ingress, kind)
            return
        if ingress in HOST_PORTS and not p.conga:          # the source leaf pushes
            if p.ihl + 2 > 15:
                self.push_room += 1
                if out != frame:
                    self.fail("CONGA push without room changed the frame", frame, ingress, kind)
                return
            o = out[34:42]
            lbtags = [i for i, g in enumerate(group) if g == group[idx]]
            if (len(out) != len(frame) + 8 or o[0] != F.OPT_CONGA or o[1] != 8 or o[2] != 0
                    or o[3] not in lbtags or o[4] > 7 or o[7] & 3 != 1):
                self.fail(f"CONGA option pushed wrong: {out[:50].hex()}", frame, ingress, kind)
            want = F.strip_first_option(out, 8)[:14 + 20]
            rest_ok = out[42:] == frame[34:] and out[:14] == frame[:14]
            if not rest_ok or want[15:24] != frame[15:24] or want[26:34] != frame[26:34]:
                self.fail("CONGA push changed the rest of the frame", frame, ingress, kind)
            if csum_ok and not F.ip_checksum_ok(out[14:14 + (out[14] & 0xF) * 4]):
                self.fail("CONGA push left a bad IPv4 checksum", frame, ingress, kind)
            return
        if p.conga and out != frame:                       # CE raised, nothing else
            if not (len(out) == len(frame) and out[:24] == frame[:24]
                    and out[26:38] == frame[26:38] and out[39:] == frame[39:]
                    and out[38] > frame[38]):
                self.fail("CONGA hop changed more than CE (up)", frame, ingress, kind)
            if csum_ok and not F.ip_checksum_ok(out[14:14 + p.ihl * 4]):
                self.fail("CONGA CE raise left a bad IPv4 checksum", frame, ingress, kind)
            return
        if out != frame:
            self.fail("changed between switches", frame, ingress, kind)

    def _same(self, want, out, csum_ok, what, frame, ingress, kind):
        if csum_ok:
            if out != want:
                self.fail(f"{what}: got {out[:60].hex()}\n  want {want[:60].hex()}",
                          frame, ingress, kind)
        elif len(out) != len(want) or out[:24] != want[:24] or out[26:] != want[26:]:
            self.fail(f"{what} (bad checksum in): got {out[:60].hex()}\n  want "
                      f"{want[:60].hex()}", frame, ingress, kind)

    def counters(self, before: dict, after: dict, n: int):
        d = {k: after[k] - before[k] for k in after}
        v = self.verdicts
        problems = []

        def eq(what, got, want):
            if got != want:
                problems.append(f"{what}: {got} != {want}")

        for k, want in self.exp.items():
            if k == "drop_opt_position":
                continue
            eq(k, d[k], want)
        for k in ("pass_not_ipv4", "pass_malformed", "pass_no_route", "pass_unknown_ingress",
                  "opt_tagged", "opt_truncated", "opt_bad_len", "opt_bad_version",
                  "opt_zero_len", "opt_overrun", "opt_not_first", "ip_options", "ip_fragment"):
            if k not in self.exp:
                eq(k, d[k], 0)
        passed = sum(x for k, x in d.items() if k.startswith("pass_"))
        eq("sum(pass_*) vs frames passed", passed, v[TC_ACT_OK])
        eq("redirected vs frames redirected", d["redirected"], v[TC_ACT_REDIRECT])
        eq("released (release off)", d["released"], 0)
        eq("clone_fail", d["clone_fail"], 0)
        drops = d["drop_opt_position"] + d["drop_strip_fail"] + d["conga_drop_strip_fail"]
        extra = v[TC_ACT_SHOT] - drops
        if not 0 <= extra <= d["conga_push_fail"]:
            problems.append(f"frames dropped {v[TC_ACT_SHOT]} != drop_* {drops} "
                            f"(+ conga_push_fail {d['conga_push_fail']})")
        if d["drop_opt_position"] < self.exp["drop_opt_position"]:
            problems.append(f"drop_opt_position {d['drop_opt_position']} < ingress drops "
                            f"{self.exp['drop_opt_position']}")
        eq("frames", v[TC_ACT_OK] + v[TC_ACT_SHOT] + v[TC_ACT_REDIRECT], n)
        decisions = sum(x for k, x in d.items() if k.startswith("decision_"))
        eq("sum(decision_*) vs frames decided", decisions, self.decided)
        eq("decision_single", d["decision_single"], self.decided_single)
        eq("passed after a decision vs egress_down + hairpin + group_empty",
           d["pass_egress_down"] + d["pass_hairpin"] + d["pass_group_empty"], self.ok_decided)
        eq("scheme_fallback", d["scheme_fallback"], 0)
        multi = self.decided_multi_tagged + self.decided_multi_untagged
        if self.scheme == "talb":
            outcomes = ("talb_hit", "talb_late", "talb_case1", "talb_case2",
                        "talb_midstream", "talb_table_full")
            eq("talb outcomes of tagged frames", sum(d[k] for k in outcomes),
               self.decided_multi_tagged)
            eq("talb_fallback vs untagged frames", d["talb_fallback"],
               self.decided_multi_untagged)
            eq("decision_talb", d["decision_talb"],
               d["talb_hit"] + d["talb_late"] + d["talb_case1"] + d["talb_case2"])
            fb = sum(d[f"decision_{s}"] for s in fallback_choices())
            eq("fallback decisions", fb, multi - d["decision_talb"])
        else:
            eq(f"decision_{self.scheme}", d[f"decision_{self.scheme}"], multi)
            for k in ("talb_hit", "talb_case1", "talb_case2", "talb_inserted", "talb_fallback"):
                eq(k, d[k], 0)
        if self.scheme == "conga":
            eq("conga_push_fail >= pushes without room", min(d["conga_push_fail"],
                                                             self.push_room), self.push_room)
        if problems:
            pytest.fail(f"counters do not add up ({self.where}, {n} frames):\n  "
                        + "\n  ".join(problems) + "\n  deltas: "
                        + str({k: x for k, x in d.items() if x}), pytrace=False)


def check_tensor_state(sw: FuzzSwitch, scheme: str, where: str, occ_start: int = 0) -> int:
    """TaLB's live counts equal the non-done entries, and the occupancy is
    within the limit -- or within what it was at the batch's start
    (``occ_start``), when a shake lowered the limit below it: the limit
    stops inserts, it evicts nothing. Returns the occupancy."""
    from datapath import control
    from datapath.schemes import talb as tm

    cfg = control.read_config(sw.maps)
    entries = list(sw.maps.tensors.items())
    live = [(k, e) for k, e in entries if not e.flags & 1]
    occ = control.tensor_occupancy(sw.maps)
    raw = (sw.maps.tensor_count.get(0, 0) - sw.maps.tensor_count.get(1, 0)) & 0xFFFFFFFF
    problems = []
    if scheme != "talb":
        if entries or raw:
            problems.append(f"{len(entries)} tensor entries, count {raw} under {scheme}")
    else:
        if raw != len(live):
            problems.append(f"tensor_count live - swept = {raw} != {len(live)} live entries")
        if occ > max(cfg["tensor_limit"], occ_start):
            problems.append(f"occupancy {occ} > limit {cfg['tensor_limit']} "
                            f"(and > {occ_start} at the batch's start)")
        want: dict = {}
        for k, e in live:
            want.setdefault(e.group_id, Counter())[e.layer] += 1
        for k, e in entries:
            if e.group_id not in sw.gid.values():
                problems.append(f"entry {k} in group {e.group_id}, not installed")
            elif e.received < 1 or e.tensor_len < 1:
                problems.append(f"entry {k}: received {e.received}, tensor_len {e.tensor_len}")
        for gid in set(sw.gid.values()):
            st, swp = sw.maps.group_state.get(gid), sw.maps.group_swept.get(gid)
            got = {l: c for l, c in tm.live_counts(st, swp).items() if c}
            w = dict(want.get(gid, {}))
            if got != w:
                problems.append(f"group {gid}: live layers {got} != entries {w}")
            n = (st.tensors - swp.tensors) & 0xFFFFFFFF
            if n != sum(w.values()):
                problems.append(f"group {gid}: tensors {n} != {sum(w.values())} live entries")
    if problems:
        pytest.fail(f"tensor state inconsistent ({where}):\n  " + "\n  ".join(problems),
                    pytrace=False)
    return occ


def switch_net():
    return F.SwitchNet(tuple(F.ip4(s) for s in SOURCES), tuple(F.ip4(d) for d in GROUPS),
                       tuple(F.ip4(d) for d in UNROUTED), INGRESSES)


BATCH = 2500


def fuzz_switch(sw: FuzzSwitch, scheme: str, seed: int, frames: int, tally: Tally):
    from pyroute2 import netns

    from datapath import control

    rng = random.Random(f"{seed}-{scheme}")
    gen = F.SwitchFrames(rng, switch_net())
    sw.reset(scheme)
    done = batch = occ = 0
    seen = Counter()               # counter totals: which paths the frames took
    while done < frames:
        n = min(BATCH, frames - done)
        chk = SwitchCheck(sw, scheme, seed, batch)
        before = control.read_counters(sw.maps)
        tx = sw.txr.read()
        netns.pushns(sw.netns)
        try:
            while chk.run < n:
                frame, ingress, kind = gen.next()
                tally.kinds[kind] += 1
                tx = chk.frame(frame, ingress, kind, tx)
        finally:
            netns.popns()
        if sw.txr.read() != tx:
            pytest.fail(f"tx counters moved after the last redirect ({chk.where})",
                        pytrace=False)
        after = control.read_counters(sw.maps)
        chk.counters(before, after, n)
        seen.update({k: after[k] - before[k] for k in after})
        occ = check_tensor_state(sw, scheme, chk.where, occ)
        for r, c in chk.verdicts.items():
            tally.verdicts[f"switch {VERDICTS.get(r, r)}"] += c
        done += n
        batch += 1
        tally.add(f"switch/{scheme}", n)
        tally.rejected += chk.refused
        sw.shake(rng)
        occ = check_tensor_state(sw, scheme, chk.where + " after the shake", occ)
    tally.paths[scheme] = seen
    return seen


@pytest.mark.parametrize("scheme", tuple(SCHEMES))
def test_switch_fuzz(fsw, scheme, tally, request):
    fuzz_switch(fsw, scheme, tally.seed, fuzz_frames(request.config), tally)


def test_kernel_refuses_frames_it_cannot_run(fsw, tally):
    """0..13-byte and 9000-byte frames never reach the program: the kernel
    refuses the test run (EINVAL), and no counter moves."""
    from pyroute2 import netns

    from datapath import control

    before = control.read_counters(fsw.maps)
    netns.pushns(fsw.netns)
    try:
        for frame, kind in F.rejected_frames(random.Random(tally.seed)):
            with pytest.raises(OSError) as exc:
                fsw.runner.run(frame, fsw.ifindex["p0"])
            assert exc.value.errno == errno.EINVAL, (kind, exc.value)
            tally.rejected += 1
            assert F.kernel_refuses(frame), kind
        # and the largest frame it takes is TEST_RUN_MAX
        ret, _ = fsw.runner.run(b"\xff" * 12 + b"\x88\xcc" + bytes(F.TEST_RUN_MAX - 14),
                                fsw.ifindex["p0"])
        assert ret == TC_ACT_OK
        with pytest.raises(OSError):
            fsw.runner.run(bytes(F.TEST_RUN_MAX + 1), fsw.ifindex["p0"])
    finally:
        netns.popns()
    after = control.read_counters(fsw.maps)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == \
        {"pass_not_ipv4": 1}


# --- the host tagger ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def host_dp(bcc, tmp_path_factory):
    from datapath.host_loader import HostDatapath

    dp = HostDatapath(None, tmp_path_factory.mktemp("unused-pins")).load()
    try:
        yield dp
    finally:
        dp.close()


def install_host_plan(maps, rings: dict, isns: dict):
    from datapath.host_maps import HostDesc, HostFlowKey, HostIsn, HostRing

    maps.flow_isn.clear()
    maps.flow_rings.clear()
    maps.tensor_wire.clear()
    for (s, d, sp, dp), (isn, flags) in isns.items():
        maps.flow_isn[HostFlowKey(int.from_bytes(s, "big"), int.from_bytes(d, "big"), sp, dp)] = \
            HostIsn(isn, flags)
    for (s, d, sp, dp), descs in rings.items():
        ring = HostRing()
        for i, (start, end, tid, lp, mss, layer) in enumerate(descs):
            ring.desc[i] = HostDesc(start, end, tid, lp, mss, layer)
        maps.flow_rings[HostFlowKey(int.from_bytes(s, "big"), int.from_bytes(d, "big"), sp, dp)] = \
            ring


def check_tagged(inp: bytes, out: bytes) -> str | None:
    """What is wrong with ``out`` as ``inp`` tagged (None: nothing)."""
    if len(out) != len(inp) + 12:
        return f"length {len(out)} != {len(inp)} + 12"
    if out[:14] != inp[:14] or out[46:] != inp[34:]:
        return "bytes outside the IPv4 header changed"
    if out[14] != 0x48 or out[34] != F.OPT_TALB or out[35] != 12:
        return "not IHL 8 with the TaLB option first"
    if out[41] & 3 != 1:
        return "option version != 1"
    if struct.unpack_from("!H", out, 38 + 4)[0] == 0:
        return "tensor_len 0"
    if not F.ip_checksum_ok(out[14:46]):
        return "bad IPv4 checksum"
    if struct.unpack_from("!H", out, 16)[0] != (struct.unpack_from("!H", inp, 16)[0] + 12) \
            & 0xFFFF:
        return "total length not + 12"
    return None


HOST_BATCH = 1000


def test_host_tagger_fuzz(host_dp, tally, request):
    from datapath.host_maps import HostFlowKey

    frames = fuzz_frames(request.config)
    seed = tally.seed
    rng = random.Random(f"{seed}-host")
    gen = F.HostFrames(rng)
    state = F.HostState()
    model = F.HostModel(state)
    runner = Runner(host_dp.prog_fd)
    maps = host_dp.maps
    maps.counters.clear()
    done = batch = 0
    while done < frames:
        n = min(HOST_BATCH, frames - done)
        where = f"seed {seed}, host, batch {batch}"
        rings, isns = gen.new_plan(state)
        install_host_plan(maps, rings, isns)
        before = maps.read_counters()
        want = Counter()
        verdicts = Counter()
        ran = 0
        while ran < n:
            frame, gso, kind = gen.next()
            tally.kinds[f"host {kind}"] += 1
            if F.kernel_refuses(frame):
                with pytest.raises(OSError) as exc:
                    runner.run(frame, 0, gso)
                assert exc.value.errno == errno.EINVAL, (where, frame.hex())
                tally.rejected += 1
                continue
            ran += 1
            reason, exp = model.run(frame, gso)
            want[reason] += 1
            ret, out = runner.run(frame, 0, gso)
            verdicts[ret] += 1
            if ret != TC_ACT_OK or out != exp:
                pytest.fail(f"host tagger: verdict {ret}, expected OK ({reason})"
                            f"{'' if out == exp else ' and other bytes'}\n  {where}, kind "
                            f"{kind}, gso {gso}, {len(frame)} B frame:\n  {frame.hex()}\n"
                            f"  got  {out[:80].hex()}\n  want {exp[:80].hex()}",
                            pytrace=False)
            if reason == "tagged":
                bad = check_tagged(frame, out)
                if bad:
                    pytest.fail(f"host tagger: tagged frame {bad}\n  {where}: {frame.hex()}",
                                pytrace=False)
            elif len(out) != len(frame):
                pytest.fail(f"host tagger: untagged frame changed length ({where})",
                            pytrace=False)
        after = maps.read_counters()
        got = Counter({k: after[k] - before[k] for k in after if after[k] != before[k]})
        if got != want or sum(got.values()) != n:
            pytest.fail(f"host counters ({where}): {dict(got)} != model {dict(want)}",
                        pytrace=False)
        # the maps as the model says (ISNs learned, rings dropped by SYNs)
        for key in gen.flows:
            fk = HostFlowKey(int.from_bytes(key[0], "big"), int.from_bytes(key[1], "big"),
                         key[2], key[3])
            isn = maps.flow_isn.get(fk)
            got_isn = None if isn is None else (isn.isn, isn.flags)
            if got_isn != state.isn.get(key):
                pytest.fail(f"flow_isn of {key}: {got_isn} != model {state.isn.get(key)} "
                            f"({where})", pytrace=False)
            if (maps.flow_rings.get(fk) is None) != (key not in state.rings):
                pytest.fail(f"flow_rings of {key}: present != model ({where})", pytrace=False)
        # every tagged packet stamped its tensor's egress entry, and nothing else did
        got_wire = {tid: (w.packets, w.last_seen,
                          w.first_ns <= w.latest_ns and (not w.last_ns or
                                                         w.first_ns <= w.last_ns <= w.latest_ns))
                    for tid, w in maps.tensor_wire.items()}
        want_wire = {tid: (n, last, True) for tid, (n, last) in state.wire.items()}
        if got_wire != want_wire:
            diff = {t: (got_wire.get(t), want_wire.get(t)) for t in set(got_wire) | set(want_wire)
                    if got_wire.get(t) != want_wire.get(t)}
            pytest.fail(f"tensor_wire ({where}): (map, model) differ for {len(diff)} tensors: "
                        f"{dict(list(diff.items())[:5])}", pytrace=False)
        for r, c in verdicts.items():
            tally.verdicts[f"host {VERDICTS.get(r, r)}"] += c
        tally.verdicts["host tagged"] += want["tagged"]
        done += n
        batch += 1
        tally.add("host", n)


# --- the frames themselves, against scapy (no kernel needed) -----------------------------------
def test_generated_frames_read_the_same_in_scapy():
    """A sample of the generated frames, dissected by scapy: the same IHL,
    addresses, checksum verdict and (first, valid) TaLB option as
    fuzzframes.switch_parse reads; and the builders' IPv4 headers are
    scapy's, byte for byte."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.utils import checksum

    from common.wire import TaLBHeader, talb_header_of

    rng = random.Random(1234)
    gen = F.SwitchFrames(rng, switch_net())
    seen = Counter()
    for _ in range(3000):
        frame, _ingress, kind = gen.next()
        p = F.switch_parse(frame)
        if p.reason or F.kernel_refuses(frame):
            continue
        ip = Ether(frame)[IP]
        assert (ip.version, ip.ihl) == (4, p.ihl), kind
        assert (ip.src, ip.dst) == (".".join(map(str, p.saddr)), ".".join(map(str, p.daddr)))
        hdr = frame[14:14 + p.ihl * 4]
        assert (checksum(hdr) == 0) == F.ip_checksum_ok(hdr), (kind, frame.hex())
        if p.tagged and p.opt_offset == 0:
            assert talb_header_of(Ether(frame)) == TaLBHeader(
                p.tensor_id, p.layer, p.tensor_len, p.pkt_idx, p.last), (kind, frame.hex())
            seen["tagged"] += 1
        seen["ipv4"] += 1
    assert seen["tagged"] > 100 and seen["ipv4"] > 1500, seen
    # builders against scapy's build
    for i in range(200):
        opts = rng.choice((b"", F.talb_opt(rng.getrandbits(32), rng.randrange(256),
                                           rng.randint(1, 9), rng.randrange(9),
                                           rng.random() < 0.5), b"\x01\x01\x01\x01"))
        payload = rng.randbytes(rng.randrange(100))
        ident, sport = rng.getrandbits(16), rng.randint(1, 65535)
        ours = F.eth(F.ETH_P_IP, F.ipv4(F.ip4("198.18.0.1"), F.ip4("198.18.1.4"), 6,
                                        F.tcp(sport, 5201, 7, 9, F.TCP_ACK, payload),
                                        opts, ident=ident), dst=F.MAC_B, src=F.MAC_A)
        theirs = bytes(Ether(dst="02:00:00:00:00:0b", src="02:00:00:00:00:0a")
                       / IP(src="198.18.0.1", dst="198.18.1.4", id=ident, flags="DF",
                            options=[Raw(opts)] if opts else [])
                       / TCP(sport=sport, dport=5201, seq=7, ack=9, flags="A", window=65535)
                       / payload)
        n = 14 + 20 + len(opts)
        assert ours[:n] == theirs[:n], (ours[:n].hex(), theirs[:n].hex())
        assert ours[n:n + 16] == theirs[n:n + 16]            # TCP up to its checksum
        assert ours[n + 20:] == theirs[n + 20:]


# --- found by the fuzzer ---------------------------------------------------------------------
def test_remembered_done_entries_do_not_evict_live_tensors(fsw):
    """Done entries (completed tensors, and unknown tensors met midway:
    talb_remember_midstream) are not held to tensor_limit. When the table
    was an LRU map, enough of them within the idle timeout filled it and
    the kernel evicted the least recently used entries -- live ones
    included, never accounted for: tensor_count and group_state.live
    counted them for ever. The table is a plain hash now: done entries stop
    at the map's size, live ones stay, and a new tensor with no room takes
    the fallback. 64 live tensors, then 2 x TALB_TENSOR_MAP_SIZE packets of
    unknown tensors met midway (pkt_idx 1)."""
    from pyroute2 import netns

    from common.c_constants import CONST
    from datapath import control

    sw = fsw
    sw.reset("talb")
    control.set_talb_config(sw.maps, tensor_limit=64, tensor_idle_us=600_000_000)
    src, dst = F.ip4(SOURCES[0]), F.ip4(DST4)

    def tagged(tid, idx):
        return F.eth(F.ETH_P_IP, F.ipv4(src, dst, 6, F.tcp(40000, 5201, payload=b"x" * 8),
                                        F.talb_opt(tid, 1, 100, idx)))

    netns.pushns(sw.netns)
    try:
        for tid in range(64):
            assert sw.runner.run(tagged(tid, 0), sw.ifindex["p6"])[0] == TC_ACT_REDIRECT
        assert control.tensor_occupancy(sw.maps) == 64
        for tid in range(1000, 1000 + 2 * CONST["TALB_TENSOR_MAP_SIZE"]):
            sw.runner.run(tagged(tid, 1), sw.ifindex["p6"])
        control.set_talb_config(sw.maps, tensor_limit=128)
        before = control.read_counters(sw.maps)["talb_table_full"]
        # a new tensor finds the map full of done entries: the fallback, not a drop
        assert sw.runner.run(tagged(99, 0), sw.ifindex["p6"])[0] == TC_ACT_REDIRECT
        assert control.read_counters(sw.maps)["talb_table_full"] == before + 1
    finally:
        netns.popns()
    check_tensor_state(sw, "talb", "after 64 live tensors and a map's worth of done entries")
    assert control.tensor_occupancy(sw.maps) == 64
    assert len(control.read_tensor_table(sw.maps)) == 64
