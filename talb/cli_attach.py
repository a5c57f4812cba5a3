"""`talb attach` and `talb detach`: talb on a fabric it did not build
(testbed/attach.py, docs/attach.md). Registered by talb/cli.py."""
from __future__ import annotations

import click
from rich.console import Console

from agent.config import DEFAULT_METRICS_PORT
from talb.cli_scheme import SCHEME_CHOICES

console = Console(highlight=False)


def _progress(msg: str) -> None:
    from rich.markup import escape

    console.print(f"  [dim]•[/] {escape(msg)}")


@click.command("attach")
@click.option("--fabric", "fabric_file", required=True, type=click.Path(dir_okay=False),
              help="The fabric file (YAML): switches, their ports and what each faces, hosts "
                   "(docs/attach.md; example topologies/attach/mininet.yaml).")
@click.option("--scheme", help=f"Load-balancing scheme instead of the file's: {SCHEME_CHOICES} "
                               "(switch later with `talb scheme --prefix NAME`).")
@click.option("--agent/--no-agent", "with_agent", default=True, show_default=True,
              help="Start the PCM agent for the attached switches.")
@click.option("--metrics-addr", default="127.0.0.1", show_default=True,
              help="Address of the agent's Prometheus /metrics endpoint.")
@click.option("--metrics-port", type=int, default=None,
              help=f"The agent's /metrics port [default: {DEFAULT_METRICS_PORT} or the next free one].")
@click.option("--cluster", metavar="tcp://HOST:PORT",
              help="A fabric over several machines (every switch names its machine:): attach "
                   "each machine's part through the Dask worker of that machine (its --name, "
                   "or its host name) at this scheduler; a part that fails undoes the others.")
@click.option("--machine", metavar="NAME",
              help="Instead of --cluster: attach only this machine's part of such a file, here.")
def attach_cmd(fabric_file, scheme, with_agent, metrics_addr, metrics_port, cluster, machine):
    """Load talb on a fabric it did not build (real machines, Mininet, your
    own scripts): the switch program at ingress of every described port,
    forwarding groups from the described neighbours, the host tagger where a
    host's namespace is given, and the agent. Everything done is recorded in
    /run/talb/NAME/attach.json; `talb detach --name NAME` undoes exactly that.
    Priority bands go where the file's queue: asks (docs/attach.md). A
    failed attach undoes itself."""
    from netns_topology.attach_spec import read_fabric_file
    from testbed.attach import attach

    fabric = read_fabric_file(fabric_file)
    agent = {"metrics_addr": metrics_addr, "metrics_port": metrics_port} if with_agent else None
    machines = fabric.machines()
    if cluster and machine:
        raise click.UsageError("--cluster attaches every machine's part, --machine one: give one")
    if (cluster or machine) and not machines:
        raise click.UsageError(f"--{'cluster' if cluster else 'machine'}: {fabric_file} names no "
                               f"machines (give every switch a machine:)")
    if machines and not (cluster or machine):
        raise click.UsageError(f"{fabric_file} spreads over machines {', '.join(machines)} "
                               f"(its switches' machine:): attach with --cluster tcp://HOST:PORT, "
                               f"or one machine's part here with --machine NAME")
    if cluster:
        return _attach_cluster(cluster, fabric, scheme, agent)
    if machine:
        fabric = fabric.part(machine)
    state = attach(fabric, scheme=scheme, agent=agent, progress=_progress)
    hosts = ", ".join(state["hosts"]) or "none"
    console.print(f"attached '{fabric.name}': {len(state['switches'])} switches, scheme "
                  f"{state['scheme']}, tagger on hosts: {hosts}; "
                  f"`talb send --prefix {fabric.name} --src H --dst H`, "
                  f"`talb scheme NAME --prefix {fabric.name}`, `talb detach --name {fabric.name}`")


def _attach_cluster(address, fabric, scheme, agent) -> None:
    from testbed import attach_cluster

    rec = attach_cluster.attach(address, fabric, scheme=scheme, agent=agent, progress=_progress)
    for m, part in rec["parts"].items():
        console.print(f"{m}: attached {', '.join(part['switches'])} (scheme {part['scheme']}, "
                      f"tagger on hosts: {', '.join(part['hosts']) or 'none'}) in "
                      f"{part['seconds']:.1f} s on {part['hostname']}")
    console.print(f"attached '{fabric.name}' on {len(rec['parts'])} machines; "
                  f"`talb scheme NAME --prefix {fabric.name} --cluster {address}`, "
                  f"`talb detach --name {fabric.name} --cluster {address}`")


@click.command("detach")
@click.option("--name", default="attach", show_default=True,
              help="The attached fabric's name (its file's 'name').")
@click.option("--cluster", metavar="tcp://HOST:PORT",
              help="Attached with --cluster: detach every machine's part through the workers "
                   "of the machines that attached them, at this scheduler.")
def detach_cmd(name, cluster):
    """Undo `talb attach`: stop its agent, remove its filters, the bands it
    installed (the port gets the kernel's default qdisc back), its pins and
    the namespace names it gave; qdiscs, interfaces and addresses it did
    not create stay as they were."""
    from testbed.attach import attached, detach

    if cluster:
        from testbed import attach_cluster

        got = attach_cluster.detach(name, cluster, progress=_progress)
        for m, r in got.items():
            console.print(f"{m}: " + ("nothing attached" if r.get("nothing") else
                                      f"detached {', '.join(r['switches'])}"
                                      + (", agent stopped" if r["agent"] else "")))
        console.print(f"detached '{name}' on {len(got)} machines")
        return
    from common import paths

    if not attached(name) and paths.cluster_attach_file(name).exists():
        raise click.UsageError(f"'{name}' was attached over a cluster: `talb detach --name {name} "
                               f"--cluster tcp://HOST:PORT`")
    done = detach(name, progress=_progress)
    console.print(f"detached '{name}': {len(done['switches'])} switches, {len(done['hosts'])} hosts"
                  + (f", bands on {len(done['qdiscs'])} ports" if done["qdiscs"] else "")
                  + (", agent stopped" if done["agent"] else ""))


def register(main: click.Group) -> None:
    main.add_command(attach_cmd)
    main.add_command(detach_cmd)
