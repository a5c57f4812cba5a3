/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/skb.h - what the TC entry points (switch_tc.c, host_tc.c) do to the
 * skb before parsing: the parse_*() helpers read only between data and
 * data_end, so the headers they may need must be in the linear area.
 */
#ifndef TALB_SKB_H
#define TALB_SKB_H

#include "talb/constants.h"   /* TALB_PARSE_MAX */

/* Pull up to TALB_PARSE_MAX bytes (the whole packet if it is shorter) into
 * the linear area when they are not there yet. bpf_skb_pull_data
 * invalidates packet pointers: read skb->data and skb->data_end after it. */
static __always_inline void talb_pull_headers(struct __sk_buff *skb)
{
	__u32 linear = skb->data_end - skb->data;

	if (linear < TALB_PARSE_MAX && skb->len > linear)
		bpf_skb_pull_data(skb, skb->len < TALB_PARSE_MAX ?
				  skb->len : TALB_PARSE_MAX);
}

#endif /* TALB_SKB_H */
