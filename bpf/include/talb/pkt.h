/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/pkt.h - what the decision core knows about a packet (filled by
 * talb_extract() in decision.h) and what it decides. In-program only (not
 * shared with user space); the schemes (schemes/<name>.h) read a
 * const struct talb_pkt.
 */
#ifndef TALB_PKT_H
#define TALB_PKT_H

/* A scheme's select function (schemes/<name>.h). Inlined: bcc 0.26
 * cannot load BPF-to-BPF calls ("call to invalid destination": it loads
 * each function's own bytes), so the schemes get room from tail calls
 * instead (switch_tc.c, docs/schemes.md "Verifier budget"). */
#define TALB_SCHEME_FN static __always_inline

/* talb_pkt.flags */
#define TALB_PKT_FRAGMENT   (1U << 0)
#define TALB_PKT_IP_OPTIONS (1U << 1)
#define TALB_PKT_TAGGED     (1U << 2)   /* valid TaLB option: fields below */
#define TALB_PKT_OPT_SEEN   (1U << 3)   /* an option of type 0x9E, valid or not */
#define TALB_PKT_OPT_STRIP  (1U << 4)   /* ... first, length 12: strippable */
#define TALB_PKT_LAST       (1U << 5)   /* TALB_IPOPT_F_LAST */

/* What a decision may look at. Addresses and ports in host byte order
 * (hash input; saddr with tensor_id also keys the tensor table),
 * daddr_be as on the wire (fwd key). */
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
	/* TaLB option (valid when flags & TALB_PKT_TAGGED), host byte order */
	__u32 tensor_id;
	__u16 tensor_len;
	__u16 pkt_idx;
	__u8 layer;
	__u8 pad[3];
};

struct talb_verdict {
	__u32 reason;           /* CNT_* to count for this packet */
	__u32 egress_ifindex;
	__u32 egress_port_id;
	__u32 cfg_flags;        /* CFG_* in force for this packet */
	__u32 egress_flags;     /* PORT_* of the egress port */
	__u32 priority;         /* skb->priority: HTB classid of the band */
};

/* scheme_scratch[0], per CPU: what the main program hands to the scheme
 * program it tail-calls (a tail call keeps only the skb). A tail call
 * runs on the same CPU, so a per-CPU slot is never shared. Mirrored in
 * datapath/structs.py (TalbScratch) for the pinned map's layout check. */
#define TALB_SCRATCH_REMEMBER   (1U << 0)  /* TaLB midstream: remember the
					      fallback's port */
struct talb_scratch {
	struct talb_pkt pkt;
	__u64 now;              /* bpf_ktime_get_ns, 0 if the scheme has no clock */
	__u32 gid;
	__u32 flags;            /* TALB_SCRATCH_* */
};

#endif /* TALB_PKT_H */
