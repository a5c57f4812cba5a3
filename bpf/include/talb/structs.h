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

/* groups: group_id -> candidate egress ports. A whole group is one value of
 * a hash map, so a user-space update replaces it atomically (a hash map
 * swaps the element; an array map would be copied in place under readers). */
struct fwd_group {
	__u32 n_ports;                          /* 0..TALB_MAX_GROUP_PORTS */
	__u32 flags;                            /* reserved, 0 */
	__u32 ifindex[TALB_MAX_GROUP_PORTS];    /* egress devices, in order */
};

/* config[0]: runtime configuration, read per packet (switch scheme without
 * reloading). reserved[] keeps the value size stable while later schemes
 * add fields (flowlet timeout, TaLB threshold, ...); it must be zero. */
struct talb_config {
	__u32 scheme;           /* TALB_SCHEME_* */
	__u32 hash_seed;        /* seed of the 5-tuple hash */
	__u32 flags;            /* CFG_* */
	__u32 fallback_scheme;  /* for untagged packets under TaLB (not used yet) */
	__u32 reserved[12];
};

#endif /* TALB_STRUCTS_H */
