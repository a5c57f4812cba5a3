"""SIGTERM unwinds like Ctrl-C, for the long-running commands (`talb run`,
`talb bench`): every node a run started ends, a fabric it built goes, a
sweep's finished runs stay."""
from __future__ import annotations

import os
import signal


def sigterm_unwinds() -> None:
    """Make SIGTERM (a timeout, a kill) raise KeyboardInterrupt in this
    process. Only here: a forked child (pyroute2 forks for namespaces)
    inherits the handler and must just die."""
    main_pid = os.getpid()

    def terminated(signum, _frame):
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)
