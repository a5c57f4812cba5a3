/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/host_constants.h - every number of the sending host's data path
 * (bpf/host_tc.c) that user space needs too.
 *
 * datapath/host_maps.py parses this file with common/c_constants.py's parser (the one
 * source of truth for these values in Python). Same format as
 * talb/constants.h: `#define NAME VALUE`, one per line, VALUE an integer
 * expression of literals and earlier NAMEs.
 */
#ifndef TALB_HOST_CONSTANTS_H
#define TALB_HOST_CONSTANTS_H

/* ---- limits (map sizes) ---------------------------------------------- */
/* Descriptors per flow ring: the tensors of one socket whose bytes may still
 * be (re)transmitted. The library waits (or raises RingOverrunError) before
 * reusing a slot whose tensor is not fully acknowledged. */
#define HOST_RING_SLOTS         32
#define HOST_MAX_TAGGED_FLOWS   1024    /* flow_rings: sockets with a TensorSender */
#define HOST_MAX_FLOWS          16384   /* flow_isn (LRU): connections seen opening */
/* tensor_wire (LRU): tensors whose egress times the host keeps. A `talb run`
 * reads them when its nodes are done; its busiest host sends a few thousand
 * tensors (fig4: 7,875), and the oldest entries (earlier runs) go first.
 * ~90 bytes an entry in the kernel: ~6 MB per host. */
#define HOST_MAX_WIRE_TENSORS   65536
/* sendmsg_rings (LRU): sockets of unmodified processes whose writes the
 * kernel-side tagger (bpf/host_sendmsg.c) registers, in sequence space.
 * Descriptors per ring: writes of one socket whose bytes may still be
 * (re)transmitted; a slot is reused once snd_una has passed its end. */
#define HOST_MAX_SENDMSG_FLOWS  4096
#define HOST_SEQ_RING_SLOTS     32

/* ---- tensor_wire: when a tensor's packets pass TC egress --------------
 * An entry idle for longer than this is another tensor with the same id
 * (Snowflake ids come back after 2^20 ms ~ 17.5 min, workload/snowflake.py):
 * its next packet starts the entry afresh. Far above any gap inside one
 * tensor (TCP's longest RTO backoff is 120 s), far below the id's period. */
#define HOST_WIRE_STALE_NS      (300ULL * 1000 * 1000 * 1000)   /* 300 s */

/* ---- flow_isn value flags (struct host_isn.flags) ---------------------- */
/* The ISN came from our own SYN (active open, connect()). Linux counts the
 * SYN in tcpi_bytes_acked on the active side only (checked on 6.18: 1 after
 * connect(), 0 after accept()), so the library needs this to turn
 * bytes_acked into a stream offset. */
#define HOST_ISN_ACTIVE         (1U << 0)

/* ---- the option's flags byte (docs/design.md §4) ------------------------
 * For user space only (datapath/host_maps.py parses this file alone): the
 * program writes constants.h's TALB_IPOPT_VERSION / TALB_IPOPT_F_LAST, and
 * host_tag.h fails to compile if these differ from them. */
#define HOST_OPT_VERSION        1           /* bits 0-1 */
#define HOST_OPT_F_LAST         (1U << 2)   /* last packet of the tensor */

/* ---- counters (index into the per-CPU `counters` array) ---------------
 * Exactly one is counted per packet the program sees: the first reason
 * that applies, in this order. */
#define HOST_CNT_NOT_TCP                0   /* not IPv4 TCP: ARP, ICMP, UDP, IPv6 */
#define HOST_CNT_MALFORMED              1   /* truncated or inconsistent headers */
#define HOST_CNT_UNTAGGED_FRAGMENT      2   /* IPv4 fragment of a TCP segment    */
#define HOST_CNT_ISN_LEARNED            3   /* our SYN / SYN-ACK: ISN recorded   */
#define HOST_CNT_PURE_ACK               4   /* no payload: ACK, FIN, RST         */
#define HOST_CNT_UNTAGGED_NO_RING       5   /* neither a TensorSender ring nor a
					       sendmsg ring                      */
#define HOST_CNT_UNTAGGED_NO_ISN        6   /* opened before the program was attached */
#define HOST_CNT_UNTAGGED_NO_DESCRIPTOR 7   /* bytes outside every descriptor    */
#define HOST_CNT_UNTAGGED_IP_OPTIONS    8   /* IPv4 options present (IHL > 5)    */
#define HOST_CNT_UNTAGGED_GSO           9   /* GSO skb: the option would be copied
					       to every segment (gso_max_segs 1) */
#define HOST_CNT_PUSH_FAILED            10  /* adjust_room/store failed          */
#define HOST_CNT_TAGGED                 11  /* option pushed (flow_rings: library) */
#define HOST_CNT_TAGGED_SENDMSG         12  /* option pushed (sendmsg_rings: an
					       unmodified process's write)     */
#define HOST_NR_COUNTERS                16

#endif /* TALB_HOST_CONSTANTS_H */
