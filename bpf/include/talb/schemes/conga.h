/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/conga.h - CONGA (Alizadeh et al., SIGCOMM 2014), leaf to
 * leaf, on a two-tier leaf-spine fabric: the LBTag is the uplink (group
 * index) the source leaf chose, which fixes the spine.
 *
 *   DRE        conga_dre[port]: X += bytes of every packet sent out of the
 *              port; every T_dre, X *= 1 - alpha (decayed lazily, one
 *              period at a time up to TALB_CONGA_DECAY_MAX). The metric is
 *              X against C * tau (tau = T_dre / alpha), quantised to
 *              q_bits: 0 idle .. 2^q - 1 at or above line rate.
 *   source     a packet from a host port to another leaf: its flowlet's
 *   leaf       uplink, or for a new flowlet the uplink minimising
 *              max(local DRE metric, remote metric to the destination leaf
 *              for that LBTag), ties at random; pushes the option with
 *              CE = its own egress metric and one feedback entry.
 *   any hop    CE = max(CE, metric of the egress port) (conga_raise).
 *   dest.      records CE in congestion-from-leaf[src leaf][LBTag], and a
 *   leaf       feedback entry in congestion-to-leaf[src leaf][FB_LBTag];
 *              strips the option before the host.
 *   feedback   the destination leaf, sending back to the source leaf,
 *              piggybacks one congestion-from-leaf entry per packet,
 *              round-robin over the LBTags it has fresh entries for (the
 *              paper favours changed entries; round-robin over a leaf's
 *              few uplinks refreshes each within a few packets).
 *   aging      a remote metric older than age_us counts as 0, and an entry
 *              older than that is not fed back.
 *
 * The decision, the tables and CONGA's program (talb_scheme_conga: the
 * option and the table writes) are all here.
 * datapath/schemes/conga.py is the model.
 *
 * Needs talb/maps.h, talb/ipopt.h and talb/scheme_api.h included before it.
 */
#ifndef TALB_SCHEMES_CONGA_H
#define TALB_SCHEMES_CONGA_H

/* id; a program of its own for every packet (the option at every hop),
 * written here; the clock (the DRE); every forwarded packet feeds the DRE
 * (conga_egress). */
#define TALB_SCHEME_CONGA       4
#define TALB_SCHEME_CONGA_FLAGS (TALB_SF_PROGRAM | TALB_SF_EVERY_HOP | TALB_SF_OWN_PROGRAM | \
				 TALB_SF_CLOCK | TALB_SF_EGRESS)

#include "talb/pkt.h"
#include "talb/conga_option.h"
#include "talb/schemes/pick.h"
#include "talb/schemes/flowlet.h"    /* the flowlet step LetFlow shares */

/* ---- its limits, defaults (docs/schemes.md) and counters ---- */
#define TALB_CONGA_MAX_LEAVES   64      /* leaf ids 0..63                    */
#define TALB_CONGA_TABLE_SIZE   (TALB_CONGA_MAX_LEAVES * TALB_MAX_GROUP_PORTS)
#define TALB_DEFAULT_CONGA_DRE_US 125   /* T_dre: one 1514 B frame at 100M   */
#define TALB_DEFAULT_CONGA_ALPHA_SHIFT 3 /* alpha = 2^-3: tau = 8 T_dre = 1 ms */
#define TALB_DEFAULT_CONGA_Q_BITS 3     /* metric 0..7, as the paper's CE    */
#define TALB_DEFAULT_CONGA_AGE_US 20000 /* a remote metric older is 0        */
#define TALB_CONGA_DECAY_MAX    64      /* DRE idle this many periods: 0     */
#define TALB_CONGA_Q16          65536   /* DRE decay factors, fixed point    */
#define CNT_CONGA_PUSHED        49  /* source leaf: option pushed            */
#define CNT_CONGA_CE_RAISED     50  /* a hop raised CE                       */
#define CNT_CONGA_STRIPPED      51  /* destination leaf: option removed      */
#define CNT_CONGA_FB_SENT       52  /* option carried a feedback metric      */
#define CNT_CONGA_FB_RECEIVED   53  /* feedback stored (congestion-to-leaf)  */
#define CNT_CONGA_PUSH_FAIL     54  /* no room (IHL) or adjust_room failed   */
#define CNT_CONGA_DROP_STRIP_FAIL 55 /* strip failed at a host edge: dropped */

#define TALB_CONGA_NO_LEAF      TALB_CONGA_MAX_LEAVES

/* ---- its state ---- */
/* port_id -> DRE */
TALB_MAP("array", __u32, struct conga_dre, conga_dre, TALB_MAX_PORTS);
/* dst leaf, LBTag -> metric fed back (source leaf's congestion-to-leaf) */
TALB_MAP("array", __u32, struct conga_metric, conga_to_leaf, TALB_CONGA_TABLE_SIZE);
/* src leaf, LBTag -> CE seen (destination leaf's congestion-from-leaf) */
TALB_MAP("array", __u32, struct conga_metric, conga_from_leaf, TALB_CONGA_TABLE_SIZE);
/* leaf -> next LBTag to feed back to it (round-robin) */
TALB_MAP("array", __u32, __u32, conga_fb_cursor, TALB_CONGA_MAX_LEAVES);
/* host IPv4 address (network byte order) -> its leaf id (user space) */
TALB_MAP("hash", __be32, __u32, conga_leaf_of, TALB_MAX_ROUTES);

struct conga_params {
	__u64 period_ns;
	__u64 age_ns;
	__u32 shift;
	__u32 q_bits;
};

/* v if lo <= v <= hi, else def -- without a branch: with one, the
 * default and the configured value were two verifier states through
 * everything CONGA computes from them (shift amounts, tracked exactly). */
static __always_inline __u32 talb_pick_valid(__u32 v, __u32 lo, __u32 hi, __u32 def)
{
	__u64 ok = talb_lt((__u64)v - lo, hi - lo + 1) & (talb_lt(v, lo) ^ 1), mask = -ok;

	TALB_OPAQUE(mask);
	return (v & mask) | (def & ~mask);
}

static __always_inline void conga_params_of(const struct talb_config *cfg,
					    struct conga_params *pp)
{
	__u32 shift = cfg->conga_alpha_shift, q = cfg->conga_q_bits;

	pp->period_ns = (__u64)(cfg->conga_dre_us ? cfg->conga_dre_us :
				TALB_DEFAULT_CONGA_DRE_US) * 1000;
	pp->age_ns = (__u64)(cfg->conga_age_us ? cfg->conga_age_us :
			     TALB_DEFAULT_CONGA_AGE_US) * 1000;
	pp->shift = talb_pick_valid(shift, 1, 4, TALB_DEFAULT_CONGA_ALPHA_SHIFT);
	pp->q_bits = talb_pick_valid(q, 1, 8, TALB_DEFAULT_CONGA_Q_BITS);
}

/* X * (1 - 2^-shift)^n for n < 64, in Q16 fixed point: the factors for
 * n = 1, 2, 4, .., 32 by squaring, applied for the bits of n. Six steps,
 * no branch (a loop of n periods cost the verifier a state per period and
 * call site). */
static __always_inline __u64 conga_decay(__u64 x, __u32 shift, __u64 n)
{
	__u64 f = TALB_CONGA_Q16 - (TALB_CONGA_Q16 >> shift), j;

	for (j = 0; j < 6; j++) {
		__u64 bit = (n >> j) & 1, mask = -bit;

		TALB_OPAQUE(mask);
		x = (x & ~mask) | (((x * f) >> 16) & mask);
		f = (f * f) >> 16;
	}
	return x;
}

/* X of a DRE decayed to `now`; *last: the end of the last whole period. */
static __always_inline __u64 conga_dre_at(const struct conga_dre *d,
					  const struct conga_params *pp, __u64 now,
					  __u64 *last)
{
	__s64 dt = (__s64)(now - d->last_ns);
	__u64 n;

	*last = d->last_ns;
	if (dt <= 0)
		return d->x;
	n = (__u64)dt / pp->period_ns;
	if (n >= TALB_CONGA_DECAY_MAX) {
		*last = now;
		return 0;
	}
	*last = d->last_ns + n * pp->period_ns;
	return conga_decay(d->x, pp->shift, n);
}

/* The quantised metric of a port: X against C * tau. */
static __always_inline __u32 conga_port_metric(__u32 port_id,
					       const struct conga_params *pp, __u64 now)
{
	struct conga_dre *d = conga_dre.lookup(&port_id);
	struct port_rate *r = port_rate.lookup(&port_id);
	__u64 last, x, full, m, top = (1U << pp->q_bits) - 1;

	if (!d || !r || r->bytes_per_s == 0)
		return 0;
	x = conga_dre_at(d, pp, now, &last);
	full = r->bytes_per_s * (pp->period_ns << pp->shift) / TALB_NS_PER_S;
	if (full == 0)
		return top;
	m = (x << pp->q_bits) / full;
	return m > top ? top : m;
}

/* A packet of `len` bytes leaves through `port_id` (every redirect while
 * CONGA runs: decision.h talb_verdict_for). */
static __always_inline void conga_dre_account(__u32 port_id, __u32 len,
					      const struct conga_params *pp, __u64 now)
{
	struct conga_dre *d = conga_dre.lookup(&port_id);
	__u64 last, x;

	if (!d)
		return;
	x = conga_dre_at(d, pp, now, &last);
	d->x = x + len;
	d->last_ns = last;
}

static __always_inline __u32 conga_metric_of_index(const struct fwd_group *g, __u32 i,
						   const struct conga_params *pp, __u64 now)
{
	__u32 ifindex = g->ifindex[i & (TALB_MAX_GROUP_PORTS - 1)];
	/* the hash, not port_slots: with an array value here the verifier
	 * walked CONGA's program past 1M instructions */
	struct port_info *pi = ports.lookup(&ifindex);

	return pi ? conga_port_metric(pi->port_id, pp, now) : 0;
}

/* The key of (leaf, LBTag) in conga_to_leaf and conga_from_leaf. */
static __always_inline __u32 conga_key(__u32 leaf, __u32 tag)
{
	return leaf * TALB_MAX_GROUP_PORTS + (tag & (TALB_MAX_GROUP_PORTS - 1));
}

/* 1 if a table entry is there and at most age_ns old. */
static __always_inline int conga_fresh(const struct conga_metric *e,
				       const struct conga_params *pp, __u64 now)
{
	return e && e->valid && (__s64)(now - e->updated_ns) <= (__s64)pp->age_ns;
}

/* Remote metric to `leaf` over LBTag `tag`: 0 when unknown or aged out. */
static __always_inline __u32 conga_remote(__u32 leaf, __u32 tag,
					  const struct conga_params *pp, __u64 now)
{
	__u32 k = conga_key(leaf, tag);
	struct conga_metric *e;

	if (leaf >= TALB_CONGA_MAX_LEAVES)
		return 0;
	e = conga_to_leaf.lookup(&k);
	if (!conga_fresh(e, pp, now))
		return 0;
	return e->metric;
}

/* The source leaf's choice for a new flowlet: the usable index with the
 * least max(local, remote), ties at random. Costs packed 8 bits a port. */
static __always_inline __u32 conga_best(const struct fwd_group *g, const struct talb_up *up,
					__u32 dst_leaf, const struct conga_params *pp, __u64 now)
{
	__u64 costs = 0, best = 0x1FF;
	__u32 list = 0, k = 0, i;

	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 local = conga_metric_of_index(g, i, pp, now);
		__u32 remote = conga_remote(dst_leaf, i, pp, now);
		__s64 lr = (__s64)local - (__s64)remote;
		__u64 rmask, c;

		TALB_OPAQUE(lr);
		rmask = -((__u64)lr >> 63);             /* all ones iff local < remote */
		c = (local ^ ((local ^ remote) & rmask)) & 0xFF;    /* the larger */
		/* a port not usable costs more than any metric */
		__u64 eff = c | ((__u64)(talb_is_up(up, i) ^ 1) << 8);
		__s64 d = (__s64)eff - (__s64)best;
		__u64 lower;

		TALB_OPAQUE(d);
		lower = -((__u64)d >> 63);              /* all ones iff eff < best */
		/* else clang makes the select a branch again, and with the
		 * metrics of ports that have none yet (constants) the
		 * verifier decides it, tracks them precisely and keeps a
		 * state per port per outcome: 252k instructions */
		TALB_OPAQUE(lower);
		best = (best & ~lower) | (eff & lower);
		costs |= c << (8 * i);
	}
	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 c = (costs >> (8 * i)) & 0xFF;
		__u32 tie = talb_is_up(up, i) & (talb_nonzero(c ^ (__u32)best) ^ 1);

		TALB_OPAQUE(tie);
		list |= (tie * i) << (4 * k);
		k += tie;
	}
	/* k >= 1: the caller checked that a port is usable, and the least
	 * cost is a usable port's. No branch on k: a branch would make the
	 * verifier track every cost precisely (see conga_select). */
	return (list >> (4 * (talb_rand() % k))) & (TALB_MAX_GROUP_PORTS - 1);
}

/* g->ifindex[idx] without indexing by idx (idx < TALB_MAX_GROUP_PORTS). */
static __always_inline __u32 conga_ifindex_at(const struct fwd_group *g, __u32 idx)
{
	__u32 out = 0, i;

	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 sel = -(talb_nonzero(i ^ idx) ^ 1);

		TALB_OPAQUE(sel);
		out |= g->ifindex[i] & sel;
	}
	return out;
}

/* CONGA's index for a group of n >= 2 ports (the uplinks, at a source
 * leaf): the flowlet's port within the gap (schemes/flowlet.h), else
 * conga_best.
 *
 * Verifier economy: the chosen index is computed from every port's
 * metric; indexing memory with it would make the verifier track all of
 * them precisely, one state per combination (past 1M instructions). So
 * the index never indexes here (conga_ifindex_at), and the caller passes
 * it through a map value before using it (talb_scheme_conga). */
TALB_SCHEME_FN __u32 conga_select(const struct talb_pkt *p, const struct fwd_group *g,
				  __u32 n, const struct talb_config *cfg, __u64 now,
				  __u32 dst_leaf)
{
	struct conga_params pp;
	struct flow_key key = {};
	struct talb_up up;
	__u32 idx;
	int i;

	i = talb_flowlet_step(p, g, n, cfg, now, &key, &up);
	if (i != TALB_FLOWLET_NEW)
		return i;
	conga_params_of(cfg, &pp);
	idx = conga_best(g, &up, dst_leaf, &pp, now);
	talb_flowlet_start(&key, conga_ifindex_at(g, idx), now);
	return idx;
}

/* Destination leaf: what the option tells (congestion-from-leaf, and the
 * feedback into congestion-to-leaf). */
static __always_inline void conga_record(const struct conga_opt *o, __u64 now)
{
	struct conga_metric m = { .valid = 1, .updated_ns = now };
	__u32 src = o->src_leaf, k;

	if (src >= TALB_CONGA_MAX_LEAVES)
		return;
	k = conga_key(src, o->lbtag);
	m.metric = o->ce;
	conga_from_leaf.update(&k, &m);
	if (o->flags & TALB_CONGA_F_FB) {
		k = conga_key(src, o->fb_lbtag);
		m.metric = o->fb_metric;
		conga_to_leaf.update(&k, &m);
		talb_count(CNT_CONGA_FB_RECEIVED);
	}
}

/* Source leaf, sending to `leaf`: the next fresh congestion-from-leaf
 * entry of that leaf (round-robin over its LBTags) into the option. */
static __always_inline void conga_feedback(__u32 leaf, const struct conga_params *pp,
					   __u64 now, struct conga_opt *o)
{
	__u32 *cur, c, j;

	if (leaf >= TALB_CONGA_MAX_LEAVES)
		return;
	cur = conga_fb_cursor.lookup(&leaf);
	if (!cur)
		return;
	c = *cur;
	for (j = 0; j < TALB_MAX_GROUP_PORTS; j++) {
		__u32 tag = (c + j) & (TALB_MAX_GROUP_PORTS - 1);
		__u32 k = conga_key(leaf, tag);
		struct conga_metric *e = conga_from_leaf.lookup(&k);

		if (!conga_fresh(e, pp, now))
			continue;
		o->fb_lbtag = tag;
		o->fb_metric = e->metric;
		o->flags |= TALB_CONGA_F_FB;
		*cur = tag + 1;
		talb_count(CNT_CONGA_FB_SENT);
		return;
	}
}

/* Every packet sent out of a port while CONGA decides: its DRE. */
static __always_inline void conga_egress(__u32 port_id, __u32 len,
					 const struct talb_config *cfg, __u64 now)
{
	struct conga_params pp;

	conga_params_of(cfg, &pp);
	conga_dre_account(port_id, len, &pp, now);
}

/* Raise CONGA's CE to `ce` (the option's 16-bit word with FB_LBTag). */
static __always_inline int conga_raise(struct __ctx_buff *skb, const struct conga_opt *o,
				       __u8 ce)
{
	__u8 old[2] = { o->ce, o->fb_lbtag }, new[2] = { ce, o->fb_lbtag };

	return ipopt_store16(skb, offsetof(struct conga_opt, ce), *(__be16 *)old,
			     *(__be16 *)new);
}

/* CONGA's program (TALB_SF_OWN_PROGRAM | TALB_SF_EVERY_HOP): every packet
 * of a switch running CONGA comes here -- the option is pushed, raised or
 * stripped at every hop. */
int talb_scheme_conga(struct __ctx_buff *skb)
{
	__u32 idx = 0, dcnt = CNT_DECISION_SINGLE, dst_leaf;
	const struct talb_config *cfg = talb_config_get();
	struct talb_scratch *s;
	struct talb_verdict v = {};
	struct conga_opt opt = {};
	struct conga_params pp;
	struct talb_pkt pkt;
	struct fwd_group *g;
	struct port_info in = {};
	struct iphdr *iph;
	void *data, *data_end;
	__u32 *leaf, in_flags, q;
	__u64 now;
	int has;

	s = talb_scratch_take(cfg, &pkt, &g);
	if (!s)
		return CTX_ACT_OK;
	now = s->now;
	conga_params_of(cfg, &pp);
	in_flags = talb_port_get(pkt.ingress_ifindex, &in) ? in.flags : 0;
	leaf = conga_leaf_of.lookup(&pkt.daddr_be);
	dst_leaf = leaf && *leaf < TALB_CONGA_MAX_LEAVES ? *leaf : TALB_CONGA_NO_LEAF;

	data = ctx_data(skb);
	data_end = ctx_data_end(skb);
	iph = data + sizeof(struct ethhdr);
	if ((void *)(iph + 1) > data_end) {
		talb_count(CNT_PASS_MALFORMED);
		return CTX_ACT_OK;
	}
	has = parse_conga_option(iph, data_end, &opt);

	if (g->n_ports > 1) {
		dcnt = CNT_DECISION_BASE + TALB_SCHEME_CONGA;
		idx = conga_select(&pkt, g, g->n_ports, cfg, now, dst_leaf);
		/* through a map value: the verifier forgets how idx was
		 * computed (conga_select's verifier note) */
		s->flags = idx;
		idx = s->flags;
	}
	if (!talb_verdict_for(&pkt, g, cfg, idx, dcnt, now, &v)) {
		talb_count(v.reason);
		return CTX_ACT_OK;
	}
	q = conga_port_metric(v.egress_port_id, &pp, now);
	if (!(v.egress_flags & PORT_HOST)) {
		if (!has && cfg->conga_leaf && (in_flags & PORT_HOST)) {
			struct conga_opt o = {
				.type = TALB_CONGA_IPOPT_TYPE, .len = TALB_CONGA_IPOPT_LEN,
				.src_leaf = cfg->conga_leaf - 1, .lbtag = idx, .ce = q,
				.flags = TALB_CONGA_VERSION,
			};
			int r;

			conga_feedback(dst_leaf, &pp, now, &o);
			r = ipopt_push(skb, &o, TALB_CONGA_IPOPT_LEN);
			if (r == TALB_OPT_DONE) {
				talb_count(CNT_CONGA_PUSHED);
				pkt.len = ctx_len(skb);
			} else {
				talb_count(CNT_CONGA_PUSH_FAIL);
				if (r == TALB_OPT_BROKEN)
					return CTX_ACT_DROP;    /* half-written */
			}
		} else if (has && q > opt.ce) {
			if (conga_raise(skb, &opt, q) == 0)
				talb_count(CNT_CONGA_CE_RAISED);
		}
	} else if (has) {
		conga_record(&opt, now);
		if (ipopt_strip(skb, TALB_CONGA_IPOPT_LEN)) {
			talb_count(CNT_CONGA_DROP_STRIP_FAIL);
			return CTX_ACT_DROP;
		}
		talb_count(CNT_CONGA_STRIPPED);
		pkt.len = ctx_len(skb);
		/* The TaLB option, if any, is first now: strippable when it is
		 * as a host sent it (checked without parsing it all again). */
		data = ctx_data(skb);
		data_end = ctx_data_end(skb);
		iph = data + sizeof(struct ethhdr);
		if (parse_strippable_talb_option(iph, data_end))
			pkt.flags |= TALB_PKT_OPT_STRIP;
	}
	return talb_act(skb, &pkt, &v);
}

#endif /* TALB_SCHEMES_CONGA_H */
