/* CONGA's fields on the wire: an 8-byte IPv4 option (docs/schemes.md,
 * "CONGA's option"). Pushed by the source leaf right after the 20-byte base
 * header -- in front of the TaLB option when the packet has one --, CE
 * raised by every hop, removed by the destination leaf: hosts never see
 * it. All fields single bytes.
 */
#ifndef TALB_CONGA_OPTION_H
#define TALB_CONGA_OPTION_H

#include "talb/constants.h"   /* TALB_CONGA_* */

struct conga_opt {
	__u8 type;        /* TALB_CONGA_IPOPT_TYPE */
	__u8 len;         /* TALB_CONGA_IPOPT_LEN */
	__u8 src_leaf;    /* the source leaf's id */
	__u8 lbtag;       /* the uplink (group index) the source leaf chose */
	__u8 ce;          /* the largest quantised DRE met on the path */
	__u8 fb_lbtag;    /* feedback: an LBTag of the path back ... */
	__u8 fb_metric;   /* ... and its CE as this leaf last saw it */
	__u8 flags;       /* TALB_CONGA_VERSION (bits 0-1) | TALB_CONGA_F_FB */
} __attribute__((packed));

#endif /* TALB_CONGA_OPTION_H */
