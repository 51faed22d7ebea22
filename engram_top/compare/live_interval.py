"""An interval for a live scenario measured by one run: from within its latency window.

A scenario with one run has no trials to spread, so its delta had no interval ("?"). A live
run's TTFT, though, is the mean of the N requests in its 30 s window, and the server's
histogram tells how they spread (collectors.windowed.bucket_sd): Welch's t on the two
windows' requests, Fieller's interval for the relative change (compare.stats.fieller). It
is an interval over requests within one window each, not over repeated runs: it says
nothing of what differs from one run to the next (the node's state, the load's phase), so
its method names it apart ("Welch over the windows' N requests, from histogram buckets")
and repeated runs keep their trial-level intervals.

TPOT has none: SGLang's inter-token histogram counts tokens, and a request's tokens are
not independent observations (Welch over them would be falsely narrow).
"""

from __future__ import annotations

from collections.abc import Sequence

from engram_top.compare.stats import Interval, fieller
from engram_top.model.figures import RunFigures

# Fewer requests than this in a window: no within-window interval (the t and the buckets'
# spread mean little over a handful).
MIN_REQUESTS = 2


def method(n_scenario: int, n_baseline: int) -> str:
    return (f"Welch over the windows' {n_scenario:,} and {n_baseline:,} requests, "
            "from histogram buckets")


def why_none(r: RunFigures) -> str | None:
    """Why a live run's window gives no TTFT interval, else None."""
    if r.ttft_mean_s is None or r.window_requests is None:
        return "no TTFT in the window"
    if r.ttft_over:
        return (f"{r.ttft_over} of the window's requests lie above the histogram's highest "
                "bucket: their spread is unknown")
    if r.window_requests < MIN_REQUESTS:
        return f"{r.window_requests} request(s) in the window: no spread to tell"
    if r.ttft_sd_s is None:
        return "the window's spread was not kept (no histogram buckets)"
    return None


def ttft_interval(scenario: RunFigures, baseline: RunFigures) -> Interval | str:
    """The interval of scenario's mean TTFT relative to baseline's (a fraction: +0.15 is
    15% slower), from each one's window; or why there is none."""
    for r in (scenario, baseline):
        if (why := why_none(r)) is not None:
            return why
    xs: Sequence[float] = _moments(scenario)
    bs: Sequence[float] = _moments(baseline)
    iv = fieller(xs[0], xs[1], int(xs[2]), bs[0], bs[1], int(bs[2]),
                 method=method(int(xs[2]), int(bs[2])))
    return iv if iv is not None else "the baseline's window too noisy to bound the ratio"


def _moments(r: RunFigures) -> tuple[float, float, float]:
    """Mean, squared standard error of the mean, and n of a run's window's TTFTs."""
    assert r.ttft_mean_s is not None and r.ttft_sd_s is not None \
        and r.window_requests is not None
    n = r.window_requests
    return r.ttft_mean_s, r.ttft_sd_s**2 / n, float(n)
