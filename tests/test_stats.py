"""experiments/sweep/stats.py: t quantiles, paired comparisons (t, log-ratio, TOST,
bootstrap), Holm, and the paper-effect flag, against values checked by hand
or published with the data."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from experiments.sweep.stats import (bootstrap_interval, estimate, holm, paired, t_quantile,
                                     t_test, tost)

# Student's sleep data (Cushny & Peebles 1905; R's `sleep`): extra hours of sleep of the
# same 10 patients under two drugs. R's documented paired test,
# t.test(extra ~ group, data = sleep, paired = TRUE):
# t = -4.0621, df = 9, p-value = 0.002833, 95% CI -2.4598858 -0.7001142, mean -1.58
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def test_t_quantiles_from_scipy_match_printed_tables():
    # any printed t table, two-sided 95%
    for df, t in ((1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (30, 2.042), (120, 1.980)):
        assert t_quantile(df) == pytest.approx(t, abs=5e-4)
    assert t_quantile(10 ** 6) == pytest.approx(1.960, abs=5e-4)
    assert t_quantile(4, 0.90) == pytest.approx(2.132, abs=5e-4)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0)


def test_paired_t_on_the_sleep_data_matches_r():
    pr = paired(SLEEP_1, SLEEP_2)
    assert pr.n == 10
    assert pr.diff.mean == pytest.approx(-1.58)
    assert (pr.diff.low, pr.diff.high) == pytest.approx((-2.4598858, -0.7001142), abs=1e-6)
    assert pr.p == pytest.approx(0.002833, abs=5e-7)
    # t itself: -1.58 / (s / sqrt(10)) = -4.0621
    assert pr.diff.mean / (pr.diff.sd / math.sqrt(10)) == pytest.approx(-4.0621, abs=1e-4)
    # values <= 0 have no log-ratio: no ratio, no equivalence test; the t runs on the
    # differences, and says so
    assert pr.ratio is None and pr.p_equiv is None
    assert pr.scale == "difference" and pr.p_diff == pr.p
    assert pr.verdict() == "better"          # a lower, lower is better


def test_paired_t_by_hand():
    # differences 1..5: mean 3, s = sqrt(2.5), t = 3 / (sqrt(2.5)/sqrt(5)) = 4.2426, df 4;
    # two-sided p = 0.01324 (t table: between 0.01 (4.604) and 0.02 (3.747))
    b = [10.0, 20.0, 30.0, 40.0, 50.0]
    a = [x + d for x, d in zip(b, [1, 2, 3, 4, 5])]
    pr = paired(a, b)
    assert pr.diff.mean == pytest.approx(3.0)
    assert pr.diff.half_width == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5), abs=1e-3)
    assert pr.p_diff == pytest.approx(0.01324, abs=5e-5)
    assert t_test([1, 2, 3, 4, 5]) == pytest.approx(pr.p_diff)
    # the ratio from the logs: 11/10, 22/20, ... = 1.1 at every seed, so the test that
    # decides (on the log-ratios) has no spread at all: p 0, and the interval is 1.1 itself
    assert pr.scale == "log-ratio" and pr.p == 0.0
    assert (pr.ratio, pr.ratio_low, pr.ratio_high) == pytest.approx((1.1, 1.1, 1.1))
    assert pr.verdict() == "worse" and paired(a, b, lower_is_better=False).verdict() == "better"
    # log-ratios 0.01..0.05: the same t as the differences 1..5 above, p = 0.01324
    e = paired([x * math.exp(k / 100) for x, k in zip(b, [1, 2, 3, 4, 5])], b)
    assert e.p == pytest.approx(0.01324, abs=5e-5)
    assert e.ratio == pytest.approx(math.exp(0.03))
    assert pr.bootstrap is None              # fewer than 10 pairs


def test_the_verdict_and_the_ratio_interval_come_from_one_test():
    # seeds of different scale (one heavy background draw): a is ~2.4x b at every seed.
    # The t on the raw differences (1.4, 1.4, 1.4, 1.4, 14) is not significant; the
    # ratio's interval is narrow and far from 1 -- the verdict follows the interval.
    b = [1.0, 1.1, 0.9, 1.0, 10.0]
    a = [x * r for x, r in zip(b, [2.3, 2.5, 2.4, 2.45, 2.35])]
    pr = paired(a, b)
    assert pr.p_diff > 0.05
    assert pr.ratio_low > 2.2 and pr.ratio_high < 2.6 and pr.p < 0.001
    assert pr.verdict() == "worse"
    # on random data of every kind: the interval excludes 1 exactly when p < 0.05
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 12))
        base = rng.lognormal(0, 1, n)
        a = base * rng.lognormal(rng.normal(0, 0.2), rng.uniform(0.01, 0.5), n)
        pr = paired(list(a), list(base))
        if pr.ratio_low is None or abs(pr.p - 0.05) < 1e-9:
            continue
        assert (pr.ratio_high < 1 or pr.ratio_low > 1) == (pr.p < 0.05)
        if pr.p < 0.05:
            assert (pr.verdict() == "better") == (pr.ratio < 1)


def test_pairs_are_by_seed_and_missing_values_drop_the_seed():
    a = [1.0, None, 3.0, 4.0]
    b = [2.0, 5.0, float("nan"), 5.0]
    pr = paired(a, b)
    assert pr.n == 2 and pr.diff.mean == pytest.approx(-1.0)
    assert paired([1.0], [2.0]).verdict() == "no test (fewer than 2 pairs)"
    with pytest.raises(ValueError, match="aligned"):
        paired([1.0], [1.0, 2.0])


def test_equivalence_verdict_on_constructed_data():
    b = [100.0, 80.0, 120.0, 90.0, 110.0]
    # clearly equivalent: every ratio within 1 +- 1%
    same = paired([x * r for x, r in zip(b, [1.01, 0.99, 1.00, 1.005, 0.995])], b)
    assert same.p > 0.05 and same.p_equiv < 0.05
    assert same.verdict() == "equivalent within ±10%"
    # clearly different: TaLB at half the baseline's FCT
    half = paired([x * r for x, r in zip(b, [0.50, 0.52, 0.49, 0.51, 0.50])], b)
    assert half.verdict() == "better" and half.ratio == pytest.approx(0.504, abs=0.01)
    # too noisy: ratios from 0.5 to 2, centred on 1 -> neither test says anything
    noisy = paired([x * r for x, r in zip(b, [0.5, 2.0, 1.0, 0.6, 1.7])], b)
    assert noisy.p > 0.05 and noisy.p_equiv > 0.05 and noisy.verdict() == "inconclusive"
    # the margin is the caller's: +-0.5% is too tight for the first set's +-1% ratios
    a = [x * r for x, r in zip(b, [1.01, 0.99, 1.00, 1.005, 0.995])]
    assert paired(a, b, margin=0.005).verdict() == "inconclusive"


def test_tost_is_the_90_percent_interval_inside_the_bounds():
    xs = [0.01, -0.02, 0.03, 0.00, 0.015]
    e90_low = estimate(xs).mean - t_quantile(4, 0.90) * estimate(xs).sd / math.sqrt(5)
    e90_high = estimate(xs).mean + t_quantile(4, 0.90) * estimate(xs).sd / math.sqrt(5)
    lo, hi = math.log(0.9), math.log(1.1)
    assert (tost(xs, lo, hi) < 0.05) == (lo < e90_low and e90_high < hi)
    # at the bound exactly: p = 0.05 on that side
    assert tost(xs, e90_low, 1.0) == pytest.approx(0.05)
    assert tost([0.0, 0.0], -0.1, 0.1) == 0.0 and tost([0.2, 0.2], -0.1, 0.1) == 1.0


def test_holm_on_a_known_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; step-down keeps
    # the running maximum: 0.02, 0.03, 0.06, 0.06 (by hand)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # no test (None) is no member of the family; capped at 1
    assert holm([0.5, None, 0.4]) == [pytest.approx(0.8), None, pytest.approx(0.8)]
    assert holm([0.9, 0.8]) == [1.0, 1.0]
    assert holm([]) == []


def test_holm_changes_the_verdict():
    b = [10.0, 20.0, 30.0, 40.0, 50.0]
    pr = paired([x * math.exp(k / 10) for x, k in zip(b, [1, 2, 3, 4, 5])], b)    # p = 0.013
    assert pr.verdict() == "worse"
    assert pr.verdict(p=holm([pr.p] + [0.5] * 14)[0]) == "inconclusive"


def test_paper_effect_excluded_flag():
    b = [100.0, 80.0, 120.0, 90.0, 110.0]
    near_one = paired([x * r for x, r in zip(b, [1.05, 0.95, 1.10, 0.98, 1.02])], b)
    assert near_one.ratio_low < 1 < near_one.ratio_high
    # the paper's -68% (ratio 0.32) is far below our interval: excluded
    assert near_one.excludes_ratio(0.32) == "excluded (ours above)"
    assert near_one.excludes_ratio(1.0) == "not excluded"
    assert near_one.excludes_ratio(2.37) == "excluded (ours below)"
    noisy = paired([x * r for x, r in zip(b, [0.3, 2.0, 1.0, 0.4, 1.7])], b)
    assert noisy.excludes_ratio(0.32) == "not excluded"
    assert paired([1.0], [2.0]).excludes_ratio(0.5) is None


def test_bootstrap_agrees_with_t_from_ten_pairs():
    # sleep data (n = 10): the percentile bootstrap interval is close to R's t interval
    pr = paired(SLEEP_1, SLEEP_2)
    lo, hi = pr.bootstrap
    assert lo == pytest.approx(-2.46, abs=0.3) and hi == pytest.approx(-0.70, abs=0.3)
    # 40 normal differences: within a tenth of the t interval's half-width on each side
    xs = list(np.random.default_rng(1).normal(5.0, 2.0, 40))
    e = estimate(xs)
    blo, bhi = bootstrap_interval(xs)
    assert abs(blo - e.low) < 0.1 * e.half_width and abs(bhi - e.high) < 0.1 * e.half_width
    assert bootstrap_interval(xs[:9]) is None
    assert bootstrap_interval(xs) == bootstrap_interval(xs)        # fixed seed


def test_bootstrap_on_the_tested_scale_and_its_agreement_with_t():
    """From 10 pairs the bootstrap also runs on the values the test ran on
    (the log-ratios): close to the t interval of the ratio on well-behaved
    data, and agreeing with it on "no difference" -- and not where one seed
    far off the rest makes the t interval's normality doubtful."""
    from experiments.sweep.stats import bootstrap_agreement

    rng = np.random.default_rng(7)
    b = list(rng.uniform(1.0, 10.0, 12))
    ratios = list(np.exp(rng.normal(math.log(0.8), 0.05, 12)))
    pr = paired([x * r for x, r in zip(b, ratios)], b)
    assert pr.scale == "log-ratio" and pr.n == 12
    blo, bhi = pr.boot_ratio
    w = pr.ratio_high - pr.ratio_low
    assert abs(blo - pr.ratio_low) < 0.2 * w and abs(bhi - pr.ratio_high) < 0.2 * w
    assert pr.ratio_high < 1 and bhi < 1 and pr.bootstrap_agrees is True
    same = paired([x * r for x, r in zip(b, [0.95, 1.05] * 6)], b)
    assert same.ratio_low < 1 < same.ratio_high
    assert same.bootstrap_agrees is True and same.to_dict()["boot_agrees"] is True
    # eleven seeds at 1.00-1.02, one at 2.5: t's interval holds 1, the bootstrap's does not
    skew = paired([y * r for y, r in zip(b, [1.0, 1.01, 1.02, 1.0, 1.01, 1.02, 1.0, 1.01, 1.02,
                                             1.0, 1.01, 2.5])], b)
    assert skew.ratio_low < 1 < skew.ratio_high and skew.boot_ratio[0] > 1
    assert skew.bootstrap_agrees is False
    assert bootstrap_agreement([pr, same, skew, paired([1.0, 2.0], [2.0, 3.0])]) == (3, 2)
    # on differences where a value is 0: the bootstrap of the differences
    zeros = paired([0.0] + [1.0] * 11, [1.0] * 12)
    assert zeros.scale == "difference" and zeros.boot_ratio is None
    assert zeros.bootstrap_tested == zeros.bootstrap


def test_committed_fig10_paired_numbers():
    """The committed results/fig10 agrees with its own runs: every TaLB pair
    at the headline (top) load in paired.csv (n, mean difference, 95%
    interval, ratio and its interval, p) is what a reviewer gets from runs.csv
    with scipy's paired t (ttest_rel) on the values and on their logs, seeds
    paired by number, CPU-bound runs left out."""
    import csv
    from pathlib import Path

    from scipy import stats as sst

    results = Path(__file__).resolve().parent.parent / "results" / "fig10"
    runs = list(csv.DictReader(open(results / "runs.csv", newline="")))
    top = max(float(r["load"]) for r in runs)
    rows = [r for r in runs if r["status"] == "ok" and float(r["load"]) == top]
    reported = {(r["a"], r["b"], r["metric"]): r
                for r in csv.DictReader(open(results / "paired.csv", newline=""))
                if float(r["load"]) == top}

    def by_seed(scheme, metric):
        return {int(r["seed"]): float(r[metric]) for r in rows if r["scheme"] == scheme}

    checked = 0
    for base in ("ecmp", "rps", "conga"):
        for metric in ("short_netfct_mean_s", "short_fct_mean_s", "samples_per_s"):
            a, b = by_seed(base, metric), by_seed("talb", metric)
            seeds = sorted(set(a) & set(b))
            d = [a[s] - b[s] for s in seeds]
            t = sst.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds])
            lo, hi = t.confidence_interval(0.95)
            r = reported[(base, "talb", metric)]
            assert int(r["n"]) == len(seeds) >= 5, (base, metric)
            assert float(r["diff_mean"]) == pytest.approx(sum(d) / len(d), rel=1e-9)
            assert (float(r["diff_low"]), float(r["diff_high"])) == (pytest.approx(lo), pytest.approx(hi))
            assert float(r["p_diff"]) == pytest.approx(t.pvalue)
            # the verdict's test: the same on the logs, whose interval is the ratio's
            tl = sst.ttest_rel(np.log([a[s] for s in seeds]), np.log([b[s] for s in seeds]))
            llo, lhi = tl.confidence_interval(0.95)
            assert r["scale"] == "log-ratio"
            assert float(r["p"]) == pytest.approx(tl.pvalue)
            assert (float(r["ratio_low"]), float(r["ratio_high"])) == \
                (pytest.approx(math.exp(llo)), pytest.approx(math.exp(lhi)))
            checked += 1
    assert checked == 9


# --- a p99's distribution-free interval (issue 36, item 7) -------------------------------
def _binom_cdf(k: int, n: int, q: float) -> float:
    """P(K <= k), K ~ binomial(n, q), summed by hand (no scipy)."""
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k + 1))


def test_quantile_ci_median_of_ten_is_the_textbook_interval():
    """n = 10, the median: [X_(2), X_(9)], coverage 1 − 2·11/1024 = 0.978515625
    (P(K <= 1) = (1 + 10)/1024); the next narrower, [X_(3), X_(8)], covers
    only 1 − 2·56/1024 = 0.89."""
    from experiments.sweep.stats import quantile_ci

    ci = quantile_ci([7, 3, 9, 1, 10, 2, 8, 6, 4, 5], 0.5)
    assert (ci["low_rank"], ci["high_rank"], ci["low"], ci["high"]) == (2, 9, 2, 9)
    assert ci["coverage"] == pytest.approx(1 - 2 * 11 / 1024, abs=1e-12)
    assert ci["estimate"] == 5 and ci["rank"] == 5 and ci["n"] == 10
    # n = 5: even [X_(1), X_(5)] covers only 1 − 2/32 = 0.9375: no bound either side
    ci = quantile_ci(range(5), 0.5)
    assert ci["low"] is None and ci["high"] is None


def test_quantile_ci_p99_needs_368_values_for_an_upper_bound():
    """The upper bound X_(n) of a p99 covers only if P(all n below) = 0.99^n
    <= 2.5%: 0.99^367 = 0.02502 > 0.025, 0.99^368 = 0.02477."""
    from experiments.sweep.stats import quantile_ci

    assert 0.99 ** 367 > 0.025 >= 0.99 ** 368
    assert quantile_ci(range(367), 0.99)["high"] is None
    ci = quantile_ci(range(368), 0.99)
    assert ci["high_rank"] == 368 and ci["high"] == 367
    # the lower rank l: P(K <= l - 1) <= 2.5% < P(K <= l), by hand
    l = ci["low_rank"]
    assert _binom_cdf(l - 1, 368, 0.99) <= 0.025 < _binom_cdf(l, 368, 0.99)
    assert ci["coverage"] == pytest.approx(1 - 0.99 ** 368 - _binom_cdf(l - 1, 368, 0.99))


def test_quantile_ci_of_a_runs_480_short_tensors():
    """A run's ~480 short tensors: the p99 is the 476th value (5th largest),
    its interval the 471st to the 480th (10th largest to the largest)."""
    from experiments.sweep.stats import quantile_ci

    values = [float(i) for i in range(1, 481)]
    random.Random(4).shuffle(values)
    ci = quantile_ci(values, 0.99)
    assert (ci["rank"], ci["estimate"]) == (476, 476.0)
    assert (ci["low_rank"], ci["high_rank"], ci["low"], ci["high"]) == (471, 480, 471.0, 480.0)
    assert _binom_cdf(470, 480, 0.99) <= 0.025 < _binom_cdf(471, 480, 0.99)
    assert ci["coverage"] >= 0.95
    assert quantile_ci([], 0.99)["estimate"] is None


def test_quantile_ci_covers_as_it_says():
    """Simulated: the interval holds the true p99 of an exponential in at
    least 95% of 2000 runs of 480 values (its exact coverage is 96.7%)."""
    from experiments.sweep.stats import quantile_ci

    rng = random.Random(11)
    true = -math.log(0.01)
    hits = sum(ci["low"] <= true <= ci["high"] for ci in
               (quantile_ci([rng.expovariate(1.0) for _ in range(480)], 0.99)
                for _ in range(2000)))
    assert hits / 2000 >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / 2000)
