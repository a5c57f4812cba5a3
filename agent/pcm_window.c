/* A window's PCM maths for many ports in one call (agent/pcm.py PortModel
 * and GroupPcm): Eq. 1, Eq. 3/4 per port, Eq. 5 per group. The Python code
 * is the reference; these functions perform the same IEEE double operations
 * in the same order (built with -ffp-contract=off: no fused multiply-add), so
 * they return the same bits -- tests/test_pcm.py compares the two on random
 * inputs. Counters are given below 2^53 (the caller checks), where Python's
 * int-to-float conversions and int / int divisions are exact conversions
 * followed by one correctly rounded IEEE division, as here.
 */
#include <stdint.h>

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
