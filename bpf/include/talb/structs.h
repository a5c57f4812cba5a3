/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/structs.h - every struct shared between the data path and user space.
 *
 * agent/maps.py mirrors each of these with ctypes; opening a pinned map
 * checks the kernel's key/value sizes against the mirror. Change both
 * together. Layouts use only fixed-width fields with natural alignment and
 * no implicit padding.
 */
#ifndef TALB_STRUCTS_H
#define TALB_STRUCTS_H

/* ports: ifindex -> port. port_id indexes port_stats (< TALB_MAX_PORTS). */
struct port_info {
	__u32 port_id;
	__u32 flags;            /* PORT_HOST | PORT_UP */
};

/* port_stats (per CPU): rx counts every packet the program sees on its
 * ingress port; tx counts packets the program sends out of a port
 * (redirected or released), bytes as skb->len (Ethernet header included). */
struct port_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets;
	__u64 tx_bytes;
};

/* groups: group_id -> candidate egress ports, with everything TaLB needs
 * to place a new tensor in this group. A whole group is one value of a hash
 * map, so a user-space update replaces it atomically (a hash map swaps the
 * element; an array map would be copied in place under readers): a packet
 * never sees the PCMs of one publication with the order or schedule of
 * another. Written by agent/control.py (program_switch: neutral values;
 * publish_pcm: from the agent's PCMs). Indices below are positions in
 * ifindex[]; the data path checks each against n_ports before use. */
struct fwd_group {
	__u32 n_ports;                          /* 0..TALB_MAX_GROUP_PORTS */
	__u32 flags;                            /* reserved, 0 */
	__u32 ifindex[TALB_MAX_GROUP_PORTS];    /* egress devices, in order */
	__u32 threshold;        /* S, PCM fixed point (TALB_PCM_ONE = 1.0) */
	__u16 sched_len;        /* smooth-WRR schedule length, 1..TALB_SCHED_MAX */
	__u16 reserved;
	__u16 pcm[TALB_MAX_GROUP_PORTS];        /* P_i, fixed point */
	__u8 order[TALB_MAX_GROUP_PORTS];       /* indices by PCM, lowest first */
	__u8 sched[TALB_SCHED_MAX];             /* CASE 2 schedule of indices */
};

/* tensors key: a tensor is (sender, tensor_id). Ids are unique per sending
 * host only (the 12-byte option has no room for the sender, and the IPv4
 * header already carries it), so two hosts' tensors of one id must not
 * share an entry (issue 8; docs/talb-decisions.md). Both fields in host
 * byte order, as talb_extract() parsed them: no byte swap per packet. */
struct tensor_key {
	__u32 saddr;            /* IPv4 source address of the sender */
	__u32 tensor_id;
};

/* tensors (LRU hash): tensor_key -> one tensor, Table I of the paper
 * (tensor_id, tensor_len, received packets, previous port) plus what
 * removal and ageing need. Live until TALB_TENSOR_DONE. */
struct tensor_entry {
	__u64 first_seen_ns;    /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u64 last_seen_ns;
	__u32 prev_port;        /* ifindex of the port the tensor took */
	__u32 group_id;         /* whose live-layer counts include it */
	__u32 received;         /* packets seen, this one included */
	__u16 tensor_len;       /* packets, from the option */
	__u8 layer;
	__u8 flags;             /* TALB_TENSOR_DONE */
};

/* group_state[group_id]: what the data path keeps per group (array map,
 * updated in place with atomic adds). live[l] counts the group's live
 * tensor entries of layer l; tensors their sum. group_swept has the same
 * layout and is written by user space only (sweep_tensors): the entries it
 * removed, so that the data path sees live[l] - swept[l] without user
 * space ever writing a value the data path adds to (no lost updates). */
struct group_state {
	__u32 wrr_cursor;       /* CASE 2: next schedule slot (group_state only) */
	__u32 tensors;
	__u32 live[TALB_NR_LAYERS];
};

/* config[0]: runtime configuration, read per packet (switch scheme without
 * reloading). reserved[] keeps the value size stable while later schemes
 * add fields (flowlet timeout, ...); it must be zero. A TaLB field left 0
 * means its default (TALB_DEFAULT_* / TALB_MAX_TENSORS). */
struct talb_config {
	__u32 scheme;           /* TALB_SCHEME_* */
	__u32 hash_seed;        /* seed of the 5-tuple hash */
	__u32 flags;            /* CFG_* */
	__u32 fallback_scheme;  /* untagged packets under TaLB (ECMP) */
	__u32 tensor_limit;     /* live tensor entries, <= TALB_MAX_TENSORS */
	__u32 tensor_idle_us;   /* idle timeout of an entry (0: default) */
	__u32 n_bands;          /* priority bands of the egress HTB (0, 1: one) */
	__u32 layers_per_band;  /* tagged band = 1 + layer / layers_per_band */
	__u32 reserved[8];
};

#endif /* TALB_STRUCTS_H */
