/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/structs.h - every struct shared between the data path and user space.
 *
 * datapath/structs.py mirrors each of these with ctypes; opening a pinned map
 * checks the kernel's key/value sizes against the mirror. Change both
 * together. Layouts use only fixed-width fields with natural alignment and
 * no implicit padding.
 */
#ifndef TALB_STRUCTS_H
#define TALB_STRUCTS_H

/* ports: ifindex -> port. port_id indexes port_stats (< TALB_MAX_PORTS). */
struct port_info {
	__u32 port_id;
	__u32 flags;            /* PORT_HOST | PORT_UP */
};

/* port_slots: the same port at slot ifindex % TALB_PORT_SLOTS, with its
 * ifindex (0: an empty slot). Root-namespace ifindexes never restart
 * (Mininet's switch ports pass 4096 after a while), so a slot names the
 * port it holds; one 8-byte value, written whole. */
struct port_slot {
	__u32 ifindex;
	__u16 port_id;
	__u16 flags;            /* PORT_HOST | PORT_UP */
};

/* port_stats (per CPU): rx counts every packet the program sees on its
 * ingress port; tx counts packets the program sends out of a port
 * (redirected or released), bytes as skb->len (Ethernet header included). */
struct port_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets;
	__u64 tx_bytes;
};

/* groups: group_id -> candidate egress ports, with everything TaLB needs
 * to place a new tensor in this group. A whole group is one value of a hash
 * map, so a user-space update replaces it atomically (a hash map swaps the
 * element; an array map would be copied in place under readers): a packet
 * never sees the PCMs of one publication with the order or schedule of
 * another. Written by datapath/control.py (program_switch: neutral values;
 * publish_pcm: from the agent's PCMs). Indices below are positions in
 * ifindex[]; the data path checks each against n_ports before use. */
struct fwd_group {
	__u32 n_ports;                          /* 0..TALB_MAX_GROUP_PORTS */
	__u32 flags;                            /* reserved, 0 */
	__u32 ifindex[TALB_MAX_GROUP_PORTS];    /* egress devices, in order */
	__u32 threshold;        /* S, PCM fixed point (TALB_PCM_ONE = 1.0) */
	__u16 sched_len;        /* smooth-WRR schedule length, 1..TALB_SCHED_MAX */
	__u16 reserved;
	__u16 pcm[TALB_MAX_GROUP_PORTS];        /* P_i, fixed point */
	__u8 order[TALB_MAX_GROUP_PORTS];       /* indices by PCM, lowest first */
	__u8 sched[TALB_SCHED_MAX];             /* CASE 2 schedule of indices */
};

/* route_slots: the route of destination `daddr` (network byte order, as
 * on the wire) at slot (daddr * TALB_ROUTE_HASH_MUL) >> (32 - bits), when
 * no other route of the switch took that slot first; every route is in
 * `fwd` too (the data path looks there when the slot holds another
 * address). One 8-byte value, written whole. */
struct route_slot {
	__be32 daddr;
	__u16 group_id;         /* < TALB_MAX_GROUPS */
	__u16 flags;            /* ROUTE_SLOT_USED */
};

/* tensors key: a tensor is (sender, tensor_id). Ids are unique per sending
 * host only (the 12-byte option has no room for the sender, and the IPv4
 * header already carries it), so two hosts' tensors of one id must not
 * share an entry (issue 8; docs/talb-decisions.md). Both fields in host
 * byte order, as talb_extract() parsed them: no byte swap per packet. */
struct tensor_key {
	__u32 saddr;            /* IPv4 source address of the sender */
	__u32 tensor_id;
};

/* tensors (LRU hash): tensor_key -> one tensor, Table I of the paper
 * (tensor_id, tensor_len, received packets, previous port) plus what
 * removal and ageing need. Live until TALB_TENSOR_DONE. */
struct tensor_entry {
	__u64 first_seen_ns;    /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u64 last_seen_ns;
	/* TALB_TENSOR_DONE, set in place with an atomic fetch-or whose old
	 * value says which CPU ended the tensor's life (schemes/talb.h). 64
	 * bits: bcc 0.26's LLVM returns an atomic's old value only for 64-bit
	 * operands. */
	__u64 flags;
	__u32 prev_port;        /* ifindex of the port the tensor took */
	__u32 group_id;         /* whose live-layer counts include it */
	__u32 received;         /* packets seen, this one included */
	__u16 tensor_len;       /* packets, from the option */
	__u8 layer;
	__u8 pad;
};

/* tensor_egress (LRU hash): tensor_key -> the ports a tagged tensor left
 * this switch by into the fabric (talb/tensor_egress.h). CLOCK_MONOTONIC
 * times (the senders' time.monotonic_ns), from bpf_ktime_get_ns or, under
 * a scheme that reads no clock, its coarse variant (up to a tick behind). */
struct tensor_egress {
	__u64 first_ns;         /* its first tagged packet forwarded here */
	__u64 latest_ns;        /* its latest */
	__u64 port_mask;        /* bit port_id: every port it left by */
	__u32 packets;          /* tagged packets forwarded, retransmissions included */
	__u16 first_port;       /* port_id of its first packet */
	__u16 pad;
};

/* group_state[group_id]: what the data path keeps per group (array map,
 * updated in place with atomic adds). live[l] counts the group's live
 * tensor entries of layer l; tensors their sum. group_swept has the same
 * layout and is written by user space only (sweep_tensors): the entries it
 * removed, so that the data path sees live[l] - swept[l] without user
 * space ever writing a value the data path adds to (no lost updates). */
struct group_state {
	__u32 wrr_cursor;       /* CASE 2: next schedule slot (group_state only) */
	__u32 tensors;
	__u32 live[TALB_NR_LAYERS];
};

/* config[0]: runtime configuration, read per packet (switch scheme without
 * reloading). reserved[] keeps the value size stable while later schemes
 * add fields; it must be zero. A field left 0 means its default
 * (TALB_DEFAULT_* / TALB_MAX_TENSORS), but drill_m (0 is DRILL(d, 0)). */
struct talb_config {
	__u32 scheme;           /* TALB_SCHEME_* */
	__u32 hash_seed;        /* seed of the 5-tuple hash */
	__u32 flags;            /* CFG_* */
	__u32 fallback_scheme;  /* untagged packets under TaLB (ECMP) */
	__u32 tensor_limit;     /* live tensor entries, <= TALB_MAX_TENSORS */
	__u32 tensor_idle_us;   /* idle timeout of an entry (0: default) */
	__u32 n_bands;          /* priority bands of the egress HTB (0, 1: one) */
	__u32 layers_per_band;  /* tagged band = 1 + layer / layers_per_band */
	__u32 flowlet_timeout_us; /* LetFlow: flowlet gap */
	__u16 drill_d;          /* DRILL: random samples, 1..TALB_DRILL_MAX_D */
	__u16 drill_m;          /* DRILL: remembered ports, 0..TALB_DRILL_MAX_M */
	__u32 conga_dre_us;     /* CONGA: DRE period T_dre */
	__u32 conga_age_us;     /* CONGA: remote metrics older count as 0 */
	__u8 conga_alpha_shift; /* CONGA: alpha = 2^-shift, 1..7 */
	__u8 conga_q_bits;      /* CONGA: metric bits, 1..8 */
	__u8 conga_leaf;        /* CONGA: this switch's leaf id + 1 (0: a spine) */
	__u8 conga_pad;
	__u32 presto_cell_bytes; /* Presto: flowcell bytes (0: 64 KB) */
	__u32 reserved[2];
};

/* conga_dre[port_id]: the port's discounting rate estimator (bytes,
 * decayed by 1 - alpha every T_dre, lazily up to last_ns). */
struct conga_dre {
	__u64 x;
	__u64 last_ns;
};

/* conga_to_leaf[dst leaf * TALB_MAX_GROUP_PORTS + lbtag] (source leaf:
 * the feedback it got) and conga_from_leaf[src leaf * ... + lbtag]
 * (destination leaf: the CE it saw). */
struct conga_metric {
	__u32 metric;
	__u32 valid;            /* 1 once written */
	__u64 updated_ns;
};

/* flowlets key (LetFlow): a flow's 5-tuple, host byte order as parsed. */
struct flow_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* flowlets: the flow's current flowlet. */
struct flowlet {
	__u64 last_seen_ns;     /* bpf_ktime_get_ns of its last packet */
	__u32 port;             /* ifindex the flowlet takes */
	__u32 pad;
};

/* port_rate[port_id]: the port's shaper, written by user space
 * (datapath/control.py set_port_rates): drains the queue estimate. */
struct port_rate {
	__u64 bytes_per_s;      /* 0: unknown, never drained */
	__u32 limit_bytes;      /* the port's queue limit (0: none) */
	__u32 burst_bytes;      /* the shaper's bucket (HTB burst) */
};

/* port_queue[port_id]: the data path's model of the port's shaper
 * (schemes/drill.h): backlog and bucket credit at last_ns. */
struct port_queue {
	__u64 bytes;
	__u64 last_ns;
	__u64 credit;
};

/* ecn_port[port_id]: a port's ECN marking setup (talb/ecn.h), written by
 * user space (datapath/control.py set_ecn). weight[b]: band b's WFQ
 * weight as the port's qdisc is installed now (0: no such band -- a FIFO
 * port has band 0 only). */
struct ecn_port {
	__u64 bytes_per_s;      /* link rate; 0: never marks */
	__u32 k_bytes;          /* mark when a band holds more than this */
	__u32 limit_bytes;      /* one band's bfifo limit (0: none) */
	__u32 burst_bytes;      /* the shaper's bucket (HTB burst) */
	__u8 weight[TALB_MAX_BANDS];
	__u32 pad;
};

/* ecn_queue[port_id]: the port's phantom queue (data path only): each
 * band's bytes and the bucket's credit at last_ns. */
struct ecn_queue {
	__u64 last_ns;
	__u64 credit;
	__u32 bytes[TALB_MAX_BANDS];
};

/* drill_mem[group_id], per CPU: one DRILL engine's remembered ports
 * (ifindex, best first; 0: none). */
struct drill_mem {
	__u32 port[TALB_DRILL_MAX_M];
};

#endif /* TALB_STRUCTS_H */
