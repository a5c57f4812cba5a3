"""`talb monitoring up|down|status|targets` and `talb report`, registered on
the main command group by :func:`register` (talb/cli.py calls it)."""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from netns_topology.state import require_root
from talb import monitoring

console = Console(highlight=False, soft_wrap=True)


def _say(msg: str) -> None:
    console.print(f"  [dim]•[/] {msg}")


@click.group("monitoring")
def monitoring_group():
    """Prometheus (+ Grafana when installed) on 127.0.0.1 for the running testbeds and runs.

    Targets are found every second from the agents' snapshots and the runs'
    endpoint files, so testbeds and runs started later are scraped too.
    """


@monitoring_group.command("up")
@click.option("--prometheus-port", type=int, default=monitoring.DEFAULT_PROMETHEUS_PORT,
              show_default=True, help="Prometheus' web port (127.0.0.1).")
@click.option("--grafana-port", type=int, default=monitoring.DEFAULT_GRAFANA_PORT,
              show_default=True, help="Grafana's web port (127.0.0.1), when Grafana is installed.")
@click.option("--no-grafana", is_flag=True, help="Do not start Grafana even if installed.")
def monitoring_up(prometheus_port, grafana_port, no_grafana):
    """Start Prometheus, the target refresher and Grafana; print the URLs."""
    require_root()  # /run/talb is root's, and so are the testbeds it watches
    try:
        state = monitoring.up(prometheus_port=prometheus_port, grafana_port=grafana_port,
                              grafana=not no_grafana, progress=_say)
    except monitoring.MonitoringError as exc:
        raise click.ClickException(str(exc)) from None
    console.print("[green]monitoring up[/]")
    urls = state["urls"]
    console.print(f"  Prometheus: {urls['prometheus']}  (targets: {urls['prometheus']}/targets)")
    if "grafana" in urls:
        console.print(f"  Grafana:    {urls['grafana']}  (folder talb; admin login admin/admin)")
        for uid, name in (("talb-fabric", "Fabric"), ("talb-talb", "TaLB"),
                          ("talb-experiment", "Experiment")):
            console.print(f"    {name + ':':12}{urls['grafana']}/d/{uid}")
    console.print(f"  data:       {state['dir']}   stop: talb monitoring down (make monitoring-down)")


@monitoring_group.command("down")
def monitoring_down():
    """Stop what `talb monitoring up` started (by pid); the recorded data stays."""
    require_root()
    result = monitoring.down(progress=_say)
    console.print("[green]monitoring stopped[/]" if result["stopped"] else "monitoring was not running")


@monitoring_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def monitoring_status(as_json):
    """What runs, and the targets Prometheus scrapes."""
    st = monitoring.status()
    if as_json:
        click.echo(json.dumps(st, indent=2))
        return
    if not st.get("urls"):
        console.print("monitoring is not running (talb monitoring up)")
        return
    for name, p in st["processes"].items():
        console.print(f"{name}: pid {p['pid']} {'running' if p['running'] else '[red]not running[/]'} "
                      f"(log {p['log']})")
    for name, url in st["urls"].items():
        console.print(f"{name}: {url}")
    t = Table(title="targets", title_justify="left")
    for col in ("job", "target", "testbed"):
        t.add_column(col)
    for job, targets in st["targets"].items():
        for tg in targets:
            t.add_row(job, tg["target"], tg.get("testbed", "-"))
    console.print(t)


@monitoring_group.command("targets")
@click.option("--follow", is_flag=True, help="Keep refreshing every second while monitoring is up "
                                             "(what `up` runs in the background).")
def monitoring_targets(follow):
    """Rewrite Prometheus' target files from the running agents and runs now."""
    if follow:
        monitoring.follow_targets()
        return
    found = monitoring.write_targets()
    for job, targets in found.items():
        console.print(f"{job}: {', '.join(targets) or '-'}")


@click.command("report")
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Directory for the PNGs [<first RESULTS without .json>-report].")
def report(results, out_dir):
    """Render a finished run's (or a sweep's) key panels to PNG from its results files.

    RESULTS: results JSON files of `talb run`, or directories holding them.
    For readers without Grafana: iteration time, tensor FCT by class and
    layer, background FCT, and (for several runs) FCT by scheme and load.
    """
    from talb import report as rep

    try:
        written = rep.render(list(results), out_dir)
    except rep.ReportError as exc:
        raise click.ClickException(str(exc)) from None
    for path in written:
        console.print(f"wrote {path}")


def register(main: click.Group) -> None:
    main.add_command(monitoring_group)
    main.add_command(report)
