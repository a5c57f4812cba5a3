"""One node of a training run, inside a host namespace:

    python -m workload.patterns.node PLAN.json ROLE RANK

PLAN.json is written by workload/experiment.py; records go to stdout as
JSON lines (workload/patterns/common.py). Exit status 0 only when this
node's part of every iteration is done; any failure exits non-zero at once.
"""
from __future__ import annotations

import faulthandler
import json
import resource
import signal
import sys

from workload.patterns import get_pattern
from workload.patterns.common import emit, fail, peak_threads


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    path, role, rank = argv
    # A stuck run: the experiment asks every node for its threads' stacks (stderr).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    with open(path) as f:
        plan = json.load(f)
    pattern = get_pattern(plan["arch"])
    try:
        pattern.run(plan, role, int(rank))
    except BaseException as exc:  # noqa: BLE001
        fail(exc)
    # what the node cost (the connection models' price, docs/workload.md "Connections")
    use = resource.getrusage(resource.RUSAGE_SELF)
    emit({"ev": "cost", "node": pattern.nodes(plan).index((role, int(rank))),
          "cpu_s": use.ru_utime + use.ru_stime, "threads": peak_threads()})
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
