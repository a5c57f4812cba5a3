/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/constants.h - every number shared by the data path and user space.
 *
 * common/c_constants.py parses this file (it is the single source of truth for
 * these values in Python too). Keep to the format it understands:
 *   #define NAME VALUE
 * one per line, VALUE an integer expression of literals (decimal or hex,
 * optional U/UL suffix), earlier NAMEs, parentheses and + - * << >> | & ~.
 * Anything else (include guards, comments) is ignored by the parser.
 */
#ifndef TALB_CONSTANTS_H
#define TALB_CONSTANTS_H

/* ---- limits (map sizes) ---------------------------------------------- */
#define TALB_MAX_PORTS          64      /* ports per switch; port_id < this  */
#define TALB_PORT_SLOTS         4096    /* port_slots: a port at ifindex % this */
#define TALB_PORT_SLOT_MASK     (TALB_PORT_SLOTS - 1) /* a power of two */
#define TALB_MAX_GROUP_PORTS    8       /* candidate egress ports per group  */
#define TALB_MAX_ROUTES         4096    /* fwd: destination IPv4 addresses   */
#define TALB_ROUTE_SLOT_BITS    12      /* route_slots: 2^this slots          */
#define TALB_ROUTE_SLOTS        (1 << TALB_ROUTE_SLOT_BITS)
#define TALB_ROUTE_HASH_MUL     0x9E3779B1U /* slot = (daddr * this) >> (32 - bits) */
#define ROUTE_SLOT_USED         (1U << 0)   /* route_slot.flags: the slot holds a route */
#define TALB_MAX_GROUPS         1024    /* groups: distinct port sets        */
#define TALB_NR_LAYERS          256     /* tensor_layer is a u8 on the wire  */
/* Tensor table (Table I of the paper). The occupancy limit (config
 * tensor_limit, default TALB_MAX_TENSORS) on live entries stays at half
 * the map's size; done entries (kept for late retransmissions) use the
 * other half. A full table is the data path's decision (fallback scheme),
 * never an eviction: the map is a plain hash (maps.h). */
#define TALB_MAX_TENSORS        8192
#define TALB_TENSOR_MAP_SIZE    (2 * TALB_MAX_TENSORS)
#define TALB_SCHED_MAX          64      /* smooth-WRR schedule slots/group   */
#define TALB_EEXIST             17      /* a map insert's -errno: key exists */
#define TALB_COUNT_LIVE         0       /* tensor_count[]: data path's count */
#define TALB_COUNT_SWEPT        1       /* tensor_count[]: user space's      */
#define TALB_TENSOR_DONE        (1U << 0)  /* tensor_entry.flags: completed, kept
					      for late packets, not live    */
/* tensor_egress (LRU, talb/tensor_egress.h): the egress ports of the
 * tagged tensors a switch forwarded into the fabric, for `talb send`'s
 * split check. Like the hosts' tensor_wire (HOST_MAX_WIRE_TENSORS): the
 * least recent go first; ~100 bytes an entry in the kernel, ~6.5 MB per
 * switch. An entry idle this long is another tensor of the same id: its
 * next packet starts it afresh (as HOST_WIRE_STALE_NS). */
#define TALB_EGRESS_MAP_SIZE    65536
#define TALB_EGRESS_STALE_NS    (300ULL * 1000 * 1000 * 1000)   /* 300 s */

/* ---- load-balancing schemes (talb_config.scheme) ----------------------
 * A scheme is its header, bpf/include/talb/schemes/<name>.h (or one in a
 * directory of TALB_SCHEME_PATH), and its Python module beside it: the
 * header defines TALB_SCHEME_<NAME> (its id, < TALB_MAX_SCHEMES) and
 * TALB_SCHEME_<NAME>_FLAGS (the TALB_SF_* below: which hooks it has); the
 * loader includes every registered header (talb/schemes/all.h, generated
 * by datapath/source.py) and talb/scheme_dispatch.h calls the hooks. No
 * shared file names a scheme (docs/add-a-scheme.md). A configured id
 * without a program falls back to the default scheme and counts
 * CNT_SCHEME_FALLBACK (user space refuses to set one). */
#define TALB_MAX_SCHEMES        16      /* ids 0..15: decision counters, programs */
/* TALB_SCHEME_<NAME>_FLAGS: what the scheme's header provides. Every
 * scheme has <name>_pick(pkt, g, gid, cfg, now) -> index < g->n_ports
 * unless it brings a program of its own (TALB_SF_OWN_PROGRAM). */
#define TALB_SF_INLINE          (1U << 0) /* decides in the main program: no
					     tail call (per-packet cost) */
#define TALB_SF_DEFAULT         (1U << 1) /* the main program's last resort
					     (one scheme: ECMP) */
#define TALB_SF_PROGRAM         (1U << 2) /* a program of its own,
					     talb_scheme_<name>, tail-called
					     for multipath groups */
#define TALB_SF_EVERY_HOP       (1U << 3) /* ... for every packet, single-
					     port groups too (CONGA's option) */
#define TALB_SF_CLOCK           (1U << 4) /* always reads bpf_ktime_get_ns */
#define TALB_SF_CLOCK_HOOK      (1U << 5) /* reads it when <name>_clock(cfg,
					     pkt) says so */
#define TALB_SF_EGRESS          (1U << 6) /* <name>_egress(port_id, len, cfg,
					     now) on every forwarded packet
					     while it decides (or is the
					     fallback of the one that does) */
#define TALB_SF_FALLBACK        (1U << 7) /* hands packets to
					     cfg->fallback_scheme; then
					     <name>_after_fallback() */
#define TALB_SF_OWN_PROGRAM     (1U << 8) /* its header writes its program
					     itself (no <name>_pick) */

/* ---- schemes: the limits that size shared structs (structs.h struct
 * drill_mem); each scheme's own limits, defaults and counters are in its
 * header (schemes/<name>.h; docs/schemes.md says why) ---- */
#define TALB_DRILL_MAX_D        4
#define TALB_DRILL_MAX_M        2
/* Queue estimates (DRILL): a port idle this long is empty whatever its
 * rate, and dt * bytes_per_s stays below 2^64 up to 4.6 GB/s. */
#define TALB_QUEUE_DT_MAX_NS    4000000000ULL

/* ECN (talb/ecn.h): the IPv4 TOS byte's two ECN bits (RFC 3168), and
 * how many times a phantom queue's drain passes over its bands (what a
 * band leaves unused goes to the others: two passes are exact unless
 * bands empty one after another within one inter-packet gap). */
#define TALB_ECN_MASK           0x03
#define TALB_ECN_NOT_ECT        0x00
#define TALB_ECN_CE             0x03
#define TALB_ECN_DRAIN_ROUNDS   2

/* ---- port flags (struct port_info.flags, struct port_slot.flags) ----- */
#define PORT_HOST               (1U << 0)  /* faces a host (last hop)        */
#define PORT_UP                 (1U << 1)  /* may be used as an egress port  */

/* ---- config flags (struct talb_config.flags) -------------------------- */
/* Release the sending socket at the first hop: where skb->sk is set, send
 * an unowned clone and drop the original (docs/design.md §3). The loader
 * sets it by default. */
#define CFG_RELEASE_SK          (1U << 0)
/* Mark CE at the egress ports (talb/ecn.h): set by datapath/control.py
 * set_ecn with the ports' phantom-queue setup (ecn_port). */
#define CFG_ECN                 (1U << 1)

/* ---- TaLB defaults (struct talb_config; 0 in a field = this default) --- */
/* A tensor entry idle this long is stale: a hit on it re-decides (the
 * agent may also sweep idle entries: datapath/control.py sweep_tensors). */
#define TALB_DEFAULT_IDLE_US    1000000
#define TALB_DEFAULT_LAYERS_PER_BAND 8

/* ---- PCM, fixed point (struct fwd_group.pcm / .threshold) ------------- */
#define TALB_PCM_ONE            0xFFFF  /* P_i = 1.0 (most congested)        */

/* ---- priority bands (skb->priority = HTB classid 1:(0x10 + band)) -----
 * netns_topology/qdisc.py builds the classes; HTB's default class is 1:10
 * (band 0), so untagged traffic goes to band 0 like everything the bridge
 * forwards, and tagged tensors to bands 1.. by layer (front layers first). */
#define TALB_HTB_MAJOR          0x10000 /* 1:                                */
#define TALB_BAND_MINOR_BASE    0x10    /* band b = class 1:(0x10 + b)       */
#define TALB_MAX_BANDS          8       /* common/c_constants.py MAX_BANDS   */
#define TALB_BAND_UNTAGGED      0

/* ---- counters (index into the per-CPU `counters` array) ---------------
 * CNT_PASS_*: packet returned to the stack (TC_ACT_OK: the bridge carries
 * it), by reason. Exactly one CNT_PASS_*, CNT_REDIRECTED, CNT_RELEASED or
 * CNT_DROP_* is counted per packet the program sees. The others are
 * informational. */
#define CNT_PASS_NOT_IPV4       0   /* ARP, IPv6, LLDP, ...                  */
#define CNT_PASS_MALFORMED      1   /* truncated frame, bad IPv4/L4 header   */
#define CNT_PASS_NO_ROUTE       2   /* destination not in fwd                */
#define CNT_PASS_GROUP_EMPTY    3   /* group missing, 0 or too many ports    */
#define CNT_PASS_EGRESS_DOWN    4   /* chosen port unknown or not PORT_UP    */
#define CNT_PASS_HAIRPIN        5   /* chosen port is the ingress port       */
#define CNT_PASS_UNKNOWN_INGRESS 6  /* arrived on a device not in `ports`    */
#define CNT_REDIRECTED          7   /* bpf_redirect (packet not owned)       */
#define CNT_RELEASED            8   /* first hop: clone sent, original freed */
#define CNT_CLONE_FAIL          9   /* bpf_clone_redirect failed: redirected */
#define CNT_IP_FRAGMENT         10  /* IPv4 fragment: hashed with ports 0    */
#define CNT_IP_OPTIONS          11  /* IHL > 5, no valid TaLB option         */
#define CNT_SCHEME_FALLBACK     12  /* configured scheme not implemented     */
#define CNT_DECISION_SINGLE     13  /* group of one port: no choice to make  */
/* TaLB option parsing (parse_talb_option): a packet with a malformed
 * option is untagged (fallback scheme), counted by the first reason. */
#define CNT_OPT_TAGGED          24  /* valid TaLB option                     */
#define CNT_OPT_TRUNCATED       25  /* type 0x9E not fitting in the header   */
#define CNT_OPT_BAD_LEN         26  /* type 0x9E with length != 12           */
#define CNT_OPT_BAD_VERSION     27  /* version bits != TALB_IPOPT_VERSION    */
#define CNT_OPT_ZERO_LEN        28  /* tensor_len 0                          */
#define CNT_OPT_OVERRUN         29  /* another option's length < 2 or past
                                       IHL before ours: the walk stops      */
#define CNT_OPT_NOT_FIRST       30  /* valid, after other options            */
/* 32..43: TaLB's tensor-table counters, in schemes/talb.h (with 56). */
/* Last hop (docs/design.md §4): the option never reaches a host. */
#define CNT_STRIPPED            44  /* option removed before a host port     */
#define CNT_DROP_OPT_POSITION   45  /* option not first at a host edge       */
#define CNT_DROP_STRIP_FAIL     46  /* bpf_skb_adjust_room failed            */
/* 47..56: the schemes' own counters, in their headers: 47-48 the flowlet
 * step's (schemes/flowlet.h), 49-55 CONGA's, 56 TaLB's. A scheme's header may
 * name a free index below CNT_DECISION_BASE (common/c_constants.py
 * COUNTER_NAMES: reserved_<i>) as CNT_<NAME>: the agent exports it by name. */
/* Tensor integrity as the switch saw it (talb/tensor_egress.h) */
#define CNT_TENSOR_SPLIT        57  /* a tagged tensor left by a port new to
                                       it (tensor_egress): split here      */
/* ECN (talb/ecn.h): packets that found their band above K */
#define CNT_ECN_MARKED          58  /* ECT packet left with CE (or was CE)   */
#define CNT_ECN_NOT_ECT         59  /* Not-ECT: never marked (RFC 3168)      */
#define CNT_ECN_MARK_FAIL       60  /* load/store/checksum helper failed     */
/* Multipath decisions, one counter per scheme id: CNT_DECISION_BASE + id
 * (room for TALB_MAX_SCHEMES; 16..23 held them before issue 37 and stay
 * unused). */
#define CNT_DECISION_BASE       64
#define TALB_NR_COUNTERS        (CNT_DECISION_BASE + TALB_MAX_SCHEMES)

/* ---- wire format (docs/design.md §4, bpf/include/talb/talb_option.h) --- */
#define TALB_IPOPT_TYPE         0x9E    /* copied=1, class 0, number 30     */
#define TALB_IPOPT_LEN          12
#define TALB_IPOPT_VERSION      1
#define TALB_IPOPT_VERSION_MASK 0x03    /* flags bits 0-1                    */
#define TALB_IPOPT_F_LAST       0x04    /* last packet of the tensor         */
#define TALB_IPOPT_MAX          40      /* option bytes in an IPv4 header    */
#define TALB_IPOPT_EOL          0       /* end of option list                */
#define TALB_IPOPT_NOP          1
#define TALB_IP_BASE_LEN        20      /* IPv4 header without options       */

/* CONGA's own option (docs/schemes.md, "CONGA's option"): pushed by the
 * source leaf in front of any other option, removed by the destination leaf. */
#define TALB_CONGA_IPOPT_TYPE   0x9F    /* copied=1, class 0, number 31     */
#define TALB_CONGA_IPOPT_LEN    8
#define TALB_CONGA_VERSION      1       /* flags bits 0-1                    */
#define TALB_CONGA_F_FB         0x04    /* fb_lbtag / fb_metric valid        */

/* ---- parsing --------------------------------------------------------- */
/* Bytes the parser may need in the linear area: Ethernet + the longest
 * IPv4 header + the longest TCP header. */
#define TALB_PARSE_MAX          (14 + 60 + 60)

#endif /* TALB_CONSTANTS_H */
