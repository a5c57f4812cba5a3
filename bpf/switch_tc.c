/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * switch_tc.c - the switch data path at TC ingress (clsact, direct-action)
 * of every switch port. Thin: parse, look up, decide, count, act; the logic
 * lives in bpf/include/talb/ (decision.h and the headers it includes).
 *
 * Verdicts:
 *   TC_ACT_OK        not ours (ARP, IPv6, unknown destination, malformed,
 *                    no usable egress): the bridge carries it. Counted by
 *                    reason (CNT_PASS_*).
 *   TC_ACT_REDIRECT  bpf_redirect(egress, 0): out of the egress device,
 *                    through its qdisc (the emulated link and its queue).
 *   TC_ACT_SHOT      first-hop release: skb->sk is set (the packet is still
 *                    charged to the sender's TCP socket: veth and
 *                    bpf_redirect keep skb->sk), so an unowned clone is sent
 *                    with bpf_clone_redirect and the original freed. Without
 *                    this, TCP Small Queues caps what a flow has in flight
 *                    and no switch queue ever builds (DESIGN section 3).
 *                    Counted as CNT_RELEASED, not as a drop.
 *
 * Loaded by agent/loader.py (bcc, SCHED_CLS), which expands the
 * #include "talb/..." lines into one text first (see talb/maps.h).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>

#include "talb/constants.h"
#include "talb/structs.h"
#include "talb/maps.h"
#include "talb/decision.h"

int talb_switch_tc(struct __sk_buff *skb)
{
	struct talb_pkt pkt = {};
	struct talb_verdict v = {};
	struct port_info *in;
	__u32 ifindex = skb->ifindex;   /* at ingress: the arrival device */
	__u32 linear;
	void *data, *data_end;

	in = ports.lookup(&ifindex);
	if (!in) {
		talb_count(CNT_PASS_UNKNOWN_INGRESS);
		return TC_ACT_OK;
	}
	pkt.ingress_ifindex = ifindex;
	pkt.len = skb->len;
	talb_port_rx(in->port_id, pkt.len);

	/* Headers in the linear area (a no-op for the fabric's packets). */
	linear = skb->data_end - skb->data;
	if (linear < TALB_PARSE_MAX && skb->len > linear)
		bpf_skb_pull_data(skb, skb->len < TALB_PARSE_MAX ?
				  skb->len : TALB_PARSE_MAX);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;

	if (!talb_extract(data, data_end, &pkt, &v) || !talb_decide(&pkt, &v)) {
		talb_count(v.reason);
		return TC_ACT_OK;
	}

	/* room: skb->priority = band(layer) for the egress HTB (DESIGN
	 * section 3); strip the TaLB option on host ports (section 4). */

	if ((v.cfg_flags & CFG_RELEASE_SK) && skb->sk) {
		if (bpf_clone_redirect(skb, v.egress_ifindex, 0) == 0) {
			talb_count(CNT_RELEASED);
			talb_port_tx(v.egress_port_id, pkt.len);
			return TC_ACT_SHOT;
		}
		/* Send the owned original rather than lose the packet. */
		talb_count(CNT_CLONE_FAIL);
	}
	talb_count(CNT_REDIRECTED);
	talb_port_tx(v.egress_port_id, pkt.len);
	return bpf_redirect(v.egress_ifindex, 0);
}
