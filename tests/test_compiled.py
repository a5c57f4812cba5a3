"""Compile once, load per node (datapath/compiled.py).

bcc compiles a program once per process and the result is cached across
builds; every node gets maps of its own and its own verified copy of the
programs. Checked here: the relocation itself (no kernel), two switches of
one compile under BPF_PROG_TEST_RUN and in a live fabric (independent
maps, both forward), and the cache: a hit compiles nothing, a changed
source compiles again, a corrupt file is ignored with a warning.
"""
from __future__ import annotations

import ctypes
import struct
import time
from pathlib import Path

import pytest

from conftest import new_prefix
from helpers import loaded_switch

SRC = "198.18.0.1"
DST = "198.18.1.4"
N_PORTS = 5                      # p0 ingress, p1..p4 a group


# --- the relocation, without a kernel ----------------------------------------------
def _insn(op, dst=0, src=0, off=0, imm=0) -> bytes:
    return struct.pack("<BBhi", op, (src << 4) | dst, off, imm)


def _object(**over):
    from datapath.compiled import CompiledObject, MapDef

    code = (_insn(0x18, dst=1, src=1, imm=7) + _insn(0) + _insn(0xb7, dst=0, imm=0)
            + _insn(0x18, dst=2, src=1, imm=9) + _insn(0) + _insn(0x95))
    fields = dict(source="x.c", key="k", license="GPL",
                  maps={"a": MapDef("a", 2, 4, 8, 1), "b": MapDef("b", 1, 4, 4, 16)},
                  insns={"prog": code}, relocs={"prog": ((0, "a"), (3, "b"))})
    fields.update(over)
    return CompiledObject(**fields)


def test_linking_rewrites_every_map_reference_and_nothing_else():
    obj = _object()
    obj.check()
    out = obj.linked("prog", {"a": 101, "b": 202})
    insns = [struct.unpack_from("<BBhi", out, i) for i in range(0, len(out), 8)]
    assert insns[0][3] == 101 and insns[3][3] == 202
    assert out[8:24] == obj.insns["prog"][8:24] and out[40:] == obj.insns["prog"][40:]


def test_a_cache_file_of_another_key_or_broken_relocations_is_refused():
    from datapath.compiled import CompiledObject

    obj = _object()
    assert CompiledObject.from_json(obj.to_json(), "k").insns == obj.insns
    with pytest.raises(ValueError, match="not this build's"):
        CompiledObject.from_json(obj.to_json(), "other")
    with pytest.raises(ValueError, match="no map load"):
        CompiledObject.from_json(_object(relocs={"prog": ((2, "a"),)}).to_json(), "k")
    with pytest.raises(ValueError, match="unreadable"):
        CompiledObject.from_json('{"format": 1, "key": "k"', "k")


# --- two switches of one compile, BPF_PROG_TEST_RUN -----------------------------------
@pytest.fixture(scope="module")
def two_switches(bcc):
    """Switch a (loaded by loaded_switch) and switch b, loaded from the same
    compile in the same namespace (its ports p0..p4 serve both)."""
    import tempfile

    from datapath import compiled
    from datapath.loader import SwitchDatapath
    from helpers import ProgTestSwitch

    with loaded_switch("two", N_PORTS) as (name, dp_a, ifindex):
        before = compiled.stats()
        dp_b = SwitchDatapath(name, tempfile.gettempdir() + "/unused-pins").load()
        try:
            after = compiled.stats()
            yield (ProgTestSwitch(name, dp_a, ifindex, N_PORTS),
                   ProgTestSwitch(name, dp_b, ifindex, N_PORTS), before, after)
        finally:
            dp_b.close()


def _tcp(sport):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=SRC, dst=DST) / TCP(sport=sport, dport=5201, flags="A"))


@pytest.mark.bpf
def test_second_switch_of_one_compile_compiles_nothing(two_switches):
    a, b, before, after = two_switches
    assert after["compiles"] == before["compiles"], "the second switch was compiled again"
    assert a.dp.node.obj is b.dp.node.obj
    ids_a = {n: a.maps[n].info.id for n in a.maps.NAMES}
    ids_b = {n: b.maps[n].info.id for n in b.maps.NAMES}
    assert not set(ids_a.values()) & set(ids_b.values()), "the two switches share a map"
    progs_a = {n: p.id for n, p in a.dp.programs().items()}
    progs_b = {n: p.id for n, p in b.dp.programs().items()}
    assert set(progs_a) == set(progs_b) and not set(progs_a.values()) & set(progs_b.values())


@pytest.mark.bpf
def test_two_switches_of_one_compile_keep_their_own_state_and_both_forward(two_switches):
    """Each switch forwards by its own tables (a: p1 only, b: p2..p4 under
    RPS, a tail-called program), counts into its own maps, and a write on
    one is not seen by the other."""
    from datapath import control

    a, b, _, _ = two_switches
    ix = a.ifindex
    ports = [(f"p{i}", ix[f"p{i}"], False, True) for i in range(N_PORTS)]
    control.program_switch(a.maps, ports, {DST: [ix["p1"]]}, scheme="ecmp")
    control.program_switch(b.maps, ports, {DST: [ix[f"p{i}"] for i in (2, 3, 4)]},
                           scheme="rps")
    for sw in (a, b):
        control.set_release(sw.maps, False)   # a test run has a socket: no first-hop release
        sw.maps.port_stats.clear()
        sw.maps.counters.clear()
    for sport in range(40000, 40012):
        assert a.run(_tcp(sport))[0] == 7           # TC_ACT_REDIRECT
        assert b.run(_tcp(sport))[0] == 7
    assert a.tx() == {"p0": 0, "p1": 12, "p2": 0, "p3": 0, "p4": 0}
    tx_b = b.tx()
    assert tx_b["p0"] == tx_b["p1"] == 0 and sum(tx_b.values()) == 12
    assert sum(1 for p in ("p2", "p3", "p4") if tx_b[p]) >= 2, tx_b   # RPS sprays
    assert control.read_config(a.maps)["scheme"] == "ecmp"
    assert control.read_config(b.maps)["scheme"] == "rps"
    from datapath.structs import IPv4Key

    # the route removed from a as the control plane removes one (fwd and
    # route_slots, the array the data path reads first)
    control.program_switch(a.maps, ports, {}, scheme="ecmp")
    assert a.maps.fwd.get(IPv4Key.of(DST)) is None
    assert b.maps.fwd.get(IPv4Key.of(DST)) is not None
    assert a.run(_tcp(40000))[0] != 7 and b.run(_tcp(40000))[0] == 7


# --- the cache ---------------------------------------------------------------------------
@pytest.fixture
def cache(tmp_path, monkeypatch, bcc):
    """An empty cache directory of this test, and no result in memory."""
    from datapath import compiled

    d = tmp_path / "cache"
    monkeypatch.setenv("TALB_BPF_CACHE", str(d))
    compiled.reset_memo()
    yield d
    compiled.reset_memo()


def _host_copy(tmp_path, extra: str = ""):
    """bpf/host_tc.c copied (its includes found in bpf/include), with ``extra``."""
    from datapath.host_loader import HOST_SRC

    src = tmp_path / "host_tc.c"
    src.write_text(HOST_SRC.read_text() + extra)
    return src


def _get(src):
    from datapath import compiled

    return compiled.get(src, ("talb_host_tc",))


@pytest.mark.bpf
def test_cache_hit_skips_the_compiler(cache, tmp_path, monkeypatch):
    from datapath import bpf_syscall as sc
    from datapath import compiled
    from datapath.compiled import NodeObject

    src = _host_copy(tmp_path)
    s0 = compiled.stats()
    first = _get(src)
    s1 = compiled.stats()
    assert s1["compiles"] == s0["compiles"] + 1 and first.origin == "compiled"
    files = list(cache.glob("host_tc-*.json"))
    assert len(files) == 1
    written = files[0].stat().st_mtime_ns

    compiled.reset_memo()              # a new build: nothing in memory

    def no_compiler(*_a, **_k):
        raise AssertionError("bcc was called on a cache hit")
    monkeypatch.setattr(compiled, "compile_object", no_compiler)
    started = time.monotonic()
    again = _get(src)
    took = time.monotonic() - started
    s2 = compiled.stats()
    assert s2["compiles"] == s1["compiles"] and s2["cache_hits"] == s1["cache_hits"] + 1
    assert again.origin == "cache" and again.insns == first.insns and again.maps == first.maps
    assert files[0].stat().st_mtime_ns == written
    print(f"compile {first.compile_seconds:.2f} s, cache hit {took * 1000:.1f} ms")
    node = NodeObject(again)           # and it loads: the kernel accepts the cached code
    try:
        assert sc.prog_info(node.prog_fds["talb_host_tc"]).verified_insns > 0
    finally:
        node.close()


@pytest.mark.bpf
def test_a_build_from_a_warm_cache_never_loads_bcc(cache):
    """A new process loads both programs from the cache without importing
    bcc (no libbcc, no clang): what a warm `talb testbed up` does."""
    import json
    import os
    import subprocess
    import sys

    from datapath.host_loader import HostDatapath
    from datapath.loader import SwitchDatapath

    SwitchDatapath.compiled()
    HostDatapath.compiled()                      # the cache filled
    code = ("import json, sys, tempfile\n"
            "from datapath import compiled\n"
            "from datapath.host_loader import HostDatapath\n"
            "from datapath.loader import SwitchDatapath\n"
            "for cls in (SwitchDatapath, HostDatapath):\n"
            "    cls(None, tempfile.gettempdir() + '/unused-pins').load().close()\n"
            "print(json.dumps({'bcc': 'bcc' in sys.modules, **compiled.stats()}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TALB_BPF_CACHE": str(cache),
                               "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["compiles"] == 0 and out["cache_hits"] == 2 and out["bcc"] is False, out


@pytest.mark.bpf
def test_changed_source_compiles_again(cache, tmp_path):
    from datapath import compiled

    src = _host_copy(tmp_path)
    _get(src)
    compiled.reset_memo()
    src.write_text(src.read_text() + "\n/* changed */\n")
    n = compiled.stats()["compiles"]
    obj = _get(src)
    assert compiled.stats()["compiles"] == n + 1 and obj.origin == "compiled"
    assert len(list(cache.glob("host_tc-*.json"))) == 2     # one per source text


@pytest.mark.bpf
def test_corrupt_cache_file_is_ignored_with_a_warning_and_rebuilt(cache, tmp_path):
    from datapath import compiled

    src = _host_copy(tmp_path)
    _get(src)
    (path,) = cache.glob("host_tc-*.json")
    path.write_text(path.read_text()[:1000])          # cut short, as by a full disk
    compiled.reset_memo()
    n = compiled.stats()["compiles"]
    with pytest.warns(compiled.CacheWarning, match="ignored, compiling again"):
        obj = _get(src)
    assert compiled.stats()["compiles"] == n + 1 and obj.origin == "compiled"
    compiled.reset_memo()
    assert _get(src).origin == "cache"                 # written anew, whole


@pytest.mark.bpf
def test_cache_file_others_may_write_is_not_loaded(cache, tmp_path):
    """What the cache holds goes into the kernel: a file writable by others
    is ignored (with a warning) and compiled anew."""
    import os

    from datapath import compiled

    src = _host_copy(tmp_path)
    _get(src)
    (path,) = cache.glob("host_tc-*.json")
    os.chmod(path, 0o666)
    compiled.reset_memo()
    with pytest.warns(compiled.CacheWarning, match="writable by others"):
        assert _get(src).origin == "compiled"
    assert path.stat().st_mode & 0o777 == 0o600           # rewritten, private


@pytest.mark.bpf
def test_cache_off_compiles_and_writes_nothing(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("TALB_BPF_CACHE", "off")
    _get(_host_copy(tmp_path))
    assert not cache.exists()


@pytest.mark.bpf
def test_a_map_pinned_with_another_layout_is_refused_by_name(bcc):
    from datapath import bpf_syscall as sc
    from datapath.compiled import NodeObject
    from datapath.host_loader import HostDatapath

    obj = HostDatapath.compiled()
    fd = sc.map_create(sc.BPF_MAP_TYPE_ARRAY, 4, 4, 1, name="counters")
    try:
        with pytest.raises(OSError, match="map 'counters'"):
            NodeObject(obj, map_fds={"counters": fd})
    finally:
        sc.close(fd)


# --- live: a fabric of one compile -------------------------------------------------------
@pytest.mark.live
def test_fabric_switches_share_one_compile_not_their_maps(bcc):
    """`up` in this process: at most one compile per program for the whole
    fabric, every switch with maps and programs of its own, and traffic
    crosses it."""
    from common import paths
    from datapath import bpf_syscall as sc
    from datapath import compiled, control
    from datapath.maps import SwitchMaps
    from netns_topology import LeafSpine
    from testbed import lifecycle
    from workload.netexec import ping

    prefix = new_prefix()
    s0 = compiled.stats()
    try:
        lifecycle.up(LeafSpine(spines=2, leaves=2, hosts_per_leaf=1), prefix)
        s1 = compiled.stats()
        assert s1["compiles"] - s0["compiles"] <= 2          # switch_tc.c, host_tc.c
        switches = ["spine0", "spine1", "leaf0", "leaf1"]
        maps = {sw: SwitchMaps(paths.pin_dir(prefix, sw)) for sw in switches}
        try:
            ids = {sw: {n: m[n].info.id for n in m.NAMES} for sw, m in maps.items()}
            every = [i for d in ids.values() for i in d.values()]
            assert len(every) == len(set(every)), "two switches share a map"
            arrays = {sw: [sc.map_lookup(m.scheme_progs.fd, ctypes.c_uint32(k), 4)
                           for k in range(1, m.scheme_progs.info.max_entries)]
                      for sw, m in maps.items()}
            progs = [raw for raws in arrays.values() for raw in raws if raw is not None]
            assert progs and len(progs) == len(set(progs)), "switches share scheme programs"

            st = lifecycle.status(prefix)
            h0, h1 = st["hosts"][0], st["hosts"][1]
            assert ping(h0["namespace"], h1["ip"], count=3, timeout_s=2)
            control.set_scheme(maps["leaf0"], "rps")
            assert control.read_config(maps["leaf1"])["scheme"] == "ecmp"
            assert ping(h0["namespace"], h1["ip"], count=3, timeout_s=2)   # rps's program
        finally:
            for m in maps.values():
                m.close()
    finally:
        lifecycle.down(prefix)
