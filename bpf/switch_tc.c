/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * switch_tc.c - the switch data path at TC ingress (clsact, direct-action)
 * of every switch port. Thin: parse, look up, decide, count, act; the logic
 * lives in bpf/include/talb/ (decision.h and the headers it includes).
 *
 * Verdicts:
 *   TC_ACT_OK        not ours (ARP, IPv6, unknown destination, malformed,
 *                    no usable egress): the bridge carries it. Counted by
 *                    reason (CNT_PASS_*).
 *   TC_ACT_REDIRECT  bpf_redirect(egress, 0): out of the egress device,
 *                    through its qdisc (the emulated link and its queue).
 *   TC_ACT_SHOT      first-hop release: skb->sk is set (the packet is still
 *                    charged to the sender's TCP socket: veth and
 *                    bpf_redirect keep skb->sk), so an unowned clone is sent
 *                    with bpf_clone_redirect and the original freed. Without
 *                    this, TCP Small Queues caps what a flow has in flight
 *                    and no switch queue ever builds (docs/design.md §3).
 *                    Counted as CNT_RELEASED, not as a drop.
 *   TC_ACT_SHOT      a TaLB option that cannot be stripped at a host edge
 *                    (CNT_DROP_*, see below).
 *
 * TaLB option at the edges (docs/design.md §4). The last switch removes the
 * option before a host port (PORT_HOST) when the packet is exactly as a
 * host sends it -- IHL 8, the option (type 0x9E, length 12) the only one,
 * right after the base header: the 12 bytes bpf_skb_adjust_room(-12,
 * BPF_ADJ_ROOM_NET) removes -- and fixes IHL, total length and checksum
 * (talb/ipopt.h ipopt_strip; CONGA's option goes in and out the same way).
 * Any other packet with an option of type 0x9E (after other options, or
 * followed by more: hosts never send such, and a second 0x9E behind ours
 * would survive the strip) is dropped where it meets a host: arriving from
 * a host port (at once, instead of crossing the fabric to be dropped at the
 * other end) or about to leave through one (CNT_DROP_OPT_POSITION).
 * Receivers thus never see the option. Between switches such packets are
 * forwarded (tagged if the option is valid). The strip happens before the first-hop clone: when the
 * first hop is also the last (two hosts on one leaf) the clone would share
 * the packet data.
 *
 * skb->priority is set to the HTB classid of the packet's band
 * (schemes/talb.h talb_band), for every forwarded packet.
 *
 * Loaded by datapath/loader.py (bcc, SCHED_CLS), which expands the
 * #include "talb/..." lines into one text first (see talb/maps.h).
 *
 * Written against talb/ctx.h (struct __ctx_buff, ctx_*()): switch_xdp.c
 * compiles this same file as the XDP entry point (one decision core, two
 * entry points). The TC build is the default.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>

#include "talb/constants.h"
#include "talb/structs.h"
#include "talb/maps.h"
#include "talb/decision.h"
#include "talb/ctx.h"      /* TC here; XDP in switch_xdp.c */
#include "talb/ipopt.h"
#include "talb/ecn.h"
#include "talb/scheme_api.h"
/* Every registered scheme's header, and the lists of them by flag: made
 * by the loader from the registry (datapath/source.py), not a file. */
#include "talb/schemes/all.h"
#include "talb/scheme_dispatch.h"

/* Act on a forwarding verdict: the last hop's strip, the band, the
 * first-hop release, the redirect. The end of every entry point. */
static __always_inline int talb_act(struct __ctx_buff *skb, struct talb_pkt *pkt,
				    struct talb_verdict *v)
{
	if ((v->egress_flags & PORT_HOST) && (pkt->flags & TALB_PKT_OPT_SEEN)) {
		if (!(pkt->flags & TALB_PKT_OPT_STRIP)) {
			talb_count(CNT_DROP_OPT_POSITION);
			return CTX_ACT_DROP;
		}
		if (ipopt_strip(skb, TALB_IPOPT_LEN)) {
			talb_count(CNT_DROP_STRIP_FAIL);
			return CTX_ACT_DROP;
		}
		talb_count(CNT_STRIPPED);
		pkt->len = ctx_len(skb);
	}
	ctx_set_priority(skb, v->priority);
	talb_ecn_egress(skb, v->egress_port_id, v->priority, pkt->len, v->cfg_flags);

	if ((v->cfg_flags & CFG_RELEASE_SK) && ctx_owned(skb)) {
		if (ctx_clone_redirect(skb, v->egress_ifindex) == 0) {
			talb_count(CNT_RELEASED);
			talb_port_tx(v->egress_port_id, pkt->len);
			return CTX_ACT_DROP;
		}
		/* Send the owned original rather than lose the packet. */
		talb_count(CNT_CLONE_FAIL);
	}
	talb_count(CNT_REDIRECTED);
	talb_port_tx(v->egress_port_id, pkt->len);
	return ctx_redirect(skb, v->egress_ifindex);
}

/* Index idx of group g chosen (decision counter dcnt): verdict, then act. */
static __always_inline int talb_finish(struct __ctx_buff *skb, struct talb_pkt *pkt,
				       const struct fwd_group *g,
				       const struct talb_config *cfg, __u32 idx,
				       __u32 dcnt, __u64 now)
{
	struct talb_verdict v = {};

	if (!talb_verdict_for(pkt, g, cfg, idx, dcnt, now, &v)) {
		talb_count(v.reason);
		return CTX_ACT_OK;
	}
	return talb_act(skb, pkt, &v);
}

/* Hand the packet to scheme `scheme`'s program: the packet is in the
 * per-CPU slot `s` already (talb_switch_tc parses into it). Returns only
 * when there is none (the caller decides by the default scheme and counts
 * CNT_SCHEME_FALLBACK). */
static __always_inline void talb_tail(struct __ctx_buff *skb, struct talb_scratch *s,
				      __u32 gid, __u64 now, __u32 scheme, __u32 flags)
{
	s->now = now;
	s->gid = gid;
	s->flags = flags;
	scheme_progs.call(skb, scheme);
}

/* A scheme program's start: what talb_tail handed over -- the packet into
 * *pkt, its group looked up again into *g (replaced meanwhile?); the
 * clock, group id and flags stay in the returned slot. NULL, counted as
 * CNT_PASS_GROUP_EMPTY, when there is nothing to decide on: the caller
 * passes the packet to the stack. */
static __always_inline struct talb_scratch *talb_scratch_take(const struct talb_config *cfg,
							      struct talb_pkt *pkt,
							      struct fwd_group **g)
{
	__u32 zero = 0, gid;
	struct talb_scratch *s = scheme_scratch.lookup(&zero);

	if (!s || !cfg) {
		talb_count(CNT_PASS_GROUP_EMPTY);       /* cannot happen: arrays */
		return 0;
	}
	*pkt = s->pkt;
	gid = s->gid;
	*g = groups.lookup(&gid);
	if (!talb_group_usable(*g)) {
		talb_count(CNT_PASS_GROUP_EMPTY);       /* replaced meanwhile */
		return 0;
	}
	return s;
}

/* A scheme that decides inline handed the packet on (TALB_USE_FALLBACK*;
 * `rem`: it remembers the fallback's port): a tail call to the fallback
 * scheme's program; returns only for the default -- the caller's -- or
 * when that program is missing (counted). */
static __always_inline void talb_fallback(struct __ctx_buff *skb, struct talb_scratch *s,
					  const struct talb_config *cfg, __u32 gid, __u64 now,
					  __u32 rem)
{
	__u32 fb = cfg->fallback_scheme;

	if (talb_scheme_has_program(fb))
		talb_tail(skb, s, gid, now, fb, rem ? TALB_SCRATCH_REMEMBER : 0);
	if (!talb_scheme_is_default(fb))
		talb_count(CNT_SCHEME_FALLBACK);
}

/* The main program: parse, route; single-port groups and the schemes that
 * decide inline (TALB_SF_INLINE) decide here, every other scheme in its
 * own program (TALB_SF_PROGRAM), reached by a tail call -- each program is
 * verified on its own, so the schemes do not add up in one verifier budget
 * (docs/schemes.md). Inline is for the cheap and the hot: a tail call and
 * the hand-over of the packet cost about what a table hit does
 * (docs/schemes.md "Cost per packet"). */
int talb_switch_tc(struct __ctx_buff *skb)
{
	struct talb_verdict v = {};
	const struct talb_config *cfg;
	struct talb_scratch *s;
	struct talb_pkt *pkt;
	struct fwd_group *g = 0;
	struct port_info in = {};
	__u32 ifindex = ctx_ingress_ifindex(skb);
	__u32 gid = 0, idx = 0, dcnt = CNT_DECISION_SINGLE, zero = 0;
	__u64 now = 0;
	void *data, *data_end;

	if (!talb_port_get(ifindex, &in)) {
		talb_count(CNT_PASS_UNKNOWN_INGRESS);
		return CTX_ACT_OK;
	}
	/* The packet as parsed lives in this CPU's scratch slot, not on the
	 * stack: the verifier keeps no values of a map's contents, so the
	 * parse's many outcomes (flags, option fields) meet again in one
	 * state after it instead of each walking the rest of the program
	 * (180k -> 59k instructions processed; docs/schemes.md "State
	 * explosion removed"); a scheme's program finds it there too
	 * (talb_tail). */
	s = scheme_scratch.lookup(&zero);
	if (!s) {
		talb_count(CNT_PASS_GROUP_EMPTY);       /* cannot happen: an array */
		return CTX_ACT_OK;
	}
	pkt = &s->pkt;
	__builtin_memset(pkt, 0, sizeof(*pkt));
	pkt->ingress_ifindex = ifindex;
	pkt->len = ctx_len(skb);
	talb_port_rx(in.port_id, pkt->len);

	/* Headers in the linear area (a no-op for the fabric's packets). */
	ctx_pull_headers(skb);
	data = ctx_data(skb);
	data_end = ctx_data_end(skb);

	if (!talb_extract(data, data_end, pkt, &v)) {
		talb_count(v.reason);
		return CTX_ACT_OK;
	}
	if ((in.flags & PORT_HOST) && (pkt->flags & TALB_PKT_OPT_SEEN) &&
	    !(pkt->flags & TALB_PKT_OPT_STRIP)) {
		talb_count(CNT_DROP_OPT_POSITION);
		return CTX_ACT_DROP;
	}
	cfg = talb_config_get();
	if (!cfg || !talb_route(pkt, &v, &g, &gid)) {
		talb_count(cfg ? v.reason : CNT_PASS_GROUP_EMPTY);
		return CTX_ACT_OK;
	}
	if (talb_scheme_clock(cfg, pkt))
		now = bpf_ktime_get_ns();
	if (talb_scheme_wants_program(cfg, g->n_ports)) {
		talb_tail(skb, s, gid, now, cfg->scheme, 0);
		talb_count(CNT_SCHEME_FALLBACK);        /* no such program */
	}
	if (g->n_ports > 1) {
		idx = talb_scheme_inline(pkt, g, gid, cfg, now, &dcnt);
		if (idx == TALB_USE_FALLBACK || idx == TALB_USE_FALLBACK_REMEMBER)
			talb_fallback(skb, s, cfg, gid, now,
				      idx == TALB_USE_FALLBACK_REMEMBER);
		/* the default: the scheme, or a fallback (one call site) */
		if (idx >= TALB_USE_FALLBACK) {
			__u32 rem = idx == TALB_USE_FALLBACK_REMEMBER;

			idx = talb_scheme_default(pkt, g, gid, cfg, now, &dcnt);
			if (rem)
				idx = talb_scheme_after_fallback(cfg, pkt, g, gid, idx, now);
		}
	}
	return talb_finish(skb, pkt, g, cfg, idx, dcnt, now);
}

/* One program per scheme that decides by its <name>_pick, in scheme_progs
 * at its id (datapath/loader.py SCHEME_PROGS); a TALB_SF_OWN_PROGRAM
 * scheme's header has written its own. */
#define TALB_X(name, sid) TALB_SCHEME_PICK_PROGRAM(name, sid)
TALB_SCHEMES_PICK_PROGRAM(TALB_X)
#undef TALB_X
