"""Packet captures on switch ports, with tcpdump inside the switch namespace.

The kernel does the capturing (a filter and an mmap ring), so the capture
keeps up with the fabric where a Python sniffer would not, and the pcap files
stay behind for Wireshark. Parsing happens afterwards, with scapy.
"""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from scapy.utils import PcapReader

from common.wire import WireTensorKey, tensor_key_of
from workload.netexec import ns_popen, stop

# IPv4 with IHL 8 whose first option is TaLB's (type 0x9E): tagged packets only.
TAGGED_FILTER = "ip and (ip[0] & 0xf) = 8 and ip[20] = 0x9e"
SNAPLEN = 96  # Ethernet + IPv4 with option + TCP with options


class CaptureError(RuntimeError):
    pass


_PCAP_HEADER_LEN = 24  # a pcap file that tcpdump opened starts with this header


@dataclass
class PortCapture:
    netns: str
    ifname: str
    pcap: Path
    proc: subprocess.Popen
    stopped: bool = False
    exited_early: int | None = None  # tcpdump's exit code if it ended before stop()

    def stop(self) -> None:
        """End tcpdump (SIGTERM: it flushes its file) and reap it. Idempotent."""
        if not self.stopped:
            self.stopped = True
            if self.proc.poll() is not None:
                self.exited_early = self.proc.returncode
        stop(self.proc)

    def __str__(self) -> str:
        return f"capture of {self.netns}:{self.ifname} ({self.pcap})"


def start_capture(netns: str, ifname: str, pcap: Path, *, direction: str = "out",
                  bpf_filter: str = TAGGED_FILTER, timeout: float = 10.0,
                  nano: bool = False) -> PortCapture:
    """tcpdump on one port; returns once it is listening. ``nano``: the
    pcap's timestamps in nanoseconds (CLOCK_REALTIME, as every capture's)."""
    # --immediate-mode: without it packets reach tcpdump a ring block at a time
    # (or after a 1 s timeout), and a capture stopped right after a short run
    # loses them all.
    argv = ["tcpdump", "-i", ifname, "-Q", direction, "-s", str(SNAPLEN), "-n", "-U",
            "--immediate-mode", *(["--time-stamp-precision", "nano"] if nano else []),
            "-w", str(pcap), bpf_filter]
    proc = ns_popen(netns, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "listening on" in line:
                return PortCapture(netns, ifname, pcap, proc)
            if not line and proc.poll() is not None:
                break
    except BaseException:
        stop(proc)
        raise
    stop(proc)
    raise CaptureError(f"tcpdump on {netns}:{ifname} did not start: {line.strip() or 'no output'}")


def tensor_ports(captures: list[PortCapture], *,
                 min_packets: int = 0) -> dict[WireTensorKey, dict[str, int]]:
    """{WireTensorKey(source address, tensor_id): {port: tagged packets}} from
    stopped captures' pcap files: a tensor is its sender's, so two hosts'
    tensors of one id are two tensors (common.wire.WireTensorKey).

    A capture that did not run is an error, never an empty result: its pcap
    missing or without a pcap header, tcpdump ended before stop(), or fewer
    than ``min_packets`` packets in it (tagged or not; give a broader
    ``bpf_filter`` to start_capture to prove that traffic was seen)."""
    seen: dict[WireTensorKey, dict[str, int]] = {}
    for cap in captures:
        if not cap.stopped:
            raise CaptureError(f"{cap}: still running; stop() it before reading its file")
        if cap.exited_early is not None:
            raise CaptureError(f"{cap}: tcpdump ended by itself (exit {cap.exited_early}) before "
                               "the capture was stopped: packets after that were not seen")
        try:
            size = cap.pcap.stat().st_size
        except FileNotFoundError:
            raise CaptureError(f"{cap}: no pcap file: tcpdump never wrote it, so nothing "
                               "on this port was seen") from None
        if size < _PCAP_HEADER_LEN:
            raise CaptureError(f"{cap}: empty pcap file ({size} bytes, not even the pcap "
                               "header): tcpdump did not capture on this port")
        packets = 0
        with PcapReader(str(cap.pcap)) as reader:
            for pkt in reader:
                packets += 1
                key = tensor_key_of(pkt)
                if key is None:
                    continue
                ports = seen.setdefault(key, {})
                ports[cap.ifname] = ports.get(cap.ifname, 0) + 1
        if packets < min_packets:
            raise CaptureError(f"{cap}: {packets} packet(s) captured, expected at least "
                               f"{min_packets}: the traffic never passed this port")
    return seen
