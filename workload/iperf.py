"""iperf3 between two host namespaces, with its JSON report parsed.

Used by the testbed demo, the live tests and the benchmarks (and later as
background load): real TCP from the kernel, measured by a standard tool.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from workload.netexec import finish, ns_popen, stop

DEFAULT_PORT = 5201


@dataclass(frozen=True)
class IperfResult:
    sent_bps: float          # client-side rate over the run
    received_bps: float      # goodput the receiver saw
    retransmits: int
    streams: int
    duration_s: float
    raw: dict

    @property
    def received_mbps(self) -> float:
        return self.received_bps / 1e6


class IperfError(RuntimeError):
    pass


def _start_server(netns: str, port: int) -> subprocess.Popen:
    # -1: serve one client and exit, so a failed run never leaves a server behind.
    return ns_popen(netns, ["iperf3", "-s", "-1", "-p", str(port)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_iperf3(src_ns: str, dst_ns: str, dst_ip: str, *, duration: float = 3.0,
               parallel: int = 1, port: int = DEFAULT_PORT, cport: int | None = None,
               congestion: str | None = None, connect_timeout: float = 10.0,
               timeout: float | None = None) -> IperfResult:
    """One TCP test from src_ns to dst_ip (served in dst_ns); raises IperfError.
    ``timeout``: seconds one client run may take (default duration + 30); a
    client or server still running then is ended, never left behind."""
    timeout = duration + 30 if timeout is None else timeout
    argv = ["iperf3", "-c", dst_ip, "-p", str(port), "-t", f"{duration:g}",
            "-P", str(parallel), "-J", "--connect-timeout", "1000"]
    if cport is not None:
        argv += ["--cport", str(cport)]
    if congestion:
        argv += ["-C", congestion]
    server = _start_server(dst_ns, port)
    try:
        deadline = time.monotonic() + connect_timeout
        while True:
            client = ns_popen(src_ns, argv)
            try:
                out, err = finish(client, timeout)
            except subprocess.TimeoutExpired:
                raise IperfError(f"iperf3 {src_ns} -> {dst_ip}:{port}: the client did not finish "
                                 f"within {timeout:g} s (ended)") from None
            report = _parse(out)
            error = report.get("error") if report else (err.strip() or "no output")
            if not error:
                break
            # The server may not be listening yet: retry until the deadline.
            if time.monotonic() > deadline or server.poll() is not None:
                raise IperfError(f"iperf3 {src_ns} -> {dst_ip}:{port} failed: {error}")
            time.sleep(0.2)
        try:
            server.wait(timeout=5)  # -1: it exits after its one client
        except subprocess.TimeoutExpired:
            pass
    finally:
        stop(server)
    end = report["end"]
    return IperfResult(
        sent_bps=end["sum_sent"]["bits_per_second"],
        received_bps=end["sum_received"]["bits_per_second"],
        retransmits=int(end["sum_sent"].get("retransmits", 0)),
        streams=len(end.get("streams", [])),
        duration_s=end["sum_received"]["seconds"],
        raw=report,
    )


def _parse(out: str) -> dict | None:
    try:
        return json.loads(out)
    except (json.JSONDecodeError, TypeError):
        return None
