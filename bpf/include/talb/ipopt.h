/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/ipopt.h - an IPv4 option in or out of the packet, right after the
 * 20-byte base header (the "encap" header of Katran's lib/bpf layout): the
 * one place that edits the IPv4 header of a TC skb.
 *
 *   ipopt_push()     open room after the base header, write the option:
 *                    IHL + len/4, total length + len
 *   ipopt_strip()    remove the len bytes after the base header (the first
 *                    option): IHL - len/4, total length - len
 *   ipopt_store16()  rewrite one 16-bit word of the first option
 *
 * The IPv4 checksum is fixed incrementally (RFC 1624), never recomputed:
 * bpf_csum_diff of the old first word (version/IHL, TOS, total length)
 * and the option bytes against the new first word, then
 * bpf_l3_csum_replace with that difference. The room opens or closes with
 * bpf_skb_adjust_room(+/-len, BPF_ADJ_ROOM_NET), which moves the base
 * header (and the Ethernet header before it) and leaves what follows the
 * option untouched: a second option (TaLB's behind CONGA's) stays as it
 * was.
 *
 * The same three for an XDP frame (switch_xdp.c) are in talb/ipopt_xdp.h,
 * chosen by TALB_CTX_XDP (talb/ctx.h).
 *
 * Users: the last hop's TaLB strip and CONGA's push and strip (switch_tc.c);
 * the sending host writes its whole 32-byte header at once instead
 * (host_tc.c, host_tag.h host_build_l3).
 *
 * Offsets assume an untagged Ethernet frame (the fabric's; parsing_helpers.h
 * passes anything else to the stack before this is reached).
 */
#ifndef TALB_IPOPT_H
#define TALB_IPOPT_H

#include <uapi/linux/if_ether.h>
#include <uapi/linux/ip.h>

#include "talb/constants.h"     /* TALB_IP_BASE_LEN, the options' lengths */

/* Where the IPv4 header, its checksum and its first option start. */
#define TALB_L3_OFF             sizeof(struct ethhdr)
#define TALB_L3_CSUM_OFF        (TALB_L3_OFF + offsetof(struct iphdr, check))
#define TALB_L3_OPT_OFF         (TALB_L3_OFF + TALB_IP_BASE_LEN)
#define TALB_IP_IHL_MAX         15      /* 4 bits: 60 bytes of header */

/* The longest option pushed or stripped: TaLB's (CONGA's is 8). */
#define TALB_OPT_EDIT_MAX       TALB_IPOPT_LEN
_Static_assert(TALB_CONGA_IPOPT_LEN <= TALB_OPT_EDIT_MAX && TALB_CONGA_IPOPT_LEN % 4 == 0 &&
	       TALB_IPOPT_LEN % 4 == 0, "options edited in whole 32-bit words");

/* ipopt_push / ipopt_strip results */
#define TALB_OPT_DONE           0
#define TALB_OPT_UNCHANGED      (-1)    /* the packet is as it was */
#define TALB_OPT_BROKEN         (-2)    /* room opened or closed, header not
					   rewritten: the caller drops it */

/* The first word of the IPv4 header with IHL and total length moved by
 * `delta` bytes (a multiple of 4; the caller checked the IHL's room). */
static __always_inline void ipopt_word0_move(__u32 *w, int delta)
{
	__u8 *b = (__u8 *)w;

	b[0] += delta / 4;                                  /* IHL, low nibble */
	*(__be16 *)&b[2] = bpf_htons(bpf_ntohs(*(__be16 *)&b[2]) + delta);
}

#ifndef TALB_CTX_XDP      /* the XDP frame's: talb/ipopt_xdp.h */

/* Push the `len` bytes at `opt` (a whole option list entry, len a
 * constant multiple of 4) right after the base header, in front of any
 * other option. TALB_OPT_UNCHANGED when there is no room (IHL would pass
 * 15) or the room cannot be opened; TALB_OPT_BROKEN when the room is open
 * but the header could not be written. */
static __always_inline int ipopt_push(struct __sk_buff *skb, const void *opt, __u32 len)
{
	__u32 from[1], to[1 + TALB_OPT_EDIT_MAX / 4];
	__s64 diff;

	if (len == 0 || len % 4 || len > TALB_OPT_EDIT_MAX)   /* folds away */
		return TALB_OPT_UNCHANGED;
	if (bpf_skb_load_bytes(skb, TALB_L3_OFF, from, sizeof(from)))
		return TALB_OPT_UNCHANGED;
	to[0] = from[0];
	if ((((__u8 *)to)[0] & 0x0F) + len / 4 > TALB_IP_IHL_MAX)
		return TALB_OPT_UNCHANGED;
	ipopt_word0_move(&to[0], len);
	__builtin_memcpy(&to[1], opt, len);
	/* the header's sum: minus the old first word, plus the new one and
	 * the option */
	diff = bpf_csum_diff(from, sizeof(from), to, 4 + len, 0);
	if (diff < 0)
		return TALB_OPT_UNCHANGED;
	if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_NET, 0))
		return TALB_OPT_UNCHANGED;
	if (bpf_skb_store_bytes(skb, TALB_L3_OFF, to, 4, 0) ||
	    bpf_skb_store_bytes(skb, TALB_L3_OPT_OFF, &to[1], len, 0))
		return TALB_OPT_BROKEN;
	if (bpf_l3_csum_replace(skb, TALB_L3_CSUM_OFF, 0, diff, 0))
		return TALB_OPT_BROKEN;
	return TALB_OPT_DONE;
}

/* Remove the `len` bytes right after the base header (the first option,
 * len a constant multiple of 4: the caller knows which option is first).
 * TALB_OPT_UNCHANGED when the header has fewer option bytes or the room
 * cannot be closed; TALB_OPT_BROKEN when it is closed but the header could
 * not be rewritten. The caller drops the packet on either (an option it
 * must remove is still there, or the header is wrong). */
static __always_inline int ipopt_strip(struct __sk_buff *skb, __u32 len)
{
	__u32 from[1 + TALB_OPT_EDIT_MAX / 4], to[1];
	__s64 diff;

	if (len == 0 || len % 4 || len > TALB_OPT_EDIT_MAX)   /* folds away */
		return TALB_OPT_UNCHANGED;
	/* the first word and the option, as they are */
	if (bpf_skb_load_bytes(skb, TALB_L3_OFF, from, 4) ||
	    bpf_skb_load_bytes(skb, TALB_L3_OPT_OFF, &from[1], len))
		return TALB_OPT_UNCHANGED;
	to[0] = from[0];
	if ((((__u8 *)to)[0] & 0x0F) < (TALB_IP_BASE_LEN + len) / 4)
		return TALB_OPT_UNCHANGED;
	ipopt_word0_move(&to[0], -(int)len);
	diff = bpf_csum_diff(from, 4 + len, to, sizeof(to), 0);
	if (diff < 0)
		return TALB_OPT_UNCHANGED;
	if (bpf_skb_adjust_room(skb, -(int)len, BPF_ADJ_ROOM_NET, 0))
		return TALB_OPT_UNCHANGED;
	if (bpf_skb_store_bytes(skb, TALB_L3_OFF, to, sizeof(to), 0))
		return TALB_OPT_BROKEN;
	if (bpf_l3_csum_replace(skb, TALB_L3_CSUM_OFF, 0, diff, 0))
		return TALB_OPT_BROKEN;
	return TALB_OPT_DONE;
}

/* The 16-bit word at `off` (even) from the start of the first option goes
 * from `old` to `new` (both as on the wire): checksum first, then the
 * bytes. 0 on success. */
static __always_inline int ipopt_store16(struct __sk_buff *skb, __u32 off,
					 __be16 old, __be16 new)
{
	if (bpf_l3_csum_replace(skb, TALB_L3_CSUM_OFF, old, new, sizeof(new)))
		return -1;
	return bpf_skb_store_bytes(skb, TALB_L3_OPT_OFF + off, &new, sizeof(new), 0);
}

#else
#include "talb/ipopt_xdp.h"
#endif /* TALB_CTX_XDP */

#endif /* TALB_IPOPT_H */
