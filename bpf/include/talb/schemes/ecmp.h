/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/ecmp.h - ECMP: every packet of a flow on one path.
 *
 *     index = hash(5-tuple, seed) mod n_ports
 *
 * Stateless; the seed (talb_config.hash_seed) differs per switch so that
 * consecutive hops do not make correlated choices (hash polarisation).
 * n_ports <= TALB_MAX_GROUP_PORTS is small, so the modulo bias is < 2^-28.
 *
 * Each scheme lives in its own file under schemes/ with one entry:
 *     static __always_inline __u32 <scheme>_select(pkt, group, cfg)
 * returning an index < group->n_ports (n_ports >= 2 here: the decision
 * core handles single-port groups), called from talb/decision.h.
 */
#ifndef TALB_SCHEMES_ECMP_H
#define TALB_SCHEMES_ECMP_H

/* The scheme's declaration (talb/scheme_api.h): its id, and its hooks --
 * it decides in the main program, and is that program's last resort. */
#define TALB_SCHEME_ECMP        0
#define TALB_SCHEME_ECMP_FLAGS  (TALB_SF_INLINE | TALB_SF_DEFAULT)

#include "talb/hash.h"
#include "talb/pkt.h"

TALB_SCHEME_FN __u32 ecmp_select(const struct talb_pkt *p,
					 const struct fwd_group *g,
					 const struct talb_config *cfg)
{
	__u32 h = talb_hash_5tuple(p->saddr, p->daddr, p->sport, p->dport,
				   p->proto, cfg->hash_seed);

	return h % g->n_ports;
}

TALB_SCHEME_FN __u32 ecmp_pick(const struct talb_pkt *p, const struct fwd_group *g,
			      __u32 gid, const struct talb_config *cfg, __u64 now)
{
	return ecmp_select(p, g, cfg);
}

#endif /* TALB_SCHEMES_ECMP_H */
