"""Background load: the flow-size CDFs, Poisson arrivals at the stated load,
and flows over real TCP between host namespaces with every FCT recorded
and nothing left running (docs/workload.md, "Background load")."""
from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import time

import pytest

from workload.background import (CDF_DIR, DOCUMENTED_MEAN_BYTES, BackgroundLoad, BgHost,
                                 FlowSizeCDF, arrival_rate, fabric_hosts, plan_flows,
                                 uplink_capacity_bps)

HOSTS = [BgHost(f"h{i}", f"ns-h{i}", f"198.18.{i // 3}.{i % 3 + 1}", f"leaf{i // 3}")
         for i in range(6)]


@pytest.mark.parametrize("name", sorted(DOCUMENTED_MEAN_BYTES))
def test_sampler_mean_within_5_percent_of_the_documented_mean(name):
    cdf = FlowSizeCDF.named(name)
    rng = random.Random(20240601)
    n = 400_000     # data mining's 2% tail up to 1 GB: relative std of the mean ~1.1% at this n
    sampled = statistics.fmean(cdf.sample(rng) for _ in range(n))
    documented = DOCUMENTED_MEAN_BYTES[name]
    assert sampled == pytest.approx(documented, rel=0.05)
    assert cdf.mean() == pytest.approx(documented, rel=0.05)


def test_sampler_follows_the_cdf_points():
    cdf = FlowSizeCDF.named("websearch")
    rng = random.Random(7)
    xs = [cdf.sample(rng) for _ in range(100_000)]
    for size, frac in cdf.points[1:-1]:
        below = sum(1 for x in xs if x <= size) / len(xs)
        assert below == pytest.approx(frac, abs=0.01), size
    assert max(xs) <= cdf.points[-1][0]


def test_shipped_cdfs_are_the_documented_distributions():
    """workload/cdfs/ holds exactly the files its README lists, each a
    well-formed CDF (sizes rising, fractions from 0 to 1) whose exact mean
    is the one the README states: an edited or truncated file fails here."""
    readme = (CDF_DIR / "README.md").read_text()
    rows = re.findall(r"^\| (\w+_cdf\.txt) \|.*\| ([\d,]+) \(~[\d.]+ MB\) \|$", readme, re.M)
    shipped = sorted(f.name for f in CDF_DIR.glob("*.txt"))
    assert shipped == ["datamining_cdf.txt", "websearch_cdf.txt"], shipped
    assert sorted(name for name, _ in rows) == shipped, rows
    for name, mean in rows:
        cdf = FlowSizeCDF.named(name.removesuffix("_cdf.txt"))
        sizes, fracs = zip(*cdf.points)
        assert list(sizes) == sorted(set(sizes)), name
        assert list(fracs) == sorted(fracs) and fracs[0] >= 0 and fracs[-1] == 1, name
        assert cdf.mean() == pytest.approx(int(mean.replace(",", "")), abs=1), name


def test_capped_and_scaled_distributions():
    cdf = FlowSizeCDF.named("datamining")
    capped = cdf.capped(1_000_000)
    rng = random.Random(3)
    xs = [capped.sample(rng) for _ in range(100_000)]
    assert max(xs) == 1_000_000
    assert statistics.fmean(xs) == pytest.approx(capped.mean(), rel=0.03)
    assert capped.mean() < cdf.mean()
    assert cdf.scaled(0.01).mean() == pytest.approx(cdf.mean() * 0.01)


def test_poisson_arrivals_offer_the_stated_load():
    cdf = FlowSizeCDF.named("websearch")
    load, capacity, duration = 0.6, 400e6, 2_000.0
    flows = plan_flows(HOSTS, load=load, capacity_bps=capacity, cdf=cdf, duration_s=duration, seed=5)
    rate = arrival_rate(load, capacity, cdf)
    expected = rate * duration
    assert abs(len(flows) - expected) < 4 * expected ** 0.5          # Poisson count
    offered_bps = 8 * sum(f.size_bytes for f in flows) / duration
    assert offered_bps == pytest.approx(load * capacity, rel=0.05)
    gaps = [b.start_s - a.start_s for a, b in zip(flows, flows[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.05)
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.05)  # exponential
    by = {h.name: h for h in HOSTS}
    assert all(by[f.src].leaf != by[f.dst].leaf for f in flows)
    per_sender = {h.name: sum(1 for f in flows if f.src == h.name) for h in HOSTS}
    assert min(per_sender.values()) > 0.8 * len(flows) / len(HOSTS)
    # the same seed plans the same flows
    assert flows == plan_flows(HOSTS, load=load, capacity_bps=capacity, cdf=cdf,
                               duration_s=duration, seed=5)


def test_bad_input_names_the_field():
    cdf = FlowSizeCDF.named("websearch")
    with pytest.raises(ValueError, match="load"):
        plan_flows(HOSTS, load=1.5, capacity_bps=1e8, cdf=cdf, duration_s=1, seed=1)
    with pytest.raises(ValueError, match="cdf: unknown flow-size CDF 'hadoop'"):
        FlowSizeCDF.named("hadoop")
    with pytest.raises(ValueError, match="senders"):
        plan_flows(HOSTS[:3], load=0.5, capacity_bps=1e8, cdf=cdf, duration_s=1, seed=1)
    with pytest.raises(ValueError, match="senders"):
        plan_flows(HOSTS, load=0.5, capacity_bps=1e8, cdf=cdf, duration_s=1, seed=1, senders=["h9"])
    with pytest.raises(ValueError, match="points"):
        FlowSizeCDF([(10, 0.5), (5, 1.0)])


# --- live: a small fabric ------------------------------------------------------------------
@pytest.fixture(scope="module")
def fabric(request, bcc):
    from common import paths
    from helpers import up_fabric

    prefix, topo = up_fabric(request, paths.REPO_ROOT / "topologies" / "leafspine.yaml")
    return topo, prefix


def _pids_in(netns: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _assert_nothing_left(bg: BackgroundLoad, hosts) -> None:
    pids = [p.pid for p in [*bg._sources.values(), *bg._sinks.values()]]
    assert pids, "the run started no process"
    assert bg.running() == []
    assert not [p for p in pids if _alive(p)]
    left = {h.name: _pids_in(h.netns) for h in hosts}
    assert not any(left.values()), f"processes left in host namespaces: {left}"


@pytest.mark.live
def test_live_background_run_delivers_every_flow(fabric):
    topo, prefix = fabric
    hosts = fabric_hosts(topo, prefix)
    capacity = uplink_capacity_bps(topo)
    assert capacity == 4 * 100e6          # 2 leaves x 2 spines at 100 Mbit/s
    bg = BackgroundLoad(hosts, load=0.2, capacity_bps=capacity, seed=11, duration_s=1.5,
                        max_flow_bytes=2_000_000, drain_s=60)
    assert len(bg.plan) >= 4, "the seed planned too few flows to check anything"
    with bg:
        pass
    result = bg.result
    assert [f.flow_id for f in result.flows] == [f.flow_id for f in bg.plan]
    bad = [(f.flow_id, f.status, f.error) for f in result.flows if f.status != "done"]
    assert not bad, bad
    burst = max(topo.queue.burst, topo.queue.cburst)
    big = [f for f in result.flows if f.size_bytes > 20 * burst]
    assert big, "no flow large enough to check the rate bound"
    for f in result.flows:
        assert f.received_bytes == f.size_bytes
        # no flow beats its 100 Mbit/s host link, but for what the HTB bursts
        # of the 4 egresses on its path let through at once
        assert f.fct_s >= 8 * (f.size_bytes - 4 * burst) / 100e6, (f.flow_id, f.size_bytes, f.fct_s)
        assert f.start_ns >= f.planned_start_ns
        assert f.start_ns - f.planned_start_ns < 0.5e9, "source started a flow late"
    s = result.summary()
    assert s["done"] == len(bg.plan) and s["all_fct_mean_s"] > 0
    assert result.params["planned_flows"] == len(bg.plan)
    assert result.params["problems"] == []
    _assert_nothing_left(bg, hosts)
    assert not bg.workdir.exists()


@pytest.mark.live
def test_live_stop_mid_flow_reports_censored_and_ends_everything(fabric):
    topo, prefix = fabric
    hosts = fabric_hosts(topo, prefix)
    big = FlowSizeCDF([(20e6, 0.0), (20e6, 1.0)], "20MB")    # 1.6 s each at 100 Mbit/s
    bg = BackgroundLoad(hosts, load=1.0, capacity_bps=uplink_capacity_bps(topo), seed=2,
                        duration_s=2.0, cdf=big, senders=["h0"], start_delay_s=0.2)
    assert bg.plan, "the seed planned no flow"
    bg.start()
    try:   # until the first flow is half-way
        time.sleep(max(0.0, (bg.t0_ns - time.monotonic_ns()) / 1e9 + bg.plan[0].start_s + 0.8))
    finally:
        result = bg.stop(drain_s=0)
        bg.close()
    first = result.flows[0]
    assert first.status == "censored" and first.fct_s is None and first.end_ns is None
    assert all(f.status in ("censored", "not_started") for f in result.flows)
    assert result.summary()["done"] == 0 and "all_fct_mean_s" not in result.summary()
    _assert_nothing_left(bg, hosts)


@pytest.mark.live
def test_live_refused_flow_is_failed_with_its_error(fabric):
    """A flow whose destination has no sink (its address swapped for a host
    on the same leaf that runs none) is reported failed, never done."""
    import dataclasses

    topo, prefix = fabric
    hosts = fabric_hosts(topo, prefix)
    by = {h.name: h for h in hosts}
    bg = BackgroundLoad(hosts, load=0.2, capacity_bps=uplink_capacity_bps(topo), seed=11,
                        duration_s=0.5, senders=["h0"], max_flow_bytes=100_000, drain_s=20)
    assert bg.plan, "the seed planned no flow"
    first = bg.plan[0]
    other = next(h for h in hosts if h.leaf == by[first.dst].leaf and h.name != first.dst)
    bg.plan = [dataclasses.replace(first, dst=first.dst, dst_ip=other.ip)]   # sink runs on first.dst only
    with bg:
        pass
    (rec,) = bg.result.flows
    assert rec.status == "failed" and rec.fct_s is None
    assert "refused" in rec.error.lower(), rec.error
    _assert_nothing_left(bg, hosts)
