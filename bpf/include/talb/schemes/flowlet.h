/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/flowlet.h - the flowlet step LetFlow (schemes/letflow.h)
 * and CONGA (schemes/conga.h) share; they differ only in where a new
 * flowlet goes.
 *
 * A flowlet table keyed by the 5-tuple (`flowlets`, struct flow_key ->
 * struct flowlet {port, last seen}), one for both schemes: a switch moved
 * from one to the other keeps the flows' current flowlets. A packet whose
 * flow was last seen at most flowlet_timeout_us ago keeps the flowlet's
 * port (CNT_FLOWLET_SAME); after a longer gap -- or for a new flow, or when
 * the flowlet's port left the group or went down -- it starts a new
 * flowlet (CNT_FLOWLET_NEW), placed by the scheme. The gap is compared
 * with "greater than": a gap of exactly the timeout still belongs to the
 * flowlet. A kept flowlet's last seen is refreshed; a new one is recorded
 * with the instant it started. The paper's table is a hash-indexed array
 * whose collisions merge flows; a hash map keyed by the whole 5-tuple has
 * none (LRU: an old flow's entry gives way, it then simply starts a new
 * flowlet).
 *
 *   talb_flowlet_step()   the usable ports, the flow's key, and the
 *                         flowlet's port if it goes on
 *   talb_flowlet_start()  record the new flowlet the scheme placed
 *
 * datapath/schemes/letflow.py flowlet_keep / flowlet_start are the model
 * (CONGA's model uses them too); docs/schemes.md the timeout's default.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_FLOWLET_H
#define TALB_SCHEMES_FLOWLET_H

#include "talb/pkt.h"
#include "talb/schemes/pick.h"

/* ---- its limits, default and counters (counters[] indices: free ones
 * below CNT_DECISION_BASE, constants.h; the agent exports them by name) ---- */
#define TALB_FLOWLET_TABLE_SIZE 16384   /* flowlets: 5-tuples (LRU)          */
#define TALB_DEFAULT_FLOWLET_US 500     /* LetFlow flowlet gap               */
#define CNT_FLOWLET_NEW         47      /* new flowlet: random usable port   */
#define CNT_FLOWLET_SAME        48      /* within the gap: the flowlet's port */

/* ---- the flowlet table LetFlow and CONGA share ---- */
/* 5-tuple -> its current flowlet (LetFlow, CONGA) */
TALB_MAP("lru_hash", struct flow_key, struct flowlet, flowlets, TALB_FLOWLET_TABLE_SIZE);

/* talb_flowlet_step: no flowlet goes on, the scheme places a new one. */
#define TALB_FLOWLET_NEW        (-1)

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

/* The flowlet step for packet p and its group g of n >= 2 ports: fills
 * *up (the group's usable ports) and *key (the flow's, zeroed by the
 * caller). Returns the index to take -- the flowlet's port when the flow's
 * last packet came at most the gap ago and that port is still usable
 * (last seen refreshed), or 0 when no port is usable (not a flowlet: the
 * decision core finds port 0 down) -- or TALB_FLOWLET_NEW: the caller
 * places a new flowlet among *up and records it with talb_flowlet_start. */
static __always_inline int talb_flowlet_step(const struct talb_pkt *p,
					     const struct fwd_group *g, __u32 n,
					     const struct talb_config *cfg, __u64 now,
					     struct flow_key *key, struct talb_up *up)
{
	struct flowlet *f;
	int i;

	talb_up_ports(g, n, up);
	talb_flow_key(p, key);
	f = flowlets.lookup(key);
	if (f && (__s64)(now - f->last_seen_ns) <= (__s64)talb_flowlet_timeout_ns(cfg)) {
		i = talb_port_index(g, f->port, n);
		if (i >= 0 && talb_is_up(up, i)) {
			f->last_seen_ns = now;
			talb_count(CNT_FLOWLET_SAME);
			return i;
		}
	}
	if (!up->k)
		return 0;
	return TALB_FLOWLET_NEW;
}

/* A new flowlet of the flow `key` on `ifindex`, starting now. */
static __always_inline void talb_flowlet_start(struct flow_key *key, __u32 ifindex,
					       __u64 now)
{
	struct flowlet fresh = { .port = ifindex, .last_seen_ns = now };

	flowlets.update(key, &fresh);
	talb_count(CNT_FLOWLET_NEW);
}

#endif /* TALB_SCHEMES_FLOWLET_H */
