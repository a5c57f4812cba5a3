/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/tensor_egress.h - what the switch itself saw of tensor integrity:
 * every tagged packet it forwards into the fabric (egress not a host
 * port) marks, in `tensor_egress`, the port its tensor left by. A tensor
 * (source address, tensor_id) with two bits in its port_mask left this
 * switch by two ports: split (CNT_TENSOR_SPLIT counts the packet that
 * found a port new to its tensor).
 *
 * Why the data path keeps it: under XDP a redirected frame never becomes an
 * skb on the egress device, so a capture on a leaf's uplinks sees nothing
 * (`talb send` read "0 split" off tensors it had not seen at all: issue
 * 41). The record is the same under TC and XDP and under every scheme --
 * it is written by talb_verdict_for (decision.h), which every entry point
 * and every scheme's program ends in -- and `talb send` reads it from the
 * pinned map (datapath/maps.py SwitchMaps.tensor_egress, talb/send.py).
 *
 * Cost: only tagged packets pay it: one LRU hash lookup, an atomic add,
 * and a clock read when the scheme read none -- the coarse clock (the
 * last tick's time, up to one tick behind: plenty for a 300 s staleness,
 * and ~27 ns a packet less than bpf_ktime_get_ns on the project's VM;
 * docs/schemes.md "The integrity record"). An entry idle for
 * TALB_EGRESS_STALE_NS is another tensor of the same id (ids come back,
 * workload/snowflake.py): the next packet starts it afresh. Bounded like the hosts' tensor_wire: an LRU of
 * TALB_EGRESS_MAP_SIZE, the least recent tensors go first.
 *
 * Needs talb/maps.h included before it.
 */
#ifndef TALB_TENSOR_EGRESS_H
#define TALB_TENSOR_EGRESS_H

#include "talb/pkt.h"

/* The tagged packet p leaves by port `port_id` (of flags `port_flags`) at
 * `now` (0: the scheme read no clock; the coarse one is read here). Several CPUs forward
 * one tensor's packets at once (the sender's process and its softirq):
 * the port bit is OR-ed in atomically and the first packet is inserted
 * with BPF_NOEXIST, so a racing CPU's port is never lost. */
static __always_inline void talb_note_egress(const struct talb_pkt *p, __u32 port_id,
					     __u32 port_flags, __u64 now)
{
	struct tensor_key key = {};
	struct tensor_egress fresh = {};
	struct tensor_egress *e;
	__u64 bit;

	if (!(p->flags & TALB_PKT_TAGGED) || (port_flags & PORT_HOST))
		return;
	key.saddr = p->saddr;
	key.tensor_id = p->tensor_id;
	bit = 1ULL << (port_id & (TALB_MAX_PORTS - 1));
	if (!now)
		now = bpf_ktime_get_coarse_ns();
	e = tensor_egress.lookup(&key);
	if (!e) {
		fresh.first_ns = now;
		fresh.latest_ns = now;
		fresh.port_mask = bit;
		fresh.packets = 1;
		fresh.first_port = port_id;
		if (tensor_egress.insert(&key, &fresh) == 0)
			return;
		e = tensor_egress.lookup(&key);        /* another CPU's insert won */
		if (!e)
			return;
	} else if ((__s64)(now - e->latest_ns) > (__s64)TALB_EGRESS_STALE_NS) {
		/* Signed: another CPU may have stamped it after our clock read.
		 * Plain stores: a tensor idle for minutes has no packet racing. */
		e->first_ns = now;
		e->latest_ns = now;
		e->port_mask = bit;
		e->packets = 1;
		e->first_port = port_id;
		return;
	}
	if (!(e->port_mask & bit)) {
		__sync_fetch_and_or(&e->port_mask, bit);
		talb_count(CNT_TENSOR_SPLIT);
	}
	__sync_fetch_and_add(&e->packets, 1);
	e->latest_ns = now;
}

#endif /* TALB_TENSOR_EGRESS_H */
