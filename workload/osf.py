"""OSF's iteration-time model and adaptive tensor fusion (Liu et al.,
"Modeling and Optimizing the Scaling Performance in Distributed Deep
Learning Training", WWW 2022).

OSF ("Scaling Factor considering Overlap") is a recursive model of one
data-parallel iteration that accounts for the two things the paper names:
the overlap of communication with back-propagation, and tensor fusion. The
paper's text is not in the project (its file holds the abstract only) and
none was found, so this is our reading of the abstract, not its equations
(docs/workload.md says so); the fusion buffer follows Horovod's documented
one. Written for the messages our nodes send:

* backward runs from the last layer; a layer's gradients are ready when its
  backward step ends (``ready_l``);
* with fusion, the gradients fill a buffer in the order they are ready,
  as many as fit in ``buffer`` bytes (Horovod's buffer; one message larger
  than it goes alone); a buffer goes out when its last message is ready;
  without fusion every message goes on its own;
* messages share one channel in the order they are ready, each costing
  ``a + b * bytes``: the recursion ``end_j = max(ready_j, end_{j-1}) + a +
  b * bytes_j``;
* the next forward pass starts when backward and the last message are both
  over: ``T = T_fwd + max(T_bwd, end_last)``; the scaling factor of N
  workers is ``N (T_fwd + T_bwd) / T``.

Adaptive fusion (OSF's optimisation): the buffer size is the one among
candidates (powers of two from 64 KB to the whole model, and "none") that
minimises the modelled iteration time.

What the model leaves out, by construction: a scheduler's priorities and
credit, and overlap with the *next* forward pass (ByteScheduler and US-Byte
have both); the difference between it and a measured run is reported, not
tuned away.
"""
from __future__ import annotations

from workload.usbyte import DEFAULT_STARTUP_S, ready_times

#: adaptive fusion's smallest candidate buffer (Horovod's default threshold is 64 MB)
MIN_BUFFER_BYTES = 64 * 1024


def fuse(messages, buffer_bytes: int | None) -> list[list[tuple[int, int]]]:
    """``messages`` ((layer, bytes, ...), in the order they are ready)
    grouped into fusion buffers of at most ``buffer_bytes``, as Horovod
    fills its buffer (the tensors that fit in HOROVOD_FUSION_THRESHOLD; one
    larger than the buffer goes alone); None: one message per group. A
    static plan: Horovod fuses what is ready in the same cycle, we fuse
    consecutive messages whatever their ready times (the buffer goes when
    its last one is ready)."""
    if buffer_bytes is None:
        return [[m] for m in messages]
    groups, cur, held = [], [], 0
    for m in messages:
        if cur and held + m[1] > buffer_bytes:
            groups.append(cur)
            cur, held = [], 0
        cur.append(m)
        held += m[1]
    if cur:
        groups.append(cur)
    return groups


def iteration_time(t_f, t_b, messages, *, a: float = DEFAULT_STARTUP_S, b: float,
                   buffer_bytes: int | None = None) -> dict:
    """The model's iteration for layers with forward/backward times
    ``t_f``/``t_b`` (front first) and ``messages`` (layer, bytes) in the
    order they are ready; a message (layer, bytes, seconds per byte) costs
    its own rate instead of ``b`` (an SFB message goes to every other
    worker)."""
    ready = ready_times(t_b)
    bwd = sum(t_b)
    end = 0.0
    # the order they are ready: the last layer first (a layer's own in their order)
    groups = fuse(sorted(messages, key=lambda m: -m[0]), buffer_bytes)
    for g in groups:
        r = max(ready[m[0]] for m in g)
        end = max(r, end) + a + sum(m[1] * (m[2] if len(m) > 2 else b) for m in g)
    t = sum(t_f) + max(bwd, end)
    return {"iteration_s": t, "compute_s": sum(t_f) + bwd, "comm_end_s": end,
            "messages": len(groups)}


def candidates(total_bytes: int) -> list[int | None]:
    out: list[int | None] = [None]
    size = MIN_BUFFER_BYTES
    while size < total_bytes:
        out.append(size)
        size *= 2
    out.append(max(total_bytes, MIN_BUFFER_BYTES))
    return out


def adaptive_buffer(t_f, t_b, messages, *, a: float = DEFAULT_STARTUP_S, b: float) -> int | None:
    """OSF's adaptive fusion: the candidate buffer with the shortest modelled iteration."""
    total = sum(n for _, n in messages)
    return min(candidates(total),
               key=lambda s: (iteration_time(t_f, t_b, messages, a=a, b=b,
                                             buffer_bytes=s)["iteration_s"], s or 0))


def prediction(profile, parts, *, b: float, workers: int, measured_s: float | None,
               a: float = DEFAULT_STARTUP_S, sfb=(), b_sfb: float | None = None) -> dict:
    """OSF beside a run: the modelled iteration from the run's compute
    profile, its messages (target bytes) and seconds per byte, next to the
    measured one (target scale), with the relative error. ``sfb``: the pids
    of SFB messages, which cost ``b_sfb`` a byte (a worker sends each to
    its workers - 1 peers: schedules.sfb_seconds_per_byte)."""
    t_f = [l.fwd_s for l in profile.layers]
    t_b = [l.bwd_s for l in profile.layers]
    sfb = set(sfb)
    msgs = [(p.layer, p.target_bytes, b_sfb) if p.pid in sfb else (p.layer, p.target_bytes)
            for p in parts]
    m = iteration_time(t_f, t_b, msgs, a=a, b=b)
    pred = m["iteration_s"]
    out = {"model": "OSF (WWW 2022): recursive, overlap with backward, messages in ready order",
           "startup_s": a, "seconds_per_byte": b, "messages": m["messages"],
           "predicted_iteration_s": pred, "measured_iteration_s": measured_s,
           "error": (pred - measured_s) / measured_s if measured_s else None,
           # N workers' samples per second over one worker's compute-only rate (weak
           # scaling); None for a profile without compute (the three-layer model).
           # Named for what it is: runs before this field had it as
           # "predicted_scaling_factor".
           "predicted_speedup": workers * m["compute_s"] / pred if m["compute_s"] else None}
    if sfb:
        out["sfb_seconds_per_byte"] = b_sfb
    return out
