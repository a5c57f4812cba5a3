"""A real Open MPI job on the testbed's hosts (`talb run --client mpi`,
docs/workload.md "Real MPI jobs").

How it launches: ``mpirun`` runs inside the first rank host's network
namespace (``ip netns exec <prefix>-<host>``), one rank per host (``--host
IP,IP,...``, each host one slot), ranks on the other hosts started through
an rsh stand-in (``--mca plm_rsh_agent``): a script written for the job
that maps each host's address to its namespace and runs the command Open
MPI gives it (the ``orted``) with ``ip netns exec``. The ranks talk over
``btl tcp`` (``pml ob1``, never a UCX transport) on the hosts' ``eth0``;
the out-of-band channel (``oob tcp``) too. Every rank's TCP btl listens on
a port of a known range (``btl_tcp_port_min_v4``/``btl_tcp_port_range_v4``:
:data:`DEFAULT_PORT_MIN`, :data:`DEFAULT_PORT_RANGE` ports), so that the
MPI data connections are exactly the connections with one end in it; the
out-of-band traffic uses other (ephemeral) ports.

The ranks run workload/mpi_rank.py under the system ``/usr/bin/python3``
with Debian's mpi4py (``make testbed`` installs openmpi-bin and
python3-mpi4py). ``mpirun`` is started in a session of its own; on a
timeout or an error that session's process group is ended (SIGTERM, then
SIGKILL), and every process still in the session afterwards (an ``orted``,
a rank) is ended by its pid: nothing is left behind.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from common import paths
from common.excerpt import shown

RANK_PROGRAM = Path(__file__).resolve().parent / "mpi_rank.py"
#: the ranks' Python: the system's, where Debian's mpi4py is
RANK_PYTHON = "/usr/bin/python3"
#: the ranks' TCP btl listens on [min, min + range): the MPI data connections' port range
DEFAULT_PORT_MIN, DEFAULT_PORT_RANGE = 7600, 64
INSTALL_HINT = ("`sudo make testbed` (scripts/setup.sh) installs it from Debian: openmpi-bin "
                "and python3-mpi4py")


class MpiError(RuntimeError):
    """The MPI job could not start or failed; the message says why."""


@dataclass
class MpiHost:
    name: str
    ip: str
    netns: str


@dataclass
class MpiResult:
    """What the job gave: rank 0's JSON and how the job was launched."""

    output: dict
    hosts: list[str]
    argv: list[str]
    port_range: tuple[int, int]
    wall_s: float
    stderr: str = ""
    params: dict = field(default_factory=dict)


def check_tools(mpirun: str | None = None, python: str = RANK_PYTHON) -> str:
    """The mpirun to use; MpiError saying how to install Open MPI and mpi4py
    when either is missing."""
    found = mpirun or shutil.which("mpirun")
    if not found or not os.access(found, os.X_OK):
        raise MpiError(f"--client mpi: mpirun not found (Open MPI); {INSTALL_HINT}")
    probe = subprocess.run([python, "-c", "import mpi4py"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise MpiError(f"--client mpi: {python} cannot import mpi4py; {INSTALL_HINT}")
    return found


def check_ports(port_min: int, port_range: int, ranks: int) -> tuple[int, int]:
    """(lo, hi) inclusive of the btl's listening ports; ValueError naming the flag."""
    if not (isinstance(port_min, int) and 1024 <= port_min <= 65535 - port_range):
        raise ValueError(f"--mpi-ports: the first port must be in 1024..{65535 - port_range}, "
                         f"got {shown(port_min)}")
    if not (isinstance(port_range, int) and ranks <= port_range <= 4096):
        raise ValueError(f"--mpi-ports: the range must hold at least one port per rank "
                         f"({ranks}) and at most 4096, got {shown(port_range)}")
    return port_min, port_min + port_range - 1


def rank_hosts(prefix: str, topo, names: Sequence[str]) -> list[MpiHost]:
    """The hosts named, with their address and namespace; ValueError naming
    --mpi-hosts for fewer than 2 hosts, an unknown one or one named twice."""
    names = list(names)
    known = {h.name: h for h in topo.hosts}
    if len(names) < 2:
        raise ValueError(f"--mpi-hosts: an MPI job across the fabric needs at least 2 hosts, "
                         f"got {shown(','.join(names) or 'none')}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--mpi-hosts: no host {', '.join(unknown)} in the fabric (hosts: "
                         f"{', '.join(known)}), got {shown(','.join(names))}")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--mpi-hosts: one rank per host, {', '.join(dup)} named twice, got "
                         f"{','.join(names)!r}")
    return [MpiHost(n, known[n].ip, paths.netns_name(prefix, n)) for n in names]


def rsh_agent_script(hosts: Sequence[MpiHost]) -> str:
    """The rsh stand-in: ``agent HOST COMMAND...`` runs COMMAND through
    /bin/sh inside HOST's namespace (HOST an address of the job's hosts, as
    mpirun's --host names them, or its name)."""
    cases = "\n".join(f"    {shlex.quote(h.ip)}|{shlex.quote(h.name)}) ns={shlex.quote(h.netns)} "
                      f"name={shlex.quote(h.name)} ;;" for h in hosts)
    return f"""#!/bin/sh
# talb: Open MPI's rsh agent for one job (workload/mpi_job.py): no ssh, the
# testbed's hosts are network namespaces of this machine.
host="$1"; shift
case "$host" in
{cases}
    *) echo "talb mpi rsh agent: unknown host $host" >&2; exit 255 ;;
esac
# its own host name (UTS namespace): Open MPI names its session directories
# in /tmp after the host, and daemons of "different hosts" sharing one name
# raced on them (launches failed now and then)
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$name" "$*"
"""


def mpirun_argv(mpirun: str, hosts: Sequence[MpiHost], agent: Path, ports: tuple[int, int],
                program: Sequence[str]) -> list[str]:
    lo, hi = ports
    mca = {"plm_rsh_agent": str(agent), "pml": "ob1", "btl": "tcp,self",
           "btl_tcp_if_include": "eth0", "oob_tcp_if_include": "eth0",
           "btl_tcp_port_min_v4": str(lo), "btl_tcp_port_range_v4": str(hi - lo + 1),
           # every "host" is this machine: a rank per host, none pinned to a core
           "rmaps_base_oversubscribe": "1",
           # each daemon talks to mpirun directly: ORTE's default routing tree once
           # failed to launch here ("does not know how to route a message to the
           # specified daemon"); with one daemon per host the tree saves nothing
           "routed": "direct"}
    argv = [mpirun, "--allow-run-as-root", "-np", str(len(hosts)),
            "--host", ",".join(f"{h.ip}:1" for h in hosts), "--map-by", "node",
            "--bind-to", "none"]
    for k, v in mca.items():
        argv += ["--mca", k, v]
    return argv + list(program)


def _session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (the job's), by /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d))
    return out


def end_session(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """End mpirun's process group and every process left in its session,
    by pid: SIGTERM, then SIGKILL after ``grace_s``; mpirun reaped."""
    sid = proc.pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is None:
            try:
                os.killpg(sid, sig)
            except ProcessLookupError:
                pass
        for pid in _session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (proc.poll() is None or _session_pids(sid)):
            time.sleep(0.05)
        if proc.poll() is not None and not _session_pids(sid):
            break
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass


def run_job(prefix: str, topo, host_names: Sequence[str], spec: dict, *,
            port_min: int = DEFAULT_PORT_MIN, port_range: int = DEFAULT_PORT_RANGE,
            timeout_s: float = 600.0, mpirun: str | None = None,
            on_start=None) -> MpiResult:
    """Run workload/mpi_rank.py with ``spec`` as an Open MPI job, one rank per
    host of ``host_names`` (rank i on host i; mpirun in the first host's
    namespace); rank 0's JSON in the result. ``on_start(proc)``: called once
    mpirun runs (its pid is the job's session). MpiError when it fails or
    passes ``timeout_s``; every process of the job ended on every path."""
    hosts = rank_hosts(prefix, topo, host_names)
    ports = check_ports(port_min, port_range, len(hosts))
    mpirun = check_tools(mpirun)
    work = Path(tempfile.mkdtemp(prefix="talb-mpi-"))
    proc = None
    try:
        os.chmod(work, 0o755)
        agent = work / "rsh-agent"
        agent.write_text(rsh_agent_script(hosts))
        agent.chmod(0o755)
        spec_file = work / "spec.json"
        spec_file.write_text(json.dumps(spec))
        program = [RANK_PYTHON, str(RANK_PROGRAM), str(spec_file)]
        argv = mpirun_argv(mpirun, hosts, agent, ports, program)
        # mpirun in the first host's namespace, under that host's name (see the agent)
        full = ["ip", "netns", "exec", hosts[0].netns, "unshare", "--uts",
                "/bin/sh", "-c", 'hostname "$0" && exec "$@"', hosts[0].name, *argv]
        t0 = time.monotonic()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
        env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin"
        proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, cwd=str(work), env=env)
        if on_start:
            on_start(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            end_session(proc)
            raise MpiError(f"the MPI job took longer than {timeout_s:g} s and was ended "
                           f"({shlex.join(full)})") from None
        wall = time.monotonic() - t0
        end_session(proc)            # anything the job left (it should leave nothing)
        line = next((x for x in reversed(out.splitlines()) if x.startswith("{")), None)
        if proc.returncode != 0 or line is None:
            tail = "\n".join((err or out).strip().splitlines()[-12:])
            raise MpiError(f"mpirun exited {proc.returncode} on {hosts[0].name} "
                           f"({', '.join(h.name for h in hosts)}): {tail or 'no output'}")
        return MpiResult(json.loads(line), [h.name for h in hosts], full, ports, wall, err)
    finally:
        if proc is not None:
            end_session(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        shutil.rmtree(work, ignore_errors=True)
