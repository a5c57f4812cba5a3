/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/host_structs.h - structs shared by the host data path (host_tc.c)
 * and user space (datapath/host_maps.py mirrors each with ctypes; opening a
 * pinned map checks the sizes). Fixed-width fields, natural alignment, no
 * implicit padding. Change both sides together.
 */
#ifndef TALB_HOST_STRUCTS_H
#define TALB_HOST_STRUCTS_H

#include "talb/host_constants.h"

/* A TCP flow as the host sends it: the packet's own addresses and ports,
 * in network byte order (copied from the headers, no conversion). */
struct host_flow_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
};

/* flow_isn value: the initial sequence number of our side of the flow. */
struct host_isn {
	__u32 isn;              /* host byte order */
	__u32 flags;            /* HOST_ISN_ACTIVE */
};

/* One tensor on a flow. Stream offsets count payload bytes from the first
 * data byte (offset = seq - ISN - 1, modulo 2^32); the tensor owns
 * [stream_start, stream_end). An all-zero descriptor (start == end) is an
 * empty slot. tensor_len and pkt_idx both use this descriptor's mss, so
 * pkt_idx < len_pkts however TCP cuts the stream. Host byte order. */
struct host_desc {
	__u32 stream_start;
	__u32 stream_end;
	__u32 tensor_id;        /* Snowflake id (workload/snowflake.py) */
	__u16 len_pkts;         /* ceil(bytes / mss) */
	__u16 mss;              /* TCP_MAXSEG when the tensor was queued */
	__u8 layer;
	__u8 reserved[3];       /* 0 */
};

/* flow_rings value: the descriptors of one flow, written by one library
 * (TensorSender) as a whole. A hash-map update swaps the element, so the
 * program reads either the old or the new ring, never half of one. */
struct host_ring {
	struct host_desc desc[HOST_RING_SLOTS];
};

/* One application write of an unmodified process (bpf/host_sendmsg.c), in
 * TCP sequence space: the write owns [seq_start, seq_end) of absolute
 * sequence numbers (no ISN needed, so connections opened before tagging
 * started are tagged too). Both ends share one 64-bit word, `range` =
 * seq_start | (u64)seq_end << 32, stored and loaded whole: the TC program
 * on another CPU never sees a new start with an old end (a modular range
 * that would cover the whole stream). range 0 (start == end) is an empty
 * slot. Host byte order. */
struct host_seq_desc {
	__u64 range;
	__u32 tensor_id;        /* Snowflake id made in the kernel */
	__u16 len_pkts;         /* ceil(bytes / mss) */
	__u16 mss;              /* tp->mss_cache at the write */
	__u8 layer;
	__u8 reserved[7];       /* 0 */
};

/* sendmsg_rings value: the registered writes of one socket. Written in
 * place by the tracing program (under the socket's lock), read by the TC
 * program. */
struct host_seq_ring {
	struct host_seq_desc desc[HOST_SEQ_RING_SLOTS];
};

/* tensor_wire value: when the host's tagged packets of one tensor passed
 * TC egress (bpf_ktime_get_ns, CLOCK_MONOTONIC: the clock of the
 * workload's time.monotonic_ns stamps). TC egress runs before the host's
 * own qdisc: these are the times a packet was handed to the host's NIC
 * queue (docs/workload.md, "Measurement"). */
struct host_wire {
	__u64 first_ns;         /* the tensor's first tagged packet */
	__u64 last_ns;          /* the first time the packet with its last byte
				   (LAST) passed; 0 until it has */
	__u64 latest_ns;        /* its latest packet, retransmissions included */
	__u32 packets;          /* tagged packets, retransmissions included */
	__u32 reserved;         /* 0 */
};

#endif /* TALB_HOST_STRUCTS_H */
