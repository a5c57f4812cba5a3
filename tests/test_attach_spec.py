"""The `talb attach` fabric file: what it describes, how talb routes it, and
the errors a wrong file gets (field and value named)."""
from __future__ import annotations

import copy

import pytest

from netns_topology.attach_spec import fabric_from_dict, read_fabric_file
from netns_topology.errors import TopologyError

GOOD = {
    "name": "lab", "link_rate": "20mbit", "scheme": "talb",
    "switches": [
        {"name": "spine1", "ports": [{"iface": "s1-eth1", "to": "leaf1"}, {"iface": "s1-eth2", "to": "leaf2"}]},
        {"name": "spine2", "ports": [{"iface": "s2-eth1", "to": "leaf1"}, {"iface": "s2-eth2", "to": "leaf2"}]},
        {"name": "leaf1", "ports": [{"iface": "l1-eth1", "to": "h1"}, {"iface": "l1-eth2", "to": "spine1"},
                                    {"iface": "l1-eth3", "to": "spine2"}]},
        {"name": "leaf2", "netns": "rack2", "ports": [
            {"iface": "l2-eth1", "to": "h2"}, {"iface": "l2-eth2", "to": "spine1", "rate": "20mbit"},
            {"iface": "l2-eth3", "to": "spine2"}]},
    ],
    "hosts": [{"name": "h1", "ip": "10.0.0.1", "iface": "h1-eth0", "pid": 4242},
              {"name": "h2", "ip": "10.0.0.2", "iface": "eth0", "netns": "h2"}],
}


def bad(mutate) -> str:
    data = copy.deepcopy(GOOD)
    mutate(data)
    with pytest.raises(TopologyError) as err:
        fabric_from_dict(data)
    return str(err.value)


def test_a_leaf_spine_file_routes_remote_hosts_over_every_uplink():
    fabric = fabric_from_dict(GOOD)
    assert fabric.forwarding_groups("leaf1") == {"10.0.0.1": ["l1-eth1"],
                                                  "10.0.0.2": ["l1-eth2", "l1-eth3"]}
    assert fabric.forwarding_groups("spine2") == {"10.0.0.1": ["s2-eth1"], "10.0.0.2": ["s2-eth2"]}
    assert fabric.leaf_of("h2") == "leaf2"
    assert fabric.slowest_multipath_rate() == 20_000_000
    assert [h.reachable for h in fabric.hosts] == [True, True]
    assert fabric_from_dict(fabric.to_dict()).to_dict() == fabric.to_dict()


def test_a_host_without_namespace_is_routed_but_gets_no_tagger():
    data = copy.deepcopy(GOOD)
    del data["hosts"][1]["netns"]
    fabric = fabric_from_dict(data)
    assert not fabric.hosts[1].reachable
    assert "10.0.0.2" in fabric.forwarding_groups("leaf1")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["hosts"][1].update(ip="10.0.0.1"), "hosts[1].ip: 10.0.0.1 is also host h1's address"),
    (lambda d: d["hosts"][0].update(ip="10.0.0.300"), "hosts[0].ip: not an IPv4 address: '10.0.0.300'"),
    (lambda d: d["switches"][0]["ports"][1].update(to="leaf9"),
     "switches[0].ports[1].to: faces unknown node 'leaf9'"),
    (lambda d: d["switches"][2]["ports"][0].update(iface="s1-eth1"),
     "switches[2].ports[0].iface: 's1-eth1' is also a port of spine1 in the same namespace"),
    (lambda d: d["switches"][1]["ports"][0].update(iface="s2-eth2"),
     "switches[1].ports[1].iface: 's2-eth2' is also a port of spine2"),
    (lambda d: d["switches"][0]["ports"][0].update(iface="a-very-long-interface"),
     "switches[0].ports[0].iface: must be an interface name"),
    (lambda d: d["switches"][0]["ports"].pop(), "leaf2 has 1 port(s) facing spine1 but spine1 has 0 facing leaf2"),
    (lambda d: d["switches"][2]["ports"].pop(0), "hosts: no switch port faces host 'h1'"),
    (lambda d: d["switches"][3]["ports"].append({"iface": "l2-eth9", "to": "h1"}),
     "host 'h1' is faced by 2 ports"),
    (lambda d: d["hosts"][0].update(netns="x"), "hosts[0].pid: give netns or pid, not both"),
    (lambda d: d["hosts"][0].update(pid=-3), "hosts[0].pid: must be a process id"),
    (lambda d: d["hosts"][0].pop("iface"), "hosts[0].iface: host h1 has a namespace but no interface"),
    (lambda d: d["switches"][0].update(color="red"), "switches[0].color: unknown field"),
    (lambda d: d.update(scheme="fastest"), "scheme: must be one of ecmp, rps"),
    (lambda d: d.update(name="Lab"), "name: must be 1-12 lowercase"),
    (lambda d: d["switches"][3].update(name="h1"), "switches[3].name: 'h1' is already a node"),
    (lambda d: d["switches"][3]["ports"][1].update(rate="10mbit"), "rates differ"),
    (lambda d: d.pop("hosts"), "hosts: missing"),
])
def test_errors_name_the_field_and_the_value(mutate, message):
    assert message in bad(mutate)


def test_switches_in_different_namespaces_may_share_interface_names():
    data = copy.deepcopy(GOOD)
    data["switches"][3]["ports"][0]["iface"] = "l1-eth1"  # leaf2 is in namespace rack2
    assert fabric_from_dict(data).switch("leaf2").ports[0].iface == "l1-eth1"


def test_reading_a_file(tmp_path):
    import yaml

    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert read_fabric_file(path).name == "lab"
    path.write_text("switches: [")
    with pytest.raises(TopologyError, match="--fabric: .* is not valid YAML"):
        read_fabric_file(path)
    with pytest.raises(TopologyError, match="--fabric: cannot read"):
        read_fabric_file(tmp_path / "missing.yaml")


def test_two_machines_each_attach_their_leaf_and_route_through_the_other():
    """One file per machine: its own leaf, the other leaf remote (routed
    through, attached by the other machine), two cables = two paths."""
    data = {"name": "laba", "switches": [
        {"name": "a", "ports": [{"iface": "va0", "to": "ha"}, {"iface": "enp1s0f0", "to": "b"},
                                {"iface": "enp1s0f1", "to": "b"}]},
        {"name": "b", "remote": True, "ports": [{"iface": "vb0", "to": "hb"},
                                                {"iface": "enp1s0f0", "to": "a"},
                                                {"iface": "enp1s0f1", "to": "a"}]}],
        "hosts": [{"name": "ha", "ip": "10.0.0.1", "iface": "ha0", "netns": "ha"},
                  {"name": "hb", "ip": "10.0.0.2"}]}
    fabric = fabric_from_dict(data)
    assert fabric.forwarding_groups("a") == {"10.0.0.1": ["va0"], "10.0.0.2": ["enp1s0f0", "enp1s0f1"]}
    assert [s.remote for s in fabric.switches] == [False, True]
    assert fabric_from_dict(fabric.to_dict()).to_dict() == fabric.to_dict()
    data["switches"][1]["netns"] = "x"
    with pytest.raises(TopologyError, match=r"switches\[1\]\.remote: a remote switch has no namespace"):
        fabric_from_dict(data)


def test_bands_where_the_file_asks_fabric_wide_and_per_port():
    """``queue:`` is the topology YAML's (bands, limit, ...): fabric-wide for
    every port, a port's own overrides it, ``queue: false`` keeps a port's
    own queue. The switch marks for its ports' bands; the agent's buffer is
    one band's limit where bands go, else queue_limit."""
    data = copy.deepcopy(GOOD)
    data["queue"] = {"bands": [1, 4, 2, 1], "limit": "40kb"}
    data["switches"][2]["ports"][0]["queue"] = False                 # leaf1's host port
    data["switches"][0]["ports"][0]["queue"] = {"bands": [1, 1, 1, 1], "limit": "20kb"}
    fabric = fabric_from_dict(data)
    leaf1 = fabric.switch("leaf1").ports
    assert leaf1[0].queue is None and leaf1[1].queue.bands == (1, 4, 2, 1)
    assert leaf1[1].queue.limit == 40_000 and fabric.port_buffer(leaf1[1]) == 40_000
    assert fabric.port_buffer(leaf1[0]) == 150_000                  # queue_limit
    assert fabric.switch("spine1").ports[0].queue.limit == 20_000
    assert fabric.bands_of("leaf1") == (4, 1) and fabric.bands_of("spine1") == (4, 1)
    assert fabric_from_dict(fabric.to_dict()).to_dict() == fabric.to_dict()
    assert fabric_from_dict(GOOD).bands_of("leaf1") == (1, 0)       # none asked: one band
    assert not fabric.replace_qdisc
    data["replace_qdisc"] = True
    assert fabric_from_dict(data).replace_qdisc


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(queue={"bands": [1, 0]}), "queue.bands[1]: must be an integer between 1 and 1000, got 0"),
    (lambda d: d.update(queue={"bands": []}), "queue.bands: must be a list of 1 to"),
    (lambda d: d.update(queue={"limit": "4zb"}), "queue.limit: cannot parse size '4zb'"),
    (lambda d: d.update(queue={"bands": [1], "colour": 1}), "queue: unknown field 'colour'"),
    (lambda d: d.update(queue=True), "queue: must be a mapping like {bands: [1, 4, 2, 1], limit: 40kb}"),
    (lambda d: d["switches"][2]["ports"][1].update(queue={"limit": 0}),
     "switches[2].ports[1].queue.limit: must be between 1 and"),
    (lambda d: d["switches"][2]["ports"][1].update(queue={"bands": [1, 2]}) or
     d["switches"][2]["ports"][2].update(queue={"bands": [1, 2, 3]}),
     "switches[2].ports[2].queue: 3 bands of 1 layer(s), but switches[2].ports[1] has 2 of 1"),
    (lambda d: d.update(replace_qdisc="yes"), "replace_qdisc: must be true or false, got 'yes'"),
])
def test_bad_bands_name_the_field_and_the_value(mutate, message):
    assert message in bad(mutate)


# --- one file over several machines (`talb attach --cluster`, `--machine`) -----------------
SPREAD = {"name": "lab", "switches": [
    {"name": "a", "machine": "srv-a.lab", "ports": [{"iface": "va0", "to": "ha"},
                                                    {"iface": "enp1s0f0", "to": "b"}]},
    {"name": "b", "machine": "srvb", "netns": "x", "ports": [{"iface": "vb0", "to": "hb"},
                                                             {"iface": "enp1s0f0", "to": "a"}]}],
    "hosts": [{"name": "ha", "ip": "10.0.0.1", "iface": "ha0", "netns": "ha"},
              {"name": "hb", "ip": "10.0.0.2", "iface": "hb0", "netns": "hb"}]}


def test_a_machines_part_is_the_one_machine_file_of_that_machine():
    """A machine's part: its switches as written, the others remote (no
    namespace), the other machines' hosts routed to but untagged, no
    machine: keys (the record each machine keeps reads back as a plain file)."""
    fabric = fabric_from_dict(copy.deepcopy(SPREAD))
    assert fabric.machines() == ["srv-a.lab", "srvb"]
    part = fabric.part("srvb")
    assert [(s.name, s.remote, s.netns, s.machine) for s in part.switches] == [
        ("a", True, None, None), ("b", False, "x", None)]
    assert [(h.name, h.reachable) for h in part.hosts] == [("ha", False), ("hb", True)]
    assert part.forwarding_groups("b") == fabric.forwarding_groups("b")
    assert fabric_from_dict(part.to_dict()).to_dict() == part.to_dict()
    assert fabric_from_dict(fabric.to_dict()).machines() == ["srv-a.lab", "srvb"]
    with pytest.raises(TopologyError, match=r"machine: no switch is on machine 'srvc' "
                                            r"\(the file's machines: srv-a.lab, srvb\)"):
        fabric.part("srvc")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["switches"][1].pop("machine"),
     "switches[1].machine: missing: switches[0] names its machine, so every switch does"),
    (lambda d: d["switches"][0].update(machine="srv a"), "switches[0].machine: must be a host name"),
    (lambda d: d["switches"][0].update(machine=7), "switches[0].machine: must be a host name"),
    (lambda d: d["switches"][0].update(remote=True), "switches[0].remote: a switch with a machine is "
                                                     "attached on that machine"),
])
def test_machine_errors_name_the_field_and_the_value(mutate, message):
    data = copy.deepcopy(SPREAD)
    mutate(data)
    with pytest.raises(TopologyError) as err:
        fabric_from_dict(data)
    assert message in str(err.value)
