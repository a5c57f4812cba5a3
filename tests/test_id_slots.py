"""Host-wide unique tensor ids (workload/id_slots.py): claimed worker slots,
across threads, processes, a SIGKILLed holder and fork."""
from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workload.id_slots import IdSlotsExhausted, SlotIds, host_ids
from workload.snowflake import Snowflake

REPO = Path(__file__).resolve().parent.parent
WORKER_MASK = 0xF


class FakeClock:
    def __init__(self, ns: int = 5_000_000):
        self.ns = ns

    def __call__(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.ns += max(int(seconds * 1e9), 1)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["id", "id", "id", "release", "tick"])),
                    min_size=1, max_size=300))
def test_property_no_id_repeats_across_holders_and_reclaims(tmp_path_factory, ops):
    """Six holders of one host's slots (4 slots: two must wait for a release)
    draw ids, give their slots back and claim again, all in one clock tick
    or a few: no id is ever handed out twice, even when a slot passes to a
    new holder in the tick its previous holder last used."""
    directory = tmp_path_factory.mktemp("ids")
    clock = FakeClock()
    holders = [SlotIds(directory, worker_bits=2, timeout=0, clock=clock, sleep=clock.sleep)
               for _ in range(6)]
    seen: dict[int, int] = {}
    held = set()
    for who, op in ops:
        h = holders[who]
        if op == "tick":
            clock.ns += 1_000_000
        elif op == "release":
            h.release()
            held.discard(who)
        else:
            if who not in held and len(held) == 4:
                with pytest.raises(IdSlotsExhausted):
                    h.next_id()
                continue
            tid = h.next_id()
            held.add(who)
            assert tid not in seen, f"id {tid:#x} handed out twice (holders {seen[tid]} and {who})"
            seen[tid] = who
    for h in holders:
        h.release()


def test_explicit_worker_ids_collide_so_the_test_above_can_fail():
    """The collision the slots prevent: two generators of one worker number
    in one tick make the same id."""
    clock = FakeClock()
    a = Snowflake(3, clock=clock, sleep=clock.sleep)
    b = Snowflake(3, clock=clock, sleep=clock.sleep)
    assert a.next_id() == b.next_id()


def _draw(directory: str, threads: int, n: int) -> list[int]:
    """Claim a slot, say so, wait for the go, then draw from several threads."""
    ids = host_ids(directory)
    ids.claim()
    (Path(directory) / f"claimed-{os.getpid()}").touch()
    while not (Path(directory) / "go").exists():
        time.sleep(0.005)
    out: list[list[int]] = []
    lock = threading.Lock()

    def make():
        mine = [ids.next_id() for _ in range(n)]
        with lock:
            out.append(mine)

    ts = [threading.Thread(target=make) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [i for part in out for i in part]


def _draw_to(queue, directory: str) -> None:
    queue.put(_draw(directory, 4, 3000))


_DRAW_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tests.test_id_slots import _draw
print(json.dumps(_draw(sys.argv[2], 4, 3000)))
"""


def test_threads_and_processes_on_one_host_never_share_an_id(tmp_path):
    """4 fresh interpreters and 4 forked processes, 4 threads each, draw
    3000 ids apiece from one host's slots at the same time (all 8 hold
    their slots before any draws)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
    procs = [subprocess.Popen([sys.executable, "-c", _DRAW_SCRIPT, str(REPO), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    try:
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        children = [ctx.Process(target=_draw_to, args=(queue, str(tmp_path))) for _ in range(4)]
        for c in children:
            c.start()
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("claimed-*"))) < 8:  # all hold a slot at once
            assert time.monotonic() < deadline, "the processes did not all claim a slot"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        forked = [queue.get(timeout=120) for _ in children]
        for c in children:
            c.join(10)
            assert c.exitcode == 0
        spawned = []
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            spawned.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    per_process = forked + spawned
    every = [i for ids in per_process for i in ids]
    assert len(every) == 8 * 4 * 3000
    assert len(set(every)) == len(every), f"{len(every) - len(set(every))} ids repeated"
    workers = [{i & WORKER_MASK for i in ids} for ids in per_process]
    assert all(len(w) == 1 for w in workers), workers
    assert len({w.pop() for w in workers}) == 8  # one slot each


def test_all_slots_held_waits_then_raises_naming_host_dir_and_limit(tmp_path):
    holders = [SlotIds(tmp_path) for _ in range(16)]
    assert sorted(h.claim() for h in holders) == list(range(16))
    late = SlotIds(tmp_path, label="host h7 of testbed t1x", timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(IdSlotsExhausted) as ei:
        late.next_id()
    assert time.monotonic() - t0 >= 0.3
    msg = str(ei.value)
    assert "host h7 of testbed t1x" in msg and str(tmp_path) in msg and "all 16" in msg
    # a slot freed while it waits is taken
    late = SlotIds(tmp_path, timeout=10)
    freed = holders[5].worker_id
    threading.Timer(0.2, holders[5].release).start()
    assert late.claim() == freed
    for h in holders:
        h.release()


_HOLD_SCRIPT = """
import sys, os
sys.path.insert(0, sys.argv[1])
from workload.id_slots import SlotIds
ids = SlotIds(sys.argv[2])
print(ids.claim(), flush=True)
fd = os.open(sys.argv[3], os.O_WRONLY | os.O_APPEND)
while True:  # ids until killed, each written before the next is made
    os.write(fd, b"%d\\n" % ids.next_id())
"""


def test_a_sigkilled_holders_slot_is_reusable_and_no_id_repeats(tmp_path):
    slots = tmp_path / "slots"
    log = tmp_path / "ids.log"
    log.touch()
    ours = [SlotIds(slots) for _ in range(15)]
    taken = {h.claim() for h in ours}
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_SCRIPT, str(REPO), str(slots), str(log)],
                            stdout=subprocess.PIPE, text=True)
    try:
        slot = int(proc.stdout.readline())
        assert slot not in taken
        while log.stat().st_size < 200_000:  # it is making ids
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        after = SlotIds(slots, timeout=5)
        assert after.claim() == slot  # the kernel released the dead holder's lock
        new = [after.next_id() for _ in range(5000)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    old = [int(x) for x in log.read_text().split()]
    assert len(old) > 10_000 and {i & WORKER_MASK for i in old} == {slot}
    assert not set(old) & set(new), "an id of the killed holder was handed out again"
    for h in [*ours, after]:
        h.release()


def test_a_forked_child_claims_its_own_slot(tmp_path):
    ids = host_ids(tmp_path / "fork")
    parent_slot = ids.claim()
    parent_ids = {ids.next_id() for _ in range(100)}
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the same shared object, a slot of its own
        try:
            child = host_ids(tmp_path / "fork")
            out = {"slot": child.worker_id, "ids": [child.next_id() for _ in range(100)]}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = json.loads(f.read())
    os.waitpid(pid, 0)
    assert out["slot"] != parent_slot
    assert {i & WORKER_MASK for i in out["ids"]} == {out["slot"]}
    assert not parent_ids & set(out["ids"])
    # the child closing its inherited copy did not release the parent's claim
    fd = os.open(tmp_path / "fork" / f"slot-{parent_slot:02d}", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert ids.worker_id == parent_slot
    ids.release()


def test_bad_timeout_names_the_field(tmp_path):
    with pytest.raises(ValueError, match="timeout"):
        SlotIds(tmp_path, timeout=-1)
