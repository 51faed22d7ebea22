"""An interval for a live scenario measured by one run: from within its latency window.

A scenario with one run has no trials to spread, so its delta had no interval ("?"). A live
run's TTFT, though, is the mean of the N requests in its 30 s window, and the server's
histogram tells how they spread (collectors.windowed.bucket_sd): Welch's t on the two
windows' requests, Fieller's interval for the relative change (compare.stats.fieller). It
is an interval over requests within one window each, not over repeated runs: it says
nothing of what differs from one run to the next (the node's state, the load's phase), so
its method names it apart ("Welch over the windows' N requests, from histogram buckets")
and repeated runs keep their trial-level intervals.

SGLang's inter-token histogram counts tokens, and a request's tokens are not independent
observations (Welch over them would be falsely narrow): TPOT's interval comes from the
dashboard's own load instead, which times each request (bench_serving's TPOT), and
throughput's and goodput's from the load's output tokens and its requests within the SLO in
six equal bins of the window (batch means).
Neither exists for a server the dashboard only watches (attach): no load of its own.
"""

from __future__ import annotations

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
    xs, bs = _moments(scenario), _moments(baseline)
    return _ratio(xs, bs, method(xs[2], bs[2]))


def tpot_method(n_scenario: int, n_baseline: int) -> str:
    return (f"Welch over the load's {n_scenario:,} and {n_baseline:,} requests' TPOT in "
            "the windows")


def tpot_interval(scenario: RunFigures, baseline: RunFigures) -> Interval | str:
    """The interval of scenario's mean per-request TPOT relative to baseline's, from the
    dashboard's load in each window; or why there is none."""
    sides: list[tuple[float, float, int]] = []
    for r in (scenario, baseline):
        n, mean, sd = r.load_tpot_n, r.load_tpot_mean_s, r.load_tpot_sd_s
        if n is None or mean is None:
            return "no TPOT of the dashboard's own load in the window"
        if n < MIN_REQUESTS or sd is None:
            return f"{n} request(s) of the load in the window: no spread to tell"
        sides.append((mean, sd * sd / n, n))
    xs, bs = sides
    return _ratio(xs, bs, tpot_method(xs[2], bs[2]))


def binned_method(what: str, n_scenario: int, n_baseline: int) -> str:
    return (f"Welch over the load's {what} in {n_scenario} and {n_baseline} equal bins of "
            "the windows")


def throughput_interval(scenario: RunFigures, baseline: RunFigures) -> Interval | str:
    """The interval of scenario's output tokens per second relative to baseline's, from
    the dashboard's load's tokens in equal bins of each window; or why there is none."""
    return _binned("output tokens", "throughput",
                   *((r.load_bins, r.load_tok_s, r.load_tok_s_sd) for r in (scenario, baseline)))


def goodput_interval(scenario: RunFigures, baseline: RunFigures) -> Interval | str:
    """The interval of scenario's requests within every SLO per second relative to
    baseline's, from the dashboard's load's such requests in equal bins of each window."""
    return _binned("requests within the SLO", "goodput",
                   *((r.load_bins, r.load_good_rps, r.load_good_rps_sd)
                     for r in (scenario, baseline)))


def _binned(what: str, axis: str, *sides: tuple[int | None, float | None, float | None]
            ) -> Interval | str:
    moments: list[tuple[float, float, int]] = []
    for n, mean, sd in sides:
        if n is None or mean is None or sd is None:
            return f"no {axis} of the dashboard's own load over a whole window"
        if n < MIN_REQUESTS:
            return f"{n} bin(s) of the window: no spread to tell"
        moments.append((mean, sd * sd / n, n))
    xs, bs = moments
    if bs[0] == 0:
        return f"no {what} in the baseline's window: no ratio to it"
    return _ratio(xs, bs, binned_method(what, xs[2], bs[2]))


def _ratio(xs: tuple[float, float, int], bs: tuple[float, float, int],
           method: str) -> Interval | str:
    """Fieller's interval of the ratio of two sides' means, each (mean, squared standard
    error, n); or why there is none."""
    iv = fieller(xs[0], xs[1], xs[2], bs[0], bs[1], bs[2], method=method)
    return iv if iv is not None else "the baseline's window too noisy to bound the ratio"


def _moments(r: RunFigures) -> tuple[float, float, int]:
    """Mean, squared standard error of the mean, and n of a run's window's TTFTs."""
    assert r.ttft_mean_s is not None and r.ttft_sd_s is not None \
        and r.window_requests is not None
    n = r.window_requests
    return r.ttft_mean_s, r.ttft_sd_s**2 / n, n
