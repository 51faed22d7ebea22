"""A quantile inside a wide histogram bucket is said by the bucket's bounds, never as a
measurement: the rule (collectors.windowed, decided once), its text forms, and the latency
panel, summary.md, snapshot.json, the timeseries, recordings, the run's figures, the SLO
alert's words and the verdict all reading it the same way. The collector reads its pages
over real HTTP on loopback (a thread of this process); nothing else starts."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from helpers import PageServer
from rich.console import Console

from collectors.readings import (
    Bucketed,
    Quantiles,
    Reading,
    ServerData,
    Status,
)
from collectors.sglang.collector import SglangCollector
from collectors.units import bucket_text, latency_bucket
from collectors.windowed import COARSE_SHARE, coarse, histogram_quantile, quantile_bound
from engram_top.app.panels import latency_panel
from engram_top.compare.comparison import compare
from engram_top.compare.markdown import to_markdown
from engram_top.compare.run_result import RunResult
from engram_top.compare.runs import comparison
from engram_top.compare.verdict import verdict
from engram_top.export import snapshot
from engram_top.fleet import session as fleet
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import decode_reading, encode_reading
from engram_top.seed import reference

INF = float("inf")
# SGLang's time-to-first-token buckets (its default, and the simulator's), the first few.
TTFT_BOUNDS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0)


def cumulative(per_bucket: tuple[int, ...], bounds: tuple[float, ...] = TTFT_BOUNDS
               ) -> list[tuple[float, float]]:
    """``per_bucket`` observations in each bucket (the last: +Inf) as cumulative buckets."""
    out, running = [], 0
    for bound, n in zip((*bounds, INF), per_bucket, strict=True):
        running += n
        out.append((bound, float(running)))
    return out


# ----------------------------------------------------------------------------- the rule


def test_the_first_bucket_is_coarse_by_definition() -> None:
    buckets = cumulative((40, 0, 0, 0, 0, 0, 0, 0))
    assert quantile_bound(0.5, buckets) == Bucketed(pytest.approx(0.05), 0.0, 0.1, True, False)
    assert quantile_bound(0.99, buckets) == Bucketed(pytest.approx(0.099), 0.0, 0.1, True,
                                                     False)
    # Whatever the figure in it: the first bucket's width is its bound, never less.
    assert coarse(0.1, 0.0, 0.1) and coarse(0.001, 0.0, 0.1)


def test_an_inner_bucket_wider_than_half_its_figure_is_coarse() -> None:
    assert COARSE_SHARE == 0.5
    # All in 100-200 ms: p50 150 ms, in a bucket 100 ms wide (> 75 ms).
    b = quantile_bound(0.5, cumulative((0, 40, 0, 0, 0, 0, 0, 0)))
    assert b == Bucketed(pytest.approx(0.15), 0.1, 0.2, True, False)
    assert b.value == histogram_quantile(0.5, cumulative((0, 40, 0, 0, 0, 0, 0, 0)))
    # Sparse buckets: 1-2 s holds the p50 at 1.5 s, a bucket 1 s wide (> 0.75 s).
    assert quantile_bound(0.5, cumulative((0, 0, 0, 0, 0, 0, 10, 0))) == \
        Bucketed(pytest.approx(1.5), 1.0, 2.0, True, False)


def test_a_narrow_bucket_resolves_its_quantile() -> None:
    # All in 400-600 ms: p50 500 ms, in a bucket 200 ms wide (< 250 ms): a measurement.
    assert quantile_bound(0.5, cumulative((0, 0, 0, 40, 0, 0, 0, 0))) == \
        Bucketed(pytest.approx(0.5), 0.4, 0.6, False, False)
    # Exactly half its figure wide is not wider than half.
    assert not coarse(0.2, 0.1, 0.2) and coarse(0.19, 0.1, 0.2)


def test_the_inf_bucket_is_open_and_a_lower_bound() -> None:
    assert quantile_bound(0.99, cumulative((1, 0, 0, 0, 0, 0, 0, 99))) == \
        Bucketed(2.0, 2.0, None, True, True)
    assert coarse(30.0, 30.0, None)


def test_no_observations_and_no_inf_bucket_give_no_bucket() -> None:
    assert quantile_bound(0.5, cumulative((0,) * 8)) == Bucketed(None, None, None, False, False)
    assert quantile_bound(0.5, [(0.1, 3.0), (0.2, 5.0)]) == Bucketed(None, None, None)
    assert quantile_bound(0.5, []) == Bucketed(None, None, None)


def test_the_text_forms() -> None:
    assert latency_bucket(0.0, 0.1) == "<= 100 ms"
    assert latency_bucket(0.1, 0.2) == "100-200 ms"
    assert latency_bucket(0.0025, 0.005) == "2.5-5 ms"
    assert latency_bucket(0.8, 1.0) == "0.8-1 s"
    assert latency_bucket(4.0, 6.0) == "4-6 s"
    assert latency_bucket(30.0, None) == "> 30 s"
    assert latency_bucket(0.5, None) == "> 500 ms"
    assert latency_bucket(1200.0, 1800.0) == "1,200-1,800 s"
    assert bucket_text(1200.0, 1800.0) == "1200-1800 s"  # text files group no thousands
    assert bucket_text(0.0, 0.1) == "<= 100 ms"


def test_a_recording_made_before_buckets_were_kept_gives_them_from_its_flags() -> None:
    first = Quantiles(0.0574, 0.0962, 0.061, 120.0, p50_under=True, p99_under=True,
                      first_bound=0.1)
    assert first.bucketed("p50") == Bucketed(0.0574, 0.0, 0.1, True, False)
    over = Quantiles(30.0, 30.0, 41.0, 100.0, p50_over=True, p99_over=True)
    assert over.bucketed("p99") == Bucketed(30.0, 30.0, None, True, True)
    # A quantile that came without its buckets (Prometheus's answer) reads as its figure.
    assert Quantiles(0.2, 0.3, 0.2, 10.0).bucketed("p99") == Bucketed(0.3, None, None)


# ----------------------------------------------------------------------------- a store fed a page


def page(requests: int) -> str:
    """SGLang's TTFT histogram with every request in its first bucket (3.57 ms each: a
    `--serve-scale 0.05` server under a light load), and as many inter-token latencies."""
    lines = ["# TYPE sglang:time_to_first_token_seconds histogram"]
    for bound in (*TTFT_BOUNDS, "+Inf"):
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{le="{bound}"}} {requests}')
    lines += [f"sglang:time_to_first_token_seconds_sum {requests * 0.00357}",
              f"sglang:time_to_first_token_seconds_count {requests}",
              "# TYPE sglang:num_running_reqs gauge", "sglang:num_running_reqs 2"]
    return "\n".join(lines) + "\n"


async def first_bucket_store() -> RunStore:
    """A store whose server's window holds 120 requests, all in the first TTFT bucket,
    attached as a live run."""
    with PageServer(page(0)) as server:
        collector = SglangCollector(server.url, window_s=30.0)
        try:
            first = await collector.poll()
            server.page = page(120)
            second = await collector.poll()
        finally:
            await collector.close()
    assert first.ok and second.ok, second.message
    store = RunStore()
    now = time.monotonic()
    run = RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                   launched_wall=time.time() - 100, launched_at=now - 100, state="attached",
                   ready_at=now - 90, url=server.url, owned=False)
    store.set_run(run)
    store.add("server", Reading(second.source, second.status, second.data, at=now,
                                wall=second.wall))
    return store


async def test_a_page_all_in_the_first_bucket_reads_as_its_bounds_on_the_panel() -> None:
    store = await first_bucket_store()
    ttft = store.data("server").ttft
    assert ttft.count == 120 and ttft.mean == pytest.approx(0.00357)
    assert (ttft.p50, ttft.p99) == (pytest.approx(0.05), pytest.approx(0.099))  # interpolated
    assert (ttft.p50_bucket, ttft.p50_coarse, ttft.p99_bucket, ttft.p99_coarse) == \
        ((0.0, 0.1), True, (0.0, 0.1), True)
    console = Console(width=46, file=io.StringIO(), record=True)
    console.print(latency_panel(store, cols=46))
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.startswith("TTFT"))
    assert row.split() == ["TTFT", "<=", "100", "ms", "<=", "100", "ms", "3.6", "ms"]
    assert "50.0" not in text and "99.0" not in text


async def test_summary_and_snapshot_json_carry_the_bounds(tmp_path: Path) -> None:
    store = await first_bucket_store()
    prepared = snapshot.prepare(tmp_path, store, reference.default(), svg=None)
    data = json.loads(prepared.texts["snapshot.json"])
    ttft = data["latency"]["ttft"]
    # The interpolated figure stays (the charts plot it), its bucket beside it.
    assert ttft["p50"] == pytest.approx(0.05) and ttft["p99"] == pytest.approx(0.099)
    assert ttft["p50_bucket"] == [0.0, 0.1] and ttft["p99_bucket"] == [0.0, 0.1]
    assert ttft["p50_coarse"] is True and ttft["p99_coarse"] is True
    assert ttft["mean"] == pytest.approx(0.00357)
    (run,) = data["runs"]
    assert run["results"]["ttft_p50_ms"] == 50.0
    assert run["results"]["ttft_p50_bucket_ms"] == [0.0, 100.0]
    summary = prepared.texts["summary.md"]
    assert "TTFT p50 <= 100 ms, p99 <= 100 ms, mean 3.6 ms" in summary
    assert "50.0 ms" not in summary
    # The timeseries: the p50 as interpolated, and its bucket's bounds beside it.
    frame = snapshot.timeseries_frame(store)
    rows = frame[frame["metric"].str.startswith("ttft.p50")]
    assert dict(zip(rows["metric"], rows["value"], strict=True)) == \
        {"ttft.p50": pytest.approx(0.05), "ttft.p50_lo": 0.0, "ttft.p50_hi": 0.1}
    assert set(rows["unit"]) == {"s"}


def test_the_summary_says_an_open_bucket_and_a_resolved_figure() -> None:
    from engram_top.export.summary import _quantiles
    over = {"p50": 0.5, "p99": 30.0, "mean": 12.0, "p50_bucket": [0.4, 0.6],
            "p50_coarse": False, "p99_bucket": [30.0, None], "p99_coarse": True,
            "p99_over": True}
    assert _quantiles(over) == "p50 500.0 ms, p99 > 30 s, mean 12000.0 ms"


# ----------------------------------------------------------------------------- recordings, figures


def test_a_recording_keeps_the_buckets_and_an_older_one_still_loads() -> None:
    q = Quantiles(0.05, 2.0, 0.004, 120.0, p99_over=True, p50_bucket=(0.0, 0.1),
                  p99_bucket=(2.0, None), p50_coarse=True, p99_coarse=True)
    reading = Reading("sglang", Status.OK, ServerData(url="http://x", healthy=True, ttft=q),
                      at=5.0, wall=1.7e9)
    encoded = json.loads(json.dumps(encode_reading(reading), allow_nan=False))
    assert encoded["data"]["ttft"]["p99_bucket"] == [2.0, None]
    assert decode_reading(encoded).data.ttft == q
    # A recording made before: none of the new fields, its older flags only.
    for key in ("p50_bucket", "p99_bucket", "p50_coarse", "p99_coarse"):
        del encoded["data"]["ttft"][key]
    encoded["data"]["ttft"].update(p50_under=True, first_bound=0.1)
    old = decode_reading(encoded).data.ttft
    assert old.p50_bucket is None
    assert old.bucketed("p50") == Bucketed(0.05, 0.0, 0.1, True, False)
    assert old.bucketed("p99") == Bucketed(2.0, 2.0, None, True, True)


def test_a_runs_figures_keep_the_p50s_bucket_and_lose_it_once_resolved() -> None:
    coarse_run = RunFigures(ttft_p50_s=0.05, ttft_p50_bucket_s=(0.0, 0.1), itl_p50_s=40.0,
                            itl_p50_bucket_s=(30.0, None))
    as_json = coarse_run.to_json()
    assert as_json["ttft_p50_bucket_ms"] == [0.0, 100.0]
    assert as_json["itl_p50_bucket_ms"] == [30000.0, None]
    assert RunFigures.from_json(as_json) == coarse_run
    # A later window whose p50 is resolved takes the bucket away; one without a p50 keeps it.
    assert coarse_run.merged(RunFigures(ttft_p50_s=0.5)).ttft_p50_bucket_s is None
    assert coarse_run.merged(RunFigures(ttft_mean_s=0.004)).ttft_p50_bucket_s == (0.0, 0.1)
    with pytest.raises(ValueError, match="ttft_p50_bucket_ms"):
        RunFigures.from_json({"ttft_p50_bucket_ms": [None, 100.0]})


# ----------------------------------------------------------------------------- the verdict


def live(scenario: str, ttft_mean_s: float, requests: int = 120) -> RunFacts:
    """A live run that served a whole window, its TTFTs all in the first bucket: its p50
    interpolated to 50 ms (coarse), its mean exact."""
    run = RunFacts(scenario=scenario, placement=scenario, node="n", time_scale=1.0,
                   launched_wall=1.7e9, launched_at=0.0, state="stopped", ready_at=1.0)
    run.results = RunFigures(ttft_p50_s=0.05, ttft_p50_bucket_s=(0.0, 0.1),
                             ttft_mean_s=ttft_mean_s, ttft_sd_s=0.0005, ttft_over=0,
                             window_s=30.0, window_requests=requests, served_s=60.0)
    return run


def test_the_live_verdict_is_built_on_the_exact_means_never_on_a_coarse_p50() -> None:
    c = comparison([live("device", 0.00357), live("host", 0.00400)])
    assert c is not None
    found = verdict(c, warming=c.warming)
    (ttft,) = [f for f in found.findings if f.evidence.axis == "ttft"]
    # Both p50s read 50 ms, interpolated in the same 0-100 ms bucket: the verdict is on the
    # means, 3.57 against 4.00 ms, with Welch's interval within the windows.
    assert ttft.evidence.statistic == "mean"
    assert ttft.evidence.delta == pytest.approx(0.00400 / 0.00357 - 1)
    assert ttft.evidence.has_interval and ttft.evidence.lo > 0
    assert ttft.winner == "device"
    assert "p50" not in ttft.text


def test_the_fleets_quantiles_say_they_are_interpolated_and_give_no_verdict() -> None:
    """Prometheus's histogram_quantile answers without its bucket: the fleet's p50 and p99
    rows (and their intervals across nodes) say they are interpolated, and no verdict axis
    is built on them."""
    runs = [RunResult(scenario=p, placement=p, source=f"prometheus:n{i}", trial=i,
                      ttft_p50_s=p50, ttft_p99_s=0.099, tpot_p50_s=0.03, tpot_p99_s=0.04)
            for i, (p, p50) in enumerate((("device", 0.05), ("device", 0.051),
                                          ("host", 0.06), ("host", 0.061)))]
    c = compare(runs, "device", metrics=fleet.METRICS)
    labels = {r.metric.key: r.metric.label for r in c.rows}
    assert labels["ttft_p50_ms"] == "p50 TTFT, interpolated"
    assert labels["tpot_p99_ms"] == "p99 TPOT, interpolated"
    md = to_markdown(c)
    assert md.count(fleet.INTERPOLATED_NOTE) == 1
    assert {f.evidence.axis for f in verdict(c).findings}.isdisjoint({"ttft", "tpot"})
