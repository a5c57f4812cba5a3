"""A real Prometheus server scrapes the agent on a live fabric with traffic,
and its query API returns every series the agent promises, with sane values.

Debian's `prometheus` (installed by scripts/setup.sh) runs on loopback with a
temporary config (scrape every second) and a temporary TSDB. Missing
binary: skipped locally, a failure under CI=true.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from agent import daemon
from common import paths
from netns_topology import LeafSpine
from workload.iperf import run_iperf3
from conftest import skip_or_fail
from helpers import free_port, up_fabric

pytestmark = pytest.mark.live

SERIES = [
    "talb_port_utilization_ratio", "talb_port_queue_delay_seconds", "talb_port_pcm",
    "talb_port_wrr_weight", "talb_port_tx_bytes_total", "talb_port_tx_packets_total",
    "talb_port_qdisc_backlog_bytes", "talb_port_qdisc_drops_total", "talb_port_up",
    "talb_tensor_table_entries", "talb_decisions_total", "talb_drops_total",
    "talb_agent_loop_duration_seconds_bucket", "talb_agent_loop_lag_seconds_bucket",
    "talb_agent_windows_total", "talb_agent_slow_windows_total", "talb_scheme_info",
]


def get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


@pytest.fixture(scope="module")
def prometheus_bin():
    path = shutil.which("prometheus")
    if path is None:
        skip_or_fail("the prometheus server is not installed (scripts/setup.sh installs Debian's)")
    return path


@pytest.fixture(scope="module")
def agent_port(request, bcc):
    prefix, topo = up_fabric(request, LeafSpine(spines=2, leaves=2, hosts_per_leaf=2))
    port = free_port()
    daemon.start_background(prefix, metrics_port=port)
    return prefix, topo, port


@pytest.fixture(scope="module")
def prometheus(prometheus_bin, agent_port, tmp_path_factory):
    _, _, target = agent_port
    d = tmp_path_factory.mktemp("prometheus")
    cfg = d / "prometheus.yml"
    cfg.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "talb", "scrape_interval": "1s",
                            "static_configs": [{"targets": [f"127.0.0.1:{target}"]}]}],
    }))
    port = free_port()
    log = open(d / "prometheus.log", "wb")
    proc = subprocess.Popen([prometheus_bin, f"--config.file={cfg}", f"--storage.tsdb.path={d / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        # Ready, and the agent scraped once: static targets reach the scrape
        # manager only after the discovery manager's first update (~5 s).
        deadline = time.monotonic() + 30
        while True:
            try:
                targets = json.loads(get(f"{base}/api/v1/targets", timeout=1))["data"]["activeTargets"]
                if any(t["health"] == "up" for t in targets):
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, \
                (d / "prometheus.log").read_text()[-2000:]
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(base: str, promql: str) -> list[dict]:
    body = json.loads(get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}"))
    assert body["status"] == "success", body
    return body["data"]["result"]


def values(result) -> list[float]:
    """The sample values of a query result, which must not be empty: an
    `all()` over no series would pass on nothing."""
    assert result, "the query returned no series"
    return [float(r["value"][1]) for r in result]


def test_prometheus_scrapes_every_series_with_sane_values(agent_port, prometheus):
    prefix, topo, _ = agent_port
    dst = next(h for h in topo.hosts if h.name == "h3")
    run_iperf3(paths.netns_name(prefix, "h0"), paths.netns_name(prefix, "h3"), dst.ip,
               duration=4, parallel=4)
    up = query(prometheus, 'up{job="talb"}')
    assert values(up) == [1.0], up
    tx_during = query(prometheus, 'talb_port_tx_bytes_total{switch="leaf0"}')
    time.sleep(1.5)  # one more scrape

    missing = [name for name in SERIES if not query(prometheus, name)]
    assert not missing, f"series not in Prometheus: {missing}"

    util = query(prometheus, "max_over_time(talb_port_utilization_ratio[10s])")
    assert all(0.0 <= v <= 1.0 for v in values(util)), util
    assert max(values(util)) > 0.5, "4 TCP flows left no port more than half busy"
    pcm = query(prometheus, "talb_port_pcm")
    assert all(0.0 <= v <= 1.0 for v in values(pcm)) and {r["metric"]["group"] for r in pcm} == \
        {"spine0+spine1"}, pcm
    weights = query(prometheus, 'sum by (switch, group) (talb_port_wrr_weight)')
    assert all(abs(v - 1.0) < 1e-9 for v in values(weights)), weights
    delay = query(prometheus, 'talb_port_queue_delay_seconds{source="model"}')
    assert all(0.0 < v < 1.0 for v in values(delay)), delay
    assert values(query(prometheus, "min(talb_port_up)")) == [1.0]
    schemes = query(prometheus, "talb_scheme_info")
    assert {(r["metric"]["switch"], r["metric"]["scheme"]) for r in schemes} == \
        {(s.name, "ecmp") for s in topo.switches}

    # the transfer went h0 (leaf0) -> h3 (leaf1): leaf0's counters grew over it
    grew = query(prometheus, 'sum(increase(talb_port_tx_bytes_total{switch="leaf0"}[15s]))')
    assert values(grew)[0] > 10_000_000, grew
    after = {r["metric"]["port"]: float(r["value"][1])
             for r in query(prometheus, 'talb_port_tx_bytes_total{switch="leaf0"}')}
    assert tx_during, "leaf0 exported no tx counters during the transfer"
    for r in tx_during:
        assert after[r["metric"]["port"]] >= float(r["value"][1]), (tx_during, after)
    windows = values(query(prometheus, "talb_agent_windows_total"))
    assert windows[0] > 100, windows
    decisions = query(prometheus, 'talb_decisions_total{switch="leaf0", scheme="ecmp"}')
    assert values(decisions)[0] > 1000, decisions
