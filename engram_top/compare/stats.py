"""Student-t intervals for a comparison's deltas and a bench's goodput: a paired interval
by trial, Welch's on unequal trial sets, the t table. Pure arithmetic, no scipy."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Two-sided 95% Student t critical values, t(0.975, df) for df 1..30 (checked against
# scipy.stats.t.ppf). Hard-coded so the product needs no scipy; beyond 30 df the normal 1.96.
_T95 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)
_Z95 = 1.96


@dataclass(frozen=True)
class Interval:
    """95% interval of the delta, in the delta's terms (a fraction, or the metric's unit)."""

    lo: float
    hi: float
    method: str  # "paired" (by trial index) or "welch"
    df: float | None  # degrees of freedom; None when the spread is zero on both sides


def paired(sample: dict[int, float], base: dict[int, float],
            absolute: bool = False) -> Interval | None:
    """Same trials on both sides: the delta of each pair, then a t-interval. Pairing
    removes what the two runs of one trial share (the node's state, the prompts)."""
    if absolute:
        rel = [sample[t] - base[t] for t in sorted(base)]
    elif any(base[t] == 0 for t in base):
        return None
    else:
        rel = [sample[t] / base[t] - 1.0 for t in sorted(base)]
    n = len(rel)
    m = sum(rel) / n
    half = t95(n - 1) * math.sqrt(_var(rel) / n)
    return Interval(m - half, m + half, "paired", float(n - 1))


def welch(xs: list[float], bs: list[float], absolute: bool = False) -> Interval:
    """Unequal trial sets: Welch's interval on the difference of means, divided by the
    baseline mean so it reads as a relative delta like the point estimate (not divided for
    an absolute delta)."""
    mx, mb = sum(xs) / len(xs), sum(bs) / len(bs)
    scale = 1.0 if absolute else mb
    vx, vb = _var(xs) / len(xs), _var(bs) / len(bs)
    se = math.sqrt(vx + vb)
    diff = mx - mb
    if se == 0:
        return Interval(diff / scale, diff / scale, "welch", None)
    # Welch-Satterthwaite; the t table is by whole df, so round down (the wider interval).
    df = (vx + vb) ** 2 / (vx**2 / (len(xs) - 1) + vb**2 / (len(bs) - 1))
    half = t95(max(1, math.floor(df))) * se
    lo, hi = (diff - half) / scale, (diff + half) / scale
    return Interval(min(lo, hi), max(lo, hi), "welch", df)


def t95(df: int) -> float:
    """Two-sided 95% Student t critical value for df degrees of freedom (1.96 beyond 30)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else _Z95


def mean(values: list[float]) -> float | None:
    """The mean; None of no values (a figure not measured, never 0)."""
    return sum(values) / len(values) if values else None


def _var(values: list[float]) -> float:
    """Sample variance (n - 1)."""
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)
