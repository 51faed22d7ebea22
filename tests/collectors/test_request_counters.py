"""Request counters both engines put on /metrics that one page can already say something
of: SGLang's paused requests, cached prompt tokens (by cache source), aborted requests and
the Mamba pool's usage; vLLM's prefix-cache counters as a hit rate since the start (a single
page has no window), its tokens served from the prefix cache and its aborted requests. Pages
written here in each engine's spellings (colon and underscore, with and without _total, with
and without labels), read by the page reader, inspect-metrics, the collector over real HTTP
on loopback, and the KV panel."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import PageServer
from rich.console import Group
from scene import NOW, WALL, scene_store, server_data

from collectors import promtext
from collectors.readings import Reading, Status
from collectors.sglang import collector as sg
from collectors.vllm import collector as v
from engram_top.app.panels import kv_panel
from engram_top.cli.commands import main as engram_top_main
from engram_top.model import facts

M = 'model_name="m"'


def sglang(page: str) -> dict:
    return sg.page_figures(sg.canonical(promtext.parse(page)))


def vllm(page: str) -> dict:
    return v.page_figures(v.canonical(promtext.parse(page)))


def sglang_page(cached: dict[str, float], prompt: float = 1000, aborted: float = 3,
                paused: tuple[float, ...] = (2, 1), sep: str = ":", total: str = "_total",
                declared: str | None = None) -> str:
    """SGLang's tokenizer counters (no rank labels) and a scheduler gauge per DP rank, with
    a TP1 replica of each that must not count twice."""
    def name(n: str) -> str:
        return f"sglang{sep}{n}"
    declared = total if declared is None else declared  # the suffix the TYPE line names
    out = [f"# TYPE {name('prompt_tokens' + declared)} counter",
           f"{name('prompt_tokens' + total)}{{{M}}} {prompt}",
           f"# TYPE {name('cached_tokens' + declared)} counter"]
    for source, n in cached.items():
        labels = f'{M},cache_source="{source}"' if source else M
        out.append(f"{name('cached_tokens' + total)}{{{labels}}} {n}")
    out += [f"# TYPE {name('num_aborted_requests' + declared)} counter",
            f"{name('num_aborted_requests' + total)}{{{M}}} {aborted}",
            f"# TYPE {name('num_paused_reqs')} gauge"]
    for dp, n in enumerate(paused):
        for tp in (0, 1):
            out.append(f'{name("num_paused_reqs")}{{{M},dp_rank="{dp}",tp_rank="{tp}"}} {n}')
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- SGLang


@pytest.mark.parametrize(("sep", "total", "declared"), [
    (":", "_total", None),  # prometheus_client's classic page
    (":", "_total", ""),  # an OpenMetrics page declares the family without _total
    ("_", "_total", None),  # a gateway or a Prometheus pipeline's underscore
    (":", "", None),  # an exporter that names the counter bare
])
def test_sglang_counters_in_every_spelling(sep: str, total: str, declared: str | None) -> None:
    f = sglang(sglang_page({"device": 300, "host": 150, "storage": 50}, sep=sep, total=total,
                           declared=declared))
    assert f["cached_tokens_total"] == 500
    assert f["cached_tokens_by_source"] == {"device": 300, "host": 150, "storage": 50}
    assert f["aborted_requests_total"] == 3
    assert f["cache_hit_rate_since_start"] == pytest.approx(0.5)  # 500 of 1000 prompt tokens
    assert f["num_paused_reqs"] == 3  # two DP ranks' schedulers; their TP1 replicas not again


def test_an_older_page_without_cache_sources_still_gives_the_total() -> None:
    f = sglang(sglang_page({"": 720}, prompt=960))
    assert f["cached_tokens_total"] == 720 and f["cached_tokens_by_source"] == {}
    assert f["cache_hit_rate_since_start"] == pytest.approx(0.75)


@pytest.mark.parametrize(("prompt", "cached", "rate"), [
    (0, 0, None),  # nothing prompted yet: no rate, not 0 %
    (100, 250, 1.0),  # a page whose counters disagree reads at most all
    (float("nan"), 10, None),
    (1e18, 2.5e17, 0.25),  # a long-lived server's huge counters
])
def test_the_rate_since_start_only_where_the_page_supports_it(
        prompt: float, cached: float, rate: float | None) -> None:
    f = sglang(sglang_page({"device": cached}, prompt=prompt))
    assert f["cache_hit_rate_since_start"] == (rate if rate is None else pytest.approx(rate))


def test_a_page_without_these_families_gives_none_and_a_nan_gauge_a_reason() -> None:
    f = sglang("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 4\n")
    assert f["num_paused_reqs"] is None and f["cached_tokens_total"] is None
    assert f["aborted_requests_total"] is None and f["cache_hit_rate_since_start"] is None
    assert f["mamba_usage"] is None and f["cached_tokens_by_source"] == {}
    nan = sglang('# TYPE sglang:num_paused_reqs gauge\nsglang:num_paused_reqs{tp_rank="0"} NaN\n'
                 "# TYPE sglang:num_aborted_requests_total counter\n"
                 "sglang:num_aborted_requests_total NaN\n")
    assert nan["num_paused_reqs"] is None
    assert nan["unavailable"]["num_paused_reqs"] == "n/a: NaN from rank 0"
    assert nan["aborted_requests_total"] is None


def test_the_mamba_pool_takes_the_fullest_dp_rank() -> None:
    f = sglang("# TYPE sglang:mamba_usage gauge\n"
               'sglang:mamba_usage{dp_rank="0",tp_rank="0"} 0.25\n'
               'sglang:mamba_usage{dp_rank="1",tp_rank="0"} 0.625\n')
    assert f["mamba_usage"] == 0.625


def test_inspect_metrics_prints_the_new_sglang_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "metrics.txt"
    page.write_text(sglang_page({"device": 30, "host": 10}, prompt=80, aborted=7)
                    + "# TYPE sglang:mamba_usage gauge\nsglang:mamba_usage 0.5\n")
    assert engram_top_main(["inspect-metrics", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gauges"]["num_paused_reqs"] == 3 and out["gauges"]["mamba_usage"] == 0.5
    assert out["since_start"] == {"cached_tokens_total": 40.0,
                                  "cached_tokens_by_source": {"device": 30.0, "host": 10.0},
                                  "aborted_requests_total": 7.0,
                                  "cache_hit_rate_since_start": 0.5}
    assert out["counters"]["sglang:num_aborted_requests_total"] == 7.0


async def test_the_sglang_collector_gives_the_counters_and_their_rates() -> None:
    with PageServer(sglang_page({"device": 100}, aborted=1)) as server:
        c = sg.SglangCollector(server.url, window_s=60.0)
        try:
            first = await c.poll()
            server.page = sglang_page({"device": 400}, prompt=2000, aborted=5)
            second = await c.poll()
        finally:
            await c.close()
    assert first.ok and second.ok, second.message
    assert first.data.cached_tokens_per_s is None  # one scrape: no rate yet
    d = second.data
    assert d.cached_tokens_total == 400 and d.aborted_requests_total == 5
    assert d.num_paused_reqs == 3 and d.cache_hit_rate_since_start == pytest.approx(0.2)
    assert d.cached_tokens_per_s is not None and d.cached_tokens_per_s > 0
    assert d.aborted_per_s is not None and d.aborted_per_s > 0


# --------------------------------------------------------------------------- vLLM

V = 'engine="0",model_name="m"'


def vllm_page(hits: float, queries: float, reasons: dict[str, float] | None = None,
              prefix: str = "vllm:prefix_cache", engines: int = 1) -> str:
    out = [f"# TYPE {prefix}_queries_total counter", f"# TYPE {prefix}_hits_total counter"]
    for e in range(engines):
        labels = f'engine="{e}",model_name="m"'
        out += [f"{prefix}_queries_total{{{labels}}} {queries}",
                f"{prefix}_hits_total{{{labels}}} {hits}"]
    out.append("# TYPE vllm:request_success_total counter")
    for reason, n in (reasons if reasons is not None else {"stop": 9, "length": 1}).items():
        labels = f'{V},finished_reason="{reason}"' if reason else V
        out.append(f"vllm:request_success_total{{{labels}}} {n}")
    page = "\n".join(out) + "\n"
    # A pipeline that spells the colon as _ does so for every family on the page.
    return page.replace("vllm:", "vllm_") if prefix.startswith("vllm_") else page


@pytest.mark.parametrize("prefix", ["vllm:prefix_cache", "vllm:gpu_prefix_cache",
                                    "vllm_prefix_cache"])
def test_one_vllm_page_gives_a_hit_rate_since_the_start(prefix: str) -> None:
    f = vllm(vllm_page(hits=96, queries=384, prefix=prefix, engines=2))
    assert f["cache_hit_rate_since_start"] == pytest.approx(0.25)  # 192 of 768 over two engines
    assert f["cached_tokens_total"] == 192
    assert f["cache_hit_rate"] is None  # the window's: none from one page


@pytest.mark.parametrize(("reasons", "aborted"), [
    ({"stop": 9, "length": 1, "abort": 4}, 4),
    ({"stop": 9, "length": 1}, 0),  # labelled by reason, none aborted: 0
    ({"": 10}, None),  # an older page without the label cannot say
])
def test_vllm_aborted_requests_from_the_finished_reason(
        reasons: dict[str, float], aborted: float | None) -> None:
    assert vllm(vllm_page(1, 2, reasons))["aborted_requests_total"] == aborted


def test_no_query_yet_is_no_rate() -> None:
    f = vllm(vllm_page(hits=0, queries=0))
    assert f["cache_hit_rate_since_start"] is None and f["cached_tokens_total"] == 0


def test_inspect_metrics_labels_the_vllm_rate_as_since_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "vllm.txt"
    page.write_text(vllm_page(hits=30, queries=40, reasons={"stop": 5, "abort": 2}))
    assert engram_top_main(["inspect-metrics", "--engine", "vllm", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["since_start"] == {"cache_hit_rate_since_start": 0.75,
                                  "cached_tokens_total": 30.0, "aborted_requests_total": 2.0}


# --------------------------------------------------------------------------- the panel


def lines(group: Group) -> list[str]:
    return [line.plain for line in group.renderables]


def store_with(**fields: object):  # noqa: ANN201 (the scene's store)
    store = scene_store()
    server = dataclasses.replace(server_data(NOW), **fields)
    store.add("server", Reading("sglang", Status.OK, server, at=NOW, wall=WALL))
    return store


def test_the_kv_panel_says_a_rate_since_the_start_as_one() -> None:
    since = lines(kv_panel(store_with(cache_hit_rate=None, cache_hit_rate_since_start=0.4),
                           rows=None, cols=None))
    assert any("cache hit 40.0% since start" in line for line in since)
    # The window's rate, where there is one, is the one shown, without the words.
    window = lines(kv_panel(store_with(cache_hit_rate=0.5, cache_hit_rate_since_start=0.4),
                            rows=None, cols=None))
    assert any("cache hit 50.0%" in line and "since" not in line for line in window)


def test_the_kv_view_carries_paused_aborted_and_mamba() -> None:
    kv = facts.kv_facts(store_with(num_paused_reqs=2.0, aborted_requests_total=11.0,
                                   aborted_per_s=0.5, mamba_usage=0.3))
    assert kv is not None
    assert (kv.paused, kv.aborted_total, kv.aborted_per_s, kv.mamba_usage) == (2, 11, 0.5, 0.3)
