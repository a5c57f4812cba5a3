/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/sendmsg_structs.h - structs of the kernel-side tagger
 * (bpf/host_sendmsg.c), mirrored with ctypes in datapath/sendmsg_tagger.py.
 * Fixed widths, no implicit padding.
 */
#ifndef TALB_SENDMSG_STRUCTS_H
#define TALB_SENDMSG_STRUCTS_H

#include "talb/sendmsg_constants.h"
#include "talb/host_structs.h"

/* sendmsg_hosts value, keyed by the host's netns inode: what to tag there. */
struct sendmsg_host_cfg {
	__u64 cgroup_id;        /* SENDMSG_SEL_CGROUP */
	__u64 burst_gap_ns;     /* SENDMSG_RULE_BURST */
	__u32 tgid;             /* SENDMSG_SEL_PID */
	__u32 cgroup_level;     /* depth of cgroup_id under the cgroup2 root */
	__u16 port_lo;          /* SENDMSG_SEL_PORTS, host order, inclusive */
	__u16 port_hi;
	__u8 worker;            /* Snowflake worker (the host's claimed slot) */
	__u8 selector;          /* SENDMSG_SEL_* */
	__u8 rule;              /* SENDMSG_RULE_* */
	__u8 n_rule;            /* entries of rule_val / rule_layer */
	__u32 rule_val[SENDMSG_RULE_MAX];   /* size bytes, or dport */
	__u8 rule_layer[SENDMSG_RULE_MAX];  /* port: its layer */
	__u8 default_layer;     /* port: unlisted ports; burst: the cap */
	__u8 reserved[7];
};

/* sendmsg_socks value, keyed by the socket's address: the tensor a partial
 * write left open, the burst, and this call's registration (entry -> exit). */
struct sendmsg_sock {
	__u64 last_ns;          /* end (exit) of the socket's last write */
	__u32 cont_seq;         /* a continuation starts here ... */
	__u32 cont_left;        /* ... with exactly this many bytes (0: none) */
	__u32 desc_start;       /* seq_start of the open tensor */
	__u32 call_seq;         /* write_seq at this call's entry */
	__u32 call_size;        /* this call's size */
	__u32 netns;            /* the host's netns inode */
	struct host_flow_key key;
	__u16 slot;             /* the open tensor's ring slot */
	__u8 in_call;           /* SENDMSG_CALL_* */
	__u8 burst_idx;         /* the burst's next tensor: its position (layer) */
};

/* sendmsg_ids value (per CPU): the CPU's Snowflake generator. */
struct sendmsg_idgen {
	__u64 last_tick;        /* may run ahead of the clock */
	__u32 seq;              /* per-CPU part of the sequence */
	__u32 reserved;
};

#endif /* TALB_SENDMSG_STRUCTS_H */
