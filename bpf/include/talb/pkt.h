/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/pkt.h - what the decision core knows about a packet (filled by
 * talb_extract() in decision.h) and what it decides. In-program only (not
 * shared with user space); the schemes (schemes/<name>.h) read a
 * const struct talb_pkt.
 */
#ifndef TALB_PKT_H
#define TALB_PKT_H

/* talb_pkt.flags */
#define TALB_PKT_FRAGMENT   (1U << 0)
#define TALB_PKT_IP_OPTIONS (1U << 1)

/* What a decision may look at. Addresses and ports in host byte order
 * (hash input), daddr_be as on the wire (fwd key). */
struct talb_pkt {
	__u32 saddr;
	__u32 daddr;
	__be32 daddr_be;
	__u16 sport;            /* 0 for fragments and non-TCP/UDP */
	__u16 dport;
	__u8 proto;
	__u8 flags;             /* TALB_PKT_* */
	__u16 ip_hlen;          /* IPv4 header length, options included */
	__u32 len;              /* bytes as counted in port_stats */
	__u32 ingress_ifindex;
	/* room: TaLB option fields (tensor_id, layer, flags, len, pkt_idx)
	 * once the option parser exists (DESIGN section 4). */
};

struct talb_verdict {
	__u32 reason;           /* CNT_* to count for this packet */
	__u32 egress_ifindex;
	__u32 egress_port_id;
	__u32 cfg_flags;        /* CFG_* in force for this packet */
};

#endif /* TALB_PKT_H */
