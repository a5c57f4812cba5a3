"""Run by tests/test_scheme_plugin.py in a process of its own, with
TALB_SCHEME_PATH=tests/fixtures/schemes (the registry reads it at import):
the switch program -- TC and XDP -- built with the test-only scheme
``roundrobin`` (id 15), its decisions under BPF_PROG_TEST_RUN against its
Python model, its decision counter and its programs' verifier counts.
Prints one JSON object. Pinned to CPU 0 (the scheme's turn is per CPU,
BPF_PROG_TEST_RUN runs on the caller's CPU)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SRC, DST4, DST1 = "198.18.0.1", "198.18.1.4", "198.18.1.1"
UPLINKS = ("p1", "p2", "p3", "p4")
TC_ACT_REDIRECT = 7
XDP_REDIRECT = 4


def tcp(sport: int) -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=SRC, dst=DST4) / TCP(sport=sport, dport=5201, flags="A") / (b"x" * 64))


def decide(datapath_cls=None) -> dict:
    from datapath import control
    from datapath.schemes.registry import get
    from helpers import ProgTestSwitch, loaded_switch

    model = get("roundrobin").model
    redirect = XDP_REDIRECT if datapath_cls else TC_ACT_REDIRECT
    out = {"mismatches": [], "sent": 0}
    with loaded_switch("plug", 6, datapath_cls=datapath_cls) as (name, dp, ifindex):
        sw = ProgTestSwitch(name, dp, ifindex, 6)
        group = [ifindex[p] for p in UPLINKS]

        def program(down=()):
            rows = [(n, ifindex[n], n == "p0", n not in down) for n in sw.port_names]
            control.program_switch(sw.maps, rows, {DST4: group, DST1: [ifindex["p5"]]},
                                   scheme="roundrobin", hash_seed=7)

        program()
        control.set_release(sw.maps, False)
        turn = 0
        for down in ((), ("p2",), ("p1", "p4")):
            program(down)
            up = {ifindex[p] for p in UPLINKS if p not in down}
            for i in range(12):
                before = sw.tx()
                ret, _ = sw.run(tcp(40000 + i % 3))
                moved = [k for k, v in sw.tx().items() if v != before[k]]
                want = sw.port_of(group[model(group, up, turn)])
                if ret != redirect or moved != [want]:
                    out["mismatches"].append({"turn": turn, "down": down, "ret": ret,
                                              "got": moved, "want": want})
                turn += 1
                out["sent"] += 1
        out["counters"] = {k: v for k, v in sw.counters().items() if v}
        out["config_scheme"] = control.read_config(sw.maps)["scheme"]
        out["verified_insns"] = {n: p.verified_insns for n, p in dp.programs().items()}
    return out


def main() -> None:
    from common.c_constants import CONST, COUNTER_NAMES
    from datapath.xdp import XdpSwitchDatapath

    os.sched_setaffinity(0, {0})
    result = {"decision_counter": COUNTER_NAMES.index("decision_roundrobin")
              - CONST["CNT_DECISION_BASE"],
              "tc": decide(), "xdp": decide(XdpSwitchDatapath)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
