/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/ecn.h - ECN marking at a switch's egress port, DCTCP-style
 * (Alizadeh et al., SIGCOMM 2010): a packet that finds its queue longer
 * than K bytes leaves with CE. One facility of the data path, whatever the
 * scheme: the entry point calls talb_ecn_egress() once per packet it
 * sends out of a port (switch_tc.c talb_act), after the band is chosen.
 *
 * The queue. A TC program cannot read the qdisc's backlog, and this one
 * runs at the switch's *ingress* (it redirects to the egress device), so
 * the data path keeps a phantom queue per port and band (HULL, Alizadeh et
 * al., NSDI 2012; here drained at the link rate itself, not a fraction):
 * ecn_queue[port_id] holds each band's bytes, filled by every packet sent
 * out of the port and drained by a fluid model of the port's HTB -- the
 * link rate shared among the backlogged bands by weight (WFQ), what a
 * band leaves unused going to the others (TALB_ECN_DRAIN_ROUNDS rounds),
 * behind the shaper's token bucket (a packet meeting empty queues and
 * enough credit leaves at once, as after an HTB idle spell). A band never
 * holds more than its bfifo's limit (the qdisc drops past it). The setup
 * (rate, K, limit, burst, the installed bands' weights) is user space's,
 * ecn_port[port_id] (datapath/control.py set_ecn). Updates are not atomic
 * across CPUs: a lost update under-counts one packet. How well it tracks
 * the real backlog is measured in docs/experiments.md ("ECN").
 *
 * Marking: only ECT(0)/ECT(1) packets become CE (RFC 3168: a Not-ECT
 * packet is never marked, counted CNT_ECN_NOT_ECT); one already CE stays
 * so. The TOS byte is rewritten with the IPv4 checksum fixed
 * incrementally (bpf_l3_csum_replace).
 *
 * Off (config flag CFG_ECN clear): one test of the flags, nothing else.
 * The XDP entry point has no qdisc and so no queue to mark (talb/ctx.h):
 * nothing there.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_ECN_H
#define TALB_ECN_H

#include "talb/constants.h"

#ifndef TALB_CTX_XDP

#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>

/* The IPv4 header's first 16-bit word (version/IHL, TOS) and its checksum. */
#define TALB_ECN_L3_OFF         sizeof(struct ethhdr)
#define TALB_ECN_CSUM_OFF       (TALB_ECN_L3_OFF + offsetof(struct iphdr, check))
#define TALB_ECN_NS_PER_S       1000000000ULL
/* A round's bytes per unit of weight carry this many fraction bits: t (at
 * most 4 s at 100 Gbit/s, 5e10) << 16 x a weight (255) stays below 2^63. */
#define TALB_ECN_SHARE_SHIFT    16

/* The band of HTB classid `priority` as installed on the port: a band the
 * port lacks (weight 0: a FIFO port) is HTB's default class, band 0. */
static __always_inline __u32 talb_ecn_band(const struct ecn_port *p, __u32 priority)
{
	__u32 b = priority - (TALB_HTB_MAJOR | TALB_BAND_MINOR_BASE);

	if (b >= TALB_MAX_BANDS || !p->weight[b])
		return TALB_BAND_UNTAGGED;
	return b;
}

/* Branch-free helpers for the drain: every band is visited on every
 * packet, and a branch per band would double the verifier's states per
 * band (the drain cost ~100k verified instructions per program with
 * branches, docs/experiments.md "ECN"). */
/* 1 if x (< 2^32) is not 0, else 0 */
static __always_inline __u64 talb_ecn_nz(__u64 x)
{
	return (x + 0xFFFFFFFFULL) >> 32;
}

/* min(a, b) for a, b < 2^63 */
static __always_inline __u64 talb_ecn_min(__u64 a, __u64 b)
{
	__u64 d = a - b;

	return b + (d & (0 - (d >> 63)));
}

/* The phantom queue advanced to `now`: the elapsed time's bytes at the
 * link rate drain the backlogged bands by weight (what a band leaves
 * unused goes to the others in the next round); what is left when every
 * band is empty fills the bucket up to the burst. */
static __always_inline void talb_ecn_advance(struct ecn_queue *q, const struct ecn_port *p,
					     __u64 now)
{
	__s64 dt = (__s64)(now - q->last_ns);
	__u64 t, wsum, used, d, nz, busy, per_w;
	__u32 r, b;

	q->last_ns = now;
	if (dt <= 0)
		return;
	if (dt > TALB_QUEUE_DT_MAX_NS)          /* long idle: all drained */
		dt = TALB_QUEUE_DT_MAX_NS;      /* (t covers any backlog) */
	t = (__u64)dt * p->bytes_per_s / TALB_ECN_NS_PER_S;
	busy = 0;
#pragma unroll
	for (b = 0; b < TALB_MAX_BANDS; b++)
		busy |= q->bytes[b];
	if (!busy) {                            /* the common case: nothing queued */
		q->credit = talb_ecn_min(q->credit + t, p->burst_bytes);
		return;
	}
#pragma unroll
	for (r = 0; r < TALB_ECN_DRAIN_ROUNDS; r++) {
		wsum = 0;
#pragma unroll
		for (b = 0; b < TALB_MAX_BANDS; b++)
			wsum += p->weight[b] * talb_ecn_nz(q->bytes[b]);
		/* one division a round: the bytes per unit of weight, fixed
		 * point (wsum 0: BPF division by 0 is 0, nothing drains) */
		per_w = (t << TALB_ECN_SHARE_SHIFT) / wsum;
		used = 0;
#pragma unroll
		for (b = 0; b < TALB_MAX_BANDS; b++) {
			nz = talb_ecn_nz(q->bytes[b]);
			d = talb_ecn_min(q->bytes[b],
					 (per_w * p->weight[b] * nz) >> TALB_ECN_SHARE_SHIFT);
			q->bytes[b] -= d;
			used += d;
		}
		t -= used;
	}
	busy = 0;
#pragma unroll
	for (b = 0; b < TALB_MAX_BANDS; b++)
		busy |= q->bytes[b];
	q->credit = talb_ecn_min(q->credit + t * (1 - talb_ecn_nz(busy)), p->burst_bytes);
}

/* Set CE on an ECT packet. Returns the CNT_ECN_* to count. */
static __always_inline __u32 talb_ecn_set_ce(struct __sk_buff *skb)
{
	__u8 w[2], nw[2];

	if (bpf_skb_load_bytes(skb, TALB_ECN_L3_OFF, w, sizeof(w)))
		return CNT_ECN_MARK_FAIL;
	if ((w[1] & TALB_ECN_MASK) == TALB_ECN_NOT_ECT)
		return CNT_ECN_NOT_ECT;
	if ((w[1] & TALB_ECN_MASK) == TALB_ECN_CE)
		return CNT_ECN_MARKED;          /* marked upstream already */
	nw[0] = w[0];
	nw[1] = w[1] | TALB_ECN_CE;
	if (bpf_l3_csum_replace(skb, TALB_ECN_CSUM_OFF, *(__be16 *)w, *(__be16 *)nw,
				sizeof(__be16)) ||
	    bpf_skb_store_bytes(skb, TALB_ECN_L3_OFF, nw, sizeof(nw), 0))
		return CNT_ECN_MARK_FAIL;
	return CNT_ECN_MARKED;
}

/* A packet of `len` bytes leaves by port `port_id` into the band of HTB
 * classid `priority`: queue it in the phantom queue, and mark it CE when
 * its band held more than K bytes as it arrived. `cfg_flags`: the
 * config's (CFG_ECN). */
static __always_inline void talb_ecn_egress(struct __sk_buff *skb, __u32 port_id,
					    __u32 priority, __u32 len, __u32 cfg_flags)
{
	struct ecn_queue *q;
	struct ecn_port *p;
	__u32 band, above, busy = 0, b;

	if (!(cfg_flags & CFG_ECN))
		return;
	p = ecn_port.lookup(&port_id);
	q = ecn_queue.lookup(&port_id);
	if (!p || !q || !p->bytes_per_s)
		return;
	talb_ecn_advance(q, p, bpf_ktime_get_ns());
	band = talb_ecn_band(p, priority) & (TALB_MAX_BANDS - 1);
	above = q->bytes[band] > p->k_bytes;
#pragma unroll
	for (b = 0; b < TALB_MAX_BANDS; b++)
		busy |= q->bytes[b];
	if (!busy && q->credit >= len) {
		q->credit -= len;               /* through the bucket at once */
	} else {
		__u64 nb = q->bytes[band] + len;

		q->bytes[band] = nb > p->limit_bytes && p->limit_bytes ? p->limit_bytes : nb;
	}
	if (above)
		talb_count(talb_ecn_set_ce(skb));
}

#else /* XDP: no qdisc, no queue */

static __always_inline void talb_ecn_egress(struct xdp_md *ctx, __u32 port_id,
					    __u32 priority, __u32 len, __u32 cfg_flags)
{
}

#endif /* TALB_CTX_XDP */

#endif /* TALB_ECN_H */
