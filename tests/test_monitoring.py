"""Monitoring (issue 12): the dashboards, their provisioning, `talb monitoring`
and `talb report`, checked against a real Prometheus during a short live run.

The live part builds topologies/talb.yaml (scheme talb, four priority
bands) with its agent, starts the monitoring stack of `talb monitoring up`
in a directory of its own (TALB_MONITORING_DIR: a user's stack is never
touched; Grafana is not started), and only then runs a short real
experiment (workload/experiment.py: three-layer model, parameter server,
two workers), whose hook serves the run's metrics: the run is found the
way a run started after `make monitoring` is, and its numbers in
Prometheus are compared with its results file. The runner has no
background flows yet, so a second exposition gets real TCP flows (`talb
send`'s engine) as background. Then every PromQL expression of every
panel goes through Prometheus' own /api/v1/query.
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

from common import paths
from netns_topology.state import load_topology_of
from talb import monitoring, report
from testbed import lifecycle
from conftest import new_prefix, skip_or_fail
from helpers import free_port

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
    if os.environ.get("TALB_KEEP_PNG"):  # to look at them
        for p in written:
            shutil.copy(p, Path("/tmp") / f"talb-report-{p.name}")
    assert sorted(p.name for p in written) == ["r0.png", "r1.png", "r2.png", "r3.png", "sweep.png"]
    for p in written:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, (p, len(data))
    # the numbers the panels show: warm-up excluded, censored never 0
    res = report.load_results(files[0])
    assert len(res["iterations"]) == 5
    long = report.fcts(res["tensors"], **{"class": "long"})
    assert len(long) == 15 and min(long) > 0


def test_report_marks_a_cpu_bound_run(tmp_path):
    """A run the CPU guard flagged measured the machine: the report says so."""
    data = _results("r", "talb", 0.5, 1)
    data["flags"] = {"cpu_bound": True}
    data["summary"] = {"cpu_guard": {"flagged": True, "reason": "CPUs saturated in 5/5 windows"}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(data))
    res = report.load_results(f)
    assert res["cpu_bound"] and "5/5" in res["cpu_reason"]
    del data["flags"], data["summary"]
    f.write_text(json.dumps(data))
    assert not report.load_results(f)["cpu_bound"]


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


def query(base: str, promql: str, at: float | None = None) -> list[dict]:
    """An instant query (at ``at``, default now). A run's series go stale
    once its target is gone: its numbers are asked for at its last scrape."""
    when = "" if at is None else f"&time={at}"
    body = json.loads(get(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}{when}"))
    assert body["status"] == "success", (promql, body)
    return body["data"]["result"]


def query_range(base: str, promql: str, start: float, end: float) -> list[dict]:
    """What a Grafana time-series panel asks for, every 0.25 s of [start, end]
    (finer than the scrapes: a run scraped once is seen between its one
    sample and the staleness marker its next, failed, scrape leaves)."""
    q = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": 0.25})
    body = json.loads(get(f"{base}/api/v1/query_range?{q}"))
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
    from workload import experiment
    from workload.run_metrics import RunMetrics

    prefix = new_prefix()
    mon = tmp_path_factory.mktemp("monitoring")
    # A stack and an endpoint directory of the test's own (the refresher
    # inherits them): a user's monitoring neither sees these runs nor is touched.
    env = {"TALB_MONITORING_DIR": str(mon), "TALB_RUN_ENDPOINTS_DIR": str(mon / "run-endpoints")}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)

    def cleanup():
        monitoring.down()
        daemon.stop_background(prefix)
        lifecycle.down(prefix)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    request.addfinalizer(cleanup)
    lifecycle.up(load_topology(paths.REPO_ROOT / "topologies" / "talb.yaml"), prefix)
    agent_port = free_port()
    daemon.start_background(prefix, metrics_port=agent_port)
    state = monitoring.up(prometheus_port=free_port(), grafana=False)
    base = state["urls"]["prometheus"]
    wait_for(lambda: query(base, f'up{{job="talb-agent", testbed="{prefix}"}} == 1'), "the agent scraped")

    # A real run (workload/experiment.py, whose hook serves the run's metrics)
    # after monitoring is up: the refresher must find it, and the run waits
    # at its end for the scrape that records its last values.
    t_start = time.time()
    results = experiment.run(experiment.RunConfig(
        model="threelayer", arch="ps", workers=2, iterations=4, warmup=1, prefix=prefix,
        scheme="talb", out=str(tmp_path_factory.mktemp("results") / "run.json")))
    # a range selector: the run's series went stale when its target went
    [info] = query(base, f'talb_run_info{{testbed="{prefix}", model="threelayer"}}[5m]')
    run_id, run_last_scrape = info["metric"]["run_id"], float(info["values"][-1][0])

    # The runner has no background flows yet (w10a's generator is not wired
    # into it): a second exposition gets real TCP flows as its background.
    bg = RunMetrics(run_id=f"{prefix}-bg", scheme="talb", model="none", arch="ps", load=0.2,
                    testbed=prefix, port=0).start()
    request.addfinalizer(bg.close)
    background = 0
    for _ in range(3):
        rep = send.run(prefix, ["h2"], "h4", tensors=3, layers=1, size=30_000,
                       say=lambda *_: None, port=7201)
        for t in rep.tensors:
            if t.fct_s is not None:
                bg.background_flow_done(fct_s=t.fct_s, nbytes=t.bytes)
                background += 1
    assert background > 0
    last = time.time()
    [scraped] = wait_for(lambda: query(base, f'timestamp(talb_run_background_fct_seconds_count'
                                             f'{{testbed="{prefix}"}} == {background}) > {last}'),
                         "a scrape after the last flow")
    # and one more, so that the panels' range queries (whose last step may
    # fall just before that scrape) see it too
    seen = float(scraped["value"][1])
    wait_for(lambda: query(base, f'timestamp(talb_run_background_fct_seconds_count'
                                 f'{{testbed="{prefix}"}}) > {seen + 0.5}'), "the next scrape")
    return {"prefix": prefix, "base": base, "agent_url": f"http://127.0.0.1:{agent_port}/metrics",
            "bg": bg, "results": results, "run_id": run_id, "run_last_scrape": run_last_scrape,
            "background": background, "mon": mon, "t_start": t_start}


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
            result = query_range(live["base"], _substitute(expr, live["prefix"]),
                                 live["t_start"], time.time())
            where = f"{name}/{panel['title']}: {expr}"
            if not result:
                bad.append(f"{where}: no series")
                continue
            lo = panel["fieldConfig"]["defaults"].get("min")
            hi = panel["fieldConfig"]["defaults"].get("max")
            for r in result:
                for _, value in r["values"]:
                    v = float(value)
                    if not math.isfinite(v) or (lo is not None and v < lo - 1e-9) or \
                            (hi is not None and v > hi + 1e-9):
                        bad.append(f"{where}: {r['metric']} = {v} outside [{lo}, {hi}]")
                        break
    assert not bad, "\n".join(bad)


@pytest.mark.live
def test_the_run_numbers_in_prometheus_are_the_results_files(live):
    b, p, res = live["base"], live["prefix"], live["results"]
    run = f'testbed="{p}", run_id="{live["run_id"]}"'
    at = live["run_last_scrape"]  # the run's own series: at its last scrape

    def one(promql: str, when: float | None = at) -> float:
        [r] = query(b, promql, when)
        return float(r["value"][1])

    [info] = query(b, f"talb_run_info{{{run}}}", at)
    assert {k: info["metric"][k] for k in ("scheme", "model", "arch", "load")} == \
        {"scheme": "talb", "model": "threelayer", "arch": "ps", "load": "0"}
    measured = [t for t in res["tensors"] if not t["warmup"]]
    finished = [t for t in measured if not t["censored"]]
    assert finished, "the run finished no tensor"
    assert one(f"sum(talb_run_tensor_fct_seconds_count{{{run}}})") == len(finished)
    assert one(f"sum(talb_run_tensors_censored_total{{{run}}})") == len(measured) - len(finished)
    for cls in ("short", "long"):
        n = sum(1 for t in finished if t["class"] == cls)
        got = query(b, f'sum(talb_run_tensor_fct_seconds_count{{{run}, class="{cls}"}})', at)
        assert (float(got[0]["value"][1]) if got else 0) == n, cls
    fct_sum = one(f"sum(talb_run_tensor_fct_seconds_sum{{{run}}})")
    assert fct_sum == pytest.approx(sum(t["fct_s"] for t in finished), rel=1e-6)
    speed = res["summary"]["speed"]
    assert one(f"sum(talb_run_iterations_total{{{run}}})") == speed["iterations"]
    mean = one(f"sum(talb_run_iteration_duration_seconds_sum{{{run}}}) / "
               f"sum(talb_run_iteration_duration_seconds_count{{{run}}})")
    assert mean == pytest.approx(speed["iteration_time_s"], rel=1e-6)
    retrans = res["summary"]["tcp"]["per_host"]
    got = {r["metric"]["host"]: float(r["value"][1])
           for r in query(b, f"talb_run_tcp_retransmissions_total{{{run}}}", at)}
    assert got == {h: d["retrans_segs"] for h, d in retrans.items()}
    spread = {r["metric"]["leaf"]: float(r["value"][1])
              for r in query(b, f"talb_run_uplink_spread_ratio{{{run}}}", at)}
    assert spread == pytest.approx({leaf: v["spread"] for leaf, v in
                                    res["summary"]["uplinks"]["leaves"].items()})
    # still served: the background exposition and the agent (counters since the testbed began)
    assert one(f'sum(talb_run_background_fct_seconds_count{{testbed="{p}"}})', None) == live["background"]
    # the fabric saw the tensors: TaLB decided, tagged bands carried bytes, entries were made
    assert one(f'sum(talb_decisions_total{{testbed="{p}", scheme="talb"}})', None) > 100
    assert one(f'sum(talb_port_band_tx_bytes_total{{testbed="{p}", band!="0"}})', None) > \
        res["summary"]["tensors"]["delivered_bytes"] / 2
    # every tensor crossing the fabric met its source leaf's table: an entry
    # made, or -- its first packet behind a later one (dropped at the sender's
    # queue and retransmitted) -- met midstream and sent by the fallback
    # (schemes/talb.h: no entry then; CI once saw 119 entries for 120 tensors)
    leaf_of = {h.name: h.leaf for h in load_topology_of(p).hosts}
    node_leaf = [leaf_of[h] for h in res["placement"]["workers"] + res["placement"]["servers"]]
    crossing: dict = {}
    for t in res["tensors"]:
        if node_leaf[t["src"]] != node_leaf[t["dst"]]:
            crossing[node_leaf[t["src"]]] = crossing.get(node_leaf[t["src"]], 0) + 1
    assert crossing, "no tensor crossed the fabric"
    for leaf, n in crossing.items():
        assert one(f'sum(talb_tensor_events_total{{testbed="{p}", switch="{leaf}", '
                   f'event=~"inserted|midstream"}})', None) >= n, leaf


@pytest.mark.live
def test_every_metric_a_dashboard_names_is_served(live):
    # the agent's page as served now, and every name Prometheus scraped from the runs' pages
    served = {s.name for family in text_string_to_metric_families(get(live["agent_url"]))
              for s in family.samples}
    match = urllib.parse.quote(f'{{job="talb-run", testbed="{live["prefix"]}"}}')
    served |= set(json.loads(get(f'{live["base"]}/api/v1/label/__name__/values?match[]={match}'))["data"])
    named = set()
    for d in committed().values():
        for _, expr in exprs(d):
            named |= set(re.findall(r"\btalb_[a-z0-9_]+\b", expr))
        for v in d["templating"]["list"]:
            named |= set(re.findall(r"\btalb_[a-z0-9_]+\b", v["query"]))
    assert named, "no metric names found in the dashboards"
    assert not named - served, f"named by a dashboard, served by nobody: {sorted(named - served)}"


@pytest.mark.live
def test_report_of_the_live_run(live, tmp_path):
    """`talb report` on the real run's results file (talb run's format)."""
    res = live["results"]
    [png] = report.render([res["path"]], str(tmp_path))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, len(data)
    loaded = report.load_results(Path(res["path"]))
    assert loaded["run"]["model"] == "threelayer" and loaded["run"]["scheme"] == "talb"
    assert len(loaded["iterations"]) == res["summary"]["speed"]["iterations"]
    speeds = [it["samples_per_s"] for it in loaded["iterations"]]
    # the per-iteration speeds average (harmonically) to the run's
    harmonic = len(speeds) / sum(1 / v for v in speeds)
    assert harmonic == pytest.approx(res["summary"]["speed"]["samples_per_s"])
    assert len(loaded["tensors"]) == sum(1 for t in res["tensors"] if not t["warmup"])
    if os.environ.get("TALB_KEEP_PNG"):  # to look at it
        shutil.copy(png, Path("/tmp") / "talb-report-live.png")


@pytest.mark.live
def test_targets_follow_runs_and_down_stops_only_its_processes(live):
    b, p = live["base"], live["prefix"]
    procs = monitoring.read_state()["processes"]
    assert set(procs) == {"prometheus", "targets"}
    live["bg"].close()  # the run ends: its target goes
    wait_for(lambda: not [t for t in json.loads(get(f"{b}/api/v1/targets"))["data"]["activeTargets"]
                          if t["labels"].get("job") == "talb-run" and t["labels"].get("testbed") == p],
             "the ended run to leave the targets")
    assert monitoring.down()["stopped"] == ["targets", "prometheus"]
    for proc in procs.values():
        assert not Path(f"/proc/{proc['pid']}").exists() or \
            monitoring._start_time(proc["pid"]) != proc["start_time"], proc
    assert monitoring.down()["stopped"] == []
    assert (live["mon"] / "prometheus").is_dir(), "down removed the recorded data"
