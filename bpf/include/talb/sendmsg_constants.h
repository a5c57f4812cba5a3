/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/sendmsg_constants.h - every number of the kernel-side tagger
 * (bpf/host_sendmsg.c) that user space needs too. Parsed by
 * datapath/sendmsg_tagger.py with common/c_constants.py (same format as
 * talb/host_constants.h).
 */
#ifndef TALB_SENDMSG_CONSTANTS_H
#define TALB_SENDMSG_CONSTANTS_H

#define SENDMSG_MAX_HOSTS       64      /* tagged hosts (netns) per tagger */
#define SENDMSG_MAX_SOCKS       16384   /* sendmsg_socks (LRU): per-socket state */
#define SENDMSG_MAX_PKTS        65535   /* tensor_len is 16 bits: larger writes untagged */
#define SENDMSG_RULE_MAX        8       /* size classes / ports of a priority rule */

/* ---- selector (struct sendmsg_host_cfg.selector) ---------------------- */
#define SENDMSG_SEL_CGROUP      1       /* the writer's cgroup v2 (or a descendant) */
#define SENDMSG_SEL_PID         2       /* the writer's tgid */
#define SENDMSG_SEL_PORTS       3       /* sport or dport in [port_lo, port_hi] */

/* ---- priority rule (struct sendmsg_host_cfg.rule) ---------------------- */
#define SENDMSG_RULE_SIZE       1       /* layer = first class with size <= rule_val[i] */
#define SENDMSG_RULE_PORT       2       /* layer = rule_layer[i] of dport rule_val[i] */
#define SENDMSG_RULE_BURST      3       /* layer = position in a burst, capped */

/* ---- Snowflake ids (workload/snowflake.py: 20 | 8 | 4) ----------------- */
#define SENDMSG_TS_BITS         20
#define SENDMSG_SEQ_BITS        8
#define SENDMSG_WORKER_BITS     4
#define SENDMSG_UNIT_NS         1000000 /* 1 ms ticks */

/* ---- sendmsg_socks.in_call --------------------------------------------- */
#define SENDMSG_CALL_NONE       0
#define SENDMSG_CALL_NEW        1       /* this call registered a new tensor */
#define SENDMSG_CALL_CONT       2       /* this call continues a partial write */
#define SENDMSG_CALL_MERGED     3       /* this call extended the newest tensor (ring full) */

/* ---- counters (index into the per-CPU sendmsg_counters array) ---------- */
#define SENDMSG_CNT_WRITES_SEEN         0   /* tcp_sendmsg_locked on a tagged host */
#define SENDMSG_CNT_NOT_SELECTED        1   /* selector did not match */
#define SENDMSG_CNT_NOT_IPV4_ESTABLISHED 2  /* IPv6, or not ESTABLISHED/CLOSE_WAIT */
#define SENDMSG_CNT_ZERO_LENGTH         3   /* size 0: ignored */
#define SENDMSG_CNT_SELECTED            4   /* selector matched */
#define SENDMSG_CNT_SKIPPED_LIBRARY_FLOW 5  /* a TensorSender ring: the library's */
#define SENDMSG_CNT_STARTED             6   /* a new tensor registered */
#define SENDMSG_CNT_CONTINUED           7   /* a write continuing a partial one */
#define SENDMSG_CNT_TRIMMED             8   /* a partial write's tensor cut to what was accepted */
#define SENDMSG_CNT_RING_FULL           9   /* every slot live, no merge: untagged */
#define SENDMSG_CNT_TOO_LARGE           10  /* > SENDMSG_MAX_PKTS packets: untagged */
#define SENDMSG_CNT_FAILED              11  /* ret <= 0: descriptor cleared */
#define SENDMSG_CNT_PARTIAL             12  /* 0 < ret < size */
#define SENDMSG_CNT_CLOSED              13  /* TCP_CLOSE: ring and state deleted */
#define SENDMSG_CNT_NO_HOST_MAP         14  /* host's sendmsg_rings not registered */
#define SENDMSG_CNT_MERGED              15  /* every slot live: extended the newest, unsent tensor */
#define SENDMSG_NR_COUNTERS             16

#endif /* TALB_SENDMSG_CONSTANTS_H */
