"""Build and tear down a Mininet leaf-spine fabric and time both, for
`talb bench build` (bench/build_time.py), run by the system Python (Debian's
python3-mininet):

    /usr/bin/python3 bench/mininet_build.py SPINES LEAVES HOSTS_PER_LEAF RATE_MBIT TAG

The fabric is Mininet's own way of making the shape talb builds: LinuxBridge
switches (made with `ip link`, kernel STP with talb's short timers: a
leaf-spine has loops) and TCLink links (HTB at RATE_MBIT on both ends), no
controller. "up" is ``Mininet(topo)`` plus ``net.start()`` (namespaces,
links, shaping, bridges up; STP convergence not waited for), "down"
``net.stop()``. Prints one JSON line: {"up_s", "down_s", "nodes", ...}.
Imports nothing of talb's: it runs outside the project's virtualenv.
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


class StpBridge(LinuxBridge):
    """Mininet's LinuxBridge, made with `ip link` (no brctl) and short STP
    timers (the fabric has loops), as tests/mininet_fabric.py's."""

    @classmethod
    def setup(cls):
        pass

    def start(self, _controllers):
        self.cmd(f"ip link del {self.name} 2>/dev/null")
        self.cmd(f"ip link add name {self.name} type bridge {STP}")
        for intf in self.intfList():
            if self.name in intf.name:
                self.cmd(f"ip link set {intf} master {self.name}")
        self.cmd(f"ip link set {self.name} up")

    def stop(self, deleteIntfs=True):
        self.cmd(f"ip link del {self.name}")
        super(LinuxBridge, self).stop(deleteIntfs)


class LeafSpine(Topo):
    def build(self, spines, leaves, hosts_per_leaf, rate, tag):
        sp = [self.addSwitch(f"{tag}s{i}", dpid=f"{i + 1:x}") for i in range(spines)]
        lf = [self.addSwitch(f"{tag}l{i}", dpid=f"{i + 1 + 4096:x}") for i in range(leaves)]
        n = 0
        for leaf in lf:
            for _ in range(hosts_per_leaf):
                n += 1
                host = self.addHost(f"{tag}h{n}", ip=f"10.{n >> 8}.{n & 255}.1/8")
                self.addLink(host, leaf, bw=rate)
        for leaf in lf:
            for spine in sp:
                self.addLink(leaf, spine, bw=rate)


def main():
    spines, leaves, hpl = (int(x) for x in sys.argv[1:4])
    rate, tag = float(sys.argv[4]), sys.argv[5]
    setLogLevel("error")
    started = time.monotonic()
    net = Mininet(topo=LeafSpine(spines=spines, leaves=leaves, hosts_per_leaf=hpl, rate=rate,
                                 tag=tag),
                  switch=StpBridge, link=TCLink, controller=None, autoSetMacs=True)
    try:
        net.start()
        up = time.monotonic() - started
    finally:
        stopping = time.monotonic()
        net.stop()
    down = time.monotonic() - stopping
    print(json.dumps({"up_s": round(up, 3), "down_s": round(down, 3),
                      "nodes": len(net.hosts) + len(net.switches),
                      "switches": len(net.switches), "hosts": len(net.hosts)}), flush=True)


if __name__ == "__main__":
    main()
