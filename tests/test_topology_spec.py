"""Topology specs without namespaces: validation, defaults, addressing, groups, round trips."""
from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from common.c_constants import SCHEMES
from netns_topology import (LeafSpine, Topo, TopologyError, load_topology, parse_rate, parse_size,
                            topology_from_dict)

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
BENCH_NET = ipaddress.IPv4Network("198.18.0.0/15")


# -- units -------------------------------------------------------------------

@pytest.mark.parametrize("text, bps", [
    ("100mbit", 100_000_000), ("1gbit", 10**9), ("500kbit", 500_000), ("100Mbit", 100_000_000),
    ("100m", 100_000_000), ("2g", 2 * 10**9), ("64k", 64_000), ("1.5gbit", 1_500_000_000),
    ("1.1gbit", 1_100_000_000), (5000, 5000), ("5000", 5000), ("1e9", 10**9), (2.5e6, 2_500_000),
])
def test_parse_rate(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text, nbytes", [
    ("150kb", 150_000), ("15k", 15_000), ("1500", 1500), (1500, 1500), ("1500b", 1500),
    ("1mb", 10**6), ("64kib", 65_536), ("1mib", 2**20),
])
def test_parse_size(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("parse, text, message", [
    (parse_rate, "10 furlongs", "cannot parse rate '10 furlongs'"),
    (parse_rate, "100mbps", "tc reads 'mbps' as bytes per second"),
    (parse_rate, True, "cannot parse rate True"),
    (parse_rate, -5, "cannot parse rate -5"),
    (parse_rate, "1.5bit", "not a whole number"),
    (parse_size, "many", "cannot parse size 'many'"),
    (parse_size, None, "cannot parse size None"),
])
def test_parse_errors(parse, text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


# -- validation: every bad field names the field and the value ----------------

BAD = [
    ({"spines": 0}, "spines: must be an integer between 1 and 256, got 0"),
    ({"spines": "2"}, "spines: must be an integer between 1 and 256, got '2'"),
    ({"leaves": 513}, "leaves: must be an integer between 1 and 512, got 513"),
    ({"hosts_per_leaf": 255}, "hosts_per_leaf: must be an integer between 1 and 254, got 255"),
    ({"hosts_per_leaf": 0}, "hosts_per_leaf: must be an integer between 1 and 254, got 0"),
    ({"spinez": 2}, "unknown field 'spinez' (did you mean 'spines'?)"),
    ({"link_rate": "10 furlongs"}, "link_rate: cannot parse rate '10 furlongs' (use e.g. 100mbit"),
    ({"link_rate": "200gbit"}, "link_rate: must be between 1kbit and 100gbit, got '200gbit'"),
    ({"host_link_rate": "999bit"}, "host_link_rate: must be between 1kbit and 100gbit, got '999bit'"),
    ({"host_link_rate": "100mbps"}, "host_link_rate: ambiguous rate '100mbps'"),
    ({"link_rate": "1gbit", "oversubscription": 2}, "oversubscription: give either link_rate or oversubscription"),
    ({"oversubscription": 0}, "oversubscription: must be a number > 0, got 0"),
    ({"oversubscription": "2:1"}, "oversubscription: must be a number > 0, got '2:1'"),
    ({"oversubscription": 1e-9}, "oversubscription: 1e-09 gives a fabric link rate"),
    ({"mtu": 100}, "mtu: must be an integer between 576 and 9000, got 100"),
    ({"mtu": 1500.0}, "mtu: must be an integer between 576 and 9000, got 1500.0"),
    ({"switch_mtu": 1505}, "switch_mtu: must be >= mtu + 12 (1512)"),
    ({"mtu": 9000}, "switch_mtu: must be >= mtu + 12 (9012)"),
    ({"queue": 150000}, "queue: must be a mapping"),
    ({"queue": {"limt": "150kb"}}, "queue: unknown field 'limt' (did you mean 'limit'?)"),
    ({"queue": {"limit": "lots"}}, "queue.limit: cannot parse size 'lots'"),
    ({"queue": {"limit": "1kb"}}, "queue.limit: must hold a full frame (1614 bytes at switch_mtu 1600), got 1000"),
    ({"queue": {"burst": 100}}, "queue.burst: must hold a full frame"),
    ({"queue": {"bands": []}}, "queue.bands: must be a list of 1 to 8 weights, got []"),
    ({"queue": {"bands": [1, 0]}}, "queue.bands[1]: must be an integer between 1 and 1000, got 0"),
    ({"queue": {"bands": [1] * 9}}, "queue.bands: must be a list of 1 to 8 weights"),
    ({"queue": {"layers_per_band": 0}}, "queue.layers_per_band: must be an integer between 1 and 256, got 0"),
    ({"link_rate": "1kbit", "queue": {"burst": "100kb"}}, "queue.burst: 100000 bytes take longer than HTB"),
    ({"tcp_cc": "Cubic!"}, "tcp_cc: must be a lowercase word, got 'Cubic!'"),
    ({"scheme": "hula"}, f"scheme: must be one of {', '.join(SCHEMES)}, got 'hula'"),
    ({"rto_min": "10"}, "rto_min: must be a duration like 10ms or 0.2s (a plain integer: milliseconds"),
    ({"rto_min": "fast"}, "rto_min: must be a duration like 10ms or 0.2s"),
    ({"rto_min": 0.01}, "rto_min: must be a duration like 10ms or 0.2s"),
    ({"rto_min": True}, "rto_min: must be a duration like 10ms or 0.2s"),
    ({"rto_min": "2.5ms"}, "rto_min: must be whole milliseconds (the route metric's unit), got '2.5ms'"),
    ({"rto_min": "0ms"}, "rto_min: must be between 1ms and 120s, got '0ms'"),
    ({"rto_min": "121s"}, "rto_min: must be between 1ms and 120s, got '121s'"),
    ({"links": "leaf0-spine1"}, "links: must be a list"),
    ({"links": [{"between": ["leaf0", "spine1"], "rate": "50mbit"}, {"between": ["leaf0", "spine0"],
      "rate": "10 furlongs"}]},
     "links[1].rate: cannot parse rate '10 furlongs' (use e.g. 100mbit, 1gbit, 500kbit)"),
    ({"links": [{"between": ["leaf0", "leaf9"], "rate": "50mbit"}]}, "links[0].between: unknown node 'leaf9'"),
    ({"links": [{"between": ["leaf0", "leaf1"], "up": False}]},
     "links[0].between: no link between 'leaf0' and 'leaf1'"),
    ({"links": [{"between": ["leaf0"], "up": False}]}, "links[0].between: must be a list of two node names"),
    ({"links": [{"between": ["leaf0", "spine0"], "up": "no"}]}, "links[0].up: must be true or false, got 'no'"),
    ({"links": [{"between": ["leaf0", "spine0"], "rat": "1mbit"}]}, "links[0]: unknown field 'rat' (did you mean 'rate'?)"),
    ({"links": [{"between": ["leaf0", "spine0"]}]}, "links[0]: an override needs rate and/or up"),
    ({"links": [{"rate": "1mbit"}]}, "links[0]: missing 'between'"),
    ({"spines": 2, "hosts": ["h0"]}, "hosts: cannot be combined with spines"),
    ({"switches": ["s0"], "hosts": [{"name": "h0", "ip": "10.0.0.1"}]},
     "hosts[0].ip: must be a host address in 198.18.0.0/15 (RFC 2544 benchmarking range), got '10.0.0.1'"),
    ({"switches": ["s0"], "hosts": [{"name": "h0", "mac": "03:00:00:00:00:01"}]},
     "hosts[0].mac: must be a unicast address, got '03:00:00:00:00:01'"),
    ({"switches": ["s0", "s0"]}, "switches[1].name: 's0' is already a node"),
    ({"switches": ["br0"]}, "switches[0].name: must be 1-12 lowercase letters/digits"),
    ({"switches": [{"name": "s0", "role": 7}]}, "switches[0].role: must be a lowercase word, got 7"),
    ({"switches": ["s0"], "hosts": ["h0"]}, "links: host 'h0' has no link"),
    ({"switches": ["s0"], "hosts": ["h0", "h1"], "links": [{"between": ["h0", "h1"]}]},
     "links[0].between: hosts connect only to switches, got 'h0' and 'h1'"),
    ({"switches": ["s0", "s1"], "hosts": ["h0"], "links": [{"between": ["h0", "s0"]}, {"between": ["h0", "s1"]}]},
     "links[1].between: host 'h0' already has its one link (eth0)"),
    ([1, 2], "a topology must be a mapping of fields, got [1, 2]"),
]


@pytest.mark.parametrize("spec, message", BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_field_is_named(spec, message):
    with pytest.raises(TopologyError) as info:
        topology_from_dict(spec)
    assert message in str(info.value)


#: names that would escape a path, split an argv, run in a shell or not fit IFNAMSIZ
#: (15) as a port name with its "-N" suffix
HOSTILE_NAMES = ["a/b", "..", "../../etc", "h0;reboot", "$(id)", "`id`", "h 0", "h0\n",
                 "-h0", "H0", "abcdefghijklm", "x" * 16, ""]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_node_names_are_refused_naming_the_field_and_value(name):
    spec = {"switches": ["s0"], "hosts": ["h0", "h1", {"name": name}],
            "links": [{"between": [h, "s0"]} for h in ("h0", "h1")]}
    with pytest.raises(TopologyError) as info:
        topology_from_dict(spec)
    assert str(info.value).startswith("hosts[2].name: must be 1-12 lowercase") \
        and repr(name) in str(info.value)
    with pytest.raises(TopologyError, match=r"^switches\[1\]\.name: "):
        topology_from_dict({"switches": ["s0", name]})


def test_port_names_fit_ifnamsiz():
    """The longest node names and a 100th parallel link still make valid interface names."""
    topo = Topo()
    a, b = "a" * 12, "b" * 12
    topo.add_switch(a)
    topo.add_switch(b)
    for _ in range(100):
        topo.add_link(a, b)
    names = [p.name for p in topo.ports(a) + topo.ports(b)]
    assert max(map(len, names)) == 15 and all("/" not in n and " " not in n for n in names)


def test_topology_error_is_a_value_error():
    assert issubclass(TopologyError, ValueError)


def test_api_checks_too():
    topo = Topo()
    with pytest.raises(TopologyError, match="mtu: must be an integer"):
        topo.mtu = 50
    with pytest.raises(TopologyError, match="unknown field 'link_rat'.*'link_rate'"):
        Topo(link_rat="1gbit")
    with pytest.raises(TopologyError, match="oversubscription: give either"):
        LeafSpine(link_rate="1gbit", oversubscription=2)
    topo.add_switch("s0")
    with pytest.raises(TopologyError, match="between: unknown node 'h9'"):
        topo.add_link("s0", "h9")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(TopologyError, match="cannot read topology file"):
        load_topology(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("spines: [1\n")
    with pytest.raises(TopologyError, match="not valid YAML"):
        load_topology(tmp_path / "bad.yaml")


# -- defaults and shape ----------------------------------------------------------

def test_defaults():
    topo = LeafSpine()
    assert [s.name for s in topo.switches] == ["spine0", "spine1", "leaf0", "leaf1"]
    assert [s.role for s in topo.switches] == ["spine", "spine", "leaf", "leaf"]
    assert [h.name for h in topo.hosts] == ["h0", "h1", "h2", "h3"]
    assert [h.leaf for h in topo.hosts] == ["leaf0", "leaf0", "leaf1", "leaf1"]
    assert {h.iface for h in topo.hosts} == {"eth0"}
    assert (topo.mtu, topo.switch_mtu, topo.tcp_cc, topo.scheme) == (1500, 1600, "cubic", "ecmp")
    assert topo.host_link_rate == topo.link_rate == 100_000_000
    q = topo.queue
    assert (q.limit, q.burst, q.cburst, q.quantum, q.bands) == (150_000, 15_000, 15_000, None, (1,))
    assert q.layers_per_band == 1
    assert len(topo.links) == 8
    assert sum(link.kind == "host" for link in topo.links) == 4
    assert all(link.up and link.rate_bps == 100_000_000 for link in topo.links)
    assert [p.name for p in topo.ports("leaf0")] == ["h0", "h1", "spine0", "spine1"]
    assert [(p.peer, p.peer_port, p.kind) for p in topo.ports("leaf0")] == [
        ("h0", "eth0", "host"), ("h1", "eth0", "host"), ("spine0", "leaf0", "fabric"), ("spine1", "leaf0", "fabric")]
    assert [p.name for p in topo.ports("spine1")] == ["leaf0", "leaf1"]
    assert [(p.name, p.peer, p.peer_port) for p in topo.ports("h2")] == [("eth0", "leaf1", "h2")]


def test_rto_min_absent_is_the_kernels_default_and_round_trips():
    assert LeafSpine().rto_min is None and "rto_min" not in LeafSpine().to_dict()
    for value, ms in (("10ms", 10), ("0.2s", 200), ("1s", 1000), (5, 5), (" 40 MS ", 40)):
        topo = topology_from_dict({"rto_min": value})
        assert topo.rto_min == ms
        assert topo.to_dict()["rto_min"] == f"{ms}ms"
        assert topology_from_dict(topo.to_dict()).rto_min == ms
    topo = LeafSpine(rto_min="10ms")
    topo.rto_min = None
    assert "rto_min" not in topo.to_dict()


def test_views_are_stable_until_a_change():
    topo = LeafSpine()
    assert sum(1 for a in topo.hosts for b in topo.hosts if a is not b) == 4 * 3
    first = topo.links[0]
    assert topo.links[0] is first
    topo.links.clear()  # a copy: the topology is not touched
    assert len(topo.links) == 8
    topo.host_link_rate = "10mbit"
    assert topo.links[0].rate_bps == 10_000_000 and first.rate_bps == 100_000_000


def test_default_yaml_is_the_default_topology():
    assert load_topology(TOPOLOGIES / "leafspine.yaml").to_dict() == LeafSpine().to_dict()
    assert topology_from_dict({}).to_dict() == LeafSpine().to_dict()


def test_hosts_numbered_leaf_by_leaf():
    topo = LeafSpine(spines=1, leaves=3, hosts_per_leaf=3)
    assert [(h.name, h.leaf) for h in topo.hosts][3:6] == [("h3", "leaf1"), ("h4", "leaf1"), ("h5", "leaf1")]
    assert [h.ip for h in topo.hosts][3:6] == ["198.18.1.1", "198.18.1.2", "198.18.1.3"]


@pytest.mark.parametrize("spines, hosts_per_leaf, host_rate, ratio, fabric", [
    (2, 2, "100mbit", 1, 100_000_000),
    (2, 2, "100mbit", 2, 50_000_000),
    (4, 8, "100mbit", 4, 50_000_000),
    (1, 4, "1gbit", 1, 4_000_000_000),
    (2, 2, "100mbit", 3, 33_333_333),
    (2, 2, "100mbit", 0.5, 200_000_000),
])
def test_oversubscription(spines, hosts_per_leaf, host_rate, ratio, fabric):
    topo = LeafSpine(spines=spines, hosts_per_leaf=hosts_per_leaf, host_link_rate=host_rate,
                     oversubscription=ratio)
    assert topo.link_rate == fabric
    assert {link.rate_bps for link in topo.links if link.kind == "fabric"} == {fabric}
    assert {link.rate_bps for link in topo.links if link.kind == "host"} == {parse_rate(host_rate)}


def test_separate_host_and_fabric_rates():
    topo = topology_from_dict({"link_rate": "1gbit", "host_link_rate": "200mbit"})
    assert {(link.kind, link.rate_bps) for link in topo.links} == {("fabric", 10**9), ("host", 200_000_000)}


def test_link_overrides():
    asym = load_topology(TOPOLOGIES / "asymmetric.yaml")
    rates = {(link.a, link.b): link.rate_bps for link in asym.links}
    assert rates.pop(("leaf0", "spine1")) == 50_000_000
    assert set(rates.values()) == {100_000_000}
    port = next(p for p in asym.ports("spine1") if p.peer == "leaf0")
    assert (port.name, port.rate_bps) == ("leaf0", 50_000_000)

    down = load_topology(TOPOLOGIES / "linkdown.yaml")
    assert [(link.a, link.b) for link in down.links if not link.up] == [("leaf1", "spine0")]
    assert [p.up for p in down.ports("leaf1")] == [True, True, False, True]

    both = topology_from_dict({"links": [{"between": ["spine1", "leaf0"], "rate": "50mbit", "up": False}]})
    (link,) = [link for link in both.links if link.rate_bps == 50_000_000]
    assert (link.a, link.b, link.up) == ("leaf0", "spine1", False)


def test_set_link_back_to_default():
    topo = LeafSpine(link_rate="200mbit")
    topo.set_link("leaf0", "spine0", rate="10mbit")
    topo.set_link("leaf0", "spine0", rate=None)
    assert {link.rate_bps for link in topo.links if link.kind == "fabric"} == {200_000_000}


# -- addressing ------------------------------------------------------------------

def test_addresses_and_macs():
    topo = LeafSpine(spines=2, leaves=4, hosts_per_leaf=254)
    ips = [ipaddress.IPv4Address(h.ip) for h in topo.hosts]
    assert all(ip in BENCH_NET for ip in ips) and len(set(ips)) == len(ips) == 4 * 254
    assert all(h.prefixlen == 15 for h in topo.hosts)
    assert topo.hosts[0].ip == "198.18.0.1" and topo.hosts[-1].ip == "198.18.3.254"
    macs = [h.mac for h in topo.hosts]
    assert len(set(macs)) == len(macs)
    # locally administered (bit 1) unicast (bit 0 clear)
    assert all(int(mac[:2], 16) & 0b11 == 0b10 for mac in macs)
    assert topo.hosts[0].mac == "02:74:6c:00:00:01" and topo.hosts[-1].mac == "02:74:6c:00:03:fe"


def test_largest_leaf_spine_addresses():
    topo = LeafSpine(spines=1, leaves=512, hosts_per_leaf=1)
    assert topo.hosts[-1].ip == "198.19.255.1"
    assert ipaddress.IPv4Address(topo.hosts[-1].ip) in BENCH_NET


def test_generic_hosts_get_free_addresses():
    topo = Topo()
    topo.add_switch("s0")
    topo.add_host("a", ip="198.18.0.2")
    for name in ("b", "c"):
        topo.add_host(name)
    assert [h.ip for h in topo.hosts] == ["198.18.0.2", "198.18.0.1", "198.18.0.3"]
    with pytest.raises(TopologyError, match="ip: 198.18.0.1 is already used"):
        topo.add_host("d", ip="198.18.0.1")
    with pytest.raises(TopologyError, match="mac: 02:74:6c:00:00:02 is already used"):
        topo.add_host("d", mac="02:74:6C:00:00:02")


# -- forwarding groups ------------------------------------------------------------

LEAF0 = {"198.18.0.1": ["h0"], "198.18.0.2": ["h1"]}


def test_groups_leaf_spine():
    topo = LeafSpine()
    assert topo.forwarding_groups("leaf0") == {**LEAF0, "198.18.1.1": ["spine0", "spine1"],
                                               "198.18.1.2": ["spine0", "spine1"]}
    assert topo.forwarding_groups("spine1") == {"198.18.0.1": ["leaf0"], "198.18.0.2": ["leaf0"],
                                                "198.18.1.1": ["leaf1"], "198.18.1.2": ["leaf1"]}


def test_groups_with_link_down():
    topo = LeafSpine(spines=2, leaves=3, hosts_per_leaf=1)
    topo.set_link("leaf1", "spine0", up=False)
    # leaf1's hosts are reached only through spine1; the dead uplink is in no group
    assert topo.forwarding_groups("leaf0") == {"198.18.0.1": ["h0"], "198.18.1.1": ["spine1"],
                                               "198.18.2.1": ["spine0", "spine1"]}
    assert topo.forwarding_groups("leaf1") == {"198.18.0.1": ["spine1"], "198.18.1.1": ["h1"],
                                               "198.18.2.1": ["spine1"]}
    # spine0 is cut off from leaf1: no entry for its host, no detour via another leaf
    assert topo.forwarding_groups("spine0") == {"198.18.0.1": ["leaf0"], "198.18.2.1": ["leaf2"]}
    assert topo.forwarding_groups("spine1") == {"198.18.0.1": ["leaf0"], "198.18.1.1": ["leaf1"],
                                                "198.18.2.1": ["leaf2"]}


def test_groups_linkdown_yaml():
    topo = load_topology(TOPOLOGIES / "linkdown.yaml")
    assert topo.forwarding_groups("leaf0") == {**LEAF0, "198.18.1.1": ["spine1"], "198.18.1.2": ["spine1"]}
    assert "198.18.1.1" not in topo.forwarding_groups("spine0")


def test_unreachable_host_has_no_entry():
    topo = LeafSpine()
    topo.set_link("h1", "leaf0", up=False)
    for switch in topo.switches:
        assert "198.18.0.2" not in topo.forwarding_groups(switch.name)
    topo.set_link("leaf1", "spine0", up=False)
    topo.set_link("leaf1", "spine1", up=False)
    assert topo.forwarding_groups("leaf0") == {"198.18.0.1": ["h0"]}
    assert topo.forwarding_groups("leaf1") == {"198.18.1.1": ["h2"], "198.18.1.2": ["h3"]}


def _ring() -> Topo:
    """s0 - s1 - s2 - s3 - s0, with two parallel links s0 = s1; hosts on s0 and s2."""
    topo = Topo()
    for i in range(4):
        topo.add_switch(f"s{i}", role="ring")
    topo.add_host("a")
    topo.add_host("b")
    topo.add_link("a", "s0")
    topo.add_link("b", "s2")
    for i in range(4):
        topo.add_link(f"s{i}", f"s{(i + 1) % 4}")
    topo.add_link("s0", "s1", rate="50mbit")
    return topo


def test_groups_any_topology():
    topo = _ring()
    a, b = (h.ip for h in topo.hosts)
    assert [p.name for p in topo.ports("s0")] == ["a", "s1", "s3", "s1-1"]
    assert [p.name for p in topo.ports("s1")] == ["s0", "s2", "s0-1"]
    assert topo.forwarding_groups("s0") == {a: ["a"], b: ["s1", "s3", "s1-1"]}
    assert topo.forwarding_groups("s1") == {a: ["s0", "s0-1"], b: ["s2"]}
    assert topo.forwarding_groups("s3") == {a: ["s0"], b: ["s2"]}
    topo.set_link("s2", "s3", up=False)
    # s3 is now only on a detour: no group; s0 sends everything via s1
    assert topo.forwarding_groups("s3") == {}
    assert topo.forwarding_groups("s0") == {a: ["a"], b: ["s1", "s1-1"]}
    with pytest.raises(TopologyError, match="unknown switch 'a'"):
        topo.forwarding_groups("a")


@settings(max_examples=60, deadline=None)
@given(spines=st.integers(1, 4), leaves=st.integers(1, 4), hosts=st.integers(1, 3),
       down=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=4))
def test_groups_properties(spines, leaves, hosts, down):
    topo = LeafSpine(spines=spines, leaves=leaves, hosts_per_leaf=hosts)
    for leaf, spine in down:
        if leaf < leaves and spine < spines:
            topo.set_link(f"leaf{leaf}", f"spine{spine}", up=False)
    groups = {s.name: topo.forwarding_groups(s.name) for s in topo.switches}
    by_ip = {h.ip: h for h in topo.hosts}
    for switch in topo.switches:
        ports = {p.name: p for p in topo.ports(switch.name)}
        for ip, group in groups[switch.name].items():
            host = by_ip[ip]
            assert group and all(ports[name].up for name in group)
            if switch.name == host.leaf:
                assert group == [host.name]
            # no black holes: every next hop forwards it further
            assert all(ip in groups[ports[name].peer] for name in group if ports[name].kind == "fabric")
            if switch.role == "spine" and any(p.peer == host.leaf and p.up for p in ports.values()):
                assert group == [host.leaf]
    # a leaf with live uplinks reaches every host of a leaf it shares a live spine with
    for leaf in (f"leaf{i}" for i in range(leaves)):
        spines_up = {p.peer for p in topo.ports(leaf) if p.kind == "fabric" and p.up}
        for host in topo.hosts:
            shared = spines_up & {p.peer for p in topo.ports(host.leaf) if p.kind == "fabric" and p.up}
            if host.leaf != leaf and shared:
                assert groups[leaf][host.ip] == sorted(shared, key=lambda s: int(s[5:]))
    assert topology_from_dict(json.loads(json.dumps(topo.to_dict()))).to_dict() == topo.to_dict()


# -- round trips -------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in TOPOLOGIES.glob("*.yaml")))
def test_yaml_files_round_trip(name):
    topo = load_topology(TOPOLOGIES / name)
    d = topo.to_dict()
    assert json.loads(json.dumps(d)) == d
    again = topology_from_dict(yaml.safe_load(yaml.safe_dump(d)))
    assert again.to_dict() == d
    assert again.links == topo.links and again.hosts == topo.hosts


def test_round_trip_everything_set():
    topo = LeafSpine(spines=3, leaves=2, hosts_per_leaf=3, host_link_rate="200mbit", oversubscription=2,
                     mtu=9000, switch_mtu=9100, tcp_cc="bbr", scheme="talb",
                     queue={"limit": "1mb", "burst": "20kb", "cburst": "30k", "quantum": 9014, "bands": [4, 2, 1]})
    topo.set_link("leaf1", "spine2", rate="33mbit", up=False)
    d = topo.to_dict()
    assert d["link_rate"] == "100mbit" and d["queue"]["quantum"] == 9014  # 3 * 200 / (3 * 2)
    assert d["links"] == [{"between": ["leaf1", "spine2"], "rate": "33mbit", "up": False}]
    assert topology_from_dict(json.loads(json.dumps(d))).to_dict() == d


def test_generic_topology_round_trip(tmp_path):
    topo = _ring()
    topo.set_link("s2", "s3", up=False)
    d = topo.to_dict()
    assert {"switches", "hosts", "links"} <= d.keys() and "spines" not in d
    path = tmp_path / "ring.yaml"
    path.write_text(yaml.safe_dump(d))
    again = load_topology(path)
    assert again.to_dict() == d
    assert again.forwarding_groups("s0") == topo.forwarding_groups("s0")


def test_hand_written_generic_yaml(tmp_path):
    path = tmp_path / "line.yaml"
    path.write_text("switches: [s0, s1]\nhosts: [h0, h1]\n"
                    "links:\n  - {between: [h0, s0]}\n  - {between: [s1, h1], rate: 10mbit}\n"
                    "  - {between: [s0, s1]}\n")
    topo = load_topology(path)
    assert [(h.name, h.leaf) for h in topo.hosts] == [("h0", "s0"), ("h1", "s1")]
    assert topo.forwarding_groups("s0") == {"198.18.0.1": ["h0"], "198.18.0.2": ["s1"]}
    assert [link.rate_bps for link in topo.links] == [100_000_000, 10_000_000, 100_000_000]


def test_extended_leaf_spine_saves_explicitly():
    topo = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1)
    topo.add_link("leaf0", "leaf1", rate="1gbit")
    d = topo.to_dict()
    assert "spines" not in d and {"between": ["leaf0", "leaf1"], "rate": "1gbit"} in d["links"]
    assert topology_from_dict(d).links == topo.links


def test_shaping_is_true_false_or_batched_and_round_trips():
    topo = topology_from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "shaping": "batched"})
    assert topo.shaping == "batched" and topology_from_dict(topo.to_dict()).shaping == "batched"
    assert LeafSpine(shaping=False).shaping is False and LeafSpine().shaping is True
    with pytest.raises(TopologyError, match="shaping: must be true, false or batched, got 'fast'"):
        topology_from_dict({"spines": 1, "leaves": 1, "hosts_per_leaf": 1, "shaping": "fast"})
