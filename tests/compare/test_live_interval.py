"""A live scenario measured by one run gets its TTFT delta's interval from within its
window: the histogram's buckets give the spread (collectors.windowed.bucket_sd, checked on
hand-computed buckets), Fieller's interval the relative change; an open +Inf bucket gives
none and says why; on screen the strip and the compare screen read a verdict, not "?".
Where the dashboard drives the load, TPOT and throughput get theirs from the load's own
requests (per-request TPOTs, tokens in equal bins of the window)."""

from __future__ import annotations

import math
import time

import pytest
from helpers import StaticSession, screen_text, until

from collectors.windowed import bucket_sd
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.main import EngramTopApp
from engram_top.compare.live_interval import (
    goodput_interval,
    throughput_interval,
    tpot_interval,
    ttft_interval,
)
from engram_top.compare.runs import comparison
from engram_top.compare.stats import Interval, fieller, welch
from engram_top.compare.verdict import WORSE, verdict
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore

INF = math.inf


def test_the_spread_from_buckets_by_hand() -> None:
    # 2 requests in [0, 0.1], 3 in (0.1, 0.2], 1 in (0.2, 0.4]; exact mean 0.13 s.
    buckets = [(0.1, 2.0), (0.2, 5.0), (0.4, 6.0), (INF, 6.0)]
    by_hand = (2 * ((0.05 - 0.13) ** 2 + 0.1**2 / 12) + 3 * ((0.15 - 0.13) ** 2 + 0.1**2 / 12)
               + 1 * ((0.3 - 0.13) ** 2 + 0.2**2 / 12)) / 5
    assert by_hand == pytest.approx(0.0504 / 5)
    assert bucket_sd(buckets, 0.13) == pytest.approx(math.sqrt(0.0504 / 5))
    # All in one bucket: the uniform spread within it alone, about its midpoint.
    assert bucket_sd([(1.0, 0.0), (2.0, 4.0), (INF, 4.0)], 1.5) == \
        pytest.approx(math.sqrt(4 * (1 / 12) / 3))
    assert bucket_sd([(0.1, 2.0), (INF, 3.0)], 0.1) is None  # one above the last bound
    assert bucket_sd([(0.1, 1.0), (INF, 1.0)], 0.05) is None  # one request: no spread
    assert bucket_sd([(0.1, 2.0), (0.2, 3.0)], 0.1) is None  # no +Inf bucket


def test_fieller_from_moments_is_the_trial_sets_interval() -> None:
    xs, bs = [15.0, 17.0, 19.0], [10.0, 12.0]
    by_sets = welch(xs, bs)
    assert by_sets is not None
    got = fieller(17.0, 4.0 / 3, 3, 11.0, 2.0 / 2, 2)
    assert isinstance(got, Interval)
    assert (got.lo, got.hi) == pytest.approx((by_sets.lo, by_sets.hi))
    assert (got.lo, got.hi) == pytest.approx((-0.02, 1.61), abs=5e-3)  # (-2%, +161%)


def test_a_side_measured_as_exactly_zero_is_minus_100_percent_not_a_crash() -> None:
    # A scenario's window in which nothing was produced (all six bins 0: the demo's burst
    # of long prompts still queued) against a baseline with spread: -100%, exactly.
    got = fieller(0.0, 0.0, 6, 150.0, 25.0, 6)
    assert isinstance(got, Interval) and (got.lo, got.hi) == (-1.0, -1.0)
    assert got.df == 5.0
    tp = throughput_interval(loaded(0.42, 0.031, 0.0), loaded(0.35, 0.028, 192.0))
    assert isinstance(tp, Interval) and (tp.lo, tp.hi) == (-1.0, -1.0)


def live(ttft: float, sd: float | None, n: int, over: int = 0) -> RunFigures:
    return RunFigures(gpus=4, kv_tokens=42_700_288, ttft_mean_s=ttft, ttft_sd_s=sd,
                      ttft_over=over, itl_mean_s=0.028, output_tok_s=190.0, window_s=30.0,
                      window_requests=n, served_s=60.0)


def test_a_window_s_interval_and_why_there_is_none() -> None:
    # 0.42 s against 0.35 s, each 0.1 s of spread over 300 and 400 requests: the standard
    # errors are 5.8 and 5.0 ms, so +20% is far outside the noise.
    iv = ttft_interval(live(0.42, 0.1, 300), live(0.35, 0.1, 400))
    assert isinstance(iv, Interval)
    assert iv.lo < 0.2 < iv.hi and iv.lo > 0.14 and iv.hi < 0.26
    assert iv.method == "Welch over the windows' 300 and 400 requests, from histogram buckets"
    assert ttft_interval(live(0.42, None, 300, over=3), live(0.35, 0.1, 400)) == (
        "3 of the window's requests lie above the histogram's highest bucket: "
        "their spread is unknown")


def facts(name: str, results: RunFigures) -> RunFacts:
    run = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                   launched_wall=time.time(), launched_at=time.monotonic(), state="stopped")
    run.results = results
    return run


def test_one_run_each_reads_a_verdict_on_ttft_and_repeats_keep_theirs() -> None:
    runs = [facts("device", live(0.35, 0.1, 400)), facts("host-prefetch", live(0.42, 0.1, 300))]
    c = comparison(runs)
    assert c is not None
    cell = c.row("ttft_mean_ms").cells["host-prefetch"]
    assert cell.interval is not None and cell.interval.method.startswith("Welch over")
    found = {f.evidence.axis: f for f in verdict(c).findings}
    assert (found["ttft"].outcome, found["ttft"].winner) == (WORSE, "device")
    assert found["tpot"].outcome == "no interval"  # tokens, not requests: none
    # An open bucket: no interval, and the window says why.
    runs[1].results = live(0.42, None, 300, over=3)
    c = comparison(runs)
    assert c is not None and c.row("ttft_mean_ms").cells["host-prefetch"].interval is None
    assert "no TTFT interval: 3 of the window's requests" in c.windows["host-prefetch"]
    # Two runs of a scenario: the trial-level interval (Welch over runs), not the window's.
    runs[1].results = live(0.42, 0.1, 300)
    runs.append(facts("host-prefetch", live(0.44, 0.1, 300)))
    c = comparison(runs)
    assert c is not None
    iv = c.row("ttft_mean_ms").cells["host-prefetch"].interval
    assert iv is None or not iv.method.startswith("Welch over")


async def test_two_warm_live_runs_show_a_verdict_not_a_question_mark() -> None:
    store = RunStore()
    store.set_run(facts("device", live(0.35, 0.1, 400)))
    store.set_run(facts("host-prefetch", live(0.42, 0.1, 300)))
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "host-prefetch: KV ≈ TTFT ▼" in screen_text(app),
                    what="TTFT's verdict on the strip")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        await until(pilot, lambda: "Welch over the windows' 300 and 400" in screen_text(app),
                    what="the window's method")
        await pilot.press("escape")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


def loaded(ttft: float, tpot: float, tok_s: float, *, tpot_n: int = 300,
           bins: int = 6, served: float = 60.0, good: float = 3.0) -> RunFigures:
    """A live run whose load the dashboard drove: its own requests' TPOT, tokens and
    requests within the SLO."""
    return RunFigures(gpus=4, kv_tokens=42_700_288, ttft_mean_s=ttft, ttft_sd_s=0.1,
                      ttft_over=0, itl_mean_s=tpot * 0.97, output_tok_s=tok_s * 1.01,
                      window_s=30.0, window_requests=tpot_n, served_s=served,
                      load_tpot_mean_s=tpot, load_tpot_sd_s=0.004, load_tpot_n=tpot_n,
                      load_tok_s=tok_s, load_tok_s_sd=tok_s * 0.03, load_bins=bins,
                      goodput_rps=good * 0.9, load_good_rps=good, load_good_rps_sd=0.3)


def test_tpot_and_throughput_intervals_from_the_dashboards_own_load() -> None:
    # TPOT 31 ms against 28 ms, 4 ms of spread over 300 requests each: about +10.7%, its
    # standard errors about 0.8% each. Throughput 3% spread over six bins: -14% is clear.
    iv = tpot_interval(loaded(0.42, 0.031, 165.0), loaded(0.35, 0.028, 192.0))
    assert isinstance(iv, Interval)
    assert iv.lo < 0.031 / 0.028 - 1 < iv.hi and iv.lo > 0.06 and iv.hi < 0.16
    assert iv.method == "Welch over the load's 300 and 300 requests' TPOT in the windows"
    tp = throughput_interval(loaded(0.42, 0.031, 165.0), loaded(0.35, 0.028, 192.0))
    assert isinstance(tp, Interval)
    assert tp.lo < 165 / 192 - 1 < tp.hi < 0 and tp.lo > -0.25
    assert tp.method == "Welch over the load's output tokens in 6 and 6 equal bins of the windows"
    gp = goodput_interval(loaded(0.42, 0.031, 165.0, good=2.5), loaded(0.35, 0.028, 192.0))
    assert isinstance(gp, Interval) and gp.lo < 2.5 / 3 - 1 < gp.hi < 0
    assert "requests within the SLO in 6 and 6 equal bins" in gp.method
    assert goodput_interval(loaded(0.42, 0.031, 165.0, good=0.0),
                            loaded(0.35, 0.028, 192.0, good=0.0)) == \
        "no requests within the SLO in the baseline's window: no ratio to it"
    # A server the dashboard only watches has no load of its own: no interval, said why.
    assert tpot_interval(live(0.42, 0.1, 300), loaded(0.35, 0.028, 192.0)) == \
        "no TPOT of the dashboard's own load in the window"
    assert throughput_interval(loaded(0.42, 0.031, 165.0, bins=1),
                               loaded(0.35, 0.028, 192.0)) == \
        "1 bin(s) of the window: no spread to tell"


def test_one_run_each_of_the_demo_reads_a_verdict_on_every_latency_axis() -> None:
    runs = [facts("device", loaded(0.35, 0.028, 192.0)),
            facts("host-prefetch", loaded(0.42, 0.031, 165.0, good=2.5))]
    c = comparison(runs)
    assert c is not None
    # TPOT and throughput are the load's own figures, where it has them: bench_serving's.
    tpot = c.row("tpot_mean_ms").cells["host-prefetch"]
    assert tpot.mean == pytest.approx(31.0) and tpot.interval is not None
    assert c.row("output_tok_s").cells["host-prefetch"].mean == pytest.approx(165.0)
    found = {f.evidence.axis: f for f in verdict(c).findings}
    assert (found["tpot"].outcome, found["tpot"].winner) == (WORSE, "device")
    assert (found["throughput"].outcome, found["throughput"].winner) == (WORSE, "device")
    assert (found["goodput"].outcome, found["goodput"].winner) == (WORSE, "device")
    assert c.row("goodput_rps").cells["host-prefetch"].mean == pytest.approx(2.5)
    assert "load's 300 and 300 requests' TPOT" in found["tpot"].evidence.method
    # One run without the load's figures (a server only watched): every run's TPOT and
    # throughput go back to the server's, with no interval, never one figure against the
    # other.
    runs.append(facts("host", live(0.40, 0.1, 300)))
    c = comparison(runs)
    assert c is not None
    assert c.row("tpot_mean_ms").cells["host-prefetch"].mean == pytest.approx(31.0 * 0.97)
    assert c.row("tpot_mean_ms").cells["host-prefetch"].interval is None
    assert c.row("output_tok_s").cells["host-prefetch"].mean == pytest.approx(165.0 * 1.01)
    # (it has no goodput at all, so nothing to mix with the load's window's)
    assert c.row("goodput_rps").cells["host-prefetch"].mean == pytest.approx(2.5)
    found = {f.evidence.axis: f for f in verdict(c).findings}
    assert found["tpot"].outcome == "no interval"
    # A run still warming up does not take the load's figures from the others.
    runs[2] = facts("host", RunFigures(gpus=4, itl_mean_s=0.03, output_tok_s=170.0,
                                       ttft_mean_s=0.4, window_s=30.0, served_s=10.0))
    c = comparison(runs)
    assert c is not None and c.row("tpot_mean_ms").cells["host-prefetch"].interval is not None


def test_the_loads_figures_keep_in_recordings_and_snapshots() -> None:
    figures = loaded(0.42, 0.031, 165.0)
    data = figures.to_json()
    assert (data["load_tpot_mean_ms"], data["load_tpot_sd_ms"], data["load_tpot_n"]) == \
        (31.0, 4.0, 300)
    assert (data["load_tok_s"], data["load_bins"]) == (165.0, 6)
    assert RunFigures.from_json(data) == figures
    with pytest.raises(ValueError, match="load_bins: expected a whole number"):
        RunFigures.from_json({**data, "load_bins": 6.5})
