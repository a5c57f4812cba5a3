"""A Mininet leaf-spine fabric for tests/test_attach_live.py, run by the
system Python (Debian's python3-mininet):

    /usr/bin/python3 tests/mininet_fabric.py TAG RATE_MBIT [FIRST_INDEX]

2 spines x 2 leaves x 2 hosts, Mininet LinuxBridge switches and TCLink links
(HTB at RATE_MBIT on both ends). The leaf-spine has loops, so the bridges run
kernel STP with short timers, as talb's own fabric does
(netns_topology/builder.py: STP); talb's switch programs redirect at TC
ingress, before the bridge, and use every uplink whatever STP blocks. Switch
ports have MTU 1600 (room for the 12-byte TaLB option, docs/design.md §3),
hosts 1500 with gso_max_segs 1; offloads are off everywhere, as a user of
talb sets them up (docs/attach.md). With FIRST_INDEX the links' ends get
ifindexes FIRST_INDEX, FIRST_INDEX + 1, ... (Mininet's own `ip link add`,
with an index on each end): the switch ports of a root namespace that has
lived a while, past talb's TALB_PORT_SLOTS (4096).

Prints one JSON line describing the fabric (hosts with pid, ip, interface;
switches with their ports and what each faces), then reads commands on
stdin: ``ping`` (Mininet's pingAll: prints {"ping_loss": percent}) and
``stop`` (net.stop(), prints {"stopped": true}, exits).
"""
import json
import sys
import time

from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo

STP = "stp_state 1 forward_delay 200 hello_time 100 max_age 600"


class IndexedLink(TCLink):
    """TCLink whose two veth ends get the next two ifindexes from
    ``next_index`` (None: the kernel's), each in its own node's namespace."""

    next_index = None

    @classmethod
    def makeIntfPair(cls, intf1, intf2, addr1=None, addr2=None, node1=None, node2=None,
                     deleteIntfs=True):
        if cls.next_index is None or node1 is None:
            return super().makeIntfPair(intf1, intf2, addr1, addr2, node1, node2, deleteIntfs)
        first = cls.next_index
        cls.next_index += 2
        mac1 = f" address {addr1}" if addr1 else ""
        mac2 = f" address {addr2}" if addr2 else ""
        netns = node2.pid if node2 else 1
        out = node1.cmd(f"ip link add name {intf1}{mac1} index {first} type veth "
                        f"peer name {intf2}{mac2} index {first + 1} netns {netns}")
        if out.strip():
            raise Exception(f"Error creating interface pair ({intf1},{intf2}): {out}")


class StpBridge(LinuxBridge):
    """Mininet's LinuxBridge, made with `ip link` (no brctl) and talb's
    short STP timers: the fabric has loops."""

    @classmethod
    def setup(cls):
        pass

    def connected(self):
        states = self.cmd(f"cat /sys/class/net/{self.name}/brif/*/state").split()
        return bool(states) and not any(s in ("1", "2") for s in states)  # listening, learning

    def start(self, _controllers):
        self.cmd(f"ip link del {self.name} 2>/dev/null")
        self.cmd(f"ip link add name {self.name} type bridge {STP}")
        for intf in self.intfList():
            if self.name in intf.name:
                self.cmd(f"ip link set {intf} mtu 1600 master {self.name}")
        self.cmd(f"ip link set {self.name} up")

    def stop(self, deleteIntfs=True):
        self.cmd(f"ip link del {self.name}")
        super(LinuxBridge, self).stop(deleteIntfs)  # Switch's: its interfaces


class LeafSpine(Topo):
    def build(self, tag, rate):
        spines = [self.addSwitch(f"{tag}s{i}", dpid=f"{i:x}") for i in (1, 2)]
        leaves = [self.addSwitch(f"{tag}l{i}", dpid=f"{i + 16:x}") for i in (1, 2)]
        n = 0
        for leaf in leaves:
            for _ in range(2):
                n += 1
                host = self.addHost(f"{tag}h{n}", ip=f"10.0.0.{n}/24")
                self.addLink(host, leaf, bw=rate)
        for leaf in leaves:
            for spine in spines:
                self.addLink(leaf, spine, bw=rate)


def describe(net):
    hosts = {h.name: {"pid": h.pid, "ip": h.IP(), "iface": h.defaultIntf().name} for h in net.hosts}
    switches = {}
    for sw in net.switches:
        ports = []
        for intf in sw.intfList():
            if intf.link is None:
                continue
            other = intf.link.intf2 if intf.link.intf1 is intf else intf.link.intf1
            ports.append({"iface": intf.name, "to": other.node.name,
                          "ifindex": int(sw.cmd(f"cat /sys/class/net/{intf.name}/ifindex"))})
        switches[sw.name] = {"ports": ports}
    return {"hosts": hosts, "switches": switches}


def main():
    tag, rate = sys.argv[1], float(sys.argv[2])
    if len(sys.argv) > 3:
        IndexedLink.next_index = int(sys.argv[3])
    setLogLevel("error")
    net = Mininet(topo=LeafSpine(tag=tag, rate=rate), switch=StpBridge, link=IndexedLink,
                  controller=None, autoSetMacs=True)
    try:
        net.start()
        for node in net.hosts + net.switches:
            for intf in node.intfList():
                if intf.name != "lo":
                    node.cmd(f"ethtool -K {intf} tso off gso off gro off")
        for host in net.hosts:  # TCP always builds GSO skbs: one MTU-sized packet each
            host.cmd(f"ip link set dev {host.defaultIntf()} gso_max_segs 1")
        deadline = time.monotonic() + 30
        while not all(s.connected() for s in net.switches) and time.monotonic() < deadline:
            time.sleep(0.5)
        print(json.dumps(describe(net)), flush=True)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "ping":
                loss = net.pingAll(timeout=2)
                print(json.dumps({"ping_loss": loss}), flush=True)
            elif cmd == "stop":
                break
    finally:
        net.stop()
    print(json.dumps({"stopped": True}), flush=True)


if __name__ == "__main__":
    main()
