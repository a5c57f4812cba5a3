"""Mean and 95% confidence interval over a point's seeds (Student t).

scipy is not in the project's environment, so the two-sided 97.5% quantile
of Student's t is a table (df 1..30, then 40, 60, 120 and the normal limit,
linear in 1/df between rows, as printed tables are read); values from any
statistics table, to 3 decimals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CONFIDENCE = 0.95
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
         17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
         25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000,
         120: 1.980}
_Z975 = 1.960


def t_quantile(df: int) -> float:
    """Two-sided 95% critical value of Student's t with ``df`` degrees of freedom."""
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df: a positive integer, got {df!r}")
    if df in _T975:
        return _T975[df]
    rows = sorted(_T975) + [math.inf]
    hi = next(r for r in rows if r > df)
    lo = max(r for r in rows if r < df)
    t_hi = _Z975 if hi == math.inf else _T975[hi]
    # interpolate in 1/df (exact at the rows, the normal value at df = inf)
    x, x_lo, x_hi = 1 / df, 1 / lo, (0.0 if hi == math.inf else 1 / hi)
    return t_hi + (_T975[lo] - t_hi) * (x - x_hi) / (x_lo - x_hi)


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
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(xs)
    if n == 0:
        return Estimate(0, None, None, None)
    mean = sum(xs) / n
    if n == 1:
        return Estimate(1, mean, None, None)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return Estimate(n, mean, sd, t_quantile(n - 1) * sd / math.sqrt(n))


def overlap(a: Estimate, b: Estimate) -> bool | None:
    """Do the two intervals overlap (= "no difference")? None when either
    has no interval (fewer than two values)."""
    if a.half_width is None or b.half_width is None:
        return None
    return a.low <= b.high and b.low <= a.high
