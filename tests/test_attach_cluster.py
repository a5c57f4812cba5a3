"""`talb attach --cluster`: one fabric file over two machines, each
machine's part attached by its Dask worker; `talb scheme --cluster` and
`talb detach --cluster` reach the same workers; a part failing on one
machine undoes the others.

Run the way a user runs it: `dask scheduler` and one `dask worker --name
MACHINE` per machine as their own processes (the venv's `dask`), the talb
commands as their own processes; no Dask client in this process. The two
"machines" are the two-server example's (tests/test_attach_two_servers.py):
each a network namespace holding its bridge and NIC ports. Both workers run
on this host, so each gets its own TALB_RUN_DIR, standing for its machine's
own /run/talb (on real machines each has its own anyway); `talb attach
--cluster` runs with a third, the machine it is typed on.

Everything the test starts is recorded (tests/dask_procs.py): a test run
that was killed leaves that behind, and the next run's fixture ends those
processes by pid, unmounts their bpffs and removes the directory.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import _start_time, new_prefix
from dask_procs import REPO, TEST_ROOT, VENV_BIN, DaskCluster, remove_stale_runs
from helpers import free_port
from test_attach_two_servers import PORTS, RATE, TwoServers, sh

pytestmark = pytest.mark.live
MACHINES = ("servera", "serverb")   # the workers' --name; the file's machine:


def talb(*args, run_dir: Path, check=True, timeout=300) -> subprocess.CompletedProcess:
    """The venv's `talb` as a process, on the machine of ``run_dir``."""
    t0 = time.monotonic()
    proc = subprocess.run([str(VENV_BIN / "talb"), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=timeout,
                          env={**os.environ, "TALB_RUN_DIR": str(run_dir), "COLUMNS": "200"})
    proc.seconds = time.monotonic() - t0
    shown = proc.stdout.strip() if not proc.stdout.startswith("{") else "(JSON report)"
    print(f"\n$ talb {' '.join(args)}   [{proc.seconds:.1f} s, exit {proc.returncode}]\n"
          f"{shown}\n{proc.stderr.strip()}".rstrip())
    if check and proc.returncode:
        raise AssertionError(f"talb {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def servers(root):
    s = TwoServers(new_prefix())
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def cluster(root):
    if not (VENV_BIN / "dask").exists():
        pytest.fail(f"no {VENV_BIN / 'dask'}: `make setup` installs the extra 'cluster'")
    removed = remove_stale_runs()
    if removed:
        print(f"removed what killed runs of this test left: {', '.join(removed)}")
    c = DaskCluster(TEST_ROOT / new_prefix(), run_dirs=(*MACHINES, "client"))
    try:
        for m in MACHINES:
            c.start_worker(m, wait=False)
        for m in MACHINES:
            c.wait_registered(m)
        yield c
    finally:
        c.stop()


def cluster_file(servers: TwoServers, path: Path, name: str, bad_iface: str | None = None,
                 machine_b: str = MACHINES[1]) -> Path:
    """docs/attach.md's one file for both servers: every switch names its
    machine, each server's namespace given (they are not root namespaces here)."""
    doc = {"name": name, "link_rate": RATE, "scheme": "talb",
           "switches": [
               {"name": "a", "machine": MACHINES[0], "netns": servers.ns["sa"],
                "ports": [{"iface": "va0", "to": "ha"}, {"iface": "enp1s0f0", "to": "b"},
                          {"iface": "enp1s0f1", "to": "b"}]},
               {"name": "b", "machine": machine_b, "netns": servers.ns["sb"],
                "ports": [{"iface": "vb0", "to": "hb"}, {"iface": bad_iface or "enp1s0f0", "to": "a"},
                          {"iface": "enp1s0f1", "to": "a"}]}],
           "hosts": [{"name": "ha", "ip": "10.0.0.1", "iface": "ha0", "netns": servers.ns["ha"]},
                     {"name": "hb", "ip": "10.0.0.2", "iface": "hb0", "netns": servers.ns["hb"]}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def filters(ns: str, iface: str, direction: str = "ingress") -> str:
    return sh("tc", "-n", ns, "filter", "show", "dev", iface, direction).strip()


def pins(run_dir: Path, name: str) -> list[str]:
    base = run_dir / "bpffs" / name
    return sorted(str(p.relative_to(base)) for p in base.rglob("*")) if base.exists() else []


def assert_nothing_left(servers, cluster, name: str, before: dict) -> None:
    """No record, pin or tc filter of ``name`` on either machine or here;
    every link, address, bridge port and qdisc as before."""
    for m in MACHINES:
        assert not (cluster.run_dirs[m] / name).exists(), m
        assert pins(cluster.run_dirs[m], name) == [], m
    assert not (cluster.run_dirs["client"] / "attach-cluster" / f"{name}.json").exists()
    for server, ports in (("sa", PORTS), ("sb", ("vb0", "enp1s0f0", "enp1s0f1"))):
        for p in ports:
            assert filters(servers.ns[server], p) == "", (server, p)
    for host, iface in (("ha", "ha0"), ("hb", "hb0")):
        assert filters(servers.ns[host], iface, "egress") == "", host
    servers.assert_as(before)


def _listening(ns: str, port: int) -> bool:
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


# --- the tests --------------------------------------------------------------------------------
def test_one_command_attaches_each_machines_part_scheme_and_detach_reach_them(servers, cluster,
                                                                              tmp_path):
    """One file; `talb attach --cluster` puts leaf a on servera's worker and
    leaf b on serverb's (each machine's record names only its switch and
    its host's tagger), tensors cross both cables tagged, `talb scheme
    --cluster` switches both machines (one machine refusing puts the
    other's back), `talb detach --cluster` leaves nothing on either."""
    name = new_prefix()
    here = cluster.run_dirs["client"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "lab.yaml", name)
    listen = None
    times = {}
    try:
        out = talb("attach", "--fabric", str(fabric), "--cluster", cluster.address, run_dir=here)
        times["attach"] = out.seconds
        assert f"servera: attached a (scheme talb, tagger on hosts: ha)" in out.stdout
        assert f"serverb: attached b (scheme talb, tagger on hosts: hb)" in out.stdout
        for m, sw, host in (("servera", "a", "ha"), ("serverb", "b", "hb")):
            rec = json.loads((cluster.run_dirs[m] / name / "attach.json").read_text())
            assert (rec["status"], list(rec["switches"]), list(rec["hosts"])) == ("up", [sw], [host])
            part = {s["name"]: s.get("remote", False) for s in rec["fabric"]["switches"]}
            assert part == {"a": sw != "a", "b": sw != "b"}
            assert rec["agent"]["pid"] > 0
            pinned = {p.split("/")[0] for p in pins(cluster.run_dirs[m], name)}
            assert pinned == {sw, host}, (m, pinned)   # its switch and its host's tagger only
        agents = [json.loads((cluster.run_dirs[m] / name / "attach.json").read_text())["agent"]["pid"]
                  for m in MACHINES]
        for server, ports in (("sa", PORTS), ("sb", ("vb0", "enp1s0f0", "enp1s0f1"))):
            for p in ports:
                assert "bpf" in filters(servers.ns[server], p), (server, p)
        crec = json.loads((here / "attach-cluster" / f"{name}.json").read_text())
        print("\nwhat attached where: " + "; ".join(
            f"{m}: {p['switches']} + tagger {p['hosts']} by worker {p['worker']} "
            f"({p['address']}, host {p['hostname']}) in {p['seconds']} s"
            for m, p in crec["parts"].items()))
        assert crec["status"] == "up" and crec["scheduler"] == cluster.address
        assert {m: (p["worker"], p["switches"]) for m, p in crec["parts"].items()} == {
            "servera": ("servera", ["a"]), "serverb": ("serverb", ["b"])}

        # tensors: the receiver on serverb, the senders on servera, each with its machine's record
        listen = subprocess.Popen(
            [str(VENV_BIN / "talb"), "send", "--listen", "--prefix", name, "--host", "hb",
             "--port", "7200", "--senders", "2", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "TALB_RUN_DIR": str(cluster.run_dirs["serverb"])})
        deadline = time.monotonic() + 30
        while not _listening(servers.ns["hb"], 7200):
            assert listen.poll() is None and time.monotonic() < deadline, listen.stderr.read()
            time.sleep(0.2)
        out = talb("send", "--prefix", name, "--src", "ha", "--to", "10.0.0.2:7200", "--senders", "2",
                   "--tensors", "6", "--layers", "2", "--size", "200kb", "--json",
                   run_dir=cluster.run_dirs["servera"])
        times["send"] = out.seconds
        sent = json.loads(out.stdout)
        got_out, got_err = listen.communicate(timeout=120)
        assert listen.returncode == 0, got_err
        got = json.loads(got_out)
        assert sent["ok"] and len(sent["tensors"]) == 12
        assert all(len(t["uplinks"]) == 1 for t in sent["tensors"]), sent["tensors"]
        assert got["ok"] and len(got["tensors"]) == 12 and all(t["ok"] for t in got["tensors"])
        spread = {}
        for t in sent["tensors"]:
            (cable,) = t["uplinks"]
            spread[cable] = spread.get(cable, 0) + 1
        print(f"\ncluster: 12/12 tensors verified on serverb, one cable each: {spread}")

        # the scheme on both machines, from here
        out = talb("scheme", "ecmp", "--prefix", name, "--cluster", cluster.address, run_dir=here)
        times["scheme"] = out.seconds
        assert "a: ecmp (machine servera)" in out.stdout and "b: ecmp (machine serverb)" in out.stdout
        for m, sw in (("servera", "a"), ("serverb", "b")):   # as each machine sees it
            assert f"{sw}: ecmp" in talb("scheme", "--prefix", name, run_dir=cluster.run_dirs[m]).stdout
        # serverb cannot switch (its switch's pins moved away): servera's goes back to ecmp
        pin_b = cluster.run_dirs["serverb"] / "bpffs" / name / "b"
        pin_b.rename(pin_b.with_name("away"))
        try:
            out = talb("scheme", "drill", "--param", "d=2", "--prefix", name, "--cluster",
                       cluster.address, run_dir=here, check=False)
        finally:
            pin_b.with_name("away").rename(pin_b)
        assert out.returncode == 1
        assert f"machine serverb: " in out.stderr and str(pin_b) in out.stderr, out.stderr
        assert "the scheme is back on servera" in out.stderr, out.stderr
        assert "a: ecmp" in talb("scheme", "--prefix", name, run_dir=cluster.run_dirs["servera"]).stdout
        # a plain detach here says how to reach the machines
        out = talb("detach", "--name", name, run_dir=here, check=False)
        assert out.returncode == 2 and f"--cluster tcp://HOST:PORT" in out.stderr
    finally:
        if listen is not None and listen.poll() is None:
            listen.kill()
            listen.wait()
        out = talb("detach", "--name", name, "--cluster", cluster.address, run_dir=here, check=False)
        times["detach"] = out.seconds
    assert out.returncode == 0, out.stderr
    assert "servera: detached a, agent stopped" in out.stdout
    assert "serverb: detached b, agent stopped" in out.stdout
    assert all(_start_time(pid) is None for pid in agents)
    assert_nothing_left(servers, cluster, name, before)
    print(f"\ncluster attach record: {json.dumps({k: round(v, 1) for k, v in times.items()})} s")


def test_a_part_failing_on_one_machine_undoes_the_others(servers, cluster, tmp_path):
    """serverb's part names an interface serverb does not have: serverb's
    attach undoes itself, servera's part (attached, or attaching when the
    failure comes) is detached again; the error names the machine, the
    field and the value; nothing is left on either machine."""
    name = new_prefix()
    here = cluster.run_dirs["client"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "bad.yaml", name, bad_iface="enp9s9")
    out = talb("attach", "--fabric", str(fabric), "--cluster", cluster.address, run_dir=here,
               check=False)
    assert out.returncode == 1
    assert "machine serverb (worker tcp://127.0.0.1:" in out.stderr, out.stderr
    assert "switches[1].ports[1].iface: no interface 'enp9s9' in " in out.stderr, out.stderr
    assert "undone on servera" in out.stderr, out.stderr
    assert_nothing_left(servers, cluster, name, before)


def test_errors_name_the_machine_without_a_worker_and_the_scheduler(servers, cluster, tmp_path):
    name = new_prefix()
    here = cluster.run_dirs["client"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "c.yaml", name, machine_b="serverc")
    out = talb("attach", "--fabric", str(fabric), "--cluster", cluster.address, run_dir=here,
               check=False)
    assert out.returncode == 1
    assert (f"switches[1].machine: no worker for machine 'serverc' at {cluster.address} "
            f"(workers' machines: servera (tcp://") in out.stderr, out.stderr
    assert f"--name serverc" in out.stderr
    nobody = f"tcp://127.0.0.1:{free_port()}"
    out = talb("attach", "--fabric", str(fabric), "--cluster", nobody, run_dir=here, check=False)
    assert out.returncode == 1
    assert f"--cluster {nobody}: no Dask scheduler answers there" in out.stderr, out.stderr
    out = talb("attach", "--fabric", str(fabric), run_dir=here, check=False)
    assert out.returncode == 2
    assert "spreads over machines servera, serverc" in out.stderr, out.stderr
    out = talb("detach", "--name", name, "--cluster", cluster.address, run_dir=here, check=False)
    assert out.returncode == 1
    assert f"nothing is attached over a cluster under the name '{name}'" in out.stderr
    assert_nothing_left(servers, cluster, name, before)


def test_one_machines_part_by_hand_with_machine(servers, cluster, tmp_path):
    """`--machine NAME` attaches that machine's part of the same file here:
    its switch, the other machine's remote, the other's host untagged."""
    name = new_prefix()
    run_dir = cluster.run_dirs["servera"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "lab.yaml", name)
    try:
        talb("attach", "--fabric", str(fabric), "--machine", "servera", "--no-agent", run_dir=run_dir)
        rec = json.loads((run_dir / name / "attach.json").read_text())
        assert (list(rec["switches"]), list(rec["hosts"])) == (["a"], ["ha"])
        assert filters(servers.ns["sb"], "vb0") == ""
    finally:
        talb("detach", "--name", name, run_dir=run_dir, check=False)
    assert_nothing_left(servers, cluster, name, before)


def test_detach_with_a_machines_worker_gone_keeps_its_part_until_the_worker_is_back(
        servers, cluster, tmp_path):
    """serverb's worker is stopped after the attach: `talb detach --cluster`
    detaches servera's part, names serverb, and keeps serverb's part in the
    record; once serverb has a worker again (a new address, the same
    --name on the same host) the same command detaches it."""
    name = new_prefix()
    here = cluster.run_dirs["client"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "lab.yaml", name)
    try:
        talb("attach", "--fabric", str(fabric), "--cluster", cluster.address, "--no-agent",
             run_dir=here)
        cluster.stop_worker("serverb")
        out = talb("detach", "--name", name, "--cluster", cluster.address, run_dir=here,
                   check=False)
        assert out.returncode == 1
        assert "serverb: machine serverb: no worker for machine 'serverb'" in out.stderr, out.stderr
        assert "detached on: servera" in out.stderr, out.stderr
        assert all(filters(servers.ns["sa"], p) == "" for p in PORTS)
        assert "bpf" in filters(servers.ns["sb"], "vb0")  # serverb's part: still attached
        crec = json.loads((here / "attach-cluster" / f"{name}.json").read_text())
        assert list(crec["parts"]) == ["serverb"]
    finally:
        if "serverb" not in cluster.procs:
            cluster.start_worker("serverb")
    out = talb("detach", "--name", name, "--cluster", cluster.address, run_dir=here)
    assert "serverb: detached b" in out.stdout and "servera" not in out.stdout
    assert_nothing_left(servers, cluster, name, before)


def test_a_worker_without_name_answers_for_its_host_name(servers, cluster, tmp_path):
    """On real machines the file's machine: can be the host name, and the
    worker needs no --name: a worker started without one takes b's part
    when b's machine: is this host's name."""
    name = new_prefix()
    here = cluster.run_dirs["client"]
    before = servers.snapshot()
    fabric = cluster_file(servers, tmp_path / "lab.yaml", name, machine_b=socket.gethostname())
    cluster.start_worker("unnamed", named=False)
    try:
        out = talb("attach", "--fabric", str(fabric), "--cluster", cluster.address, "--no-agent",
                   run_dir=here)
        assert f"{socket.gethostname()}: attached b" in out.stdout
        rec = json.loads((cluster.run_dirs["unnamed"] / name / "attach.json").read_text())
        assert list(rec["switches"]) == ["b"]
    finally:
        if (here / "attach-cluster" / f"{name}.json").exists():
            talb("detach", "--name", name, "--cluster", cluster.address, run_dir=here)
        cluster.stop_worker("unnamed")
    assert not (cluster.run_dirs["unnamed"] / name).exists()
    assert_nothing_left(servers, cluster, name, before)
