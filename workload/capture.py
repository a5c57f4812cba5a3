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

from talb.wire import talb_header_of
from workload.netexec import ns_popen

# IPv4 with IHL 8 whose first option is TaLB's (type 0x9E): tagged packets only.
TAGGED_FILTER = "ip and (ip[0] & 0xf) = 8 and ip[20] = 0x9e"
SNAPLEN = 96  # Ethernet + IPv4 with option + TCP with options


class CaptureError(RuntimeError):
    pass


@dataclass
class PortCapture:
    netns: str
    ifname: str
    pcap: Path
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # tcpdump flushes its file on SIGTERM
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_capture(netns: str, ifname: str, pcap: Path, *, direction: str = "out",
                  bpf_filter: str = TAGGED_FILTER, timeout: float = 10.0) -> PortCapture:
    """tcpdump on one port; returns once it is listening."""
    # --immediate-mode: without it packets reach tcpdump a ring block at a time
    # (or after a 1 s timeout), and a capture stopped right after a short run
    # loses them all.
    argv = ["tcpdump", "-i", ifname, "-Q", direction, "-s", str(SNAPLEN), "-n", "-U",
            "--immediate-mode", "-w", str(pcap), bpf_filter]
    proc = ns_popen(netns, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "listening on" in line:
            return PortCapture(netns, ifname, pcap, proc)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise CaptureError(f"tcpdump on {netns}:{ifname} did not start: {line.strip() or 'no output'}")


def tensor_ports(captures: list[PortCapture]) -> dict[int, dict[str, int]]:
    """{tensor_id: {port: packets}} from stopped captures' pcap files."""
    seen: dict[int, dict[str, int]] = {}
    for cap in captures:
        if not cap.pcap.exists():
            continue
        with PcapReader(str(cap.pcap)) as reader:
            for pkt in reader:
                hdr = talb_header_of(pkt)
                if hdr is None:
                    continue
                ports = seen.setdefault(hdr.tensor_id, {})
                ports[cap.ifname] = ports.get(cap.ifname, 0) + 1
    return seen
