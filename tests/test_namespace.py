"""create_namespace: a real namespace, made in-process, nothing left on failure."""
from __future__ import annotations

import os

import pytest

from helpers import new_prefix, skip_or_fail

pytestmark = pytest.mark.live


@pytest.fixture
def name():
    from netns_topology import teardown

    prefix = new_prefix()
    yield f"{prefix}-ns"
    teardown(prefix)


def _inode(path: str) -> int:
    return os.stat(path).st_ino


def test_creates_a_new_network_namespace_and_leaves_ours_alone(name):
    from pyroute2 import IPRoute

    from netns_topology import create_namespace

    ours = _inode("/proc/self/ns/net")
    try:
        create_namespace(name)
    except OSError as exc:
        skip_or_fail(f"cannot create network namespace: {exc}")
    assert _inode(f"/run/netns/{name}") != ours, "the mount point must hold a namespace of its own"
    assert _inode("/proc/self/ns/net") == ours, "this process (every thread of it) stays where it was"
    with IPRoute(netns=name, flags=0) as ipr:
        assert [link.get_attr("IFLA_IFNAME") for link in ipr.get_links()] == ["lo"]


def test_an_existing_name_is_refused_and_kept(name):
    from netns_topology import create_namespace

    create_namespace(name)
    before = _inode(f"/run/netns/{name}")
    with pytest.raises(FileExistsError):
        create_namespace(name)
    assert _inode(f"/run/netns/{name}") == before


def test_creating_leaves_no_thread_or_process_behind(name):
    import threading

    from pyroute2 import netns

    from netns_topology import create_namespace

    threads = threading.active_count()
    create_namespace(name)
    assert threading.active_count() == threads
    assert netns.ns_pids().get(name, []) == [], "no process may live in (or hold) the new namespace"
