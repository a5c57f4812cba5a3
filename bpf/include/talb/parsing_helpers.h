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
 * parse_talb_option() walks the IPv4 options for the TaLB option (docs/design.md
 * §4): the one place that reads option bytes.
 *
 * Not handled (yet): VLAN tags (the fabric is untagged; a tagged frame is
 * "not IPv4" and goes to the bridge), IPv6.
 */
#ifndef TALB_PARSING_HELPERS_H
#define TALB_PARSING_HELPERS_H

#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>
#include <uapi/linux/udp.h>

#include "talb/constants.h"
#include "talb/talb_option.h"
#include "talb/conga_option.h"

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
 * TaLB option parser, docs/design.md §4: the options are
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

#define TALB_IP_MF      0x2000  /* more fragments */
#define TALB_IP_OFFSET  0x1FFF  /* fragment offset mask */

/* Any fragment of a datagram, the first one too (more fragments, or an
 * offset). For a header parse_iphdr accepted. */
static __always_inline int ipv4_is_fragment(const struct iphdr *iph)
{
	return (iph->frag_off & bpf_htons(TALB_IP_MF | TALB_IP_OFFSET)) != 0;
}

/* Verifier economy. A branch comparing two values narrows the verifier's
 * ranges of both, and every narrowed range is a state of its own through
 * the rest of the program. talb_lt(a, b) branches on a sign bit computed
 * out of clang's sight (TALB_OPAQUE: an empty asm, no instruction), so the
 * verifier narrows that 0/1 value, not a or b. Used for the TaLB
 * decision's comparisons with the group's port count (measured: 645k ->
 * 244k instructions verified; ~275k with done entries, of the verifier's
 * 1M). Not in the option walk below: there the comparisons with the
 * option length are what bound the walk for the verifier (with talb_lt it
 * walks all 40 steps on every path and gives up). */
#define TALB_OPAQUE(x) asm volatile("" : "+r"(x))

/* An offset into the IPv4 options (< TALB_IPOPT_MAX) masked for the verifier. */
#define TALB_IPOPT_OFF_MASK     63

static __always_inline __u64 talb_lt(__u64 a, __u64 b)   /* a, b < 2^32 */
{
	__s64 d = (__s64)a - (__s64)b;

	TALB_OPAQUE(d);
	return (__u64)d >> 63;
}

/* 1 if x != 0, else 0, without a branch (schemes/pick.h: the per-port
 * scans; the option walk below). */
static __always_inline __u32 talb_nonzero(__u32 x)
{
	__u64 v = x;
	__u64 neg = -v;                 /* bit 63 set iff x != 0 */

	TALB_OPAQUE(neg);
	return neg >> 63;
}

/* The TaLB option's fields, host byte order. */
struct talb_opt_fields {
	__u32 tensor_id;
	__u16 tensor_len;
	__u16 pkt_idx;
	__u8 layer;
	__u8 flags;             /* version | TALB_IPOPT_F_LAST */
	__u8 offset;            /* from the end of the base header: 0 = first */
	__u8 seen;              /* an option of type TALB_IPOPT_TYPE was met */
	__u8 strippable;        /* type 0x9E, length 12, the only option (IHL
				   8, as hosts send it): what adjust_room(-12,
				   NET) removes, leaving a plain IPv4 header */
};

/* Walk the options of an IPv4 header (already checked by parse_iphdr: IHL
 * >= 5 and the whole header before data_end) for the TaLB option.
 *
 * Returns 0 when there is none, CNT_OPT_TAGGED for a valid one (fields in
 * *o), or the CNT_OPT_* reason why the option list is unusable:
 *   CNT_OPT_TRUNCATED   type 0x9E without room for its length byte, or
 *                       length 12 running past IHL
 *   CNT_OPT_BAD_LEN     type 0x9E with a length other than 12
 *   CNT_OPT_BAD_VERSION version bits != TALB_IPOPT_VERSION
 *   CNT_OPT_ZERO_LEN    tensor_len 0
 *   CNT_OPT_OVERRUN     another option before ours with a length < 2 or
 *                       past IHL: the walk cannot go on
 * RFC 791 rules: EOL ends the list, NOP is one byte, every other option is
 * type, length (>= 2, counting both), data. Other options before or after
 * ours are skipped and left untouched (the last hop removes only ours). The
 * first 0x9E decides; a second one is not looked at. At most
 * TALB_IPOPT_MAX option bytes, so at most that many steps. */
static __always_inline int parse_talb_option(struct iphdr *iph, void *data_end,
					     struct talb_opt_fields *o)
{
	__u8 *opts = (__u8 *)(iph + 1);
	__u32 optlen, off = 0;
	int i;

	if (iph->ihl * 4 <= TALB_IP_BASE_LEN)
		return 0;
	optlen = iph->ihl * 4 - TALB_IP_BASE_LEN;   /* IHL <= 15: <= TALB_IPOPT_MAX */
	/* Verifier economy: one path goes on per step. A NOP's step (1) and
	 * another option's (its length) are merged without a branch, and an
	 * option that cannot be skipped is one exit; with a branch per kind
	 * the verifier kept a state per (step, offset) pair: 150k of the main
	 * program's 349k instructions (bench/verifier_states.py --hot). */
	for (i = 0; i < TALB_IPOPT_MAX; i++) {
		struct talb_opt *t;
		__u8 *p, type, len;
		__u64 nop, bad;
		__s64 step;

		if (off >= optlen)
			return 0;
		/* the mask changes nothing (off < optlen <= 40) but bounds the
		 * copy clang indexes with for the verifier */
		off &= TALB_IPOPT_OFF_MASK;
		p = opts + off;
		if ((void *)(p + 1) > data_end)
			return CNT_OPT_OVERRUN;    /* cannot happen: header checked */
		type = p[0];
		if (type == TALB_IPOPT_EOL)
			return 0;
		nop = talb_nonzero(type ^ TALB_IPOPT_NOP) ^ 1;
		if (type == TALB_IPOPT_TYPE) {
			o->seen = 1;
			if (off + 2 > optlen || (void *)(p + 2) > data_end)
				return CNT_OPT_TRUNCATED;
			len = p[1];
			if (len != TALB_IPOPT_LEN)
				return CNT_OPT_BAD_LEN;
			t = (struct talb_opt *)p;
			if (off + TALB_IPOPT_LEN > optlen || (void *)(t + 1) > data_end)
				return CNT_OPT_TRUNCATED;
			o->strippable = off == 0 && optlen == TALB_IPOPT_LEN;
			o->offset = off;
			o->tensor_id = bpf_ntohl(t->tensor_id);
			o->layer = t->layer;
			o->flags = t->flags;
			o->tensor_len = bpf_ntohs(t->tensor_len);
			o->pkt_idx = bpf_ntohs(t->pkt_idx);
			if ((t->flags & TALB_IPOPT_VERSION_MASK) != TALB_IPOPT_VERSION)
				return CNT_OPT_BAD_VERSION;
			if (o->tensor_len == 0)
				return CNT_OPT_ZERO_LEN;
			return CNT_OPT_TAGGED;
		}
		/* a NOP in the packet's last byte ends the header (checked
		 * whole by parse_iphdr): nothing follows */
		if ((void *)(p + 2) > data_end)
			return nop ? 0 : CNT_OPT_OVERRUN;
		len = p[1];
		/* another option: type, length >= 2, within the header */
		bad = (talb_lt(optlen, off + 2) | talb_lt(len, 2) | talb_lt(optlen, off + len)) &
		      (nop ^ 1);
		if (bad)
			return CNT_OPT_OVERRUN;
		step = (__s64)len - (__s64)(((__u64)len - 1) & -nop);    /* NOP: 1, else len */
		TALB_OPAQUE(step);
		off += step;
	}
	return 0;
}

/* 1 if the TaLB option is there as a host sends it -- type 0x9E, length
 * 12, the only option (IHL 8) -- so the last hop may strip it
 * (parse_talb_option's `strippable`, without the walk: for a header whose
 * first option was just removed), else 0. */
static __always_inline int parse_strippable_talb_option(struct iphdr *iph, void *data_end)
{
	struct talb_opt *t = (struct talb_opt *)(iph + 1);

	return (void *)(t + 1) <= data_end && iph->ihl * 4 == TALB_IP_BASE_LEN + TALB_IPOPT_LEN &&
	       t->type == TALB_IPOPT_TYPE && t->len == TALB_IPOPT_LEN;
}

/* CONGA's option, which is always the first one when present (the source
 * leaf pushes it right after the base header): 1 with its bytes in *o,
 * else 0 (IHL too small, another first option, or a bad length/version). */
static __always_inline int parse_conga_option(struct iphdr *iph, void *data_end,
					      struct conga_opt *o)
{
	struct conga_opt *c = (struct conga_opt *)(iph + 1);

	if (iph->ihl * 4 < TALB_IP_BASE_LEN + TALB_CONGA_IPOPT_LEN)
		return 0;
	if ((void *)(c + 1) > data_end)
		return 0;
	if (c->type != TALB_CONGA_IPOPT_TYPE || c->len != TALB_CONGA_IPOPT_LEN ||
	    (c->flags & TALB_IPOPT_VERSION_MASK) != TALB_CONGA_VERSION)
		return 0;
	*o = *c;
	return 1;
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
