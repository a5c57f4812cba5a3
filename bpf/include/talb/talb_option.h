/* The TaLB header on the wire: a 12-byte IPv4 option (docs/design.md §4).
 *
 * The paper's P4 metadata header carries tensor_id (32 bits), tensor_layer (8)
 * and tensor_len (16). We carry the same fields, plus a packet index and a
 * LAST flag, as an IPv4 option so that every tool (tcpdump, Wireshark, scapy,
 * the kernel) still decodes IP and TCP. Pushed by the sending host's TC egress
 * program right after the 20-byte base header (IHL becomes 8); removed by the
 * last switch before the destination host.
 *
 * All fields in network byte order. The Python mirror is common/wire.py
 * (scapy layer) — keep the two in step.
 */
#ifndef TALB_OPTION_H
#define TALB_OPTION_H

#include "talb/constants.h"   /* TALB_IPOPT_* numbers (parsed by Python too) */

struct talb_opt {
	__u8  type;        /* TALB_IPOPT_TYPE */
	__u8  len;         /* TALB_IPOPT_LEN */
	__be32 tensor_id;  /* Snowflake id: timestamp | sequence | worker */
	__u8  layer;       /* 0 = front layer = highest priority */
	__u8  flags;       /* TALB_IPOPT_VERSION (bits 0-1) | TALB_IPOPT_F_LAST (bit 2) */
	__be16 tensor_len; /* tensor length in packets */
	__be16 pkt_idx;    /* index of this packet inside the tensor */
} __attribute__((packed));

#endif /* TALB_OPTION_H */
