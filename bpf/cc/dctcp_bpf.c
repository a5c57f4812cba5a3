/* SPDX-License-Identifier: GPL-2.0 */
/*
 * dctcp_bpf.c - DCTCP (Alizadeh et al., SIGCOMM 2010; RFC 8257) as a BPF
 * TCP congestion control (struct_ops tcp_congestion_ops), for kernels
 * built without the tcp_dctcp module. Registered under the name
 * "dctcp-bpf" while a run asks for `--tcp-cc dctcp-bpf`, unregistered
 * after it (datapath/tcp_cc.py); docs/experiments.md "Regime".
 *
 * What it does, as net/ipv4/tcp_dctcp.c (the kernel's selftest
 * tools/testing/selftests/bpf/progs/bpf_dctcp.c showed the shape):
 *   - alpha: a moving average (gain g = 1/16) of the fraction of bytes
 *     whose ACKs carried ECE, updated once per window of data;
 *   - on ECE (the first per window, TCP's CWR logic): ssthresh and cwnd
 *     become cwnd * (1 - alpha / 2);
 *   - on loss: half the window, as Reno (one reduction per RTT);
 *   - the receiver echoes CE exactly (DCTCP's two-state machine): an ACK
 *     goes at once whenever the CE state changes, so the sender sees the
 *     fraction of marked bytes, not one ECE per window as RFC 3168 does.
 *   - window growth: Reno's (the kernel's tcp_reno_cong_avoid, a kfunc).
 * TCP_CONG_NEEDS_ECN makes the socket negotiate ECN and send ECT(0)
 * whatever net.ipv4.tcp_ecn says.
 *
 * Built with clang -target bpf against the running kernel's BTF
 * (vmlinux.h, made by `bpftool btf dump` at build time: never committed,
 * it is the running kernel's), loaded by `bpftool struct_ops register`.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char _license[] SEC("license") = "GPL";

/* include/net/tcp.h and include/net/inet_connection_sock.h (macros, so
 * not in BTF) */
#define TCP_CONG_NEEDS_ECN      0x2
#define TCP_ECN_DEMAND_CWR      4
/* DCTCP's fixed point: alpha 1.0 = 1024 */
#define DCTCP_MAX_ALPHA         1024U
#define DCTCP_ALPHA_BITS        10
/* the estimation gain g = 1 / 2^4 (tcp_dctcp.c's default) */
#define DCTCP_SHIFT_G           4
/* cwnd never below two segments (RFC 5681) */
#define DCTCP_MIN_CWND          2U

struct dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
};

static __always_inline struct tcp_sock *tcp_of(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *icsk_of(struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct dctcp *dctcp_of(struct sock *sk)
{
	return (struct dctcp *)icsk_of(sk)->icsk_ca_priv;
}

static __always_inline __u32 max_u32(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

/* seq1 before seq2, modulo 2^32 */
static __always_inline int seq_before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

/* A new observation window: from what is sent now. */
static __always_inline void dctcp_window_reset(const struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = dctcp_of(sk);

	ca->prior_rcv_nxt = tp->rcv_nxt;
	/* start cautious: alpha 1 (tcp_dctcp.c's dctcp_alpha_on_init) */
	ca->alpha = DCTCP_MAX_ALPHA;
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	dctcp_window_reset(tp, ca);
}

/* ECE seen (TCP enters CWR): cwnd * (1 - alpha / 2). */
SEC("struct_ops")
__u32 BPF_PROG(dctcp_bpf_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = dctcp_of(sk);
	__u32 cwnd = tp->snd_cwnd;

	ca->loss_cwnd = cwnd;
	return max_u32(cwnd - ((cwnd * ca->alpha) >> (DCTCP_ALPHA_BITS + 1)), DCTCP_MIN_CWND);
}

/* Every ACK: at the end of a window, alpha <- (1 - g) alpha + g F, F the
 * fraction of the window's delivered segments that were CE-marked. */
SEC("struct_ops")
void BPF_PROG(dctcp_bpf_update_alpha, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = dctcp_of(sk);
	__u32 delivered_ce, delivered, alpha, decay;

	if (seq_before(tp->snd_una, ca->next_seq))
		return;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;
	decay = alpha >> DCTCP_SHIFT_G;
	/* min_not_zero: a small alpha still decays to 0 */
	alpha -= decay ? min_u32(alpha, decay) : alpha;
	if (delivered_ce) {
		delivered = max_u32(1U, tp->delivered - ca->old_delivered);
		delivered_ce <<= (DCTCP_ALPHA_BITS - DCTCP_SHIFT_G);
		alpha = min_u32(alpha + delivered_ce / delivered, DCTCP_MAX_ALPHA);
	}
	ca->alpha = alpha;
	dctcp_window_reset(tp, ca);
}

static __always_inline void dctcp_react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_of(sk);
	struct dctcp *ca = dctcp_of(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = max_u32(tp->snd_cwnd >> 1U, DCTCP_MIN_CWND);
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_set_state, struct sock *sk, __u8 new_state)
{
	/* a loss: once per recovery (an RTO comes as CA_EVENT_LOSS) */
	if (new_state == TCP_CA_Recovery &&
	    new_state != BPF_CORE_READ_BITFIELD(icsk_of(sk), icsk_ca_state))
		dctcp_react_to_loss(sk);
}

/* The receiver's CE echo: ECE on every ACK while the last data segment
 * was CE; an immediate ACK when that state changes (a delayed ACK of the
 * old state is sent first, with the old state). */
static __always_inline void dctcp_ece_demand(struct sock *sk, __u32 ce_state)
{
	struct tcp_sock *tp = tcp_of(sk);

	if (ce_state == 1)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

static __always_inline void dctcp_ce_update(struct sock *sk, enum tcp_ca_event ev,
					    struct dctcp *ca)
{
	__u32 ce = ev == CA_EVENT_ECN_IS_CE ? 1 : 0;

	if (ca->ce_state != ce) {
		if (icsk_of(sk)->icsk_ack.pending & ICSK_ACK_TIMER) {
			dctcp_ece_demand(sk, ca->ce_state);
			bpf_tcp_send_ack(sk, ca->prior_rcv_nxt);
		}
		icsk_of(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tcp_of(sk)->rcv_nxt;
	ca->ce_state = ce;
	dctcp_ece_demand(sk, ce);
}

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct dctcp *ca = dctcp_of(sk);

	if (ev == CA_EVENT_ECN_IS_CE || ev == CA_EVENT_ECN_NO_CE)
		dctcp_ce_update(sk, ev, ca);
	else if (ev == CA_EVENT_LOSS)
		dctcp_react_to_loss(sk);
}

SEC("struct_ops")
__u32 BPF_PROG(dctcp_bpf_undo_cwnd, struct sock *sk)
{
	return max_u32(tcp_of(sk)->snd_cwnd, dctcp_of(sk)->loss_cwnd);
}

extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;

SEC("struct_ops")
void BPF_PROG(dctcp_bpf_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

/* The map's name (dctcp_bpf) is what `bpftool struct_ops unregister`
 * takes; .name what sockets and sysctls ask for. */
SEC(".struct_ops")
struct tcp_congestion_ops dctcp_bpf = {
	.init           = (void *)dctcp_bpf_init,
	.in_ack_event   = (void *)dctcp_bpf_update_alpha,
	.cwnd_event     = (void *)dctcp_bpf_cwnd_event,
	.ssthresh       = (void *)dctcp_bpf_ssthresh,
	.cong_avoid     = (void *)dctcp_bpf_cong_avoid,
	.undo_cwnd      = (void *)dctcp_bpf_undo_cwnd,
	.set_state      = (void *)dctcp_bpf_set_state,
	.flags          = TCP_CONG_NEEDS_ECN,
	.name           = "dctcp_bpf",
};
