/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/talb.h - TaLB (Hu et al., IWQoS 2024): the whole switch
 * decision in one place. docs/design.md §5; docs/talb-decisions.md lists
 * every reading of the paper made here. datapath/schemes/talb.py is the same
 * decision in Python; tests/test_talb_switch.py checks the two agree
 * packet by packet.
 *
 *   untagged packet            -> fallback scheme (config)    CNT_TALB_FALLBACK
 *   tagged, tensor table hit   -> previous port (integrity)   CNT_TALB_HIT
 *        ... tensor done       -> previous port               CNT_TALB_LATE
 *        ... port gone/down    -> decide again, remember      CNT_TALB_REROUTE
 *   tagged, miss, pkt_idx 0    -> CASE 1 or CASE 2, insert
 *        ... table full        -> fallback scheme, no insert  CNT_TALB_TABLE_FULL
 *   tagged, miss, pkt_idx > 0  -> fallback scheme, no insert  CNT_TALB_MIDSTREAM
 *
 * Tensor table (Table I): `tensors`, (source address, tensor_id) ->
 * {tensor_len, received, prev_port, layer, first/last seen}: ids are unique
 * per sending host only, so the sender is part of the key (issue 8;
 * docs/talb-decisions.md). A tensor is live from its first
 * packet (pkt_idx 0) to its LAST packet (or the packet of index
 * tensor_len - 1); then its entry is marked done in place -- no longer
 * live, but kept for packets sent again after the last one -- until it is
 * idle. Several CPUs decide at once (issue 16): an entry is never absent
 * while its tensor is in flight, the insert that wins places the tensor
 * for every packet (CNT_TALB_JOINED), and exactly one CPU retires an entry
 * from the live counts (talb_retire). A
 * hit on an entry idle longer than config tensor_idle_us removes it first
 * (CNT_TALB_AGED); user space sweeps entries that are never hit again
 * (datapath/control.py sweep_tensors). A tensor that ends with its first
 * packet (tensor_len 1, or LAST) is decided but never inserted. An unknown
 * tensor's packet other than its first (pkt_idx > 0) follows the fallback
 * (CNT_TALB_MIDSTREAM).
 *
 * Live layers are counted per forwarding group (group_state.live[layer]),
 * not per switch. Paper section III: CASE 1/2 look at the layers of the
 * tensors "buffered" in the switch, i.e. queued at the egress ports a new
 * tensor competes for; the tensors of one group are exactly those sharing
 * its candidate ports (a leaf's uplinks), while tensors heading to a local
 * host through one downlink never compete with it. Single-port groups make
 * no decision and keep no entries (decision.h).
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_TALB_H
#define TALB_SCHEMES_TALB_H

/* id; decides in the main program (a tail call and the hand-over cost
 * more than its whole table hit: docs/schemes.md "Cost per packet"), reads
 * the clock for tagged packets (talb_clock), hands what it does not place
 * to the fallback scheme and remembers a midstream tensor's port. */
#define TALB_SCHEME_TALB        5
#define TALB_SCHEME_TALB_FLAGS  (TALB_SF_INLINE | TALB_SF_CLOCK_HOOK | TALB_SF_FALLBACK)

#include "talb/parsing_helpers.h"
#include "talb/pkt.h"
#include "talb/schemes/pick.h"      /* talb_port_index */

/* ---- its counters (with its decision counter for each tagged multipath
 * decision, CNT_DECISION_BASE + its id) ---- */
#define CNT_TALB_HIT            32  /* table hit, previous port (integrity)  */
#define CNT_TALB_CASE1          33  /* new tensor, several layers live       */
#define CNT_TALB_CASE2          34  /* new tensor, one layer live: WRR       */
#define CNT_TALB_THRESHOLD      35  /* CASE 1 port PCM >= S: lowest PCM port */
#define CNT_TALB_FALLBACK       36  /* untagged under TaLB: fallback scheme  */
#define CNT_TALB_TABLE_FULL     37  /* new tensor, table full: fallback      */
#define CNT_TALB_REROUTE        38  /* hit, previous port no longer usable   */
#define CNT_TALB_AGED           39  /* hit on an idle entry: removed, new    */
#define CNT_TALB_COMPLETED      40  /* LAST / last index: entry marked done  */
#define CNT_TALB_INSERTED       41  /* entry inserted                        */
#define CNT_TALB_LATE           42  /* hit on a done tensor (retransmission) */
#define CNT_TALB_MIDSTREAM      43  /* unknown tensor, pkt_idx > 0: fallback */
#define CNT_TALB_JOINED         56  /* another CPU placed the tensor first:
                                       its port, not this packet's choice */

/* ---- its state (declared here, not in the shared maps.h) ---- */
/* (source address, tensor_id) -> tensor (Table I). A plain hash, never an
 * LRU: the kernel must not evict a live entry (its tensor would split, and
 * its live count would leak). Live entries stop at config tensor_limit
 * (<= half the size); done ones use the rest, and when it is full a new
 * tensor takes the fallback (CNT_TALB_TABLE_FULL). */
TALB_MAP("hash", struct tensor_key, struct tensor_entry, tensors, TALB_TENSOR_MAP_SIZE);
/* group id -> WRR cursor and live-layer counts (data path, atomic adds) */
TALB_MAP("array", __u32, struct group_state, group_state, TALB_MAX_GROUPS);
/* group id -> entries removed by user space (sweep_tensors; user space
 * only): the live count of layer l is group_state.live[l] - this.live[l] */
TALB_MAP("array", __u32, struct group_state, group_swept, TALB_MAX_GROUPS);
/* [TALB_COUNT_LIVE] entries inserted - removed by the data path (atomic);
 * [TALB_COUNT_SWEPT] entries removed by user space. Occupancy = [0] - [1]. */
TALB_MAP("array", __u32, __u32, tensor_count, 2);

#ifdef TALB_TEST_INTERLEAVE
/* Tests only (tests/test_talb_races.py compiles with -DTALB_TEST_INTERLEAVE):
 * what another CPU writes between this CPU's tensor lookup and its insert
 * (schemes/talb.h talb_other_cpu). Never in a switch's program. */
struct talb_interleave {
	struct tensor_key key;
	__u64 armed;
	struct tensor_entry entry;
};
TALB_MAP("array", __u32, struct talb_interleave, test_interleave, 1);
#endif

/* Untagged packets, new tensors of a full table and unknown tensors met
 * midway go to the configured fallback scheme (config fallback_scheme:
 * ECMP by default, or RPS, LetFlow, DRILL): talb_scheme_select returns
 * TALB_USE_FALLBACK* (talb/scheme_api.h) instead of an index, and the
 * main program runs the fallback; _REMEMBER: then record the fallback's
 * port (talb_after_fallback). A per-flow fallback (ECMP, LetFlow within a
 * flowlet) keeps a flow the table could not hold on one path; a per-packet
 * one (RPS, DRILL) sprays it, as that scheme would. */

/* Comparisons with the group's n_ports go through talb_lt
 * (parsing_helpers.h): a narrowed range of n_ports would be a verifier
 * state of its own through the layer scan and everything after it. */
/* Index of the rank-r port (0 = lowest PCM) in the published order; an
 * out-of-range entry (a group written without TaLB data) means r itself. */
static __always_inline __u32 talb_order(const struct fwd_group *g, __u32 r,
					__u32 n)
{
	__u32 o = g->order[r & (TALB_MAX_GROUP_PORTS - 1)];

	return talb_lt(o, n) ? o : r;
}

/* Live layers of the group other than the new tensor's, and its rank: the
 * number of live layers of higher priority (smaller layer number). A count
 * <= 0 (entries removed by the sweeper, or a count gone negative) is "not
 * live". The body is branch-free on purpose: with a branch per layer the
 * verifier follows every combination of (rank, other, layer) through 256
 * iterations and gives up; the empty asm statements keep clang from
 * turning the sign-bit arithmetic back into branches. "Other" is the
 * live layers counted minus the tensor's own (read once), not a test per
 * layer: the verifier walks all 256 steps on each path that decides, so
 * every instruction of the body counts 256 times. */
struct talb_live {
	__u32 rank;
	__u32 other;
};

#define TALB_LAYER_CHUNK 32

/* 1 if layer l of the group has live tensors (see talb_live_layers). */
static __always_inline __u64 talb_layer_live(const struct group_state *st,
					     const struct group_state *sw, __u32 l)
{
	__s64 n = (__s32)(st->live[l & (TALB_NR_LAYERS - 1)] - sw->live[l & (TALB_NR_LAYERS - 1)]);
	__s64 neg_n = -n;                   /* < 0 iff live */

	TALB_OPAQUE(neg_n);
	return (__u64)neg_n >> 63;
}

static __always_inline void talb_live_layers(const struct group_state *st,
					     const struct group_state *sw,
					     __u32 layer, struct talb_live *lv)
{
	__u64 rank = 0, total = 0, own = talb_layer_live(st, sw, layer);
	__u32 c, l;

	for (c = 0; c < TALB_NR_LAYERS; c += TALB_LAYER_CHUNK) {
		__s64 past, others;

		for (l = c; l < c + TALB_LAYER_CHUNK; l++) {
			__s64 n = (__s32)(st->live[l] - sw->live[l]);
			__s64 neg_n = -n;                   /* < 0 iff live */
			__s64 lt = (__s64)l - (__s64)layer; /* < 0 iff l < layer */
			__u64 live;

			TALB_OPAQUE(neg_n);
			TALB_OPAQUE(lt);
			live = (__u64)neg_n >> 63;
			rank += live & ((__u64)lt >> 63);
			total += live;
		}
		/* Stop after a chunk past the tensor's layer once another
		 * live layer is known (its own is counted by then): a chunk
		 * at a time, so that the verifier sees 8 exits, not 256. */
		past = (__s64)layer - (__s64)(c + TALB_LAYER_CHUNK - 1);
		others = (__s64)(total - own);
		TALB_OPAQUE(past);
		if (talb_nonzero(others) & ((__u64)past >> 63))
			break;
	}
	lv->rank = rank;
	lv->other = talb_nonzero(total - own);
}

/* A new tensor (or one whose port went away) of `layer` in group g of
 * n >= 2 ports: CASE 1 or CASE 2. Returns an index < n. */
static __always_inline __u32 talb_new_tensor(const struct fwd_group *g,
					     struct group_state *st,
					     const struct group_state *sw,
					     __u32 layer, __u32 n)
{
	struct talb_live lv = {};
	__u32 idx, lo, r, c, len;

	talb_live_layers(st, sw, layer, &lv);
	if (lv.other) {
		/* CASE 1 (paper section III): several layers live, counting
		 * the new tensor's own. Rank r -> the r-th lowest-PCM port.
		 * More ranks than ports: the ranks past the last port share
		 * the highest-PCM one (lower priority, more congested port),
		 * where the threshold usually sends them back to the lowest.
		 * Threshold S: if the chosen port's PCM >= S use the
		 * lowest-PCM port -- but only when its PCM is above the
		 * lowest one's. With every PCM equal (all 0 before the agent
		 * publishes, or a min-max normalisation of equal ports) S
		 * would equal every PCM and put all tensors on one port. */
		r = talb_lt(lv.rank, n) ? lv.rank : n - 1;
		idx = talb_order(g, r, n) & (TALB_MAX_GROUP_PORTS - 1);
		lo = talb_order(g, 0, n) & (TALB_MAX_GROUP_PORTS - 1);
		if (g->pcm[idx] >= g->threshold && g->pcm[idx] > g->pcm[lo]) {
			talb_count(CNT_TALB_THRESHOLD);
			idx = lo;
		}
		talb_count(CNT_TALB_CASE1);
		return idx;
	}
	/* CASE 2: one layer live (or none but the new tensor's): smooth
	 * weighted round-robin, weights 1 - P_i. The agent publishes the
	 * schedule (datapath/schemes/talb.py smooth_wrr_schedule); here a
	 * per-group cursor walks it. The cursor is shared by the CPUs
	 * without atomics: a rare lost update gives two new tensors one
	 * slot, harmless, and it stays one sequence (not one per CPU). */
	c = st->wrr_cursor;
	st->wrr_cursor = c + 1;
	len = g->sched_len;
	idx = TALB_MAX_GROUP_PORTS;
	if (len >= 1 && len <= TALB_SCHED_MAX) {
		__u32 slot = c % len;

		/* clang knows slot < 64 and drops the mask; the verifier
		 * cannot follow its division and needs the mask. */
		asm volatile("" : "+r"(slot));
		idx = g->sched[slot & (TALB_SCHED_MAX - 1)];
	}
	if (!talb_lt(idx, n))   /* no schedule published: plain round-robin */
		idx = c % n;
	talb_count(CNT_TALB_CASE2);
	return idx;
}

static __always_inline int talb_port_up(__u32 ifindex)
{
	struct port_info pi = {};

	return talb_port_get(ifindex, &pi) && (pi.flags & PORT_UP);
}

static __always_inline __u32 talb_occupancy(void)
{
	__u32 k0 = TALB_COUNT_LIVE, k1 = TALB_COUNT_SWEPT;
	__u32 *live = tensor_count.lookup(&k0);
	__u32 *swept = tensor_count.lookup(&k1);
	__s32 n;

	if (!live)
		return 0;
	n = (__s32)(*live - (swept ? *swept : 0));
	return n > 0 ? n : 0;
}

/* Counts follow the entries: +1 on insert, -1 on removal, by whoever's
 * map operation succeeded (two CPUs completing one tensor at once: only
 * one delete succeeds). Atomic adds, return values unused (bcc 0.26). */
static __always_inline void talb_account(__u32 gid, __u32 layer, __u32 delta)
{
	__u32 k = TALB_COUNT_LIVE;
	__u32 *cnt = tensor_count.lookup(&k);
	struct group_state *st = group_state.lookup(&gid);

	if (cnt)
		__sync_fetch_and_add(cnt, delta);
	if (st) {
		__sync_fetch_and_add(&st->tensors, delta);
		__sync_fetch_and_add(&st->live[layer & (TALB_NR_LAYERS - 1)], delta);
	}
}

/* End an entry's life as a live tensor: whichever CPU flips DONE (an
 * atomic fetch-or, its old value unset) takes it out of the live counts,
 * exactly once however completion and ageing interleave on the CPUs.
 * Returns 1 for that CPU. */
static __always_inline int talb_retire(struct tensor_entry *e)
{
	__u32 gid = e->group_id, layer = e->layer;
	__u64 old = __sync_fetch_and_or(&e->flags, (__u64)TALB_TENSOR_DONE);

	if (old & TALB_TENSOR_DONE)
		return 0;
	talb_account(gid, layer, (__u32)-1);
	return 1;
}

/* An idle entry goes: retired first (so that a CPU completing it at the
 * same time cannot account for it again), then deleted. */
static __always_inline void talb_forget(struct tensor_key *key,
					struct tensor_entry *e)
{
	talb_retire(e);
	tensors.delete(key);
}

/* A tensor's last packet went by: it is no longer live (live layers,
 * occupancy), but its entry stays, marked done, so that packets sent again
 * after it (TCP retransmissions of earlier segments come after the last
 * one) still take its port; it goes when idle. Marked in place: the entry
 * is never absent in between, so a retransmission on another CPU always
 * finds it. (It used to be a delete and a re-insert: a packet looked up in
 * that gap was "unknown midway", took the fallback's port and remembered
 * it, and the tensor split.) */
static __always_inline void talb_complete(struct tensor_entry *e)
{
	if (talb_retire(e))
		talb_count(CNT_TALB_COMPLETED);
}

/* Tests make another CPU's insert happen right here, between this CPU's
 * lookup and its own insert, once: the interleaving two CPUs produce by
 * chance, made deterministic (tests/test_talb_races.py). */
#ifdef TALB_TEST_INTERLEAVE
static __always_inline void talb_other_cpu(struct tensor_key *key)
{
	__u32 zero = 0;
	struct talb_interleave *x = test_interleave.lookup(&zero);

	if (x && x->armed && x->key.saddr == key->saddr &&
	    x->key.tensor_id == key->tensor_id) {
		x->armed = 0;
		tensors.insert(key, &x->entry);
	}
}
#else
#define talb_other_cpu(key) do { } while (0)
#endif

/* Another CPU inserted this tensor's entry between our lookup and our
 * insert: follow the port it chose, so that every packet of the tensor
 * takes one path. Keeps idx when that entry is gone again or its port is
 * not usable here. */
static __always_inline __u32 talb_join(struct tensor_key *key,
				       const struct fwd_group *g, __u32 idx, __u32 n)
{
	struct tensor_entry *e = tensors.lookup(key);
	int i;

	if (!e)
		return idx;
	i = talb_port_index(g, e->prev_port, n);
	if (i < 0 || !talb_port_up(e->prev_port))
		return idx;
	talb_count(CNT_TALB_JOINED);
	return i;
}

/* A table entry for the packet's tensor, first seen now, on `port`. */
static __always_inline void talb_entry_fill(struct tensor_entry *t,
					    const struct talb_pkt *p,
					    __u32 port, __u32 gid, __u64 now)
{
	t->first_seen_ns = now;
	t->last_seen_ns = now;
	t->prev_port = port;
	t->group_id = gid;
	t->received = 1;
	t->tensor_len = p->tensor_len;
	t->layer = p->layer;
}

/* An unknown tensor met midway (CNT_TALB_MIDSTREAM) took the fallback's
 * port idx: remember that as a done entry (not live: no layer, no
 * occupancy; it goes when idle), so that the rest of the tensor -- its
 * first packet too, when TCP resends it later -- stays on that port.
 * Without it, a resent first packet was placed as a new tensor, elsewhere:
 * seen on the live fabric under load (a first packet dropped at a veth
 * backlog, 51 + 33 packets on two uplinks). Its start was not placed here
 * because it was lost before this switch and not yet resent, the table was
 * full then, the scheme was switched since, or its entry aged out. */
/* Returns the index the packet takes: idx, or the port of an entry
 * another CPU inserted first (its first packet placed by TaLB on another
 * CPU right now: the insert that wins decides for every packet). */
static __always_inline __u32 talb_remember_midstream(const struct talb_pkt *p,
						     const struct fwd_group *g,
						     __u32 gid, __u32 idx, __u64 now)
{
	struct tensor_key key = { .saddr = p->saddr, .tensor_id = p->tensor_id };
	struct tensor_entry fresh = {};
	__u32 n = g->n_ports;

	idx &= TALB_MAX_GROUP_PORTS - 1;
	talb_entry_fill(&fresh, p, g->ifindex[idx], gid, now);
	fresh.flags = TALB_TENSOR_DONE;
	talb_other_cpu(&key);
	if (tensors.insert(&key, &fresh) == 0)  /* BPF_NOEXIST: first CPU wins */
		return idx;
	return talb_join(&key, g, idx, n);
}

/* A new tensor that needs an entry: more than this packet (one that ends
 * with its first packet is decided and forgotten). */
static __always_inline int talb_needs_entry(const struct talb_pkt *p)
{
	return p->tensor_len > 1 && !(p->flags & TALB_PKT_LAST);
}

/* The TaLB decision for a group of n >= 2 ports: an index < n (counted as
 * CNT_DECISION_BASE + TALB_SCHEME_TALB by the caller), or TALB_USE_FALLBACK*. */
TALB_SCHEME_FN __u32 talb_scheme_select(const struct talb_pkt *p,
						const struct fwd_group *g,
						__u32 gid,
						const struct talb_config *cfg,
						__u64 now)
{
	/* the sender's address as parsed (talb_extract): ids are per host */
	struct tensor_key key = { .saddr = p->saddr, .tensor_id = p->tensor_id };
	struct tensor_entry fresh = {};
	struct tensor_entry *e;
	struct group_state *st;
	struct group_state *sw;
	__u32 n = g->n_ports, idx = 0, limit, layer = p->layer;
	__u32 decide = 1;
	__u64 idle_ns;
	int i, ret;

	if (!(p->flags & TALB_PKT_TAGGED)) {
		talb_count(CNT_TALB_FALLBACK);
		return TALB_USE_FALLBACK;
	}
	st = group_state.lookup(&gid);
	if (!st) {              /* group id beyond group_state: no state */
		talb_count(CNT_TALB_FALLBACK);
		return TALB_USE_FALLBACK;
	}
	sw = group_swept.lookup(&gid);
	if (!sw) {              /* as group_state: the same size */
		talb_count(CNT_TALB_FALLBACK);
		return TALB_USE_FALLBACK;
	}
	idle_ns = (__u64)(cfg->tensor_idle_us ? cfg->tensor_idle_us :
			  TALB_DEFAULT_IDLE_US) * 1000;

	e = tensors.lookup(&key);
	/* Signed: another CPU may have stamped last_seen_ns after this one
	 * read `now`; unsigned, that difference wrapped to "idle for ages",
	 * and a live tensor was forgotten and placed again, elsewhere. */
	if (e && (__s64)(now - e->last_seen_ns) > (__s64)idle_ns) {
		talb_forget(&key, e);
		talb_count(CNT_TALB_AGED);
		e = 0;
	}
	/* One call site of the CASE 1/2 decision (the verifier walks each
	 * inlined copy of its layer scan separately). */
	if (e) {
		layer = e->layer;
		i = talb_port_index(g, e->prev_port, n);
		if (i >= 0 && talb_port_up(e->prev_port)) {
			idx = i;
			decide = 0;
			talb_count(e->flags & TALB_TENSOR_DONE ? CNT_TALB_LATE :
				   CNT_TALB_HIT);
		} else {
			talb_count(CNT_TALB_REROUTE);
		}
	} else if (p->pkt_idx != 0) {
		/* Unknown tensor, but not its first packet: the fallback,
		 * remembered (talb_remember_midstream). */
		talb_count(CNT_TALB_MIDSTREAM);
		return TALB_USE_FALLBACK_REMEMBER;
	} else if (talb_needs_entry(p)) {
		/* A new tensor that needs an entry (one that ends with
		 * this packet is decided and forgotten). */
		limit = cfg->tensor_limit;
		if (limit == 0 || limit > TALB_MAX_TENSORS)
			limit = TALB_MAX_TENSORS;
		if (talb_occupancy() >= limit) {
			/* Full: never drop, never evict a live tensor; the
			 * fallback keeps the flow on one path. */
			talb_count(CNT_TALB_TABLE_FULL);
			return TALB_USE_FALLBACK;
		}
	}
	if (decide)
		idx = talb_new_tensor(g, st, sw, layer, n);
	idx &= TALB_MAX_GROUP_PORTS - 1;        /* < n already */

	if (e) {
		if (decide)
			e->prev_port = g->ifindex[idx];
		e->last_seen_ns = now;
		__sync_fetch_and_add(&e->received, 1);
		/* Complete at the LAST flag or the last packet index -- not
		 * when `received` reaches tensor_len: retransmissions count
		 * too, and ended tensors early (their tails then placed as new
		 * tensors, on other ports: seen on the live fabric). */
		if ((p->flags & TALB_PKT_LAST) || p->pkt_idx + 1 >= e->tensor_len)
			talb_complete(e);
	} else if (talb_needs_entry(p)) {
		/* (read again from the packet, not kept from above: a flag
		 * kept in a register was a verifier path of its own through
		 * the layer scan, once with an entry to insert and once
		 * without) */
		talb_entry_fill(&fresh, p, g->ifindex[idx], gid, now);
		/* BPF_NOEXIST: another CPU inserting the same tensor
		 * meanwhile (a later packet of it met midway, or its first
		 * packet sent again) wins, and this packet follows it. */
		talb_other_cpu(&key);
		ret = tensors.insert(&key, &fresh);
		if (ret == 0) {
			talb_account(gid, p->layer, 1);
			talb_count(CNT_TALB_INSERTED);
		} else if (ret == -TALB_EEXIST) {
			idx = talb_join(&key, g, idx, n);
		} else {
			/* No room: done entries fill the map's other half.
			 * The fallback, as for a full table, so that the
			 * tensor's later packets (unknown: the fallback too)
			 * take the same path. */
			talb_count(CNT_TALB_TABLE_FULL);
			return TALB_USE_FALLBACK;
		}
	}
	return idx;
}

TALB_SCHEME_FN __u32 talb_pick(const struct talb_pkt *p, const struct fwd_group *g,
			      __u32 gid, const struct talb_config *cfg, __u64 now)
{
	return talb_scheme_select(p, g, gid, cfg, now);
}

/* Table ages for a tagged packet; an untagged one reads the clock only
 * when its fallback does (ECMP and RPS do not: ~32 ns saved). */
static __always_inline int talb_clock(const struct talb_config *cfg,
				      const struct talb_pkt *p)
{
	return (p->flags & TALB_PKT_TAGGED) || talb_scheme_always_clock(cfg->fallback_scheme);
}

static __always_inline __u32 talb_after_fallback(const struct talb_pkt *p,
						 const struct fwd_group *g,
						 __u32 gid, __u32 idx, __u64 now)
{
	return talb_remember_midstream(p, g, gid, idx, now);
}

#endif /* TALB_SCHEMES_TALB_H */
