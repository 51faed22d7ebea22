"""Windowed statistics from successive scrapes, as dashboards get them from PromQL.

``histogram_quantile`` follows Prometheus (promql/quantile.go, classic buckets);
``quantile_bound`` gives the same figure with its bucket's bounds and whether that bucket is
too wide for the figure to be a measurement (COARSE_SHARE: the rule, decided here once);
``WindowedHistogram`` and ``WindowedRate`` play the part of ``rate()`` over a window: they
take the difference between the oldest retained scrape and the newest. Unlike ``rate()``
they do not extrapolate to the window edges, and a counter reset (server restarted) restarts
the window instead of being stitched over: after a restart the dashboard is watching a new
process, and mixing both would blur the comparison.

Timestamps are monotonic seconds from the caller; nothing here reads a clock.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

from collectors.promtext import Histogram
from collectors.readings import Bucketed, Quantiles

__all__ = ["COARSE_SHARE", "WindowedHistogram", "WindowedRate", "bucket_bounds", "coarse",
           "histogram_quantile", "quantile_bound"]

_EMPTY = Quantiles(p50=None, p99=None, mean=None, count=0.0)


# A quantile whose bucket is wider than this share of its interpolated value is "coarse":
# the interpolation, not a measurement, and the screens and files show the bucket's bounds
# instead ("<= 100 ms", "100-200 ms"). The first bucket from 0 always is (its width is its
# upper bound, never less than the value), and so is the open +Inf one ("> 30 s").
COARSE_SHARE = 0.5


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative ``(upper bound, count)`` buckets, as Prometheus computes it.

    Linear interpolation inside the bucket holding the rank, 0 as the lower edge of the first
    bucket (unless its bound is <= 0: then that bound), and the highest finite bound when the
    rank falls in the +Inf bucket. None when there are no observations, when the +Inf bucket
    is missing or there is no finite bucket (Prometheus: NaN). q < 0 gives -inf, q > 1 +inf.
    """
    return quantile_bound(q, buckets).value


def coarse(value: float, lo: float, hi: float | None) -> bool:
    """Whether a quantile interpolated to ``value`` inside the bucket (lo, hi] is no
    measurement: the bucket open (+Inf), or wider than COARSE_SHARE of the value."""
    return hi is None or hi - lo > COARSE_SHARE * abs(value)


def quantile_bound(q: float, buckets: Sequence[tuple[float, float]]) -> Bucketed:
    """:func:`histogram_quantile`'s figure with the bucket it lies in and whether that
    bucket is too wide for the figure to be a measurement (:func:`coarse`). In the +Inf
    bucket the figure is the highest finite bound, only a lower bound ("> 30 s": ``over``,
    the bucket (bound, None)). Bounds None where there is no figure or q is outside 0..1."""
    if math.isnan(q):
        return Bucketed(None, None, None)
    if q < 0:
        return Bucketed(-math.inf, None, None)
    if q > 1:
        return Bucketed(math.inf, None, None)
    bs = sorted(buckets)
    if len(bs) < 2 or bs[-1][0] != math.inf:
        return Bucketed(None, None, None)
    # Scrapes are not atomic across buckets, so cumulative counts can dip; Prometheus forces
    # them monotonic the same way.
    counts: list[float] = []
    running = -math.inf
    for _, c in bs:
        running = max(running, c)
        counts.append(running)
    total = counts[-1]
    if not total > 0:  # also catches NaN
        return Bucketed(None, None, None)
    rank = q * total
    b = bisect_left(counts, rank, 0, len(counts) - 1)
    if b == len(counts) - 1:
        return Bucketed(bs[-2][0], bs[-2][0], None, coarse=True, over=True)
    if b == 0 and bs[0][0] <= 0:  # every observation at or below a bound <= 0: that bound
        return Bucketed(bs[0][0], bs[0][0], bs[0][0])
    start, end, count = 0.0, bs[b][0], counts[b]
    if b > 0:
        start = bs[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    # q == 0 over an empty first bucket: Prometheus gives NaN, 0/0; the lower bound here.
    value = start if count <= 0 else start + (end - start) * (rank / count)
    return Bucketed(value, start, end, coarse(value, start, end))


def first_bound(buckets: Sequence[tuple[float, float]]) -> float | None:
    """The lowest finite bucket's bound, when it is above 0 (a quantile below it is an
    interpolation from 0, known only to be at most the bound)."""
    finite = [b for b, _ in buckets if math.isfinite(b)]
    low = min(finite) if finite else None
    return low if low is not None and low > 0 else None


def bucket_sd(buckets: Sequence[tuple[float, float]], mean: float) -> float | None:
    """The sample standard deviation about ``mean`` (the exact sum/count) of the
    observations in cumulative ``(upper bound, count)`` buckets: each bucket's observations
    at its midpoint, plus the spread within it as a uniform one (width^2 / 12); the lowest
    bucket starts at 0 (latencies), as histogram_quantile takes it. Measured about the exact
    mean rather than the midpoints' mean, it can only come out larger (the gap between the
    two means is added in), never narrower than the buckets allow. None with fewer than two
    observations, a missing +Inf bucket, or any observation above the highest finite bound
    (an open bucket: its spread is unknown)."""
    bs = sorted(buckets)
    if len(bs) < 2 or bs[-1][0] != math.inf or _over(bs) > 0:
        return None
    total, square, low, below = 0.0, 0.0, 0.0, 0.0
    for bound, cumulative in bs[:-1]:
        n = max(0.0, cumulative - below)  # a dip across a non-atomic scrape counts none
        below = max(below, cumulative)
        lo = min(low, bound)
        if n > 0:
            mid, width = (lo + bound) / 2, bound - lo
            square += n * ((mid - mean) ** 2 + width * width / 12)
            total += n
        low = bound
    if total < 2 or not math.isfinite(square):
        return None
    return math.sqrt(square / (total - 1))


def _over(buckets: Sequence[tuple[float, float]]) -> float:
    """Observations above the highest finite bound (in the +Inf bucket alone)."""
    bs = sorted(buckets)
    if len(bs) < 2 or bs[-1][0] != math.inf:
        return 0.0
    return max(0.0, bs[-1][1] - max(c for _, c in bs[:-1]))


def _under(value: float | None, first: float | None) -> bool:
    return value is not None and first is not None and value < first


class _HistPoint(NamedTuple):
    t: float
    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float
    # Not ``count``: a NamedTuple field of that name hides tuple.count.
    observed: float


class _RatePoint(NamedTuple):
    t: float
    total: float


P = TypeVar("P", _HistPoint, _RatePoint)


def _trim(points: deque[P], cutoff: float) -> None:
    # Keep one baseline at or before the cutoff, so the delta always spans the whole window.
    while len(points) >= 2 and points[1].t <= cutoff:
        points.popleft()


class WindowedHistogram:
    """Quantiles, mean and count of the observations made in the last ``window_s`` seconds.

    Memory: the scrapes inside the window plus one baseline, at most ``max_points``. For
    SGLang's inter-token-latency histogram ``count`` is tokens, not requests.
    """

    def __init__(self, window_s: float, max_points: int = 4096) -> None:
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self.resets = 0  # how many times a counter reset restarted the window
        self._points: deque[_HistPoint] = deque(maxlen=max_points)

    def add(self, t: float, hist: Histogram) -> None:
        """Record one scrape. A scrape older than the newest one is ignored."""
        point = _HistPoint(
            t,
            tuple(b for b, _ in hist.buckets),
            tuple(c for _, c in hist.buckets),
            hist.sum,
            hist.count,
        )
        pts = self._points
        if pts:
            last = pts[-1]
            if t < last.t:
                return
            if (
                point.bounds != last.bounds  # restarted with other --bucket-* flags
                or point.observed < last.observed
                or any(c < p for c, p in zip(point.counts, last.counts, strict=True))
            ):
                pts.clear()
                self.resets += 1
            elif t == last.t:
                pts.pop()
        pts.append(point)
        _trim(pts, t - self.window_s)

    def span(self) -> float | None:
        """Seconds between the oldest retained scrape and the newest (None with fewer than 2)."""
        pts = self._points
        return pts[-1].t - pts[0].t if len(pts) >= 2 else None

    def delta(self, now: float) -> Histogram | None:
        """The observations made between the oldest retained scrape and the newest."""
        pts = self._points
        _trim(pts, now - self.window_s)
        if len(pts) < 2:  # one scrape, or the newest is older than the window: no data
            return None
        old, new = pts[0], pts[-1]
        buckets = tuple(
            (b, c - p) for b, c, p in zip(new.bounds, new.counts, old.counts, strict=True)
        )
        return Histogram(buckets, new.sum - old.sum, new.observed - old.observed)

    def quantiles(self, now: float) -> Quantiles:
        d = self.delta(now)
        if d is None or not d.count > 0:
            return _EMPTY
        mean = d.sum / d.count if math.isfinite(d.sum) else None
        p50, p99 = quantile_bound(0.5, d.buckets), quantile_bound(0.99, d.buckets)
        first = first_bound(d.buckets)
        over = _over(d.buckets)
        return Quantiles(p50=p50.value, p99=p99.value, mean=mean, count=d.count,
                         p50_over=p50.over, p99_over=p99.over, first_bound=first,
                         p50_under=_under(p50.value, first), p99_under=_under(p99.value, first),
                         sd=None if mean is None else bucket_sd(d.buckets, mean), over=over,
                         p50_bucket=bucket_bounds(p50), p99_bucket=bucket_bounds(p99),
                         p50_coarse=p50.coarse, p99_coarse=p99.coarse)


def bucket_bounds(b: Bucketed) -> tuple[float, float | None] | None:
    """The bucket's (lower, upper) bounds as Quantiles keeps them (upper None: +Inf); None
    where there is no bucket."""
    return None if b.lo is None else (b.lo, b.hi)


class WindowedRate:
    """Per-second increase of a counter over the last ``window_s`` seconds."""

    def __init__(self, window_s: float, max_points: int = 4096) -> None:
        if not window_s > 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self.resets = 0
        self._points: deque[_RatePoint] = deque(maxlen=max_points)

    def add(self, t: float, total: float) -> None:
        """Record one scrape's counter value. NaN and out-of-order scrapes are ignored."""
        if math.isnan(total):
            return
        pts = self._points
        if pts:
            last = pts[-1]
            if t < last.t:
                return
            if total < last.total:
                pts.clear()
                self.resets += 1
            elif t == last.t:
                pts.pop()
        pts.append(_RatePoint(t, total))
        _trim(pts, t - self.window_s)

    def span(self) -> float | None:
        pts = self._points
        return pts[-1].t - pts[0].t if len(pts) >= 2 else None

    def rate(self, now: float | None = None) -> float | None:
        """Increase per second over the window; None with fewer than two scrapes in it.

        With ``now``, scrapes that fell out of the window by then are dropped first, so a
        source that stopped answering yields None instead of its last rate.
        """
        pts = self._points
        if now is not None:
            _trim(pts, now - self.window_s)
        if len(pts) < 2:
            return None
        old, new = pts[0], pts[-1]
        dt = new.t - old.t
        return (new.total - old.total) / dt if dt > 0 else None
