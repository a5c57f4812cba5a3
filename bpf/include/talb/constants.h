/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/constants.h - every number shared by the data path and user space.
 *
 * agent/maps.py parses this file (it is the single source of truth for
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
#define TALB_MAX_GROUP_PORTS    8       /* candidate egress ports per group  */
#define TALB_MAX_ROUTES         4096    /* fwd: destination IPv4 addresses   */
#define TALB_MAX_GROUPS         1024    /* groups: distinct port sets        */

/* ---- load-balancing schemes (talb_config.scheme) ----------------------
 * Only ECMP is implemented in the data path so far; a configured scheme
 * that is not implemented falls back to ECMP and counts
 * CNT_SCHEME_FALLBACK (user space refuses to set one: agent/control.py). */
#define TALB_SCHEME_ECMP        0
#define TALB_SCHEME_RPS         1
#define TALB_SCHEME_LETFLOW     2
#define TALB_SCHEME_DRILL       3
#define TALB_SCHEME_CONGA       4
#define TALB_SCHEME_TALB        5
#define TALB_NR_SCHEMES         6

/* ---- port flags (struct port_info.flags) ------------------------------ */
#define PORT_HOST               (1U << 0)  /* faces a host (last hop)        */
#define PORT_UP                 (1U << 1)  /* may be used as an egress port  */

/* ---- config flags (struct talb_config.flags) -------------------------- */
/* Release the sending socket at the first hop: where skb->sk is set, send
 * an unowned clone and drop the original (DESIGN section 3). The loader
 * sets it by default. */
#define CFG_RELEASE_SK          (1U << 0)

/* ---- counters (index into the per-CPU `counters` array) ---------------
 * CNT_PASS_*: packet returned to the stack (TC_ACT_OK: the bridge carries
 * it), by reason. Exactly one CNT_PASS_*, CNT_REDIRECTED or CNT_RELEASED
 * is counted per packet the program sees. The others are informational. */
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
#define CNT_IP_OPTIONS          11  /* IPv4 header with options (IHL > 5)    */
#define CNT_SCHEME_FALLBACK     12  /* configured scheme not implemented     */
#define CNT_DECISION_SINGLE     13  /* group of one port: no choice to make  */
#define CNT_DECISION_BASE       16  /* + scheme id: multipath decisions      */
#define CNT_DECISION_ECMP       (CNT_DECISION_BASE + TALB_SCHEME_ECMP)
#define CNT_DECISION_RPS        (CNT_DECISION_BASE + TALB_SCHEME_RPS)
#define CNT_DECISION_LETFLOW    (CNT_DECISION_BASE + TALB_SCHEME_LETFLOW)
#define CNT_DECISION_DRILL      (CNT_DECISION_BASE + TALB_SCHEME_DRILL)
#define CNT_DECISION_CONGA      (CNT_DECISION_BASE + TALB_SCHEME_CONGA)
#define CNT_DECISION_TALB       (CNT_DECISION_BASE + TALB_SCHEME_TALB)
#define TALB_NR_COUNTERS        32

/* ---- wire format (DESIGN section 4) -- not parsed yet ----------------- */
#define TALB_IPOPT_TYPE         0x9E    /* copied=1, class 0, number 30     */
#define TALB_IPOPT_LEN          12

/* ---- parsing --------------------------------------------------------- */
/* Bytes the parser may need in the linear area: Ethernet + the longest
 * IPv4 header + the longest TCP header. */
#define TALB_PARSE_MAX          (14 + 60 + 60)

#endif /* TALB_CONSTANTS_H */
