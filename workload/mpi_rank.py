"""One rank of a real MPI job (workload/mpi_job.py starts it with mpirun).

Self-contained on purpose: it runs under the system ``/usr/bin/python3``
with Debian's mpi4py (python3-mpi4py), not under the project's venv, so it
imports the standard library and mpi4py only (no numpy: buffers are
``array('f')``) and takes everything from the JSON file named by its one
argument. Rank 0 prints one JSON line (the result) on stdout.

Modes (``spec["mode"]``):

* ``allreduce``: a data-parallel training loop. Each iteration: the
  forward pass's compute (a sleep, ``fwd_s``), then per message in
  ``counts`` (float32 elements, backward order: the last layer's tensors
  first) the compute before it (``compute_s[i]``: its layer's backward step,
  a sleep) and an ``MPI_Allreduce`` (sum) of that many float32; a barrier
  ends the iteration. Rank r contributes ``r + 1 + it`` in every element, so
  every element of the sum must be ``N(N+1)/2 + N*it`` (exact in float32
  for the sizes used); each result is checked after the iteration's barrier
  (outside its time).
* ``ps``: the same loop, parameter-server style with point-to-point
  messages: rank 0 is the server, ranks 1.. the workers; per message every
  worker ``MPI_Send``s its gradient to rank 0, which receives them all at
  once (``MPI_Irecv``: the incast), checks each, and ``MPI_Isend``s the
  aggregate (the sum of the workers' contributions) back to every worker.
* ``sendrecv``: the goodput of one rank pair: rank 0 ``MPI_Send``s
  ``bytes`` bytes ``reps`` times to rank 1, which acknowledges the last with
  one byte; goodput = bytes x reps / time. The other ranks only wait.

Training starts at ``spec["start_at"]`` (CLOCK_MONOTONIC seconds, shared by
every namespace) when given and not yet past: runs of one seed then start
it at the same offset into their background.

Rank 0's output carries every rank's CPU time from the start barrier to the
end (``rank_cpu_s``): how much of the machine the job took from the fabric.

Waiting (``spec["poll_s"]``, default :data:`POLL_S`): every MPI call is the
nonblocking one (``MPI_Iallreduce``, ``MPI_Ibarrier``, ``MPI_Isend``/``Irecv``)
completed by ``MPI_Testall`` every ``poll_s`` seconds, sleeping in between;
Open MPI's progress (the tcp btl's reads and writes) runs in each test.
Blocking calls busy-poll: four ranks spinning on this machine's two CPUs
saturated them in every run of ``--preset mpi`` (the CPU guard excluded
12 of 12), and those CPUs forward the fabric. ``poll_s`` 0 uses the blocking
calls (Open MPI's own busy wait), as a job on machines of its own would.
"""
from __future__ import annotations

import json
import sys
import time
from array import array

#: Seconds between two MPI_Testall of a wait. 0.2 ms is 2.5 KB at a 100
#: Mbit/s link: a test moves far more than that from the socket buffers, so
#: the links do not wait for the rank; each wake-up costs some 20 us of CPU.
POLL_S = 0.0002


def _complete(reqs, poll_s: float) -> None:
    """Wait for the requests ``reqs``: MPI_Waitall (busy) when ``poll_s`` is 0,
    else MPI_Testall every ``poll_s`` seconds (module docstring)."""
    from mpi4py import MPI

    if poll_s <= 0:
        MPI.Request.Waitall(reqs)
        return
    while not MPI.Request.Testall(reqs):
        time.sleep(poll_s)


class _Waiting:
    """The rank's collective and point-to-point calls, each completed by
    :func:`_complete`."""

    def __init__(self, comm, poll_s: float):
        self.comm, self.poll_s = comm, poll_s

    def barrier(self) -> None:
        _complete([self.comm.Ibarrier()], self.poll_s)

    def allreduce(self, send, recv, op) -> None:
        _complete([self.comm.Iallreduce(send, recv, op=op)], self.poll_s)

    def send(self, buf, dest: int, tag: int) -> None:
        _complete([self.comm.Isend(buf, dest=dest, tag=tag)], self.poll_s)

    def recv(self, buf, source: int, tag: int) -> None:
        _complete([self.comm.Irecv(buf, source=source, tag=tag)], self.poll_s)

    def all(self, reqs) -> None:
        _complete(reqs, self.poll_s)


class _DataParallel:
    """One rank of the data-parallel loop (mode ``allreduce`` or ``ps``): its
    buffers, one iteration's exchange, and the check of what came back.
    Under ps rank 0 is the server (no gradients of its own), ranks 1.. the
    workers; every rank's "gradient" in iteration ``it`` is rank + 1 + it,
    so the sum each message must come back as is known."""

    def __init__(self, comm, spec: dict):
        self.comm = comm
        self.rank, n = comm.Get_rank(), comm.Get_size()
        self.w8 = _Waiting(comm, float(spec.get("poll_s", POLL_S)))
        self.ps = spec["mode"] == "ps"
        self.counts = [int(c) for c in spec["counts"]]
        self.compute = [float(x) for x in spec.get("compute_s") or [0.0] * len(self.counts)]
        self.fwd_s = float(spec.get("fwd_s", 0.0))
        self.contributors = range(1, n) if self.ps else range(n)
        self.server = self.ps and self.rank == 0
        self.send = [array("f", bytes(4 * c)) for c in self.counts]
        self.recv = [array("f", bytes(4 * c)) for c in self.counts]
        self.inbox = {w: [array("f", bytes(4 * c)) for c in self.counts]
                      for w in range(1, n)} if self.server else {}
        self.errors: list[str] = []

    def want(self, it: int) -> float:
        """Every element of every message after iteration ``it``: the contributors' sum."""
        return float(sum(r + 1 + it for r in self.contributors))

    def exchange(self, i: int, it: int) -> None:
        """Message ``i`` of iteration ``it``: all-reduced, or pushed to the server and pulled back."""
        from mpi4py import MPI

        w8, send, recv = self.w8, self.send, self.recv
        if not self.ps:
            w8.allreduce([send[i], MPI.FLOAT], [recv[i], MPI.FLOAT], op=MPI.SUM)
        elif self.server:   # every worker's push at once, then the aggregate back to each
            comm, inbox = self.comm, self.inbox
            w8.all([comm.Irecv([inbox[w][i], MPI.FLOAT], source=w, tag=i) for w in inbox])
            for w in inbox:
                if inbox[w][i].count(float(w + 1 + it)) != self.counts[i]:
                    self.errors.append(f"server iteration {it} message {i}: worker {w}'s push "
                                       f"is not {w + 1 + it}")
            recv[i][:] = array("f", [self.want(it)]) * self.counts[i]
            w8.all([comm.Isend([recv[i], MPI.FLOAT], dest=w, tag=i) for w in inbox])
        else:
            w8.send([send[i], MPI.FLOAT], dest=0, tag=i)
            w8.recv([recv[i], MPI.FLOAT], source=0, tag=i)

    def iteration(self, it: int, warmup: int) -> dict:
        """One iteration: this rank's gradients, the forward compute, per
        message its layer's compute and its exchange, between two barriers;
        the results checked."""
        mine = float(self.rank + 1 + it)
        for buf, c in zip(self.send, self.counts):     # the "gradients" of this iteration
            buf[:] = array("f", [mine]) * c
        self.w8.barrier()
        t0 = time.perf_counter()
        if self.fwd_s > 0:
            time.sleep(self.fwd_s)
        comm_s, msg_s = 0.0, []
        for i in range(len(self.counts)):
            if self.compute[i] > 0:
                time.sleep(self.compute[i])
            t = time.perf_counter()
            self.exchange(i, it)
            took = time.perf_counter() - t
            comm_s += took
            msg_s.append(took)
        self.w8.barrier()
        took_it = time.perf_counter() - t0
        self.check(it)
        return {"it": it, "warmup": it < warmup, "time_s": took_it, "comm_s": comm_s,
                "message_s": msg_s}

    def check(self, it: int) -> None:
        want = self.want(it)
        for i, c in enumerate(self.counts):
            if self.recv[i].count(want) != c:
                bad = next(j for j, v in enumerate(self.recv[i]) if v != want)
                self.errors.append(f"rank {self.rank} iteration {it} message {i}: element {bad} is "
                                   f"{self.recv[i][bad]!r}, expected {want!r}")


def _wait_for_start(spec: dict) -> float:
    """After the barrier that says every rank is ready: sleep until
    ``spec["start_at"]``; returns when the ranks were ready (monotonic s)."""
    ready = time.monotonic()          # CLOCK_MONOTONIC: the machine's, every namespace's
    # every scheme's run of a seed starts training at the same instant after the
    # background's origin (spec["start_at"]), however long mpirun took to launch
    # (no barrier after the sleep: its messages would cross the background's
    # queues, and the start would lag by their delay, which differs by scheme;
    # the first iteration begins with one)
    if spec.get("start_at") and spec["start_at"] > ready:
        time.sleep(spec["start_at"] - ready)
    return ready


def _training(comm, spec: dict) -> dict:
    """The data-parallel loop of mode ``allreduce`` or ``ps``; rank 0
    returns the job's record (every rank's errors and CPU time gathered)."""
    job = _DataParallel(comm, spec)
    iterations, warmup = int(spec["iterations"]), int(spec.get("warmup", 0))
    job.w8.barrier()
    ready = _wait_for_start(spec)
    start = time.monotonic()
    cpu0 = time.process_time()
    its = [job.iteration(it, warmup) for it in range(iterations)]
    end = time.monotonic()
    cpu = comm.gather(time.process_time() - cpu0, root=0)
    job.w8.barrier()
    all_errors = comm.gather(job.errors[:5], root=0)
    if job.rank != 0:
        return {}
    flat = [e for es in all_errors for e in es]
    counts = job.counts
    return {"mode": spec["mode"], "ranks": comm.Get_size(), "iterations": its,
            "message_bytes": [4 * c for c in counts],
            "bytes_per_iteration": 4 * sum(counts),
            "correct": not flat, "errors": flat[:10], "t_ready_s": ready, "t_start_s": start,
            "t_end_s": end,
            "rank_cpu_s": cpu}


def _sendrecv(comm, spec: dict) -> dict:
    from mpi4py import MPI

    rank = comm.Get_rank()
    w8 = _Waiting(comm, float(spec.get("poll_s", POLL_S)))
    size, reps = int(spec["bytes"]), int(spec["reps"])
    buf = bytearray(size)
    ok = True
    w8.barrier()
    t0, cpu0 = time.perf_counter(), time.process_time()
    if rank == 0:
        for i in range(reps):
            buf[0] = buf[-1] = i % 251
            w8.send([buf, MPI.BYTE], dest=1, tag=1)
        ack = bytearray(1)
        w8.recv([ack, MPI.BYTE], source=1, tag=2)
        ok = ack[0] == 1
    elif rank == 1:
        for i in range(reps):
            w8.recv([buf, MPI.BYTE], source=0, tag=1)
            ok = ok and buf[0] == buf[-1] == i % 251
        w8.send([bytearray([1 if ok else 0]), MPI.BYTE], dest=0, tag=2)
    took = time.perf_counter() - t0
    w8.barrier()                      # ranks 2.. wait here, not in a busy allreduce
    wall = time.perf_counter() - t0
    cpu = comm.gather(time.process_time() - cpu0, root=0)
    ok = comm.allreduce(ok, op=MPI.LAND)
    if rank != 0:
        return {}
    return {"mode": "sendrecv", "ranks": comm.Get_size(), "bytes": size, "reps": reps,
            "time_s": took, "goodput_bps": 8 * size * reps / took, "correct": bool(ok),
            "wall_s": wall, "rank_cpu_s": cpu}


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    run = {"allreduce": _training, "ps": _training, "sendrecv": _sendrecv}[spec["mode"]]
    out = run(comm, spec)
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
