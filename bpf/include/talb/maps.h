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

/* ---- ECN, every scheme (talb/ecn.h) ---- */
/* port_id -> marking setup: rate, K, limit, burst, band weights (user space) */
TALB_MAP("array", __u32, struct ecn_port, ecn_port, TALB_MAX_PORTS);
/* port_id -> phantom queue per band (data path only) */
TALB_MAP("array", __u32, struct ecn_queue, ecn_queue, TALB_MAX_PORTS);

/* A scheme's own state is declared in its header (schemes/<name>.h, and
 * schemes/pick.h, flowlet.h for what several share). */

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
