"""A testbed's recorded state, as every layer above the topology reads it.

`talb testbed up` (testbed/lifecycle.py) records what it made in a state
file, /run/talb/<prefix>/state.json: the topology, the data path, the
status and, when switched, the queueing and the hosts' minimum RTO. The
daemon, the scheme timers, the workload and the experiments find a
testbed's topology, queueing, minimum RTO and node namespaces here, by its
prefix, without the life cycle's code.
"""
from __future__ import annotations

import json
import os

from common import paths

from .spec import topology_from_dict
from .teardown import namespaces  # this prefix's, by a /run/netns scan

DATAPATHS = ("bpf", "xdp", "bridge")
#: the data paths with switch programs and their maps (counters, schemes,
#: the agent): the TC one (bpf) and the XDP one (xdp: datapath/xdp.py)
PROGRAM_DATAPATHS = ("bpf", "xdp")


class TestbedError(RuntimeError):
    """A user-facing failure: the message says what happened and what to do."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("must run as root: network namespaces and BPF need it "
                           "(sudo talb ..., or sudo make testbed)")


def exists(prefix: str) -> bool:
    return paths.state_file(prefix).exists() or bool(namespaces(prefix))


def read_record(path, missing: str, corrupt_hint: str) -> dict:
    """A JSON record talb keeps under /run/talb; TestbedError saying
    ``missing`` when it is not there, or that it is corrupt and ``corrupt_hint``."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TestbedError(missing) from None
    except json.JSONDecodeError as exc:
        raise TestbedError(f"{path} is corrupt ({exc}){corrupt_hint}") from None


def read_state(prefix: str) -> dict:
    return read_record(paths.state_file(prefix),
                       f"no testbed with prefix '{prefix}' is up "
                       f"(start one with `talb testbed up --prefix {prefix}`)",
                       f"; `talb testbed down --prefix {prefix}` removes the testbed")


def write_state(prefix: str, state: dict) -> None:
    path = paths.state_file(prefix)
    paths.private_dir(path.parent)
    paths.write_private(path, json.dumps(state, indent=2))  # atomic, root-only


def batched_testbeds() -> list[str]:
    """Prefixes of the testbeds up (state files under /run/talb) whose
    topology says ``shaping: batched``."""
    from .params import BATCHED

    found = []
    for path in sorted(paths.RUN_DIR.glob("*/state.json")):
        try:
            if json.loads(path.read_text()).get("topology", {}).get("shaping") == BATCHED:
                found.append(path.parent.name)
        except (OSError, ValueError):
            continue
    return found


def release_batched(prefix: str) -> bool:
    """After testbed ``prefix`` went down: turn sch_htb's hysteresis off if
    no other batched testbed is up. Returns whether it was turned off."""
    from .qdisc import hysteresis, set_hysteresis

    if not hysteresis() or [p for p in batched_testbeds() if p != prefix]:
        return False
    set_hysteresis(False)
    return True


def load_topology_of(prefix: str):
    return topology_from_dict(read_state(prefix)["topology"])


def queueing_of(prefix: str, state: dict | None = None) -> dict:
    """How the switch ports of testbed ``prefix`` queue now:
    ``{"mode": "bands" | "fifo", "switch_queue": ..., "topology_queue": ...}``
    (queues in the topology file's form). A testbed nobody switched queues
    as its topology says (``bands``)."""
    state = state or read_state(prefix)
    if state.get("queueing"):
        return dict(state["queueing"])
    queue = topology_from_dict(state["topology"]).queue.to_dict()
    return {"mode": "bands", "switch_queue": queue, "topology_queue": queue}


def regime_of(prefix: str, state: dict | None = None) -> dict:
    """The regime testbed ``prefix`` runs in now (testbed/regime.py): its
    switch buffers (``deep``: the topology's; ``scaled``: time-scaled, with
    each switch port's effective bytes), ECN marking at the switches (on:
    with each port's K), the hosts' ECN negotiation and congestion control.
    A testbed nobody changed runs deep, without ECN, with its topology's
    tcp_cc; its ports' bytes are the topology's queue under its queueing."""
    state = state or read_state(prefix)
    if state.get("regime"):
        return dict(state["regime"])
    topo = topology_from_dict(state["topology"])
    q = queueing_of(prefix, state)
    n = len(q["switch_queue"].get("bands", [1]))
    per_band = topo.queue.limit if q["mode"] == "bands" else topo.queue.limit * len(topo.queue.bands)
    return {"buffer": "deep", "ecn": False, "host_tcp_ecn": None, "tcp_cc": topo.tcp_cc,
            "time_scale": None,
            "ports": {"*": {"bands": n, "per_band": per_band, "total": per_band * n, "k": None}}}


def rto_min_of(prefix: str, state: dict | None = None) -> int | None:
    """The hosts' minimum TCP RTO in force on testbed ``prefix``, ms (None:
    no route metric, the kernel's 200 ms): the topology's ``rto_min``, or
    what testbed.lifecycle.set_rto_min set since (recorded as
    ``state["rto_min"] = {"ms": ...}`` while it differs from the topology's)."""
    state = state or read_state(prefix)
    if state.get("rto_min"):
        return state["rto_min"]["ms"]
    return topology_from_dict(state["topology"]).rto_min


def node_namespace(prefix: str, node: str) -> str:
    """The namespace of a node of a running testbed, with a helpful error."""
    read_state(prefix)  # a clear error when no testbed is up
    ns = paths.netns_name(prefix, node)
    present = namespaces(prefix)
    if ns not in present:
        known = ", ".join(n.split("-", 1)[1] for n in present)
        raise TestbedError(f"node: no node '{node}' in testbed '{prefix}' (nodes: {known})")
    return ns
