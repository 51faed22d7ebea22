"""SGLang's /metrics in every era and spelling, and pages that are not SGLang's: what the
collector and inspect-metrics make of them. Pages are written here from the names and
label sets SGLang and its neighbours export (values made up); the collector reads them over
real HTTP on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PageServer

from collectors import promtext
from collectors.sglang.collector import (
    SglangCollector,
    canonical,
    find,
    merged_histogram,
    page_figures,
)
from collectors.source import SourceName
from collectors.windowed import quantile_bound
from engram_top.app.panels.drawing import quantile
from engram_top.model.store import RunStore
from engram_top.model.views import Quantiles
from scenarios import engines

BUCKETS = (0.1, 0.5, 1.0, 5.0, 30.0)


def _hist(name: str, counts: tuple[int, ...], labels: str = "", total: float | None = None,
          count: int | None = None, typed: bool = True) -> str:
    """A histogram's lines; ``counts`` are cumulative per bound, the last for +Inf."""
    sep = "," if labels else ""
    out = [f"# TYPE {name} histogram"] if typed else []
    for bound, c in zip((*BUCKETS, "+Inf"), counts, strict=True):
        out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {c}')
    out.append(f"{name}_sum{{{labels}}} {total if total is not None else counts[-1] * 0.4}")
    out.append(f"{name}_count{{{labels}}} {count if count is not None else counts[-1]}")
    return "\n".join(out)


def _figures(page: str) -> dict:
    return page_figures(canonical(promtext.parse(page)))


# --------------------------------------------------------------------------- names


def test_older_gauge_names() -> None:
    page = ("# TYPE sglang:num_requests_running gauge\n"
            'sglang:num_requests_running{model_name="m"} 7\n'
            "# TYPE sglang:num_requests_waiting gauge\n"
            'sglang:num_requests_waiting{model_name="m"} 2\n')
    f = _figures(page)
    assert (f["num_running_reqs"], f["num_queue_reqs"]) == (7, 2)


def test_the_underscore_spelling_of_gateways_and_pipelines() -> None:
    page = ("# TYPE sglang_num_running_reqs gauge\n"
            'sglang_num_running_reqs{tp_rank="0"} 3\n'
            "# TYPE sglang_full_token_usage gauge\n"
            'sglang_full_token_usage{tp_rank="0"} 0.25\n'
            + _hist("sglang_time_to_first_token_seconds", (1, 2, 3, 4, 4, 4)))
    fams = canonical(promtext.parse(page))
    f = page_figures(fams)
    assert (f["num_running_reqs"], f["full_token_usage"]) == (3, 0.25)
    fam = find(fams, ("sglang:time_to_first_token_seconds",))
    assert fam is not None and merged_histogram(fam).count == 4


def test_the_priority_total_and_dp_ranks_summed_tp_replicas_once() -> None:
    page = "\n".join([
        "# TYPE sglang:num_queue_reqs gauge",
        'sglang:num_queue_reqs{priority="",tp_rank="0"} 5',
        'sglang:num_queue_reqs{priority="0",tp_rank="0"} 3',
        'sglang:num_queue_reqs{priority="1",tp_rank="0"} 2',
        "# TYPE sglang:num_running_reqs gauge",  # DP attention: two schedulers, two TP each
        'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 3',
        'sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 3',
        'sglang:num_running_reqs{dp_rank="1",tp_rank="2"} 4',
        'sglang:num_running_reqs{dp_rank="1",tp_rank="3"} 4',
        "# TYPE sglang:token_usage gauge",
        'sglang:token_usage{dp_rank="0",tp_rank="0"} 0.2',
        'sglang:token_usage{dp_rank="1",tp_rank="2"} 0.5',
        "# TYPE sglang:num_retracted_reqs gauge",  # split by priority, no total series
        'sglang:num_retracted_reqs{priority="0"} 1',
        'sglang:num_retracted_reqs{priority="1"} 2',
    ])
    f = _figures(page)
    assert f["num_queue_reqs"] == 5  # the total series, not 5 + 3 + 2
    assert f["num_running_reqs"] == 7  # 3 on DP rank 0 plus 4 on DP rank 1
    assert f["token_usage"] == 0.5  # the fuller scheduler is the bottleneck
    assert f["num_retracted_reqs"] == 3


@pytest.mark.parametrize(("value", "fraction"), [(45.0, 0.45), (0.45, 0.45), (0.0, 0.0)])
def test_the_cache_hit_rate_is_a_fraction_whatever_the_era(value: float, fraction: float) -> None:
    f = _figures(f"# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate {value}\n")
    assert f["cache_hit_rate"] == pytest.approx(fraction)


# --------------------------------------------------------------------------- histograms


def test_bucket_fragments_without_a_type_line_are_a_histogram() -> None:
    fams = canonical(promtext.parse(_hist("sglang:queue_time_seconds", (5, 8, 9, 10, 10, 10),
                                          typed=False)))
    fam = find(fams, ("sglang:queue_time_seconds",))
    assert fam is not None and fam.type == "histogram"
    assert merged_histogram(fam).count == 10


def test_a_count_that_disagrees_with_its_inf_bucket_is_flagged_and_not_trusted() -> None:
    page = _hist("sglang:e2e_request_latency_seconds", (100, 900, 2000, 2400, 2402, 2402),
                 count=24)  # "24": the page was cut inside "2402"
    fams = canonical(promtext.parse(page))
    f = page_figures(fams)
    assert f["page_problems"] == ("sglang:e2e_request_latency_seconds: _count 24 disagrees "
                                  "with its +Inf bucket 2402",)
    assert merged_histogram(fams["sglang:e2e_request_latency_seconds"]).count == 2402


def test_a_series_given_twice_is_flagged() -> None:
    page = ("# TYPE sglang:num_running_reqs gauge\n"
            'sglang:num_running_reqs{tp_rank="0"} 3\nsglang:num_running_reqs{tp_rank="0"} 4\n')
    f = _figures(page)
    assert f["num_running_reqs"] == 3  # the first
    assert f["page_problems"] == ('sglang:num_running_reqs{tp_rank="0"} is given 2 times in '
                                  "one page",)


def test_a_quantile_in_the_inf_bucket_is_a_lower_bound() -> None:
    buckets = [(b, c) for b, c in zip((*BUCKETS, float("inf")), (0, 0, 0, 1, 2, 100),
                                      strict=True)]
    assert quantile_bound(0.99, buckets) == (30.0, 30.0, None, True, True)
    assert quantile_bound(0.01, buckets).value == 5.0
    assert not quantile_bound(0.01, buckets).over
    q = Quantiles(p50=30.0, p99=30.0, mean=41.0, count=100, p50_over=True, p99_over=True)
    assert quantile(q, "p99") == "> 30 s"
    assert quantile(Quantiles(0.2, 0.3, 0.2, 10), "p99") == "300.0 ms"


async def test_the_collector_reads_an_old_server_over_http() -> None:
    """2024 names over real HTTP: the request gauges, TPOT's histogram as the inter-token
    source, the cache hit rate in percent, a queue-time histogram in the +Inf bucket."""
    def page(n: int) -> str:
        return "\n".join([
            "# TYPE sglang:num_requests_running gauge", f"sglang:num_requests_running {n}",
            "# TYPE sglang:cache_hit_rate gauge", "sglang:cache_hit_rate 37.5",
            _hist("sglang:time_per_output_token_seconds", (n, 2 * n, 2 * n, 2 * n, 2 * n, 2 * n)),
            _hist("sglang:queue_time_seconds", (0, 0, 0, 0, 0, 3 * n)),
        ]) + "\n"
    with PageServer(page(1)) as server:
        collector = SglangCollector(server.url, window_s=60.0)
        try:
            first = await collector.poll()
            server.page = page(5)
            second = await collector.poll()
        finally:
            await collector.close()
    assert first.ok and second.ok, second.message
    d = second.data
    assert d is not None
    assert d.num_running_reqs == 5 and d.cache_hit_rate == 0.375
    assert d.itl is not None and d.itl.count == 8 and d.itl.p50 is not None
    assert d.queue_time is not None and d.queue_time.p99_over and d.queue_time.p99 == 30.0


async def test_an_unchanged_page_is_parsed_once_and_read_every_poll(monkeypatch) -> None:
    """An idle server's /metrics is the same page every second: it is parsed once, and each
    poll still reads its figures and gives the windows a point; a new page is parsed."""
    def page(running: int, first_tokens: int) -> str:
        n = first_tokens
        return "\n".join([
            "# TYPE sglang:num_requests_running gauge", f"sglang:num_requests_running {running}",
            "# TYPE sglang:generation_tokens_total counter", "sglang:generation_tokens_total 100",
            _hist("sglang:time_to_first_token_seconds", (n, n, n, n, n, n))]) + "\n"
    parsed: list[str] = []
    real_parse = promtext.parse
    monkeypatch.setattr(promtext, "parse", lambda text, skipped=None, reuse=None:
                        parsed.append(text) or real_parse(text, skipped, reuse))
    with PageServer(page(3, 2)) as server:
        collector = SglangCollector(server.url, window_s=60.0)
        try:
            readings = [await collector.poll() for _ in range(3)]
            server.page = page(4, 5)
            readings.append(await collector.poll())
        finally:
            await collector.close()
    assert all(r.ok for r in readings), [r.message for r in readings]
    assert len(parsed) == 2  # the same page three times, then a new one
    assert [r.data.num_running_reqs for r in readings] == [3, 3, 3, 4]
    assert all(r.data.output_tokens_per_s == 0.0 for r in readings[1:])  # counted each poll
    # The window kept the unchanged pages' points: three first tokens since them.
    assert [r.data.ttft.count for r in readings[1:]] == [0, 0, 3]


async def test_a_page_with_lines_it_cannot_read_keeps_every_other_figure() -> None:
    """An exporter or proxy that writes one broken line (here an author's ``...`` and an
    unclosed label set) costs that line, not the page: the reading is good, its figures
    are there, and it says which lines were left out; the store says so once, not every
    poll."""
    page = "\n".join([
        "# TYPE sglang:num_requests_running gauge", "sglang:num_requests_running 7",
        "...",
        'sglang:num_queue_reqs{tp_rank="0" 1',
        "# TYPE sglang:cache_hit_rate gauge", "sglang:cache_hit_rate 0.25"]) + "\n"
    store = RunStore()
    with PageServer(page) as server:
        collector = SglangCollector(server.url, window_s=60.0)
        try:
            readings = [await collector.poll() for _ in range(3)]
        finally:
            await collector.close()
    for r in readings:
        store.add(SourceName.SERVER, r)
    assert all(r.ok for r in readings), [r.message for r in readings]
    assert readings[0].data is not None and readings[0].data.num_running_reqs == 7
    assert readings[0].data.cache_hit_rate == 0.25
    assert readings[0].message == (
        "metrics page: 2 lines skipped: line 3: invalid metric name: '...'; line 4: expected "
        "',' or '}' after label 'tp_rank': 'sglang:num_queue_reqs{tp_rank=\"0\" 1'")
    said = [e.text for e in store.events if "skipped" in e.text]
    assert len(said) == 1 and said[0].startswith("server: metrics page: 2 lines skipped")


# --------------------------------------------------------------------------- other pages

DCGM = "\n".join([
    "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
    "# TYPE DCGM_FI_DEV_FB_USED gauge",
    *[f'DCGM_FI_DEV_FB_USED{{gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA B200",'
      f'Hostname="gpu-node-07"}} 146000' for i in range(4)],
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    *[f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="GPU-{i}",modelName="NVIDIA B200",'
      f'Hostname="gpu-node-07"}} 93' for i in range(4)],
]) + "\n"
NODE = ("# TYPE node_memory_MemTotal_bytes gauge\nnode_memory_MemTotal_bytes 2.1990232555520e12\n"
        "# TYPE node_memory_MemAvailable_bytes gauge\n"
        "node_memory_MemAvailable_bytes 1.64926744166400e12\n"
        "# TYPE node_cpu_seconds_total counter\n"
        'node_cpu_seconds_total{cpu="0",mode="idle"} 1\n'
        'node_cpu_seconds_total{cpu="1",mode="idle"} 1\n')
SMI = """\
Wed Dec  2 01:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA B200                    On  |   00000000:1B:00.0 Off |                    0 |
|   1  NVIDIA B200                    On  |   00000000:43:00.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""


def _inspect(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    page = tmp_path / "page.txt"
    page.write_text(text)
    return subprocess.run([sys.executable, "-m", "engram_top", "inspect-metrics", str(page)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("text", "kind", "words"), [
    (DCGM, "dcgm-exporter", ("4 GPU(s)", "NVIDIA B200", "gpu-node-07", "DCGM_FI_DEV_FB_USED")),
    (NODE, "node-exporter", ("host memory 2048.0 GiB", "1536.0 GiB available", "2 CPUs")),
    ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n", "vllm",
     ("vllm:num_requests_running",)),
])
@pytest.mark.slow
def test_inspect_metrics_says_what_another_exporters_page_is(tmp_path: Path, text: str,
                                                             kind: str, words: tuple) -> None:
    res = _inspect(tmp_path, text)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["page"] == kind and out["sglang"] is False
    for word in words:
        assert word in out["summary"], out["summary"]
    assert "gauges" not in out  # no list of nulls


@pytest.mark.parametrize(("text", "words"), [
    (SMI, "nvidia-smi's text output, not a metrics page: 2 GPU(s) (NVIDIA B200)"),
    ('{"model_path": "x", "tp_size": 4}', "a JSON body"),
    ("<!DOCTYPE html><html><body>Sign in</body></html>", "an HTML page"),
])
@pytest.mark.slow
def test_inspect_metrics_on_text_that_is_no_metrics_page(tmp_path: Path, text: str,
                                                         words: str) -> None:
    res = _inspect(tmp_path, text)
    assert res.returncode == 1 and res.stdout == ""
    assert words in res.stderr and "unexpected text" not in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the rest of a stack

ROUTER = """\
# TYPE sgl_router_active_workers gauge
sgl_router_active_workers 2
# TYPE sgl_router_requests_total counter
sgl_router_requests_total{route="/generate"} 1200
sgl_router_requests_total{route="/v1/chat/completions"} 34
# TYPE sgl_router_running_requests gauge
sgl_router_running_requests{worker="http://w1:30000"} 3
sgl_router_running_requests{worker="http://w2:30000"} 1
# TYPE sgl_router_cache_hits_total counter
sgl_router_cache_hits_total 75
# TYPE sgl_router_cache_misses_total counter
sgl_router_cache_misses_total 25
"""
GATEWAY = """\
# TYPE smg_requests_total counter
smg_requests_total{method="POST",path="/v1/chat/completions",status="200"} 15234
# TYPE smg_worker_health gauge
smg_worker_health{worker="http://worker1:8000"} 1
smg_worker_health{worker="http://worker2:8000"} 0
"""
LMCACHE = """\
# TYPE lmcache:num_requested_tokens counter
lmcache:num_requested_tokens_total{model_name="m",worker_id="0"} 4000
lmcache:num_hit_tokens_total{model_name="m",worker_id="0"} 1103
# TYPE lmcache:local_cache_usage gauge
lmcache:local_cache_usage{model_name="m",worker_id="0"} 2.5e9
"""


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_router_or_cache_page_says_what_it_is_with_its_figures(engine: str) -> None:
    # sgl-router's page (sgl_router_*, then sgl-model-gateway's smg_*) and LMCache's own:
    # what each is and what it holds, with either engine's reader, never an error.
    inspect = engines.get(engine).inspect_metrics
    router = inspect(ROUTER)
    assert router["page"] == "sgl-router" and router["summary"] == (
        "an SGLang router page (sgl-router / sgl-model-gateway): 2 active worker(s), 1,234 "
        "requests, 4 running, cache-aware routing hit 75.0%")
    gateway = inspect(GATEWAY)
    assert gateway["summary"].endswith(": 1 active worker(s), 15,234 requests")
    found = gateway["found"]
    assert isinstance(found, dict) and found["workers"] == ["http://worker1:8000",
                                                            "http://worker2:8000"]
    cache = inspect(LMCACHE)
    assert cache["page"] == "lmcache" and cache["summary"] == (
        "an LMCache page (its KV cache tier): 1,103 of 4,000 tokens asked for were hits, hit "
        "rate 27.6% since the start, local cache use 2,500,000,000")


def test_lmcache_beside_vllm_and_sglang_pd_transfer_failures() -> None:
    vllm_page = ("# TYPE vllm:num_requests_running gauge\n"
                 'vllm:num_requests_running{model_name="m"} 1\n' + LMCACHE)
    out = engines.get("vllm").inspect_metrics(vllm_page)
    assert out["page"] == "vllm"
    assert out["lmcache"] == {"requested_tokens_total": 4000.0, "hit_tokens_total": 1103.0,
                              "local_cache_usage": 2.5e9,
                              "hit_rate_since_start": pytest.approx(1103 / 4000)}
    pd = ("# TYPE sglang:num_transfer_failed_reqs counter\n"
          'sglang:num_transfer_failed_reqs_total{tp_rank="0"} 3\n'
          "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n")
    out = engines.get("sglang").inspect_metrics(pd)
    since = out["since_start"]
    assert isinstance(since, dict) and since["transfer_failed_total"] == 3
