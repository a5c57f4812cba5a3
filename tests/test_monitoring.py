"""Monitoring (issue 12): the dashboards, their provisioning, `talb monitoring`
and `talb report`, checked against a real Prometheus during a short live run.

The live part builds topologies/talb.yaml (scheme talb, four priority
bands) with its agent, starts the monitoring stack of `talb monitoring up`
in a directory of its own (TALB_MONITORING_DIR: a user's stack is never
touched; Grafana is not started), and only then starts a run's metrics
exposition (workload/run_metrics.py), so the run is found the way a run
started after `make monitoring` is. The run is driven by tagged tensors
over real TCP (`talb send`'s engine) -- rounds as iterations, a second
sender as background flows -- standing in for `talb run` until the runner
calls the same hooks. Then every PromQL expression of every panel goes
through Prometheus' own /api/v1/query.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import string
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import new_prefix, skip_or_fail
from helpers import free_port
from talb import monitoring, paths, report, testbed

DASHBOARD_DIR = paths.REPO_ROOT / "grafana" / "dashboards"
PROVISIONING = paths.REPO_ROOT / "grafana" / "provisioning"
NAMES = ("fabric", "talb", "experiment")
VARIABLES = {"testbed", "switch", "port", "scheme"}


def _dashboards_module():
    spec = importlib.util.spec_from_file_location("talb_grafana_dashboards",
                                                  paths.REPO_ROOT / "grafana" / "dashboards.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def committed() -> dict[str, dict]:
    return {n: json.loads((DASHBOARD_DIR / f"{n}.json").read_text()) for n in NAMES}


def exprs(dashboard: dict) -> list[tuple[dict, str]]:
    return [(p, t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


# --- the dashboards as files ---------------------------------------------------------------
def test_committed_json_is_what_the_code_generates():
    mod = _dashboards_module()
    assert set(mod.DASHBOARDS) == set(NAMES)
    for name in NAMES:
        assert mod.render(name) == (DASHBOARD_DIR / f"{name}.json").read_text(), \
            f"grafana/dashboards/{name}.json is stale: run python grafana/dashboards.py"


def test_every_panel_has_unit_description_variables_and_the_datasource():
    mod = _dashboards_module()
    for name, d in committed().items():
        variables = {v["name"] for v in d["templating"]["list"]}
        assert VARIABLES <= variables, (name, variables)
        assert d["panels"], name
        for p in d["panels"]:
            where = f"{name}/{p['title']}"
            assert p["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
            assert len(p.get("description", "")) > 20, f"{where}: no description"
            assert p["datasource"]["uid"] == mod.DATASOURCE_UID, where
            assert p["targets"], f"{where}: no query"
            for t in p["targets"]:
                assert t["datasource"] == {"type": "prometheus", "uid": mod.DATASOURCE_UID}, where
                assert "$testbed" in t["expr"], f"{where}: {t['expr']} ignores $testbed"
        for v in d["templating"]["list"]:
            assert v["datasource"]["uid"] == mod.DATASOURCE_UID and v["query"].startswith("label_values(")
        used = " ".join(e for _, e in exprs(d))
        for var in VARIABLES:
            assert f"${var}" in used, f"{name}: variable {var} is used by no panel"


def test_provisioning_names_the_folder_and_the_prometheus_datasource(tmp_path):
    mod = _dashboards_module()
    ds = yaml.safe_load((PROVISIONING / "datasources" / "talb.yaml").read_text())
    dash = yaml.safe_load((PROVISIONING / "dashboards" / "talb.yaml").read_text())
    assert ds["apiVersion"] == 1 and dash["apiVersion"] == 1
    [source] = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == mod.DATASOURCE_UID
    assert source["access"] == "proxy" and source["isDefault"] is True
    [provider] = dash["providers"]
    assert provider["type"] == "file" and provider["folder"] == mod.FOLDER == "talb"
    # Grafana expands ${VAR} from its environment: the one `talb monitoring up` gives it.
    env = monitoring.grafana_env("http://127.0.0.1:19999", 3999, tmp_path)
    expand = lambda s: string.Template(s).substitute(env)  # noqa: E731
    assert expand(source["url"]) == "http://127.0.0.1:19999"
    path = Path(expand(provider["options"]["path"]))
    assert sorted(p.name for p in path.glob("*.json")) == sorted(f"{n}.json" for n in NAMES)
    assert Path(env["GF_PATHS_PROVISIONING"]) == PROVISIONING
    assert env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"


def test_prometheus_config_scrapes_agents_and_runs_every_second(tmp_path):
    cfg = monitoring.prometheus_config(tmp_path)
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {monitoring.AGENT_JOB, monitoring.RUN_JOB}
    for j in jobs.values():
        assert j["scrape_interval"] == "1s"
        assert j["file_sd_configs"][0]["files"] == [str(tmp_path / f"{j['job_name']}.json")]


# --- talb report -------------------------------------------------------------------------
def _results(run_id: str, scheme: str, load: float, scale: float) -> dict:
    return {
        "run": {"run_id": run_id, "scheme": scheme, "model": "threelayer", "arch": "ps", "load": load},
        "iterations": [{"iteration": 0, "duration_s": 9.0, "samples_per_s": 1, "warmup": True}] + [
            {"iteration": i, "duration_s": 1.0 + 0.1 * i * scale, "samples_per_s": 64 / (1 + 0.1 * i)}
            for i in range(1, 6)],
        "tensors": [{"layer": layer, "class": "short" if layer == 0 else "long",
                     "bytes": 50_000 if layer == 0 else 2_000_000,
                     "fct_s": None if k == 7 and layer == 2 else (0.002 + 0.001 * k) * (layer + 1) * scale}
                    for layer in range(3) for k in range(8)],
        "background": [{"bytes": 10_000 * k, "fct_s": 0.001 * k * scale} for k in range(1, 20)],
    }


def test_report_renders_run_and_sweep_pngs(tmp_path):
    files = []
    for i, (scheme, load) in enumerate((("ecmp", 0.2), ("talb", 0.2), ("ecmp", 0.5), ("talb", 0.5))):
        f = tmp_path / f"run{i}.json"
        f.write_text(json.dumps(_results(f"r{i}", scheme, load, 1 + i)))
        files.append(f)
    written = report.render([str(tmp_path)], str(tmp_path / "out"))
    assert sorted(p.name for p in written) == ["r0.png", "r1.png", "r2.png", "r3.png", "sweep.png"]
    for p in written:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, (p, len(data))
    # the numbers the panels show: warm-up excluded, censored never 0
    res = report.load_results(files[0])
    assert len(res["iterations"]) == 5
    long = report.fcts(res["tensors"], **{"class": "long"})
    assert len(long) == 15 and min(long) > 0


def test_report_names_the_missing_field(tmp_path):
    bad = _results("r", "talb", 0.1, 1)
    del bad["tensors"][3]["fct_s"]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    with pytest.raises(report.ReportError, match=r"tensors\[3\].*'fct_s'"):
        report.render([str(f)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(report.ReportError, match="no results files"):
        report.render([str(empty)])


# --- live: a real Prometheus during a short run ------------------------------------------
def get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def query(base: str, promql: str) -> list[dict]:
    body = json.loads(get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}"))
    assert body["status"] == "success", (promql, body)
    return body["data"]["result"]


def wait_for(fn, what: str, timeout: float = 40.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def live(request, bcc, tmp_path_factory):
    if shutil.which("prometheus") is None:
        skip_or_fail("the prometheus server is not installed (scripts/setup.sh installs Debian's)")
    from agent import daemon
    from netns_topology import load_topology
    from talb import send
    from workload.run_metrics import RunMetrics

    prefix = new_prefix()
    mon = tmp_path_factory.mktemp("monitoring")
    old_env = os.environ.get("TALB_MONITORING_DIR")
    os.environ["TALB_MONITORING_DIR"] = str(mon)  # the refresher inherits it

    def cleanup():
        monitoring.down()
        daemon.stop_background(prefix)
        testbed.down(prefix)
        if old_env is None:
            os.environ.pop("TALB_MONITORING_DIR", None)
        else:
            os.environ["TALB_MONITORING_DIR"] = old_env

    request.addfinalizer(cleanup)
    testbed.up(load_topology(paths.REPO_ROOT / "topologies" / "talb.yaml"), prefix)
    agent_port = free_port()
    daemon.start_background(prefix, metrics_port=agent_port)
    state = monitoring.up(prometheus_port=free_port(), grafana=False)
    base = state["urls"]["prometheus"]
    wait_for(lambda: query(base, f'up{{job="talb-agent", testbed="{prefix}"}} == 1'), "the agent scraped")

    # The run starts after monitoring: the refresher must find it.
    metrics = RunMetrics(run_id=f"{prefix}-r1", scheme="talb", model="threelayer", arch="ps",
                         load=0.2, testbed=prefix, port=0).start()
    request.addfinalizer(metrics.close)
    wait_for(lambda: query(base, f'up{{job="talb-run", testbed="{prefix}"}} == 1'), "the run scraped")
    finished = censored = background = 0
    for it in range(3):
        t0 = time.monotonic()
        rep = send.run(prefix, ["h0", "h1"], "h4", tensors=6, layers=3, size=150_000,
                       say=lambda *_: None, port=7100)
        uplinks: dict = {}
        for t in rep.tensors:
            metrics.tensor_done(fct_s=t.fct_s, size_class="medium", layer=t.layer, nbytes=t.bytes)
            finished += t.fct_s is not None
            censored += t.fct_s is None
            for port, n in t.uplinks.items():
                uplinks[port] = uplinks.get(port, 0) + n
        took = time.monotonic() - t0
        metrics.iteration_done(duration_s=took, samples_per_s=64 / took)
        metrics.uplink_spread("leaf0", uplinks)
        bg = send.run(prefix, ["h2"], "h5", tensors=2, layers=1, size=30_000,
                      say=lambda *_: None, port=7101)
        for t in bg.tensors:
            if t.fct_s is not None:
                metrics.background_flow_done(fct_s=t.fct_s, nbytes=t.bytes)
                background += 1
        metrics.tcp_counters("h0", retransmissions=_retrans(prefix, "h0"))
    assert finished > 0 and background > 0
    # every series scraped after the last update
    last = time.time()
    wait_for(lambda: query(base, f'timestamp(talb_run_iterations_total{{testbed="{prefix}"}} == 3) > {last}'),
             "a scrape after the last update")
    return {"prefix": prefix, "base": base, "agent_url": f"http://127.0.0.1:{agent_port}/metrics",
            "metrics": metrics, "finished": finished, "censored": censored,
            "background": background, "mon": mon}


def _retrans(prefix: str, host: str) -> int:
    from workload.netexec import ns_run

    out = ns_run(paths.netns_name(prefix, host), ["cat", "/proc/net/snmp"]).stdout.splitlines()
    tcp = [line.split() for line in out if line.startswith("Tcp:")]
    return int(tcp[1][tcp[0].index("RetransSegs")])


def _substitute(expr: str, prefix: str) -> str:
    subs = {"$__rate_interval": "10s", "$testbed": prefix, "$switch": ".*", "$port": ".*",
            "$scheme": ".*", "$run_id": ".*"}
    for k, v in subs.items():
        expr = expr.replace(k, v)
    assert "$" not in expr, expr
    return expr


@pytest.mark.live
def test_every_panel_query_returns_sane_series(live):
    bad = []
    for name, d in committed().items():
        for panel, expr in exprs(d):
            result = query(live["base"], _substitute(expr, live["prefix"]))
            where = f"{name}/{panel['title']}: {expr}"
            if not result:
                bad.append(f"{where}: no series")
                continue
            lo = panel["fieldConfig"]["defaults"].get("min")
            hi = panel["fieldConfig"]["defaults"].get("max")
            for r in result:
                v = float(r["value"][1])
                if not math.isfinite(v) or (lo is not None and v < lo - 1e-9) or \
                        (hi is not None and v > hi + 1e-9):
                    bad.append(f"{where}: {r['metric']} = {v} outside [{lo}, {hi}]")
    assert not bad, "\n".join(bad)


@pytest.mark.live
def test_the_run_numbers_in_prometheus_are_the_runs(live):
    b, p = live["base"], live["prefix"]
    total = query(b, f'sum(talb_run_tensor_fct_seconds_count{{testbed="{p}"}})')
    assert float(total[0]["value"][1]) == live["finished"]
    bg = query(b, f'sum(talb_run_background_fct_seconds_count{{testbed="{p}"}})')
    assert float(bg[0]["value"][1]) == live["background"]
    [info] = query(b, f'talb_run_info{{testbed="{p}"}}')
    assert {k: info["metric"][k] for k in ("scheme", "model", "arch", "load")} == \
        {"scheme": "talb", "model": "threelayer", "arch": "ps", "load": "0.2"}
    p50 = query(b, f'histogram_quantile(0.5, sum by (le) (talb_run_tensor_fct_seconds_bucket{{testbed="{p}"}}))')
    p99 = query(b, f'histogram_quantile(0.99, sum by (le) (talb_run_tensor_fct_seconds_bucket{{testbed="{p}"}}))')
    assert 0 < float(p50[0]["value"][1]) <= float(p99[0]["value"][1]) < 30
    # the fabric saw the tensors: TaLB decided, bands 1.. carried tagged bytes
    talb = query(b, f'sum(talb_decisions_total{{testbed="{p}", scheme="talb"}})')
    assert float(talb[0]["value"][1]) > 100
    tagged_bands = query(b, f'sum(talb_port_band_tx_bytes_total{{testbed="{p}", switch="leaf0", band!="0"}})')
    assert float(tagged_bands[0]["value"][1]) > 3 * 6 * 2 * 150_000 / 2, tagged_bands
    inserted = query(b, f'sum(talb_tensor_events_total{{testbed="{p}", switch="leaf0", event="inserted"}})')
    assert float(inserted[0]["value"][1]) >= 3 * 6 * 2


@pytest.mark.live
def test_every_metric_a_dashboard_names_is_served(live):
    served = set()
    for url in (live["agent_url"], live["metrics"].url):
        for family in text_string_to_metric_families(get(url)):
            served |= {s.name for s in family.samples}
    named = set()
    for d in committed().values():
        for _, expr in exprs(d):
            named |= set(re.findall(r"\btalb_[a-z0-9_]+\b", expr))
        for v in d["templating"]["list"]:
            named |= set(re.findall(r"\btalb_[a-z0-9_]+\b", v["query"]))
    assert named, "no metric names found in the dashboards"
    assert not named - served, f"named by a dashboard, served by nobody: {sorted(named - served)}"


@pytest.mark.live
def test_targets_follow_runs_and_down_stops_only_its_processes(live):
    b, p = live["base"], live["prefix"]
    procs = monitoring.read_state()["processes"]
    assert set(procs) == {"prometheus", "targets"}
    live["metrics"].close()  # the run ends: its target goes
    wait_for(lambda: not [t for t in json.loads(get(f"{b}/api/v1/targets"))["data"]["activeTargets"]
                          if t["labels"].get("job") == "talb-run" and t["labels"].get("testbed") == p],
             "the ended run to leave the targets")
    assert monitoring.down()["stopped"] == ["targets", "prometheus"]
    for proc in procs.values():
        assert not Path(f"/proc/{proc['pid']}").exists() or \
            monitoring._start_time(proc["pid"]) != proc["start_time"], proc
    assert monitoring.down()["stopped"] == []
    assert (live["mon"] / "prometheus").is_dir(), "down removed the recorded data"
