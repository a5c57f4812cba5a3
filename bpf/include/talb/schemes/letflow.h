/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/letflow.h - LetFlow (Vanini et al., NSDI 2017): flowlets on
 * random paths. The flowlet step (table, gap, refresh) is
 * schemes/flowlet.h's; a new flowlet goes to a uniformly random usable
 * port. datapath/schemes/letflow.py is the model; docs/schemes.md the
 * timeout's default.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_LETFLOW_H
#define TALB_SCHEMES_LETFLOW_H

/* id; a program of its own, flowlet gaps need the clock */
#define TALB_SCHEME_LETFLOW     2
#define TALB_SCHEME_LETFLOW_FLAGS (TALB_SF_PROGRAM | TALB_SF_CLOCK)

#include "talb/pkt.h"
#include "talb/schemes/pick.h"
#include "talb/schemes/flowlet.h"

TALB_SCHEME_FN __u32 letflow_select(const struct talb_pkt *p,
					    const struct fwd_group *g, __u32 n,
					    const struct talb_config *cfg, __u64 now)
{
	struct flow_key key = {};
	struct talb_up up;
	__u32 idx;
	int i;

	i = talb_flowlet_step(p, g, n, cfg, now, &key, &up);
	if (i != TALB_FLOWLET_NEW)
		return i;
	idx = talb_pick_up(&up);
	talb_flowlet_start(&key, g->ifindex[idx], now);
	return idx;
}

TALB_SCHEME_FN __u32 letflow_pick(const struct talb_pkt *p, const struct fwd_group *g,
				 __u32 gid, const struct talb_config *cfg, __u64 now)
{
	return letflow_select(p, g, g->n_ports, cfg, now);
}

#endif /* TALB_SCHEMES_LETFLOW_H */
