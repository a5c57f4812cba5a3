"""The regime's parts that need no fabric (issue 36; docs/experiments.md
"Regime"): buffers and K on the run's time scale (netns_topology/buffers.py),
the congestion-control check (datapath/tcp_cc.py), the regime as a sweep
axis and the presets that use it (experiments/sweep/plan.py), each CLI the
way a user runs it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from netns_topology import buffers
from netns_topology.params import Queue

REPO = Path(__file__).resolve().parent.parent
FIG10 = Queue(limit=40_000, burst=15_000, cburst=15_000, bands=(1, 4, 2, 1))
MTU = 1600
FRAME = MTU + 14
TS = 115.8                       # fig10's time scale (the issue's figure)


def test_the_papers_buffer_on_fig10s_time_scale():
    """512 KB at 100 Gbit/s drains in 41.9 us; x 115.8 at 25 Mbit/s: 15.2 KB."""
    b = buffers.port_buffer(FIG10, "bands", "scaled", 25_000_000, MTU, TS)
    assert b.scaled_port == int(512 * 1024 * 8 / 100e9 * TS * 25e6 / 8) == 15_178
    assert b.bands == 4 and b.per_band == 4 * FRAME          # 3.8 KB a band: floored
    assert b.total == 4 * 4 * FRAME
    host = buffers.port_buffer(FIG10, "bands", "scaled", 50_000_000, MTU, TS)
    assert host.per_band == 30_356 // 4 > 4 * FRAME          # over the floor: as scaled


def test_a_fifo_port_holds_what_its_bands_would():
    for buf in ("deep", "scaled"):
        bands = buffers.port_buffer(FIG10, "bands", buf, 25_000_000, MTU, TS)
        fifo = buffers.port_buffer(FIG10, "fifo", buf, 25_000_000, MTU, TS)
        assert fifo.bands == 1 and fifo.per_band == bands.total == fifo.total
    deep = buffers.port_buffer(FIG10, "bands", "deep", 25_000_000, MTU, TS)
    assert (deep.per_band, deep.total) == (40_000, 160_000)   # the topology's, untouched


def test_k_is_dctcps_threshold_time_scaled_with_a_two_frame_floor():
    slow = buffers.port_buffer(FIG10, "bands", "scaled", 25_000_000, MTU, TS)
    assert slow.scaled_k == int(8 * 2e-6 / 7 * TS * 25e6 / 8) == 827
    assert slow.k == 2 * FRAME
    fast = buffers.port_buffer(FIG10, "bands", "scaled", 1_000_000_000, MTU, TS)
    assert fast.k == fast.scaled_k > 2 * FRAME                  # over the floor: as derived
    assert buffers.port_buffer(FIG10, "bands", "deep", 25_000_000, MTU, None).k == 2 * FRAME


def test_installed_queue_keeps_weights_and_rates():
    b = buffers.port_buffer(FIG10, "bands", "scaled", 25_000_000, MTU, TS)
    q = buffers.queue_with(FIG10, "bands", b)
    assert (q.limit, q.bands, q.burst, q.cburst) == (b.per_band, FIG10.bands, 15_000, 15_000)
    f = buffers.queue_with(FIG10, "fifo", buffers.port_buffer(FIG10, "fifo", "scaled",
                                                              25_000_000, MTU, TS))
    assert f.bands == (1,) and f.limit == b.total


@pytest.mark.parametrize("kw, match", [
    (dict(buffer="shallow"), "--buffer: one of deep, scaled, got 'shallow'"),
    (dict(buffer="scaled", time_scale=None), "--buffer scaled: needs the run's time scale"),
    (dict(buffer="scaled", time_scale=-1.0), "time_scale: a positive number"),
])
def test_bad_buffer_settings_are_refused_by_name(kw, match):
    args = dict(queue=FIG10, queueing="bands", buffer="scaled", port_bps=25_000_000,
                switch_mtu=MTU, time_scale=TS) | kw
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        buffers.port_buffer(**args)


def test_tcp_cc_check_names_the_option_and_what_the_kernel_offers():
    from datapath import tcp_cc

    assert tcp_cc.check("cubic") == "cubic"
    assert tcp_cc.kernel_name("dctcp-bpf") == "dctcp_bpf" and tcp_cc.kernel_name("cubic") == "cubic"
    with pytest.raises(tcp_cc.TcpCcError, match=r"--tcp-cc: 'nosuchcc' is not available in this "
                                                r"kernel \(available: .*cubic"):
        tcp_cc.check("nosuchcc")
    with pytest.raises(tcp_cc.TcpCcError, match="a congestion control's name"):
        tcp_cc.check("cubic; reboot")
    if "dctcp" not in tcp_cc.available():
        with pytest.raises(tcp_cc.TcpCcError, match="no tcp_dctcp; --tcp-cc dctcp-bpf"):
            tcp_cc.check("dctcp")


def test_dctcp_bpf_source_is_ours_and_packaged():
    src = (REPO / "bpf" / "cc" / "dctcp_bpf.c").read_text()
    assert 'SEC(".struct_ops")' in src and '.name           = "dctcp_bpf"' in src
    assert "TCP_CONG_NEEDS_ECN" in src


# --- the sweep axis and the presets -------------------------------------------------------
def _plan(preset, **kw):
    from experiments.sweep.kinds import build_plan

    return build_plan(preset, **kw)


def test_regime_presets_interleave_three_regimes_over_ten_seeds():
    for name, loads, arms in (("fig10-factorial-regime", [0.2, 0.4], 8),
                              ("fig10-paper-regime", [0.1, 0.2, 0.3, 0.4], 4)):
        plan = _plan(name)
        assert plan.counts("regime") == {None: 160, "scaled": 160, "scaled-ecn": 160}
        assert len(plan.runs) == 3 * arms * len(loads) * 10
        assert {r.seed for r in plan.runs} == set(range(1, 11)) and plan.seed_rule is None
        # every (seed, load) runs its regimes and arms back to back
        first = plan.runs[:3 * arms]
        assert {(r.seed, r.load) for r in first} == {(1, loads[0])}
        assert [r.regime for r in first[::arms]] == [None, "scaled", "scaled-ecn"]
        text = " ".join(plan.changes)
        assert "K" in text and "floor of 4 full frames" in text
        assert "dctcp-bpf" in " ".join(plan.keeps)


def test_the_deep_regime_is_the_committed_runs_identity():
    """A deep run of the regime preset has the key of the same run of
    fig10-factorial (regime None is left out of the key), and the old
    presets' plans are as they were."""
    old = {r.key() for r in _plan("fig10-factorial", fixed_seeds=True).runs}
    deep = {r.key() for r in _plan("fig10-factorial-regime").runs if r.regime is None}
    assert old and old <= deep
    assert all("regime" not in r.params() for r in _plan("fig10-paper", fixed_seeds=True).runs)


def test_regime_axis_refuses_unknown_and_mpi():
    from experiments.sweep.plan import PlanError

    with pytest.raises(PlanError, match="--regime: one of deep, scaled, deep-ecn, scaled-ecn"):
        _plan("quick", regimes=["shallow"])
    with pytest.raises(PlanError, match="--regime: training runs with our own nodes only"):
        _plan("quick", regimes=["scaled"], clients=["mpi"])
    with pytest.raises(PlanError, match="--regime: lb-classic-quick runs no training"):
        _plan("lb-classic-quick", regimes=["scaled"])


def _talb(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "talb"), *args],
                          capture_output=True, text=True, timeout=120)


def test_bench_dry_run_of_a_regime_preset_as_a_user_runs_it():
    r = _talb("bench", "--preset", "fig10-factorial-regime", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "480 runs" in r.stdout and "regime {None: 160, 'scaled': 160, 'scaled-ecn': 160}" \
        in r.stdout
    assert "regime=scaled-ecn" in r.stdout


def test_run_options_refused_with_the_field_named():
    r = _talb("run", "--model", "threelayer", "--arch", "ps", "--workers", "2",
              "--buffer", "shallow")
    assert r.returncode != 0 and "--buffer" in r.stderr and "'shallow'" in r.stderr
    r = _talb("run", "--model", "none", "--ecn", "on")
    assert r.returncode != 0 and "--ecn" in r.stderr + r.stdout
