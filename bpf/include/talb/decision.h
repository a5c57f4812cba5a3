/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/decision.h - the switch's decision core, shared by every entry point.
 *
 *   talb_extract()     packet bytes [data, data_end) -> struct talb_pkt
 *                      (Ethernet, IPv4 with the TaLB option, L4 ports)
 *   talb_route()       packet -> its forwarding group
 *   (the scheme's choice: its header's hooks, called through
 *                      talb/scheme_dispatch.h -- no scheme is named here)
 *   talb_verdict_for() index -> verdict: forward to (egress ifindex, port
 *                      id, port flags, skb->priority of the band) or pass
 *                      to the stack, with the reason (a CNT_* index)
 *
 * Beside the decision, whatever the scheme: every tagged packet forwarded
 * into the fabric marks its tensor's egress port (talb_note_egress,
 * tensor_egress.h), the record `talb send` checks tensor integrity on.
 *
 * Which scheme runs where is each scheme's own declaration
 * (TALB_SCHEME_<NAME>_FLAGS): in the main program (TALB_SF_INLINE) or in a
 * program of its own, reached by a tail call (the verifier budget and the
 * cost per packet: docs/schemes.md).
 *
 * Nothing here touches an skb or an xdp_md: the TC entry point
 * (switch_tc.c) and a later XDP one only differ in how they read the
 * packet, count bytes and act on the verdict. docs/design.md §5.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_DECISION_H
#define TALB_DECISION_H

#include "talb/parsing_helpers.h"
#include "talb/pkt.h"
#include "talb/tensor_egress.h"

/* The egress hooks of the scheme in force (talb/scheme_dispatch.h, built
 * after the schemes' headers). */
static __always_inline void talb_scheme_egress(const struct talb_config *cfg, __u32 port_id,
					       __u32 len, __u64 now);

/* Parse Ethernet -> IPv4 -> TCP/UDP ports. Returns 1 for an IPv4 packet
 * with all the headers it claims, 0 (with v->reason) otherwise. */
static __always_inline int talb_extract(void *data, void *data_end,
					struct talb_pkt *p,
					struct talb_verdict *v)
{
	struct hdr_cursor nh = { .pos = data };
	struct ethhdr *eth;
	struct iphdr *iph;
	struct talb_tcphdr *tcph;
	struct udphdr *udph;
	int proto;

	proto = parse_ethhdr(&nh, data_end, &eth);
	if (proto < 0) {
		v->reason = CNT_PASS_MALFORMED;
		return 0;
	}
	if (proto != bpf_htons(ETH_P_IP)) {
		v->reason = CNT_PASS_NOT_IPV4;
		return 0;
	}
	proto = parse_iphdr(&nh, data_end, &iph);
	if (proto < 0) {
		v->reason = CNT_PASS_MALFORMED;
		return 0;
	}
	p->saddr = bpf_ntohl(iph->saddr);
	p->daddr = bpf_ntohl(iph->daddr);
	p->daddr_be = iph->daddr;
	p->proto = proto;
	p->ip_hlen = iph->ihl * 4;
	if (iph->ihl > 5) {
		struct talb_opt_fields o = {};
		int r = parse_talb_option(iph, data_end, &o);

		if (o.seen)
			p->flags |= TALB_PKT_OPT_SEEN;
		if (o.strippable)
			p->flags |= TALB_PKT_OPT_STRIP;
		if (r == CNT_OPT_TAGGED) {
			p->flags |= TALB_PKT_TAGGED;
			if (o.flags & TALB_IPOPT_F_LAST)
				p->flags |= TALB_PKT_LAST;
			p->tensor_id = o.tensor_id;
			p->tensor_len = o.tensor_len;
			p->pkt_idx = o.pkt_idx;
			p->layer = o.layer;
			if (o.offset)
				talb_count(CNT_OPT_NOT_FIRST);
		} else {
			/* Not tagged (no TaLB option, or a malformed one:
			 * counted by reason, forwarded as untagged). */
			p->flags |= TALB_PKT_IP_OPTIONS;
			talb_count(CNT_IP_OPTIONS);
		}
		if (r)
			talb_count(r);
	}
	if (ipv4_is_fragment(iph)) {
		/* Every fragment of a datagram (the first one too) hashes
		 * with ports 0, so that all of them take one path. */
		p->flags |= TALB_PKT_FRAGMENT;
		talb_count(CNT_IP_FRAGMENT);
		return 1;
	}
	if (proto == IPPROTO_TCP) {
		if (parse_tcphdr(&nh, data_end, &tcph) < 0) {
			v->reason = CNT_PASS_MALFORMED;
			return 0;
		}
		p->sport = bpf_ntohs(tcph->source);
		p->dport = bpf_ntohs(tcph->dest);
	} else if (proto == IPPROTO_UDP) {
		if (parse_udphdr(&nh, data_end, &udph) < 0) {
			v->reason = CNT_PASS_MALFORMED;
			return 0;
		}
		p->sport = bpf_ntohs(udph->source);
		p->dport = bpf_ntohs(udph->dest);
	}
	/* other protocols (ICMP, ...): ports stay 0 */
	return 1;
}

/* The configuration in force (config[0]). */
static __always_inline const struct talb_config *talb_config_get(void)
{
	__u32 zero = 0;

	return config.lookup(&zero);
}

/* A group the data path may index: present, with 1..TALB_MAX_GROUP_PORTS
 * ports. */
static __always_inline int talb_group_usable(const struct fwd_group *g)
{
	return g && g->n_ports != 0 && g->n_ports <= TALB_MAX_GROUP_PORTS;
}

/* Route: the packet's forwarding group. 1 with *g and *gid set, or 0 with
 * v->reason = the CNT_PASS_* why the packet goes to the stack. */
static __always_inline int talb_route(const struct talb_pkt *p, struct talb_verdict *v,
				      struct fwd_group **g, __u32 *gid)
{
	__be32 daddr = p->daddr_be;
	__u32 slot = ((__u32)daddr * TALB_ROUTE_HASH_MUL) >> (32 - TALB_ROUTE_SLOT_BITS);
	struct route_slot *rs = route_slots.lookup(&slot);
	__u32 id;

	if (rs && (rs->flags & ROUTE_SLOT_USED) && rs->daddr == daddr) {
		id = rs->group_id;
	} else {        /* its slot holds another route, or none: the hash */
		__u32 *hid = fwd.lookup(&daddr);

		if (!hid) {
			v->reason = CNT_PASS_NO_ROUTE;
			return 0;
		}
		id = *hid;
	}
	*gid = id;
	*g = groups.lookup(&id);
	if (!talb_group_usable(*g)) {
		v->reason = CNT_PASS_GROUP_EMPTY;
		return 0;
	}
	return 1;
}

/* Priority band of a packet (any scheme): untagged traffic in band 0 --
 * HTB's default class, where everything unmarked lands too -- and tagged
 * tensors by layer in bands 1..n_bands-1, front layers (small numbers, the
 * ones the next iteration's forward pass needs first) in the higher
 * priority bands: band = 1 + layer / layers_per_band, the last band taking
 * the rest. With one band everything shares it. */
static __always_inline __u32 talb_band(const struct talb_pkt *p,
				       const struct talb_config *cfg)
{
	__u32 nb = cfg->n_bands, per = cfg->layers_per_band, b;

	if (nb > TALB_MAX_BANDS)
		nb = TALB_MAX_BANDS;
	if (nb <= 1 || !(p->flags & TALB_PKT_TAGGED))
		return TALB_BAND_UNTAGGED;
	if (per == 0)
		per = TALB_DEFAULT_LAYERS_PER_BAND;
	b = 1 + p->layer / per;
	return b < nb ? b : nb - 1;
}

/* The verdict for index idx of group g, chosen by the decision counted as
 * dcnt: 1 with v->egress_* set (v->reason = CNT_REDIRECTED; the entry point
 * may turn it into CNT_RELEASED), or 0 with v->reason = CNT_PASS_*. Never
 * a port that is not in `ports` with PORT_UP, nor the ingress port. */
static __always_inline int talb_verdict_for(const struct talb_pkt *p,
					    const struct fwd_group *g,
					    const struct talb_config *cfg, __u32 idx,
					    __u32 dcnt, __u64 now, struct talb_verdict *v)
{
	struct port_info out = {};
	__u32 egress;

	talb_count(dcnt);
	if (idx >= TALB_MAX_GROUP_PORTS) {      /* bound for the verifier */
		v->reason = CNT_PASS_GROUP_EMPTY;
		return 0;
	}
	egress = g->ifindex[idx];
	if (!talb_port_get(egress, &out) || !(out.flags & PORT_UP)) {
		v->reason = CNT_PASS_EGRESS_DOWN;
		return 0;
	}
	if (egress == p->ingress_ifindex) {
		v->reason = CNT_PASS_HAIRPIN;
		return 0;
	}
	v->reason = CNT_REDIRECTED;
	v->egress_ifindex = egress;
	v->egress_port_id = out.port_id;
	v->cfg_flags = cfg->flags;
	v->egress_flags = out.flags;
	v->priority = TALB_HTB_MAJOR | (TALB_BAND_MINOR_BASE + talb_band(p, cfg));
	talb_note_egress(p, out.port_id, out.flags, now);
	talb_scheme_egress(cfg, out.port_id, p->len, now);
	return 1;
}

#endif /* TALB_DECISION_H */
