"""Create a named network namespace inside this process, with no helper process.

pyroute2's ``netns.create`` forks a child that unshares and bind-mounts the
namespace. If the parent is SIGKILLed (a killed ``talb testbed up``), that
child lives on and may mount a namespace *after* ``down`` has scanned
/run/netns, leaving it behind. Here a short-lived thread does the unshare and
the mount: a kill stops everything at once, and what it leaves (at most an
empty mount-point file) is something ``teardown`` removes.
"""
from __future__ import annotations

import ctypes
import os
import threading

from pyroute2 import netns

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _unshare_and_attach(name: str, failure: list[BaseException]) -> None:
    try:
        # A network namespace belongs to a thread: only this one moves into it.
        if _libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET) for namespace {name!r}: {os.strerror(err)}")
        # The same mount steps as `ip netns add`, binding this thread's namespace.
        netns.attach(name, "thread-self")
    except BaseException as exc:  # handed to the caller's thread
        failure.append(exc)
        if not isinstance(exc, FileExistsError):
            _remove_quietly(name)  # nothing half-made: no mount point without a namespace


def _remove_quietly(name: str) -> None:
    try:
        netns.remove(name)
    except OSError:
        pass


def create_namespace(name: str) -> None:
    """Create /run/netns/<name>; raises OSError (FileExistsError if it exists)."""
    failure: list[BaseException] = []
    worker = threading.Thread(target=_unshare_and_attach, args=(name, failure), name=f"netns-{name}")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
