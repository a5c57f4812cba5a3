"""Tagging unmodified processes (bpf/host_sendmsg.c, datapath/sendmsg_tagger.py,
workload/transparent_tag.py).

Part 1: the priority rules and the in-kernel id generator's Python model.
Part 2: the host TC program's sequence-space path (BPF_PROG_TEST_RUN).
Part 3: live, on topologies/talb.yaml: plain Python sockets, not our library,
in h0 sending to h3 (another leaf), captured at h0's uplink.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import paths
from common.kill import kill_until_gone
from helpers import socket_in, spine_captures, spines_of, up_fabric

from test_host_tagging import MSS, frame, assert_tagged, host, host_dp

_FIXTURES = (host, host_dp)   # pytest finds them here by name


# ====================================================================================
# Part 1
# ====================================================================================
def test_priority_rules_parse_and_give_layers():
    from datapath.sendmsg_tagger import DEFAULT_PRIORITY, parse_priority

    r = parse_priority(None)
    assert r.text == DEFAULT_PRIORITY == "size:64K,1M"
    assert [r.layer(n, 0) for n in (1, 65536, 65537, 1 << 20, (1 << 20) + 1)] == [0, 0, 1, 1, 2]
    p = parse_priority("port:5001=0,5002=3")
    assert [p.layer(1, d) for d in (5001, 5002, 80)] == [0, 3, 4]
    b = parse_priority("burst:200us")
    assert b.gap_ns == 200_000 and [b.layer(1, 0, i) for i in (0, 1, 9)] == [0, 1, 7]


@pytest.mark.parametrize("bad", ["size", "size:", "size:1M,64K", "size:abc", "port:5001",
                                 "port:0=1", "burst:fast", "burst:0us", "speed:1", "size:" + ",".join(
                                     str(i + 1) for i in range(9))])
def test_bad_priority_rules_name_the_value(bad):
    from datapath.sendmsg_tagger import parse_priority

    with pytest.raises(ValueError, match="--priority: ") as exc:
        parse_priority(bad)
    assert repr(bad) in str(exc.value)


@settings(max_examples=300, deadline=None)
@given(ncpus=st.integers(1, 16),
       calls=st.lists(st.tuples(st.integers(0, 15), st.integers(0, 3_000_000)), max_size=1500))
def test_kernel_ids_never_repeat(ncpus, calls):
    """Any interleaving of CPUs, bursts far beyond a CPU's share of a tick
    included: no id twice, and the user side's wait (past the largest tick)
    puts the next holder's ids after all of them."""
    from datapath.sendmsg_tagger import KernelIdModel
    from workload.snowflake import Snowflake

    m = KernelIdModel(worker=5, ncpus=ncpus)
    now = 10_000_000
    ids = set()
    for cpu, dt in calls:
        now += dt // 1000   # mostly sub-ms steps: many ids per tick
        tid = m.next_id(cpu % ncpus, now)
        assert tid not in ids
        ids.add(tid)
    # the next holder of the slot starts after the largest tick used
    nxt = Snowflake(5, clock=lambda: (m.max_tick() + 1) * 1_000_000)
    assert nxt.next_id() not in ids


def test_selector_is_exactly_one(tmp_path):
    from workload.transparent_tag import TransparentTagger

    for kw in ({}, {"ports": (1, 2), "pid": 1}):
        with pytest.raises(ValueError, match="exactly one of ports, cgroup, pid"):
            TransparentTagger("nosuch", ["h0"], **kw)


# ====================================================================================
# Part 2: the host TC program, sequence space
# ====================================================================================
M32 = 0xFFFFFFFF


def _seq_ring(host, descs):
    from datapath.host_maps import HostSeqDesc, HostSeqRing

    ring = HostSeqRing()
    for slot, (start, end, tid, layer, n, mss) in descs.items():
        ring.desc[slot] = HostSeqDesc.of(start, end, tid, layer, n, mss)
    host.maps.sendmsg_rings[host.key()] = ring


@pytest.mark.bpf
@pytest.mark.parametrize("seq,want", [
    (4_000_000_000, (0, False)),                 # first packet
    (4_000_000_000 + 2 * MSS, (2, True)),        # last (3 packets)
    ((4_000_000_000 + 3 * MSS + 5) & M32, None),  # past the end: untagged
])
def test_seq_space_descriptor_tags_by_raw_sequence(host, seq, want):
    start = 4_000_000_000
    _seq_ring(host, {3: (start, (start + 3 * MSS) & M32, 0xABC, 2, 3, MSS)})   # wraps 2^32
    inp = frame(seq=seq, payload=b"x" * MSS)
    ret, out, _ = host.run(inp)
    if want is None:
        assert out == inp and host.counters()["untagged_no_descriptor"] == 1
        return
    assert_tagged(inp, out, tensor_id=0xABC, layer=2, tensor_len=3, pkt_idx=want[0], last=want[1])
    assert host.counters() == {"tagged_sendmsg": 1}


@pytest.mark.bpf
def test_flow_rings_win_over_the_seq_ring(host):
    host.set_isn(999)
    host.set_ring({0: (0, 10 * MSS, 7, 1, 10, MSS)})
    _seq_ring(host, {0: (1000, 1000 + 10 * MSS, 8, 2, 10, MSS)})
    inp = frame(seq=1000, payload=b"x" * MSS)
    _, out, _ = host.run(inp)
    assert_tagged(inp, out, tensor_id=7, layer=1, tensor_len=10, pkt_idx=0, last=False)
    assert host.counters() == {"tagged": 1}


@pytest.mark.bpf
def test_a_syn_clears_the_seq_ring(host):
    _seq_ring(host, {0: (1000, 2000, 8, 2, 1, MSS)})
    host.run(frame(seq=5, flags="S"))
    assert host.maps.sendmsg_rings.get(host.key()) is None


# ====================================================================================
# Part 3: live
# ====================================================================================
SRC, DST, OTHER = "h0", "h3", "h4"


@pytest.fixture(scope="module")
def fabric(request, bcc):
    return up_fabric(request, paths.REPO_ROOT / "topologies" / "talb.yaml")


def _ip(fab, name):
    return next(h for h in fab.topo.hosts if h.name == name).ip


class Server:
    """Accepts connections on ``port`` in DST; reads messages of the given
    sizes and answers one byte after each (a request/response rhythm: every
    write starts on a fresh segment); ``sizes`` None: just drain."""

    def __init__(self, fab, port, sizes=None, *, rcvbuf=None, delay=0.0):
        self.srv = socket_in(paths.netns_name(fab.prefix, DST), socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:       # inherited by the accepted socket: a small window
            self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.srv.bind((_ip(fab, DST), port))
        self.srv.listen(4)
        self.sizes = sizes
        self.delay = delay
        self.got = 0
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        self.srv.settimeout(60)
        conn, _ = self.srv.accept()
        time.sleep(self.delay)
        with conn:
            if self.sizes is None:
                while (n := len(conn.recv(1 << 20))):
                    self.got += n
                return
            for size in self.sizes:
                left = size
                while left:
                    n = len(conn.recv(min(left, 1 << 20)))
                    if not n:
                        return
                    left -= n
                    self.got += n
                conn.sendall(b"k")

    def close(self):
        self.t.join(60)
        self.srv.close()


def _client(fab):
    s = socket_in(paths.netns_name(fab.prefix, SRC), socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _tensors(pcap):
    """{tensor_id: [TaLBHeader...]} and the untagged data packets of a capture."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    from common.wire import talb_header_of

    out, plain = {}, 0
    for pkt in rdpcap(str(pcap)):
        if IP not in pkt or TCP not in pkt:
            continue
        ip = pkt[IP]
        if ip.len - ip.ihl * 4 - pkt[TCP].dataofs * 4 <= 0:
            continue
        h = talb_header_of(pkt)
        if h is None:
            plain += 1
        else:
            out.setdefault(h.tensor_id, []).append(h)
    return out, plain


@contextmanager
def _captured(fab, port, pcap):
    """A capture of ``port`` at the source's link around the block; after a
    block that ends normally, 0.3 s for the last ACKs and FIN to be seen."""
    cap = _capture(fab, port, pcap)
    try:
        yield
        time.sleep(0.3)
    finally:
        cap.stop()


def _capture(fab, port, pcap):
    from workload.capture import start_capture

    return start_capture(paths.netns_name(fab.prefix, SRC), "eth0", pcap,
                         bpf_filter=f"tcp and port {port}")


@pytest.mark.live
def test_live_plain_sendall_writes_are_tensors(fabric, tmp_path):
    from workload.transparent_tag import TransparentTagger

    sizes = [100, 1448, 5000, 70_000, 300_000, 2_000_000]
    port = 5301
    srv = Server(fabric, port, sizes)
    with TransparentTagger(fabric.prefix, [SRC], ports=(port, port)) as tag, \
            spine_captures(fabric.prefix, tmp_path) as spines:
        with _captured(fabric, port, tmp_path / "h0.pcap"):
            c = _client(fabric)
            c.connect((_ip(fabric, DST), port))
            mss = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
            for n in sizes:
                c.sendall(os.urandom(n))
                assert c.recv(1) == b"k"
            c.close()
            srv.close()
        counters = tag.counters()
        assert tag.rule == "size:64K,1M"
    tensors, plain = _tensors(tmp_path / "h0.pcap")
    assert plain == 0, f"{plain} untagged data packets; counters {counters}"
    assert counters["started"] == len(sizes), counters
    assert len(tensors) == len(sizes)
    by_len = sorted(tensors.values(), key=lambda hs: hs[0].tensor_len)
    for n, hs in zip(sizes, by_len):
        assert hs[0].tensor_len == math.ceil(n / mss), (n, hs[0])
        lasts = {h.pkt_idx for h in hs if h.last}
        assert len(lasts) == 1, (n, lasts)
        assert hs[0].layer == (0 if n <= 65536 else 1 if n <= 1 << 20 else 2)
    # the switch under TaLB keeps each tensor on one uplink
    where = spines_of(spines)
    assert where and all(len(s) == 1 for s in where.values()), where


@pytest.mark.live
def test_live_nonblocking_partial_writes_continue_one_tensor(fabric, tmp_path):
    import select

    from workload.transparent_tag import TransparentTagger

    size, port = 3_000_000, 5302
    srv = Server(fabric, port, [size])
    with TransparentTagger(fabric.prefix, [SRC], ports=(port, port)) as tag:
        with _captured(fabric, port, tmp_path / "h0.pcap"):
            c = _client(fabric)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            c.connect((_ip(fabric, DST), port))
            c.setblocking(False)
            data, calls = memoryview(os.urandom(size)), 0
            while data:
                select.select([], [c], [], 10)
                try:
                    n = c.send(data)
                except BlockingIOError:
                    continue
                calls += 1
                data = data[n:]
            c.setblocking(True)
            assert c.recv(1) == b"k"
            c.close()
            srv.close()
        counters = tag.counters()
    tensors, plain = _tensors(tmp_path / "h0.pcap")
    assert calls > 1 and counters["continued"] == calls - 1, (calls, counters)
    assert plain == 0 and len(tensors) == 1, (plain, list(tensors))
    (hs,) = tensors.values()
    assert sum(h.last for h in hs) >= 1 and len({h.pkt_idx for h in hs if h.last}) == 1


@pytest.mark.live
def test_live_unselected_stays_untagged_and_library_ids_do_not_meet(fabric, tmp_path):
    from workload.tensor_sender import TensorSender
    from workload.transparent_tag import TransparentTagger

    sel, other, lib = 5303, 5304, 5305
    servers = [Server(fabric, p, [50_000] * 5) for p in (sel, other, lib)]
    with TransparentTagger(fabric.prefix, [SRC], ports=(sel, sel)):
        with _captured(fabric, f"{sel} or port {other} or port {lib}", tmp_path / "h0.pcap"):
            cs = {p: _client(fabric) for p in (sel, other, lib)}
            for p, c in cs.items():
                c.connect((_ip(fabric, DST), p))
            with TensorSender(cs[lib]) as tx:
                for _ in range(5):
                    cs[sel].sendall(os.urandom(50_000))
                    cs[other].sendall(os.urandom(50_000))
                    tx.send(os.urandom(50_000), layer=9)
                    for c in cs.values():
                        assert c.recv(1) == b"k"
            for c in cs.values():
                c.close()
            for s in servers:
                s.close()
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap

    from common.wire import talb_header_of

    ids = {sel: set(), other: set(), lib: set()}
    for pkt in rdpcap(str(tmp_path / "h0.pcap")):
        if TCP in pkt and pkt[TCP].dport in ids and (h := talb_header_of(pkt)):
            ids[pkt[TCP].dport].add((h.tensor_id, h.layer))
    assert ids[other] == set()
    assert len(ids[sel]) == 5 and len(ids[lib]) == 5
    assert {lay for _, lay in ids[lib]} == {9}            # the library's own tags
    assert not {t for t, _ in ids[sel]} & {t for t, _ in ids[lib]}


@pytest.mark.live
def test_live_killed_mid_write_leaves_no_ring(fabric):
    from datapath.host_maps import HostMaps
    from workload.transparent_tag import TransparentTagger

    port = 5306
    srv = Server(fabric, port)
    code = ("import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2]))); "
            "s.sendall(b'x' * 50_000_000)")
    with TransparentTagger(fabric.prefix, [SRC], ports=(port, port)) as tag:
        proc = subprocess.Popen(["ip", "netns", "exec", paths.netns_name(fabric.prefix, SRC),
                                 sys.executable, "-c", code, _ip(fabric, DST), str(port)])
        try:
            deadline = time.monotonic() + 20
            with HostMaps(paths.pin_dir(fabric.prefix, SRC)) as maps:
                while not list(maps.sendmsg_rings.keys()) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert list(maps.sendmsg_rings.keys()), tag.counters()
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
                srv.close()      # drains to EOF, then closes: the client reaches TCP_CLOSE
                deadline = time.monotonic() + 30
                while list(maps.sendmsg_rings.keys()) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not list(maps.sendmsg_rings.keys()), tag.counters()
                assert tag.counters()["closed"] >= 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.live
def test_live_cli_tag_runs_for_a_while_and_stops_cleanly(fabric):
    out = subprocess.run([sys.executable, "-m", "talb.cli", "tag", "--prefix", fabric.prefix,
                          "--netns", SRC, "--port", "5310-5312", "--priority", "port:5310=0",
                          "--for", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "tagging writes of port 5310-5312 on h0 (worker" in out.stdout
    assert "priority port:5310=0 (others 1)" in out.stdout and "stopped:" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "talb.cli", "tag", "--prefix", fabric.prefix,
                          "--netns", "nosuch", "--port", "1"], capture_output=True, text=True)
    assert bad.returncode == 1 and "'nosuch' is not a host of testbed" in bad.stderr


# ---- selectors: cgroup, pid; the burst rule; a full ring --------------------------
_SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
print("ready", flush=True)
sys.stdin.readline()
for n in map(int, sys.argv[3].split(",")):
    s.sendall(b"y" * n)
    assert s.recv(1) == b"k"
s.close()
"""


class Sender:
    """A process of its own in SRC (not our library, not the test's
    process): connects to ``port`` on DST, and on :meth:`go` writes
    messages of ``sizes``, each answered by the server. ``cgroup``: it
    joins that cgroup v2 directory before it runs anything."""

    def __init__(self, fab, port, sizes, cgroup=None):
        def join():
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        # `ip netns exec` execs (no fork): self.proc.pid is the writer's pid
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", paths.netns_name(fab.prefix, SRC), sys.executable, "-c",
             _SENDER, _ip(fab, DST), str(port), ",".join(map(str, sizes))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=join if cgroup else None)
        assert self.proc.stdout.readline().strip() == "ready"

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait(self):
        assert self.proc.wait(60) == 0

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _tensors_by_port(pcap, ports):
    """{dport: {tensor_id: [TaLBHeader...]}} and {dport: untagged data packets}."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    from common.wire import talb_header_of

    out, plain = {p: {} for p in ports}, {p: 0 for p in ports}
    for pkt in rdpcap(str(pcap)):
        if IP not in pkt or TCP not in pkt or pkt[TCP].dport not in out:
            continue
        ip = pkt[IP]
        if ip.len - ip.ihl * 4 - pkt[TCP].dataofs * 4 <= 0:
            continue
        h = talb_header_of(pkt)
        if h is None:
            plain[pkt[TCP].dport] += 1
        else:
            out[pkt[TCP].dport].setdefault(h.tensor_id, []).append(h)
    return out, plain


def _two_senders(fab, tmp_path, port_in, port_out, sizes, tagger_kw, cgroup=None):
    """Sender ``a`` on port_in (in ``cgroup`` if given), ``b`` on port_out,
    both in SRC; tagged with ``tagger_kw(a, b)``: what port_in and port_out
    carried."""
    from workload.transparent_tag import TransparentTagger

    servers = [Server(fab, p, sizes) for p in (port_in, port_out)]
    a = Sender(fab, port_in, sizes, cgroup=cgroup)
    b = Sender(fab, port_out, sizes)
    try:
        with TransparentTagger(fab.prefix, [SRC], **tagger_kw(a, b)) as tag:
            with _captured(fab, f"{port_in} or port {port_out}", tmp_path / "h0.pcap"):
                a.go()
                b.go()
                a.wait()
                b.wait()
                for s in servers:
                    s.close()
            counters = tag.counters()
    finally:
        a.kill()
        b.kill()
    tensors, plain = _tensors_by_port(tmp_path / "h0.pcap", (port_in, port_out))
    return tensors, plain, counters


def _assert_selected_only(tensors, plain, counters, port_in, port_out, sizes):
    assert len(tensors[port_in]) == len(sizes) and plain[port_in] == 0, (tensors, plain, counters)
    assert tensors[port_out] == {} and plain[port_out] > 0, (tensors, plain)
    assert counters["started"] == len(sizes) and counters["not_selected"] >= len(sizes), counters


@pytest.fixture
def cgroup_dir(fabric):
    """A cgroup v2 directory of the test's own under the unified hierarchy,
    its processes killed and the directory removed at the end."""
    from workload.transparent_tag import _cgroup2_root

    path = _cgroup2_root() / f"{fabric.prefix}-tag"
    path.mkdir()
    try:
        yield path
    finally:
        kill_until_gone(lambda: map(int, (path / "cgroup.procs").read_text().split()),
                        pause_s=0.1)
        path.rmdir()


@pytest.mark.live
def test_live_cgroup_selects_the_processes_in_it(fabric, tmp_path, cgroup_dir):
    sizes = [3000, 70_000, 500]
    tensors, plain, counters = _two_senders(
        fabric, tmp_path, 5340, 5341, sizes, lambda a, b: {"cgroup": str(cgroup_dir)},
        cgroup=str(cgroup_dir))
    _assert_selected_only(tensors, plain, counters, 5340, 5341, sizes)


@pytest.mark.live
def test_live_pid_selects_that_process(fabric, tmp_path):
    sizes = [3000, 70_000, 500]
    tensors, plain, counters = _two_senders(
        fabric, tmp_path, 5342, 5343, sizes, lambda a, b: {"pid": a.proc.pid})
    _assert_selected_only(tensors, plain, counters, 5342, 5343, sizes)


@pytest.mark.live
def test_live_burst_rule_numbers_the_writes_of_a_burst(fabric, tmp_path):
    """burst:500ms: the writes of a burst (each answered by the server
    within the gap) get layers 0, 1, 2, ... capped at 7; a pause longer than
    the gap starts the next burst at 0."""
    from datapath.sendmsg_tagger import BURST_CAP
    from workload.transparent_tag import TransparentTagger

    first, second, port = 10, 3, 5344
    srv = Server(fabric, port, [2000] * (first + second))
    with TransparentTagger(fabric.prefix, [SRC], ports=(port, port), priority="burst:500ms") as tag:
        assert tag.rule == f"burst:500ms (cap {BURST_CAP})"
        with _captured(fabric, port, tmp_path / "h0.pcap"):
            c = _client(fabric)
            c.connect((_ip(fabric, DST), port))
            for i in range(first + second):
                if i == first:
                    time.sleep(1.5)          # a pause: > the gap
                c.sendall(os.urandom(2000))
                assert c.recv(1) == b"k"
            c.close()
            srv.close()
        counters = tag.counters()
    tensors, plain = _tensors(tmp_path / "h0.pcap")     # in order of first packet
    assert plain == 0 and counters["started"] == first + second, (plain, counters)
    layers = [{h.layer for h in hs} for hs in tensors.values()]
    assert all(len(s) == 1 for s in layers), layers   # one layer per tensor
    want = [min(i, BURST_CAP) for i in range(first)] + list(range(second))
    assert [s.pop() for s in layers] == want


@pytest.mark.live
@pytest.mark.parametrize("blocking", [True, False])
def test_live_full_ring_merges_a_run_of_writes_into_the_open_tensor(fabric, tmp_path, blocking):
    """64-byte writes into a closed window (the receiver does not read for
    0.5 s): once all 32 slots are live, a write that starts at the end of
    the newest, still unsent, tensor extends it. Nonblocking, with a small
    send buffer, never retrying the rest of a partial write: the next write
    cuts the open tensor to what was accepted, and one refused (EAGAIN)
    after extending it cuts it back. On the wire every tensor keeps one
    tensor_len, its packets' indexes below it, and one LAST, on its last
    packet."""
    import select

    from workload.transparent_tag import TransparentTagger

    n, port = 600, 5345 if blocking else 5346
    srv = Server(fabric, port, rcvbuf=4096, delay=0.5)
    with TransparentTagger(fabric.prefix, [SRC], ports=(port, port)) as tag:
        with _captured(fabric, port, tmp_path / "h0.pcap"):
            c = _client(fabric)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20 if blocking else 8192)
            c.connect((_ip(fabric, DST), port))
            c.setblocking(blocking)
            sent = 0
            for _ in range(n):      # n writes accepted, fully or in part
                while True:
                    try:
                        sent += c.send(b"z" * 64)
                        break
                    except BlockingIOError:
                        select.select([], [c], [], 10)
            c.setblocking(True)
            c.close()
            srv.close()
        counters = tag.counters()
    assert srv.got == sent and (sent == n * 64 or not blocking)
    assert counters["merged"] > 0 and (blocking or counters["failed"] > 0), counters
    assert counters["started"] + counters["merged"] + counters["ring_full"] == \
        counters["selected"] == n + counters["failed"], counters
    tensors, plain = _tensors(tmp_path / "h0.pcap")
    if counters["ring_full"] == 0:
        assert plain == 0, (plain, counters)
    for tid, hs in tensors.items():
        assert len({h.tensor_len for h in hs}) == 1, (tid, hs)
        tlen = hs[0].tensor_len
        assert all(h.pkt_idx < tlen for h in hs), (tid, hs)
        lasts = {h.pkt_idx for h in hs if h.last}
        assert lasts == {max(h.pkt_idx for h in hs)}, (tid, hs, counters)
    assert max(hs[0].tensor_len for hs in tensors.values()) > 1    # a merged run


@pytest.mark.live
def test_live_cli_tag_cgroup_and_selectors_that_do_not_exist(fabric, cgroup_dir):
    from workload.transparent_tag import _cgroup2_root

    rel = str(cgroup_dir.relative_to(_cgroup2_root()))
    out = subprocess.run([sys.executable, "-m", "talb.cli", "tag", "--prefix", fabric.prefix,
                          "--netns", SRC, "--cgroup", rel, "--priority", "burst:1ms",
                          "--for", "0.5"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"tagging writes of cgroup {rel} on h0 (worker" in out.stdout
    assert "priority burst:1ms (cap 7)" in out.stdout and "stopped:" in out.stdout

    def bad(*args):
        r = subprocess.run([sys.executable, "-m", "talb.cli", "tag", "--prefix", fabric.prefix,
                            "--netns", SRC, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        return r.stderr

    err = bad("--cgroup", "/sys/fs/cgroup/unified/nosuch-talb")
    assert "--cgroup: '/sys/fs/cgroup/unified/nosuch-talb' is not a cgroup v2 directory" in err
    assert "--cgroup: '../etc' is not a cgroup v2 directory" in bad("--cgroup", "../etc")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert f"--pid: no process {dead.pid} is running" in bad("--pid", str(dead.pid))
    assert "--pid: no process 0 is running" in bad("--pid", "0")


def test_system_call_numbers_per_architecture(monkeypatch):
    import platform

    from datapath.sendmsg_tagger import syscall_numbers

    assert syscall_numbers("x86_64") == ("orig_ax", {"WRITE": 1, "WRITEV": 20, "SENDTO": 44,
                                                     "SENDMSG": 46})
    want_arm = ("syscallno", {"WRITE": 64, "WRITEV": 66, "SENDTO": 206, "SENDMSG": 211})
    assert syscall_numbers("aarch64") == syscall_numbers("arm64") == want_arm
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(ValueError, match="known for x86_64, aarch64 only.*'riscv64'"):
        syscall_numbers()
    from workload.transparent_tag import TransparentTagger

    with pytest.raises(ValueError, match="architecture 'riscv64'"):
        TransparentTagger("nosuch", ["h0"], ports=(1, 1))


@pytest.mark.live
@pytest.mark.bench
def test_live_cost_per_send_call(fabric, capsys):
    """ns per send(64 B) call in h0 (to h1, same leaf), untagged vs tagged,
    alternated; the receiver drains in another thread."""
    from workload.transparent_tag import TransparentTagger

    n, port = 100_000, 5320

    def one(tagged: bool) -> float:
        srv = Server(fabric, port)
        c = _client(fabric)
        c.connect((_ip(fabric, DST), port))
        buf = b"x" * 64
        tag = TransparentTagger(fabric.prefix, [SRC], ports=(port, port)) if tagged else None
        try:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                c.send(buf)
            dt = (time.perf_counter_ns() - t0) / n
        finally:
            c.close()
            srv.close()
            if tag:
                c_ = tag.counters()
                # tiny writes outrun the ACKs: past 32 in flight, merged or ring_full
                assert c_["started"] + c_["merged"] + c_["ring_full"] >= n * 0.9, c_
                counts.append(c_)
                tag.close()
        return dt

    res = {"untagged": [], "tagged": []}
    counts = []
    for _ in range(3):
        for k in res:
            res[k].append(one(k == "tagged"))
    med = {k: sorted(v)[1] for k, v in res.items()}
    with capsys.disabled():
        print(f"\n  ns per 64-byte send: {med} (all {res}); tagging adds "
              f"{med['tagged'] - med['untagged']:.0f} ns; tagged runs' counters {counts}")


def _tiny_write_loop(fab, port, n, size=64):
    """``n`` send(``size`` B) calls in a tight loop, h0 -> h3, tagged by
    port: the tagger's counters (the ring_full measurement of
    docs/workload.md)."""
    from workload.transparent_tag import TransparentTagger

    srv = Server(fab, port)
    c = _client(fab)
    c.connect((_ip(fab, DST), port))
    buf = b"x" * size
    with TransparentTagger(fab.prefix, [SRC], ports=(port, port)) as tag:
        try:
            for _ in range(n):
                c.send(buf)
        finally:
            c.close()
            srv.close()
        return tag.counters()


@pytest.mark.live
@pytest.mark.bench
def test_live_tiny_writes_ring_full_share(fabric, capsys):
    """The share of 1e5 64-byte writes (a tight loop, h0 -> h3) that found
    all ring slots live and went untagged (ring_full), and the share merged
    into the open tensor, over 10 runs."""
    shares = []
    for i in range(10):
        c = _tiny_write_loop(fabric, 5350 + i, 100_000)
        sel = c["selected"]
        shares.append({k: round(c.get(k, 0) / sel, 3) for k in ("started", "merged", "ring_full")})
    with capsys.disabled():
        print(f"\n  shares of 1e5 64-byte writes: {shares}")
