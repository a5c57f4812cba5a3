/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * switch_xdp.c - the switch data path as an XDP program on every switch
 * port (`talb testbed up --datapath xdp`): the same entry logic and
 * decision core as switch_tc.c, compiled against the XDP context
 * (talb/ctx.h with TALB_CTX_XDP; IPv4 option edits from
 * talb/ipopt_xdp.h). Nothing of the parsing, routing or schemes is
 * repeated here.
 *
 * For line-rate runs and real NICs, where no emulated queue is wanted.
 * Verdicts: XDP_PASS (not ours: the bridge carries it, counted as in TC),
 * XDP_REDIRECT (bpf_redirect to the egress port: veth's ndo_xdp_xmit puts
 * the frame on the peer's ring, past any qdisc), XDP_DROP (a TaLB option
 * that cannot be stripped at a host edge; CONGA's half-written option).
 *
 * What it cannot do, and what the testbed refuses for it (datapath/xdp.py,
 * docs/architecture.md "XDP entry point"):
 *   - no egress qdisc: no link shaping (HTB), no queues, no priority bands
 *     (the band mark, skb->priority, has no field in an xdp_md: dropped);
 *   - so no scheme that reads a queue: DRILL (its estimate models the HTB
 *     queue of the port), TaLB with DRILL as its fallback, and the agent's
 *     measured queueing delay (pcm_delay measured reads qdisc backlog);
 *   - no first-hop release: nothing to release -- veth hands the program a
 *     frame and lets the skb (and the sender's socket) go when it is
 *     redirected.
 * ECMP, RPS, LetFlow, CONGA (its DRE counts bytes sent, in the program)
 * and TaLB (tensor table in the program; PCM from the agent's counters
 * and the M/D/1 model) run unchanged.
 *
 * The redirect target must accept XDP frames: on veth, the peer needs an
 * XDP program of its own (or NAPI) -- every switch port has this one, and
 * each host's interface gets talb_host_xdp (XDP_PASS, host_xdp.c).
 *
 * Loaded by datapath/xdp.py (BPF_PROG_TYPE_XDP).
 */
#define TALB_CTX_XDP 1
/* the entry point's name as the loader and `ip link` show it */
#define talb_switch_tc talb_switch_xdp

#include "switch_tc.c"
