/* The TaLB header on the wire: a 12-byte IPv4 option (DESIGN §4).
 *
 * The paper's P4 metadata header carries tensor_id (32 bits), tensor_layer (8)
 * and tensor_len (16). We carry the same fields, plus a packet index and a
 * LAST flag, as an IPv4 option so that every tool (tcpdump, Wireshark, scapy,
 * the kernel) still decodes IP and TCP. Pushed by the sending host's TC egress
 * program right after the 20-byte base header (IHL becomes 8); removed by the
 * last switch before the destination host.
 *
 * All fields in network byte order. The Python mirror is agent/talb_option.py
 * (scapy layer) — keep the two in step.
 */
#ifndef TALB_OPTION_H
#define TALB_OPTION_H

/* copied=1, class 0, number 30: RFC 4727's experimental option number. */
#define TALB_OPT_TYPE        0x9E
#define TALB_OPT_LEN         12
#define TALB_IHL_TAGGED      8          /* 20-byte header + 12-byte option, in 32-bit words */

#define TALB_OPT_VERSION     1
#define TALB_FLAG_VERSION_MASK 0x03     /* bits 0-1 */
#define TALB_FLAG_LAST       0x04       /* bit 2: last packet of the tensor */

struct talb_opt {
	__u8  type;        /* TALB_OPT_TYPE */
	__u8  len;         /* TALB_OPT_LEN */
	__be32 tensor_id;  /* Snowflake id: timestamp | sequence | worker */
	__u8  layer;       /* 0 = front layer = highest priority */
	__u8  flags;       /* version (bits 0-1) | LAST (bit 2) */
	__be16 tensor_len; /* tensor length in packets */
	__be16 pkt_idx;    /* index of this packet inside the tensor */
} __attribute__((packed));

#endif /* TALB_OPTION_H */
