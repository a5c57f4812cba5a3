"""Which ports of a switch are usable: administratively up with carrier.

A port goes unusable when it is set down in the switch's namespace, and
also when its peer is set down (a veth loses carrier, IFF_LOWER_UP). The
watcher reads the state once with a dump, then follows RTM_NEWLINK
notifications: the agent's loop waits for the next window in ``select()``
on the watchers (:meth:`LinkWatcher.fileno`), so a change is handled when
it happens, not at the next window. If the kernel drops notifications
(receive buffer overrun), the watcher dumps again.
"""
from __future__ import annotations

from agent.rtnl import LinkEvents, LinkState, Rtnl


class LinkWatcher:
    """Up/down of the interfaces of one namespace, by name."""

    def __init__(self, netns: str | None, rtnl: Rtnl):
        self.netns = netns
        self._rtnl = rtnl
        # Subscribe before the dump, so no change falls between the two.
        self._events = LinkEvents(netns)
        self._by_index: dict[int, LinkState] = {}
        self.links: dict[str, LinkState] = {}
        # Every name ever seen: a deleted port is down, and still has its index
        # (its groups are rewritten without it instead of failing).
        self._known: dict[str, int] = {}
        #: grows whenever ``links`` may have changed (a reader caches by it)
        self.version = 0
        self._resync()

    def _resync(self) -> None:
        self._by_index = self._rtnl.links()
        self._index_names()

    def _index_names(self) -> None:
        # Kept by ifindex: a renamed interface replaces its old name.
        self.links = {link.name: link for link in self._by_index.values()}
        self.version += 1
        self._known.update((name, link.ifindex) for name, link in self.links.items())

    def fileno(self) -> int:
        """Readable when notifications are pending."""
        return self._events.fileno()

    def up(self, name: str) -> bool:
        link = self.links.get(name)
        return link is not None and link.up

    def ifindex(self, name: str) -> int:
        try:
            return self._known[name]
        except KeyError:
            raise LookupError(f"no interface {name!r} in namespace {self.netns}") from None

    def poll(self) -> bool:
        """Apply pending notifications; True if any port's up/down changed."""
        events = self._events.drain()
        if not events and not self._events.overflowed:
            return False  # the common case, every window: nothing happened
        before = {name: link.up for name, link in self.links.items()}
        for deleted, link in events:
            if deleted:
                self._by_index.pop(link.ifindex, None)
            else:
                self._by_index[link.ifindex] = link
        if self._events.overflowed:
            self._events.overflowed = False
            self._resync()
        elif events:
            self._index_names()
        return before != {name: link.up for name, link in self.links.items()}

    def close(self) -> None:
        self._events.close()
