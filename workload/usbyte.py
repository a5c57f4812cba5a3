"""US-Byte's schedule: unequal-sized tensor blocks in a near-optimal order
(Gao et al., "US-Byte: An Efficient Communication Framework for Scheduling
Unequal-Sized Tensor Blocks in Distributed Deep Learning", IEEE TPDS 35(1),
2023). Written from the paper's model and the authors' public PyTorch code
(github.com/ZJU-CNLAB/US-Byte, dist_trainer_US-Byte.py: algorithm1/2/3);
our own code, per layer with parameters.

The model (the paper's two phases):

* one block of ``B`` bytes takes ``a + b * B`` seconds on the channel (``a``
  the start-up cost, ``b`` seconds per byte); blocks go one after another;
  a block is a whole number of units of ``S`` bytes (ByteScheduler's
  partition size), the last unit of a layer possibly shorter;
* phase 1, overlapped with backward propagation: layer ``l``'s gradients
  are ready when the backward steps of layers L-1 .. l have ended. Before
  each next layer becomes ready, the channel sends the highest-priority
  ready layer's next block, sized to fill the gap: one unit if the gap is
  under ``a``, else ``ceil((gap - a) / (b S))`` units, at most what is left
  of the layer (algorithm 1);
* phase 2, overlapped with the next forward propagation: once backward has
  ended, what is left of every layer goes as *one* block per layer, front
  layer first -- the paper's derived optimum for this phase; layer ``l``'s
  forward step starts when layer ``l-1``'s ended and its block is in;
* the iteration time is the end of the last forward step (from the start
  of backward); algorithm 3 searches the phase-1 priorities: from the last
  layer down, a layer whose first block would end inside a later layer's
  backward is tried at that layer's priority (the layers between move one
  down) and kept if the iteration time falls.

Priorities: lower first; initially the layer index (front first, as
ByteScheduler); ties go to the layer ready first (the higher index), as the
authors' code does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

#: The start-up cost ``a`` of a block at target scale when the caller gives
#: none. The authors fit a + b*size to Horovod all-reduce times on their
#: 10 GbE clusters and get a = 0.56 ms (2 workers) to 1.32 ms (8 workers);
#: 0.5 ms is the low end: our nodes' per-message cost is a TCP write.
DEFAULT_STARTUP_S = 0.5e-3


@dataclass(frozen=True)
class Block:
    layer: int
    nbytes: int
    start_s: float      # on the model's channel, from the start of backward
    end_s: float
    phase: int          # 1: overlapped with backward, 2: with the next forward


@dataclass(frozen=True)
class Schedule:
    blocks: tuple[Block, ...]      # in sending order
    priorities: tuple[int, ...]    # phase-1 priority of each layer (lower first)
    iteration_s: float             # the model's backward + communication + forward


def _check(M, t_b, t_f, a, b, unit):
    L = len(M)
    if L == 0 or len(t_b) != L or len(t_f) != L:
        raise ValueError(f"layers: sizes, backward and forward times must have one entry per layer, "
                         f"got {len(M)}, {len(t_b)}, {len(t_f)}")
    if any(m <= 0 for m in M):
        raise ValueError(f"sizes: every layer has bytes, got {list(M)}")
    if a < 0 or b <= 0 or unit < 1:
        raise ValueError(f"a, b, unit: need a >= 0, b > 0, unit >= 1, got {a}, {b}, {unit}")


def ready_times(t_b) -> list[float]:
    """When each layer's gradients are ready: backward runs from the last layer."""
    out, t = [0.0] * len(t_b), 0.0
    for l in reversed(range(len(t_b))):
        t += t_b[l]
        out[l] = t
    return out


def _phase1(M, t_b, prio, a, b, unit):
    """Algorithm 1: the blocks sent while backward runs, and what is left of each layer."""
    L = len(M)
    ready = ready_times(t_b)
    left = [0] * L
    blocks: list[list] = []                # [layer, nbytes, start, end]
    t = ready[L - 1]
    for l in reversed(range(L)):
        while ready[l] > t:
            cand = [j for j in range(L) if left[j] > 0]
            if not cand:
                t = ready[l]                      # idle until layer l is ready
                break
            j = min(cand, key=lambda j: (prio[j], -j))
            gap = ready[l] - t
            # the same layer as the block just sent: that block grows (one
            # start-up). The authors' algorithm1 re-sizes the merged block
            # from its start, which comes to these units; it also takes the
            # earlier units off what is left a second time -- not copied.
            extend = bool(blocks) and blocks[-1][0] == j and blocks[-1][3] == t
            startup = 0.0 if extend else a
            if gap < startup:
                k = 1
            elif gap < startup + b * left[j]:
                k = max(1, math.ceil((gap - startup) / (b * unit)))
            else:
                k = math.ceil(left[j] / unit)
            nbytes = min(k * unit, left[j])
            left[j] -= nbytes
            if extend:
                blocks[-1][1] += nbytes
                blocks[-1][3] = t = t + b * nbytes
            else:
                blocks.append([j, nbytes, t, t + a + b * nbytes])
                t = blocks[-1][3]
        left[l] = M[l]
    return blocks, left, t


def evaluate(M, t_b, t_f, prio, a, b, unit) -> Schedule:
    """Phase 1 under ``prio``, then phase 2 (one block per layer, front
    first) and the forward pass: the schedule and its iteration time."""
    L = len(M)
    blocks1, left, t = _phase1(M, t_b, prio, a, b, unit)
    t = max(t, ready_times(t_b)[0])
    arrived = [0.0] * L
    for j, _, _, end in blocks1:
        arrived[j] = max(arrived[j], end)
    blocks = [Block(j, n, s, e, 1) for j, n, s, e in blocks1]
    for l in range(L):
        if left[l]:
            end = t + a + b * left[l]
            blocks.append(Block(l, left[l], t, end, 2))
            arrived[l], t = end, end
    fwd_end = ready_times(t_b)[0]          # forward cannot start before backward ended
    for l in range(L):
        fwd_end = max(fwd_end, arrived[l]) + t_f[l]
    return Schedule(tuple(blocks), tuple(prio), fwd_end)


def _raise(prio, l, k):
    """Layer ``l`` takes layer ``k``'s priority; layers k .. l-1 move one down."""
    p = list(prio)
    p[l] = prio[k]
    for j in range(k, l):
        p[j] = prio[j] + 1
    return p


def schedule(M, t_b, t_f, *, a: float = DEFAULT_STARTUP_S, b: float, unit: int) -> Schedule:
    """US-Byte's blocks and order for layers of ``M`` bytes (front first)
    with backward and forward times ``t_b``, ``t_f`` (s), block cost
    ``a + b * bytes`` and unit ``unit`` bytes (algorithm 3 around 1 and 2)."""
    M, t_b, t_f = list(M), list(t_b), list(t_f)
    _check(M, t_b, t_f, a, b, unit)
    L = len(M)
    ready = ready_times(t_b)
    prio = list(range(L))
    best = evaluate(M, t_b, t_f, prio, a, b, unit)
    l = L - 1
    while l >= 1:
        first = next((blk for blk in best.blocks if blk.phase == 1 and blk.layer == l), None)
        if first is None:
            l -= 1
            continue
        tau = first.start_s + a + b * M[l]        # the layer sent whole from its first block
        k = next((k for k in range(l, 0, -1) if ready[k] < tau <= ready[k - 1]), 0)
        trial = evaluate(M, t_b, t_f, _raise(prio, l, k), a, b, unit)
        if trial.iteration_s < best.iteration_s:
            best, prio = trial, list(trial.priorities)
            l = k
        l -= 1
    return best
