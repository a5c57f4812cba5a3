/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/maps.h - ALL maps of the switch data path, and their small helpers.
 *
 * bcc only rewrites map operations (map.lookup(...)) in the main source
 * file, so the loader (datapath/loader.py, through datapath/program.py) expands
 * the project's own `#include "talb/..."` lines into one text (with #line
 * markers, so diagnostics still name these files) before handing it to bcc. Include this header once, from the entry
 * point, before any header that uses a map.
 *
 * The loader pins every map as <pin_dir>/<map name>; user space
 * (datapath/maps.py: SwitchMaps) opens them by these names.
 */
#ifndef TALB_MAPS_H
#define TALB_MAPS_H

#include "talb/constants.h"
#include "talb/structs.h"
#include "talb/map_decl.h"   /* TALB_MAP: fresh, or pinned at TALB_PIN_DIR */
#include "talb/pkt.h"        /* struct talb_scratch */

/* ifindex -> port (id, flags): the switch's ports, as user space lists
 * them (agent, CLI). The data path reads port_slots. */
TALB_MAP("hash", __u32, struct port_info, ports, TALB_MAX_PORTS);
/* ifindex % TALB_PORT_SLOTS -> port and its ifindex: the same ports,
 * written with `ports` by user space, which refuses two ports of one
 * switch in one slot (datapath/control.py _port_table). What the data path
 * looks ports up in (talb_port_get), 2-10 times a packet: an array lookup
 * is a few inlined instructions, a hash lookup a call of ~20 ns
 * (docs/schemes.md "Cost per packet"). */
TALB_MAP("array", __u32, struct port_slot, port_slots, TALB_PORT_SLOTS);
/* port_id -> rx/tx packets/bytes, per CPU. */
TALB_MAP("percpu_array", __u32, struct port_stats, port_stats, TALB_MAX_PORTS);
/* destination IPv4 address (network byte order, as on the wire) -> group id */
TALB_MAP("hash", __be32, __u32, fwd, TALB_MAX_ROUTES);
/* the same routes, most of them, in an array (struct route_slot): what
 * the data path reads first (talb_route). An array lookup is a few
 * inlined instructions, a hash lookup a call of ~25 ns a packet
 * (bench/datapath_bpf.py floor rows); `fwd` stays the routes' full list
 * for user space and for the addresses whose slot another one took.
 * Written with `fwd` by datapath/control.py (_install_routes), never by
 * the agent's per-window publication. */
TALB_MAP("array", __u32, struct route_slot, route_slots, TALB_ROUTE_SLOTS);
/* group id -> candidate egress ports (replaced as a whole, atomically) */
TALB_MAP("hash", __u32, struct fwd_group, groups, TALB_MAX_GROUPS);
/* [0] -> runtime configuration */
TALB_MAP("array", __u32, struct talb_config, config, 1);
/* CNT_* -> packets, per CPU */
TALB_MAP("percpu_array", __u32, __u64, counters, TALB_NR_COUNTERS);

/* ---- TaLB (schemes/talb.h) ---- */
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

/* ---- tensor integrity, every scheme (talb/tensor_egress.h) ---- */
/* (source address, tensor_id) -> ports it left by. LRU: nobody deletes
 * entries; `talb send` reads its own tensors' after a run. */
TALB_MAP("lru_hash", struct tensor_key, struct tensor_egress, tensor_egress, TALB_EGRESS_MAP_SIZE);

/* ---- one program per scheme (switch_tc.c) ---- */
/* scheme id -> its program (tail call); filled by datapath/loader.py. Pinned:
 * a prog array loses its entries when no user-space reference is left. */
TALB_MAP("prog", __u32, __u32, scheme_progs, TALB_MAX_SCHEMES);
/* [0] -> the packet as the main program parsed it, per CPU */
TALB_MAP("percpu_array", __u32, struct talb_scratch, scheme_scratch, 1);

/* ---- RPS, LetFlow, DRILL (schemes/pick.h, letflow.h, drill.h) ---- */
/* [0] -> this CPU's xorshift32 state (0: not seeded yet) */
TALB_MAP("percpu_array", __u32, __u32, rng, 1);
/* 5-tuple -> its current flowlet (LetFlow) */
TALB_MAP("lru_hash", struct flow_key, struct flowlet, flowlets, TALB_FLOWLET_TABLE_SIZE);
/* port_id -> link rate and queue limit (user space only) */
TALB_MAP("array", __u32, struct port_rate, port_rate, TALB_MAX_PORTS);
/* port_id -> queue estimate (data path only) */
TALB_MAP("array", __u32, struct port_queue, port_queue, TALB_MAX_PORTS);
/* group id -> one DRILL engine's memory, per CPU */
TALB_MAP("percpu_array", __u32, struct drill_mem, drill_mem, TALB_MAX_GROUPS);

/* ---- CONGA (schemes/conga.h) ---- */
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

/* ---- ECN, every scheme (talb/ecn.h) ---- */
/* port_id -> marking setup: rate, K, limit, burst, band weights (user space) */
TALB_MAP("array", __u32, struct ecn_port, ecn_port, TALB_MAX_PORTS);
/* port_id -> phantom queue per band (data path only) */
TALB_MAP("array", __u32, struct ecn_queue, ecn_queue, TALB_MAX_PORTS);

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

/* The port of `ifindex` into *out: 1, or 0 when it is not ours (an empty
 * slot, or another device's whose ifindex shares it). Only port_slots:
 * with a fall-back to `ports` the verifier walked both at every call
 * (main program 535k instructions, past its budget; docs/schemes.md). */
static __always_inline int talb_port_get(__u32 ifindex, struct port_info *out)
{
	__u32 slot = ifindex & TALB_PORT_SLOT_MASK;
	struct port_slot *ps = port_slots.lookup(&slot);

	if (!ps || !ifindex || ps->ifindex != ifindex)
		return 0;
	out->port_id = ps->port_id;
	out->flags = ps->flags;
	return 1;
}

/* Per-CPU counters: a plain add, no atomics (and bcc 0.26 rejects using
 * the return value of __sync_fetch_and_add anyway). */
static __always_inline void talb_count(__u32 idx)
{
	__u64 *v = counters.lookup(&idx);

	if (v)
		*v += 1;
}

static __always_inline void talb_port_rx(__u32 port_id, __u32 bytes)
{
	struct port_stats *s = port_stats.lookup(&port_id);

	if (s) {
		s->rx_packets += 1;
		s->rx_bytes += bytes;
	}
}

static __always_inline void talb_port_tx(__u32 port_id, __u32 bytes)
{
	struct port_stats *s = port_stats.lookup(&port_id);

	if (s) {
		s->tx_packets += 1;
		s->tx_bytes += bytes;
	}
}

#endif /* TALB_MAPS_H */
