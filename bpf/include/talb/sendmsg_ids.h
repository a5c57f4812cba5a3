/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/sendmsg_ids.h - Snowflake ids made in the kernel, per CPU
 * (workload/snowflake.py's layout: 20-bit ms tick | 8-bit sequence |
 * 4-bit worker). The worker is the host's claimed slot
 * (workload/id_slots.py), so ids never meet a TensorSender's. The
 * sequence is split: its SENDMSG_CPU_BITS high bits are the CPU, the rest
 * count the CPU's ids within one tick, so two CPUs never make one id. A
 * CPU that runs out within a tick takes the next tick (runs ahead of the
 * clock); user space waits until the clock has passed the largest tick of
 * every CPU before it gives the slot back. The Python model is
 * datapath/sendmsg_tagger.py's KernelIdModel.
 *
 * No two runs of this code interleave on one CPU: the kernel does not
 * re-enter a tracing program on a CPU where it is running (it skips the
 * nested run), so the per-CPU state needs no lock.
 *
 * SENDMSG_CPU_BITS: -D from the loader, ceil(log2(possible CPUs)).
 */
#ifndef TALB_SENDMSG_IDS_H
#define TALB_SENDMSG_IDS_H

#define SENDMSG_CNT_BITS        (SENDMSG_SEQ_BITS - SENDMSG_CPU_BITS)
#define SENDMSG_CNT_MAX         ((1U << SENDMSG_CNT_BITS) - 1)

_Static_assert(SENDMSG_CPU_BITS < SENDMSG_SEQ_BITS, "too many CPUs for the sequence bits");

static __always_inline int sendmsg_next_id(__u8 worker, __u32 *id)
{
	__u32 zero = 0;
	struct sendmsg_idgen *g = sendmsg_ids.lookup(&zero);
	__u64 tick = bpf_ktime_get_ns() / SENDMSG_UNIT_NS;
	__u32 cpu = bpf_get_smp_processor_id() & ((1U << SENDMSG_CPU_BITS) - 1);
	__u32 seq;

	if (!g)
		return -1;
	if (tick > g->last_tick) {
		g->last_tick = tick;
		g->seq = 0;
	} else if (g->seq < SENDMSG_CNT_MAX) {
		g->seq += 1;
	} else {
		g->last_tick += 1;      /* run ahead */
		g->seq = 0;
	}
	seq = (cpu << SENDMSG_CNT_BITS) | g->seq;
	*id = ((((__u32)g->last_tick & ((1U << SENDMSG_TS_BITS) - 1)) << SENDMSG_SEQ_BITS | seq)
	       << SENDMSG_WORKER_BITS) | (worker & ((1U << SENDMSG_WORKER_BITS) - 1));
	return 0;
}

#endif /* TALB_SENDMSG_IDS_H */
