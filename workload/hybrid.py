"""Poseidon's hybrid communication (Zhang et al., "Poseidon: An Efficient
Communication Architecture for Distributed Deep Learning on GPU Clusters",
USENIX ATC 2017, sec. 3.2 "Hybrid Communication"): per layer, the cheaper
of a sharded parameter server and sufficient factor broadcasting (SFB).

SFB: a fully connected layer's gradient over a batch is a sum of K rank-1
outer products u_k v_k^T (u: the M inputs, v: the N output errors), so a
worker can broadcast its batch's factors, K (M + N) values, to every other
worker, which rebuilds the M x N gradient (and the bias's, the sum of the
v_k) itself, instead of pushing M N values to the servers and pulling them
back.

Poseidon's cost model (its Table 1: values one node sends and receives in
one iteration to synchronise an M x N fully connected layer, batch K, P1
workers, P2 servers):

    PS   server 2 P1 M N / P2     worker 2 M N     server & worker 2 M N (P1 + P2 - 2) / P2
    SFB  worker 2 K (P1 - 1)(M + N)

(PS: a worker pushes M N and pulls M N; a server takes a 1/P2 shard from
each of P1 workers and sends it back to each; a machine that is both sends
no shard of its own over the network. SFB: a worker sends K (M + N) to
each of P1 - 1 peers and receives as much.) Its rule (Algorithm 1,
BestScheme): a fully connected layer goes by SFB when SFB's cost is at
most the parameter server's, every other layer by PS.
"""
from __future__ import annotations

from common.excerpt import shown
from workload.models.base import GRAD_BYTES

COMMS = ("ps", "sfb", "hybrid")


def check(comm: str) -> str:
    if comm not in COMMS:
        raise ValueError(f"--comm: one of {', '.join(COMMS)}, got {shown(comm)}")
    return comm


def costs(M: int, N: int, K: int, P1: int, P2: int) -> dict:
    """Poseidon's Table 1 for one M x N layer (values, not bytes)."""
    return {"ps_worker": 2 * M * N, "ps_server": 2 * P1 * M * N / P2,
            "ps_colocated": 2 * M * N * (P1 + P2 - 2) / P2,
            "sfb_worker": 2 * K * (P1 - 1) * (M + N)}


def ps_cost(c: dict) -> float:
    """The PS cost the rule compares with SFB's. Poseidon's machines are each
    a server and a worker, so its Algorithm 1 takes Table 1's "server &
    worker" column; our servers are hosts of their own (placement names
    every host once), so we take the busiest PS node's, max(worker, server)
    -- Table 1's other two columns (sec. 3.2, our choice where the paper
    has no rule for separate servers)."""
    return max(c["ps_worker"], c["ps_server"])


def factor_bytes(M: int, N: int, K: int) -> int:
    """What one worker sends each other worker for one layer: K (M + N) values."""
    return GRAD_BYTES * K * (M + N)


def choose(profile, comm: str, workers: int, servers: int) -> list[dict]:
    """Per layer: its scheme ("ps" or "sfb") and, for a fully connected
    layer, its shape and Poseidon's costs. ``sfb``: every fully connected
    layer by SFB; ``hybrid``: those where SFB costs at most the PS
    (Algorithm 1's <=); ``ps``: none. ``sfb_if_colocated``: what Algorithm
    1 would choose with every machine both server and worker (recorded, not
    used)."""
    check(comm)
    out = []
    for layer in profile.layers:
        row = {"layer": layer.index, "name": layer.name, "scheme": "ps"}
        shape = layer.fc_shape
        if shape is not None:
            M, N = shape
            c = costs(M, N, profile.batch_size, workers, servers)
            row.update(shape=[M, N], batch=profile.batch_size, costs=c, ps_cost=ps_cost(c),
                       sfb_cost=c["sfb_worker"], factor_bytes=factor_bytes(M, N, profile.batch_size),
                       sfb_if_colocated=c["sfb_worker"] <= c["ps_colocated"])
            if comm == "sfb" or (comm == "hybrid" and c["sfb_worker"] <= row["ps_cost"]):
                row["scheme"] = "sfb"
        out.append(row)
    return out
