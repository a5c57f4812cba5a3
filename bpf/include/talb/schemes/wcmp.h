/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/wcmp.h - WCMP (Zhou et al., "WCMP: Weighted Cost
 * Multipathing for Improved Fairness in Data Centers", EuroSys 2014): ECMP
 * with each port of a group weighted by its capacity, so that an
 * asymmetric fabric gets flows in proportion to what each path can carry.
 *
 * The paper's mechanism (sec. 4, WCMP's weights; sec. 5, weight
 * reduction): a switch's ECMP group table lists each next hop once and the
 * hash of a flow picks an entry; WCMP replicates each next hop in the table
 * in proportion to its weight, so the same hash lands on a port with the
 * probability of its weight. Hardware tables are small, so the paper
 * reduces the weights (within a bound on the resulting oversubscription)
 * until the replicated group fits.
 *
 * Here there is no table to fit: the flow's hash (the ECMP hash, talb/hash.h,
 * with this switch's seed) is taken modulo the sum W of the usable ports'
 * weights, and the port whose cumulative weight range holds it is chosen --
 * the replicated table, walked instead of stored (8 ports at most), with
 * no reduction error and a modulo bias below W / 2^32 (W < 2^27: < 3.2%,
 * 2.1e-6 at the lb-classic rates). One reduction is kept, the exact one
 * that matters: when every usable weight is equal the table reduces to the
 * usable ports once each (the paper's weights divided by their common
 * factor), and the pick is hash mod k over them -- with every port up,
 * ECMP's own index (schemes/ecmp.h), flow for flow.
 *
 * Weights: a port's rate from port_rate (struct port_rate, the port's
 * shaper: its link rate, written by user space for every switch it programs,
 * datapath/control.py set_port_rates; DRILL's map, which CONGA reads too),
 * in units of 2^TALB_WCMP_RATE_SHIFT bytes/s rounded up (a known rate
 * never weighs 0), capped at TALB_WCMP_WEIGHT_MAX. A port that is not
 * usable (not in `ports` with PORT_UP: a link down, before the agent
 * regroups) weighs 0, as every scheme's down ports (schemes/pick.h). A
 * port of unknown rate (0) weighs 0 too, unless every usable port's is
 * unknown: then all weigh alike (ECMP over the usable ports).
 *
 * What differs from the paper: its weights are a path's capacity to the
 * destination, computed by a controller over the whole topology (a
 * slower link two hops on counts); these are the local port's rate only.
 * Per flow, like ECMP: a flow stays on one port while the group's weights
 * and link states stay. datapath/schemes/wcmp.py is the model.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_WCMP_H
#define TALB_SCHEMES_WCMP_H

/* id; a program of its own (talb/scheme_api.h) */
#define TALB_SCHEME_WCMP        7
#define TALB_SCHEME_WCMP_FLAGS  (TALB_SF_PROGRAM)

#include "talb/hash.h"
#include "talb/pkt.h"
#include "talb/schemes/pick.h"
#include "talb/schemes/drill.h"      /* port_rate: the ports' link rates */

/* a weight's unit: 2^10 bytes/s (8.2 kbit/s) */
#define TALB_WCMP_RATE_SHIFT    10
/* a port's weight at most (137 Gbit/s): W = the sum of 8 < 2^27 */
#define TALB_WCMP_WEIGHT_SHIFT  24
#define TALB_WCMP_WEIGHT_MAX    (1U << TALB_WCMP_WEIGHT_SHIFT)

/* The weight of a port of `bytes_per_s` (0: unknown): the rate in units of
 * 2^TALB_WCMP_RATE_SHIFT bytes/s, rounded up, capped. Branch-free (as
 * schemes/pick.h's scans: one verifier state per port, not two). */
static __always_inline __u32 wcmp_weight(__u64 bytes_per_s)
{
	__u64 w = (bytes_per_s >> TALB_WCMP_RATE_SHIFT) +
		  talb_nonzero((__u32)bytes_per_s & ((1U << TALB_WCMP_RATE_SHIFT) - 1));
	__u64 over = -(w >> TALB_WCMP_WEIGHT_SHIFT);     /* bit 63 set iff w >= cap */

	TALB_OPAQUE(over);
	over >>= 63;
	return (__u32)((w & (over - 1)) | (TALB_WCMP_WEIGHT_MAX & -over));
}

/* The rate user space wrote for the port of `ifindex` (0 if none), and in
 * *usable 1 if it is in `ports` with PORT_UP. */
static __always_inline __u64 wcmp_port_rate(__u32 ifindex, __u32 *usable)
{
	struct port_info pi = {};      /* not ours: flags 0 */
	struct port_rate *r;

	talb_port_get(ifindex, &pi);
	*usable = talb_nonzero(pi.flags & PORT_UP);
	r = port_rate.lookup(&pi.port_id);
	return r ? r->bytes_per_s : 0;
}

/* The index of a flow of hash h in a group of n ports: its cumulative
 * weight range, or hash mod k over the k usable ports when they all weigh
 * alike; 0 when none is usable (the decision core then finds port 0 down
 * and passes the packet to the bridge). */
TALB_SCHEME_FN __u32 wcmp_select(const struct fwd_group *g, __u32 n, __u32 h)
{
	__u32 w[TALB_MAX_GROUP_PORTS];
	__u32 total = 0, k = 0, list = 0, uneven = 0, slot, cum = 0, idx = 0, found = 0, i;

#pragma unroll
	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 usable, bit;
		__u64 rate = wcmp_port_rate(g->ifindex[i], &usable);

		bit = usable & talb_lt(i, n);
		TALB_OPAQUE(bit);
		w[i] = wcmp_weight(rate) * bit;
		total += w[i];
		list |= (bit * i) << (4 * k);
		k += bit;
	}
	if (k == 0)
		return 0;
	/* All alike iff every non-zero weight times k is the total (a usable
	 * port of weight 0 beside others of weight makes them differ too). */
#pragma unroll
	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++)
		uneven |= talb_nonzero(w[i]) & talb_nonzero((w[i] * k) ^ total);
	if (total == 0 || !uneven)
		return (list >> (4 * (h % k))) & (TALB_MAX_GROUP_PORTS - 1);
	slot = h % total;
#pragma unroll
	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 take;

		cum += w[i];
		take = talb_lt(slot, cum) & (found ^ 1);
		TALB_OPAQUE(take);
		found |= take;
		idx = idx - take * idx + take * i;
	}
	return idx & (TALB_MAX_GROUP_PORTS - 1);
}

TALB_SCHEME_FN __u32 wcmp_pick(const struct talb_pkt *p, const struct fwd_group *g,
			      __u32 gid, const struct talb_config *cfg, __u64 now)
{
	__u32 h = talb_hash_5tuple(p->saddr, p->daddr, p->sport, p->dport,
				   p->proto, cfg->hash_seed);

	return wcmp_select(g, g->n_ports, h);
}

#endif /* TALB_SCHEMES_WCMP_H */
