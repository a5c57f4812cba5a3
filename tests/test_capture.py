"""Reading captures (workload/capture.py tensor_ports): tensors keyed by
(source, tensor_id), and a capture that did not run is an error, never an
empty result."""
from __future__ import annotations

import subprocess

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from common.wire import IPOption_TaLB, WireTensorKey
from workload.capture import CaptureError, PortCapture, tensor_ports


def _capture(pcap, *, ifname="spine0", stopped=True, exit_early=False) -> PortCapture:
    """A PortCapture whose tcpdump is a stand-in process (`sleep`), so that
    only the reading is under test."""
    proc = subprocess.Popen(["sleep", "0" if exit_early else "30"])
    if exit_early:
        proc.wait()
    cap = PortCapture("t0x-leaf0", ifname, pcap, proc)
    if stopped:
        cap.stop()
    return cap


def _tagged(src, tid, idx=0):
    return Ether() / IP(src=src, dst="10.0.1.2", options=[
        IPOption_TaLB(tensor_id=tid, tensor_len=4, pkt_idx=idx)]) / TCP()


def test_tensors_are_keyed_by_source_and_id(tmp_path):
    a, b = tmp_path / "a.pcap", tmp_path / "b.pcap"
    wrpcap(str(a), [_tagged("10.0.0.1", 7, 0), _tagged("10.0.0.2", 7, 0),
                    _tagged("10.0.0.1", 7, 1), Ether() / IP(src="10.0.0.1") / TCP()])
    wrpcap(str(b), [_tagged("10.0.0.2", 7, 1)])
    got = tensor_ports([_capture(a, ifname="spine0"), _capture(b, ifname="spine1")])
    assert got == {WireTensorKey("10.0.0.1", 7): {"spine0": 2},
                   WireTensorKey("10.0.0.2", 7): {"spine0": 1, "spine1": 1}}


def test_missing_pcap_is_an_error_naming_port_and_file(tmp_path):
    pcap = tmp_path / "never.pcap"
    with pytest.raises(CaptureError, match=rf"t0x-leaf0:spine0 \({pcap}\).*no pcap file"):
        tensor_ports([_capture(pcap)])


def test_empty_pcap_is_an_error(tmp_path):
    pcap = tmp_path / "empty.pcap"
    pcap.touch()
    with pytest.raises(CaptureError, match=rf"{pcap}.*empty pcap file \(0 bytes"):
        tensor_ports([_capture(pcap)])


def test_too_few_packets_is_an_error_when_packets_are_expected(tmp_path):
    pcap = tmp_path / "none.pcap"
    wrpcap(str(pcap), [])
    assert pcap.stat().st_size == 24  # the header only: tcpdump ran, saw nothing
    assert tensor_ports([_capture(pcap)]) == {}
    with pytest.raises(CaptureError, match=r"spine0.*0 packet\(s\) captured, expected at least 1"):
        tensor_ports([_capture(pcap)], min_packets=1)
    untagged = tmp_path / "untagged.pcap"
    wrpcap(str(untagged), [Ether() / IP() / TCP()] * 3)
    assert tensor_ports([_capture(untagged)], min_packets=3) == {}


def test_a_running_or_dead_tcpdump_is_an_error(tmp_path):
    pcap = tmp_path / "x.pcap"
    wrpcap(str(pcap), [_tagged("10.0.0.1", 1)])
    running = _capture(pcap, stopped=False)
    try:
        with pytest.raises(CaptureError, match="still running"):
            tensor_ports([running])
    finally:
        running.stop()
    assert running.proc.returncode is not None  # stop() reaped it
    dead = _capture(pcap, exit_early=True)
    with pytest.raises(CaptureError, match=r"tcpdump ended by itself \(exit 0\)"):
        tensor_ports([dead])
