/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * host_xdp.c - XDP_PASS on a host's interface under `--datapath xdp`.
 *
 * A switch port redirects frames into a veth with XDP_REDIRECT; veth
 * delivers those (ndo_xdp_xmit) only when the receiving end runs an XDP
 * program (or has NAPI on, which needs GRO, and the fabric keeps GRO off).
 * Switch ports have switch_xdp.c; a host's end gets this, which passes
 * every frame to the host's stack. Loaded by datapath/xdp.py.
 */
#include <uapi/linux/bpf.h>

int talb_host_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}
