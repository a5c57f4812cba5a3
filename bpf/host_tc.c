/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * host_tc.c - the sending host's data path at TC egress (clsact,
 * direct-action) of the host's eth0: every data segment of a tensor sent
 * through workload/tensor_sender.py leaves with the TaLB IPv4 option
 * (docs/design.md §4), retransmissions included; everything else leaves
 * untouched. The logic lives in talb/host_tag.h.
 *
 * Per packet: parse Ethernet -> IPv4 -> TCP; a SYN records the ISN; a
 * segment with payload of a flow that has a ring (flow_rings, written by the
 * library) and a known ISN gets stream offset seq - ISN - 1, the descriptor
 * owning that offset; a flow without one but with a sendmsg ring (writes of
 * an unmodified process, registered by bpf/host_sendmsg.c in sequence
 * space) gets the write owning its raw sequence number; then the option is
 * pushed right after the 20-byte base header: bpf_skb_adjust_room(+12, BPF_ADJ_ROOM_NET) opens the room there,
 * one store writes the new 32-byte IPv4 header (IHL 8, total length + 12,
 * checksum). The TaLB option is therefore always the first and only
 * option of a tagged packet (packets that had options are not tagged).
 *
 * Every tagged packet also stamps its tensor's entry in tensor_wire (its
 * first packet, the first pass of its LAST packet and its latest packet at
 * TC egress, packets: host_note_wire), which `talb run` reads for the
 * tensors' network FCT (docs/workload.md, "Measurement").
 *
 * Verdicts: TC_ACT_OK, except TC_ACT_SHOT when the header store fails after
 * the room was opened (the packet would leave with 12 garbage bytes; TCP
 * retransmits it). Exactly one HOST_CNT_* is counted per packet.
 *
 * Loaded by datapath/host_loader.py (bcc, SCHED_CLS), which expands the
 * #include "talb/..." lines into one text first (see talb/host_maps.h).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>

#include "talb/host_constants.h"
#include "talb/host_structs.h"
#include "talb/host_maps.h"
#include "talb/host_tag.h"
#include "talb/skb.h"

int talb_host_tc(struct __sk_buff *skb)
{
	struct hdr_cursor nh;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct talb_tcphdr *tcph;
	struct host_flow_key key;
	struct host_ring *ring;
	struct host_isn *isn;
	struct host_seq_ring *sring;
	struct host_desc seqd = {};
	const struct host_desc *d;
	__u32 cnt;
	union host_l3 l3;
	void *data, *data_end;
	__u32 off;
	int proto, tcp_hlen, payload;

	/* Headers in the linear area (a no-op for TCP's own packets). */
	talb_pull_headers(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	nh.pos = data;

	proto = parse_ethhdr(&nh, data_end, &eth);
	if (proto < 0) {
		host_count(HOST_CNT_MALFORMED);
		return TC_ACT_OK;
	}
	if (proto != bpf_htons(ETH_P_IP)) {
		host_count(HOST_CNT_NOT_TCP);
		return TC_ACT_OK;
	}
	proto = parse_iphdr(&nh, data_end, &iph);
	if (proto < 0) {
		host_count(HOST_CNT_MALFORMED);
		return TC_ACT_OK;
	}
	if (proto != IPPROTO_TCP) {
		host_count(HOST_CNT_NOT_TCP);
		return TC_ACT_OK;
	}
	if (ipv4_is_fragment(iph)) {
		host_count(HOST_CNT_UNTAGGED_FRAGMENT);
		return TC_ACT_OK;
	}
	tcp_hlen = parse_tcphdr(&nh, data_end, &tcph);
	if (tcp_hlen < 0) {
		host_count(HOST_CNT_MALFORMED);
		return TC_ACT_OK;
	}
	payload = (int)bpf_ntohs(iph->tot_len) - iph->ihl * 4 - tcp_hlen;
	if (payload < 0) {
		host_count(HOST_CNT_MALFORMED);
		return TC_ACT_OK;
	}

	key.saddr = iph->saddr;
	key.daddr = iph->daddr;
	key.sport = tcph->source;
	key.dport = tcph->dest;

	if (tcph->flags & HOST_TCP_SYN) {
		host_learn_isn(&key, tcph);
		host_count(HOST_CNT_ISN_LEARNED);
		return TC_ACT_OK;
	}
	if (payload == 0) {
		host_count(HOST_CNT_PURE_ACK);
		return TC_ACT_OK;
	}
	/* flow_rings first (TensorSender, stream offsets); only on a miss the
	 * writes an unmodified process made (sendmsg_rings, raw sequence
	 * numbers): one extra lookup for untagged traffic. */
	ring = flow_rings.lookup(&key);
	if (ring) {
		isn = flow_isn.lookup(&key);
		if (!isn) {
			host_count(HOST_CNT_UNTAGGED_NO_ISN);
			return TC_ACT_OK;
		}
		off = bpf_ntohl(tcph->seq) - isn->isn - 1;
		d = host_find_desc(ring, off);
		cnt = HOST_CNT_TAGGED;
	} else {
		sring = sendmsg_rings.lookup(&key);
		if (!sring) {
			host_count(HOST_CNT_UNTAGGED_NO_RING);
			return TC_ACT_OK;
		}
		off = bpf_ntohl(tcph->seq);
		d = host_find_seq_desc(sring, off, &seqd) ? &seqd : NULL;
		cnt = HOST_CNT_TAGGED_SENDMSG;
	}
	if (!d) {
		host_count(HOST_CNT_UNTAGGED_NO_DESCRIPTOR);
		return TC_ACT_OK;
	}
	if (iph->ihl != HOST_IPV4_IHL) {
		host_count(HOST_CNT_UNTAGGED_IP_OPTIONS);
		return TC_ACT_OK;
	}
	/* A GSO skb would be cut into segments that all carry this one
	 * option (same pkt_idx); hosts run with gso_max_segs 1. */
	if (skb->gso_size) {
		host_count(HOST_CNT_UNTAGGED_GSO);
		return TC_ACT_OK;
	}

	host_build_l3(&l3, iph, d, off, payload);   /* before: pointers die */
	if (bpf_skb_adjust_room(skb, TALB_IPOPT_LEN, BPF_ADJ_ROOM_NET, 0)) {
		host_count(HOST_CNT_PUSH_FAILED);   /* skb unchanged */
		return TC_ACT_OK;
	}
	if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &l3, sizeof(l3), 0)) {
		host_count(HOST_CNT_PUSH_FAILED);
		return TC_ACT_SHOT;
	}
	host_count(cnt);
	host_note_wire(bpf_ntohl(l3.h.opt.tensor_id), l3.h.opt.flags);
	return TC_ACT_OK;
}
