"""Communication schedulers (``--scheduler``): how a model's gradients are cut
into the units the nodes send, and in what order.

Every scheduler produces :class:`~workload.scheduler.Partition` s with a
priority (lower first) and a credit of bytes in flight; the nodes run them
with the same :class:`~workload.scheduler.ByteScheduler` queue (a layer's
partitions join it when its backward step ends), so the schedulers differ
only in these three things:

``bytescheduler`` (the default; Peng et al., SOSP 2019)
    equal partitions of ``--partition-size``, priority = layer (front
    first), ``--credit`` bytes in flight.
``usbyte`` (Gao et al., TPDS 2023; workload/usbyte.py)
    unequal blocks (whole numbers of ``--partition-size`` units) and their
    order from the model profile and the target link rate (the paper's
    two-phase model); priority = the block's place in that order; credit as
    ByteScheduler's (US-Byte runs on ByteScheduler's core).
``wfbp`` (wait-free back-propagation, Poseidon, Zhang et al., ATC 2017)
    each layer's whole gradients in one message as its backward step ends,
    in that order: no partitioning, no priority, no credit.
``fifo``
    ByteScheduler's partitions and credit, served first come first served
    (the order the gradients become ready): ByteScheduler without its
    priority, the ablation that isolates what the priority does.
"""
from __future__ import annotations

import math

from common.excerpt import shown
from workload.scheduler import Partition, partition_model

SCHEDULERS = ("bytescheduler", "usbyte", "wfbp", "fifo")
DEFAULT_SCHEDULER = "bytescheduler"


def check(name: str) -> str:
    if name not in SCHEDULERS:
        raise ValueError(f"--scheduler: one of {', '.join(SCHEDULERS)}, got {shown(name)}")
    return name


def seconds_per_byte(arch: str, workers: int, servers: int, link_bps: float) -> float:
    """``b`` of US-Byte's block cost ``a + b * bytes`` for one worker's block on
    the target link: ring all-reduce moves 2 (n-1)/n of the block over each
    worker's link; a parameter server's link carries every worker's share of
    its shard, workers/servers of the block (at least the block itself)."""
    per_byte = 8.0 / link_bps
    if arch == "allreduce":
        return per_byte * 2 * (workers - 1) / workers
    return per_byte * max(1.0, workers / servers)


def sfb_seconds_per_byte(workers: int, link_bps: float) -> float:
    """Seconds per byte of an SFB message (Poseidon's factors): a worker's
    link carries it to each of its workers - 1 peers (and as much in)."""
    return 8.0 / link_bps * max(1, workers - 1)


def _whole_layers(profile, tensor_bytes) -> list[Partition]:
    parts = []
    for layer in reversed(profile.layers):              # the order backward ends them
        parts.append(Partition(len(parts), layer.index, layer.name, 0, layer.nbytes,
                               int(tensor_bytes(layer.nbytes)), len(parts)))
    return parts


def _blocks(profile, sched, tensor_bytes) -> list[Partition]:
    parts, seen = [], {}
    for blk in sched.blocks:
        i = seen[blk.layer] = seen.get(blk.layer, -1) + 1
        parts.append(Partition(len(parts), blk.layer, profile.layers[blk.layer].name, i,
                               blk.nbytes, int(tensor_bytes(blk.nbytes)), len(parts)))
    return parts


def plan(profile, name: str, *, partition_bytes: int, credit_bytes: int, arch: str, workers: int,
         servers: int, target_link_bps: float, tensor_bytes=None) -> tuple[list[Partition], int, dict]:
    """(partitions, credit in target bytes, the results' "scheduler" record)."""
    check(name)
    scale = tensor_bytes or (lambda b: b)
    if name == "bytescheduler":      # the record every earlier run has, unchanged
        return (partition_model(profile, partition_bytes, tensor_bytes), credit_bytes,
                {"name": name, "partition_bytes": partition_bytes, "credit_bytes": credit_bytes,
                 "priority": "layer index, front first"})
    if name == "fifo":
        parts = [Partition(p.pid, p.layer, p.tensor, p.index, p.target_bytes, p.nbytes, p.pid)
                 for p in partition_model(profile, partition_bytes, tensor_bytes)]
        return parts, credit_bytes, {"name": name, "partition_bytes": partition_bytes,
                                     "credit_bytes": credit_bytes,
                                     "priority": "first come first served (the order the "
                                                 "gradients are ready)"}
    if name == "wfbp":
        parts = _whole_layers(profile, scale)
        return parts, max(1, profile.total_bytes), {
            "name": name, "partition_bytes": None, "credit_bytes": None,
            "priority": "none: each layer whole as its backward step ends",
            "blocks": [[p.layer, p.target_bytes] for p in parts]}
    from workload import usbyte

    b = seconds_per_byte(arch, workers, servers, target_link_bps)
    sched = usbyte.schedule([l.nbytes for l in profile.layers], [l.bwd_s for l in profile.layers],
                            [l.fwd_s for l in profile.layers], a=usbyte.DEFAULT_STARTUP_S, b=b,
                            unit=partition_bytes)
    parts = _blocks(profile, sched, scale)
    return parts, credit_bytes, {
        "name": name, "partition_bytes": partition_bytes, "credit_bytes": credit_bytes,
        "priority": "the block's place in US-Byte's order",
        "model": {"startup_s": usbyte.DEFAULT_STARTUP_S, "seconds_per_byte": b,
                  "unit_bytes": partition_bytes, "iteration_s": sched.iteration_s,
                  "phase1_priorities": list(sched.priorities)},
        # [layer, target bytes, phase] in sending order
        "blocks": [[blk.layer, blk.nbytes, blk.phase] for blk in sched.blocks],
        "units_per_block": [math.ceil(blk.nbytes / partition_bytes) for blk in sched.blocks]}


# --- tensor fusion (--fusion, all-reduce) --------------------------------------------------
def parse_fusion(spec: str | None) -> tuple[str, int | None] | None:
    """``adaptive`` -> ("adaptive", None); ``constant:SIZE`` (bytes at target
    scale, 64mb, 25MB, 4000000) -> ("constant", bytes); None -> None."""
    if spec is None:
        return None
    if spec == "adaptive":
        return "adaptive", None
    kind, _, size = spec.partition(":")
    n = _size(size) if kind == "constant" else None
    if n is None or n < 1:
        raise ValueError(f"--fusion: adaptive or constant:SIZE (e.g. constant:64mb), got {shown(spec)}")
    return "constant", n


def _size(text: str) -> int | None:
    t = text.strip().lower()
    for suffix, mult in (("gb", 10**9), ("mb", 10**6), ("kb", 10**3), ("b", 1)):
        if t.endswith(suffix):
            t, m = t[: -len(suffix)], mult
            break
    else:
        m = 1
    try:
        v = float(t) * m
    except ValueError:
        return None
    return int(v) if v >= 1 else None


def fuse(profile, parts: list[Partition], spec: str, *, b: float, tensor_bytes=None
         ) -> tuple[list[Partition], dict]:
    """The scheduler's messages fused as Horovod's buffer does (OSF's system):
    in the order they are ready, as many as fit in the buffer size
    (osf.fuse; one larger than the buffer alone). ``adaptive``: the size
    OSF's model finds fastest (workload/osf.py). A buffer belongs to the
    layer whose gradients complete it (the front-most in it) and goes in
    the order the buffers fill; the record says which layers each carries."""
    from workload import osf

    kind, size = parse_fusion(spec)
    scale = tensor_bytes or (lambda x: x)
    t_f = [l.fwd_s for l in profile.layers]
    t_b = [l.bwd_s for l in profile.layers]
    ready = sorted(parts, key=lambda p: (-p.layer, p.pid))     # the order they are ready
    msgs = [(p.layer, p.target_bytes) for p in ready]
    modelled = None
    if kind == "adaptive":
        modelled = {str(c): osf.iteration_time(t_f, t_b, msgs, b=b, buffer_bytes=c)["iteration_s"]
                    for c in osf.candidates(sum(n for _, n in msgs))}
        size = osf.adaptive_buffer(t_f, t_b, msgs, b=b)
    # OSF's grouping (osf.fuse), of the partitions themselves
    groups = [[ready[i] for i, _ in g]
              for g in osf.fuse([(i, p.target_bytes) for i, p in enumerate(ready)], size)]
    out, carries = [], []
    for g in groups:
        layer = min(p.layer for p in g)
        target = sum(p.target_bytes for p in g)
        out.append(Partition(len(out), layer, f"fused:{g[0].tensor}..{g[-1].tensor}", 0, target,
                             sum(int(scale(p.target_bytes)) for p in g), len(out)))
        carries.append(sorted({p.layer for p in g}))
    return out, {"mode": kind, "buffer_bytes": size, "buffers": len(out),
                 "buffer_target_bytes": [p.target_bytes for p in out],
                 "layers_of_buffer": carries, "modelled_iteration_s": modelled}


# --- sufficient factor broadcasting (--comm, PS runs) ------------------------------------
def with_sfb(profile, parts: list[Partition], rows: list[dict], tensor_bytes=None
             ) -> tuple[list[Partition], list[int]]:
    """The scheduler's partitions with every SFB layer's (workload/hybrid.py
    choose) replaced by one message of its factors, K (M + N) values, that
    each worker sends every other worker; it takes the place and priority
    of the layer's first partition. (partitions renumbered, SFB pids)."""
    scale = tensor_bytes or (lambda x: x)
    sfb = {r["layer"]: r for r in rows if r["scheme"] == "sfb"}
    out, sfb_pids, done = [], [], set()
    for p in parts:
        if p.layer not in sfb:
            out.append(Partition(len(out), p.layer, p.tensor, p.index, p.target_bytes, p.nbytes,
                                 p.priority))
        elif p.layer not in done:
            done.add(p.layer)
            n = sfb[p.layer]["factor_bytes"]
            sfb_pids.append(len(out))
            out.append(Partition(len(out), p.layer, f"sfb:{profile.layers[p.layer].name}", 0, n,
                                 int(scale(n)), p.priority))
    return out, sfb_pids
