/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/drill.h - DRILL(d, m) (Ghorbani et al., SIGCOMM 2017): per
 * packet, the shortest local egress queue among d random samples and the
 * m best ports remembered from this engine's previous decision.
 *
 * Engines: one per CPU (drill_mem is a per-CPU array by group), as the
 * paper's per-engine memory: engines never share state. Candidates are
 * looked at memory first, then the d samples (uniform among the usable
 * ports, with replacement); the first one with the strictly shortest
 * estimate wins, so on a tie the remembered port stays (fewer reorderings).
 * After the decision the memory holds the m (<= TALB_DRILL_MAX_M) best of
 * the candidates, best first.
 *
 * Queue estimate. A program cannot read the qdisc's backlog, so the data
 * path keeps one per port (port_queue, by port id): every packet sent out
 * of a port under DRILL adds its bytes; the estimate drains at the port's
 * link rate behind a token bucket of the shaper's burst (port_rate,
 * written by user space: datapath/control.py set_port_rates), and never
 * exceeds the port's queue limit (the qdisc drops past it). A port of
 * rate 0 (unknown) is never drained. Updates are not atomic across CPUs:
 * a lost update under-counts one packet; the error against the real
 * backlog is measured in docs/schemes.md.
 * datapath/schemes/drill.py is the model.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_DRILL_H
#define TALB_SCHEMES_DRILL_H

/* id; a program of its own, the clock (queues drain), and every
 * forwarded packet feeds the queue estimates (drill_egress) */
#define TALB_SCHEME_DRILL       3
#define TALB_SCHEME_DRILL_FLAGS (TALB_SF_PROGRAM | TALB_SF_CLOCK | TALB_SF_EGRESS)

#include "talb/schemes/pick.h"

#define TALB_NS_PER_S           1000000000ULL

/* its defaults (docs/schemes.md says why; the limits, TALB_DRILL_MAX_*,
 * size struct drill_mem: constants.h) */
#define TALB_DEFAULT_DRILL_D    2       /* random samples per packet         */
#define TALB_DEFAULT_DRILL_M    1       /* ports remembered                  */

/* ---- its state ---- */
/* port_id -> link rate and queue limit (user space only) */
TALB_MAP("array", __u32, struct port_rate, port_rate, TALB_MAX_PORTS);
/* port_id -> queue estimate (data path only) */
TALB_MAP("array", __u32, struct port_queue, port_queue, TALB_MAX_PORTS);
/* group id -> one DRILL engine's memory, per CPU */
TALB_MAP("percpu_array", __u32, struct drill_mem, drill_mem, TALB_MAX_GROUPS);

/* A port's shaper as the estimate models it: the backlog, and the token
 * bucket's credit -- HTB sends up to `burst` bytes at once after an idle
 * spell, so a packet meeting an empty queue and enough credit leaves at
 * once and never queues (without the bucket the estimate stood ~20 kB
 * above the real backlog on the live fabric: docs/schemes.md). */
struct drill_q {
	__u64 bytes;
	__u64 credit;
};

/* The shaper of port `q` advanced to `now`: the tokens of the elapsed time
 * drain the backlog first, the rest fills the bucket up to its burst. */
static __always_inline void drill_advance(const struct port_queue *q,
					  const struct port_rate *r, __u64 now,
					  struct drill_q *o)
{
	__s64 dt = (__s64)(now - q->last_ns);
	__u64 t, d, burst;

	o->bytes = q->bytes;
	o->credit = q->credit;
	if (!r || r->bytes_per_s == 0 || dt <= 0)
		return;
	burst = r->burst_bytes;
	/* past this every real queue is empty and every bucket full (and
	 * the product below stays < 2^64) */
	if (dt > TALB_QUEUE_DT_MAX_NS) {
		o->bytes = 0;
		o->credit = burst;
		return;
	}
	t = (__u64)dt * r->bytes_per_s / TALB_NS_PER_S;
	d = o->bytes < t ? o->bytes : t;
	o->bytes -= d;
	o->credit += t - d;
	if (o->credit > burst)
		o->credit = burst;
}

/* The estimate of port `port_id` at `now`. */
static __always_inline __u64 drill_queue(__u32 port_id, __u64 now)
{
	struct port_queue *q = port_queue.lookup(&port_id);
	struct drill_q o;

	if (!q)
		return 0;
	drill_advance(q, port_rate.lookup(&port_id), now, &o);
	return o.bytes;
}

/* A packet of `len` bytes leaves through `port_id` (any redirect while
 * DRILL decides): through the bucket if the queue is empty and the credit
 * covers it, else onto the queue (never past the port's limit). */
static __always_inline void drill_account(__u32 port_id, __u32 len, __u64 now)
{
	struct port_queue *q = port_queue.lookup(&port_id);
	struct port_rate *r = port_rate.lookup(&port_id);
	struct drill_q o;

	if (!q)
		return;
	drill_advance(q, r, now, &o);
	if (o.bytes == 0 && o.credit >= len) {
		o.credit -= len;
	} else {
		o.bytes += len;
		if (r && r->limit_bytes && o.bytes > r->limit_bytes)
			o.bytes = r->limit_bytes;
	}
	q->bytes = o.bytes;
	q->credit = o.credit;
	q->last_ns = now;
}

static __always_inline __u64 drill_queue_of(const struct fwd_group *g, __u32 i, __u64 now)
{
	__u32 ifindex = g->ifindex[i & (TALB_MAX_GROUP_PORTS - 1)];
	struct port_info pi = {};

	return talb_port_get(ifindex, &pi) ? drill_queue(pi.port_id, now) : ~0ULL;
}

/* Running best two of the candidates. */
struct drill_best {
	__u64 q0, q1;
	__u32 i0, i1;   /* TALB_MAX_GROUP_PORTS: none yet */
};

static __always_inline void drill_consider(struct drill_best *b, __u32 i, __u64 q)
{
	if (i == b->i0)
		return;
	if (q < b->q0) {
		b->q1 = b->q0;
		b->i1 = b->i0;
		b->q0 = q;
		b->i0 = i;
	} else if (q < b->q1 && i != b->i1) {
		b->q1 = q;
		b->i1 = i;
	}
}

TALB_SCHEME_FN __u32 drill_select(const struct fwd_group *g, __u32 n, __u32 gid,
					  const struct talb_config *cfg, __u64 now)
{
	struct drill_best b = { .q0 = ~0ULL, .q1 = ~0ULL,
				.i0 = TALB_MAX_GROUP_PORTS, .i1 = TALB_MAX_GROUP_PORTS };
	struct drill_mem *mem = drill_mem.lookup(&gid);
	__u32 d = cfg->drill_d, m = cfg->drill_m, j;
	struct talb_up up;

	talb_up_ports(g, n, &up);
	if (!up.k)
		return 0;
	/* d 0 (a config written before DRILL existed): the default; m 0 is
	 * DRILL(d, 0), no memory (the loader writes the default m). */
	if (d == 0)
		d = TALB_DEFAULT_DRILL_D;
	for (j = 0; j < TALB_DRILL_MAX_M; j++) {
		int i;

		if (!mem || !talb_lt(j, m))
			break;
		i = talb_port_index(g, mem->port[j], n);
		if (i >= 0 && talb_is_up(&up, i))
			drill_consider(&b, i, drill_queue_of(g, i, now));
	}
	for (j = 0; j < TALB_DRILL_MAX_D; j++) {
		__u32 i;

		if (!talb_lt(j, d))
			break;
		i = talb_pick_up(&up);
		drill_consider(&b, i, drill_queue_of(g, i, now));
	}
	b.i0 &= TALB_MAX_GROUP_PORTS - 1;       /* d >= 1: a sample was taken */
	if (mem) {
		mem->port[0] = m >= 1 ? g->ifindex[b.i0] : 0;
		mem->port[1] = m >= 2 && b.i1 < TALB_MAX_GROUP_PORTS ?
			       g->ifindex[b.i1 & (TALB_MAX_GROUP_PORTS - 1)] : 0;
	}
	return b.i0;
}

TALB_SCHEME_FN __u32 drill_pick(const struct talb_pkt *p, const struct fwd_group *g,
			       __u32 gid, const struct talb_config *cfg, __u64 now)
{
	return drill_select(g, g->n_ports, gid, cfg, now);
}

static __always_inline void drill_egress(__u32 port_id, __u32 len,
					 const struct talb_config *cfg, __u64 now)
{
	drill_account(port_id, len, now);
}

#endif /* TALB_SCHEMES_DRILL_H */
