"""The agent on a live fabric: PCM from real TCP, link state, crash and restart.

Fabric: 2 spines, 2 leaves, 2 hosts per leaf, 100 Mbit/s, with leaf0's
uplink to spine1 at half rate (50 Mbit/s). The agent runs detached
(agent.daemon.start_background), as `talb testbed up` starts it.

Flows are pinned to an uplink: the data path's ECMP hash is reproduced in
Python (datapath.control.ecmp_index) and iperf3 picks the client port that
hashes onto the wanted uplink, so every run loads the same ports.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent import daemon
from agent.rtnl import LinkEvents
from common import paths
from datapath.control import ecmp_index, read_config, read_groups, read_port_stats, set_scheme
from datapath.maps import SwitchMaps
from netns_topology import LeafSpine
from talb import send
from workload.iperf import run_iperf3
from helpers import free_port, up_fabric, wait_for_streams

pytestmark = pytest.mark.live

WINDOW_S = 0.005


@pytest.fixture(scope="module")
def fabric(request, bcc):
    topo = LeafSpine(spines=2, leaves=2, hosts_per_leaf=2)
    topo.set_link("leaf0", "spine1", rate="50mbit")
    return up_fabric(request, topo)


#: the agent configuration a test gets unless it asks for another
DEFAULT_AGENT = {"window_s": WINDOW_S}
#: PCM from the measured queueing delay alone (test_talb_places_new_tensors...)
MEASURED_AGENT = {"window_s": WINDOW_S, "pcm_delay": "measured", "w1": 0.0}


@pytest.fixture(scope="module")
def _agent_state(fabric):
    """The fabric's background agent: its pid, configuration and metrics port
    (a test that starts or kills it updates ``pid``)."""
    return {"pid": None, "config": None, "port": free_port()}


def _agent_with(fabric, state, config) -> dict:
    """The agent running with exactly ``config``: the running one if it is
    alive with it, else (re)started. Each test gets the configuration it
    asserts about, whatever an earlier test left running."""
    prefix, _ = fabric
    if state["config"] != config or state["pid"] is None or \
            daemon.running_pid(prefix) != state["pid"]:
        daemon.stop_background(prefix)
        state["pid"], state["config"] = None, None
        state["pid"] = daemon.start_background(prefix, metrics_port=state["port"], **config)
        state["config"] = dict(config)
    return state


@pytest.fixture
def agent(fabric, _agent_state):
    return _agent_with(fabric, _agent_state, DEFAULT_AGENT)


@pytest.fixture
def measured_agent(fabric, _agent_state):
    return _agent_with(fabric, _agent_state, MEASURED_AGENT)


@pytest.fixture
def no_agent(fabric, _agent_state):
    """No background agent (a test that runs its own publisher or starters)."""
    daemon.stop_background(fabric[0])
    _agent_state["pid"] = _agent_state["config"] = None
    return _agent_state


def ns(prefix, node):
    return paths.netns_name(prefix, node)


def host_ip(topo, name):
    return next(h.ip for h in topo.hosts if h.name == name)


def scrape(port, timeout: float = 5) -> dict:
    """{(name, frozenset(labels)): value} of one /metrics page."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                  timeout=timeout).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def series(page, name, **labels):
    want = set(labels.items())
    return {dict(k)["port"] if "port" in dict(k) else k: v
            for (n, k), v in page.items() if n == name and want <= set(k)}


def uplink_groups(prefix, leaf):
    """The leaf's multipath groups as {gid: {...}} (read_groups)."""
    with SwitchMaps(paths.pin_dir(prefix, leaf)) as m:
        return {gid: g for gid, g in read_groups(m).items() if len(set(g["ports"])) > 1}


def port_index(prefix, node) -> dict[str, int]:
    out = subprocess.run(["ip", "-n", ns(prefix, node), "-o", "link", "show"],
                         capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0]: int(line.split(":")[0])
            for line in out.splitlines()}


def pinned_cports(prefix, topo, src, dst, wants, leaf="leaf0") -> list[tuple[int, int]]:
    """(server port, client port) per wanted uplink index: each flow hashes
    onto uplink ``wants[i]`` of the leaf's group [spine0, spine1]."""
    with SwitchMaps(paths.pin_dir(prefix, leaf)) as m:
        seed = read_config(m)["hash_seed"]
    used, out = set(), []
    for i, want in enumerate(wants):
        dport = 5301 + i
        cport = next(p for p in range(40000, 50000) if p not in used and
                     ecmp_index(2, host_ip(topo, src), host_ip(topo, dst), p, dport, 6, seed) == want)
        used.add(cport)
        out.append((dport, cport))
    return out


class _Results(list):
    """The flows' iperf3 results (filled when they end) and whether every
    flow still runs."""

    def __init__(self, threads):
        super().__init__()
        self._threads = threads

    def running(self) -> bool:
        return all(t.is_alive() for t in self._threads)


@contextmanager
def flows(prefix, topo, src, dst, wants, duration):
    """iperf3 flows from src to dst, flow i pinned to uplink wants[i]; yields
    the list that receives their results when the block ends, once every
    flow is sending (its connections established: a fixed sleep after the
    start proves nothing on a busy machine, where a client can start late)."""
    errors = []

    def one(dport, cport):
        try:
            results.append(run_iperf3(ns(prefix, src), ns(prefix, dst), host_ip(topo, dst),
                                      duration=duration, port=dport, cport=cport))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    pinned = pinned_cports(prefix, topo, src, dst, wants)
    threads = [threading.Thread(target=one, args=pc) for pc in pinned]
    results = _Results(threads)
    for t in threads:
        t.start()
    try:
        wait_for_streams(ns(prefix, src), {dport: 1 for dport, _ in pinned})
        yield results
    finally:
        for t in threads:
            t.join()
    assert not errors, errors


#: reads of leaf0's group one judgement of the half-rate test takes: at one
#: read per ~20 ms, about 2 s of the agent's 5 ms windows
HALF_RATE_READS = 100
#: fewest reads (and /metrics scrapes) a judgement stands on when the machine
#: is too busy for HALF_RATE_READS (and 10 scrapes) in the 6.5 s the reads
#: may take: spread over those seconds, 20 reads are 20 windows apart from
#: each other. Measured with another test run and two busy loops beside it:
#: 40 reads in 4.5 s when the scrapes ran between them, 213 beside them; a
#: scrape of the CPU-starved agent took ~0.9 s (5 in 4.5 s), with three
#: busy loops one took over 5 s.
HALF_RATE_MIN_READS = 20
HALF_RATE_MIN_SCRAPES = 3


def _half_rate_verdict(samples) -> tuple[bool, str]:
    """spine1 (50 Mbit/s) against spine0 (100 Mbit/s) over ``samples`` of
    (P spine0, P spine1, slots spine0, slots spine1). In a two-port group a
    window's P is 0, 0.5 or 1 (Eq. 5's min-max: each term 0 or 1); spine1,
    full (U = 1) with a standing queue, wins both terms where spine0 runs
    at about half: P 1 against 0. Held when spine1's mean P is at least
    0.5 above spine0's, and spine1 is higher, and has fewer schedule slots,
    in at least 3/4 of the reads (a port chosen at random: 0 and 1/2)."""
    n = len(samples)
    p0 = sum(s[0] for s in samples) / n
    p1 = sum(s[1] for s in samples) / n
    higher = sum(1 for a, b, _, _ in samples if b > a)
    lighter = sum(1 for _, _, s0, s1 in samples if s1 < s0)
    ok = p1 - p0 >= 0.5 and higher >= 0.75 * n and lighter >= 0.75 * n
    return ok, (f"PCM spine0/spine1 mean {p0:.3f} / {p1:.3f} over {n} reads; spine1 higher "
                f"in {higher}, fewer schedule slots in {lighter}")


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def test_half_rate_uplink_has_the_highest_pcm_and_the_lowest_weight(fabric, agent):
    """h0 sends 4 flows to h2, two hashed onto each uplink of leaf0. h0's
    100 Mbit/s link is shared by the 4: spine1's two flows fill its
    50 Mbit/s, spine0's take the rest of h0's link (~50% of spine0).

    Judged on many windows, never one: once all 4 flows send and are past
    slow start, leaf0's group is read every ~20 ms, and /metrics scraped
    meanwhile every 0.2 s (a scrape shows one window), until the last
    HALF_RATE_READS reads agree (_half_rate_verdict), for at most 6.5 s,
    all while the flows run; the last (up to) 10 scrapes taken meanwhile
    must show the same on average and in at least 70% of them."""
    prefix, topo = fabric
    idx = port_index(prefix, "leaf0")
    samples, pages = [], []
    verdict = (False, "no read")
    stop, scrape_errors = threading.Event(), []

    def scraper():  # beside the reads: a scrape waits for the agent, busy or not
        while not stop.is_set():
            try:
                pages.append(scrape(agent["port"], timeout=10))
            except OSError as exc:  # a CPU-starved agent answered late: counted, not judged
                scrape_errors.append(exc)
            stop.wait(0.2)

    with flows(prefix, topo, "h0", "h2", [0, 1, 0, 1], duration=10) as results, \
            SwitchMaps(paths.pin_dir(prefix, "leaf0")) as leaf0:
        time.sleep(1.0)  # every flow past slow start
        deadline = time.monotonic() + 6.5
        scraping = threading.Thread(target=scraper)
        scraping.start()
        try:
            while True:
                (g,) = [g for g in read_groups(leaf0).values() if len(set(g["ports"])) > 1]
                pcm = dict(zip(g["ports"], g["pcm"]))
                share = {p: g["schedule"].count(g["ports"].index(p)) for p in g["ports"]}
                samples.append((pcm[idx["spine0"]], pcm[idx["spine1"]],
                                share[idx["spine0"]], share[idx["spine1"]]))
                late = time.monotonic() > deadline
                if late or (len(samples) >= HALF_RATE_READS and len(pages) >= 10):
                    verdict = _half_rate_verdict(samples[-HALF_RATE_READS:])
                    if verdict[0] or late:
                        break
                time.sleep(0.02)
            # what was seen while every flow ran (a scrape still under way may end later)
            ran_throughout, seen = results.running(), list(pages)
        finally:
            stop.set()
            scraping.join()
    assert len(results) == 4, results
    print(f"\n{verdict[1]} (after {len(samples)} reads and {len(seen)} scrapes in all; "
          f"scrapes failed: {scrape_errors})")
    assert ran_throughout, "a flow ended before the reads did: they judged no load"
    assert len(samples) >= HALF_RATE_MIN_READS and len(seen) >= HALF_RATE_MIN_SCRAPES, \
        f"only {len(samples)} reads and {len(seen)} scrapes while the flows ran ({scrape_errors})"
    assert verdict[0], (verdict[1], samples[-HALF_RATE_READS:])
    # the same picture on /metrics
    pages = seen[-10:]
    pcm = [series(p, "talb_port_pcm", switch="leaf0") for p in pages]
    weight = [series(p, "talb_port_wrr_weight", switch="leaf0") for p in pages]
    util = [series(p, "talb_port_utilization_ratio", switch="leaf0") for p in pages]
    assert all(set(x) == {"spine0", "spine1"} for x in pcm + weight), (pcm, weight)
    mean = {k: {port: _mean(x[port] for x in v) for port in ("spine0", "spine1")}
            for k, v in (("pcm", pcm), ("weight", weight), ("util", util))}
    print(f"/metrics over {len(pages)} scrapes: mean {mean}")
    # spine1 full (U ~ 1), spine0 about half: 0.2 leaves room for unequal TCP shares
    assert mean["util"]["spine1"] >= mean["util"]["spine0"] + 0.2, (mean, util)
    assert mean["pcm"]["spine1"] >= mean["pcm"]["spine0"] + 0.5, (mean, pcm)
    assert mean["weight"]["spine1"] < mean["weight"]["spine0"], (mean, weight)
    assert sum(1 for x in pcm if x["spine1"] > x["spine0"]) >= 0.7 * len(pages), pcm
    assert sum(1 for x in weight if x["spine1"] < x["spine0"]) >= 0.7 * len(pages), weight


def _wait_for(predicate, timeout, step=0.0005):
    """Seconds until ``predicate()``, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    return None


def _uplink_tx(prefix, leaf="leaf0") -> dict[int, int]:
    with SwitchMaps(paths.pin_dir(prefix, leaf)) as m:
        pid = {ifindex: p.port_id for ifindex, p in m.ports.items()}
        stats = read_port_stats(m)
    return {ifindex: stats[p]["tx_bytes"] for ifindex, p in pid.items()}


def test_link_down_moves_traffic_off_the_port_and_up_brings_it_back(fabric, agent):
    prefix, topo = fabric
    idx = port_index(prefix, "leaf0")
    s0, s1 = idx["spine0"], idx["spine1"]
    leaf0 = SwitchMaps(paths.pin_dir(prefix, "leaf0"))

    def uplink_sets():
        return {tuple(g.ports()) for _, g in leaf0.groups.items() if s0 in g.ports() or s1 in g.ports()}

    def spine1_in_groups():
        return uplink_sets() == {(s0, s1)}

    assert spine1_in_groups()
    events = LinkEvents(ns(prefix, "leaf0"))

    def set_spine1(state: str, wanted: set) -> tuple[float | None, float | None]:
        """`ip link set spine1 <state>` on leaf0; seconds from the kernel's
        notification of the new state (the agent hears the same broadcast)
        until leaf0's groups are ``wanted``, and from the command's start."""
        start = time.monotonic()
        # not waited for: the notification is read while `ip` runs
        ip = subprocess.Popen(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", state])
        notified = None
        while time.monotonic() - start < 2.0:
            if notified is None and any(link.name == "spine1" and link.up == (state == "up")
                                        for _, link in events.drain()):
                notified = time.monotonic()
            if uplink_sets() == wanted:
                done = time.monotonic()
                assert ip.wait() == 0
                # (no notification seen yet: count from the command's start)
                return done - (notified or start), done - start
            time.sleep(0.0005)
        ip.wait()
        return None, None

    with leaf0, flows(prefix, topo, "h0", "h2", [0, 1], duration=6) as results:
        time.sleep(1.0)
        down_after, down_total = set_spine1("down", {(s0,)})
        time.sleep(0.2)
        before = _uplink_tx(prefix)
        time.sleep(1.0)
        after = _uplink_tx(prefix)
        down_delta = {p: after[p] - before[p] for p in (s0, s1)}
        # the other switches follow: spine1 lost its leaf0 port (carrier) and leaf1
        # reaches leaf0's hosts through spine0 only
        leaf1_groups = {tuple(g["ports"]) for g in read_groups_of(prefix, "leaf1").values()}
        leaf1 = port_index(prefix, "leaf1")

        up_after, up_total = set_spine1("up", {(s0, s1)})
        events.close()
        time.sleep(0.5)
        before = _uplink_tx(prefix)
        time.sleep(1.0)
        after = _uplink_tx(prefix)
        up_delta = {p: after[p] - before[p] for p in (s0, s1)}
    assert down_total is not None, "spine1 never left leaf0's groups"
    assert up_total is not None, "spine1 never came back into leaf0's groups"
    print(f"\nregrouped {down_after * 1e3:.1f} ms after the link-down notification "
          f"({down_after / WINDOW_S:.1f} windows; {down_total * 1e3:.1f} ms after `ip` started), "
          f"{up_after * 1e3:.1f} ms after link-up ({up_after / WINDOW_S:.1f} windows; "
          f"{up_total * 1e3:.1f} ms); tx bytes while down {down_delta}, after up {up_delta}")
    # The latency is measured and printed, not gated: typically 0.3-1.5 windows,
    # but this test forwards two iperf3 flows through software on a 2-core box,
    # and under a loaded CI run the agent waited for the CPU (3.4 windows seen).
    # The bound only catches a broken path (the notification not followed).
    assert down_after <= 0.2 and up_after <= 0.2, (down_after, up_after)
    assert down_delta[s1] == 0 and down_delta[s0] > 5_000_000, down_delta
    assert up_delta[s1] > 2_000_000 and up_delta[s0] > 2_000_000, up_delta
    assert (leaf1["spine0"],) in leaf1_groups and \
        not any(leaf1["spine1"] in g for g in leaf1_groups if len(g) == 1), leaf1_groups
    assert len(results) == 2 and all(r.received_bps > 10e6 for r in results), results


def read_groups_of(prefix, switch):
    with SwitchMaps(paths.pin_dir(prefix, switch)) as m:
        return read_groups(m)


def test_talb_places_new_tensors_away_from_the_congested_uplink(fabric, measured_agent, tmp_path):
    """Scheme talb; one untagged flow (ECMP fallback) fills the half-rate
    uplink. Tensors sent meanwhile from h0 (one layer: CASE 2, weights
    1 - P_i) mostly take the other uplink; each tensor keeps one uplink.

    Each tensor fills the other uplink at line rate for a few ms too, so in
    most windows both uplinks are near U = 1 and Eq. 5's utilisation term
    ranks them either way (with W1 = W2 = 1 about a quarter of the tensors
    still land on spine1); what tells them apart is spine1's standing
    queue. So the agent runs here on the measured queueing delay alone
    (--pcm-delay measured --w1 0): spine1's PCM is 1 while its queue is
    the longer one, its CASE 2 weight 0."""
    prefix, topo = fabric
    for sw in ("leaf0", "leaf1", "spine0", "spine1"):
        with SwitchMaps(paths.pin_dir(prefix, sw)) as m:
            set_scheme(m, "talb")
    try:
        with flows(prefix, topo, "h1", "h3", [1], duration=6):
            start = time.monotonic()  # the flow sends from here on, for 6 s
            time.sleep(1.5)
            report = send.run(prefix, ["h0"], "h2", tensors=40, layers=1, size=60_000,
                              pcap_dir=str(tmp_path), say=lambda _m: None)
            sent = time.monotonic() - start
    finally:
        for sw in ("leaf0", "leaf1", "spine0", "spine1"):
            with SwitchMaps(paths.pin_dir(prefix, sw)) as m:
                set_scheme(m, "ecmp")
    assert report.ok, [(t.seq, t.ok, t.uplinks) for t in report.tensors]
    on = {"spine0": 0, "spine1": 0}
    for t in report.tensors:
        (port,) = t.uplinks
        on[port] += 1
    print(f"\nTaLB tensors per uplink with spine1 congested: {on} (sent in {sent - 1.5:.1f} s)")
    assert sent < 5.5, "the tensors outlasted the background load"
    assert on["spine1"] <= 0.1 * len(report.tensors), on


def test_agent_killed_mid_transfer_then_restarted(fabric, agent, tmp_path):
    """SIGKILL leaves pinned maps and attached programs: a transfer goes on
    with the last weights, every tensor arrives intact (the receiver checks
    each one's SHA-256). A new agent re-opens the pins; the counters it
    exports continue from the kernel's, not from zero."""
    prefix, topo = fabric
    before = scrape(agent["port"])
    groups_before = uplink_groups(prefix, "leaf0")
    reports, errors = [], []

    def transfer():
        try:  # 40 x 250 kB from h1 (leaf0) to h3 (leaf1)
            reports.append(send.run(prefix, ["h1"], "h3", tensors=40, layers=3, size=250_000,
                                    pcap_dir=str(tmp_path), say=lambda _m: None))
        except BaseException as exc:
            errors.append(exc)

    def uplinks_total():
        return sum(_uplink_tx(prefix).values())

    start_tx = uplinks_total()
    t = threading.Thread(target=transfer)
    t.start()
    # kill once the transfer is under way: 2 of its 10 MB through leaf0's uplinks
    assert _wait_for(lambda: uplinks_total() - start_tx > 2_000_000, timeout=20, step=0.01)
    os.kill(agent["pid"], signal.SIGKILL)
    at_kill = uplinks_total()
    assert _wait_for(lambda: daemon.running_pid(prefix) is None, timeout=5, step=0.05) is not None
    frozen = uplink_groups(prefix, "leaf0")
    t.join()
    assert not errors, errors
    (report,) = reports
    after_kill = uplinks_total() - at_kill
    assert after_kill > 3_000_000, f"only {after_kill} bytes moved after the kill"
    assert len(report.tensors) == 40 and report.ok, [(r.seq, r.ok, r.uplinks) for r in report.tensors]
    # nobody publishes while the agent is away: the groups stay as it left them
    assert uplink_groups(prefix, "leaf0") == frozen
    assert {gid: g["ports"] for gid, g in frozen.items()} == \
        {gid: g["ports"] for gid, g in groups_before.items()}

    pid = daemon.start_background(prefix, metrics_port=agent["port"], **agent["config"])
    agent["pid"] = pid
    after = scrape(agent["port"])
    info = series(after, "talb_agent_info")
    assert any(dict(k)["pid"] == str(pid) for k in info), info
    went_back = []
    for name in ("talb_port_tx_bytes_total", "talb_port_tx_packets_total",
                 "talb_port_qdisc_drops_total", "talb_datapath_packets_total"):
        for (n, labels), v in before.items():
            if n == name and after.get((n, labels), -1) < v:
                went_back.append((n, dict(labels), v, after.get((n, labels))))
    assert not went_back, went_back
    # h1's 10 MB crossed leaf0, partly while no agent ran: the new agent's totals include it
    assert sum(series(after, "talb_port_tx_bytes_total", switch="leaf0").values()) > \
        sum(series(before, "talb_port_tx_bytes_total", switch="leaf0").values()) + 10_000_000
    print(f"\nagent killed mid-transfer ({after_kill / 1e6:.1f} MB crossed leaf0's uplinks "
          f"after it): all 40 tensors verified; restarted agent pid {pid}, counters continued")


def test_one_switch_mode_is_the_prefix_agent_restricted_to_that_switch(fabric, agent):
    """`talb agent --switch leaf0`: the prefix's fabric (the testbed's
    topology: rates and buffers as the whole-fabric agent has them),
    leaf0 only. Its own link going down takes the port out of its groups."""
    from agent.config import AgentConfig

    prefix, _ = fabric
    assert daemon.stop_background(prefix)  # one publisher per switch
    agent["pid"] = agent["config"] = None
    # SIGTERM: a clean exit (the loop's last words), pid file gone
    assert "stopped after" in daemon.log_file(prefix).read_text().splitlines()[-1]
    assert daemon.running_pid(prefix) is None and not daemon.pid_file(prefix).exists()
    one = daemon.build(AgentConfig(window_s=WINDOW_S), prefix=prefix, switch="leaf0")
    idx = port_index(prefix, "leaf0")
    try:
        assert list(one.monitors) == ["leaf0"]
        rates = {p.name: (p.rate_bps, p.queue_limit_bytes) for p in one.routing.ports("leaf0")}
        assert rates["spine1"][0] == 50_000_000 and rates["spine0"][0] == 100_000_000
        assert rates["h0"][1] == 150_000
        for _ in range(3):
            one.step(time.monotonic())
            time.sleep(WINDOW_S)
        (g,) = one.latest["leaf0"].groups
        assert g.ports == ("spine0", "spine1")

        subprocess.run(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", "down"], check=True)
        time.sleep(0.05)
        one.step(time.monotonic())
        assert set(uplink_groups(prefix, "leaf0")) == set() and \
            [tuple(gr["ports"]) for gr in read_groups_of(prefix, "leaf0").values()
             if idx["spine1"] in gr["ports"]] == [], read_groups_of(prefix, "leaf0")
        subprocess.run(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", "up"], check=True)
        time.sleep(0.05)
        one.step(time.monotonic())
        assert [g["ports"] for g in uplink_groups(prefix, "leaf0").values()] == \
            [[idx["spine0"], idx["spine1"]]]
    finally:
        one.close()  # the next test's fixture starts the agent it needs
        subprocess.run(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", "up"], check=True)


SWITCHES = ("leaf0", "leaf1", "spine0", "spine1")


def _schemes(prefix) -> dict[str, str]:
    out = {}
    for sw in SWITCHES:
        with SwitchMaps(paths.pin_dir(prefix, sw)) as m:
            out[sw] = read_config(m)["scheme"]
    return out


def test_scheme_switched_while_links_flap_is_never_reverted(fabric, no_agent, monkeypatch):
    """The agent (prefix mode, real maps, its routing driven by link
    notifications) regroups the switches as leaf0's uplink to spine1 flaps;
    a `talb scheme` lands in the middle of each regrouping (between the
    agent's reads of a switch and its writes: the worst moment). After
    every flap each switch runs the scheme the user set last."""
    from agent.config import AgentConfig
    import datapath.control as control

    prefix, _ = fabric
    users_scheme = {"now": "ecmp"}
    landed = []  # (flap, switch) where the user's command landed mid-regroup
    reset = control._reset_group_state

    def user_command_lands(maps, gids):
        set_scheme(maps, users_scheme["now"])  # `talb scheme X` from another process
        landed.append((users_scheme["flap"], maps))
        return reset(maps, gids)

    one = daemon.build(AgentConfig(window_s=WINDOW_S), prefix=prefix)
    try:
        monkeypatch.setattr(control, "_reset_group_state", user_command_lands)
        by_maps = {id(m.maps): name for name, m in one.monitors.items()}
        reprogrammed = set()
        for flap in range(8):
            for state in ("down", "up"):
                users_scheme.update(now="talb" if len(landed) % 2 == 0 else "ecmp", flap=flap)
                before = len(landed)
                subprocess.run(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", state],
                               check=True)
                deadline = time.monotonic() + 5
                while len(landed) == before and time.monotonic() < deadline:
                    one.step(time.monotonic())  # follows the link notifications first
                    time.sleep(WINDOW_S)
                hit = {by_maps[id(m)] for f, m in landed[before:]}
                assert "leaf0" in hit, f"flap {flap} ({state}): leaf0 was not regrouped"
                reprogrammed |= hit
                schemes = _schemes(prefix)
                assert {sw: schemes[sw] for sw in hit} == dict.fromkeys(hit, users_scheme["now"]), \
                    (flap, state, users_scheme["now"], schemes)
        assert reprogrammed >= {"leaf0", "leaf1"}, reprogrammed
    finally:
        monkeypatch.undo()
        one.close()
        subprocess.run(["ip", "-n", ns(prefix, "leaf0"), "link", "set", "spine1", "up"], check=True)
        for sw in SWITCHES:
            with SwitchMaps(paths.pin_dir(prefix, sw)) as m:
                set_scheme(m, "ecmp")


def _agents_of(prefix) -> list[int]:
    """Pids of every live `talb agent` process serving ``prefix``."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        if state != "Z" and b"talb.cli" in argv and b"agent" in argv and \
                b"--prefix" in argv and argv[argv.index(b"--prefix") + 1] == prefix.encode():
            out.append(int(entry))
    return out


def test_concurrent_starts_run_exactly_one_agent(fabric, no_agent):
    """Two start_background calls at once (as two `talb testbed` users), then
    two foreground `talb agent` processes at once: one agent runs, the
    other start is refused with a clear error."""
    prefix, _ = fabric
    ports = [free_port(), free_port()]
    results, barrier = {}, threading.Barrier(2)

    def start(i):
        barrier.wait()
        try:
            results[i] = daemon.start_background(prefix, window_s=WINDOW_S, metrics_port=ports[i])
        except daemon.AgentError as exc:
            results[i] = exc

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        pids = [r for r in results.values() if isinstance(r, int)]
        refused = [r for r in results.values() if isinstance(r, daemon.AgentError)]
        assert len(pids) == 1 and len(refused) == 1, results
        assert "already running" in str(refused[0]), refused
        assert _agents_of(prefix) == pids and daemon.running_pid(prefix) == pids[0]
    finally:
        daemon.stop_background(prefix)
    assert _agents_of(prefix) == []

    argv = [sys.executable, "-m", "talb.cli", "agent", "--prefix", prefix, "--window-ms", "5"]
    procs = [subprocess.Popen([*argv, "--metrics-port", str(p)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for p in ports]
    try:
        deadline = time.monotonic() + 30
        while sum(p.poll() is None for p in procs) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # a second agent would have built and served by now
        alive = [p for p in procs if p.poll() is None]
        assert len(alive) == 1, [(p.returncode, p.stderr.read() if p.poll() is not None else "")
                                 for p in procs]
        (loser,) = [p for p in procs if p.poll() is not None]
        assert loser.returncode == 1 and "already running" in loser.stderr.read()
        assert _agents_of(prefix) == [alive[0].pid]
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.communicate(timeout=10)
    assert _agents_of(prefix) == []


def _has_bpf_maps(pid: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if "bpf-map" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                return True
        except OSError:
            continue
    return False


def test_a_start_while_an_agent_is_still_building_is_refused(fabric, no_agent):
    """Agent A is frozen (SIGSTOP) once it has opened the switches' maps but
    before it wrote its pid file: the moment a pid-file check cannot see
    it. A start meanwhile is refused; when A goes on, it is the one agent."""
    prefix, _ = fabric
    ports = [free_port(), free_port()]
    argv = [sys.executable, "-m", "talb.cli", "agent", "--prefix", prefix, "--window-ms", "5",
            "--metrics-port", str(ports[0])]
    caught = None
    for _attempt in range(5):
        a = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while a.poll() is None and not _has_bpf_maps(a.pid):
            time.sleep(0.0002)
        os.kill(a.pid, signal.SIGSTOP)
        if not daemon.pid_file(prefix).exists():
            caught = a
            break
        a.kill()  # built already: try again
        a.wait()
        daemon.pid_file(prefix).unlink(missing_ok=True)
    assert caught is not None, "never caught the agent between opening its maps and its pid file"
    try:
        with pytest.raises(daemon.AgentError, match="already running"):
            pid = daemon.start_background(prefix, window_s=WINDOW_S, metrics_port=ports[1])
            print(f"a second agent started: pid {pid}")
        os.kill(caught.pid, signal.SIGCONT)
        assert _wait_for(lambda: daemon.running_pid(prefix) == caught.pid, timeout=20, step=0.05)
        time.sleep(1.0)
        assert _agents_of(prefix) == [caught.pid]
    finally:
        os.kill(caught.pid, signal.SIGCONT)
        daemon.stop_background(prefix)
        if caught.poll() is None:
            caught.terminate()
        caught.wait(timeout=10)
        for pid in _agents_of(prefix):  # a second agent this test's starts made
            os.kill(pid, signal.SIGTERM)
            _wait_for(lambda: pid not in _agents_of(prefix), timeout=10, step=0.05)
    assert _agents_of(prefix) == []


def test_a_broken_switch_does_not_stop_the_others_publishing(fabric, no_agent):
    """The agent (prefix mode, real maps) loses the first of its switches'
    counter map (closed: every read fails with EBADF). Every window still
    publishes the other switches' groups (a stale value written before
    each window is replaced) and counts the broken switch's failure in
    talb_agent_switch_errors_total."""
    from agent.config import AgentConfig
    from agent.metrics import AgentMetrics
    from datapath.control import publish_pcm

    prefix, _ = fabric
    one = daemon.build(AgentConfig(window_s=WINDOW_S), prefix=prefix)
    metrics = AgentMetrics()
    one.observer = metrics
    try:
        broken = next(iter(one.monitors))
        others = {}
        for name, m in one.monitors.items():
            multi = {gid: g["ports"] for gid, g in read_groups(m.maps).items()
                     if len(set(g["ports"])) > 1}
            if name != broken and multi:
                others[name] = multi
        assert others, "no other switch with a multipath group to watch"
        one.step(time.monotonic())  # first window: counters' baseline
        time.sleep(WINDOW_S)
        one.monitors[broken].maps.port_stats.close()
        windows = 10
        republished = dict.fromkeys(others, 0)
        for _ in range(windows):
            for name, groups in others.items():
                for gid, ports in groups.items():  # stale: P = 0.5 everywhere
                    publish_pcm(one.monitors[name].maps, ports, dict.fromkeys(ports, 0.5),
                                group_id=gid)
            one.step(time.monotonic())
            for name, groups in others.items():
                now = read_groups(one.monitors[name].maps)
                if all(0.5 not in now[gid]["pcm"] for gid in groups):
                    republished[name] += 1
            time.sleep(WINDOW_S)
        assert republished == dict.fromkeys(others, windows), republished
        assert metrics.registry.get_sample_value("talb_agent_switch_errors_total",
                                                 {"switch": broken}) == windows
        assert all(metrics.registry.get_sample_value("talb_agent_switch_errors_total",
                                                     {"switch": n}) is None for n in others)
    finally:
        one.close()
