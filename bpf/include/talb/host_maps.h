/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/host_maps.h - ALL maps of the host data path (bpf/host_tc.c), and
 * its counter helper. Include once, from the entry point (bcc only rewrites
 * map calls in the main text: datapath/host_loader.py expands the includes).
 *
 * datapath/host_loader.py pins every map as <pin_dir>/<map name>, with
 * pin_dir = common.paths.pin_dir(prefix, host); datapath/host_maps.py (HostMaps)
 * and workload/tensor_sender.py open them by these names.
 */
#ifndef TALB_HOST_MAPS_H
#define TALB_HOST_MAPS_H

#include "talb/host_constants.h"
#include "talb/host_structs.h"
/* TALB_MAP: fresh, or pinned at TALB_PIN_DIR (a reload keeps learned ISNs
 * and live rings) */
#include "talb/map_decl.h"

/* flow -> our ISN, learned from our SYN / SYN-ACK. LRU: flows come and go
 * without anyone deleting them; an evicted entry only costs tags of a flow
 * idle long enough to be the least recent of HOST_MAX_FLOWS. */
TALB_MAP("lru_hash", struct host_flow_key, struct host_isn, flow_isn, HOST_MAX_FLOWS);
/* flow -> tensor descriptors, written by the library (TensorSender), which
 * also deletes it (close()). Not LRU: a ring must never vanish under a
 * sender; a full map is a clear error in the library instead. */
TALB_MAP("hash", struct host_flow_key, struct host_ring, flow_rings, HOST_MAX_TAGGED_FLOWS);
/* flow -> writes of an unmodified process, in sequence space, written by
 * the kernel-side tagger (bpf/host_sendmsg.c, which reaches every tagged
 * host's pinned map through a hash of maps keyed by the host's netns
 * inode). LRU: a socket that dies without passing TCP_CLOSE, or a flow idle
 * long enough, goes first; the SYN of a new connection on the 4-tuple
 * deletes it (host_learn_isn), and so does TCP_CLOSE (the tagger). */
TALB_MAP("lru_hash", struct host_flow_key, struct host_seq_ring, sendmsg_rings, HOST_MAX_SENDMSG_FLOWS);
/* tensor_id -> when its packets passed TC egress (host_note_wire). Keyed by
 * the id alone: ids are unique per host across its processes and
 * connections (workload/id_slots.py). LRU: nobody deletes entries; a run
 * reads its tensors' entries when its nodes are done. Not per-CPU: one
 * tensor's packets all come from one TCP socket, whose transmissions
 * (process context, softirq ACK clocking, retransmission timer) the kernel
 * serialises under the socket's lock, so an entry is never updated by two
 * CPUs at once, and a per-CPU value would only multiply the memory by the
 * CPUs and leave the minimum and maximum to user space. */
TALB_MAP("lru_hash", __u32, struct host_wire, tensor_wire, HOST_MAX_WIRE_TENSORS);
/* HOST_CNT_* -> packets, per CPU */
TALB_MAP("percpu_array", __u32, __u64, counters, HOST_NR_COUNTERS);

/* Per-CPU: a plain add, no atomics. */
static __always_inline void host_count(__u32 idx)
{
	__u64 *v = counters.lookup(&idx);

	if (v)
		*v += 1;
}

#endif /* TALB_HOST_MAPS_H */
