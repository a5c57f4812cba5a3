/* A window's PCM maths for many ports in one call (agent/pcm.py PortModel
 * and GroupPcm): Eq. 1, Eq. 3/4 per port, Eq. 5 per group. The Python code
 * is the reference; these functions perform the same IEEE double operations
 * in the same order (built with -ffp-contract=off: no fused multiply-add), so
 * they return the same bits -- tests/test_pcm.py compares the two on random
 * inputs. Counters are given below 2^53 (the caller checks), where Python's
 * int-to-float conversions and int / int divisions are exact conversions
 * followed by one correctly rounded IEEE division, as here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* counters at or above this go the Python way (agent/pcm_native.py EXACT) */
#define EXACT ((uint64_t)1 << 50)

/* PortModel.window: for port i, tx_bytes b[i] and tx_packets k[i] over dt
 * seconds, capacity cap[i] bit/s, queueing cap max_wait[i] s, idle delay
 * idle[i] s (a full frame's service time), full = FULL_FRAME_BYTES.
 * 0; or -1 when a port counted packets of no byte: Python divides by zero
 * there (ZeroDivisionError), so the caller runs the Python code for it. */
int talb_port_model(int n, const int64_t *b, const int64_t *k, double dt,
		     const double *cap, const double *max_wait, const double *idle,
		     double full, double *util, double *delay)
{
	for (int i = 0; i < n; i++) {
		if (!b[i] && !k[i]) {
			util[i] = 0.0;
			delay[i] = idle[i];
			continue;
		}
		double c = cap[i];
		double rho = (double)(b[i] * 8) / (c * dt);
		util[i] = rho < 1.0 ? rho : 1.0;       /* min(1.0, rho) */
		if (!b[i])
			return -1;
		double frame = k[i] ? (double)b[i] / (double)k[i] : full;
		double service_pps = c / (8.0 * frame);
		double service = 1.0 / service_pps;
		if (rho >= 1.0) {
			delay[i] = max_wait[i] + service;
			continue;
		}
		double lam = rho * service_pps;
		if (lam == 0.0) {
			delay[i] = service;
			continue;
		}
		double q = rho * rho / (2.0 * (1.0 - rho) * lam);
		delay[i] = (max_wait[i] < q ? max_wait[i] : q) + service;   /* min(q, max_wait) */
	}
	return 0;
}

/* _minmax of values[idx[0..n-1]] into out[0..n-1] */
static void minmax(int n, const int32_t *idx, const double *values, double *out)
{
	double lo = values[idx[0]], hi = lo;

	for (int j = 1; j < n; j++) {
		double v = values[idx[j]];
		if (v < lo)
			lo = v;
		if (v > hi)
			hi = v;
	}
	if (hi == lo) {
		for (int j = 0; j < n; j++)
			out[j] = 0.0;
		return;
	}
	double span = hi - lo;
	for (int j = 0; j < n; j++)
		out[j] = (values[idx[j]] - lo) / span;
}

/* GroupPcm.window: group g's ports are idx[start[g] .. start[g+1]-1]
 * (positions in util/delay); its P_i go to pcm[start[g] ...]. */
void talb_group_pcm(int groups, const int32_t *start, const int32_t *idx,
		    const double *util, const double *delay, double w1, double w2,
		    double *pcm, double *scratch)
{
	double wsum = w1 + w2;

	for (int g = 0; g < groups; g++) {
		int s = start[g], n = start[g + 1] - s;
		if (n <= 0)
			continue;
		double *a = pcm + s, *e = scratch + s;
		minmax(n, idx + s, util, a);
		minmax(n, idx + s, delay, e);
		for (int j = 0; j < n; j++) {
			double x = (w1 * a[j] + w2 * e[j]) / wsum;
			a[j] = x < 1.0 ? x : 1.0;       /* min(1.0, x) */
		}
	}
}

/* Entries 0..n_entries-1 of a per-CPU array in one BPF_MAP_LOOKUP_BATCH
 * (keys: n_entries u32, values: n_entries * ncpu * fields u64). 0 or -errno. */
static int lookup_batch(int fd, uint32_t n_entries, uint32_t *keys, uint64_t *values)
{
	union bpf_attr attr;
	uint64_t out_batch = 0;

	memset(&attr, 0, sizeof(attr));
	attr.batch.out_batch = (uint64_t)(uintptr_t)&out_batch;
	attr.batch.keys = (uint64_t)(uintptr_t)keys;
	attr.batch.values = (uint64_t)(uintptr_t)values;
	attr.batch.count = n_entries;
	attr.batch.map_fd = (uint32_t)fd;
	/* ENOENT: the batch reached the array's end; the entries read are valid */
	if (syscall(__NR_bpf, BPF_MAP_LOOKUP_BATCH, &attr, sizeof(attr)) < 0 && errno != ENOENT)
		return -errno;
	if (attr.batch.count < n_entries)
		return -EIO;
	return 0;
}

/* talb_window's arguments, one struct (agent/pcm_native.py _WindowArgs
 * lays it out the same): ctypes converts one pointer, not 30 arguments. */
struct talb_window_args {
	int32_t fd, n_entries, ncpu, fields;
	uint32_t *keys;
	uint64_t *values;
	int32_t n, fb, fk, have_prev;
	const int32_t *pid;
	uint64_t *tot_b, *tot_k, *prev_b, *prev_k, *d_b, *d_k;
	double dt, full, w1, w2;
	const double *cap, *max_wait, *idle;
	double *util, *delay;
	int32_t groups, pad;
	const int32_t *start, *idx;
	double *pcm, *scratch;
	int32_t n_out, pad2;            /* the publication's input, filled here: */
	const int32_t *out_idx;         /* out[i] = pcm[out_idx[i]] (-1: left alone) */
	double *out;
};

/* One switch's window in one call (agent/switch.py, SwitchMonitor.window;
 * agent/window.py ColumnWindow and statsread.PerCpuArrayReader are the
 * reference): read the port counters, sum them over CPUs, take the deltas
 * since the last reading, then PortModel and (groups > 0) GroupPcm.
 *
 * Port i is entry pid[i]; its totals are fields fb (bytes) and fk (packets)
 * summed over ncpu CPUs, written to tot_b/tot_k. With a previous reading
 * (have_prev) and dt > 0 the window's deltas go to d_b/d_k: total - previous,
 * or the total itself where a counter went backwards (the map was made
 * anew). prev_b/prev_k then hold this reading.
 *
 * Totals are kept as u64, as each per-CPU counter is (their sum wraps past
 * 2^64 bytes). Returns -errno (the read failed; nothing changed), 1 (no
 * window: the reading recorded), 2 (the deltas are in d_b/d_k but the maths
 * must go the Python way: a delta at or above EXACT, or packets of no
 * byte), or 0 with
 * util/delay per port and pcm per group member computed. */
int talb_window(const struct talb_window_args *a)
{
	int n = a->n, ncpu = a->ncpu, fields = a->fields, fb = a->fb, fk = a->fk;
	uint64_t *tot_b = a->tot_b, *tot_k = a->tot_k, *prev_b = a->prev_b, *prev_k = a->prev_k;
	uint64_t *d_b = a->d_b, *d_k = a->d_k;
	int rc = lookup_batch(a->fd, (uint32_t)a->n_entries, a->keys, a->values);
	int exact = 1;

	if (rc)
		return rc;
	for (int i = 0; i < n; i++) {
		const uint64_t *v = a->values + (size_t)a->pid[i] * ncpu * fields;
		uint64_t b = 0, k = 0;

		for (int c = 0; c < ncpu; c++) {
			b += v[c * fields + fb];
			k += v[c * fields + fk];
		}
		tot_b[i] = b;
		tot_k[i] = k;
	}
	if (!a->have_prev || a->dt <= 0.0) {
		memcpy(prev_b, tot_b, n * sizeof(*tot_b));
		memcpy(prev_k, tot_k, n * sizeof(*tot_k));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		uint64_t b = tot_b[i] >= prev_b[i] ? tot_b[i] - prev_b[i] : tot_b[i];
		uint64_t k = tot_k[i] >= prev_k[i] ? tot_k[i] - prev_k[i] : tot_k[i];

		if (b >= EXACT || k >= EXACT)
			exact = 0;
		d_b[i] = b;
		d_k[i] = k;
		prev_b[i] = tot_b[i];
		prev_k[i] = tot_k[i];
	}
	if (!exact)
		return 2;
	/* below EXACT: the same numbers as int64 */
	if (talb_port_model(n, (const int64_t *)d_b, (const int64_t *)d_k, a->dt, a->cap,
			    a->max_wait, a->idle, a->full, a->util, a->delay))
		return 2;
	if (a->groups > 0) {
		talb_group_pcm(a->groups, a->start, a->idx, a->util, a->delay, a->w1, a->w2, a->pcm,
			       a->scratch);
		/* each group's P_i in its member order, where the publication reads
		 * them (datapath/talb_parts.c talb_publish): no Python list between */
		for (int i = 0; i < a->n_out; i++)
			if (a->out_idx[i] >= 0)
				a->out[i] = a->pcm[a->out_idx[i]];
	}
	return 0;
}
