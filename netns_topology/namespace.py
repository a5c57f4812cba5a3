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
from typing import Callable, TypeVar

from pyroute2 import netns

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def _unshare_and_attach(name: str, failure: list[BaseException], inside, result: list) -> None:
    try:
        # A network namespace belongs to a thread: only this one moves into it.
        if _libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET) for namespace {name!r}: {os.strerror(err)}")
        # The same mount steps as `ip netns add`, binding this thread's namespace.
        netns.attach(name, "thread-self")
        if inside is not None:
            result.append(inside())
    except BaseException as exc:  # handed to the caller's thread
        failure.append(exc)
        if not isinstance(exc, FileExistsError):
            _remove_quietly(name)  # nothing half-made: no mount point without a namespace


def _remove_quietly(name: str) -> None:
    try:
        netns.remove(name)
    except OSError:
        pass


def create_namespace(name: str, inside: Callable[[], T] | None = None) -> T | None:
    """Create /run/netns/<name>; raises OSError (FileExistsError if it exists).

    ``inside``: called in the new namespace (on the thread that made it)
    once it is mounted; its result is returned. What it opens there --
    sockets -- stays in the namespace (the builder's netlink sockets,
    /proc/sys/net writes). If it fails, the namespace is removed again."""
    failure: list[BaseException] = []
    result: list = []
    worker = threading.Thread(target=_unshare_and_attach, args=(name, failure, inside, result),
                              name=f"netns-{name}")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return result[0] if result else None
