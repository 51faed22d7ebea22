"""Service-level objectives, goodput and the load sweep's arithmetic.

An SLO bounds a latency at a percentile: "p99 TTFT <= 2 s". A request is good when it
completed and each of its latencies is within every SLO's bound (a failed request is never
good); goodput is good requests per second and attainment the share that were good, as
sglang.bench_serving's --goodput counts them. A level meets the SLOs when each SLO's
percentile, over every request of the level (a failed one counting as infinitely slow),
is within its bound.

Intervals (95%): across trials, a t-interval of the trials' goodput (compare.t95); from one
trial, the Wilson score interval of the attainment, times the level's request rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_top.compare import stats

# The [slo] table is read in scenarios.slo (a scenario file has one too); its names are
# this module's as well, for the plans and the config that read it through here.
from scenarios.slo import METRICS as METRICS
from scenarios.slo import Slo as Slo
from scenarios.slo import parse as parse

PERCENTILES = (50, 90, 95, 99)
Z95 = 1.959964


# The dashboard's SLOs where the config file's [slo] is silent (an interactive chat target).
DEFAULT = (Slo("ttft", 99, 2.0), Slo("tpot", 99, 0.05))


def bounds(slos: Sequence[Slo], scale: float = 1.0) -> dict[str, float]:
    """Per-request bounds (seconds, times ``scale``) as the load driver checks them."""
    return {s.metric: s.max_s * scale for s in slos}


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile with linear interpolation between ranks (numpy's default, which
    bench_serving uses); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def good(times: dict[str, float | None], slos: Sequence[Slo]) -> bool:
    """A completed request within every bound (a one-token request has no TPOT to break)."""
    return all((t := times.get(s.metric)) is None or t <= s.max_s for s in slos)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion k/n; None for n = 0."""
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class LevelStats:
    """One load level of one placement: throughput, latency percentiles, goodput."""

    load: float  # concurrency, or requests/s for an open loop
    kind: str  # "concurrency" or "rate"
    modelled: bool  # from the simulator's deterministic model, not measured over HTTP
    requests: int
    failed: int
    duration_s: float
    output_tok_s: float | None
    request_per_s: float | None
    latency: dict[str, dict[str, float | None]]  # metric -> {"p50", ..., "mean"} seconds
    good: int
    goodput_rps: float | None
    attainment: float | None  # 0..1
    interval: tuple[float, float] | None  # goodput's 95% interval, requests/s
    slo: dict[str, dict[str, Any]]  # label -> {"value_s", "max_s", "met"}
    meets_slo: bool | None  # None without SLOs
    trials: int = 1
    queue_mean_s: float | None = None
    retractions: int | None = None
    kv_usage_max: float | None = None
    kv_usage_mean: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    # At a live load, the model's figures for the same load: how far it is from measured.
    model: dict[str, float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def level_stats(requests: Sequence[dict[str, float | None]], failed: int, duration_s: float,
                slos: Sequence[Slo], *, load: float, kind: str, modelled: bool,
                output_tokens: int, **extra: Any) -> LevelStats:
    """One trial's level from its completed requests' times (seconds, keys ttft, tpot, e2e)
    and its failed count."""
    total = len(requests) + failed
    lat = {m: {f"p{p}": percentile(_times(requests, m), p) for p in PERCENTILES}
           for m in METRICS}
    for m in METRICS:
        vs = _times(requests, m)
        lat[m]["mean"] = sum(vs) / len(vs) if vs else None
    n_good = sum(1 for r in requests if good(r, slos))
    rate = total / duration_s if duration_s > 0 else None
    attain = n_good / total if total else None
    ci = wilson(n_good, total)
    checks: dict[str, dict[str, Any]] = {}
    for s in slos:
        # A failed request is as slow as can be: it counts, at +inf, in the percentile.
        v = percentile(_times(requests, s.metric) + [math.inf] * failed, s.percentile)
        checks[s.label] = {"value_s": None if v is None or math.isinf(v) else v,
                           "max_s": s.max_s, "met": v is not None and v <= s.max_s}
    return LevelStats(
        load=load, kind=kind, modelled=modelled, requests=len(requests), failed=failed,
        duration_s=duration_s,
        output_tok_s=output_tokens / duration_s if duration_s > 0 else None,
        request_per_s=len(requests) / duration_s if duration_s > 0 else None,
        latency=lat, good=n_good if slos else 0,
        # Without SLOs every request would count: no goodput is said rather than throughput.
        goodput_rps=n_good / duration_s if slos and duration_s > 0 else None,
        attainment=attain if slos else None,
        interval=None if not slos or ci is None or rate is None else (ci[0] * rate,
                                                                      ci[1] * rate),
        slo=checks, meets_slo=all(c["met"] for c in checks.values()) if slos else None,
        **extra)


def _times(requests: Sequence[dict[str, float | None]], metric: str) -> list[float]:
    """The requests' times of one metric, where they have one."""
    return [t for r in requests if (t := r.get(metric)) is not None]


def merge_trials(trials: Sequence[LevelStats]) -> LevelStats:
    """Several trials of one level: their means, and a t-interval of the goodput."""
    if len(trials) == 1:
        return trials[0]
    first = trials[0]

    def mean(values: Sequence[float | None]) -> float | None:
        xs = [v for v in values if v is not None]
        return sum(xs) / len(xs) if xs else None

    goodputs = [t.goodput_rps for t in trials if t.goodput_rps is not None]
    interval = None
    if len(goodputs) >= 2:
        m = sum(goodputs) / len(goodputs)
        sd = math.sqrt(sum((g - m) ** 2 for g in goodputs) / (len(goodputs) - 1))
        half = stats.t95(len(goodputs) - 1) * sd / math.sqrt(len(goodputs))
        interval = (max(0.0, m - half), m + half)
    lat = {m: {k: mean([t.latency[m][k] for t in trials]) for k in first.latency[m]}
           for m in METRICS}
    checks = {label: {"value_s": mean([t.slo[label]["value_s"] for t in trials]),
                      "max_s": c["max_s"], "met": all(t.slo[label]["met"] for t in trials)}
              for label, c in first.slo.items()}
    return LevelStats(
        load=first.load, kind=first.kind, modelled=first.modelled,
        requests=sum(t.requests for t in trials), failed=sum(t.failed for t in trials),
        duration_s=sum(t.duration_s for t in trials),
        output_tok_s=mean([t.output_tok_s for t in trials]),
        request_per_s=mean([t.request_per_s for t in trials]), latency=lat,
        good=sum(t.good for t in trials), goodput_rps=mean(goodputs),
        attainment=mean([t.attainment for t in trials]), interval=interval, slo=checks,
        meets_slo=None if first.meets_slo is None else all(t.meets_slo for t in trials),
        trials=len(trials), queue_mean_s=mean([t.queue_mean_s for t in trials]),
        retractions=sum(t.retractions or 0 for t in trials),
        kv_usage_max=max((t.kv_usage_max for t in trials if t.kv_usage_max is not None),
                         default=None),
        kv_usage_mean=mean([t.kv_usage_mean for t in trials]), notes=first.notes)


def highest_within(levels: Sequence[LevelStats]) -> float | None:
    """The highest load that meets the SLOs before the first level that breaks them (the
    sweep raises the load until they break); None when the lowest already breaks them."""
    best = None
    for lv in sorted(levels, key=lambda lv: lv.load):
        if not lv.meets_slo:
            break
        best = lv.load
    return best


def crossover(a: Sequence[LevelStats], b: Sequence[LevelStats]) -> dict[str, Any]:
    """Where ``b``'s goodput overtakes ``a``'s as the load rises: the first level at which
    b is ahead, ``at`` interpolated linearly from the level below it where the difference
    crosses zero ("below" when b is ahead from the lowest load), and where it is no longer
    ahead (``until``, None when it stays ahead to the highest load swept; ``until_how``
    "behind", or "level" where the two are not told apart). ``at`` is None when b is never
    ahead.

    Ahead means told apart: a level whose goodput intervals overlap is level, whichever
    point is higher. A light load that both placements serve in full has goodputs a hair
    apart by chance (8 requests, intervals [0, 0.04]), and a crossover read off that sign
    would move from run to run."""
    by_a = {lv.load: lv for lv in a}
    diff: dict[float, float] = {}
    state: dict[float, int] = {}  # +1 b ahead, -1 behind, 0 level
    for lv in b:
        other = by_a.get(lv.load)
        if lv.goodput_rps is None or other is None or other.goodput_rps is None:
            continue
        diff[lv.load] = d = lv.goodput_rps - other.goodput_rps
        state[lv.load] = 0 if _overlap(lv.interval, other.interval) else (d > 0) - (d < 0)
    loads = sorted(diff)
    if not loads:
        return {"at": None, "where": "no common level"}
    first = next((i for i, x in enumerate(loads) if state[x] > 0), None)
    if first is None:
        return {"at": None, "where": "never within the sweep"}
    out: dict[str, Any]
    if first == 0:
        out = {"at": loads[0], "where": "below"}
    else:
        lo, hi = loads[first - 1], loads[first]
        out = {"at": _zero(lo, hi, diff[lo], diff[hi]) if diff[lo] < 0 else lo,
               "where": "between", "between": [lo, hi]}
    back = next((i for i in range(first + 1, len(loads)) if state[loads[i]] <= 0), None)
    if back is None:
        out["until"] = None
    else:
        lo, hi = loads[back - 1], loads[back]
        out["until"] = _zero(lo, hi, diff[lo], diff[hi]) if diff[hi] <= 0 else hi
        out["until_between"] = [lo, hi]
        out["until_how"] = "behind" if state[hi] < 0 else "level"
    out["modelled"] = _modelled(a, b, loads[first])
    return out


def _overlap(x: tuple[float, float] | None, y: tuple[float, float] | None) -> bool:
    """Whether two intervals share a point; False where either is unknown (then the
    points' order decides, as it must for a level with no interval)."""
    return x is not None and y is not None and x[0] <= y[1] and y[0] <= x[1]


def _zero(x0: float, x1: float, d0: float, d1: float) -> float:
    """Where a line through (x0, d0) and (x1, d1) crosses zero."""
    return x0 + (x1 - x0) * (-d0) / (d1 - d0) if d1 != d0 else x1


def _modelled(a: Sequence[LevelStats], b: Sequence[LevelStats], load: float) -> bool:
    return any(lv.modelled for lv in (*a, *b) if lv.load == load)
