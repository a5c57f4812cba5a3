/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/sendmsg_maps.h - ALL maps of the kernel-side tagger
 * (bpf/host_sendmsg.c) and its counter helper. Include once, from the
 * entry point (bcc rewrites map calls in the main text only).
 *
 * One tagger serves every host it tags: it reaches each host's pinned
 * sendmsg_rings and flow_rings (talb/host_maps.h) through two hashes of
 * maps keyed by the host's netns inode, filled by
 * datapath/sendmsg_tagger.py. The *_tmpl maps only give the kernel the
 * inner maps' shape: same type, key, value and size as host_maps.h's.
 */
#ifndef TALB_SENDMSG_MAPS_H
#define TALB_SENDMSG_MAPS_H

#include "talb/host_constants.h"
#include "talb/sendmsg_structs.h"

BPF_TABLE("hash", struct host_flow_key, struct host_ring, flow_rings_tmpl, HOST_MAX_TAGGED_FLOWS);
BPF_TABLE("lru_hash", struct host_flow_key, struct host_seq_ring, sendmsg_rings_tmpl,
	  HOST_MAX_SENDMSG_FLOWS);
/* netns inode -> that host's flow_rings / sendmsg_rings */
BPF_HASH_OF_MAPS(lib_rings_of, __u32, "flow_rings_tmpl", SENDMSG_MAX_HOSTS);
BPF_HASH_OF_MAPS(seq_rings_of, __u32, "sendmsg_rings_tmpl", SENDMSG_MAX_HOSTS);
/* netns inode -> what to tag on that host */
BPF_TABLE("hash", __u32, struct sendmsg_host_cfg, sendmsg_hosts, SENDMSG_MAX_HOSTS);
/* socket address -> its open tensor and this call (LRU: a socket freed
 * without passing TCP_CLOSE ages out) */
BPF_TABLE("lru_hash", __u64, struct sendmsg_sock, sendmsg_socks, SENDMSG_MAX_SOCKS);
/* thread -> the socket of its write call in flight (entry -> sys_exit) */
BPF_TABLE("lru_hash", __u64, __u64, sendmsg_calls, SENDMSG_MAX_SOCKS);
/* one all-zero ring: the initial value of a flow's sendmsg ring (too big
 * for the stack); never written */
BPF_TABLE("array", __u32, struct host_seq_ring, sendmsg_zero, 1);
/* per CPU: its Snowflake generator */
BPF_TABLE("percpu_array", __u32, struct sendmsg_idgen, sendmsg_ids, 1);
/* SENDMSG_CNT_* -> events, per CPU */
BPF_TABLE("percpu_array", __u32, __u64, sendmsg_counters, SENDMSG_NR_COUNTERS);

static __always_inline void sendmsg_count(__u32 idx)
{
	__u64 *v = sendmsg_counters.lookup(&idx);

	if (v)
		*v += 1;
}

#endif /* TALB_SENDMSG_MAPS_H */
