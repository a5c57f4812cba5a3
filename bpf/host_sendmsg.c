/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * host_sendmsg.c - tag the TCP writes of unmodified processes (Open MPI
 * ranks, any TCP client) without a library in the process: a tracing
 * program on the TCP send path (tracepoint tcp:tcp_sendmsg_locked, socket
 * lock held; the call's result from raw_syscalls:sys_exit) registers each application write as one tensor in the host's
 * sendmsg_rings (talb/host_maps.h), in TCP sequence space; the host's TC
 * program (host_tc.c) then tags every segment whose sequence number falls
 * in a registered write, exactly as it tags TensorSender's (host_tag.h).
 *
 * Entry: on a tagged host (its netns inode in sendmsg_hosts) whose selector
 * matches (cgroup v2, tgid, or a port range), the write [write_seq,
 * write_seq + size) gets a Snowflake id (talb/sendmsg_ids.h), len_pkts =
 * ceil(size / mss_cache), a layer from the host's rule
 * (talb/sendmsg_rule.h), and a free ring slot (empty, or snd_una past its
 * end). Registration is at entry: a large write's first segments leave
 * during the call.
 *
 * Ring full (every slot live: snd_una short of each end), a write that
 * starts exactly at the end of the socket's newest tensor, none of whose
 * bytes has been sent yet (snd_nxt at or before its start), extends that
 * tensor (len_pkts recomputed): a run of writes without a pause, the
 * segments not yet built, one tensor. Its packets all leave after the
 * extension, so they carry the grown tensor_len and only the last byte's
 * packet LAST; retransmissions see the same entry. Otherwise the write goes
 * untagged (ring_full). A write that finds a free slot is always a tensor
 * of its own (docs/workload.md, "Tagging unmodified applications").
 *
 * Exit: ret <= 0 clears the descriptor (a merged write: cuts the tensor
 * back to where it ended before). A partial write (0 < ret < size,
 * nonblocking sockets) keeps its descriptor whole and expects its
 * continuation: the socket's next write, if it starts at the first byte
 * not accepted with exactly the bytes left, continues the same tensor;
 * any other write first cuts the open tensor to what was accepted. One
 * application write = one tensor, continued across partial writes
 * (docs/workload.md, "Tagging unmodified applications").
 *
 * TCP_CLOSE (raw tracepoint inet_sock_set_state) deletes the socket's ring and state:
 * a process that dies mid-message leaves no stale ranges.
 *
 * Socket fields are read at offsets from the running kernel's BTF
 * (datapath/btf.py, -D SK_OFF_* / TP_OFF_* / NET_OFF_INUM): bcc compiles
 * against whatever headers are installed, which need not match the kernel.
 *
 * Attach: raw tracepoints. fentry/fexit would be the natural choice, but this
 * kernel refuses tracing programs (EPERM on load) and has no kprobes
 * (CONFIG_KPROBES unset); tcp_sendmsg_locked's own tracepoint sees each
 * call's first copy iteration with the socket locked, and sys_exit gives
 * its result (docs/workload.md). Writes through other paths (sendmmsg,
 * io_uring, splice/sendfile) are not tagged.
 * Loaded by datapath/sendmsg_tagger.py.
 */
#include <uapi/linux/bpf.h>

#include "talb/host_constants.h"
#include "talb/sendmsg_constants.h"
#include "talb/sendmsg_structs.h"
#include "talb/sendmsg_maps.h"
#include "talb/sendmsg_ids.h"
#include "talb/sendmsg_rule.h"

#define SK_AF_INET              2
#define SK_TCP_ESTABLISHED      1
#define SK_TCP_CLOSE_WAIT       8
#define SK_TCP_CLOSE            7

/* dst = the kernel's bytes at base + off, as many as dst holds (a field of a
 * kernel struct at the offset the loader found in BTF) */
#define READ_KERNEL_AT(dst, base, off) \
	bpf_probe_read_kernel(&(dst), sizeof(dst), (const char *)(base) + (off))

static __always_inline __u32 sk_netns(const void *sk)
{
	void *net = NULL;
	__u32 inum = 0;

	READ_KERNEL_AT(net, sk, SK_OFF_NET);
	if (net)
		READ_KERNEL_AT(inum, net, NET_OFF_INUM);
	return inum;
}

static __always_inline void sk_key(const void *sk, struct host_flow_key *key)
{
	__u16 num = 0;

	READ_KERNEL_AT(key->saddr, sk, SK_OFF_RCV_SADDR);
	READ_KERNEL_AT(key->daddr, sk, SK_OFF_DADDR);
	READ_KERNEL_AT(key->dport, sk, SK_OFF_DPORT);
	READ_KERNEL_AT(num, sk, SK_OFF_NUM);
	key->sport = bpf_htons(num);
}

static __always_inline int selected(const struct sendmsg_host_cfg *cfg,
				    const struct host_flow_key *key)
{
	__u16 sport = bpf_ntohs(key->sport), dport = bpf_ntohs(key->dport);

	if (cfg->selector == SENDMSG_SEL_PID)
		return (bpf_get_current_pid_tgid() >> 32) == cfg->tgid;
	if (cfg->selector == SENDMSG_SEL_CGROUP)
		return bpf_get_current_ancestor_cgroup_id(cfg->cgroup_level) == cfg->cgroup_id;
	if (cfg->selector == SENDMSG_SEL_PORTS)
		return (sport >= cfg->port_lo && sport <= cfg->port_hi) ||
		       (dport >= cfg->port_lo && dport <= cfg->port_hi);
	return 0;
}

static __always_inline __u16 pkts_of(__u32 bytes, __u16 mss)
{
	return mss ? (bytes + mss - 1) / mss : 0;
}

/* Cut the socket's open tensor to end at `to` (its continuation did not
 * come, or the write merged into it failed); 1 if it was cut. */
static __always_inline int cut_open(struct sendmsg_sock *st, __u32 to)
{
	struct host_seq_ring *ring;
	struct host_seq_desc *d;
	void *inner;
	__u32 slot = st->slot;
	__u32 start, end;

	inner = seq_rings_of.lookup(&st->netns);
	if (!inner || slot >= HOST_SEQ_RING_SLOTS)
		return 0;
	ring = bpf_map_lookup_elem(inner, &st->key);
	if (!ring)
		return 0;
	d = &ring->desc[slot];
	start = (__u32)d->range;
	end = (__u32)(d->range >> 32);
	if (start != st->desc_start || start == end)
		return 0;       /* reused since */
	if (end == to)
		return 0;
	d->len_pkts = pkts_of(to - start, d->mss);
	d->range = (__u64)start | ((__u64)to << 32);
	return 1;
}

/* Cut the socket's open tensor to the bytes accepted so far (its
 * continuation did not come). */
static __always_inline void trim_open(struct sendmsg_sock *st)
{
	st->cont_left = 0;
	if (cut_open(st, st->cont_seq))
		sendmsg_count(SENDMSG_CNT_TRIMMED);
}

/* The ring is full: extend the socket's newest tensor (slot st->slot) by
 * the write [seq, seq + size) if it starts exactly at the tensor's end and
 * no byte of the tensor has been sent (snd_nxt at or before its start; the
 * socket's lock is held, so none leaves while the entry changes). 1 if
 * merged. */
static __always_inline int merge_newest(struct sendmsg_sock *st, struct host_seq_ring *ring,
					__u32 seq, __u32 size, __u32 nxt)
{
	struct host_seq_desc *d;
	__u32 slot = st->slot, start, end;
	__u64 total;

	if (slot >= HOST_SEQ_RING_SLOTS)
		return 0;
	d = &ring->desc[slot];
	start = (__u32)d->range;
	end = (__u32)(d->range >> 32);
	if (start == end || start != st->desc_start || end != seq)
		return 0;
	if ((__s32)(nxt - start) > 0)
		return 0;       /* on the wire: its packets carry the old length */
	total = (__u64)(end - start) + size;
	if (!d->mss || total > (__u64)SENDMSG_MAX_PKTS * d->mss)
		return 0;
	d->len_pkts = pkts_of((__u32)total, d->mss);
	d->range = (__u64)start | ((__u64)(seq + size) << 32);   /* one store */
	return 1;
}

static __always_inline void on_enter(void *sk, __u64 size)
{
	struct sendmsg_host_cfg *cfg;
	struct sendmsg_sock fresh = {}, *st;
	struct host_flow_key key = {};
	struct host_seq_ring *ring;
	struct host_seq_desc *d;
	__u64 skp = (__u64)sk, now;
	void *inner, *lib;
	__u32 inum, seq = 0, una = 0, nxt = 0, id, zero = 0, slot, i, end;
	__u16 mss = 0, family = 0, pkts;
	__u8 state = 0, layer, burst;

	inum = sk_netns(sk);
	cfg = sendmsg_hosts.lookup(&inum);
	if (!cfg)
		return;
	sendmsg_count(SENDMSG_CNT_WRITES_SEEN);
	if (size == 0) {
		sendmsg_count(SENDMSG_CNT_ZERO_LENGTH);
		return;
	}
	READ_KERNEL_AT(family, sk, SK_OFF_FAMILY);
	READ_KERNEL_AT(state, sk, SK_OFF_STATE);
	if (family != SK_AF_INET || (state != SK_TCP_ESTABLISHED && state != SK_TCP_CLOSE_WAIT)) {
		sendmsg_count(SENDMSG_CNT_NOT_IPV4_ESTABLISHED);
		return;
	}
	sk_key(sk, &key);
	if (!selected(cfg, &key)) {
		sendmsg_count(SENDMSG_CNT_NOT_SELECTED);
		return;
	}
	sendmsg_count(SENDMSG_CNT_SELECTED);
	lib = lib_rings_of.lookup(&inum);
	if (lib && bpf_map_lookup_elem(lib, &key)) {
		sendmsg_count(SENDMSG_CNT_SKIPPED_LIBRARY_FLOW);
		return;
	}
	inner = seq_rings_of.lookup(&inum);
	if (!inner) {
		sendmsg_count(SENDMSG_CNT_NO_HOST_MAP);
		return;
	}
	READ_KERNEL_AT(seq, sk, TP_OFF_WRITE_SEQ);
	READ_KERNEL_AT(una, sk, TP_OFF_SND_UNA);
	READ_KERNEL_AT(nxt, sk, TP_OFF_SND_NXT);
	READ_KERNEL_AT(mss, sk, TP_OFF_MSS_CACHE);

	st = sendmsg_socks.lookup(&skp);
	if (!st) {
		fresh.netns = inum;
		fresh.key = key;
		sendmsg_socks.update(&skp, &fresh);
		st = sendmsg_socks.lookup(&skp);
		if (!st)
			return;
	}
	st->in_call = SENDMSG_CALL_NONE;
	st->call_seq = seq;
	st->call_size = (__u32)size;
	if (st->cont_left) {
		if (seq == st->cont_seq && size == st->cont_left) {
			st->in_call = SENDMSG_CALL_CONT;
			sendmsg_count(SENDMSG_CNT_CONTINUED);
			return;
		}
		trim_open(st);
	}
	/* burst: a write closer than the gap to the end of the socket's
	 * previous one continues the burst; burst_idx is the position of the
	 * burst's next tensor (0 after a pause) */
	now = bpf_ktime_get_ns();
	if (!st->last_ns || now - st->last_ns >= cfg->burst_gap_ns)
		st->burst_idx = 0;
	burst = st->burst_idx;

	if (size > (__u64)SENDMSG_MAX_PKTS * (mss ? mss : 1) || !mss) {
		sendmsg_count(SENDMSG_CNT_TOO_LARGE);
		return;
	}
	pkts = pkts_of((__u32)size, mss);

	ring = bpf_map_lookup_elem(inner, &key);
	if (!ring) {
		struct host_seq_ring *z = sendmsg_zero.lookup(&zero);

		if (!z)
			return;
		bpf_map_update_elem(inner, &key, z, BPF_NOEXIST);
		ring = bpf_map_lookup_elem(inner, &key);
		if (!ring)
			return;
	}
	slot = HOST_SEQ_RING_SLOTS;
	for (i = 0; i < HOST_SEQ_RING_SLOTS; i++) {
		d = &ring->desc[i];
		end = (__u32)(d->range >> 32);
		if ((__u32)d->range == end || (__s32)(una - end) >= 0) {
			slot = i;
			break;
		}
	}
	if (slot >= HOST_SEQ_RING_SLOTS) {
		if (merge_newest(st, ring, seq, (__u32)size, nxt)) {
			st->in_call = SENDMSG_CALL_MERGED;
			sendmsg_count(SENDMSG_CNT_MERGED);
			return;
		}
		sendmsg_count(SENDMSG_CNT_RING_FULL);
		return;
	}
	if (sendmsg_next_id(cfg->worker, &id))
		return;
	layer = sendmsg_layer(cfg, (__u32)size, bpf_ntohs(key.dport), burst);
	d = &ring->desc[slot];
	d->range = 0;                   /* empty while the fields change */
	d->tensor_id = id;
	d->len_pkts = pkts;
	d->mss = mss;
	d->layer = layer;
	d->range = (__u64)seq | ((__u64)(seq + (__u32)size) << 32);   /* one store */
	st->slot = slot;
	st->desc_start = seq;
	st->in_call = SENDMSG_CALL_NEW;
	if (burst < cfg->default_layer)
		st->burst_idx = burst + 1;
	sendmsg_count(SENDMSG_CNT_STARTED);
}

static __always_inline void on_exit(void *sk, long ret)
{
	__u64 skp = (__u64)sk;
	struct sendmsg_sock *st = sendmsg_socks.lookup(&skp);
	struct host_seq_ring *ring;
	void *inner;
	__u32 slot;
	__u8 call;

	if (!st)
		return;
	call = st->in_call;
	st->in_call = SENDMSG_CALL_NONE;
	if (ret > 0)
		st->last_ns = bpf_ktime_get_ns();
	if (call == SENDMSG_CALL_CONT) {
		if (ret <= 0)
			return;                 /* still expecting the same bytes */
		if ((__u64)ret < st->cont_left) {
			st->cont_seq += (__u32)ret;
			st->cont_left -= (__u32)ret;
			sendmsg_count(SENDMSG_CNT_PARTIAL);
		} else {
			st->cont_left = 0;
		}
		return;
	}
	if (call != SENDMSG_CALL_NEW && call != SENDMSG_CALL_MERGED)
		return;
	if (ret <= 0 && call == SENDMSG_CALL_MERGED) {
		st->cont_left = 0;
		cut_open(st, st->call_seq);     /* back to where it ended */
		sendmsg_count(SENDMSG_CNT_FAILED);
		return;
	}
	if (ret <= 0) {
		st->cont_left = 0;
		inner = seq_rings_of.lookup(&st->netns);
		slot = st->slot;
		if (!inner || slot >= HOST_SEQ_RING_SLOTS)
			return;
		ring = bpf_map_lookup_elem(inner, &st->key);
		if (ring && (__u32)ring->desc[slot].range == st->desc_start)
			ring->desc[slot].range = 0;
		sendmsg_count(SENDMSG_CNT_FAILED);
		return;
	}
	if ((__u64)ret < st->call_size) {
		st->cont_seq = st->call_seq + (__u32)ret;
		st->cont_left = st->call_size - (__u32)ret;
		sendmsg_count(SENDMSG_CNT_PARTIAL);
	} else {
		st->cont_left = 0;
	}
}

/* NR_WRITE, NR_WRITEV, NR_SENDTO, NR_SENDMSG: the machine's numbers of
 * the system calls that write to a TCP socket through tcp_sendmsg_locked
 * and return the bytes accepted, and REGS_OFF_NR the offset of the
 * number in struct pt_regs (x86_64 orig_ax, aarch64 syscallno), all -D
 * flags from datapath/sendmsg_tagger.py (syscall_numbers). */

/* trace_tcp_sendmsg_locked(sk, msg, skb, size_goal): once per iteration of
 * tcp_sendmsg_locked's copy loop, socket lock held. The thread's first
 * event of a call is the call's entry: msg_iter.count is then the whole
 * write, write_seq its first byte. */
RAW_TRACEPOINT_PROBE(tcp_sendmsg_locked)
{
	__u64 tid = bpf_get_current_pid_tgid(), skp = ctx->args[0];
	__u64 *cur = sendmsg_calls.lookup(&tid);
	__u64 size = 0;

	if (cur && *cur == skp)
		return 0;               /* a later iteration of the same call */
	sendmsg_calls.update(&tid, &skp);
	READ_KERNEL_AT(size, (void *)ctx->args[1], MSG_OFF_ITER + ITER_OFF_COUNT);
	on_enter((void *)skp, size);
	return 0;
}

/* The call's end: the thread's next return from a write system call
 * carries the bytes tcp_sendmsg_locked accepted. */
RAW_TRACEPOINT_PROBE(sys_exit)
{
	__u64 tid, *skp;
	int nr = -1;    /* x86_64 orig_ax is a long, aarch64 syscallno an s32: the
			 * low 32 bits (little-endian) carry the number on both */

	READ_KERNEL_AT(nr, (void *)ctx->args[0], REGS_OFF_NR);
	if (nr != NR_WRITE && nr != NR_WRITEV && nr != NR_SENDTO && nr != NR_SENDMSG)
		return 0;
	tid = bpf_get_current_pid_tgid();
	skp = sendmsg_calls.lookup(&tid);
	if (!skp)
		return 0;
	on_exit((void *)*skp, (long)ctx->args[1]);
	sendmsg_calls.delete(&tid);
	return 0;
}

/* trace_inet_sock_set_state(sk, oldstate, newstate), raw: no tracefs
 * format needed. Only sockets with state here are ours (TCP). */
RAW_TRACEPOINT_PROBE(inet_sock_set_state)
{
	__u64 skp = ctx->args[0];
	struct sendmsg_sock *st;
	void *inner;

	if ((int)ctx->args[2] != SK_TCP_CLOSE)
		return 0;
	st = sendmsg_socks.lookup(&skp);
	if (!st)
		return 0;
	inner = seq_rings_of.lookup(&st->netns);
	if (inner)
		bpf_map_delete_elem(inner, &st->key);
	sendmsg_socks.delete(&skp);
	sendmsg_count(SENDMSG_CNT_CLOSED);
	return 0;
}
