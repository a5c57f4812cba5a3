"""Pure-Python models of the switch's load-balancing decisions.

One module per scheme, mirroring ``bpf/include/talb/schemes/`` file for
file, so that the C and the Python of a scheme can be read side by side:

    pick.py     schemes/pick.h     usable ports, the per-CPU xorshift32 draw
    ecmp.py     schemes/ecmp.h     5-tuple hash mod n
    rps.py      schemes/rps.h      a random usable port per packet
    letflow.py  schemes/letflow.h  flowlets on random ports
                schemes/flowlet.h  the flowlet step LetFlow and CONGA share
    drill.py    schemes/drill.h    DRILL(d, m) over per-port queue estimates
    conga.py    schemes/conga.h    CONGA: DRE, leaf-to-leaf tables, flowlets
    talb.py     schemes/talb.h     TaLB (and what the agent publishes for it)
    presto.py   schemes/presto.h   Presto: flowcells round-robin over the usable ports
    wcmp.py     schemes/wcmp.h     ECMP weighted by the ports' link rates

Each scheme module ends with its ``SCHEME`` record (spec.py: id, parameters,
XDP, fallback, decision counters, clock, model); registry.py finds them by
walking this package (and the directories of $TALB_SCHEME_PATH) and checks
each against its header's id and flags. Everything that lists schemes
iterates ``registry.SCHEMES`` (docs/schemes.md, "The registry"; a new
scheme: docs/add-a-scheme.md).

The models hold no kernel state; the property tests
(tests/test_schemes_switch.py, tests/test_talb_switch.py) run them beside
the BPF program, packet by packet, and compare every decision.
"""
