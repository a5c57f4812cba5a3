"""Faults injected into a training run (`talb run --fault SPEC`).

    SPEC = KIND@AT[:KEY=VALUE[,KEY=VALUE...]]

``AT``: when, counted from the moment training starts (every node ready,
released together with the background: the same instant into the
background's plan at every scheme of a seed, however long the nodes took to
start) (``2s``, ``500ms``, ``2``: seconds). Every fault but ``none`` lasts ``for``
(default 1 s) and is then undone; the run goes on throughout. Kinds:

  none            nothing: the same measurement on an undisturbed run (a control);
                  ``for``: the duration of the fault it controls (the recovery
                  measure treats the run as disturbed that long; default 0)
  uplink-down     one leaf-spine link down, then up (``leaf``, ``spine``: leaf0, spine0)
  spine-down      every port of a spine down, then up (``spine``: spine0)
                  Both take ``agent``: ``run`` (default: the agent takes the dead
                  ports out of the groups within ms) or ``stop`` (the agent is
                  SIGSTOPped just before the links go down and SIGCONTed just
                  after they are up again: nothing reacts, the dead ports stay
                  in every forwarding group, and what the switches send there
                  is lost -- a fault that must hurt)
  agent-kill      the PCM agent SIGKILLed, started again after ``for`` with its settings
  scheme          every switch switched to scheme ``to`` (ecmp), back after ``for``
  table-full      every switch's TaLB tensor table limited to ``limit`` (16) live
                  entries and filled past it: from a host the run does not use on
                  each leaf, ``rate`` (500) packets/s of valid-looking new tensors
                  that never finish (each holds an entry until it idles out, 1 s),
                  so that the run's new tensors find the table full and must take
                  the fallback scheme
  forged-options  a host (``from``: a host the run does not use) sends ``rate``
                  (500) packets/s with forged and malformed TaLB options to
                  ``to`` (a host of the run on another leaf), spoofing the run's
                  hosts' addresses for some (workload/forge.py)

The injector (:class:`FaultInjector`) runs in a thread of the run's
process; it records when the fault was applied and undone (CLOCK_MONOTONIC
ns, the clock of the tensors' records) and the switches' drop and fallback
counters over the run from the injection on. Whatever happens to the run
(an error, Ctrl-C), :meth:`FaultInjector.close` undoes the fault: no link
is left down, no agent left dead, no scheme or limit left changed.
workload/recovery.py measures the recovery from the tensors' records.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from common import paths
from common.excerpt import shown

DEFAULT_FOR_S = 1.0
KINDS: dict[str, dict[str, object]] = {   # kind -> {key: default}; None: chosen from the fabric
    "none": {"for": 0.0},
    "uplink-down": {"for": DEFAULT_FOR_S, "leaf": None, "spine": None, "agent": "run"},
    "spine-down": {"for": DEFAULT_FOR_S, "spine": None, "agent": "run"},
    "agent-kill": {"for": DEFAULT_FOR_S},
    "scheme": {"for": DEFAULT_FOR_S, "to": "ecmp"},
    "table-full": {"for": DEFAULT_FOR_S, "limit": 16, "rate": 500},
    "forged-options": {"for": DEFAULT_FOR_S, "from": None, "to": None, "rate": 500},
}
#: switch counters (common.c_constants COUNTER_NAMES) a fault report keeps: drops,
#: packets the program gave up on, fallbacks and reroutes, malformed options
REPORTED_COUNTERS = (
    "pass_malformed", "pass_no_route", "pass_group_empty", "pass_egress_down", "clone_fail",
    "ip_options", "talb_table_full", "talb_reroute", "talb_midstream", "talb_late",
    "opt_tagged", "opt_truncated", "opt_bad_len", "opt_bad_version", "opt_zero_len",
    "opt_overrun", "opt_not_first", "drop_opt_position", "drop_strip_fail",
)
#: uplink-down/spine-down's ``agent``: run (it reacts), stop (frozen while the links are down)
AGENT_MODES = ("run", "stop")
SYNTAX = "KIND@AT[:key=value,...], e.g. uplink-down@2s:for=1s"


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    at_s: float
    params: dict = field(default_factory=dict)   # every key of the kind, defaults filled
    text: str = ""

    @property
    def for_s(self) -> float:
        return float(self.params.get("for", 0.0))


def parse_seconds(value: str, what: str, text: str) -> float:
    """A fault's time (``2s``, ``500ms``, ``1.5``) in seconds; ValueError
    naming ``what`` and the whole fault ``text``. `talb bench faults`
    parses its --at and --for with it too."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", value)
    if not m:
        raise ValueError(f"--fault: {what} must be a time like 2s, 500ms or 1.5, got {shown(value)} "
                         f"in {text!r}")
    v = float(m.group(1))
    return v / 1e3 if m.group(2) == "ms" else v


def parse_fault(text: str) -> FaultSpec:
    """``KIND@AT[:k=v,...]`` -> FaultSpec; ValueError naming the value."""
    raw = str(text).strip()
    head, sep, rest = raw.partition(":")
    kind, at_sep, at = head.partition("@")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise ValueError(f"--fault: unknown kind {kind!r} (kinds: {', '.join(KINDS)}), got {shown(raw)}")
    if not at_sep or not at.strip():
        raise ValueError(f"--fault: when? expected {SYNTAX}, got {shown(raw)}")
    at_s = parse_seconds(at, "AT", raw)
    params = dict(KINDS[kind])
    for item in (rest.split(",") if sep else []):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"--fault: expected key=value, got {shown(item.strip())} in {raw!r}")
        if key not in KINDS[kind]:
            takes = ", ".join(KINDS[kind]) or "no keys"
            raise ValueError(f"--fault: {kind} takes {takes}; got {key}={value} in {raw!r}")
        if key == "for":
            params[key] = parse_seconds(value, "for", raw)
            if params[key] <= 0:
                raise ValueError(f"--fault: for must be > 0, got {shown(value)} in {raw!r}")
        elif key in ("limit", "rate"):
            try:
                params[key] = int(value)
            except ValueError:
                raise ValueError(f"--fault: {key} must be an integer, got {shown(value)} in {raw!r}") \
                    from None
            if params[key] < 1:
                raise ValueError(f"--fault: {key} must be >= 1, got {shown(value)} in {raw!r}")
        elif key == "agent":
            if value not in AGENT_MODES:
                raise ValueError(f"--fault: agent must be one of {', '.join(AGENT_MODES)}, "
                                 f"got {shown(value)} in {raw!r}")
            params[key] = value
        else:
            params[key] = value
    if kind == "scheme":
        from datapath.control import scheme_id_of

        try:
            scheme_id_of(params["to"])
        except ValueError as exc:
            raise ValueError(f"--fault: to={params['to']}: {exc}") from None
    if kind == "table-full":
        from common.c_constants import TALB_MAX_TENSORS

        if params["limit"] > TALB_MAX_TENSORS:
            raise ValueError(f"--fault: limit must be 1..{TALB_MAX_TENSORS}, got "
                             f"{params['limit']} in {raw!r}")
    return FaultSpec(kind, at_s, params, raw)


# --- the actions: apply() and restore(), each returning what it did ---------------------
def _ip_link(netns: str, ifname: str, state: str) -> None:
    subprocess.run(["ip", "-n", netns, "link", "set", ifname, state], check=True,
                   capture_output=True, timeout=10)


class _Links:
    """Interfaces of one namespace set down, then up."""

    def __init__(self, netns: str, ifnames: list[str], what: str):
        self.netns, self.ifnames, self.what = netns, ifnames, what

    def apply(self) -> dict:
        for name in self.ifnames:
            _ip_link(self.netns, name, "down")
        return {"down": [f"{self.what}:{n}" for n in self.ifnames]}

    def restore(self) -> dict:
        for name in self.ifnames:
            _ip_link(self.netns, name, "up")
        return {"up": [f"{self.what}:{n}" for n in self.ifnames]}


class _AgentKill:
    """SIGKILL the testbed's agent; start it again with the settings it ran with."""

    def __init__(self, prefix: str):
        from agent.daemon import running_pid

        self.prefix = prefix
        if running_pid(prefix) is None:
            raise ValueError(f"--fault agent-kill: no agent runs for testbed '{prefix}'")
        self.config = None

    def _config(self, pid: int) -> dict:
        from agent.snapshot import snapshot_path

        deadline = time.monotonic() + 3.0
        while True:   # the snapshot is written every second; the first one after a window
            try:
                snap = json.loads(snapshot_path(self.prefix).read_text())
                if snap.get("pid", pid) == pid and snap.get("config"):
                    return snap["config"]
            except (OSError, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent-kill: the agent's settings are not readable from "
                                   f"{snapshot_path(self.prefix)}")
            time.sleep(0.1)

    def apply(self) -> dict:
        from agent.daemon import running_pid

        pid = running_pid(self.prefix)
        if pid is None:
            raise RuntimeError(f"agent-kill: no agent runs for testbed '{self.prefix}'")
        self.config = self._config(pid)
        os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)      # our child when this process built the testbed
        except ChildProcessError:
            while os.path.exists(f"/proc/{pid}") and \
                    open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX":
                time.sleep(0.01)
        return {"killed_pid": pid}

    def restore(self) -> dict:
        from agent.daemon import start_background

        t = time.monotonic()
        pid = start_background(self.prefix, **self.config)
        return {"started_pid": pid, "start_s": time.monotonic() - t}


class _AgentStopped:
    """SIGSTOP the testbed's agent, SIGCONT it at restore: while it is
    stopped nothing reacts to link state, so a port that goes down stays in
    every forwarding group with its PORT_UP flag (the data path checks the
    flag, not the carrier) and what the switches send to it is lost. Put
    before the links in a _Together: stopped first, continued last."""

    def __init__(self, prefix: str):
        from agent.daemon import running_pid

        self.prefix = prefix
        if running_pid(prefix) is None:
            raise ValueError(f"--fault agent=stop: no agent runs for testbed '{prefix}'")
        self.pid = None

    def apply(self) -> dict:
        from agent.daemon import running_pid

        pid = running_pid(self.prefix)
        if pid is None:
            raise RuntimeError(f"agent=stop: no agent runs for testbed '{self.prefix}'")
        os.kill(pid, signal.SIGSTOP)
        self.pid = pid
        deadline = time.monotonic() + 2.0   # SIGSTOP is asynchronous: wait until it holds
        while _proc_state(pid) not in ("T", "t") and time.monotonic() < deadline:
            time.sleep(0.001)
        return {"agent_stopped": pid, "agent_state": _proc_state(pid)}

    def restore(self) -> dict:
        if self.pid is None:
            return {}
        pid, self.pid = self.pid, None
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return {"agent_continued": None}
        return {"agent_continued": pid}


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


class _Together:
    """Several actions as one: applied in order, undone in reverse."""

    def __init__(self, actions: list):
        self.actions = actions
        self._done: list = []

    def apply(self) -> dict:
        out = {}
        for a in self.actions:
            self._done.append(a)
            for k, v in a.apply().items():
                out[k] = v if k not in out else [*_as_list(out[k]), *_as_list(v)]
        return out

    def prepare(self) -> None:
        for a in self.actions:
            if hasattr(a, "prepare"):
                a.prepare()

    def discard(self) -> None:
        for a in self.actions:
            if hasattr(a, "discard"):
                a.discard()

    def restore(self) -> dict:
        out, errors = {}, []
        for a in reversed(self._done):
            try:
                for k, v in a.restore().items():
                    out[k] = v if k not in out else [*_as_list(out[k]), *_as_list(v)]
            except Exception as exc:   # noqa: BLE001 - undo the others first
                errors.append(f"{type(exc).__name__}: {exc}")
        self._done = []
        if errors:
            raise RuntimeError("; ".join(errors))
        return out


def _as_list(v):
    return v if isinstance(v, list) else [v]


class _EachSwitch:
    """A change of every switch's config, and its undoing."""

    def __init__(self, prefix: str, topo, kind: str, value):
        self.prefix, self.kind, self.value = prefix, kind, value
        self.switches = [s.name for s in topo.switches]
        self.before: dict[str, object] = {}

    def _each(self, fn) -> None:
        from datapath.maps import SwitchMaps

        for sw in self.switches:
            with SwitchMaps(paths.pin_dir(self.prefix, sw)) as maps:
                fn(sw, maps)

    def apply(self) -> dict:
        from datapath.control import read_config, set_scheme, set_talb_config

        def one(sw, maps):
            cfg = read_config(maps)
            if self.kind == "scheme":
                self.before[sw] = cfg["scheme"]
                set_scheme(maps, self.value)
            else:
                self.before[sw] = cfg["tensor_limit"]
                set_talb_config(maps, tensor_limit=self.value)
        self._each(one)
        return {"before": dict(self.before), self.kind: self.value}

    def restore(self) -> dict:
        from datapath.control import set_scheme, set_talb_config

        def one(sw, maps):
            if sw not in self.before:
                return
            if self.kind == "scheme":
                set_scheme(maps, self.before[sw])
            else:
                set_talb_config(maps, tensor_limit=self.before[sw])
        self._each(one)
        return {"restored": dict(self.before)}


class _Forger:
    """workload/forge.py in a host's namespace, ended (SIGTERM) at restore."""

    def __init__(self, prefix: str, topo, used: list, params: dict, seed: int,
                 only: str | None = None):
        hosts = {h.name: h for h in topo.hosts}
        used_names = [h.name for h in used]
        src = params.get("from") or next((h for h in hosts if h not in used_names), None)
        if src is None:
            raise ValueError("--fault forged-options: every host runs a node; name a sender "
                             "with from=HOST")
        if src not in hosts:
            raise ValueError(f"--fault from={src}: no such host (hosts: {', '.join(hosts)})")
        dst = params.get("to") or next((h.name for h in used if h.leaf != hosts[src].leaf),
                                   used_names[0] if used_names else None)
        if dst not in hosts or dst == src:
            raise ValueError(f"--fault to={dst}: a host other than from={src} "
                             f"(hosts: {', '.join(hosts)})")
        self.netns = paths.netns_name(prefix, src)
        self.src, self.dst = src, dst
        self.argv = [sys.executable, "-m", "workload.forge", "--dst", hosts[dst].ip,
                     "--rate", str(params["rate"]), "--seed", str(seed),
                     "--spoof", ",".join(h.ip for h in used if h.name != dst)]
        if only:
            self.argv += ["--only", only]
        self.proc = None

    def prepare(self) -> None:
        """Start the sender ahead of the fault (Python and scapy take ~1 s to
        start here): it gets ready and waits for a line on stdin."""
        from workload.netexec import ns_popen

        self.proc = ns_popen(self.netns, [*self.argv, "--wait-stdin"], cwd=str(paths.REPO_ROOT),
                             stdin=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if '"ready"' not in line:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise RuntimeError(f"forged-options: the sender did not get ready: {err.strip()[-300:]}")

    def apply(self) -> dict:
        if self.proc is None:
            self.prepare()
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return {"from": self.src, "to": self.dst, "pid": self.proc.pid}

    def discard(self) -> None:
        """End a sender that was prepared and never released."""
        from workload.netexec import stop

        if self.proc is not None and self.proc.poll() is None:
            stop(self.proc)

    def restore(self) -> dict:
        from workload.netexec import finish, stop

        if self.proc is None:
            return {}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = finish(self.proc, timeout=10)
        finally:
            stop(self.proc)
        sent = next((json.loads(x) for x in reversed(out.splitlines()) if x.startswith("{")), None)
        if sent is None:
            raise RuntimeError(f"forged-options: the sender reported nothing "
                               f"(exit {self.proc.returncode}): {err.strip()[-300:]}")
        return {"sent": sent}


def _action(spec: FaultSpec, prefix: str, topo, used: list, seed: int):
    p = spec.params
    roles = {s.name: s.role for s in topo.switches}

    def switch(key, role, default):
        name = p.get(key) or default
        if roles.get(name) != role:
            known = ", ".join(n for n, r in roles.items() if r == role)
            raise ValueError(f"--fault {key}={name}: no such {role} ({role}s: {known})")
        return name

    leaves = [n for n, r in roles.items() if r == "leaf"]
    spines = [n for n, r in roles.items() if r == "spine"]
    if spec.kind == "none":
        return None
    if spec.kind == "uplink-down":
        leaf = switch("leaf", "leaf", leaves[0] if leaves else None)
        spine = switch("spine", "spine", spines[0] if spines else None)
        port = next((x.name for x in topo.ports(leaf) if x.peer == spine), None)
        if port is None:
            raise ValueError(f"--fault: no link between {leaf} and {spine}")
        return _with_agent(p, prefix, _Links(paths.netns_name(prefix, leaf), [port], leaf))
    if spec.kind == "spine-down":
        spine = switch("spine", "spine", spines[0] if spines else None)
        return _with_agent(p, prefix, _Links(paths.netns_name(prefix, spine),
                                             [x.name for x in topo.ports(spine)], spine))
    if spec.kind == "agent-kill":
        return _AgentKill(prefix)
    if spec.kind == "scheme":
        return _EachSwitch(prefix, topo, "scheme", p["to"])
    if spec.kind == "table-full":
        return _Together([_EachSwitch(prefix, topo, "tensor_limit", p["limit"]),
                          *_fillers(prefix, topo, used, p["rate"], seed)])
    if spec.kind == "forged-options":
        return _Forger(prefix, topo, used, p, seed)
    raise AssertionError(spec.kind)


def _with_agent(params: dict, prefix: str, links: _Links):
    """The links alone (agent=run), or with the agent stopped around them."""
    if params.get("agent", "run") == "stop":
        return _Together([_AgentStopped(prefix), links])
    return links


def check_names(spec: FaultSpec, topo) -> None:
    """The switches and hosts ``spec`` names exist in ``topo`` (before a
    run builds its fabric); ValueError naming the key and value."""
    roles = {s.name: s.role for s in topo.switches}
    hosts = [h.name for h in topo.hosts]
    for key, role in (("leaf", "leaf"), ("spine", "spine")):
        name = spec.params.get(key)
        if name and roles.get(name) != role:
            known = ", ".join(n for n, r in roles.items() if r == role)
            raise ValueError(f"--fault {key}={name}: no such {role} ({role}s: {known})")
    for key in ("from", "to"):
        name = spec.params.get(key)
        if name and name not in hosts:
            raise ValueError(f"--fault {key}={name}: no such host (hosts: {', '.join(hosts)})")


def _fillers(prefix: str, topo, used: list, rate: int, seed: int) -> list:
    """A table filler from a host the run does not use on each leaf that
    has one, to a host on another leaf (across the leaf's uplink group)."""
    used_names = {h.name for h in used}
    out = []
    for leaf in [s.name for s in topo.switches if s.role == "leaf"]:
        src = next((h for h in topo.hosts if h.leaf == leaf and h.name not in used_names), None)
        dst = next((h for h in topo.hosts if h.leaf != leaf), None)
        if src is not None and dst is not None:
            out.append(_Forger(prefix, topo, used, {"from": src.name, "to": dst.name,
                                                    "rate": rate}, seed + len(out),
                               only="new-unfinished"))
    if not out:
        raise ValueError("--fault table-full: every host runs a node; the tables are filled "
                         "from hosts the run does not use")
    return out


def read_switch_counters(prefix: str, topo) -> dict[str, dict[str, int]]:
    from datapath.control import read_counters
    from datapath.maps import SwitchMaps

    out = {}
    for sw in topo.switches:
        with SwitchMaps(paths.pin_dir(prefix, sw.name)) as maps:
            c = read_counters(maps)
        out[sw.name] = {k: c.get(k, 0) for k in REPORTED_COUNTERS}
    return out


def counter_delta(before: dict, after: dict) -> dict:
    """Summed over the switches, the counters that moved: {name: delta}."""
    total: dict[str, int] = {}
    for sw, c in after.items():
        for k, v in c.items():
            d = v - before.get(sw, {}).get(k, 0)
            if d:
                total[k] = total.get(k, 0) + d
    return total


class FaultInjector:
    """Apply ``spec`` at ``start`` + at_s, undo it for_s later; :meth:`close`
    undoes it now if it is still applied. Construction checks the spec
    against the fabric (names, an agent to kill, a free host to forge from)
    and raises ValueError before the run starts anything."""

    def __init__(self, spec: FaultSpec, prefix: str, topo, used_hosts: list, *, seed: int = 0,
                 say=lambda _m: None):
        self.spec, self.prefix, self.topo, self.say = spec, prefix, topo, say
        self.action = _action(spec, prefix, topo, used_hosts, seed)
        self.record: dict = {"spec": spec.text, "kind": spec.kind, "params": spec.params,
                             "at_s": spec.at_s, "for_s": spec.for_s, "injected": False,
                             "restored": False, "t_start_ns": None, "t_inject_ns": None,
                             "t_restore_ns": None, "apply": None, "undo": None, "error": None,
                             "counters": None}
        self._stop = threading.Event()
        self._lock = threading.Lock()     # apply/restore: never both at once
        self._applied = False
        self._thread: threading.Thread | None = None
        self._counters0 = None

    def prepare(self) -> None:
        """Before the run's nodes start: what takes time to get ready (the
        forged-options sender) is started and left waiting."""
        if hasattr(self.action, "prepare"):
            self.action.prepare()

    def start(self, t_start_ns: int) -> None:
        self.record["t_start_ns"] = t_start_ns
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault")
        self._thread.start()

    def _wait_until(self, t_ns: int) -> bool:
        return not self._stop.wait(max(0.0, (t_ns - time.monotonic_ns()) / 1e9))

    def _run(self) -> None:
        rec = self.record
        if not self._wait_until(rec["t_start_ns"] + int(self.spec.at_s * 1e9)):
            return
        with self._lock:
            if self._stop.is_set():
                return
            try:
                self._counters0 = read_switch_counters(self.prefix, self.topo)
                rec["t_inject_ns"] = time.monotonic_ns()
                rec["injected"] = True
                self._applied = self.action is not None
                rec["apply"] = self.action.apply() if self.action else {}
                rec["apply_s"] = (time.monotonic_ns() - rec["t_inject_ns"]) / 1e9
                self.say(f"fault {self.spec.kind} injected: {_brief(rec['apply'])}")
            except Exception as exc:   # noqa: BLE001 - recorded; close() still undoes
                rec["error"] = f"apply: {type(exc).__name__}: {exc}"
                self.say(f"fault {self.spec.kind}: {rec['error']}")
        if self.action is None or not self._wait_until(rec["t_inject_ns"] + int(self.spec.for_s * 1e9)):
            return
        self._restore()

    def _restore(self) -> None:
        rec = self.record
        with self._lock:
            if not self._applied:
                return
            self._applied = False
            rec["t_restore_ns"] = time.monotonic_ns()
            try:
                rec["undo"] = self.action.restore()
                rec["restored"] = True
                rec["undo_s"] = (time.monotonic_ns() - rec["t_restore_ns"]) / 1e9
                self.say(f"fault {self.spec.kind} undone after "
                         f"{(rec['t_restore_ns'] - rec['t_inject_ns']) / 1e9:.2f} s: "
                         f"{_brief(rec['undo'])}")
            except Exception as exc:   # noqa: BLE001
                rec["error"] = (rec["error"] + "; " if rec["error"] else "") + \
                    f"undo: {type(exc).__name__}: {exc}"
                self.say(f"fault {self.spec.kind}: {rec['error']}")

    def close(self) -> dict:
        """Stop; undo the fault if it is applied; the record (with the
        switch counters' deltas from the injection to now)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self._applied:
            self.record["cut_short"] = True   # the run ended before for_s was over
        self._restore()
        if hasattr(self.action, "discard"):
            self.action.discard()
        if self._counters0 is not None:
            try:
                self.record["counters"] = counter_delta(
                    self._counters0, read_switch_counters(self.prefix, self.topo))
            except Exception as exc:   # noqa: BLE001 - a report without counters
                self.record["counters"] = {"error": str(exc)}
        return self.record


def _brief(d: dict | None) -> str:
    if not d:
        return "-"
    return ", ".join(f"{k} {v if not isinstance(v, (list, tuple)) else ' '.join(map(str, v))}"
                     for k, v in d.items() if k not in ("before", "restored", "sent"))


def report(record: dict, tensors: list[dict], **measure) -> dict:
    """The fault's record with the delivery check and the recovery
    (workload/recovery.py; ``measure``: its window_s, threshold, span_s,
    settle_windows when not its defaults). A control (``none``) is measured
    as if disturbed for its ``for``."""
    from workload.recovery import recovery

    out = dict(record)
    out["verified"] = sum(1 for t in tensors if not t["censored"] and t["ok"])
    out["checksum_failed"] = sum(1 for t in tensors if not t["censored"] and not t["ok"])
    out["not_delivered"] = sum(1 for t in tensors if t["censored"])
    out["tensors"] = len(tensors)
    t_restore = record["t_restore_ns"]
    if record["kind"] == "none" and record["injected"] and record.get("for_s"):
        t_restore = record["t_inject_ns"] + int(record["for_s"] * 1e9)
    out["recovery"] = recovery(tensors, record["t_inject_ns"], t_restore, **measure) \
        if record["injected"] else None
    return out
