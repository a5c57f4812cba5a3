"""Real MPI jobs (`talb run --client mpi`, `talb bench --clients mpi`)
without a fabric: the checks that refuse bad input before anything is
built, each naming the flag and the value; what a job is given (messages,
compute, mpirun's arguments, the rsh stand-in); the sweep's presets."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from common import paths
from conftest import skip_or_fail
from markdown_tables import verdict_cells
from netns_topology import load_topology
from talb.cli import main
from workload import mpi_job, mpi_run
from workload.experiment import RunConfig

TOPOLOGY = paths.REPO_ROOT / "topologies" / "talb.yaml"
BASE = ["run", "--client", "mpi", "--model", "alexnet", "--workers", "4", "--prefix", "t0mpicli"]


def _cli(args):
    return CliRunner().invoke(main, args)


def _cfg(**kw):
    return RunConfig(**{"model": "alexnet", "arch": "allreduce", "workers": 4, "client": "mpi",
                        "prefix": "t0mpicli", **kw})


@pytest.mark.parametrize("kw,flag,value", [
    (dict(workers=1), "--workers", "1"),
    (dict(mpi_tag="always"), "--mpi-tag", "always"),
    (dict(client="horovod"), "--client", "horovod"),
    (dict(fault="spine-down@1s"), "--fault", "spine-down@1s"),
    (dict(connections="pool:4"), "--connections", "pool:4"),
    (dict(servers=2), "--servers", "2"),
    (dict(model="lenet"), "--model", "lenet"),
    (dict(mpi_port_min=80), "--mpi-ports", "80"),
    (dict(mpi_port_range=2), "--mpi-ports", "2"),
])
def test_bad_mpi_configuration_is_refused_naming_the_flag(kw, flag, value):
    cfg = _cfg(**kw)
    with pytest.raises(ValueError) as exc:
        mpi_run.validate(cfg)
    assert flag in str(exc.value) and value in str(exc.value)


def test_rank_hosts_refuses_fewer_than_two_unknown_and_twice_named_hosts():
    topo = load_topology(TOPOLOGY)
    with pytest.raises(ValueError, match=r"--mpi-hosts: .*at least 2 hosts, got 'h0'"):
        mpi_job.rank_hosts("t0mpi", topo, ["h0"])
    with pytest.raises(ValueError, match=r"--mpi-hosts: no host h9 in the fabric .*got 'h0,h9'"):
        mpi_job.rank_hosts("t0mpi", topo, ["h0", "h9"])
    with pytest.raises(ValueError, match=r"--mpi-hosts: one rank per host, h3 named twice"):
        mpi_job.rank_hosts("t0mpi", topo, ["h3", "h0", "h3"])
    hosts = mpi_job.rank_hosts("t0mpi", topo, ["h0", "h3"])
    assert [(h.name, h.netns) for h in hosts] == [("h0", "t0mpi-h0"), ("h3", "t0mpi-h3")]
    assert hosts[0].ip != hosts[1].ip


def test_unknown_host_in_the_placement_is_refused_before_building():
    r = _cli(BASE + ["--placement", "h0+h9+h1+h2", "--topology", str(TOPOLOGY)])
    assert r.exit_code == 1, r.output
    assert "--placement" in r.output and "h9" in r.output
    assert not paths.state_dir("t0mpicli").exists()


def test_missing_mpirun_says_make_testbed_installs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))          # a PATH without Open MPI
    with pytest.raises(mpi_job.MpiError) as exc:
        mpi_job.check_tools()
    assert "mpirun not found" in str(exc.value) and "make testbed" in str(exc.value)
    with pytest.raises(mpi_job.MpiError, match="make testbed"):
        mpi_job.check_tools(mpirun=str(tmp_path / "mpirun"))


def test_missing_mpi4py_says_make_testbed_installs_it(tmp_path):
    if not shutil.which("mpirun"):
        skip_or_fail("Open MPI not installed (make testbed installs it)")
    with pytest.raises(mpi_job.MpiError, match="cannot import mpi4py.*make testbed"):
        mpi_job.check_tools(python="/bin/false")


@pytest.mark.parametrize("args,flag,value", [
    (["--mpi-ports", "7600"], "--mpi-ports", "7600"),
    (["--mpi-ports", "9000-8000"], "--mpi-ports", "9000-8000"),
    (["--mpi-ports", "80-90"], "--mpi-ports", "80-90"),
    (["--mpi-tag", "maybe"], "--mpi-tag", "maybe"),
    (["--client", "horovod"], "--client", "horovod"),
    (["--workers", "1"], "--workers", "1"),
])
def test_cli_names_the_bad_flag_and_value(args, flag, value):
    r = _cli(BASE + args)
    assert r.exit_code != 0
    assert flag in r.output and value in r.output, r.output


def test_mpi_options_need_client_mpi():
    r = _cli(["run", "--model", "alexnet", "--arch", "ps", "--workers", "2", "--mpi-tag", "on",
              "--prefix", "t0mpicli"])
    assert r.exit_code == 1 and "--mpi-tag: an option of --client mpi" in r.output, r.output
    r = _cli(["run", "--model", "none", "--client", "mpi", "--load", "0.3", "--prefix", "t0mpicli"])
    assert r.exit_code == 1 and "--client: --model none" in r.output, r.output


def test_client_mpi_needs_workers_not_arch():
    r = _cli(["run", "--client", "mpi", "--model", "alexnet", "--prefix", "t0mpicli"])
    assert r.exit_code != 0 and "--workers" in r.output, r.output


def test_help_explains_the_mpi_options():
    r = _cli(["run", "--help"])
    assert r.exit_code == 0
    for opt in ("--client", "--mpi-tag", "--mpi-ports", "--mpi-priority", "Open MPI"):
        assert opt in r.output


def test_tagging_auto_follows_the_scheme():
    assert mpi_run.tagging_decision("auto", {"talb"}) == (True, "--mpi-tag auto: scheme talb")
    assert mpi_run.tagging_decision("auto", {"ecmp"}) == \
        (False, "--mpi-tag auto: scheme ecmp, not talb")
    assert not mpi_run.tagging_decision("auto", {"talb", "ecmp"})[0]
    assert mpi_run.tagging_decision("on", {"ecmp"}) == (True, "--mpi-tag on")
    assert mpi_run.tagging_decision("off", {"talb"}) == (False, "--mpi-tag off")


def test_job_spec_sends_every_tensor_in_backward_order_with_its_layer_compute():
    from workload.models import get_profile
    from workload.scaling import scaling_for

    profile = get_profile("alexnet")
    scaling = scaling_for(10e9, 100e6, mode="bytes")
    spec = mpi_run.job_spec(_cfg(iterations=4, warmup=1), profile, scaling)
    tensors = profile.backward_order()
    assert spec["counts"] == [max(1, scaling.tensor_bytes(t.nbytes) // 4) for t in tensors]
    assert spec["iterations"] == 4 and spec["warmup"] == 1
    # each layer's backward compute once, before its first tensor in backward order
    firsts = [i for i, t in enumerate(tensors) if t.layer not in {u.layer for u in tensors[:i]}]
    assert [i for i, c in enumerate(spec["compute_s"]) if c > 0] == firsts
    assert sum(spec["compute_s"]) == pytest.approx(
        sum(scaling.compute_s(layer.bwd_s) for layer in profile.layers))
    assert spec["fwd_s"] == pytest.approx(scaling.compute_s(sum(x.fwd_s for x in profile.layers)))


def test_mpirun_argv_pins_the_btl_ports_and_the_transport(tmp_path):
    hosts = mpi_job.rank_hosts("t0mpi", load_topology(TOPOLOGY), ["h0", "h3", "h1"])
    argv = mpi_job.mpirun_argv("/usr/bin/mpirun", hosts, tmp_path / "agent", (7600, 7663),
                               ["/usr/bin/python3", "rank.py"])
    mca = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "--mca"}
    assert mca["btl_tcp_port_min_v4"] == "7600" and mca["btl_tcp_port_range_v4"] == "64"
    assert mca["btl"] == "tcp,self" and mca["pml"] == "ob1"
    assert mca["btl_tcp_if_include"] == mca["oob_tcp_if_include"] == "eth0"
    assert mca["plm_rsh_agent"] == str(tmp_path / "agent")
    assert "--allow-run-as-root" in argv and argv[argv.index("-np") + 1] == "3"
    assert argv[argv.index("--host") + 1] == ",".join(f"{h.ip}:1" for h in hosts)
    assert argv[-2:] == ["/usr/bin/python3", "rank.py"]


def test_rsh_agent_runs_the_command_in_the_hosts_namespace(tmp_path):
    hosts = mpi_job.rank_hosts("t0mpi", load_topology(TOPOLOGY), ["h0", "h3"])
    script = tmp_path / "agent"
    script.write_text(mpi_job.rsh_agent_script(hosts))
    script.chmod(0o755)
    bad = subprocess.run([str(script), "10.9.9.9", "true"], capture_output=True, text=True)
    assert bad.returncode == 255 and "unknown host 10.9.9.9" in bad.stderr
    assert f"{hosts[1].ip}|h3) ns=t0mpi-h3" in script.read_text()


def test_rank_program_imports_nothing_of_ours():
    """The ranks run under /usr/bin/python3 without the venv: stdlib and mpi4py only."""
    import ast

    tree = ast.parse(mpi_job.RANK_PROGRAM.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= {"__future__", "json", "sys", "time", "array", "mpi4py"}


# --- sweeps ---------------------------------------------------------------------------------
def test_mpi_presets_compare_the_schemes_on_an_mpi_job():
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.plan import ALL_SCHEMES

    quick = build_plan("mpi-quick")
    assert len(quick.runs) == 4 and {r.client for r in quick.runs} == {"mpi"}
    assert {r.scheme for r in quick.runs} == {"ecmp", "talb"}
    assert {r.arch for r in quick.runs} == {"allreduce"} and {r.load for r in quick.runs} == {0.3}
    assert all("client=mpi" in r.label() for r in quick.runs)
    full = build_plan("mpi")
    assert {r.scheme for r in full.runs} == set(ALL_SCHEMES)
    assert full.seed_rule.metric == "iteration_time_s"
    assert full.figure == "mpi"


def test_clients_axis_and_its_errors():
    from experiments.sweep.kinds import build_plan
    from experiments.sweep.plan import PlanError

    plan = build_plan("quick-ci", clients=["talb", "mpi"],
                      fixed_seeds=True)
    assert {r.client for r in plan.runs} == {"talb", "mpi"}
    with pytest.raises(PlanError, match="--clients: one of talb, mpi, torch, got 'horovod'"):
        build_plan("quick-ci", clients=["horovod"])
    with pytest.raises(PlanError, match="--connections: Open MPI"):
        build_plan("quick-ci", clients=["mpi"],
                   connections=["pool:8"])


def test_a_talb_run_keeps_its_key():
    """The client field is left out of a talb run's key: every sweep's results stay found."""
    from experiments.sweep.kinds import build_plan

    spec = build_plan("quick-ci").runs[0]
    assert "client" not in spec.params()
    assert "client" in dataclasses.replace(spec, client="mpi").params()
    assert dataclasses.replace(spec, client="mpi").key() != spec.key()


def _fake_mpi_results(spec) -> dict:
    """What workload/mpi_run.py writes, as much as a sweep's report reads:
    TaLB's iterations 10% shorter than ECMP's, with a little noise per seed."""
    t = (1.0 if spec.scheme == "ecmp" else 0.9) * (1 + 0.01 * spec.seed)
    return {"format": "talb-run/1", "client": "mpi", "config": {"workers": spec.workers},
            "fabric": {"queueing": {"mode": "bands"}, "rto_min_ms": None,
                       "host_link_bps": {"h0": 100e6}},
            "model": {"batch_size": 128, "layer_fwd_s": [0.01], "layer_bwd_s": [0.02]},
            "placement": {"workers": ["h0", "h3", "h1", "h4"], "servers": [], "spec": "spread"},
            "load": {"offered": spec.load, "senders_rule": "workers"},
            "scaling": {"time_scale": 1.0},
            "summary": {"speed": {"iteration_time_s": t, "samples_per_s": 512 / t},
                        "cpu_guard": {"flagged": False, "reason": "ok", "cpu_busy_mean": 0.5},
                        "tcp": {"per_host": {}}},
            "flags": {"cpu_bound": False},
            "headline": {"scheme": spec.scheme, "client": "mpi", "iteration_time_s": t,
                         "samples_per_s": 512 / t, "mpi_comm_s": t / 2, "mpi_correct": True,
                         "mpi_tagged": False, "cpu_bound": False},
            "tensors": []}


def test_an_mpi_sweep_pairs_the_schemes_on_the_iteration_time(tmp_path):
    import csv

    from experiments.sweep.kinds import build_plan, finish
    from experiments.sweep.runner import run_plan

    plan = build_plan("mpi-quick")
    run_plan(plan, tmp_path, run_fn=lambda s, q: q.write_text(json.dumps(_fake_mpi_results(s))),
             progress=False)
    finish(plan, tmp_path)
    rows = list(csv.DictReader(open(tmp_path / "runs.csv")))
    assert {r["client"] for r in rows} == {"mpi"} and all(r["status"] == "ok" for r in rows)
    assert {r["mpi_correct"] for r in rows} == {"True"}
    paired = [r for r in csv.DictReader(open(tmp_path / "paired.csv"))
              if r["metric"] == "iteration_time_s"]
    assert len(paired) == 1 and {paired[0]["a"], paired[0]["b"]} == {"ecmp", "talb"}
    assert paired[0]["n"] == "2"
    md = (tmp_path / "summary.md").read_text()
    assert "iteration" in md
    # the table of TaLB against each scheme has one cell per FCT outcome too, but an
    # MPI job measures only its speed: one test, and the summary counts that one
    assert verdict_cells(md) == 1
    assert "(with 1 test, about 0 better/worse verdicts" in md


def test_the_talb_engine_hands_mpi_runs_to_their_own():
    from workload import experiment

    with pytest.raises(ValueError, match="--client: talb here .*workload.mpi_run.run, got 'mpi'"):
        experiment.run(_cfg())


def test_ps_pattern_checks():
    with pytest.raises(ValueError, match="--mpi-pattern: one of allreduce, ps, got 'ring'"):
        mpi_run.validate(_cfg(mpi_pattern="ring"))
    cfg = _cfg(mpi_pattern="ps", workers=1)      # one worker and the server: 2 ranks
    mpi_run.validate(cfg)
    assert cfg.arch == "ps"
    r = _cli(BASE + ["--mpi-pattern", "ps", "--servers", "2"])
    assert r.exit_code == 1 and "--servers: the MPI parameter server is one rank" in r.output


def test_bench_help_and_dry_run_show_the_mpi_sweep():
    assert "--clients" in _cli(["bench", "--help"]).output
    r = _cli(["bench", "--preset", "mpi-quick", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "client=mpi" in r.output and "4 runs" in r.output
