"""Statistics of a sweep: a point's mean and 95% interval over its seeds,
and paired comparisons of two schemes (or settings) run on the same seeds.

A paired comparison takes one value per seed from each side, a and b. Its
test is Student's paired t (scipy) on the per-seed log-ratios ln(a/b): its
interval, taken back with exp, is the ratio's interval that the reports
show, so a verdict and the interval beside it always come from the same
test (an interval that excludes 1 is a significant test, before Holm).
Ratios are what the schemes are compared by (the paper's "x% lower FCT"),
and the log makes seeds of different scale (a light and a heavy
background draw) weigh alike. Only where a value is 0 or negative (e.g.
0 timeouts at a seed) has no log-ratio; then the same t runs on the
per-seed differences a − b and the difference interval is the one shown
(``scale`` says which). The differences' mean and interval are reported
beside, in the metric's unit. Its verdict, from the point of view of a:

- *better* / *worse*: the paired t rejects "no difference" at 5% (after
  the Holm correction across the table it belongs to, when one is given);
- *equivalent within ±M%*: not that, and the equivalence test (two one-sided
  t tests, TOST, on the log-ratio, bounds ln(1 − M) and ln(1 + M)) rejects
  "the ratio is outside 1 ± M" at 5%;
- *inconclusive*: neither (too few seeds, or too noisy, to tell).

With 10 or more pairs a percentile bootstrap interval of the mean is given
too, as a check on the t interval (which assumes roughly normal per-seed
values): of the differences (``bootstrap``, in the metric's unit) and of
the values the test ran on (``bootstrap_tested``: the log-ratios, shown
as a ratio, or the differences). ``bootstrap_agrees`` says whether it
decides as the t interval does (both exclude "no difference", or neither);
:func:`bootstrap_agreement` counts that over a table. Intervals of two unpaired
estimates overlapping (``overlap``) is a plot aid only, not a verdict.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from common.excerpt import shown

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
#: default equivalence margin of the TOST: the ratio within 1 ± 10%
EQUIV_MARGIN = 0.10
#: fewest pairs for which a bootstrap interval is reported
BOOTSTRAP_MIN_N = 10
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 20240617


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided critical value of Student's t with ``df`` degrees of freedom
    (the 97.5% quantile for 95%)."""
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df: a positive integer, got {shown(df)}")
    return float(_st.t.ppf(1 - (1 - confidence) / 2, df))


def _numbers(values) -> list[float]:
    return [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


@dataclass(frozen=True)
class Estimate:
    n: int
    mean: float | None
    sd: float | None          # sample standard deviation (n - 1)
    half_width: float | None  # of the 95% interval; None with fewer than 2 values

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "ci95_half": self.half_width,
                "ci95_low": self.low, "ci95_high": self.high}


def estimate(values) -> Estimate:
    """Mean and t interval of the values that are numbers (None: no value,
    e.g. a class with every tensor censored, is left out and not counted)."""
    xs = _numbers(values)
    n = len(xs)
    if n == 0:
        return Estimate(0, None, None, None)
    mean = sum(xs) / n
    if n == 1:
        return Estimate(1, mean, None, None)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(n, mean, sd, t_quantile(n - 1) * sd / math.sqrt(n))


def overlap(a: Estimate, b: Estimate) -> bool | None:
    """Do the two intervals overlap? A plot aid (error bars), not a verdict:
    paired comparisons (``paired``) decide. None when either has no interval."""
    if a.half_width is None or b.half_width is None:
        return None
    return a.low <= b.high and b.low <= a.high


def t_test(xs: list[float]) -> float | None:
    """Two-sided p of Student's one-sample t test of mean 0 (None: n < 2)."""
    n = len(xs)
    if n < 2:
        return None
    e = estimate(xs)
    if e.sd == 0:
        return 1.0 if e.mean == 0 else 0.0
    t = e.mean / (e.sd / math.sqrt(n))
    return float(2 * _st.t.sf(abs(t), n - 1))


def tost(xs: list[float], low: float, high: float) -> float | None:
    """p of the two one-sided t tests (TOST) of H0: mean <= low or mean >=
    high; small p = the mean is between the bounds (equivalence). None: n < 2."""
    n = len(xs)
    if n < 2:
        return None
    e = estimate(xs)
    if e.sd == 0:
        return 0.0 if low < e.mean < high else 1.0
    se = e.sd / math.sqrt(n)
    p_low = _st.t.sf((e.mean - low) / se, n - 1)      # H0: mean <= low
    p_high = _st.t.cdf((e.mean - high) / se, n - 1)   # H0: mean >= high
    return float(max(p_low, p_high))


def bootstrap_interval(xs: list[float], confidence: float = CONFIDENCE,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (scipy.stats.bootstrap,
    fixed seed so a report is reproducible); None below BOOTSTRAP_MIN_N values."""
    if len(xs) < BOOTSTRAP_MIN_N:
        return None
    res = _st.bootstrap((np.asarray(xs),), np.mean, confidence_level=confidence,
                        n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                        random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error), in the input's
    order; None entries are no test and are left out of the family."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    m = len(idx)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def holm_by(rows: list[dict], family: str) -> None:
    """Each row's paired test (``row["pair"]``) Holm-corrected within its
    family (the rows sharing ``row[family]``): sets ``p_holm`` and
    ``p_equiv_holm`` on every row."""
    for value in dict.fromkeys(r[family] for r in rows):
        fam = [r for r in rows if r[family] == value]
        for key in ("p", "p_equiv"):
            for r, q in zip(fam, holm([getattr(r["pair"], key) for r in fam])):
                r[key + "_holm"] = q


@dataclass(frozen=True)
class Paired:
    """a against b on the same seeds."""
    n: int                                   # pairs (seeds with a value on both sides)
    diff: Estimate                           # of a − b per seed
    log_ratio: Estimate                      # of ln(a/b) per seed (None when a value <= 0)
    p: float | None                          # the paired t on ``scale``, two-sided
    p_equiv: float | None                    # TOST on the log-ratio, bounds ln(1 ∓ margin)
    margin: float
    lower_is_better: bool
    bootstrap: tuple[float, float] | None    # of the mean difference, n >= BOOTSTRAP_MIN_N
    #: what ``p`` tests: "log-ratio" (every value > 0) or "difference"
    scale: str = "log-ratio"
    #: the paired t on the differences, beside (a check; not the verdict's)
    p_diff: float | None = None
    #: the bootstrap interval of the mean on ``scale`` (log-ratio or difference)
    bootstrap_tested: tuple[float, float] | None = None

    @property
    def bootstrap_agrees(self) -> bool | None:
        """Does the bootstrap interval on the tested scale exclude 0 (no
        difference) exactly when the t interval does? None below
        BOOTSTRAP_MIN_N pairs."""
        tested = self.log_ratio if self.scale == "log-ratio" else self.diff
        if self.bootstrap_tested is None or tested.low is None:
            return None
        lo, hi = self.bootstrap_tested
        return (tested.low > 0 or tested.high < 0) == (lo > 0 or hi < 0)

    @property
    def boot_ratio(self) -> tuple[float, float] | None:
        """The bootstrap interval of the ratio (log-ratio scale), or None."""
        if self.scale != "log-ratio" or self.bootstrap_tested is None:
            return None
        return math.exp(self.bootstrap_tested[0]), math.exp(self.bootstrap_tested[1])

    @property
    def ratio(self) -> float | None:
        """Geometric mean of the per-seed ratios a/b."""
        return None if self.log_ratio.mean is None else math.exp(self.log_ratio.mean)

    @property
    def ratio_low(self) -> float | None:
        return None if self.log_ratio.low is None else math.exp(self.log_ratio.low)

    @property
    def ratio_high(self) -> float | None:
        return None if self.log_ratio.high is None else math.exp(self.log_ratio.high)

    def verdict(self, p: float | None = None, p_equiv: float | None = None,
                alpha: float = ALPHA) -> str:
        """better / worse / equivalent within ±M% / inconclusive, for a; ``p``
        and ``p_equiv`` replace the raw p-values (e.g. Holm-adjusted ones)."""
        p = self.p if p is None else p
        p_equiv = self.p_equiv if p_equiv is None else p_equiv
        if self.n < 2 or p is None:
            return "no test (fewer than 2 pairs)"
        if p < alpha:
            effect = self.log_ratio if self.scale == "log-ratio" else self.diff
            lower = effect.mean < 0
            return "better" if lower == self.lower_is_better else "worse"
        if p_equiv is not None and p_equiv < alpha:
            return f"equivalent within ±{self.margin:.0%}"
        return "inconclusive"

    def excludes_ratio(self, r: float) -> str | None:
        """Is the ratio a/b = ``r`` (e.g. the paper's effect) outside our 95%
        interval of the ratio? 'excluded (ours below)', 'excluded (ours
        above)', 'not excluded'; None without an interval."""
        if self.ratio_low is None:
            return None
        if self.ratio_high < r:
            return "excluded (ours below)"
        if self.ratio_low > r:
            return "excluded (ours above)"
        return "not excluded"

    def to_dict(self) -> dict:
        return {"n": self.n, "diff_mean": self.diff.mean, "diff_low": self.diff.low,
                "diff_high": self.diff.high, "ratio": self.ratio, "ratio_low": self.ratio_low,
                "ratio_high": self.ratio_high, "p": self.p, "p_equiv": self.p_equiv,
                "margin": self.margin, "scale": self.scale, "p_diff": self.p_diff,
                "verdict": self.verdict(),
                "boot_low": self.bootstrap[0] if self.bootstrap else None,
                "boot_high": self.bootstrap[1] if self.bootstrap else None,
                "boot_ratio_low": self.boot_ratio[0] if self.boot_ratio else None,
                "boot_ratio_high": self.boot_ratio[1] if self.boot_ratio else None,
                "boot_agrees": self.bootstrap_agrees}


def paired(a, b, lower_is_better: bool = True, margin: float = EQUIV_MARGIN) -> Paired:
    """Paired comparison of a and b, aligned lists (one entry per seed);
    a seed with no number on either side is left out."""
    if len(a) != len(b):
        raise ValueError("paired: a and b must be aligned, one entry per seed")
    if not 0 < margin < 1:
        raise ValueError(f"margin: between 0 and 1, got {shown(margin)}")
    pairs = [(x, y) for x, y in zip(a, b) if _numbers([x]) and _numbers([y])]
    d = [float(x) - float(y) for x, y in pairs]
    logs = [math.log(float(x) / float(y)) for x, y in pairs] \
        if pairs and all(float(x) > 0 and float(y) > 0 for x, y in pairs) else []
    on_logs = bool(logs)
    return Paired(n=len(pairs), diff=estimate(d), log_ratio=estimate(logs),
                  p=t_test(logs if on_logs else d),
                  p_equiv=tost(logs, math.log(1 - margin), math.log(1 + margin)),
                  margin=margin, lower_is_better=lower_is_better,
                  bootstrap=bootstrap_interval(d),
                  scale="log-ratio" if on_logs else "difference", p_diff=t_test(d),
                  bootstrap_tested=bootstrap_interval(logs) if on_logs else bootstrap_interval(d))


def bootstrap_agreement(pairs) -> tuple[int, int]:
    """(comparisons with a bootstrap interval, those where it decides as the
    t interval does) over ``pairs`` (Paired)."""
    checked = [p.bootstrap_agrees for p in pairs if p.bootstrap_agrees is not None]
    return len(checked), sum(checked)


# --- a quantile's interval from one run's values ----------------------------------------
def quantile_ci(values, q: float = 0.99, confidence: float = CONFIDENCE) -> dict:
    """The ``q``-quantile of one run's values (nearest rank, as the runs
    report their p99: the ceil(q n)-th smallest) with its distribution-free
    interval from order statistics: [X_(l), X_(u)], l and u the ranks for
    which K, the count of values below the true quantile (binomial, n and
    q), satisfies P(K <= l - 1) <= a and P(K >= u) <= a, a = (1 -
    confidence) / 2 on each side. Coverage P(l <= K <= u - 1) >= confidence
    whatever the distribution (continuous). A bound that would need a rank
    beyond the values is None: a p99's upper bound needs q^n <= a, n >= 368
    at 95%. Returns n, the estimate and its rank, the bounds, their ranks
    and the exact coverage."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if n == 0:
        return {"n": 0, "q": q, "estimate": None, "rank": None, "low": None, "high": None,
                "low_rank": None, "high_rank": None, "coverage": None}
    a = (1 - confidence) / 2
    rank = max(1, math.ceil(q * n - 1e-9))
    dist = _st.binom(n, q)
    # l - 1: the largest k with P(K <= k) <= a (none when P(K = 0) > a)
    k = int(dist.ppf(a))
    while k >= 0 and dist.cdf(k) > a:
        k -= 1
    low_rank = k + 1 if k >= 0 else None
    # u - 1: the smallest k with P(K <= k) >= 1 - a; u = n + 1 has no value
    k = int(dist.ppf(1 - a))
    while k > 0 and dist.cdf(k - 1) >= 1 - a:
        k -= 1
    high_rank = k + 1 if k + 1 <= n else None
    coverage = (dist.cdf(high_rank - 1) if high_rank else 1.0) - \
        (dist.cdf(low_rank - 1) if low_rank else 0.0)
    return {"n": n, "q": q, "estimate": xs[rank - 1], "rank": rank,
            "low": xs[low_rank - 1] if low_rank else None,
            "high": xs[high_rank - 1] if high_rank else None,
            "low_rank": low_rank, "high_rank": high_rank, "coverage": float(coverage)}


def interaction(tb: dict, tf: dict, xb: dict, xf: dict, seeds: list, lower: bool) -> Paired:
    """Per seed ((T,B) − (T,F)) − ((X,B) − (X,F)): its mean and 95% paired-t
    interval; its ratio (T,B)/(T,F) over (X,B)/(X,F) with the interval, p
    and equivalence test (TOST within ±10%) of the paired t on the per-seed
    log-ratios -- the one test the verdict uses, as for every other row (on
    the differences only where a value is not positive)."""
    add = paired([tb[s] - tf[s] for s in seeds], [xb[s] - xf[s] for s in seeds],
                 lower_is_better=lower)
    if all(tf[s] and xf[s] for s in seeds):
        mul = paired([tb[s] / tf[s] for s in seeds], [xb[s] / xf[s] for s in seeds],
                     lower_is_better=lower)
        add = dataclasses.replace(add, log_ratio=mul.log_ratio, p_equiv=mul.p_equiv,
                                  p=mul.p, scale=mul.scale)
    return add
