"""A Dask distributed client for talb's --cluster commands (`talb bench
--cluster`, `talb attach/scheme/detach --cluster`).

The client never becomes Dask's default client (``set_as_default=False``):
talb does not change what a user's own code gets from ``default_client()``.
So every call must name it -- ``distributed.as_completed`` included, which
otherwise looks for a default client and finds none when talb runs in a
process of its own. Dask is imported only when a --cluster command runs.
"""
from __future__ import annotations

CONNECT_TIMEOUT_S = 10


def connect(address: str, what_to_start: str, error: type[Exception] = ValueError,
            timeout_s: float = CONNECT_TIMEOUT_S):
    """A client of the scheduler at ``address``; ``error`` naming --cluster
    and saying what to start (``what_to_start``) when none answers there."""
    from distributed import Client

    try:
        return Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise error(f"--cluster {address}: no Dask scheduler answers there ({exc}); start one "
                    f"with {what_to_start}") from None
