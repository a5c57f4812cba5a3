"""The three Grafana dashboards of talb, as code (Grafana Labs' Python SDK,
``grafana-foundation-sdk``), and the generator of their committed JSON.

    python grafana/dashboards.py           # rewrite grafana/dashboards/*.json
    python grafana/dashboards.py --check   # exit 1 if the committed JSON is stale

Grafana itself reads only the generated JSON (provisioning/dashboards), so it
needs no Python. Every panel queries the Prometheus datasource provisioned as
uid ``talb-prometheus`` and has a unit, a description and the dashboard's
template variables (testbed, switch, port, scheme; the Experiment dashboard
adds run_id). Metric names: agent/metrics.py (the agent) and
workload/run_metrics.py (`talb run`).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as sb
from grafana_foundation_sdk.builders import statetimeline as stb
from grafana_foundation_sdk.builders import timeseries as tb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"
DATASOURCE_UID = "talb-prometheus"  # provisioning/datasources/talb.yaml
FOLDER = "talb"                     # provisioning/dashboards/talb.yaml
DS = dm.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)

# Label filters every agent query takes; SCHEME joins a per-switch series
# with the switch's current scheme (talb_scheme_info, value 1).
SW = 'testbed=~"$testbed", switch=~"$switch"'
SWP = f'{SW}, port=~"$port"'
SCHEME = ' * on (testbed, switch) group_left (scheme) talb_scheme_info{scheme=~"$scheme"}'
RUN = 'testbed=~"$testbed", scheme=~"$scheme", run_id=~"$run_id"'
# bytes/s of each leaf's uplinks (its ports towards the spines, named after them)
UPLINK_RATE = ('{agg} by (testbed, switch) (rate(talb_port_tx_bytes_total{{testbed=~"$testbed", '
               'switch=~"leaf.*", port=~"spine.*"}}[$__rate_interval]))')


@dataclass(frozen=True)
class PanelSpec:
    """One panel: what the reader sees and what the tests check."""
    title: str
    description: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    kind: str = "timeseries"              # timeseries | stat | state
    min: float | None = 0
    max: float | None = None
    width: int = 12
    stack: bool = False
    extra: dict = field(default_factory=dict)


def _var(name: str, query: str, description: str) -> db.QueryVariable:
    return (db.QueryVariable(name).label(name).description(description).datasource(DS)
            .query(query).refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .multi(True).include_all(True).all_value(".*")
            .current(dm.VariableOption(selected=True, text="All", value="$__all"))
            .sort(dm.VariableSort.ALPHABETICAL_ASC))


AGENT_VARS = [
    ("testbed", "label_values(talb_port_up, testbed)",
     "Testbed prefix (talb testbed up --prefix); Prometheus adds it to every target"),
    ("switch", 'label_values(talb_port_up{testbed=~"$testbed"}, switch)',
     "Switch (namespace <prefix>-<switch>)"),
    ("port", 'label_values(talb_port_up{testbed=~"$testbed", switch=~"$switch"}, port)',
     "Switch port, named after its peer"),
    ("scheme", 'label_values(talb_scheme_info{testbed=~"$testbed"}, scheme)',
     "Load-balancing scheme a switch runs now"),
]
RUN_VARS = [
    ("testbed", "label_values(talb_run_info, testbed)", "Testbed the run used"),
    ("switch", 'label_values(talb_port_up{testbed=~"$testbed"}, switch)', "Switch (fabric panels)"),
    ("port", 'label_values(talb_port_up{testbed=~"$testbed", switch=~"$switch"}, port)',
     "Switch port (fabric panels)"),
    ("scheme", 'label_values(talb_run_info{testbed=~"$testbed"}, scheme)', "The run's scheme"),
    ("run_id", 'label_values(talb_run_info{testbed=~"$testbed", scheme=~"$scheme"}, run_id)',
     "One run of `talb run` (a sweep has several)"),
]


def _q(quantile: float, metric: str, by: str, sel: str) -> str:
    """Quantile of a run's cumulative histogram: the run so far, which is
    defined as soon as one observation is in (a rate() window may hold none)."""
    return f"histogram_quantile({quantile}, sum by (le, {by}) ({metric}_bucket{{{sel}}}))"


FABRIC = [
    PanelSpec("Scheme of each switch", "The load-balancing scheme each switch's data path runs now "
      "(talb_scheme_info; `talb scheme NAME` changes it at run time).", "none",
      ((f'talb_scheme_info{{{SW}, scheme=~"$scheme"}}', "{{testbed}} {{switch}}: {{scheme}}"),),
      kind="stat", max=1, width=24, extra={"text_mode": "name"}),
    PanelSpec("Port utilisation", "Eq. 1 of the paper: bytes the port sent in the agent's last window "
      "over the link capacity.", "percentunit",
      ((f"talb_port_utilization_ratio{{{SWP}}}{SCHEME}", "{{switch}} {{port}}"),), max=1),
    PanelSpec("Port throughput", "Bits per second the switch program sent out of the port "
      "(rate of talb_port_tx_bytes_total).", "bps",
      ((f"8 * rate(talb_port_tx_bytes_total{{{SWP}}}[$__rate_interval]){SCHEME}",
        "{{switch}} {{port}}"),)),
    PanelSpec("Queue delay", "Mean queueing + service delay of the port: the agent's M/D/1 model "
      "(Eq. 3/4, source=model) and the measured qdisc backlog over the capacity (source=measured).",
      "s", ((f"talb_port_queue_delay_seconds{{{SWP}}}{SCHEME}", "{{switch}} {{port}} {{source}}"),)),
    PanelSpec("Queue backlog", "Bytes queued in the port's egress qdisc (HTB root) at the last reading.",
      "decbytes", ((f"talb_port_qdisc_backlog_bytes{{{SWP}}}{SCHEME}", "{{switch}} {{port}}"),)),
    PanelSpec("Port congestion metric (PCM)", "P_i of Eq. 5: w1 * utilisation + w2 * delay, normalised "
      "in the port's multipath group; what TaLB's CASE 1 and the threshold S compare.",
      "percentunit", ((f"talb_port_pcm{{{SWP}}}{SCHEME}", "{{switch}} {{port}} ({{group}})"),),
      max=1),
    PanelSpec("WRR weight", "CASE 2 weight of the port, 1 - P_i normalised over its group: the share "
      "of new tensors it gets while one layer is live.", "percentunit",
      ((f"talb_port_wrr_weight{{{SWP}}}{SCHEME}", "{{switch}} {{port}} ({{group}})"),), max=1),
    PanelSpec("Drops by reason", "Packets dropped per second: by the switch program (talb_drops_total, "
      "by reason) and by the port's egress queue when full (qdisc).", "pps",
      ((f"sum by (testbed, switch, reason) (rate(talb_drops_total{{{SW}}}[$__rate_interval]){SCHEME})",
        "{{switch}} program: {{reason}}"),
       (f"sum by (testbed, switch, port) (rate(talb_port_qdisc_drops_total{{{SWP}}}"
        f"[$__rate_interval]){SCHEME})",
        "{{switch}} {{port}} queue full")), stack=True, width=24),
    PanelSpec("Link state", "1 = the port is up with carrier, 0 = down (a failed link; the agent "
      "regroups around it).", "bool_on_off",
      ((f"talb_port_up{{{SWP}}}{SCHEME}", "{{switch}} {{port}}"),), kind="state", max=1, width=24),
    PanelSpec("Agent loop duration", "Time one window's work took (read counters, compute PCM, publish "
      "weights): median and 99th percentile over the last interval; a window is a few ms.", "s",
      (('histogram_quantile(0.5, sum by (le, testbed) (rate(talb_agent_loop_duration_seconds_bucket'
        '{testbed=~"$testbed"}[$__rate_interval])))', "{{testbed}} p50"),
       ('histogram_quantile(0.99, sum by (le, testbed) (rate(talb_agent_loop_duration_seconds_bucket'
        '{testbed=~"$testbed"}[$__rate_interval])))', "{{testbed}} p99"))),
    PanelSpec("Agent windows", "Windows the agent ran per second, and those that overran the window "
      "(slow) or were skipped (missed).", "ops",
      (('rate(talb_agent_windows_total{testbed=~"$testbed"}[$__rate_interval])', "{{testbed}} windows"),
       ('rate(talb_agent_slow_windows_total{testbed=~"$testbed"}[$__rate_interval])', "{{testbed}} slow"),
       ('rate(talb_agent_missed_windows_total{testbed=~"$testbed"}[$__rate_interval])', "{{testbed}} missed"))),
]

TALB = [
    PanelSpec("Tensor-table occupancy", "Live entries of the switch's tensor table (Table I of the "
      "paper): tensors in flight through it.", "short",
      ((f"talb_tensor_table_entries{{{SW}}}{SCHEME}", "{{switch}}"),)),
    PanelSpec("Tagged packets", "Packets per second carrying a valid TaLB IPv4 option (host tagging).",
      "pps", ((f'sum by (testbed, switch) (rate(talb_datapath_packets_total{{{SW}, counter="opt_tagged"}}'
               f'[$__rate_interval]){SCHEME})', "{{switch}}"),)),
    PanelSpec("Decisions by case", "TaLB's forwarding decisions per second: table hit (same port as the "
      "tensor's earlier packets), CASE 1 (several layers live: lowest-PCM port), CASE 1 sent back "
      "by the threshold S, CASE 2 (one layer live: WRR); and the events that leave TaLB for the "
      "fallback scheme (untagged, table full, mid-stream) or mark a late or aged entry.", "pps",
      ((f'sum by (testbed, switch, case) (rate(talb_decisions_total{{{SW}, scheme="talb"}}'
        f'[$__rate_interval]){SCHEME})',
        "{{switch}} {{case}}"),
       (f'sum by (testbed, switch, event) (rate(talb_tensor_events_total{{{SW}, '
        f'event=~"fallback|late|midstream|aged|table_full"}}[$__rate_interval]){SCHEME})',
        "{{switch}} {{event}}")), width=24, stack=True),
    PanelSpec("Table inserts and completions", "Tensor-table entries inserted (first packet of a tensor) "
      "and completed (its last packet) per second.", "ops",
      ((f'sum by (testbed, switch, event) (rate(talb_tensor_events_total{{{SW}, '
        f'event=~"inserted|completed"}}[$__rate_interval]){SCHEME})', "{{switch}} {{event}}"),),
      width=24),
    PanelSpec("Per-layer bands: bytes", "Bytes per second each egress priority band of a port sent. "
      "Band 0 carries untagged traffic; band b > 0 the tensors of layers (b-1)*L .. b*L-1 "
      "(L = queue.layers_per_band): front layers first.", "Bps",
      ((f"sum by (testbed, switch, port, band) (rate(talb_port_band_tx_bytes_total{{{SWP}}}"
        f"[$__rate_interval]){SCHEME})", "{{switch}} {{port}} band {{band}}"),), width=24, stack=True),
]

EXPERIMENT = [
    PanelSpec("Runs", "The runs shown, with their scheme, model, architecture and load "
      "(talb_run_info).", "none",
      ((f"talb_run_info{{{RUN}}}", "{{run_id}}: {{scheme}} {{model}} {{arch}} load {{load}}"),),
      kind="stat", max=1, width=24, extra={"text_mode": "name"}),
    PanelSpec("Iteration time", "Training iteration time (warm-up excluded): mean and 99th percentile "
      "of the run so far.", "s",
      ((f"sum by (run_id, scheme, model, load) (talb_run_iteration_duration_seconds_sum{{{RUN}}}) / "
        f"sum by (run_id, scheme, model, load) (talb_run_iteration_duration_seconds_count{{{RUN}}})",
        "{{scheme}} {{model}} load {{load}} mean ({{run_id}})"),
       (_q(0.99, "talb_run_iteration_duration_seconds", "run_id, scheme, model, load", RUN),
        "{{scheme}} {{model}} load {{load}} p99 ({{run_id}})"))),
    PanelSpec("Training speed", "Samples per second of the last iteration, at the target cluster's "
      "scale (the scaling is in the results file).", "suffix: samples/s",
      ((f"talb_run_samples_per_second{{{RUN}}}", "{{scheme}} {{model}} load {{load}} ({{run_id}})"),)),
    PanelSpec("Tensor FCT by class", "Tensor flow completion time (socket hand-off to the receiver's "
      "last byte), median and 99th percentile of the run so far; short <= 100 KB, long >= 1 MB "
      "at the target scale.", "s",
      ((_q(0.5, "talb_run_tensor_fct_seconds", "run_id, scheme, class", RUN),
        "{{scheme}} {{class}} p50 ({{run_id}})"),
       (_q(0.99, "talb_run_tensor_fct_seconds", "run_id, scheme, class", RUN),
        "{{scheme}} {{class}} p99 ({{run_id}})"))),
    PanelSpec("Tensor FCT p99 by layer", "99th percentile of tensor FCT per model layer (0 = front "
      "layer, sent last in back-propagation and needed first).", "s",
      ((_q(0.99, "talb_run_tensor_fct_seconds", "run_id, scheme, layer", RUN),
        "{{scheme}} layer {{layer}} ({{run_id}})"),)),
    PanelSpec("Background FCT", "Flow completion time of the background flows (web-search or "
      "data-mining sizes): median and 99th percentile of the run so far.", "s",
      ((_q(0.5, "talb_run_background_fct_seconds", "run_id, scheme, load", RUN),
        "{{scheme}} load {{load}} p50 ({{run_id}})"),
       (_q(0.99, "talb_run_background_fct_seconds", "run_id, scheme, load", RUN),
        "{{scheme}} load {{load}} p99 ({{run_id}})"))),
    PanelSpec("TCP retransmissions", "Segments each host retransmitted since the run started "
      "(kernel TcpRetransSegs in the host's namespace).", "short",
      ((f"sum by (run_id, scheme, host) (talb_run_tcp_retransmissions_total{{{RUN}}})",
        "{{scheme}} {{host}} ({{run_id}})"),)),
    PanelSpec("Uplink spread", "How unevenly a leaf's uplinks carried bytes, (max - min) / mean "
      "(0 = perfectly even): over the whole run (set when it ends), and live from the fabric's "
      "counters (leaf ports towards spines, over the last interval).", "percentunit",
      ((f"talb_run_uplink_spread_ratio{{{RUN}}}", "{{scheme}} {{leaf}} run ({{run_id}})"),
       (f"({UPLINK_RATE.format(agg='max')} - {UPLINK_RATE.format(agg='min')}) / "
        f"({UPLINK_RATE.format(agg='avg')} > 0)", "{{switch}} live"))),
    PanelSpec("Tensors finished and censored", "Tensors of the run so far (warm-up excluded): finished, "
      "and censored (never finished: not counted as 0 s in any FCT).", "short",
      ((f"sum by (run_id, scheme, class) (talb_run_tensors_censored_total{{{RUN}}})",
        "{{scheme}} {{class}} censored ({{run_id}})"),
       (f"sum by (run_id, scheme, class) (talb_run_tensor_fct_seconds_count{{{RUN}}})",
        "{{scheme}} {{class}} finished ({{run_id}})"))),
    PanelSpec("Uplink utilisation (fabric)", "Utilisation of the selected switch ports (the agent's "
      "Eq. 1) while the run goes on: pick a leaf's spine ports to see the spread.", "percentunit",
      ((f"talb_port_utilization_ratio{{{SWP}}}{SCHEME}", "{{switch}} {{port}}"),), max=1),
]

DASHBOARDS = {
    "fabric": ("talb-fabric", "talb: Fabric", "Per switch and port: utilisation, queue delay, "
               "PCM, WRR weight, drops, link state, scheme; the agent's loop.", AGENT_VARS, FABRIC),
    "talb": ("talb-talb", "talb: TaLB", "TaLB's tensor table, its decisions by case and the "
             "bytes of the per-layer priority bands.", AGENT_VARS, TALB),
    "experiment": ("talb-experiment", "talb: Experiment", "A `talb run` while it goes on: "
                   "iteration time, speed, tensor and background FCT, retransmissions, uplink "
                   "spread; runs told apart by run_id, scheme, model and load.", RUN_VARS, EXPERIMENT),
}


def _panel(p: PanelSpec):
    if p.kind == "stat":
        b = (sb.Panel().text_mode(cm.BigValueTextMode(p.extra.get("text_mode", "auto")))
             .color_mode(cm.BigValueColorMode.BACKGROUND)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    elif p.kind == "state":
        b = stb.Panel().mappings([
            dm.ValueMap(options={"0": dm.ValueMappingResult(text="down", color="red"),
                                 "1": dm.ValueMappingResult(text="up", color="green")})])
    else:
        b = (tb.Panel().legend(cb.VizLegendOptions().show_legend(True)
                               .display_mode(cm.LegendDisplayMode.TABLE)
                               .placement(cm.LegendPlacement.RIGHT).calcs(["lastNotNull", "max"]))
             .fill_opacity(10).show_points(cm.VisibilityMode.NEVER))
        if p.stack:
            b = b.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    b = b.title(p.title).description(p.description).unit(p.unit).datasource(DS)
    if p.min is not None:
        b = b.min(p.min)
    if p.max is not None:
        b = b.max(p.max)
    for i, (expr, legend) in enumerate(p.queries):
        b = b.with_target(pb.Dataquery().expr(expr).legend_format(legend)
                          .ref_id(chr(ord("A") + i)).datasource(DS))
    return b


def build(name: str) -> dict:
    """The dashboard ``name`` (a key of DASHBOARDS) as Grafana's JSON model."""
    uid, title, description, variables, panels = DASHBOARDS[name]
    d = (db.Dashboard(title).uid(uid).description(description).tags(["talb"])
         .refresh("5s").time("now-15m", "now").timezone("browser").editable()
         .tooltip(dm.DashboardCursorSync.CROSSHAIR)
         .timepicker(db.TimePicker().refresh_intervals(["1s", "5s", "10s", "30s", "1m"])))
    for vname, query, vdesc in variables:
        d = d.with_variable(_var(vname, query, vdesc))
    x = y = row_h = 0
    for p in panels:  # left to right; a panel that does not fit starts a new row
        h = 3 if p.kind == "stat" else 8
        if x + p.width > 24:
            x, y, row_h = 0, y + row_h, 0
        d = d.with_panel(_panel(p).grid_pos(dm.GridPos(h=h, w=p.width, x=x, y=y)))
        x, row_h = x + p.width, max(row_h, h)
    return json.loads(json.dumps(d.build(), cls=JSONEncoder))


def render(name: str) -> str:
    return json.dumps(build(name), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    OUT_DIR.mkdir(exist_ok=True)
    for name in DASHBOARDS:
        path = OUT_DIR / f"{name}.json"
        text = render(name)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale (run python grafana/dashboards.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
