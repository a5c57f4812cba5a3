/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * talb/sendmsg_rule.h - a write's layer (priority) from the host's rule
 * (struct sendmsg_host_cfg; parsed from text by
 * datapath/sendmsg_tagger.py's parse_priority, which documents the rules).
 */
#ifndef TALB_SENDMSG_RULE_H
#define TALB_SENDMSG_RULE_H

static __always_inline __u8 sendmsg_layer(const struct sendmsg_host_cfg *cfg, __u32 size,
					  __u16 dport, __u8 burst_idx)
{
	int i;

	if (cfg->rule == SENDMSG_RULE_SIZE) {
		for (i = 0; i < SENDMSG_RULE_MAX; i++) {
			if (i >= cfg->n_rule)
				break;
			if (size <= cfg->rule_val[i])
				return i;
		}
		return cfg->n_rule;
	}
	if (cfg->rule == SENDMSG_RULE_PORT) {
		for (i = 0; i < SENDMSG_RULE_MAX; i++) {
			if (i >= cfg->n_rule)
				break;
			if (dport == cfg->rule_val[i])
				return cfg->rule_layer[i];
		}
		return cfg->default_layer;
	}
	if (cfg->rule == SENDMSG_RULE_BURST)
		return burst_idx;
	return 0;
}

#endif /* TALB_SENDMSG_RULE_H */
