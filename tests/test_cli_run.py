"""`talb run` refuses bad input before anything is built, naming the flag
and the value (no fabric needed: validation comes first)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from common import paths
from talb.cli import main

BASE = ["run", "--model", "alexnet", "--arch", "ps", "--workers", "2", "--prefix", "t0clirun"]


def _run(args):
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("args,flag,value", [
    (["--model", "lenet"], "--model", "lenet"),
    (["--arch", "mesh"], "--arch", "mesh"),
    (["--scheme", "fastest"], "--scheme", "fastest"),
    (["--load", "1.5"], "--load", "1.5"),
    (["--target-link-rate", "fast"], "--target-link-rate", "fast"),
    (["--partition-size", "huge"], "--partition-size", "huge"),
    (["--gpu", "Z80"], "--gpu", "Z80"),
    (["--warmup", "9", "--iterations", "3"], "--warmup", "9"),
    (["--background-cdf", "video"], "--background-cdf", "video"),
    (["--background-size-scale", "2"], "--background-size-scale", "2"),
    (["--scaling", "packets"], "--scaling", "packets"),
    (["--scheduler", "pfabric"], "--scheduler", "pfabric"),
    (["--fusion", "constant:1mb"], "--fusion", "constant:1mb"),       # a PS run: no fusion
    (["--fusion", "sometimes"], "--fusion", "sometimes"),
    (["--comm", "mesh"], "--comm", "mesh"),
])
def test_bad_flag_is_named_with_its_value(args, flag, value):
    r = _run(BASE + args)
    assert r.exit_code != 0
    assert flag in r.output and value in r.output, r.output


def test_allreduce_needs_two_workers():
    r = _run(["run", "--model", "alexnet", "--arch", "allreduce", "--workers", "1",
              "--prefix", "t0clirun"])
    assert r.exit_code == 1
    assert "--workers: ring all-reduce needs at least 2 workers, got 1" in r.output


def test_servers_only_with_ps():
    r = _run(["run", "--model", "alexnet", "--arch", "allreduce", "--workers", "2",
              "--servers", "3", "--prefix", "t0clirun"])
    assert r.exit_code == 1 and "--servers: parameter servers exist with --arch ps only, got 3" in r.output


def test_too_many_nodes_for_the_topology_refused_before_building(tmp_path):
    r = _run(["run", "--model", "alexnet", "--arch", "ps", "--workers", "6", "--servers", "2",
              "--topology", str(paths.REPO_ROOT / "topologies" / "talb.yaml"), "--prefix", "t0clirun"])
    assert r.exit_code == 1, r.output
    assert "8 nodes need 8 hosts, the fabric has 6" in r.output
    assert not (paths.state_dir("t0clirun")).exists()


def test_help_lists_the_options():
    r = _run(["run", "--help"])
    assert r.exit_code == 0
    for flag in ("--scheme", "--model", "--arch", "--workers", "--servers", "--load", "--seed",
                 "--iterations", "--topology", "--out"):
        assert flag in r.output


# --- --model none (background flows only, workload/background_only.py) ----------------------
NONE = ["run", "--model", "none", "--prefix", "t0clirun"]


@pytest.mark.parametrize("args,flag,value", [
    (["--load", "0.5", "--arch", "ps"], "--arch", "'ps'"),
    (["--load", "0.5", "--workers", "4"], "--workers", "4"),
    (["--load", "0.5", "--servers", "2"], "--servers", "2"),
    (["--load", "0.5", "--iterations", "3"], "--iterations", "3"),
    (["--load", "0.5", "--warmup", "0"], "--warmup", "0"),
    (["--load", "0.5", "--target-link-rate", "25gbit"], "--target-link-rate", "'25gbit'"),
    (["--load", "0.5", "--scaling", "fit"], "--scaling", "'fit'"),
    (["--load", "0.5", "--partition-size", "2mb"], "--partition-size", "'2mb'"),
    (["--load", "0.5", "--gpu", "A100"], "--gpu", "'A100'"),
    (["--load", "0.5", "--fault", "uplink-down@1s"], "--fault", "'uplink-down@1s'"),
    (["--load", "0.5", "--timeout", "60"], "--timeout", "60"),
])
def test_model_none_refuses_training_options(args, flag, value):
    r = _run(NONE + args)
    assert r.exit_code == 1, r.output
    assert f"{flag}: --model none runs background flows only, no training; drop {flag}, got {value}" \
        in r.output, r.output
    assert not paths.state_dir("t0clirun").exists()


@pytest.mark.parametrize("args,flag,value", [
    ([], "--load", "0.0"),                                   # no load: nothing to measure
    (["--load", "0"], "--load", "0.0"),
    (["--load", "0.5", "--scheme", "fastest"], "--scheme", "fastest"),
    (["--load", "0.5", "--background-duration", "0"], "--background-duration", "0"),
    (["--load", "0.5", "--background-size-scale", "1.5"], "--background-size-scale", "1.5"),
    (["--load", "0.5", "--background-cdf", "video"], "--background-cdf", "video"),
    (["--load", "0.5", "--queueing", "fifo"], "--queueing", "'fifo'"),
])
def test_model_none_bad_values_named(args, flag, value):
    r = _run(NONE + args)
    assert r.exit_code != 0
    assert flag in r.output and value in r.output, r.output
    assert not paths.state_dir("t0clirun").exists()


def test_model_none_needs_no_arch_but_training_does():
    r = _run(["run", "--model", "alexnet", "--workers", "2", "--prefix", "t0clirun"])
    assert r.exit_code == 2 and "Missing option '--arch'" in r.output, r.output
    r = _run(["run", "--model", "alexnet", "--arch", "ps", "--prefix", "t0clirun"])
    assert r.exit_code == 2 and "Missing option '--workers'" in r.output, r.output


def test_help_explains_model_none():
    r = _run(["run", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for words in ("'none': no training, background flows only", "--model none",
                  "normalised to the ideal", "500 short flows"):
        assert words in text, words


def test_run_api_dispatches_model_none_before_anything():
    from workload.experiment import RunConfig, run

    with pytest.raises(ValueError, match="--load: --model none"):
        run(RunConfig(model="none", arch="none", workers=0, load=0.0, prefix="t0clirun"))


def test_comm_only_for_a_parameter_server():
    r = _run(["run", "--model", "vgg19", "--arch", "allreduce", "--workers", "2",
              "--comm", "hybrid", "--prefix", "t0clirun"])
    assert r.exit_code == 1
    assert "--comm: sufficient factor broadcasting replaces a parameter server's layers " \
           "(--arch ps), got 'hybrid'" in r.output


def test_scheduler_of_our_nodes_only():
    """A real MPI or DDP job sends as its library does: --scheduler is refused there."""
    r = _run(["run", "--model", "alexnet", "--client", "mpi", "--workers", "2",
              "--scheduler", "usbyte", "--prefix", "t0clirun"])
    assert r.exit_code == 1
    assert "--scheduler: our own nodes' option (--client talb)" in r.output and "usbyte" in r.output


def test_help_explains_the_schedulers():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "talb.cli", "run", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for word in ("--scheduler", "usbyte", "wfbp", "fifo", "US-Byte"):
        assert word in out
