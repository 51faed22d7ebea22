"""Student-t intervals for a comparison's deltas and a bench's goodput: a paired interval
by trial, Welch's on unequal trial sets, and the exact Student-t quantile they use. Pure
arithmetic, no scipy (the dashboard does not depend on it; the tests check against it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Interval:
    """95% interval of the delta, in the delta's terms (a fraction, or the metric's unit)."""

    lo: float
    hi: float
    method: str  # "paired" (by trial index) or "welch"
    df: float | None  # degrees of freedom; None when the spread is zero on both sides


def paired(sample: dict[int, float], base: dict[int, float],
            absolute: bool = False) -> Interval | None:
    """Same trials on both sides: the delta of each pair (its relative change, for a
    relative delta), then a t-interval. Pairing removes what the two runs of one trial
    share (the node's state, the prompts)."""
    trials = sorted(base)
    if absolute:
        rel = [sample[t] - base[t] for t in trials]
    elif any(base[t] == 0 for t in trials):
        return None
    else:
        # Each pair's own ratio carries both runs' noise, the baseline's included.
        rel = [sample[t] / base[t] - 1.0 for t in trials]
    n = len(rel)
    m = sum(rel) / n
    half = t95(n - 1) * math.sqrt(_var(rel) / n)
    return Interval(m - half, m + half, "paired", float(n - 1))


def welch(xs: list[float], bs: list[float], absolute: bool = False) -> Interval | None:
    """Unequal trial sets: Welch's interval on the difference of means (absolute), or
    Fieller's on their ratio for a relative delta."""
    if not absolute:
        return _fieller(bs, xs)
    mx, mb = sum(xs) / len(xs), sum(bs) / len(bs)
    vx, vb = _var(xs) / len(xs), _var(bs) / len(bs)
    se = math.sqrt(vx + vb)
    diff = mx - mb
    if se == 0:
        return Interval(diff, diff, "welch", None)
    # Welch-Satterthwaite's df, fractional: the quantile is exact for any df (no table).
    df = (vx + vb) ** 2 / (vx**2 / (len(xs) - 1) + vb**2 / (len(bs) - 1))
    half = t95(max(1.0, df)) * se
    return Interval(diff - half, diff + half, "welch", df)


def _fieller(bs: list[float], xs: list[float]) -> Interval | None:
    """The relative change mean(xs) / mean(bs) - 1 of two independent sets, with Fieller's
    interval: the ratios r for which mean(xs) - r mean(bs) is within t standard errors of
    zero. Dividing the difference's interval by the baseline mean would take that mean as
    exact; here its own noise widens the interval. None where the baseline mean is not
    clear of zero at this noise (the set of ratios is then unbounded: no interval)."""
    return fieller(sum(xs) / len(xs), _var(xs) / len(xs), len(xs),
                   sum(bs) / len(bs), _var(bs) / len(bs), len(bs))


def fieller(mx: float, vx: float, nx: int, mb: float, vb: float, nb: int,
             method: str = "welch") -> Interval | None:
    """Fieller's interval of mx / mb - 1 from each side's mean, squared standard error
    (variance / n) and count: _fieller's, for sides known only by their moments (a live
    window's histogram)."""
    if mb == 0:
        return None
    if vx == 0 and vb == 0:
        return Interval(mx / mb - 1.0, mx / mb - 1.0, method, None)
    # Welch-Satterthwaite's df of x-bar - r b-bar, taken at the estimate r = mx / mb.
    rvb = (mx / mb) ** 2 * vb
    parts = (vx**2 / (nx - 1) if vx else 0.0) + (rvb**2 / (nb - 1) if rvb else 0.0)
    # Both terms 0 with the baseline's own spread: a side measured as exactly 0 (a window in
    # which nothing was produced) has no noise, and the baseline's n - 1 is the df.
    df = (vx + rvb) ** 2 / parts if parts else nb - 1.0
    t2 = t95(max(1.0, df)) ** 2
    # (mx - r mb)^2 <= t^2 (vx + r^2 vb), as a r^2 - 2 b r + c <= 0.
    a, b, c = mb * mb - t2 * vb, mx * mb, mx * mx - t2 * vx
    disc = b * b - a * c
    if a <= 0 or disc < 0:
        return None
    root = math.sqrt(disc)
    return Interval((b - root) / a - 1.0, (b + root) / a - 1.0, method, df)


def t95(df: float) -> float:
    """Two-sided 95% Student t critical value, t(0.975, df), exact for any df >= 1 (whole
    or Welch's fractional): 1.96 is its limit, never its value."""
    return t_quantile(0.975, df)


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The Student t distribution's p-quantile for df degrees of freedom: the t with
    P(T <= t) = p, found by bisection to the last bit a float holds. It bisects on the
    smaller of the two halves' probabilities (the centre near the median, the tail far out),
    so neither is read as a difference of two numbers near 1."""
    if not df > 0 or math.isinf(df) or math.isnan(df):
        raise ValueError(f"degrees of freedom must be a positive number, got {df}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    in_tail = p > 0.75
    target = 1.0 - p if in_tail else p - 0.5

    def short(t: float) -> bool:  # t is below the quantile
        centre, tail = _halves(t, df)
        return tail > target if in_tail else centre < target
    lo, hi = 0.0, 1.0
    while short(hi):  # the tail falls to 0: this ends (df 1, p 1-1e-12: 2**39)
        lo, hi = hi, hi * 2.0
    while True:
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):  # no float between them: as exact as a float can be
            return hi
        if short(mid):
            lo = mid
        else:
            hi = mid


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    centre, tail = _halves(abs(t), df)
    return 0.5 + centre if t >= 0 else tail


def _halves(t: float, df: float) -> tuple[float, float]:
    """For t >= 0: P(0 < T < t) and P(T > t), from the regularized incomplete beta
    function (P(|T| > t) = I_x(df/2, 1/2), x = df / (df + t^2)); the one its continued
    fraction gives directly is computed, the other is 0.5 less it."""
    if t == 0.0:
        return 0.0, 0.5
    x = df / (df + t * t)
    if x < (df / 2.0 + 1.0) / (df / 2.0 + 2.5):
        tail = 0.5 * _beta_direct(df / 2.0, 0.5, x)
        return 0.5 - tail, tail
    centre = 0.5 * _beta_direct(0.5, df / 2.0, t * t / (df + t * t))
    return centre, 0.5 - centre


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (modified Lentz), on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x < (a + 1.0) / (a + b + 2.0):
        return _beta_direct(a, b, x)
    return 1.0 - _beta_direct(b, a, 1.0 - x)


def _beta_direct(a: float, b: float, x: float) -> float:
    """I_x(a, b) by the continued fraction itself (it converges fast for x below
    (a + 1) / (a + b + 2))."""
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    return front * _beta_fraction(a, b, x) / a


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def mean(values: list[float]) -> float | None:
    """The mean; None of no values (a figure not measured, never 0)."""
    return sum(values) / len(values) if values else None


def _var(values: list[float]) -> float:
    """Sample variance (n - 1)."""
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)
