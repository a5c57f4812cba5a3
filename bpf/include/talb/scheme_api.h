/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/scheme_api.h - what a scheme's header (schemes/<name>.h) may use
 * besides the decision core (decision.h), and what it provides.
 *
 * A scheme's header defines
 *   TALB_SCHEME_<NAME>           its id (< TALB_MAX_SCHEMES; unique)
 *   TALB_SCHEME_<NAME>_FLAGS     TALB_SF_* (constants.h): its hooks
 * and, by its flags, these functions (the shared code calls them through
 * talb/scheme_dispatch.h, built from the generated list of headers):
 *   <name>_pick(p, g, gid, cfg, now)         an index < g->n_ports for a
 *                                            group of n_ports >= 2 (every
 *                                            scheme but TALB_SF_OWN_PROGRAM;
 *                                            an inline one may return
 *                                            TALB_USE_FALLBACK*)
 *   TALB_SCHEME_PICK_PROGRAM(name, ID)       its program around _pick
 *                                            (TALB_SF_PROGRAM)
 *   <name>_clock(cfg, p)                     TALB_SF_CLOCK_HOOK
 *   <name>_egress(port_id, len, cfg, now)    TALB_SF_EGRESS
 *   <name>_after_fallback(p, g, gid, idx, now) TALB_SF_FALLBACK
 * A TALB_SF_OWN_PROGRAM scheme writes `int talb_scheme_<name>(struct
 * __ctx_buff *)` itself from the entry helpers below (CONGA: its option
 * at every hop).
 *
 * Needs talb/maps.h and talb/decision.h included before it.
 */
#ifndef TALB_SCHEME_API_H
#define TALB_SCHEME_API_H

#include "talb/ctx.h"

/* A scheme that decides in the main program hands a packet on with one of
 * these instead of an index: to the configured fallback scheme
 * (config fallback_scheme: ECMP by default, or a scheme with a program),
 * _REMEMBER: then pass the fallback's index through its
 * <name>_after_fallback (TaLB records the port of a tensor met midway).
 * TALB_USE_DEFAULT: no inline scheme is configured: the default decides. */
#define TALB_USE_FALLBACK               0x100
#define TALB_USE_FALLBACK_REMEMBER      0x101
#define TALB_USE_DEFAULT                0x102

/* ---- the entry helpers (switch_tc.c defines them after the schemes) ---- */
/* Act on a forwarding verdict: the last hop's strip, the band, the
 * first-hop release, the redirect. The end of every entry point. */
static __always_inline int talb_act(struct __ctx_buff *skb, struct talb_pkt *pkt,
				    struct talb_verdict *v);
/* Index idx of group g chosen (decision counter dcnt): verdict, then act. */
static __always_inline int talb_finish(struct __ctx_buff *skb, struct talb_pkt *pkt,
				       const struct fwd_group *g,
				       const struct talb_config *cfg, __u32 idx,
				       __u32 dcnt, __u64 now);
/* A scheme program's start: the packet the main program parsed into *pkt,
 * its group into *g; NULL (counted) when there is nothing to decide on. */
static __always_inline struct talb_scratch *talb_scratch_take(const struct talb_config *cfg,
							      struct talb_pkt *pkt,
							      struct fwd_group **g);

/* ---- from scheme_dispatch.h (after every scheme) ---- */
/* 1 if scheme `id` reads the clock whatever the packet (TALB_SF_CLOCK). */
static __always_inline int talb_scheme_always_clock(__u32 id);
/* idx after the configured scheme's <name>_after_fallback (a packet it
 * handed to its fallback with TALB_USE_FALLBACK_REMEMBER). */
static __always_inline __u32 talb_scheme_after_fallback(const struct talb_config *cfg,
							 const struct talb_pkt *p,
							 const struct fwd_group *g,
							 __u32 gid, __u32 idx, __u64 now);

/* The program of a scheme decided by <name>_pick: the packet from
 * scheme_scratch, the scheme's choice (counted at CNT_DECISION_BASE + id),
 * then as the main program. A packet TaLB handed on marked
 * TALB_SCRATCH_REMEMBER goes through its after-fallback hook. */
#define TALB_SCHEME_PICK_PROGRAM(name, id)					\
int talb_scheme_##name(struct __ctx_buff *skb)					\
{										\
	__u32 idx, flags, gid;							\
	const struct talb_config *cfg = talb_config_get();			\
	struct talb_scratch *s;							\
	struct talb_pkt pkt;							\
	struct fwd_group *g;							\
	__u64 now;								\
										\
	s = talb_scratch_take(cfg, &pkt, &g);					\
	if (!s)									\
		return CTX_ACT_OK;						\
	now = s->now;								\
	gid = s->gid;								\
	flags = s->flags;							\
	idx = name##_pick(&pkt, g, gid, cfg, now);				\
	if (flags & TALB_SCRATCH_REMEMBER)					\
		idx = talb_scheme_after_fallback(cfg, &pkt, g, gid, idx, now);	\
	return talb_finish(skb, &pkt, g, cfg, idx, CNT_DECISION_BASE + (id), now); \
}

#endif /* TALB_SCHEME_API_H */
