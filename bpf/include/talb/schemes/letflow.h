/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/letflow.h - LetFlow (Vanini et al., NSDI 2017): flowlets on
 * random paths.
 *
 * A flowlet table keyed by the 5-tuple (`flowlets`, struct flow_key ->
 * struct flowlet {port, last seen}). A packet whose flow was last seen at
 * most flowlet_timeout_us ago keeps the flowlet's port (CNT_FLOWLET_SAME);
 * after a longer gap -- or for a new flow, or when the flowlet's port left
 * the group or went down -- it starts a new flowlet on a uniformly random
 * usable port (CNT_FLOWLET_NEW). The gap is compared with "greater than":
 * a gap of exactly the timeout still belongs to the flowlet. Every packet
 * refreshes last seen. The paper's table is a hash-indexed array whose
 * collisions merge flows; a hash map keyed by the whole 5-tuple has none
 * (LRU: an old flow's entry gives way, it then simply starts a new
 * flowlet). datapath/schemes/letflow.py is the model; docs/schemes.md the
 * timeout's default.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_LETFLOW_H
#define TALB_SCHEMES_LETFLOW_H

#include "talb/pkt.h"
#include "talb/schemes/pick.h"

static __always_inline __u64 talb_flowlet_timeout_ns(const struct talb_config *cfg)
{
	return (__u64)(cfg->flowlet_timeout_us ? cfg->flowlet_timeout_us :
		       TALB_DEFAULT_FLOWLET_US) * 1000;
}

static __always_inline void talb_flow_key(const struct talb_pkt *p, struct flow_key *k)
{
	k->saddr = p->saddr;
	k->daddr = p->daddr;
	k->sport = p->sport;
	k->dport = p->dport;
	k->proto = p->proto;
}

/* The flowlet step LetFlow and CONGA share: the index of the flow's
 * current flowlet port when its last packet came at most the gap ago and
 * that port is still usable (last seen refreshed), else -1: a new flowlet,
 * placed by the caller and recorded with talb_flowlet_start. */
static __always_inline int talb_flowlet_keep(struct flow_key *key,
					     const struct fwd_group *g, __u32 n,
					     const struct talb_up *up,
					     const struct talb_config *cfg, __u64 now)
{
	struct flowlet *f = flowlets.lookup(key);
	int i;

	if (!f || (__s64)(now - f->last_seen_ns) > (__s64)talb_flowlet_timeout_ns(cfg))
		return -1;
	i = talb_port_index(g, f->port, n);
	if (i < 0 || !talb_is_up(up, i))
		return -1;
	f->last_seen_ns = now;
	talb_count(CNT_FLOWLET_SAME);
	return i;
}

static __always_inline void talb_flowlet_start(struct flow_key *key, __u32 ifindex,
					       __u64 now)
{
	struct flowlet fresh = { .port = ifindex, .last_seen_ns = now };

	flowlets.update(key, &fresh);
	talb_count(CNT_FLOWLET_NEW);
}

TALB_SCHEME_FN __u32 letflow_select(const struct talb_pkt *p,
					    const struct fwd_group *g, __u32 n,
					    const struct talb_config *cfg, __u64 now)
{
	struct flow_key key = {};
	struct talb_up up;
	__u32 idx;
	int i;

	talb_up_ports(g, n, &up);
	talb_flow_key(p, &key);
	i = talb_flowlet_keep(&key, g, n, &up, cfg, now);
	if (i >= 0)
		return i;
	if (!up.k)
		return 0;       /* nothing usable: not a flowlet */
	idx = talb_pick_up(&up);
	talb_flowlet_start(&key, g->ifindex[idx], now);
	return idx;
}

#endif /* TALB_SCHEMES_LETFLOW_H */
