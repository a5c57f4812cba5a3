"""`talb`: one command for the whole testbed.

    talb testbed up|down|status|demo   build, remove, inspect, try a fabric
    talb shell NODE [CMD...]           a shell (or a command) on a host or switch
    talb table [--switch S]            a switch's live TaLB tensor table and decision counters
    talb scheme [NAME] [--param k=v]   show or switch the load-balancing scheme at runtime
    talb send --src H --dst H          send tagged tensors, see each one's FCT and uplink
    talb tag --netns H --port N        tag the TCP writes of unmodified processes (MPI, any client)
    talb run --model M --arch ps ...   one training experiment: PS or all-reduce, results JSON
    talb bench --preset fig10          the paper's experiments: sweeps, CIs, plots, summary
    talb bench datapath                data-path benchmarks
    talb bench xdp                     XDP entry vs TC entry vs empty XDP_REDIRECT, packets/s per core
    talb bench faults                  faults under training: recovery time, delivery
    talb bench build                   fabric build time against nodes (and Mininet's)
    talb bench shaped                  goodput and CPU through a shaped fabric, link emulation variants
    talb monitoring up|down|status     Prometheus (+ Grafana) for the testbeds and runs
    talb report RESULTS                a finished run's key panels as PNG
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# The schemes' headers and modules ($TALB_SCHEME_PATH's too) are read and
# checked at their first import: a bad one ends the command with its message
# (naming the file or the variable), not a traceback.
try:
    from datapath.schemes import registry as _scheme_registry  # noqa: F401
except RuntimeError as _exc:
    if type(_exc).__name__ not in ("SchemeHeaderError", "RegistryError"):
        raise
    sys.exit(f"talb: {_exc}")

from common import paths  # noqa: E402
from common.bcc_bindings import BccUnavailable  # noqa: E402
from netns_topology.state import (DATAPATHS, PROGRAM_DATAPATHS, TestbedError, load_topology_of, node_namespace,
                                  read_state, require_root)
from talb.cli_scheme import SCHEME_CHOICES, TIMER_FIELDS, param_help, scheme_table
from testbed import lifecycle

# soft_wrap: long lines (commands to copy) are never broken in the middle.
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

PREFIX_OPTION = click.option(
    "--prefix", default=paths.DEFAULT_PREFIX, show_default=True,
    help="Name prefix of the testbed's namespaces (<prefix>-<node>); lets several testbeds coexist.")


def _fail(message: str) -> None:
    # the message as written: a value it quotes is no markup and no :emoji: code
    err_console.print(f"[bold red]error:[/] {escape(message)}", emoji=False)
    sys.exit(1)


_STEP = re.compile(r"^(?P<step>.*?) (?P<i>\d+)/(?P<n>\d+)$")


def _progress(msg: str) -> None:
    """One line per finished step: "links 12/12" is shown, "links 3/12" is not."""
    m = _STEP.match(msg)
    if m and m["i"] != m["n"]:
        return
    console.print(f"  [dim]•[/] {msg}")


class _Errors(click.Group):
    """Turn the project's user-facing errors into one red line and exit 1."""

    def invoke(self, ctx):
        from agent.daemon import AgentError
        from netns_topology import BuildError, TopologyError

        try:
            return super().invoke(ctx)
        except (TestbedError, TopologyError, BuildError, AgentError, BccUnavailable, ValueError) as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail("interrupted")


@click.group(cls=_Errors, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """talb — tensor-aware load balancing (TaLB) on eBPF switches in network namespaces.

    Build a leaf-spine fabric of namespaces with `talb testbed up`, look at it
    with `talb testbed status`, remove it with `talb testbed down`. Needs root.
    """


# --- testbed --------------------------------------------------------------------

@main.group("testbed", cls=_Errors)
def testbed_group():
    """Build, inspect and remove a fabric."""


def _topology_dict(topology: str | None, overrides: dict) -> dict:
    """The --topology file's fields, with the flags given on top."""
    from netns_topology import read_topology_file

    data = read_topology_file(topology) if topology else {}
    data.update({k: v for k, v in overrides.items() if v is not None})
    return data


@testbed_group.command("up")
@click.option("--topology", type=click.Path(dir_okay=False), help="Topology YAML file (see topologies/).")
@click.option("--spines", type=int, help="Number of spine switches [2].")
@click.option("--leaves", type=int, help="Number of leaf switches [2].")
@click.option("--hosts-per-leaf", type=int, help="Hosts under each leaf [2].")
@click.option("--link-rate", help="Leaf-spine link rate, e.g. 100mbit [100mbit].")
@click.option("--host-link-rate", help="Host-leaf link rate [100mbit].")
@click.option("--oversubscription", type=float, help="Derive the leaf-spine rate from this ratio instead of --link-rate.")
@click.option("--queue-limit", help="Byte limit of each port queue, e.g. 150kb [150kb].")
@click.option("--tcp-cc", help="Hosts' TCP congestion control: cubic, bbr or reno [cubic].")
@click.option("--rto-min", help="Hosts' minimum TCP retransmission timeout, e.g. 10ms (a metric "
                                "of their routes) [the kernel's: 200ms].")
@click.option("--scheme", help=f"Load-balancing scheme: {SCHEME_CHOICES} [ecmp] "
                                "(parameters: `talb scheme NAME --param ...`).")
@click.option("--datapath", type=click.Choice(DATAPATHS), default="bpf", show_default=True,
              help="bpf: the switch programs forward at TC ingress, through each port's "
                   "emulated link and queue (HTB); xdp: the same programs as XDP, for "
                   "line-rate runs and real NICs -- no link shaping, queues or priority "
                   "bands (shaping off unless the topology file asks for it, which is "
                   "refused), and not DRILL or --pcm-delay measured, which read queues; "
                   "bridge: the kernel bridge alone (a baseline).")
@click.option("--replace", is_flag=True, help="Tear down a testbed with the same prefix first.")
@click.option("--agent/--no-agent", "with_agent", default=None,
              help="Start the PCM agent (talb agent) with the testbed; on by default with the "
                   "bpf data path. `talb agent --help` lists its options.")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address of the agent's Prometheus /metrics endpoint (loopback unless "
                   "told otherwise: the page describes the fabric).")
@click.option("--metrics-port", type=int, default=None,
              help="The agent's Prometheus /metrics port [default: 9477, or the next free "
                   "one up to 9496 when another testbed's agent has it; given: that port or "
                   "an error].")
@PREFIX_OPTION
def testbed_up(topology, spines, leaves, hosts_per_leaf, link_rate, host_link_rate,
               oversubscription, queue_limit, tcp_cc, rto_min, scheme, datapath, replace, with_agent,
               metrics_addr, metrics_port, prefix):
    """Build a fabric in network namespaces and attach the switch data path.

    Flags override the fields of --topology. Defaults: 2 spines, 2 leaves,
    2 hosts per leaf, 100 Mbit/s links, 150 KB port queues, cubic, ECMP.
    """
    from netns_topology import topology_from_dict

    data = _topology_dict(topology, {
        "spines": spines, "leaves": leaves, "hosts_per_leaf": hosts_per_leaf,
        "link_rate": link_rate, "host_link_rate": host_link_rate,
        "oversubscription": oversubscription, "tcp_cc": tcp_cc, "scheme": scheme,
        "rto_min": rto_min,
    })
    if queue_limit is not None:
        data["queue"] = {**(data.get("queue") or {}), "limit": queue_limit}
    if datapath == "xdp":
        # XDP_REDIRECT bypasses the ports' qdiscs: no links to shape
        # (a topology file saying shaping: true is refused by `up`)
        data.setdefault("shaping", False)
    topo = topology_from_dict(data)
    console.print(f"[bold]talb testbed up[/] prefix [cyan]{prefix}[/]: "
                  f"{len(topo.switches)} switches, {len(topo.hosts)} hosts, datapath {datapath}")
    if with_agent is None:
        with_agent = datapath in PROGRAM_DATAPATHS
    agent = {"metrics_addr": metrics_addr, "metrics_port": metrics_port} if with_agent else None
    from agent.daemon import AgentError

    try:
        state = lifecycle.up(topo, prefix, datapath=datapath, replace=replace, agent=agent,
                             progress=_progress)
    except AgentError as exc:
        hint = ("; another testbed's agent may hold it: pick another --metrics-port, leave "
                "it out (the default takes the next free port), or --no-agent"
                if "in use" in str(exc) else "")
        raise TestbedError(f"{exc}{hint}") from None
    console.print(f"[green]up[/] in {state['build_seconds']} s")
    _print_status(lifecycle.status(prefix))


@testbed_group.command("down")
@PREFIX_OPTION
def testbed_down(prefix):
    """Remove everything `up` made (namespaces, links, pinned maps, state).

    Works after a crashed or interrupted `up`, and does nothing when there is
    nothing to remove.
    """
    result = lifecycle.down(prefix, progress=_progress)
    if result["namespaces"] or result["pins"] or result["state"]:
        console.print(f"[green]testbed '{prefix}' removed[/]")
    else:
        console.print(f"nothing to remove for prefix '{prefix}'")


@testbed_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@PREFIX_OPTION
def testbed_status(as_json, prefix):
    """Hosts with addresses and namespaces; switches with ports, rates, counters and scheme."""
    st = lifecycle.status(prefix)
    if as_json:
        click.echo(json.dumps(st, indent=2))
    else:
        _print_status(st)


@testbed_group.command("demo")
@click.option("--duration", type=float, default=3.0, show_default=True, help="Seconds per iperf3 run.")
@click.option("--parallel", type=click.IntRange(1, 128), default=8, show_default=True,
              help="Flows in the spread test.")
@PREFIX_OPTION
def testbed_demo(duration, parallel, prefix):
    """Show the testbed works: all-pairs ping, TCP across leaves, flows spread over uplinks."""
    from talb import demo

    require_root()
    report = demo.run(prefix, duration=duration, parallel=parallel, say=console.print)
    for note in report.notes:
        console.print(f"    note: {note}")
    _print_howto(prefix)
    if not report.ok:
        _fail("the demo found a problem (see above)")
    console.print("[green]demo passed[/]: the fabric is up for you to use")


def _fmt_bytes(n) -> str:
    if n is None:
        return "-"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def _print_status(st: dict) -> None:
    from netns_topology.units import format_rate

    agent = f"agent pid {st['agent_pid']}" if st.get("agent_pid") else "no agent"
    if st.get("agent_metrics"):
        agent += f" (metrics http://{st['agent_metrics']}/metrics)"
    console.print(f"testbed [cyan]{st['prefix']}[/] is [bold]{st['status']}[/], "
                  f"datapath {st['datapath']}, {agent}, created {st['created']}"
                  + (f", switch ports queueing {st['queueing']}" if st.get("queueing", "bands") != "bands"
                     else ""))
    if st["missing_namespaces"]:
        console.print(f"[yellow]missing namespaces:[/] {', '.join(st['missing_namespaces'])} "
                      f"(`talb testbed down --prefix {st['prefix']}` cleans up)")
    hosts = Table(title="hosts", title_justify="left")
    for col in ("host", "address", "mac", "leaf", "namespace"):
        hosts.add_column(col)
    for h in st["hosts"]:
        hosts.add_row(h["name"], h["ip"], h["mac"], h["leaf"], h["namespace"])
    console.print(hosts)
    def rto_text(ms):
        return f"{ms} ms (route metric rto_min)" if ms is not None else "the kernel's default (200 ms)"
    rto, topo_rto = st.get("rto_min_ms"), st.get("rto_min_topology_ms", st.get("rto_min_ms"))
    console.print("hosts' minimum RTO: " + rto_text(rto)
                  + (f"; set since up, the topology's: {rto_text(topo_rto)}" if rto != topo_rto else ""))
    reg = st.get("regime") or {}
    if reg.get("buffer", "deep") != "deep" or reg.get("ecn") or reg.get("tcp_cc_kernel"):
        console.print(f"regime (set since up): buffers {reg['buffer']}, ECN "
                      f"{'on' if reg.get('ecn') else 'off'}, hosts' tcp_cc {reg.get('tcp_cc')}"
                      f" (docs/experiments.md, Regime)")
    if st.get("timers") and st["datapath"] in PROGRAM_DATAPATHS:
        console.print(_timers_line(st["timers"], st.get("agent_window_s")))
    for sw in st["switches"]:
        set_here = _timers_set(st.get("timers"), sw.get("timers"))
        t = Table(title=f"{sw['name']} ({sw['role']}, ns {sw['namespace']}, scheme {sw['scheme'] or '-'}"
                        + (f"; set: {', '.join(set_here)}" if set_here else "") + ")",
                  title_justify="left")
        for col in ("port", "peer", "kind", "rate", "state", "tx", "rx"):
            t.add_column(col, justify="right" if col in ("tx", "rx") else "left")
        for p in sw["ports"]:
            t.add_row(p["name"], p["peer"], p["kind"], format_rate(p["rate_bps"]),
                      "up" if p["up"] else "[red]down[/]", _fmt_bytes(p["tx_bytes"]),
                      _fmt_bytes(p["rx_bytes"]))
        console.print(t)


def _timers_line(t: dict, agent_window_s: float | None = None) -> str:
    """The timers the fabric's link rate gives (datapath/timers.py), one line."""
    from netns_topology.units import format_rate

    agent = ("" if agent_window_s is None or abs(agent_window_s - t["window_s"]) < 1e-9
             else f" (the running agent's: {agent_window_s * 1e3:g} ms, set)")
    return (f"timers from the link rate (docs/schemes.md): frame slot {t['slot_us']} us "
            f"({t['frame_bytes']} B at {format_rate(t['rate_bps'])}, the slowest multipath link): "
            f"flowlet {t['flowlet_us']} us, CONGA T_dre {t['conga_dre_us']} us / tau "
            f"{t['conga_tau_us']} us / age {t['conga_age_us'] / 1e3:g} ms, agent window "
            f"{t['window_s'] * 1e3:g} ms{agent}")


def _timers_set(derived: dict | None, in_force: dict | None) -> list[str]:
    """``["flowlet_us=300 (derived 1940)"]``: a switch's timers that differ
    from the derived ones (set with --param since)."""
    if not derived or not in_force:
        return []
    out = []
    for field, (key, tfield) in TIMER_FIELDS.items():   # the link rate's (talb/cli_scheme.py)
        if field in in_force and in_force[field] != derived[tfield]:
            out.append(f"{key}={in_force[field]} (derived {derived[tfield]})")
    return out


def _talb_command() -> str:
    """How the user can run this very `talb`: sudo's PATH rarely has the venv."""
    me = Path(sys.argv[0])
    if me.name != "talb":
        return "talb"
    on_path = shutil.which("talb")
    if on_path and Path(on_path).resolve() == me.resolve():
        return "talb"
    return str(me.absolute())


def _print_howto(prefix: str) -> None:
    flag = "" if prefix == paths.DEFAULT_PREFIX else f" --prefix {prefix}"
    talb = _talb_command()
    console.print("\n[bold]next[/]")
    console.print(f"  shell on a host:  sudo {talb} shell h0{flag}    "
                  f"(or: sudo ip netns exec {paths.netns_name(prefix, 'h0')} bash)")
    console.print(f"  status:           sudo {talb} testbed status{flag}")
    from agent.daemon import running_pid

    if running_pid(prefix):
        console.print(f"  live port view:   sudo {talb} top{flag}    "
                      f"(its header gives the agent's Prometheus /metrics address)")
    console.print(f"  TaLB:             sudo {talb} scheme talb{flag}; "
                  f"sudo {talb} send --src h0 --dst h3{flag}; sudo {talb} table{flag}")
    down_alias = "    (or: sudo make testbed-down)" if not flag else ""
    console.print(f"  tear down:        sudo {talb} testbed down{flag}{down_alias}")


# --- shell, scheme ----------------------------------------------------------------

@main.command("shell", context_settings={"ignore_unknown_options": True})
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@PREFIX_OPTION
def shell(node, command, prefix):
    """Open a shell on NODE (h0, leaf0, ...) or run COMMAND there.

    Example: talb shell h0 -- ping -c3 198.18.1.1
    """
    require_root()
    ns = node_namespace(prefix, node)
    argv = list(command) or [os.environ.get("SHELL", "/bin/bash")]
    os.execvp("ip", ["ip", "netns", "exec", ns, *argv])


@main.command("table")
@click.option("--switch", "switch", help="One switch (leaf0, spine1, ...); default: every switch.")
@click.option("--limit", type=int, default=50, show_default=True,
              help="Rows shown per switch (--json shows all).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@PREFIX_OPTION
def table(switch, limit, as_json, prefix):
    """Show the live TaLB tensor table (Table I of the paper) and the decision counters.

    One row per live tensor: the tensor (sender address/tensor_id: ids are
    unique per host only), tensor_len (packets), received packets, the port
    it takes (previous port), layer, age and idle time.
    Reads the pinned maps only; works while traffic flows.
    """
    require_root()
    topo = load_topology_of(prefix)
    names = [sw.name for sw in topo.switches]
    if switch:
        if switch not in names:
            raise TestbedError(f"--switch: no switch {switch!r} in testbed '{prefix}' "
                               f"(switches: {', '.join(names)})")
        names = [switch]
    tables = [_tensor_table(prefix, topo, name) for name in names]
    if as_json:
        click.echo(json.dumps(tables, indent=2))
        return
    for st in tables:
        _print_tensor_table(st, limit)


def _tensor_table(prefix: str, topo, switch: str) -> dict:
    from datapath.control import (TALB_COUNTERS, read_config, read_counters, read_live_layers,
                                  read_ports, read_tensor_table, tensor_occupancy)
    from datapath.maps import SwitchMaps

    port_names = [p.name for p in topo.ports(switch)]  # port_id = position
    try:
        maps = SwitchMaps(paths.pin_dir(prefix, switch))
    except FileNotFoundError as exc:
        raise TestbedError(f"{switch}: no data path maps ({exc})") from None
    try:
        names = {ifindex: (port_names[p["port_id"]] if p["port_id"] < len(port_names)
                           else f"port{p['port_id']}")
                 for ifindex, p in read_ports(maps).items()}
        everything = read_tensor_table(maps, include_done=True)
        rows = [r for r in everything if not r["done"]]
        for r in rows:
            r["prev_port_name"] = names.get(r["prev_port"], f"ifindex {r['prev_port']}")
        counters = read_counters(maps)
        cfg = read_config(maps)
        return {
            "switch": switch, "scheme": cfg["scheme"], "fallback": cfg["fallback_scheme"],
            "entries": len(rows), "done": len(everything) - len(rows),
            "occupancy": tensor_occupancy(maps),
            "limit": cfg["tensor_limit"], "tensors": rows,
            "live_layers": {str(gid): {str(layer): n for layer, n in layers.items()}
                            for gid, layers in read_live_layers(maps).items() if layers},
            "counters": {k: counters.get(k, 0) for k in TALB_COUNTERS},
        }
    finally:
        maps.close()


def _print_tensor_table(st: dict, limit: int) -> None:
    from common.wire import WireTensorKey   # scapy: loaded only when a table is printed

    t = Table(title=f"{st['switch']} (scheme {st['scheme']}, fallback {st['fallback']}): "
                    f"{st['entries']} live tensors (limit {st['limit']}), {st['done']} done "
                    f"(kept for late packets until idle)", title_justify="left")
    # the tensor (sender/id, up to 26 characters) and the port are what a
    # reader looks for: never cut; the counts give way on a narrow terminal
    t.add_column("tensor (source/id)", no_wrap=True, min_width=26)
    t.add_column("len", justify="right")
    t.add_column("received", justify="right")
    t.add_column("previous port", no_wrap=True)
    for col in ("layer", "age", "idle"):
        t.add_column(col, justify="right")
    for r in st["tensors"][:max(0, limit)]:
        t.add_row(str(WireTensorKey(r["src"], r["tensor_id"])), str(r["tensor_len"]),
                  str(r["received"]),
                  r["prev_port_name"], str(r["layer"]), f"{r['age_s'] * 1e3:.1f} ms",
                  f"{r['idle_s'] * 1e3:.1f} ms")
    console.print(t)
    if st["entries"] > limit:
        console.print(f"  ... {st['entries'] - limit} more (--limit, or --json for all)")
    if st["live_layers"]:
        for gid, layers in st["live_layers"].items():
            console.print(f"  group {gid}: live layers "
                          + ", ".join(f"{l}x{n}" for l, n in layers.items()))
    c = st["counters"]
    console.print("  decisions: " + ", ".join(
        f"{k.removeprefix('talb_')} {c[k]}" for k in
        ("talb_hit", "talb_case1", "talb_case2", "talb_threshold", "talb_reroute",
         "talb_fallback", "talb_table_full", "talb_midstream", "talb_late", "talb_completed",
         "talb_aged")))
    console.print("  option: " + ", ".join(
        f"{k.removeprefix('opt_')} {c[k]}" for k in c if k.startswith("opt_"))
        + f"; stripped {c['stripped']}, dropped (position) {c['drop_opt_position']}")


@main.command("scheme")
@click.argument("name", required=False)
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help=param_help())
@click.option("--cluster", metavar="tcp://HOST:PORT",
              help="A fabric attached with `talb attach --cluster`: every machine's switches, "
                   "through its worker at this scheduler (one machine refusing puts the "
                   "others' scheme back).")
@click.option("--list", "list_schemes", is_flag=True,
              help="List every scheme the data path has: where it decides, XDP, parameters "
                   "with defaults and units, paper (no testbed needed).")
@PREFIX_OPTION
def scheme(name, params, cluster, list_schemes, prefix):
    """Show every switch's scheme and its effective parameters, or switch
    them all to NAME at run time (no reload; connections survive)."""
    from datapath.control import SchemeError, parse_params, read_config, scheme_params, set_scheme
    from datapath.maps import SwitchMaps

    if list_schemes:
        if name or params or cluster:
            _fail("--list shows every scheme: it takes no NAME, --param or --cluster")
        return console.print(scheme_table())
    if cluster:
        return _scheme_cluster(prefix, name, params, cluster)
    require_root()
    from testbed import attach as attached_fabric

    if attached_fabric.attached(prefix):
        return _scheme_attached(prefix, name, params)
    datapath = read_state(prefix).get("datapath")
    if datapath not in PROGRAM_DATAPATHS:
        raise TestbedError(f"testbed '{prefix}' forwards with the kernel bridge "
                           f"(--datapath bridge): it has no scheme to show or set")
    if params and not name:
        _fail("--param needs a scheme NAME (talb scheme drill --param d=2)")
    try:
        parsed = parse_params(params)
    except SchemeError as exc:
        _fail(str(exc))
    if name and datapath == "xdp":
        from datapath.xdp import XdpError, check_scheme

        try:
            check_scheme(name, parsed.get("fallback"), option="scheme")
        except XdpError as exc:
            _fail(str(exc))
    from datapath import timers

    topo = load_topology_of(prefix)
    derived = timers.for_topology(topo)
    for key, value in parsed.items():   # =auto: the value the link rate gives
        if value.lower() == "auto" and key in timers.PARAM_FIELDS:
            parsed[key] = str(getattr(derived, timers.PARAM_FIELDS[key]))
    derived_of = {key: getattr(derived, field) for key, field in timers.PARAM_FIELDS.items()}
    for sw in topo.switches:
        maps = SwitchMaps(paths.pin_dir(prefix, sw.name))
        try:
            if name:
                try:
                    set_scheme(maps, name, parsed)
                except SchemeError as exc:
                    _fail(str(exc))
            # a timer that is not the link rate's was set: say so, and what it would be
            shown = ", ".join(f"{k}={v}" + (f" (set; derived {derived_of[k]})"
                                             if k in derived_of and v != derived_of[k] else "")
                              for k, v in scheme_params(maps).items())
            console.print(f"{sw.name}: {read_config(maps)['scheme']}"
                          + (f" ({shown})" if shown else ""))
        finally:
            maps.close()
    console.print(_timers_line(derived.to_dict()))


def _scheme_args(scheme_name: str | None, params) -> dict:
    """--param's pairs, checked here before any switch is touched."""
    from datapath.control import SchemeError, parse_params, scheme_id_of

    try:
        parsed = parse_params(params)
        if scheme_name:
            scheme_id_of(scheme_name)
    except (SchemeError, ValueError) as exc:
        _fail(str(exc))
    if params and not scheme_name:
        _fail("--param needs a scheme NAME (talb scheme drill --param d=2)")
    return parsed


def _scheme_attached(name: str, scheme_name: str | None, params) -> None:
    """`talb scheme` on a fabric `talb attach` loaded under ``name``."""
    from datapath.control import SchemeError
    from testbed.attach import set_scheme

    parsed = _scheme_args(scheme_name, params)
    try:
        got = set_scheme(name, scheme_name, parsed)
    except SchemeError as exc:
        _fail(str(exc))
    for sw, scheme_now in got["schemes"].items():
        console.print(f"{sw}: {scheme_now}")


def _scheme_cluster(name: str, scheme_name: str | None, params, address: str) -> None:
    """`talb scheme --cluster` on a fabric `talb attach --cluster` loaded."""
    from testbed import attach_cluster

    parsed = _scheme_args(scheme_name, params)
    for machine, schemes in attach_cluster.set_scheme(name, scheme_name, parsed, address).items():
        for sw, scheme_now in schemes.items():
            console.print(f"{sw}: {scheme_now} (machine {machine})")


@main.command("send")
@click.option("--src", "srcs", help="Sending host(s), comma-separated: h0 or h0,h1,h2.")
@click.option("--dst", help="Receiving host (runs the verifying receiver on this machine).")
@click.option("--to", "to", metavar="IP:PORT",
              help="Instead of --dst: send to a `talb send --listen` on another machine "
                   "(e.g. 10.0.0.2:7000); it verifies the bytes and prints its own report.")
@click.option("--listen", is_flag=True,
              help="Only the verifying receiver, in --host, for senders on another machine "
                   "(`talb send --src H --to IP:PORT` there); prints every tensor it got.")
@click.option("--host", help="With --listen: the host the receiver runs in.")
@click.option("--tensors", type=int, default=12, show_default=True, help="Tensors per sender.")
@click.option("--layers", type=int, default=3, show_default=True,
              help="Layers the tensors cycle through (0 = front = highest priority).")
@click.option("--size", default="200kb", show_default=True, help="Bytes per tensor, e.g. 200kb, 1mb.")
@click.option("--senders", type=int, default=1, show_default=True,
              help="TCP connections (worker processes) per source host, at most 16; with "
                   "--listen: the connections to wait for, all senders together.")
@click.option("--port", type=int, default=7000, show_default=True, help="Receiver's TCP port.")
@click.option("--pcap-dir", type=click.Path(file_okay=False),
              help="Keep the uplink captures here (default: a temporary directory, removed at "
                   "the end). Not with --datapath xdp: nothing to capture.")
@click.option("--timeout", type=float, default=None,
              help="Seconds for the whole exchange [300; with --listen 600, senders included].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@PREFIX_OPTION
def send_cmd(srcs, dst, to, listen, host, tensors, layers, size, senders, port, pcap_dir, timeout,
             as_json, prefix):
    """Send tagged tensors over TCP and show each tensor's FCT and uplink.

    A smoke tool for TaLB: the receiver checks every byte (SHA-256), and a
    tensor (source address, tensor id) seen on more than one uplink is
    flagged as split (tensor integrity broken). Its uplinks are seen by
    captures on the senders' leaf uplinks and by the leaves' own record of
    the ports each tagged tensor left by; with --datapath xdp no capture
    sees a redirected frame, so the record alone is read. A tensor neither
    saw is "not checked" (never counted as unsplit); a port the captures
    saw that the record lacks fails the run. Several sources in one run and
    several runs side by side are fine: each host's ids are unique, and
    tensors are told apart by their source.

    \b
    Across two machines (a fabric attached on each, docs/attach.md):
      B:  talb send --listen --prefix lab --host hb --port 7000
      A:  talb send --prefix lab --src ha --to 10.0.0.2:7000
    """
    from netns_topology import parse_size
    from talb import send as send_mod

    say = err_console.print if as_json else console.print
    if listen:
        for flag, value in (("--src", srcs), ("--dst", dst), ("--to", to)):
            if value:
                _fail(f"{flag}: not with --listen (the receiver alone; --host names where it runs)")
        if not host:
            _fail("--listen: needs --host, the host the receiver runs in")
        require_root()
        rep = send_mod.listen(prefix, host, port=port, connections=senders, say=say,
                              timeout=timeout or 600.0)
        if as_json:
            click.echo(json.dumps({"ok": rep.ok, "errors": rep.errors, "tensors": rep.tensors},
                                  indent=2))
        else:
            _print_listen(rep)
        if not rep.ok:
            _fail("some tensors were lost or corrupted (see above)")
        return
    if host:
        _fail("--host: only with --listen (senders are --src)")
    if not srcs:
        _fail("--src: give the sending host(s)")
    if bool(dst) == bool(to):
        _fail("--dst/--to: give one: --dst HOST (receiver here) or --to IP:PORT "
              "(a `talb send --listen` elsewhere)")
    require_root()
    src_list = [s.strip() for s in srcs.split(",") if s.strip()]
    if to:
        report = send_mod.send_to(prefix, src_list, to, tensors=tensors, layers=layers,
                                  size=parse_size(size), senders=senders, pcap_dir=pcap_dir,
                                  say=say, timeout=timeout or 300.0)
    else:
        report = send_mod.run(prefix, src_list, dst, tensors=tensors, layers=layers,
                              size=parse_size(size), senders=senders, port=port,
                              pcap_dir=pcap_dir, say=say, timeout=timeout or 300.0)
    if as_json:
        click.echo(json.dumps({"ok": report.ok, "pcap_dir": report.pcap_dir,
                               "integrity": report.integrity(),
                               "fct_by_layer": report.fct_by_layer(),
                               "tensors": [dict(vars(t)) for t in report.tensors]}, indent=2))
    else:
        _print_send(report)
        if to:
            console.print(f"  (the receiver at {to} verifies the bytes: see its report)")
    if not report.ok:
        _fail("some tensors were lost, corrupted or split across uplinks, or the leaves' "
              "record disagrees with the captures (see above)")


def _print_listen(rep) -> None:
    t = Table(title="tensors received", title_justify="left")
    for col in ("src", "worker", "seq", "layer", "bytes", "receive", "ok"):
        t.add_column(col, justify="right" if col in ("bytes", "receive") else "left")
    for r in rep.tensors:
        t.add_row(r["src"], str(r["worker"]), str(r["seq"]), str(r["layer"]), str(r["bytes"]),
                  f"{r['recv_s'] * 1e3:.1f} ms", "yes" if r["ok"] else "[red]NO[/]")
    console.print(t)
    ok = sum(r["ok"] for r in rep.tensors)
    console.print(f"  {ok}/{len(rep.tensors)} tensors verified, {sum(r['bytes'] for r in rep.tensors)} "
                  f"bytes, from {rep.connections} connection(s)"
                  + "".join(f"\n  [red]{e}[/]" for e in rep.errors))


def _print_send(report) -> None:
    t = Table(title="tensors", title_justify="left")
    for col in ("worker", "src", "tensor_id", "layer", "bytes", "pkts", "FCT", "uplink", "ok"):
        t.add_column(col, justify="right" if col in ("bytes", "pkts", "FCT") else "left")
    for r in report.tensors:
        uplinks = "+".join(r.ports) or ("local" if r.local else "[yellow]not checked[/]")
        t.add_row(str(r.worker), r.src, f"{r.tensor_id:#010x}", str(r.layer), str(r.bytes),
                  str(r.len_pkts), f"{r.fct_s * 1e3:.1f} ms" if r.fct_s is not None else "-",
                  f"[red]{uplinks}[/]" if r.split or r.disagrees else uplinks,
                  "yes" if r.ok else "[red]NO[/]")
    console.print(t)
    for layer, s in report.fct_by_layer().items():
        console.print(f"  layer {layer}: {s['n']} tensors, FCT mean {s['mean_s'] * 1e3:.1f} ms, "
                      f"p99 {s['p99_s'] * 1e3:.1f} ms")
    ok = sum(r.ok for r in report.tensors)
    console.print(f"  {ok}/{len(report.tensors)} tensors verified; " + _integrity_line(report)
                  + (f"; captures in {report.pcap_dir}" if report.pcap_dir else ""))
    unseen = {r.leaf for r in report.unchecked}
    for leaf, why in report.no_record.items():
        if leaf in unseen:      # (where the captures saw every tensor, no matter)
            console.print(f"  [yellow]{leaf} has no record of its tensors' uplinks: {why}[/]")
    for r in report.disagree[:5]:
        console.print(f"  [red]{r.key}: captures saw {'+'.join(sorted(r.uplinks))}, its leaf "
                      f"recorded {'+'.join(r.recorded)}[/]")
    # (a leaf without a record is named once, above)
    for r in [r for r in report.unchecked if r.leaf not in report.no_record][:3]:
        console.print(f"  [yellow]{r.key} not checked: {r.unrecorded or 'no capture saw it'}[/]")


def _integrity_line(report) -> str:
    """The split check's summary: never "0 split" for tensors nobody saw."""
    n = report.integrity()
    views = ", ".join(f"{k} {v}" for k, v in sorted(n["seen_by"].items()))
    if n["checked"] == 0:
        return (f"split across uplinks [yellow]not checked[/] (no capture or record saw any of "
                f"the {n['tensors']} tensors)")
    text = f"{n['split']} split across uplinks (seen by: {views})"
    if n["split"]:
        text = f"[red]{text}[/]"
    if n["not_checked"]:
        text += f", [yellow]{n['not_checked']} not checked[/]"
    if n["disagree"]:
        text += f", [red]{n['disagree']} where captures and record disagree[/]"
    return text


# --- bench --------------------------------------------------------------------

from talb import cli_bench  # noqa: E402


@main.group("bench", cls=_Errors, invoke_without_command=True)
@cli_bench.with_sweep
def bench_group():
    """Benchmarks (numbers, not pass/fail), and the paper's experiments as sweeps:

    \b
        talb bench --preset quick            (fig10, fig11, fig9, fig4, ablation, quick-ci)
        talb bench --schemes ecmp,talb --loads 0.2,0.8 --seeds 5 --out results/mine

    Runs every (scheme, load, seed, ...) with `talb run` on one fabric per
    topology, resumes an interrupted sweep, and writes runs.csv, points with
    95% intervals, PNGs and summary.md (docs/experiments.md).
    """


@bench_group.command("datapath")
@click.option("--repeat", type=int, default=1_000_000, show_default=True,
              help="BPF_PROG_TEST_RUN repetitions per measurement.")
@click.option("--duration", type=float, default=5.0, show_default=True, help="Seconds per iperf3 run.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the results here.")
def bench_datapath(repeat, duration, json_out):
    """(a) ns/packet of the ECMP program vs an empty redirect program;
    (b) iperf3 across leaf-spine-leaf, BPF forwarding vs the kernel bridge, unshaped."""
    from bench.datapath import run_all

    require_root()
    results = run_all(repeat=repeat, duration=duration, say=console.print)
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=2))
        console.print(f"results written to {json_out}")


@bench_group.command("archive")
@click.argument("out_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
def bench_archive(out_dir):
    """Pack a sweep's run files (DIR/runs/*.json) that DIR's archive parts
    do not hold yet into the next part: runs.tar.xz, then runs-2.tar.xz, ...

    Parts are never rewritten, so committing more runs of a sweep adds one
    file of their size; a run made again (other bytes) goes into the new
    part, which wins. `--report-only` reads every part; `tar -xJf` each,
    oldest first, to unpack them (docs/experiments.md, "Committed results").
    """
    from experiments.sweep.archive import ArchiveError, pack_new_runs

    try:
        res = pack_new_runs(out_dir, say=lambda m: console.print(f"  [dim]•[/] {m}"))
    except ArchiveError as exc:
        raise click.ClickException(str(exc)) from None
    if res["part"] is None:
        console.print(f"nothing to pack: the {res['kept']} run(s) under {out_dir}/runs are "
                      "archived already, as they are")
        return
    size = res["part"].stat().st_size / 1e6
    console.print(f"{res['part']}: {res['new']} new and {res['replaced']} changed run(s), "
                  f"{size:.1f} MB; {res['kept']} already archived as they are")


@bench_group.command("xdp")
@click.option("--repeat", type=int, default=1_000_000, show_default=True,
              help="BPF_PROG_TEST_RUN repetitions for the program cost.")
@click.option("--frames", type=int, default=2_000_000, show_default=True,
              help="Frames forwarded (redirect executed) per measurement.")
@click.option("--rounds", type=int, default=3, show_default=True,
              help="Rounds: the program cost is their best, forwarding their median "
                   "(every row once per round).")
@click.option("--size", type=int, default=64, show_default=True, help="Frame size, bytes.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="Also write the results here.")
def bench_xdp(repeat, frames, rounds, size, json_out):
    """Packets/s per core of the XDP entry point against the TC one and an
    empty XDP_REDIRECT, in one run: (a) the program's cost under
    BPF_PROG_TEST_RUN; (b) forwarding with the redirect executed, one CPU
    (docs/architecture.md, "XDP entry point"). Not a pass/fail test."""
    from bench.datapath_xdp import measure

    require_root()
    results = measure(repeat=repeat, frames=frames, rounds=rounds, size=size, say=console.print)
    if json_out:
        Path(json_out).write_text(json.dumps(results, indent=2))
        console.print(f"results written to {json_out}")


from talb import cli_faults  # noqa: E402
cli_faults.register(bench_group)
from talb import cli_build  # noqa: E402
cli_build.register(bench_group)
from talb import cli_shaped  # noqa: E402
cli_shaped.register(bench_group)
from talb import cli_agent  # noqa: E402
cli_agent.register(main)
from talb import cli_attach  # noqa: E402
cli_attach.register(main)
from talb import cli_run  # noqa: E402
cli_run.register(main)
from talb import cli_monitoring  # noqa: E402
cli_monitoring.register(main)
from talb import cli_tag  # noqa: E402
cli_tag.register(main)

if __name__ == "__main__":
    main()
