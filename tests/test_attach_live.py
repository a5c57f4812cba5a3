"""`talb attach` on a fabric Mininet built (Debian's mininet, LinuxBridge
switches, TCLink): ECMP and TaLB carry `talb send` between hosts on
different leaves, every byte verified and every tensor on one uplink; then
`talb detach` leaves Mininet's fabric as it was (same links, addresses and
qdiscs; Mininet's own pingAll passes)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import new_prefix, skip_or_fail

pytestmark = pytest.mark.live
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SYSTEM_PYTHON = "/usr/bin/python3"
RATE_MBIT = 20


def _talb(*args, check=True, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "talb.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)
    if check and proc.returncode:
        raise AssertionError(f"talb {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def _mininet_available():
    if not shutil.which("mn"):
        skip_or_fail("Mininet is not installed (apt-get install mininet; scripts/setup.sh does it)")
    ok = subprocess.run([SYSTEM_PYTHON, "-c", "import mininet.net, mininet.nodelib, mininet.link"],
                        capture_output=True, text=True)
    if ok.returncode:
        skip_or_fail(f"Debian's python3 cannot import mininet: {ok.stderr.strip()[-200:]}")


def first_free_index(past: int = 4096) -> int:
    """An ifindex past ``past`` and past every root-namespace device's, with
    room for the fabric's links: where Mininet's switch ports are in a root
    namespace that has lived a while (talb's data path keeps ports at
    ifindex % TALB_PORT_SLOTS, bpf/include/talb/maps.h)."""
    used = [int(p.read_text()) for p in Path("/sys/class/net").glob("*/ifindex")]
    return max([past, *used]) + 101


class MininetFabric:
    def __init__(self, tag: str, first_index: int | None = None):
        self.tag = tag
        extra = [] if first_index is None else [str(first_index)]
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(HERE / "mininet_fabric.py"), tag, str(RATE_MBIT),
                                      *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        while line and not line.startswith("{"):  # Mininet's own warnings
            line = self.proc.stdout.readline()
        if not line.startswith("{"):
            self.stop()
            raise AssertionError(f"Mininet did not start: {line} {self.proc.stderr.read()[-2000:]}")
        self.desc = json.loads(line)

    def ping_loss(self) -> float:
        self.proc.stdin.write("ping\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("Mininet exited during pingAll")
            if line.startswith('{"ping_loss"'):
                return json.loads(line)["ping_loss"]

    def stop(self) -> None:
        """net.stop(); if Mininet does not answer, end it and its hosts by
        pid and delete the interfaces it made (all named after our tag)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for h in getattr(self, "desc", {}).get("hosts", {}).values():
            try:
                os.kill(h["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        for name in re.findall(r"^\d+: ([^:@]+)", links, re.M):
            if name.startswith(self.tag) and re.match(rf"^{self.tag}[sl]\d", name):
                subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def mininet(root):
    _mininet_available()
    tag = "m" + format(os.getpid() % (36 ** 3), "x")[:4]
    fabric = MininetFabric(tag, first_index=first_free_index())
    try:
        yield fabric
    finally:
        fabric.stop()


def attach_file(mn: MininetFabric, name: str, path: Path) -> Path:
    desc = mn.desc
    doc = {"name": name, "link_rate": f"{RATE_MBIT}mbit", "scheme": "ecmp",
           "switches": [{"name": sw, "ports": [{"iface": p["iface"], "to": p["to"]} for p in d["ports"]]}
                        for sw, d in sorted(desc["switches"].items())],
           "hosts": [{"name": h, "ip": d["ip"], "iface": d["iface"], "pid": d["pid"]}
                     for h, d in sorted(desc["hosts"].items())]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def snapshot(mn: MininetFabric) -> dict:
    """Links, addresses and qdiscs of every interface Mininet made, in the
    root namespace (switches) and in each host's namespace (by pid)."""
    def run(argv, pid=None):
        pre = ["nsenter", "-t", str(pid), "-n"] if pid else []
        out = subprocess.run(pre + argv, capture_output=True, text=True, check=True).stdout
        out = re.sub(r"direct_packets_stat \d+", "", out)  # a counter
        return sorted(line.strip() for line in out.splitlines() if line.strip())

    ours = [p["iface"] for d in mn.desc["switches"].values() for p in d["ports"]] + list(mn.desc["switches"])
    snap = {}
    for name in ours:
        snap[name] = run(["ip", "-o", "link", "show", "dev", name]) \
            + run(["tc", "qdisc", "show", "dev", name])
    for h, d in mn.desc["hosts"].items():
        snap[h] = run(["ip", "-o", "link"], d["pid"]) + run(["ip", "-o", "addr"], d["pid"]) \
            + run(["tc", "qdisc", "show"], d["pid"])
    return snap


def _hosts_by_leaf(mn):
    leaves = {}
    for sw, d in mn.desc["switches"].items():
        for p in d["ports"]:
            if p["to"] in mn.desc["hosts"]:
                leaves.setdefault(sw, []).append(p["to"])
    return [sorted(v) for _, v in sorted(leaves.items())]


def _send(name, src, dst, tensors=10, senders=2):
    out = _talb("send", "--prefix", name, "--src", src, "--dst", dst, "--tensors", str(tensors),
                "--size", "150kb", "--layers", "2", "--senders", str(senders), "--json",
                check=False)
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else None
    assert report is not None, f"talb send failed: {out.stderr[-3000:]}"
    return report


def test_attach_ecmp_and_talb_on_a_mininet_fabric_then_detach_leaves_it_as_it_was(mininet, tmp_path):
    name = new_prefix()
    # every switch port past TALB_PORT_SLOTS, as in a root namespace that has lived a while
    indexes = [p["ifindex"] for d in mininet.desc["switches"].values() for p in d["ports"]]
    assert len(indexes) == 12 and min(indexes) > 4096, indexes
    assert mininet.ping_loss() == 0, "Mininet's fabric does not ping before attach"
    before = snapshot(mininet)
    fabric = attach_file(mininet, name, tmp_path / "attach.yaml")
    (leaf1, leaf2) = _hosts_by_leaf(mininet)
    src, dst = leaf1[0], leaf2[0]
    try:
        _talb("attach", "--fabric", str(fabric), "--scheme", "ecmp")
        results = {}
        for scheme in ("ecmp", "talb"):
            if scheme == "talb":
                _talb("scheme", "talb", "--prefix", name)
            report = _send(name, src, dst)
            tensors = report["tensors"]
            assert report["ok"], [(t["seq"], t["ok"], t["uplinks"]) for t in tensors]
            assert len(tensors) == 20 and all(t["ok"] for t in tensors)
            for t in tensors:
                assert len(t["uplinks"]) == 1, (scheme, t["seq"], t["uplinks"])
            spread = {}
            for t in tensors:
                (port,) = t["uplinks"]
                spread[port] = spread.get(port, 0) + 1
            results[scheme] = {"tensors": len(tensors), "bytes": sum(t["bytes"] for t in tensors),
                               "spread": spread}
        print(f"\nMininet attach: {results}")
        status = _talb("scheme", "--prefix", name).stdout
        assert "talb" in status
    finally:
        out = _talb("detach", "--name", name, check=False)
    assert out.returncode == 0, out.stderr
    after = snapshot(mininet)
    assert after == before
    assert not [p for p in Path("/run/netns").glob(f"talb.{name}.*")]
    loss = mininet.ping_loss()
    print(f"pingAll after detach: {loss}% dropped")
    assert loss == 0
