/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/host_tag.h - the sending host's tagging core (docs/design.md §4,
 * "How a host knows tensor boundaries (TCP)"):
 *
 *   host_learn_isn()   our SYN / SYN-ACK -> flow_isn
 *   host_find_desc()   stream offset -> the descriptor owning it
 *   host_find_seq_desc() sequence number -> the write (sendmsg_rings) owning
 *                      it, as a host_desc in sequence space
 *   host_build_l3()    base IPv4 header + descriptor -> the 32-byte header
 *                      to write back (IHL 8, total length + 12, checksum)
 *   host_note_wire()   a tagged packet passes: its tensor's egress times
 *                      (tensor_wire)
 *
 * Needs talb/host_maps.h included before it.
 */
#ifndef TALB_HOST_TAG_H
#define TALB_HOST_TAG_H

#include "talb/constants.h"     /* TALB_IPOPT_*: the option, as the switch reads it */
#include "talb/talb_option.h"   /* struct talb_opt: the option as on the wire */
#include "talb/parsing_helpers.h"

#define HOST_TCP_SYN    0x02    /* talb_tcphdr.flags */
#define HOST_TCP_ACK    0x10
#define HOST_IPV4_IHL   (TALB_IP_BASE_LEN / 4)  /* IHL of a header without options */
/* IHL once the option is in: (20 + 12) / 4 */
#define HOST_TAGGED_IHL ((TALB_IP_BASE_LEN + TALB_IPOPT_LEN) / 4)

/* host_constants.h repeats the flags for datapath/host_maps.py (its parser
 * reads one file); the program writes the TALB_IPOPT_* ones. */
_Static_assert(HOST_OPT_VERSION == TALB_IPOPT_VERSION &&
	       HOST_OPT_F_LAST == TALB_IPOPT_F_LAST,
	       "host_constants.h HOST_OPT_* != constants.h TALB_IPOPT_*");

/* The IPv4 header as it leaves the host: base header, then the TaLB option
 * as the first (and only) option. As 32-bit words for bpf_csum_diff. */
union host_l3 {
	struct {
		struct iphdr ip;
		struct talb_opt opt;
	} __attribute__((packed)) h;
	__be32 words[HOST_TAGGED_IHL];
};

/* Our SYN (active open) or SYN-ACK (passive open) carries our ISN. A new
 * connection on a 4-tuple also starts without descriptors: a ring left by a
 * sender that died without close() must not tag it. */
static __always_inline void host_learn_isn(const struct host_flow_key *key,
					   const struct talb_tcphdr *tcph)
{
	struct host_isn v = { .isn = bpf_ntohl(tcph->seq) };
	struct host_isn *old;

	if (!(tcph->flags & HOST_TCP_ACK)) {
		v.flags = HOST_ISN_ACTIVE;
	} else {
		/* Simultaneous open: our SYN-ACK repeats the ISN of our SYN,
		 * and the SYN still counts in bytes_acked. */
		old = flow_isn.lookup((struct host_flow_key *)key);
		if (old && old->isn == v.isn)
			v.flags = old->flags;
	}
	flow_isn.update((struct host_flow_key *)key, &v);
	flow_rings.delete((struct host_flow_key *)key);
	sendmsg_rings.delete((struct host_flow_key *)key);
}

/* The descriptor whose bytes contain stream offset `off` (the segment's
 * first byte: TCP may coalesce the tail of one tensor with the head of the
 * next into one segment, which then belongs to the first). u32 modular
 * arithmetic, so ranges across the 2^32 wrap work; an empty slot
 * (start == end) matches nothing. Descriptors never overlap (the library
 * gives each tensor the next bytes of the stream), so the first match is
 * the only one. */
static __always_inline const struct host_desc *
host_find_desc(const struct host_ring *ring, __u32 off)
{
	const struct host_desc *d;
	int i;

	for (i = 0; i < HOST_RING_SLOTS; i++) {
		d = &ring->desc[i];
		if (off - d->stream_start < d->stream_end - d->stream_start)
			return d;
	}
	return NULL;
}

/* The registered write whose bytes contain sequence number `seq`, copied
 * into `out` with stream_start/stream_end in sequence space (host_build_l3
 * then works unchanged with off = seq); 0 if none. Each slot's range is
 * one 64-bit load (struct host_seq_desc). Writes of one socket never
 * overlap (each starts at write_seq), so the first match is the only one. */
static __always_inline int host_find_seq_desc(const struct host_seq_ring *ring, __u32 seq,
					      struct host_desc *out)
{
	const struct host_seq_desc *d;
	__u64 range;
	__u32 start, end;
	int i;

	for (i = 0; i < HOST_SEQ_RING_SLOTS; i++) {
		d = &ring->desc[i];
		range = *(volatile const __u64 *)&d->range;
		start = (__u32)range;
		end = (__u32)(range >> 32);
		if (seq - start < end - start) {
			out->stream_start = start;
			out->stream_end = end;
			out->tensor_id = d->tensor_id;
			out->len_pkts = d->len_pkts;
			out->mss = d->mss;
			out->layer = d->layer;
			return 1;
		}
	}
	return 0;
}

static __always_inline __u16 host_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Fill `out` from the packet's base header `iph` (IHL 5) and the
 * descriptor `d` owning the segment [off, off + payload). pkt_idx =
 * (off - start) / mss, LAST when the segment reaches the tensor's end. The
 * IPv4 checksum covers the options and is recomputed; TCP's does not (its
 * pseudo-header has the TCP length, not the IP total length). */
static __always_inline void host_build_l3(union host_l3 *out,
					  const struct iphdr *iph,
					  const struct host_desc *d,
					  __u32 off, __u32 payload)
{
	__u32 rel = off - d->stream_start;
	__u32 idx = d->mss ? rel / d->mss : 0;
	__u8 flags = TALB_IPOPT_VERSION;

	if (rel + payload >= d->stream_end - d->stream_start)
		flags |= TALB_IPOPT_F_LAST;

	__builtin_memcpy(&out->h.ip, iph, sizeof(out->h.ip));
	out->h.ip.ihl = HOST_TAGGED_IHL;
	out->h.ip.tot_len = bpf_htons(bpf_ntohs(iph->tot_len) + TALB_IPOPT_LEN);
	out->h.ip.check = 0;
	out->h.opt.type = TALB_IPOPT_TYPE;
	out->h.opt.len = TALB_IPOPT_LEN;
	out->h.opt.tensor_id = bpf_htonl(d->tensor_id);
	out->h.opt.layer = d->layer;
	out->h.opt.flags = flags;
	out->h.opt.tensor_len = bpf_htons(d->len_pkts);
	out->h.opt.pkt_idx = bpf_htons((__u16)idx);
	out->h.ip.check = host_csum_fold(bpf_csum_diff(NULL, 0, out->words,
						       sizeof(out->words), 0));
}

/* A packet of tensor `tensor_id` (host byte order) leaves tagged now,
 * `opt_flags` its option's flags byte. The tensor's first packet starts its
 * tensor_wire entry, and so does the first one after HOST_WIRE_STALE_NS of
 * silence (the entry is an earlier tensor that had the same id); every
 * packet moves latest_ns and counts; the first pass of the LAST packet sets
 * last_ns (a retransmission of it does not: the receiver may have had the
 * byte long before, e.g. a tail loss probe). Plain stores: the packets of
 * one tensor are sent under one socket's lock (talb/host_maps.h). */
static __always_inline void host_note_wire(__u32 tensor_id, __u8 opt_flags)
{
	__u64 now = bpf_ktime_get_ns();
	int last = (opt_flags & TALB_IPOPT_F_LAST) != 0;
	struct host_wire fresh = {};
	struct host_wire *w;

	w = tensor_wire.lookup(&tensor_id);
	if (w && (__s64)(now - w->latest_ns) >= 0 &&
	    now - w->latest_ns <= HOST_WIRE_STALE_NS) {
		w->latest_ns = now;
		w->packets += 1;
		if (last && !w->last_ns)
			w->last_ns = now;
		return;
	}
	fresh.first_ns = now;
	fresh.last_ns = last ? now : 0;
	fresh.latest_ns = now;
	fresh.packets = 1;
	tensor_wire.update(&tensor_id, &fresh);
}

#endif /* TALB_HOST_TAG_H */
