"""Captures of a transparently tagged job at the senders' links and the
leaves' uplinks, and the check that every data packet is tagged, no tensor
split, one LAST each: shared by the MPI and the PyTorch live tests
(tests/test_mpi_live.py, tests/test_torch_live.py)."""
from __future__ import annotations

from common import paths


def start(prefix: str, topo, hosts: list[str], directory, bpf_filter: str):
    """tcpdump outbound on each host's eth0 (what the host sent, before any
    switch) and on every leaf's uplinks (which spine each packet took), of
    the packets ``bpf_filter`` picks; ``<node>-<ifname>.pcap`` in ``directory``."""
    from workload.capture import start_capture

    where = [(h, "eth0") for h in hosts]
    where += [(sw.name, p.name) for sw in topo.switches if sw.role == "leaf"
              for p in topo.ports(sw.name) if p.kind == "fabric"]
    caps = []
    try:
        for node, ifname in where:
            caps.append(start_capture(paths.netns_name(prefix, node), ifname,
                                      directory / f"{node}-{ifname}.pcap", bpf_filter=bpf_filter))
    except BaseException:
        for c in caps:
            c.stop()
        raise
    return caps


def data_packets(pcap):
    """(src, dst, sport, dport, seq, TaLBHeader or None) of every TCP packet with payload."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import PcapReader

    from common.wire import talb_header_of

    out = []
    with PcapReader(str(pcap)) as reader:
        for pkt in reader:
            if IP not in pkt or TCP not in pkt:
                continue
            ip, tcp = pkt[IP], pkt[TCP]
            if ip.len - ip.ihl * 4 - tcp.dataofs * 4 <= 0:
                continue
            out.append((ip.src, ip.dst, tcp.sport, tcp.dport, tcp.seq, talb_header_of(pkt)))
    return out


def check_every_packet_tagged(at_host: dict, at_uplink: dict, ip: dict, leaf_of_ip: dict,
                              workers: dict, counters: dict) -> dict:
    """Every data packet the hosts sent carries the TaLB option; each tensor
    is of one connection, one length, one layer, has one LAST packet (a
    retransmission repeats it, never adds another) and crossed exactly one
    spine (a one-packet tensor's retransmission excepted: below); every tag is the tagger's (its worker slot ``workers[host]`` in
    the id's low bits), for a write the kernel registered (``counters``).
    Returns the coverage: packets, tagged packets, tensors, crossing tensors."""
    from datapath.sendmsg_tagger import WORKER_BITS

    untagged = [p[:5] for pkts in at_host.values() for p in pkts if p[5] is None]
    assert untagged == [], f"{len(untagged)} untagged data packets, e.g. {untagged[:3]}; " \
                           f"counters {counters}"
    crossed = [p for pkts in at_uplink.values() for p in pkts]
    assert [p[:5] for p in crossed if p[5] is None] == []
    tensors: dict = {}
    for pkts in at_host.values():
        for src, dst, sport, dport, seq, h in pkts:
            tensors.setdefault((src, h.tensor_id), []).append(((src, dst, sport, dport), seq, h))
    # a tiny write that TCP appended to the previous write's last unsent segment
    # rides in that tensor's packet and has none of its own (docs/workload.md,
    # "Limits"): at most as many tensors as writes
    worker_of_ip = {ip[h]: w for h, w in workers.items()}
    assert all(tid & ((1 << WORKER_BITS) - 1) == worker_of_ip[src] for src, tid in tensors), \
        workers
    assert 0 < len(tensors) <= counters["started"], (counters, len(tensors))
    assert counters["ring_full"] == counters["too_large"] == counters["no_host_map"] == 0, counters
    for key, pkts in tensors.items():
        assert len({conn for conn, _, _ in pkts}) == 1, (key, "more than one connection")
        assert len({(h.tensor_len, h.layer) for _, _, h in pkts}) == 1, (key, pkts[:3])
        lasts = {h.pkt_idx for _, _, h in pkts if h.last}
        assert len(lasts) == 1, (key, lasts)
        idx = {h.pkt_idx for _, _, h in pkts}
        # its packets numbered 0, 1, ... without a gap, LAST the highest, within its length
        assert idx == set(range(max(idx) + 1)) and lasts == {max(idx)} and \
            max(idx) < pkts[0][2].tensor_len, (key, sorted(idx), lasts)
        # a retransmitted segment keeps its tag: one sequence number, one packet index
        by_seq: dict = {}
        for _, seq, h in pkts:
            by_seq.setdefault(seq, set()).add((h.pkt_idx, h.last))
        assert all(len(v) == 1 for v in by_seq.values()), key
    # no tensor split: each crossing tensor left its leaf on exactly one uplink (one
    # spine). A one-packet tensor is decided but never inserted in the leaf's table
    # (docs/talb-decisions.md): a retransmission of its one packet is decided again and
    # may take the other spine, a second copy of one packet, not a split
    spines: dict = {}
    length: dict = {}
    for where, pkts in at_uplink.items():
        for src, _, _, _, _, h in pkts:
            spines.setdefault((src, h.tensor_id), set()).add(where)
            length[(src, h.tensor_id)] = h.tensor_len
    split = {k: v for k, v in spines.items() if len(v) != 1 and length[k] > 1}
    assert split == {}, split
    one_packet_twice = sum(1 for k, v in spines.items() if len(v) != 1 and length[k] == 1)
    crossing = {k for k, pkts in tensors.items()
                if leaf_of_ip[pkts[0][0][0]] != leaf_of_ip[pkts[0][0][1]]}
    assert set(spines) == crossing
    assert all(next(iter(spines[k])).startswith(leaf_of_ip[k[0]] + ":") for k in spines)
    packets = sum(len(p) for p in at_host.values())
    return {"packets": packets, "tagged": packets - len(untagged), "tensors": len(tensors),
            "crossing_tensors": len(crossing), "split": len(split),
            "one_packet_tensors_resent_on_another_spine": one_packet_twice}
