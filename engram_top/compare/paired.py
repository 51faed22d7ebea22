"""A paired A/B comparison over interleaved rounds: each round ran every scenario once with
the same requests (a draw of the round's own), so a round's two samples share what the round
shares (the node's state, the prompts, the time of day) and their difference cancels it.

For each scenario against the baseline and each compared figure:
- the difference of means, medians and p99s, with a 95% interval from a bootstrap over
  rounds (whole rounds are resampled, the same rounds for both sides, so the pairing holds;
  seeded, so the same data gives the same interval);
- for the means, also the exact paired t interval on the per-round differences, and the
  relative change with Fieller's interval for a ratio of means (it carries the baseline
  mean's own uncertainty, where dividing the difference's interval by the baseline mean
  does not);
- the minimum detectable effect: the smallest difference of means this run's noise lets a
  paired t test find at 5% two-sided, 80% of the time.

Pure arithmetic: no I/O, no scipy (engram_top.compare.stats's exact t quantile).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from engram_top.compare import stats
from engram_top.compare.slo import percentile

RESAMPLES = 2000  # bootstrap resamples: the percentile interval's ends settle by then
# Fewer rounds give no bootstrap interval: n rounds have only C(2n-1, n) distinct resamples
# (3 of two rounds, 35 of four), and a percentile interval of so few is the rounds' own
# extremes, far narrower than the truth. Five give 126; below that the means keep their
# paired t interval, which is exact for any n >= 2 under normal round means.
MIN_BOOTSTRAP_ROUNDS = 5
POWER = 0.8  # the minimum detectable effect's power
STATISTICS: dict[str, Callable[[Sequence[float]], float | None]] = {
    "mean": lambda xs: sum(xs) / len(xs) if xs else None,
    "median": lambda xs: percentile(xs, 50),
    "p99": lambda xs: percentile(xs, 99),
}
T_METHOD = "paired t on per-round means (exact Student t quantile, df = rounds - 1)"
FIELLER = "Fieller's interval for a ratio of paired means"
# Fieller's set is unbounded when the baseline's mean is within its own noise of zero (few,
# noisy rounds): no relative interval is honest then.
UNBOUNDED = "no interval: Fieller's set is unbounded (the baseline mean is not clear of zero)"
BOOT_RATIO = "bootstrap over rounds of the ratio"


def bootstrap_method(resamples: int, seed: int) -> str:
    return (f"bootstrap over rounds (percentile, {resamples} resamples of whole rounds, "
            f"seed {seed})")


@dataclass(frozen=True)
class Estimate:
    """One statistic of one figure, a scenario against the baseline, over paired rounds."""

    figure: str  # "ttft_ms", "tpot_ms", "output_tok_s" ...
    statistic: str  # "mean", "median" or "p99"
    rounds: int  # the rounds both sides measured
    baseline: float  # the statistic over the baseline's pooled rounds
    value: float  # the same over the scenario's
    diff: float  # value - baseline, in the figure's unit
    lo: float | None  # 95% interval of diff; None when it cannot be had (one round)
    hi: float | None
    method: str  # which method gave lo, hi
    rel: float | None = None  # value / baseline - 1
    rel_lo: float | None = None
    rel_hi: float | None = None
    rel_method: str = ""
    mde: float | None = None  # means only: the minimum detectable effect (figure's unit)
    t_lo: float | None = None  # means only: the paired t interval beside the bootstrap's
    t_hi: float | None = None

    @property
    def holds_zero(self) -> bool | None:
        """The interval holds 0: the difference is not distinguishable from the noise."""
        return None if self.lo is None or self.hi is None else self.lo <= 0.0 <= self.hi

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "holds_zero": self.holds_zero, "t_method": T_METHOD
                if self.t_lo is not None else None}


def paired_t(diffs: Sequence[float], p: float = 0.975) -> tuple[float, float] | None:
    """The paired t interval of the mean difference (None under two rounds)."""
    n = len(diffs)
    if n < 2:
        return None
    m = sum(diffs) / n
    half = stats.t_quantile(p, n - 1) * math.sqrt(_var(diffs) / n)
    return m - half, m + half


def fieller(base: Sequence[float], other: Sequence[float]
            ) -> tuple[float, float] | None:
    """95% interval of mean(other) / mean(base) for paired rounds (Fieller's theorem): the
    ratios r with (mean_o - r mean_b)^2 <= t^2 var(o - r b) / n. None under two rounds, or
    when the baseline mean is not clearly away from zero (the set is then unbounded)."""
    n = len(base)
    if n < 2 or n != len(other):
        return None
    mb, mo = sum(base) / n, sum(other) / n
    sbb, soo = _var(base), _var(other)
    sbo = sum((b - mb) * (o - mo) for b, o in zip(base, other, strict=True)) / (n - 1)
    t2 = stats.t_quantile(0.975, n - 1) ** 2 / n
    a = mb * mb - t2 * sbb
    b = mb * mo - t2 * sbo
    c = mo * mo - t2 * soo
    disc = b * b - a * c
    if a <= 0 or disc < 0:
        return None
    root = math.sqrt(disc)
    return (b - root) / a, (b + root) / a


def mde(diffs: Sequence[float], power: float = POWER) -> float | None:
    """The smallest true mean difference a paired t test at 5% two-sided finds with the
    given power, at the noise of these per-round differences (None under two rounds)."""
    n = len(diffs)
    if n < 2:
        return None
    df = n - 1
    return (stats.t_quantile(0.975, df) + stats.t_quantile(power, df)) * math.sqrt(
        _var(diffs) / n)


def bootstrap(base: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
              statistic: Callable[[Sequence[float]], float | None], *,
              resamples: int = RESAMPLES, seed: int = 1
              ) -> tuple[tuple[float, float], tuple[float, float] | None] | None:
    """95% percentile intervals of statistic(other) - statistic(base) and of their ratio,
    each side's values pooled over the rounds drawn: whole rounds are drawn with
    replacement, the same rounds for both. None under MIN_BOOTSTRAP_ROUNDS rounds."""
    n = len(base)
    if n < MIN_BOOTSTRAP_ROUNDS or n != len(other):
        return None
    rng = random.Random(seed)
    diffs, ratios = [], []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        sb = statistic([v for i in picks for v in base[i]])
        so = statistic([v for i in picks for v in other[i]])
        if sb is None or so is None:
            continue
        diffs.append(so - sb)
        if sb != 0:
            ratios.append(so / sb - 1.0)
    if not diffs:
        return None
    return _ends(diffs), _ends(ratios) if len(ratios) == len(diffs) else None


def _ends(values: list[float]) -> tuple[float, float]:
    """The 95% percentile interval of some values (none: a caller's bug)."""
    lo, hi = percentile(values, 2.5), percentile(values, 97.5)
    if lo is None or hi is None:
        raise ValueError("a percentile interval of no values")
    return lo, hi


def estimates(figure: str, base: dict[int, list[float]], other: dict[int, list[float]], *,
              statistics: Sequence[str] = ("mean", "median", "p99"),
              resamples: int = RESAMPLES, seed: int = 1) -> list[Estimate]:
    """Every statistic of one figure over the rounds both sides measured (``base`` and
    ``other``: round -> the round's values, one per request, or one per round for a
    per-round figure such as throughput)."""
    rounds = sorted(r for r in base if base[r] and other.get(r))
    if not rounds:
        return []
    b_rounds, o_rounds = [base[r] for r in rounds], [other[r] for r in rounds]
    out = []
    for name in statistics:
        stat = STATISTICS[name]
        sb = stat([v for vs in b_rounds for v in vs])
        so = stat([v for vs in o_rounds for v in vs])
        if sb is None or so is None:
            continue
        boot = bootstrap(b_rounds, o_rounds, stat, resamples=resamples, seed=seed)
        rel = so / sb - 1.0 if sb else None
        est = Estimate(figure, name, len(rounds), sb, so, so - sb,
                       None if boot is None else boot[0][0],
                       None if boot is None else boot[0][1],
                       bootstrap_method(resamples, seed) if boot else
                       f"no interval: a bootstrap needs {MIN_BOOTSTRAP_ROUNDS} rounds",
                       rel=rel)
        if name != "mean":
            if boot is not None and boot[1] is not None:
                est = _with(est, rel_lo=boot[1][0], rel_hi=boot[1][1], rel_method=BOOT_RATIO)
            out.append(est)
            continue
        # The means: a paired t interval and Fieller's ratio, from each round's own mean.
        mb = [sum(vs) / len(vs) for vs in b_rounds]
        mo = [sum(vs) / len(vs) for vs in o_rounds]
        diffs = [o - b for o, b in zip(mo, mb, strict=True)]
        t = paired_t(diffs)
        ratio = fieller(mb, mo)
        est = _with(est, mde=mde(diffs), t_lo=None if t is None else t[0],
                    t_hi=None if t is None else t[1])
        if boot is None and t is not None:  # too few rounds to bootstrap: the t interval
            est = _with(est, lo=t[0], hi=t[1], method=T_METHOD)
        if ratio is not None:
            est = _with(est, rel_lo=ratio[0] - 1.0, rel_hi=ratio[1] - 1.0, rel_method=FIELLER)
        elif boot is not None and boot[1] is not None:
            est = _with(est, rel_lo=boot[1][0], rel_hi=boot[1][1], rel_method=BOOT_RATIO)
        elif t is not None:
            est = _with(est, rel_method=UNBOUNDED)
        out.append(est)
    return out


def _with(est: Estimate, **changes: Any) -> Estimate:
    return Estimate(**{**asdict(est), **changes})


def _var(values: Sequence[float]) -> float:
    m = sum(values) / len(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)
