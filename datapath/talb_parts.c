/* The TaLB part of forwarding groups (struct fwd_group from threshold on),
 * as datapath.control._talb_part packs it, for many groups in one call: the
 * agent's window publishes every group whose PCMs changed, and in Python the
 * smooth-WRR schedule alone costs ~40 us a group (64 picks).
 *
 * Same integers as the Python reference (datapath/schemes/talb.py
 * fixed_wrr_weights, smooth_wrr_schedule; fixed_pcm_order): tests compare the
 * two on random and edge-case inputs. The one floating-point step (the
 * largest-remainder quotas r * slots / total) divides two integers below 2^53,
 * exactly as Python's int / int does (both operands exact, IEEE division
 * correctly rounded); compiled with -ffp-contract=off.
 *
 * MAXP, SCHED, ONE come from bpf/include/talb/constants.h (-D at build time).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if !defined(MAXP) || !defined(SCHED) || !defined(ONE)
#error "build with -DMAXP=TALB_MAX_GROUP_PORTS -DSCHED=TALB_SCHED_MAX -DONE=TALB_PCM_ONE"
#endif

#define PART (4 + 2 + 2 + 2 * MAXP + MAXP + SCHED)

int talb_part_size(void) { return PART; }

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* fixed_wrr_weights(pcm, SCHED) */
static void weights(int n, const uint16_t *pcm, uint32_t *w)
{
	uint64_t resid[MAXP], total = 0, g = 0;
	int i;

	for (i = 0; i < n; i++) {
		resid[i] = ONE - (pcm[i] > ONE ? ONE : pcm[i]);
		total += resid[i];
		g = gcd(g, resid[i]);
	}
	if (total == 0) {
		for (i = 0; i < n; i++)
			w[i] = 1;
		return;
	}
	if (total / g <= SCHED) {
		for (i = 0; i < n; i++)
			w[i] = (uint32_t)(resid[i] / g);
		return;
	}
	double rem[MAXP];
	int order[MAXP];
	int64_t left = SCHED;
	for (i = 0; i < n; i++) {
		double q = (double)(resid[i] * SCHED) / (double)total;
		w[i] = (uint32_t)q;
		rem[i] = q - (double)w[i];
		left -= w[i];
	}
	/* indices by remainder, largest first, ties by index (a stable insertion sort) */
	for (i = 0; i < n; i++) {
		int j = i;
		while (j > 0 && rem[order[j - 1]] < rem[i]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = i;
	}
	for (i = 0; i < n && i < left; i++)
		w[order[i]] += 1;
	g = 0;
	for (i = 0; i < n; i++)
		if (w[i])
			g = gcd(g, w[i]);
	if (!g)
		g = 1;
	for (i = 0; i < n; i++)
		w[i] = (uint32_t)(w[i] / g);
}

/* smooth_wrr_schedule(w): the schedule's length */
static int schedule(int n, const uint32_t *w, uint8_t *out)
{
	int64_t cur[MAXP] = {0}, total = 0;
	int i, t;

	for (i = 0; i < n; i++)
		total += w[i];
	if (total <= 0) {
		for (i = 0; i < n; i++)
			out[i] = (uint8_t)i;
		return n;
	}
	if (total > SCHED)
		return -1;
	for (t = 0; t < total; t++) {
		int best = 0;
		for (i = 0; i < n; i++)
			cur[i] += w[i];
		for (i = 1; i < n; i++)
			if (cur[i] > cur[best])
				best = i;
		cur[best] -= total;
		out[t] = (uint8_t)best;
	}
	return (int)total;
}

static int part(int n, const uint16_t *p, uint32_t threshold, uint8_t *o);

/* The agent's publication, for groups whose float PCMs changed: group k is
 * the publisher's group slot[k], n_ports[k] ports, P_i pcm[k * MAXP ...],
 * fixed-point threshold thr[k]. Each P_i to fixed point as pcm_to_fixed does
 * (clamped to [0, 1], times ONE, rounded half to even); where the fixed PCMs
 * or the threshold differ from those last seen for the slot (last_pcm,
 * last_thr, have: the caller's state, nothing set there before), the slot's
 * TaLB part is rewritten at out[slot * PART ...] and changed[k] = 1.
 * 0; -1 - k for a group k of a bad size; -1000000 for a NaN P_i (nothing
 * touched: Python raises for it). */
int talb_refresh(int count, const int32_t *slot, const uint8_t *n_ports, const double *pcm,
		 const uint32_t *thr, uint16_t *last_pcm, uint32_t *last_thr, uint8_t *have,
		 uint8_t *out, uint8_t *changed)
{
	int k, j;

	for (k = 0; k < count; k++) {
		if (n_ports[k] < 1 || n_ports[k] > MAXP)
			return -1 - k;
		for (j = 0; j < n_ports[k]; j++)
			if (pcm[(size_t)k * MAXP + j] != pcm[(size_t)k * MAXP + j])
				return -1000000;
	}
	for (k = 0; k < count; k++) {
		int n = n_ports[k], s = slot[k];
		uint16_t fixed[MAXP];
		uint16_t *last = last_pcm + (size_t)s * MAXP;

		for (j = 0; j < n; j++) {
			double p = pcm[(size_t)k * MAXP + j];
			p = p > 0.0 ? p : 0.0;          /* max(0.0, p) */
			p = p < 1.0 ? p : 1.0;          /* min(1.0, .) */
			fixed[j] = (uint16_t)rint(p * (double)ONE);  /* round(): half to even */
		}
		if (have[s] && last_thr[s] == thr[k] && !memcmp(last, fixed, 2 * (size_t)n)) {
			changed[k] = 0;
			continue;
		}
		if (part(n, fixed, thr[k], out + (size_t)s * PART))
			return -1 - k;
		memcpy(last, fixed, 2 * (size_t)n);
		last_thr[s] = thr[k];
		have[s] = 1;
		changed[k] = 1;
	}
	return 0;
}

/* struct fwd_group: n_ports, flags, ifindex[MAXP], then the TaLB part */
#define HEAD 8
#define GROUP (HEAD + 4 * MAXP + PART)

int talb_group_size(void) { return GROUP; }

/* talb_publish's arguments (datapath/talb_native.py _PublishArgs lays it
 * out the same). */
struct talb_publish_args {
	int32_t fd, capacity;           /* the groups map; entries the read buffers hold */
	uint32_t *rkeys;                /* BPF_MAP_LOOKUP_BATCH buffers: capacity entries */
	uint8_t *rvalues;
	uint32_t *wkeys;                /* BPF_MAP_UPDATE_BATCH buffers: count entries */
	uint8_t *wvalues;
	int32_t count, pad;             /* the publisher's groups, slots 0..count-1 */
	const uint32_t *gid;            /* group k's id, */
	const uint8_t *n_ports;         /* its number of ports, */
	const uint32_t *ifx;            /* its ports (ifx[k * MAXP ...], zero padded), */
	const double *pcm;              /* its P_i in group order (pcm[k * MAXP ...]) */
	const uint32_t *thr;            /* and its fixed-point threshold */
	int32_t *slot;                  /* scratch for talb_refresh: count entries */
	uint16_t *last_pcm;             /* talb_refresh's state per slot */
	uint32_t *last_thr;
	uint8_t *have;
	uint8_t *parts;                 /* the TaLB part per slot */
	uint8_t *changed;               /* scratch: count entries */
	uint8_t *status;                /* out per group: PUB_* */
};

enum { PUB_UNCHANGED = 0, PUB_WRITTEN = 1, PUB_MOVED = 2 };

/* GroupPublisher.publish (datapath/control.py) for the batched path, in one
 * call: read the groups map (one BPF_MAP_LOOKUP_BATCH), make every group's
 * TaLB part from its PCMs (talb_refresh), and write the groups whose value
 * changed (one BPF_MAP_UPDATE_BATCH); the flags stay as installed. A group
 * not where expected (absent, or another size or other ports under its id)
 * is left alone, status PUB_MOVED: the caller publishes it the slow way
 * (publish_pcm, which searches it by its ports). Returns the number
 * written; -errno when a syscall fails, -1000000 for a NaN P_i (nothing
 * touched), -2000000 - k for a group k talb_refresh cannot encode. */
int talb_publish(struct talb_publish_args *a)
{
	union bpf_attr attr;
	uint64_t out_batch = 0;
	int k, rc, written = 0;
	uint32_t found;

	memset(&attr, 0, sizeof(attr));
	attr.batch.out_batch = (uint64_t)(uintptr_t)&out_batch;
	attr.batch.keys = (uint64_t)(uintptr_t)a->rkeys;
	attr.batch.values = (uint64_t)(uintptr_t)a->rvalues;
	attr.batch.count = (uint32_t)a->capacity;
	attr.batch.map_fd = (uint32_t)a->fd;
	if (syscall(__NR_bpf, BPF_MAP_LOOKUP_BATCH, &attr, sizeof(attr)) < 0 && errno != ENOENT)
		return -errno;
	found = attr.batch.count;
	for (k = 0; k < a->count; k++)
		a->slot[k] = k;
	rc = talb_refresh(a->count, a->slot, a->n_ports, a->pcm, a->thr, a->last_pcm,
			  a->last_thr, a->have, a->parts, a->changed);
	if (rc == -1000000)
		return rc;
	if (rc)
		return -2000000 - (-1 - rc);
	for (k = 0; k < a->count; k++) {
		int n = a->n_ports[k];
		const uint8_t *cur = NULL;
		uint8_t *out = a->wvalues + (size_t)written * GROUP;
		uint32_t have_n;

		for (uint32_t i = 0; i < found; i++)
			if (a->rkeys[i] == a->gid[k]) {
				cur = a->rvalues + (size_t)i * GROUP;
				break;
			}
		if (cur)
			memcpy(&have_n, cur, 4);
		if (!cur || have_n != (uint32_t)n ||
		    memcmp(cur + HEAD, a->ifx + (size_t)k * MAXP, 4 * (size_t)n)) {
			a->status[k] = PUB_MOVED;
			continue;
		}
		memcpy(out, cur, HEAD);                          /* flags as installed */
		memcpy(out + HEAD, a->ifx + (size_t)k * MAXP, 4 * MAXP);
		memcpy(out + HEAD + 4 * MAXP, a->parts + (size_t)k * PART, PART);
		if (!memcmp(out, cur, GROUP)) {
			a->status[k] = PUB_UNCHANGED;
			continue;
		}
		a->wkeys[written++] = a->gid[k];
		a->status[k] = PUB_WRITTEN;
	}
	if (!written)
		return 0;
	memset(&attr, 0, sizeof(attr));
	attr.batch.keys = (uint64_t)(uintptr_t)a->wkeys;
	attr.batch.values = (uint64_t)(uintptr_t)a->wvalues;
	attr.batch.count = (uint32_t)written;
	attr.batch.map_fd = (uint32_t)a->fd;
	if (syscall(__NR_bpf, BPF_MAP_UPDATE_BATCH, &attr, sizeof(attr)) < 0)
		return -errno;
	return written;
}

/* groups k = 0 .. count-1: n_ports[k] ports (1..MAXP), fixed PCMs
 * pcm[k * MAXP ...], threshold thresholds[k]; their TaLB parts written to
 * out[k * PART ...] (native byte order, zero padded). 0, or -1 - k for the
 * first group k that cannot be encoded. */
int talb_parts(int count, const uint8_t *n_ports, const uint16_t *pcm,
	       const uint32_t *thresholds, uint8_t *out)
{
	for (int k = 0; k < count; k++) {
		int n = n_ports[k];

		if (n < 1 || n > MAXP)
			return -1 - k;
		if (part(n, pcm + (size_t)k * MAXP, thresholds[k], out + (size_t)k * PART))
			return -1 - k;
	}
	return 0;
}

/* one group's part: n ports (1..MAXP), fixed PCMs p, into o */
static int part(int n, const uint16_t *p, uint32_t threshold, uint8_t *o)
{
	{
		uint32_t w[MAXP];
		uint8_t order[MAXP];
		uint16_t len16;
		int len, i;

		weights(n, p, w);
		memset(o, 0, PART);
		len = schedule(n, w, o + 8 + 3 * MAXP);
		if (len < 0)
			return -1;
		/* fixed_pcm_order: by PCM, ties by index (stable insertion sort) */
		for (i = 0; i < n; i++) {
			int j = i;
			while (j > 0 && p[order[j - 1]] > p[i]) {
				order[j] = order[j - 1];
				j--;
			}
			order[j] = (uint8_t)i;
		}
		len16 = (uint16_t)len;
		memcpy(o, &threshold, 4);
		memcpy(o + 4, &len16, 2);
		memcpy(o + 8, p, 2 * (size_t)n);
		memcpy(o + 8 + 2 * MAXP, order, (size_t)n);
	}
	return 0;
}
