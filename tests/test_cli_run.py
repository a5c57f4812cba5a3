"""`talb run` refuses bad input before anything is built, naming the flag
and the value (no fabric needed: validation comes first)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from talb import paths
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
