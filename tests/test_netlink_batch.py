"""netns_topology/netlink_batch.py: requests to one namespace sent together
on a socket opened inside it, each acked; the first refusal raised naming
the request and the kernel's reason; create_namespace's ``inside`` hook."""
from __future__ import annotations

import errno

import pytest

from helpers import new_prefix, skip_or_fail

pytestmark = pytest.mark.live


@pytest.fixture
def name():
    from netns_topology import teardown

    prefix = new_prefix()
    yield f"{prefix}-ns"
    teardown(prefix)


@pytest.fixture
def sock(name):
    from netns_topology import create_namespace
    from netns_topology.netlink_batch import open_rtnl_socket

    try:
        s = create_namespace(name, open_rtnl_socket)
    except OSError as exc:
        skip_or_fail(f"cannot create network namespace: {exc}")
    yield s
    s.close()


def _links(name) -> dict[int, tuple[str, int, int]]:
    from pyroute2 import IPRoute

    with IPRoute(netns=name, flags=0) as ipr:
        return {link["index"]: (link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_MTU"),
                                link["flags"] & 1)
                for link in ipr.get_links()}


def test_many_requests_in_one_flush_land_in_the_socket_s_namespace(name, sock):
    from netns_topology.netlink_batch import NetlinkBatch

    batch = NetlinkBatch(sock)
    # more than one send's worth, at the indexes we choose
    for i in range(150):
        batch.link("add", index=10 + i, ifname=f"d{i}", kind="bridge", mtu=1400 + i)
    for i in range(150):
        batch.link("set", index=10 + i, state="up")
    assert batch.flush() == 300 and len(batch) == 0
    links = _links(name)
    assert links[1][0] == "lo"
    assert all(links[10 + i] == (f"d{i}", 1400 + i, 1) for i in range(150))


def test_a_refused_request_names_itself_and_the_kernel_s_reason(name, sock):
    from netns_topology.netlink_batch import NetlinkBatch, NetlinkError

    batch = NetlinkBatch(sock)
    batch.link("add", index=5, ifname="dup", kind="bridge")
    batch.link("add", index=6, ifname="dup", kind="bridge")      # the same name again
    batch.link("add", index=7, ifname="after", kind="bridge")
    with pytest.raises(NetlinkError) as info:
        batch.flush()
    assert info.value.errno == errno.EEXIST
    assert "ifname=dup" in str(info.value) and "index=6" in str(info.value)
    # the ones before and after the refused one were done
    assert {v[0] for v in _links(name).values()} == {"lo", "dup", "after"}


def test_tc_on_sets_each_interface_s_index(name, sock):
    from pyroute2 import IPRoute

    from netns_topology.netlink_batch import NetlinkBatch

    batch = NetlinkBatch(sock)
    for i in (3, 4, 9):
        batch.link("add", index=i, ifname=f"q{i}", kind="bridge")
    batch.flush()
    batch.tc_on([3, 4, 9], "add", "htb", 0x10000, default=0x10)
    batch.flush()
    with IPRoute(netns=name, flags=0) as ipr:
        kinds = {q["index"]: q.get_attr("TCA_KIND") for q in ipr.get_qdiscs()
                 if q["parent"] == 0xFFFFFFFF}
    assert {i: kinds.get(i) for i in (3, 4, 9)} == {3: "htb", 4: "htb", 9: "htb"}


def test_a_failing_inside_hook_leaves_no_namespace(name):
    from pyroute2 import netns

    from netns_topology import create_namespace

    def broken():
        raise OSError("injected")

    with pytest.raises(OSError, match="injected"):
        create_namespace(name, broken)
    assert name not in netns.listnetns()
