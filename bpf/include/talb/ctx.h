/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/ctx.h - the packet context of a switch entry point: one decision
 * core, two entry points, in the way of Cilium's overloadable
 * bpf/include/bpf/ctx/{skb,xdp}.h. The entry logic (switch_tc.c) is
 * written against `struct __ctx_buff` and the ctx_*() accessors below;
 * the TC build (the default) maps them onto the skb, the XDP build
 * (switch_xdp.c: TALB_CTX_XDP defined before any include) onto xdp_md.
 *
 *   ctx_ingress_ifindex  the arrival device
 *   ctx_len              bytes of the packet (as port_stats count them)
 *   ctx_data/_data_end   the packet's bytes the parsers may read
 *   ctx_pull_headers     make the headers readable (TC: pull into the
 *                        linear area; XDP: a frame is one buffer)
 *   ctx_set_priority     the band's HTB classid (XDP: no qdisc, nothing)
 *   ctx_owned            still charged to a sending socket (XDP: never --
 *                        veth hands XDP a frame, the skb and its socket
 *                        are let go before the redirect)
 *   ctx_clone_redirect   send an unowned copy (XDP: never reached)
 *   ctx_redirect         out of ifindex: TC_ACT_REDIRECT / XDP_REDIRECT
 *   CTX_ACT_OK/_DROP     to the stack (the bridge) / drop
 *
 * What XDP cannot do (docs/architecture.md "XDP entry point"): no egress
 * qdisc on the redirect path (veth's ndo_xdp_xmit puts the frame straight
 * on the peer's ring), so no link shaping, no queues, no priority bands,
 * and nothing that reads a queue.
 */
#ifndef TALB_CTX_H
#define TALB_CTX_H

#ifdef TALB_CTX_XDP

#define __ctx_buff      xdp_md
#define CTX_ACT_OK      XDP_PASS
#define CTX_ACT_DROP    XDP_DROP

static __always_inline __u32 ctx_ingress_ifindex(const struct xdp_md *ctx)
{
	return ctx->ingress_ifindex;
}

static __always_inline void *ctx_data(const struct xdp_md *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *ctx_data_end(const struct xdp_md *ctx)
{
	return (void *)(long)ctx->data_end;
}

static __always_inline __u32 ctx_len(const struct xdp_md *ctx)
{
	return ctx->data_end - ctx->data;
}

static __always_inline void ctx_pull_headers(struct xdp_md *ctx)
{
}

static __always_inline void ctx_set_priority(struct xdp_md *ctx, __u32 priority)
{
}

static __always_inline int ctx_owned(const struct xdp_md *ctx)
{
	return 0;
}

static __always_inline int ctx_clone_redirect(struct xdp_md *ctx, __u32 ifindex)
{
	return -1;
}

/* bpf_redirect by ifindex: since Linux 5.6 it takes the same bulk queue as
 * a devmap (no map to keep in step with the ports). */
static __always_inline int ctx_redirect(struct xdp_md *ctx, __u32 ifindex)
{
	return bpf_redirect(ifindex, 0);
}

#else /* TC */

#include "talb/skb.h"

#define __ctx_buff      __sk_buff
#define CTX_ACT_OK      TC_ACT_OK
#define CTX_ACT_DROP    TC_ACT_SHOT

static __always_inline __u32 ctx_ingress_ifindex(const struct __sk_buff *ctx)
{
	return ctx->ifindex;    /* at ingress: the arrival device */
}

static __always_inline void *ctx_data(const struct __sk_buff *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *ctx_data_end(const struct __sk_buff *ctx)
{
	return (void *)(long)ctx->data_end;
}

static __always_inline __u32 ctx_len(const struct __sk_buff *ctx)
{
	return ctx->len;
}

static __always_inline void ctx_pull_headers(struct __sk_buff *ctx)
{
	talb_pull_headers(ctx);
}

static __always_inline void ctx_set_priority(struct __sk_buff *ctx, __u32 priority)
{
	ctx->priority = priority;
}

static __always_inline int ctx_owned(const struct __sk_buff *ctx)
{
	return ctx->sk != 0;
}

static __always_inline int ctx_clone_redirect(struct __sk_buff *ctx, __u32 ifindex)
{
	return bpf_clone_redirect(ctx, ifindex, 0);
}

static __always_inline int ctx_redirect(struct __sk_buff *ctx, __u32 ifindex)
{
	return bpf_redirect(ifindex, 0);
}

#endif /* TALB_CTX_XDP */

#endif /* TALB_CTX_H */
