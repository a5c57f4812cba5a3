/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/presto.h - Presto (He et al., SIGCOMM 2015): a flow cut into
 * flowcells, each flowcell sent on the next path, round-robin.
 *
 * The paper's mechanism (sec. 3.1, "Sender"): the sending hypervisor's
 * vSwitch cuts every flow into flowcells -- runs of consecutive TCP
 * segments of at most 64 KB, the largest TSO segment -- and sends each
 * flowcell on the next of the fabric's paths in turn (round-robin over
 * label-switched spanning trees a controller installed). The receiver
 * (sec. 3.2, "Receiver") hides the reordering at flowcell boundaries
 * with a modified GRO.
 *
 * Where it decides here, and why: at the switch that has a choice. On a
 * two-tier leaf-spine fabric that is only the source leaf (its uplink group
 * is the one group of several ports a packet meets; a spine and the
 * destination leaf have one port towards a host), and the uplink fixes the
 * spine, i.e. the whole path: the choice the sender's vSwitch makes, made
 * one hop later. No GRO change at the receiver: reordering at a flowcell
 * boundary reaches TCP (each run records it, reorder_per_kseg).
 *
 *   flowcell  per flow (its 5-tuple, an LRU hash as LetFlow's flowlets:
 *             presto_flows) the port of its current flowcell and the bytes
 *             sent in it. A packet whose bytes would take the flowcell past
 *             cell_bytes (config presto_cell_bytes, default 64 KB) starts
 *             the next one. Counted in whole packets as port_stats counts
 *             them (frame bytes, headers included; the fabric's hosts send
 *             one MTU-sized packet per skb), not the paper's TSO segments:
 *             a 64 KB flowcell holds 43 frames of 1514 B.
 *   path      the next flowcell takes the next usable port of the group
 *             after the current one (index order, wrapping): round-robin
 *             over the route's up ports, a down port skipped. A flow's
 *             first flowcell (or one whose port left the group) takes the
 *             usable port its 5-tuple hash picks (this switch's seed, as
 *             ECMP): a flow shorter than a flowcell is placed as by ECMP.
 *   counters  presto_cells (per CPU): [TALB_PRESTO_CELL_NEW] packets that
 *             started a flowcell, [TALB_PRESTO_CELL_SAME] packets that went
 *             on in one; their sum is decision_presto.
 *
 * Two CPUs updating one flow's entry at once may lose one's bytes (no
 * atomics): that flowcell then runs a packet or so longer. An entry the
 * LRU evicted starts a new flowcell by the hash.
 * datapath/schemes/presto.py is the model.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_PRESTO_H
#define TALB_SCHEMES_PRESTO_H

/* id; a program of its own (talb/scheme_api.h); no clock: flowcells are
 * counted in bytes, not time */
#define TALB_SCHEME_PRESTO        6
#define TALB_SCHEME_PRESTO_FLAGS  (TALB_SF_PROGRAM)

#include "talb/hash.h"
#include "talb/pkt.h"
#include "talb/schemes/pick.h"
#include "talb/schemes/flowlet.h"   /* talb_flow_key: keyed as the flowlets */

/* the flowcell size when config presto_cell_bytes is 0 (a config written
 * before Presto existed): the paper's 64 KB. User space checks the range
 * (datapath/schemes/presto.py CELL_PARAM) before it writes one. */
#define TALB_PRESTO_DEFAULT_CELL_BYTES  65536
/* presto_cells indices */
#define TALB_PRESTO_CELL_NEW            0
#define TALB_PRESTO_CELL_SAME           1

/* presto_flows: a flow's current flowcell. */
struct presto_cell {
	__u32 port;     /* ifindex the flowcell takes */
	__u32 bytes;    /* bytes sent in it so far, this packet's included */
};

/* ---- its state ---- (a map's size: a number or a constants.h name, which
 * the agent bench's pinned copies read: bench/agent_loop.py) */
/* 5-tuple -> its current flowcell; as many flows as LetFlow's flowlets */
TALB_MAP("lru_hash", struct flow_key, struct presto_cell, presto_flows, TALB_FLOWLET_TABLE_SIZE);
/* TALB_PRESTO_CELL_NEW, _SAME -> packets, per CPU */
TALB_MAP("percpu_array", __u32, __u64, presto_cells, 2);

static __always_inline void presto_count(__u32 which)
{
	__u64 *c = presto_cells.lookup(&which);

	if (c)
		*c += 1;
}

static __always_inline __u32 presto_cell_size(const struct talb_config *cfg)
{
	__u32 cell = cfg->presto_cell_bytes;

	return cell ? cell : TALB_PRESTO_DEFAULT_CELL_BYTES;
}

/* The usable index after index i, wrapping (up->k >= 1): the r-th of the
 * usable indices (up->list, lowest first), r the number of them <= i.
 * Branch-free (schemes/pick.h's verifier economy). */
static __always_inline __u32 presto_next(const struct talb_up *up, __u32 i)
{
	__u32 r = 0, j;

	for (j = 0; j < TALB_MAX_GROUP_PORTS; j++) {
		__u32 at_or_below = ((up->mask >> j) & 1) & (__u32)(talb_lt(i, j) ^ 1);

		TALB_OPAQUE(at_or_below);
		r += at_or_below;
	}
	return (up->list >> (4 * (r % up->k))) & (TALB_MAX_GROUP_PORTS - 1);
}

/* A flow's first flowcell: the usable port its 5-tuple hash picks (up->k >= 1). */
static __always_inline __u32 presto_first(const struct talb_pkt *p, const struct talb_up *up,
					  const struct talb_config *cfg)
{
	__u32 h = talb_hash_5tuple(p->saddr, p->daddr, p->sport, p->dport, p->proto,
				   cfg->hash_seed);

	return (up->list >> (4 * (h % up->k))) & (TALB_MAX_GROUP_PORTS - 1);
}

/* Presto's index for a group of n >= 2 ports: the flowcell's port while
 * the packet fits in it and the port is usable, else a new flowcell on
 * the next usable port (the hash's for a flow it does not know). */
TALB_SCHEME_FN __u32 presto_pick(const struct talb_pkt *p, const struct fwd_group *g,
				 __u32 gid, const struct talb_config *cfg, __u64 now)
{
	__u32 n = g->n_ports, cell = presto_cell_size(cfg), idx;
	struct presto_cell fresh = {};
	struct flow_key key = {};
	struct presto_cell *c;
	struct talb_up up;
	int i = -1;

	talb_up_ports(g, n, &up);
	if (!up.k)
		return 0;       /* nothing usable: the decision core finds port 0 down */
	talb_flow_key(p, &key);
	c = presto_flows.lookup(&key);
	if (c) {
		i = talb_port_index(g, c->port, n);
		if (i >= 0 && talb_is_up(&up, i) && c->bytes + p->len <= cell) {
			c->bytes += p->len;
			presto_count(TALB_PRESTO_CELL_SAME);
			return i;
		}
	}
	/* one call site each (the verifier walks each inlined copy) */
	if (i >= 0)
		idx = presto_next(&up, i);
	else
		idx = presto_first(p, &up, cfg);
	idx &= TALB_MAX_GROUP_PORTS - 1;
	fresh.port = g->ifindex[idx];
	fresh.bytes = p->len;
	presto_flows.update(&key, &fresh);
	presto_count(TALB_PRESTO_CELL_NEW);
	return idx;
}

#endif /* TALB_SCHEMES_PRESTO_H */
