/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/rps.h - Random Packet Spraying: every packet on a uniformly
 * random usable port of its group (schemes/pick.h), whatever its flow.
 * No state but the random sequence. datapath/schemes/rps.py is the model.
 */
#ifndef TALB_SCHEMES_RPS_H
#define TALB_SCHEMES_RPS_H

/* id; a program of its own (talb/scheme_api.h) */
#define TALB_SCHEME_RPS         1
#define TALB_SCHEME_RPS_FLAGS   (TALB_SF_PROGRAM)

#include "talb/schemes/pick.h"

TALB_SCHEME_FN __u32 rps_select(const struct fwd_group *g, __u32 n)
{
	struct talb_up up;

	talb_up_ports(g, n, &up);
	return talb_pick_up(&up);
}

TALB_SCHEME_FN __u32 rps_pick(const struct talb_pkt *p, const struct fwd_group *g,
			     __u32 gid, const struct talb_config *cfg, __u64 now)
{
	return rps_select(g, g->n_ports);
}

#endif /* TALB_SCHEMES_RPS_H */
