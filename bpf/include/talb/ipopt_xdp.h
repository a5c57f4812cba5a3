/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/ipopt_xdp.h - talb/ipopt.h's three edits for an XDP frame
 * (switch_xdp.c; included by ipopt.h when TALB_CTX_XDP is defined), with
 * the same contracts and results:
 *
 *   ipopt_push()     bpf_xdp_adjust_head(-len) opens room in front; the
 *                    Ethernet and base IPv4 header (34 bytes) move to the
 *                    new start, the option goes right behind them
 *   ipopt_strip()    the 34 bytes move forward over the first option,
 *                    then bpf_xdp_adjust_head(+len) drops the old start
 *   ipopt_store16()  one 16-bit word of the first option
 *
 * XDP has no bpf_l3_csum_replace: the IPv4 checksum is updated here by
 * the same arithmetic (RFC 1624: ~(~old + diff), folded), from the same
 * bpf_csum_diff of the old first word and option against the new ones.
 *
 * Needs talb/ipopt.h's definitions (it is included from there).
 */
#ifndef TALB_IPOPT_XDP_H
#define TALB_IPOPT_XDP_H

/* Where the IPv4 checksum sits in the first TALB_L3_OPT_OFF bytes. */
#define TALB_L3_HDR_LEN         TALB_L3_OPT_OFF    /* Ethernet + base IPv4: 34 */

/* One's complement sum folded to 16 bits. */
static __always_inline __u16 ipopt_fold(__u64 s)
{
	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	s = (s & 0xFFFF) + (s >> 16);
	return (__u16)s;
}

/* The checksum `check` (as on the wire) after bytes whose sum changed by
 * `diff` (bpf_csum_diff's result): what bpf_l3_csum_replace(skb, off, 0,
 * diff, 0) stores. */
static __always_inline __u16 ipopt_csum_add(__u16 check, __u32 diff)
{
	return (__u16)~ipopt_fold((__u64)(__u16)~check + diff);
}

static __always_inline int ipopt_push(struct xdp_md *ctx, const void *opt, __u32 len)
{
	__u32 from[1], to[1 + TALB_OPT_EDIT_MAX / 4];
	__u8 hdr[TALB_L3_HDR_LEN];
	void *data, *data_end;
	__s64 diff;

	if (len == 0 || len % 4 || len > TALB_OPT_EDIT_MAX)   /* folds away */
		return TALB_OPT_UNCHANGED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + TALB_L3_HDR_LEN > data_end)
		return TALB_OPT_UNCHANGED;
	__builtin_memcpy(hdr, data, TALB_L3_HDR_LEN);
	__builtin_memcpy(from, hdr + TALB_L3_OFF, sizeof(from));
	to[0] = from[0];
	if ((((__u8 *)to)[0] & 0x0F) + len / 4 > TALB_IP_IHL_MAX)
		return TALB_OPT_UNCHANGED;
	ipopt_word0_move(&to[0], len);
	__builtin_memcpy(&to[1], opt, len);
	diff = bpf_csum_diff(from, sizeof(from), to, 4 + len, 0);
	if (diff < 0)
		return TALB_OPT_UNCHANGED;
	__builtin_memcpy(hdr + TALB_L3_OFF, to, 4);
	*(__u16 *)(hdr + TALB_L3_CSUM_OFF) =
		ipopt_csum_add(*(__u16 *)(hdr + TALB_L3_CSUM_OFF), (__u32)diff);
	if (bpf_xdp_adjust_head(ctx, -(int)len))
		return TALB_OPT_UNCHANGED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + TALB_L3_HDR_LEN + len > data_end)
		return TALB_OPT_BROKEN;
	__builtin_memcpy(data, hdr, TALB_L3_HDR_LEN);
	__builtin_memcpy(data + TALB_L3_HDR_LEN, &to[1], len);
	return TALB_OPT_DONE;
}

static __always_inline int ipopt_strip(struct xdp_md *ctx, __u32 len)
{
	__u32 from[1 + TALB_OPT_EDIT_MAX / 4], to[1];
	__u8 hdr[TALB_L3_HDR_LEN];
	void *data, *data_end;
	__s64 diff;

	if (len == 0 || len % 4 || len > TALB_OPT_EDIT_MAX)   /* folds away */
		return TALB_OPT_UNCHANGED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + TALB_L3_HDR_LEN + len > data_end)
		return TALB_OPT_UNCHANGED;
	__builtin_memcpy(hdr, data, TALB_L3_HDR_LEN);
	__builtin_memcpy(from, hdr + TALB_L3_OFF, 4);
	__builtin_memcpy(&from[1], data + TALB_L3_HDR_LEN, len);
	to[0] = from[0];
	if ((((__u8 *)to)[0] & 0x0F) < (TALB_IP_BASE_LEN + len) / 4)
		return TALB_OPT_UNCHANGED;
	ipopt_word0_move(&to[0], -(int)len);
	diff = bpf_csum_diff(from, 4 + len, to, sizeof(to), 0);
	if (diff < 0)
		return TALB_OPT_UNCHANGED;
	__builtin_memcpy(hdr + TALB_L3_OFF, to, 4);
	*(__u16 *)(hdr + TALB_L3_CSUM_OFF) =
		ipopt_csum_add(*(__u16 *)(hdr + TALB_L3_CSUM_OFF), (__u32)diff);
	/* the headers over the option, then the old start goes */
	__builtin_memcpy(data + len, hdr, TALB_L3_HDR_LEN);
	if (bpf_xdp_adjust_head(ctx, (int)len))
		return TALB_OPT_BROKEN;
	return TALB_OPT_DONE;
}

static __always_inline int ipopt_store16(struct xdp_md *ctx, __u32 off,
					 __be16 old, __be16 new)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u16 *check = data + TALB_L3_CSUM_OFF;
	__be16 *word = data + TALB_L3_OPT_OFF + off;

	if ((void *)(word + 1) > data_end || (void *)(check + 1) > data_end)
		return -1;
	*check = (__u16)~ipopt_fold((__u64)(__u16)~*check + (__u16)~old + (__u16)new);
	*word = new;
	return 0;
}

#endif /* TALB_IPOPT_XDP_H */
