/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/schemes/pick.h - what the randomised schemes (RPS, LetFlow, DRILL)
 * share: the group's usable ports and a random draw among them.
 *
 *   talb_up_ports()   the usable indices of a group (in `ports`, PORT_UP)
 *   talb_rand()       the next number of this CPU's xorshift32 sequence
 *   talb_pick_up()    a uniformly random usable index
 *   talb_port_index() the index of an ifindex in the group, or -1
 *
 * Random draws come from a per-CPU xorshift32 state (`rng` map), not from
 * bpf_get_prandom_u32: the Python models (datapath/schemes/pick.py) replay
 * the same sequence from the state read before a packet, so every random
 * decision is checked against the model (tests/test_schemes_switch.py). A
 * state of 0 (fresh map) is seeded from bpf_get_prandom_u32 on first use.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_SCHEMES_PICK_H
#define TALB_SCHEMES_PICK_H

#include "talb/parsing_helpers.h"   /* talb_lt */

/* ---- state the randomised schemes share ---- */
/* [0] -> this CPU's xorshift32 state (0: not seeded yet) */
TALB_MAP("percpu_array", __u32, __u32, rng, 1);

static __always_inline __u32 talb_xorshift32(__u32 x)
{
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return x;
}

static __always_inline __u32 talb_rand(void)
{
	__u32 zero = 0, x;
	__u32 *s = rng.lookup(&zero);

	if (!s)
		return bpf_get_prandom_u32();   /* cannot happen: array map */
	x = *s;
	if (x == 0)
		x = bpf_get_prandom_u32() | 1;
	x = talb_xorshift32(x);
	*s = x;
	return x;
}

/* Verifier economy, as in talb_lt (parsing_helpers.h): the helpers below
 * are branch-free where a branch would give each iteration's outcome a
 * verifier state of its own (8 ports: 2^8 masks, times every candidate of
 * DRILL): the empty asm statements keep clang from turning the arithmetic
 * back into branches. */

/* talb_nonzero (1 if x != 0, without a branch): parsing_helpers.h */

/* The usable ports of a group of n ports: those in `ports` with PORT_UP.
 * The agent removes ports that go down from the groups (agent/routing.py);
 * this covers the moment between the link event and that rewrite.
 * mask: bit i for index i; list: the usable indices, 4 bits each, lowest
 * first; k: how many. */
struct talb_up {
	__u32 mask;
	__u32 list;
	__u32 k;
};

static __always_inline void talb_up_ports(const struct fwd_group *g, __u32 n,
					  struct talb_up *up)
{
	__u32 mask = 0, list = 0, k = 0, i;

	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 ifindex = g->ifindex[i];
		struct port_info pi = {};      /* not ours: flags 0 */
		__u32 flags, bit;

		talb_port_get(ifindex, &pi);
		flags = pi.flags;

		bit = ((flags & PORT_UP) >> 1) & talb_lt(i, n);
		TALB_OPAQUE(bit);
		mask |= bit << i;
		list |= (bit * i) << (4 * k);
		k += bit;
	}
	up->mask = mask;
	up->list = list;
	up->k = k;
}

/* Uniformly random usable index (modulo bias < 2^-28 for <= 8 ports); 0
 * without a draw when none is usable (the decision core then finds port 0
 * down and passes the packet to the bridge). */
static __always_inline __u32 talb_pick_up(const struct talb_up *up)
{
	__u32 k = up->k;

	if (k == 0)
		return 0;
	return (up->list >> (4 * (talb_rand() % k))) & (TALB_MAX_GROUP_PORTS - 1);
}

/* 1 if index i is usable. */
static __always_inline __u32 talb_is_up(const struct talb_up *up, __u32 i)
{
	return (up->mask >> (i & (TALB_MAX_GROUP_PORTS - 1))) & 1;
}

/* Index of `ifindex` among the group's first n ports, or -1. Branch-free:
 * the last match wins (a group lists a port once, or repeats it to weight
 * it: then any of its indices is that port). */
static __always_inline int talb_port_index(const struct fwd_group *g,
					   __u32 ifindex, __u32 n)
{
	__u32 found = 0, idx = 0, i;

	for (i = 0; i < TALB_MAX_GROUP_PORTS; i++) {
		__u32 eq = (talb_nonzero(g->ifindex[i] ^ ifindex) ^ 1) & talb_lt(i, n);

		TALB_OPAQUE(eq);
		found |= eq;
		idx = idx - eq * idx + eq * i;
	}
	return found ? (int)idx : -1;
}

#endif /* TALB_SCHEMES_PICK_H */
