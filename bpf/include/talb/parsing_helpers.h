/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/parsing_helpers.h - bounds-checked header parsing, in one place.
 *
 * After xdp-tutorial's parsing_helpers.h: a cursor walks the packet; each
 * parse_*() checks that its whole header lies before data_end, advances the
 * cursor past it, hands back a pointer to it, and returns the next protocol
 * (or the header length) -- or -1 if the header is truncated or invalid.
 * They only read packet memory between data and data_end, never an skb or
 * xdp_md, so TC and XDP entry points share them.
 *
 * Not handled (yet): VLAN tags (the fabric is untagged; a tagged frame is
 * "not IPv4" and goes to the bridge), IPv6.
 */
#ifndef TALB_PARSING_HELPERS_H
#define TALB_PARSING_HELPERS_H

#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

/* <uapi/linux/in.h> and <uapi/linux/tcp.h> pull in the socket headers,
 * which triple bcc's compile time (0.3 s -> 0.9 s per switch); the little
 * needed from them is here. */
#ifndef IPPROTO_TCP
#define IPPROTO_TCP 6
#endif
#ifndef IPPROTO_UDP
#define IPPROTO_UDP 17
#endif

/* TCP header (RFC 9293 section 3.1), up to the urgent pointer. */
struct talb_tcphdr {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res;          /* data offset (32-bit words) in the high nibble */
	__u8 flags;             /* CWR ECE URG ACK PSH RST SYN FIN */
	__be16 window;
	__sum16 check;
	__be16 urg_ptr;
};

struct hdr_cursor {
	void *pos;
};

/* Returns the EtherType in network byte order, or -1. */
static __always_inline int parse_ethhdr(struct hdr_cursor *nh, void *data_end,
					struct ethhdr **ethhdr)
{
	struct ethhdr *eth = nh->pos;

	if ((void *)(eth + 1) > data_end)
		return -1;
	nh->pos = eth + 1;
	*ethhdr = eth;
	return eth->h_proto;
}

/* IPv4 with its options. Returns the L4 protocol number, or -1 on a
 * truncated header, a version other than 4, IHL < 5 or a total length
 * shorter than the header (so also BIG TCP's tot_len 0: the fabric runs
 * with GRO off). The cursor ends after the options (room for the
 * TaLB option parser, DESIGN section 4: the options are
 * [iph + 1, iph + ihl*4)). */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end,
				       struct iphdr **iphdr)
{
	struct iphdr *iph = nh->pos;
	int hdrsize;

	if ((void *)(iph + 1) > data_end)
		return -1;
	if (iph->version != 4)
		return -1;
	hdrsize = iph->ihl * 4;
	if (hdrsize < (int)sizeof(*iph))
		return -1;
	if (bpf_ntohs(iph->tot_len) < hdrsize)
		return -1;
	if (nh->pos + hdrsize > data_end)
		return -1;
	nh->pos += hdrsize;
	*iphdr = iph;
	return iph->protocol;
}

/* TCP with its options. Returns the header length, or -1 on a truncated
 * header or a data offset < 5. */
static __always_inline int parse_tcphdr(struct hdr_cursor *nh, void *data_end,
					struct talb_tcphdr **tcphdr)
{
	struct talb_tcphdr *h = nh->pos;
	int len;

	if ((void *)(h + 1) > data_end)
		return -1;
	len = (h->doff_res >> 4) * 4;
	if (len < (int)sizeof(*h))
		return -1;
	if (nh->pos + len > data_end)
		return -1;
	nh->pos += len;
	*tcphdr = h;
	return len;
}

/* UDP. Returns the payload length from the header, or -1 on a truncated
 * header or a length field shorter than the header. */
static __always_inline int parse_udphdr(struct hdr_cursor *nh, void *data_end,
					struct udphdr **udphdr)
{
	struct udphdr *h = nh->pos;
	int len;

	if ((void *)(h + 1) > data_end)
		return -1;
	nh->pos = h + 1;
	*udphdr = h;
	len = bpf_ntohs(h->len) - (int)sizeof(*h);
	if (len < 0)
		return -1;
	return len;
}

#endif /* TALB_PARSING_HELPERS_H */
