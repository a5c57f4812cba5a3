"""Real Open MPI jobs on a live fabric (workload/mpi_job.py, `talb run
--client mpi`): an all-reduce across hosts on different leaves under ECMP
and under TaLB, every element of every result checked; a job that passes
its timeout is ended and leaves nothing; a run end to end writes its
results file; with the transparent tagger in the checkout, a tagged run;
the all-reduce captured at every sender's link and leaf uplinks under all
six schemes (talb tagged: every packet tagged, one spine per tensor; the
others untagged).

Fabric: topologies/talb.yaml (2 spines, 2 leaves x 3 hosts, 100 Mbit/s).
Needs Open MPI and mpi4py for /usr/bin/python3 (`make testbed`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from contextlib import nullcontext

import pytest

from common import paths
from common.c_constants import SCHEMES
from datapath.control import set_scheme
from datapath.maps import SwitchMaps
from netns_topology.state import load_topology_of
from workload import mpi_job, mpi_rank, mpi_run
from workload.experiment import RunConfig
from conftest import skip_or_fail
from helpers import processes_in_hosts, up_fabric
import tag_captures

pytestmark = pytest.mark.live

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
#: hosts on different leaves, neighbours alternating (spread placement: h0, h3, h1, h4)
RANKS = ["h0", "h3", "h1", "h4"]


@pytest.fixture(scope="module")
def mpi_tools():
    try:
        mpi_job.check_tools()
    except mpi_job.MpiError as exc:
        skip_or_fail(str(exc))


@pytest.fixture(scope="module")
def fabric(request, bcc, mpi_tools):
    return up_fabric(request, TOPOLOGY)


def _scheme(prefix: str, scheme: str) -> None:
    for sw in load_topology_of(prefix).switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            set_scheme(maps, scheme)


def _leftovers(sid: int, prefix: str) -> tuple[list[int], dict]:
    return mpi_job._session_pids(sid), processes_in_hosts(prefix)


def _no_job_dirs() -> list[str]:
    return [p for p in os.listdir("/tmp") if p.startswith("talb-mpi-")]


@pytest.mark.parametrize("scheme", ["ecmp", "talb"])
def test_allreduce_across_leaves_is_correct_and_leaves_nothing(fabric, scheme):
    _scheme(fabric.prefix, scheme)
    before_dirs = _no_job_dirs()
    started = []
    counts = [1, 1000, 250_000]          # 4 B, 4 KB and 1 MB of float32 a message
    spec = {"mode": "allreduce", "counts": counts, "iterations": 3, "warmup": 1}
    job = mpi_job.run_job(fabric.prefix, fabric.topo, RANKS, spec, timeout_s=120,
                          on_start=started.append)
    out = job.output
    assert out["correct"] is True and out["errors"] == []
    assert out["ranks"] == 4 and job.hosts == RANKS
    assert out["message_bytes"] == [4 * c for c in counts]
    assert len(out["iterations"]) == 3 and [i["warmup"] for i in out["iterations"]] == \
        [True, False, False]
    assert all(i["time_s"] > 0 and len(i["message_s"]) == 3 for i in out["iterations"])
    assert job.port_range == (mpi_job.DEFAULT_PORT_MIN,
                              mpi_job.DEFAULT_PORT_MIN + mpi_job.DEFAULT_PORT_RANGE - 1)
    # mpirun ran in the first rank's namespace; nothing of the job is left anywhere
    assert job.argv[:4] == ["ip", "netns", "exec", paths.netns_name(fabric.prefix, "h0")]
    assert _leftovers(started[0].pid, fabric.prefix) == ([], {})
    assert _no_job_dirs() == before_dirs


def test_rank_pair_goodput(fabric):
    _scheme(fabric.prefix, "ecmp")
    spec = {"mode": "sendrecv", "bytes": 1 << 20, "reps": 10}
    out = mpi_job.run_job(fabric.prefix, fabric.topo, ["h0", "h3"], spec, timeout_s=60).output
    assert out["correct"] is True
    # 10 MB over 100 Mbit/s host links: most of the line rate
    assert 50e6 < out["goodput_bps"] <= 100e6, out


def test_a_job_past_its_timeout_is_ended_and_leaves_nothing(fabric):
    started = []
    spec = {"mode": "sendrecv", "bytes": 1 << 20, "reps": 100_000}     # ~2.5 hours
    with pytest.raises(mpi_job.MpiError, match="longer than 8 s and was ended"):
        mpi_job.run_job(fabric.prefix, fabric.topo, RANKS, spec, timeout_s=8,
                        on_start=started.append)
    assert _leftovers(started[0].pid, fabric.prefix) == ([], {})
    assert started[0].returncode is not None


def test_a_failing_rank_fails_the_job_and_leaves_nothing(fabric):
    started = []
    spec = {"mode": "no-such-mode"}      # every rank raises KeyError
    with pytest.raises(mpi_job.MpiError, match="mpirun exited"):
        mpi_job.run_job(fabric.prefix, fabric.topo, RANKS[:2], spec, timeout_s=60,
                        on_start=started.append)
    assert _leftovers(started[0].pid, fabric.prefix) == ([], {})


def _run(fabric, tmp_path, **kw):
    from workload.mpi_run import run

    cfg = RunConfig(**{"model": "threelayer", "arch": "allreduce", "workers": 4, "client": "mpi",
                       "scheme": "ecmp", "load": 0.2, "background_size_scale": 0.1,
                       "iterations": 3, "warmup": 1, "seed": 3, "prefix": fabric.prefix,
                       "out": str(tmp_path / "mpi.json"), "timeout_s": 300, **kw})
    return run(cfg)


def test_talb_run_client_mpi_writes_its_results(fabric, tmp_path):
    r = _run(fabric, tmp_path)
    on_disk = json.loads(open(r["path"]).read())
    assert on_disk["format"] == "talb-run/1" and on_disk["client"] == "mpi"
    for key in ("config", "software", "machine", "fabric", "model", "scaling", "placement",
                "mpi", "load", "summary", "flags", "headline", "iterations", "pairing"):
        assert key in on_disk, key
    m, head, sp = on_disk["mpi"], on_disk["headline"], on_disk["summary"]["speed"]
    assert m["correct"] is True and m["ranks"] == 4 and m["hosts"] == RANKS
    assert m["port_range"] == [7600, 7663] and m["transport"].startswith("pml ob1, btl tcp")
    assert m["messages_per_iteration"] == on_disk["model"]["tensors"] == len(m["message_bytes"])
    assert m["bytes_per_iteration"] == sum(m["message_bytes"])
    assert m["tagging"] == {"mode": "auto", "on": False, "rule": None, "counters": None,
                            "why": "--mpi-tag auto: scheme ecmp, not talb"}
    assert sp["iterations"] == 2 and sp["iteration_time_s"] > 0
    assert head["iteration_time_s"] == sp["iteration_time_s"]
    assert head["samples_per_s"] == sp["samples_per_s"] > 0      # threelayer has a batch size
    assert head["scheme"] == "ecmp" and head["client"] == "mpi" and head["mpi_tagged"] is False
    assert all(not isinstance(v, (dict, list)) for v in head.values())
    assert on_disk["config"]["client"] == "mpi" and on_disk["config"]["seed"] == 3
    bg = on_disk["load"]["background"]
    pairing = on_disk["pairing"]
    assert bg is not None and pairing["background"]["planned_flows"] > 0
    # training starts at a fixed offset into the background (pairing across
    # schemes), after the ranks were ready, and the plan covers it
    assert pairing["mpi_ready_s"] < mpi_run.MPI_START_S, pairing
    assert abs(pairing["start_offset_s"] - mpi_run.MPI_START_S) < 0.005, pairing
    assert pairing["background"]["covered"] is True
    assert len(m["rank_cpu_s"]) == 4 and m["wait"].startswith("nonblocking calls")
    assert processes_in_hosts(fabric.prefix) == {}


def test_talb_run_client_mpi_tagged_under_talb(fabric, tmp_path):
    r = _run(fabric, tmp_path, scheme="talb", mpi_tag="auto", load=0.0)
    m = r["mpi"]
    assert m["correct"] is True
    assert m["tagging"]["on"] is True and m["tagging"]["rule"]
    c = m["tagging"]["counters"]
    # every btl write reached a tagged host's ring: tensors were registered,
    # none fell through for want of the host's map
    assert c["started"] > 0 and c["selected"] >= c["started"], c
    assert c["no_host_map"] == 0 and c["too_large"] == 0, c
    assert r["headline"]["mpi_tagged"] is True
    assert processes_in_hosts(fabric.prefix) == {}


def test_cli_run_client_mpi(fabric, tmp_path):
    """`talb run --client mpi` as a user types it, on the fabric that is up."""
    talb = shutil.which("talb") or str(paths.REPO_ROOT / ".venv" / "bin" / "talb")
    out = tmp_path / "cli.json"
    p = subprocess.run([talb, "run", "--client", "mpi", "--model", "threelayer", "--workers", "2",
                        "--scheme", "ecmp", "--iterations", "2", "--prefix", fabric.prefix,
                        "--out", str(out)], capture_output=True, text=True, timeout=300,
                       cwd=str(paths.REPO_ROOT), env={**os.environ,
                                                      "PYTHONPATH": str(paths.REPO_ROOT)})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "MPI all-reduce x2 ranks" in p.stdout and "results correct" in p.stdout
    assert json.loads(out.read_text())["mpi"]["hosts"] == ["h0", "h3"]


def test_mpi_quick_preset_end_to_end(root, mpi_tools, tmp_path):
    """`talb bench --preset mpi-quick` (2 iterations): a fabric of its own,
    every run's results file, runs.csv, the paired comparison on the MPI
    iteration time, the figure, nothing left behind."""
    import csv

    from click.testing import CliRunner

    from conftest import new_prefix
    from experiments.sweep.kinds import build_plan
    from netns_topology.teardown import namespaces
    from netns_topology.state import exists
    from talb.cli import main
    from testbed import lifecycle

    prefix, out = new_prefix(), tmp_path / "mpiq"
    plan = build_plan("mpi-quick", iterations=2)
    try:
        r = CliRunner().invoke(main, ["bench", "--preset", "mpi-quick",
                                      "--iterations", "2", "--out", str(out), "--prefix", prefix])
        assert r.exit_code == 0, r.output
        assert not namespaces(prefix) and not paths.state_dir(prefix).exists()
        assert not (out / "failed.json").exists(), (out / "failed.json").read_text()
        for spec in plan.runs:
            res = json.loads((out / "runs" / f"{spec.key()}.json").read_text())
            assert res["client"] == "mpi" and res["mpi"]["correct"] is True
            assert res["headline"]["scheme"] == spec.scheme and res["config"]["seed"] == spec.seed
            assert res["fabric"]["built_for_run"] is False
        rows = list(csv.DictReader(open(out / "runs.csv")))
        assert len(rows) == len(plan.runs) and {r["client"] for r in rows} == {"mpi"}
        paired = [x for x in csv.DictReader(open(out / "paired.csv"))
                  if x["metric"] == "iteration_time_s"]
        assert len(paired) == 1 and {paired[0]["a"], paired[0]["b"]} == {"ecmp", "talb"}
        assert any(name.startswith("mpi-") for name in json.loads((out / "plots.json").read_text()))
    finally:
        if exists(prefix):
            lifecycle.down(prefix)


def test_ps_pattern_across_leaves_is_correct(fabric, tmp_path):
    """PS-style point-to-point: rank 0 the server, workers push to it at once and get the sum."""
    r = _run(fabric, tmp_path, mpi_pattern="ps", workers=3, load=0.0)
    m = r["mpi"]
    assert m["correct"] is True and m["pattern"] == "ps" and m["ranks"] == 4
    assert r["placement"]["servers"] == [m["hosts"][0]]           # rank 0 = the server
    assert m["hosts"][1:] == r["placement"]["workers"]
    assert r["headline"]["arch"] == "ps" and r["headline"]["servers"] == 1
    assert processes_in_hosts(fabric.prefix) == {}


def test_waiting_ranks_leave_the_cpus_to_the_fabric(fabric):
    """Ranks wait by MPI_Testall and sleeps (workload/mpi_rank.py): ranks 2
    and 3 only wait while rank 0 sends to rank 1, and use a small share of
    their wall time; with Open MPI's blocking calls (poll_s 0) they spin."""
    _scheme(fabric.prefix, "ecmp")
    share = {}
    for poll_s in (mpi_rank.POLL_S, 0):
        spec = {"mode": "sendrecv", "bytes": 1 << 20, "reps": 30, "poll_s": poll_s}
        out = mpi_job.run_job(fabric.prefix, fabric.topo, RANKS, spec, timeout_s=60).output
        assert out["correct"] is True and len(out["rank_cpu_s"]) == 4
        share[poll_s] = max(out["rank_cpu_s"][2:]) / out["wall_s"]
    assert share[mpi_rank.POLL_S] < 0.3, share
    assert share[mpi_rank.POLL_S] < share[0] / 2, share


# --- every message at the senders' uplinks ------------------------------------------------
#: small tensors: 4 B, 4 KB and 400 KB a message (the last one fragmented by the btl)
CAPTURE_COUNTS = [1, 1000, 100_000]


def _btl_captures(prefix: str, topo, hosts: list[str], directory, ports: tuple[int, int]):
    """The MPI data connections (one end in the btl's port range) captured
    at the rank hosts' links and the leaves' uplinks (tests/tag_captures.py)."""
    return tag_captures.start(prefix, topo, hosts, directory,
                              f"tcp and portrange {ports[0]}-{ports[1]}")


def _pinned(prefix: str) -> list[str]:
    root = paths.pin_dir(prefix)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _netns(prefix: str) -> list[str]:
    """This fabric's namespaces (other engineers' tests make and remove theirs meanwhile)."""
    return sorted(n for n in os.listdir("/run/netns") if n.startswith(prefix + "-"))


def _sendmsg_rings(prefix: str, hosts) -> dict[str, int]:
    from datapath.host_maps import HostMaps

    out = {}
    for h in hosts:
        with HostMaps(paths.pin_dir(prefix, h)) as maps:
            if (n := len(list(maps.sendmsg_rings.keys()))):
                out[h] = n
    return out


@pytest.mark.parametrize("scheme", ["talb", *(s for s in SCHEMES if s != "talb")])
def test_allreduce_every_message_tagged_at_the_senders_uplinks(fabric, tmp_path, scheme):
    """The all-reduce across leaves, captured outbound at every rank host's
    link and every leaf uplink. Under talb with the transparent tagger on the
    btl's ports: every data packet of the MPI connections carries the TaLB
    option; each tensor is of one connection, one length, one layer, has one
    LAST packet (a retransmission repeats it, never adds another) and
    crossed exactly one spine; every tag is this tagger's, for a write the
    kernel registered. Under the other schemes, untagged (--mpi-tag off): no
    packet carries the option. Results correct and nothing left behind
    either way (processes, namespaces, pinned objects, the tagger's rings)."""
    from workload.transparent_tag import TransparentTagger

    tagged = scheme == "talb"
    _scheme(fabric.prefix, scheme)
    ports = (mpi_job.DEFAULT_PORT_MIN, mpi_job.DEFAULT_PORT_MIN + mpi_job.DEFAULT_PORT_RANGE - 1)
    ip = {h.name: h.ip for h in fabric.topo.hosts}
    leaf_of = {h.name: fabric.topo.ports(h.name)[0].peer for h in fabric.topo.hosts}
    leaf_of_ip = {ip[h]: leaf_of[h] for h in ip}
    before = (_pinned(fabric.prefix), _netns(fabric.prefix), _no_job_dirs())
    started, counters = [], None
    spec = {"mode": "allreduce", "counts": CAPTURE_COUNTS, "iterations": 2, "warmup": 0}
    with (TransparentTagger(fabric.prefix, RANKS, ports=ports) if tagged else nullcontext()) as tag:
        caps = _btl_captures(fabric.prefix, fabric.topo, RANKS, tmp_path, ports)
        try:
            job = mpi_job.run_job(fabric.prefix, fabric.topo, RANKS, spec, timeout_s=120,
                                  on_start=started.append)
            time.sleep(0.3)          # the last ACKs and FINs reach the captures
        finally:
            for c in caps:
                c.stop()
        if tagged:
            counters, workers = tag.counters(), dict(tag.workers)
            # every socket the job had closed (TCP_CLOSE): the kernel dropped its ring
            deadline = time.monotonic() + 10
            while _sendmsg_rings(fabric.prefix, RANKS) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _sendmsg_rings(fabric.prefix, RANKS) == {}, counters
    assert job.output["correct"] is True and job.output["errors"] == []
    assert job.output["message_bytes"] == [4 * c for c in CAPTURE_COUNTS]
    # nothing left behind: processes, namespaces, pinned objects, job directories
    assert _leftovers(started[0].pid, fabric.prefix) == ([], {})
    assert (_pinned(fabric.prefix), _netns(fabric.prefix), _no_job_dirs()) == before

    for c in caps:
        assert c.exited_early is None, str(c)
    at_host = {h: tag_captures.data_packets(tmp_path / f"{h}-eth0.pcap") for h in RANKS}
    at_uplink = {c.netns.rsplit("-", 1)[1] + ":" + c.ifname: tag_captures.data_packets(c.pcap)
                 for c in caps if c.ifname != "eth0"}
    for h, pkts in at_host.items():
        assert pkts, f"{h} sent no MPI data"
        assert all(p[0] == ip[h] for p in pkts), h
    crossed = [p for pkts in at_uplink.values() for p in pkts]
    assert crossed, "no MPI data crossed the spines: the ranks are not across leaves"

    if not tagged:
        assert [p for p in crossed if p[5]] == [], scheme
        assert [p for pkts in at_host.values() for p in pkts if p[5]] == [], scheme
        return

    tag_captures.check_every_packet_tagged(at_host, at_uplink, ip, leaf_of_ip, workers, counters)
