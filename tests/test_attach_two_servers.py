"""docs/attach.md's "Two real machines with real NICs", tried on one machine:
each server is a network namespace holding its bridge, its "NIC" ports
(veths) and the veth to its host's namespace; the two "cables" are veths
between the two server namespaces. Each server attaches its own leaf with
the other `remote: true` (two attach names, as both run here), and
`talb send --listen` / `talb send --to` carry tensors from A's host to B's.

Also the priority bands an attach file asks for (`queue:`), on the same
fabric: HTB classes and bfifo limits on the ports, tagged tensors counted in
their layer's band, a root qdisc attach did not create refused, and
`detach` leaving each port with what it had.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import new_prefix

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parent.parent
STP = ["stp_state", "1", "forward_delay", "200", "hello_time", "100", "max_age", "600"]
PORTS = ("va0", "enp1s0f0", "enp1s0f1")  # server A's; B's: vb0 and the same NIC names
RATE = "100mbit"


def sh(*argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def _talb(*args, check=True, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "talb.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"talb {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


class TwoServers:
    """The docs' setup commands, run per server (a namespace here)."""

    def __init__(self, tag: str):
        self.ns = {k: f"{tag}-{k}" for k in ("sa", "sb", "ha", "hb")}
        self.made = []
        for ns in self.ns.values():
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for server, host, side, peer, ip in (("sa", "ha", "va0", "ha0", "10.0.0.1"),
                                             ("sb", "hb", "vb0", "hb0", "10.0.0.2")):
            s, h = self.ns[server], self.ns[host]
            sh("ip", "link", "add", side, "netns", s, "type", "veth", "peer", "name", peer, "netns", h)
            sh("ip", "-n", h, "addr", "add", f"{ip}/24", "dev", peer)
            sh("ip", "-n", h, "link", "set", peer, "up")
            sh("ip", "netns", "exec", h, "ethtool", "-K", peer, "tso", "off", "gso", "off", "gro", "off")
            sh("ip", "-n", h, "link", "set", "dev", peer, "gso_max_segs", "1")
        for cable in ("enp1s0f0", "enp1s0f1"):  # the two cables, same NIC names on both servers
            sh("ip", "link", "add", cable, "netns", self.ns["sa"], "type", "veth", "peer", "name",
               cable, "netns", self.ns["sb"])
        for server, side in (("sa", "va0"), ("sb", "vb0")):
            s = self.ns[server]
            sh("ip", "-n", s, "link", "add", "br0", "type", "bridge", *STP)
            for p in (side, "enp1s0f0", "enp1s0f1"):
                sh("ip", "-n", s, "link", "set", p, "mtu", "1600", "master", "br0", "up")
                sh("ip", "netns", "exec", s, "ethtool", "-K", p, "tso", "off", "gso", "off", "gro", "off")
            sh("ip", "-n", s, "link", "set", "br0", "up")
        deadline = time.monotonic() + 30  # STP: listening, learning, forwarding
        while subprocess.run(["ip", "netns", "exec", self.ns["ha"], "ping", "-c1", "-W1", "10.0.0.2"],
                             capture_output=True).returncode:
            assert time.monotonic() < deadline, "the two servers' bridges never forwarded"
            time.sleep(0.5)

    def fabric_file(self, path: Path, name: str, here: str, **extra) -> Path:
        """Server ``here``'s (a or b) file, as docs/attach.md's, with the
        server's namespace given (it is not the root one here)."""
        a = {"name": "a", "ports": [{"iface": "va0", "to": "ha"}, {"iface": "enp1s0f0", "to": "b"},
                                    {"iface": "enp1s0f1", "to": "b"}]}
        b = {"name": "b", "ports": [{"iface": "vb0", "to": "hb"}, {"iface": "enp1s0f0", "to": "a"},
                                    {"iface": "enp1s0f1", "to": "a"}]}
        ha = {"name": "ha", "ip": "10.0.0.1"}
        hb = {"name": "hb", "ip": "10.0.0.2"}
        mine, other, my_host = (a, b, ha) if here == "a" else (b, a, hb)
        mine["netns"] = self.ns["s" + here]
        other["remote"] = True
        my_host.update(iface=f"h{here}0", netns=self.ns["h" + here])
        doc = {"name": name, "link_rate": RATE, "scheme": "talb", **extra,
               "switches": [a, b], "hosts": [ha, hb]}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def snapshot(self) -> dict:
        """Links, addresses, bridge ports and qdiscs of the four namespaces."""
        out = {}
        for k, ns in self.ns.items():
            lines = []
            for argv in (["ip", "-o", "link"], ["ip", "-o", "addr"], ["tc", "qdisc", "show"],
                         ["bridge", "link"]):
                text = sh("ip", "netns", "exec", ns, *argv)
                # the kernel's own link-local IPv6 addresses follow the bridge's MAC
                lines += sorted(re.sub(r"state (UP|DOWN|UNKNOWN|LOWERLAYERDOWN) ", "", line).strip()
                                for line in text.splitlines()
                                if line.strip() and "inet6 fe80::" not in line)
            out[k] = lines
        return out

    def assert_as(self, before: dict) -> None:
        after = self.snapshot()
        diff = {k: {"gone": sorted(set(before[k]) - set(after[k])),
                    "new": sorted(set(after[k]) - set(before[k]))}
                for k in before if before[k] != after[k]}
        assert not diff, diff

    def root_qdisc(self, server: str, iface: str) -> str:
        out = sh("tc", "-n", self.ns[server], "qdisc", "show", "dev", iface, "root")
        return " ".join(out.split()[1:3])  # "noqueue 0:", "htb 1:"

    def stop(self):
        for ns in self.made:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


@pytest.fixture(scope="module")
def servers(root):
    tag = new_prefix()
    s = TwoServers(tag)
    try:
        yield s
    finally:
        s.stop()


_UNIT = {"bit": 1, "Kbit": 10**3, "Mbit": 10**6, "Gbit": 10**9}


def _classes(servers, server: str, iface: str) -> dict[str, dict]:
    """{classid: {rate (bit/s), bytes}} of a port's HTB classes (tc has no
    JSON for HTB classes: its text)."""
    text = sh("tc", "-n", servers.ns[server], "-s", "class", "show", "dev", iface)
    out = {}
    for block in text.split("class htb ")[1:]:
        m = re.match(r"(\S+) .*? rate (\d+)(\w+) .*?Sent (\d+) bytes", block, re.S)
        out[m.group(1)] = {"rate": int(m.group(2)) * _UNIT[m.group(3)], "bytes": int(m.group(4))}
    return out


def _bfifo_limits(servers, server: str, iface: str) -> dict[str, int]:
    out = json.loads(sh("tc", "-n", servers.ns[server], "-j", "qdisc", "show", "dev", iface))
    return {q["handle"]: q["options"]["limit"] for q in out if q["kind"] == "bfifo"}


def test_bands_where_the_file_asks_tagged_tensors_in_their_layers_band(servers, tmp_path):
    """A's file asks for 4 bands (weights 1, 4, 2, 1; 40 KB each) on every
    port: attach installs HTB 1: with classes 1:10-1:13 at 100 Mbit/s x the
    weights and a 40 KB bfifo each; the switch marks layer L's packets for
    band 1+L, counted in class 1:(11+L) of the cables; detach leaves each
    port with its kernel default (noqueue). The agent for one switch
    (`--switch a`) learns the same ports, rates and buffers as the file's."""
    from agent import daemon
    from agent.config import AgentConfig

    name, name_b = new_prefix(), new_prefix()
    before = servers.snapshot()
    fabric = servers.fabric_file(tmp_path / "a.yaml", name, "a",
                                 queue={"bands": [1, 4, 2, 1], "limit": "40kb"})
    hb_ns = servers.ns["hb"]
    receiver = None
    try:
        _talb("attach", "--fabric", str(fabric), "--no-agent")
        # B strips the option before its host (hb0's MTU has no room for it)
        _talb("attach", "--fabric", str(servers.fabric_file(tmp_path / "b.yaml", name_b, "b")),
              "--no-agent")
        for port in PORTS:
            assert servers.root_qdisc("sa", port) == "htb 1:"
            classes = _classes(servers, "sa", port)
            rates = {c: classes[c]["rate"] for c in ("1:1", "1:10", "1:11", "1:12", "1:13")}
            assert rates == {"1:1": 100_000_000, "1:10": 12_500_000, "1:11": 50_000_000,
                             "1:12": 25_000_000, "1:13": 12_500_000}, rates
            assert _bfifo_limits(servers, "sa", port) == {f"{b}:": 40_000 for b in (10, 11, 12, 13)}
        # one switch's agent: the file's ports, rates and the bands' buffer
        one = daemon.build(AgentConfig(window_s=0.01), prefix=name, switch="a")
        try:
            assert {p.name: (p.rate_bps, p.queue_limit_bytes, p.kind)
                    for p in one.routing.ports("a")} == {
                "va0": (100_000_000, 40_000, "host"), "enp1s0f0": (100_000_000, 40_000, "fabric"),
                "enp1s0f1": (100_000_000, 40_000, "fabric")}
        finally:
            one.close()
        with pytest.raises(daemon.AgentError, match=r"--switch: 'b' is remote"):
            daemon.build(AgentConfig(window_s=0.01), prefix=name, switch="b")

        receiver = subprocess.Popen(
            ["ip", "netns", "exec", hb_ns, sys.executable, "-m", "workload.tensor_app", "receive",
             "--port", "7100", "--connections", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert '"ready"' in receiver.stdout.readline()
        at_start = {p: _classes(servers, "sa", p) for p in ("enp1s0f0", "enp1s0f1")}
        out = _talb("send", "--prefix", name, "--src", "ha", "--to", "10.0.0.2:7100",
                    "--senders", "2", "--tensors", "6", "--layers", "3", "--size", "150kb", "--json")
        report = json.loads(out.stdout)
        receiver.wait(timeout=60)
        got = [json.loads(line) for line in receiver.stdout.read().splitlines() if '"seq"' in line]
        assert len(got) == 12 and all(r["ok"] for r in got)
        assert all(len(t["uplinks"]) == 1 for t in report["tensors"]), report["tensors"]
        sent = {layer: sum(t["bytes"] for t in report["tensors"] if t["layer"] == layer)
                for layer in range(3)}
        counted = {}
        for p in ("enp1s0f0", "enp1s0f1"):
            now = _classes(servers, "sa", p)
            for band in range(4):
                c = f"1:{10 + band}"
                counted[band] = counted.get(band, 0) + now[c]["bytes"] - at_start[p][c]["bytes"]
        print(f"\nbands: sent by layer {sent}, counted by band on the cables {counted}")
        for layer in range(3):  # payload + headers + the option: at least the tensor's bytes
            assert counted[1 + layer] >= sent[layer], (layer, counted, sent)
        assert counted[0] < min(sent.values()) // 10  # untagged: SYNs, FINs, pure ACKs at most
    finally:
        if receiver is not None and receiver.poll() is None:
            receiver.kill()
            receiver.wait()
        outs = [_talb("detach", "--name", n, check=False) for n in (name, name_b)]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert all(servers.root_qdisc("sa", p) == "noqueue 0:" for p in PORTS)
    servers.assert_as(before)


def test_a_root_qdisc_attach_did_not_create_is_refused_unless_replace_qdisc(servers, tmp_path):
    name = new_prefix()
    ns = servers.ns["sa"]
    sh("tc", "-n", ns, "qdisc", "add", "dev", "enp1s0f1", "root", "handle", "5:", "htb")
    try:
        fabric = servers.fabric_file(tmp_path / "a.yaml", name, "a",
                                     queue={"bands": [1, 2], "limit": "40kb"})
        out = _talb("attach", "--fabric", str(fabric), "--no-agent", check=False)
        assert out.returncode == 1
        assert ("switches[0].ports[2].queue: port enp1s0f1 already has a root qdisc htb 5: that "
                "attach did not create; bands would replace it") in out.stderr, out.stderr
        assert not Path(f"/run/talb/{name}").exists()
        assert servers.root_qdisc("sa", "enp1s0f1") == "htb 5:"
        assert servers.root_qdisc("sa", "va0") == "noqueue 0:"

        fabric = servers.fabric_file(tmp_path / "a.yaml", name, "a", replace_qdisc=True,
                                     queue={"bands": [1, 2], "limit": "40kb"})
        _talb("attach", "--fabric", str(fabric), "--no-agent")
        assert servers.root_qdisc("sa", "enp1s0f1") == "htb 1:"
        _talb("detach", "--name", name)
        # documented: the replaced qdisc is gone, the kernel's default is back
        assert servers.root_qdisc("sa", "enp1s0f1") == "noqueue 0:"
    finally:
        subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", "enp1s0f1", "root"],
                       capture_output=True)
        _talb("detach", "--name", name, check=False)


def _listening(ns: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


def test_two_servers_each_attach_their_leaf_and_talb_send_crosses_both_cables(servers, tmp_path):
    name_a, name_b = new_prefix(), new_prefix()
    before = servers.snapshot()
    file_a = servers.fabric_file(tmp_path / "a.yaml", name_a, "a")
    file_b = servers.fabric_file(tmp_path / "b.yaml", name_b, "b")
    listen = None
    try:
        _talb("attach", "--fabric", str(file_a))   # server A (with its agent)
        _talb("attach", "--fabric", str(file_b))   # server B
        # B: the receiver alone; A: the senders alone, A's cables captured
        listen = subprocess.Popen(
            [sys.executable, "-m", "talb.cli", "send", "--listen", "--prefix", name_b, "--host", "hb",
             "--port", "7000", "--senders", "4", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 30
        while not _listening(servers.ns["hb"], 7000):
            assert listen.poll() is None and time.monotonic() < deadline, listen.stderr.read()
            time.sleep(0.2)
        out = _talb("send", "--prefix", name_a, "--src", "ha", "--to", "10.0.0.2:7000",
                    "--senders", "4", "--tensors", "10", "--layers", "3", "--size", "200kb", "--json")
        sent = json.loads(out.stdout)
        got_out, got_err = listen.communicate(timeout=120)
        assert listen.returncode == 0, got_err
        got = json.loads(got_out)
    finally:
        if listen is not None and listen.poll() is None:
            listen.kill()
            listen.wait()
        outs = [_talb("detach", "--name", n, check=False) for n in (name_a, name_b)]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    tensors = sent["tensors"]
    assert sent["ok"] and len(tensors) == 40
    assert all(len(t["uplinks"]) == 1 for t in tensors), [t["uplinks"] for t in tensors]
    spread = {}
    for t in tensors:
        (port,) = t["uplinks"]
        spread[port] = spread.get(port, 0) + 1
    assert set(spread) == {"enp1s0f0", "enp1s0f1"}, spread  # tagged packets on both cables
    assert got["ok"] and len(got["tensors"]) == 40 and all(t["ok"] for t in got["tensors"])
    assert {t["src"] for t in got["tensors"]} == {"10.0.0.1"}
    from workload.tensor_app import HEADER

    nbytes = sum(t["bytes"] for t in got["tensors"])  # payloads, verified (SHA-256)
    assert nbytes == sum(t["bytes"] - HEADER.size for t in tensors) == 40 * 200_000
    print(f"\ntwo servers: 40/40 tensors, {nbytes} bytes verified on B, one cable each: {spread}")
    servers.assert_as(before)  # bridges, addresses, MTUs, qdiscs as they were
