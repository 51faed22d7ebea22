"""`attach` pointed at a router's or LMCache's page instead of an engine's: the engine's
collector (SGLang's, vLLM's, the one that detects the engine) reads what the page is, its
workers, requests (a rate over the window) and hit rate, bounded where they enter; the KV
panel shows them and says where the memory is, on the dashboard as a user sees it; the
figures go through a recording. Real HTTP on loopback (a page server on a thread), a clock
the test moves; the one slow test runs `snapshot --attach` against the router page."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import ENGRAM_TOP, PageServer, StaticSession, panel_text, quit_app, until

from collectors.readings import Reading, ServerData, StackPage, Status
from collectors.sglang.collector import SglangCollector
from collectors.vllm.collector import VllmCollector
from engram_top.app.main import EngramTopApp
from engram_top.live.engine_detect import DetectingCollector
from engram_top.model.store import RunStore
from engram_top.record.file_format import decode_reading, encode_reading

ROUTER = """\
# TYPE sgl_router_active_workers gauge
sgl_router_active_workers 2
# TYPE sgl_router_requests_total counter
sgl_router_requests_total{route="/generate"} REQUESTS
sgl_router_requests_total{route="/v1/chat/completions"} 34
# TYPE sgl_router_running_requests gauge
sgl_router_running_requests{worker="http://10.0.0.7:30000"} 3
sgl_router_running_requests{worker="http://10.0.0.8:30000"} 1
# TYPE sgl_router_cache_hits_total counter
sgl_router_cache_hits_total 75
# TYPE sgl_router_cache_misses_total counter
sgl_router_cache_misses_total 25
"""
LMCACHE = """\
# TYPE lmcache:num_requested_tokens counter
lmcache:num_requested_tokens_total{model_name="m",worker_id="0"} 4000
lmcache:num_hit_tokens_total{model_name="m",worker_id="0"} 1103
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def router(requests: int) -> str:
    return ROUTER.replace("REQUESTS", str(requests))


async def _two_polls(collector: SglangCollector | VllmCollector, server: PageServer,
                     clock: Clock) -> Reading[ServerData]:
    """Two polls 10 s apart, the router's requests 200 more on the second page."""
    try:
        await collector.poll()
        clock.now += 10
        server.page = router(1400)
        return await collector.poll()
    finally:
        await collector.close()


def _poll_once(page: str, make: Callable[[str], Any]) -> Reading[ServerData]:
    """One poll of ``page`` served on loopback by the collector ``make(url)`` gives."""
    async def poll(url: str) -> Reading[ServerData]:
        collector = make(url)
        try:
            return await collector.poll()
        finally:
            await collector.close()

    with PageServer(page) as server:
        return asyncio.run(poll(server.url))


def test_sglangs_collector_on_a_router_page_reads_the_router() -> None:
    clock = Clock()
    with PageServer(router(1200)) as server:
        reading = asyncio.run(_two_polls(SglangCollector(server.url, clock=clock), server,
                                         clock))
    assert reading.status is Status.OK, reading.message
    page = reading.data.stack_page
    assert page is not None and page.kind == "sgl-router"
    assert page.workers == ("http://10.0.0.7:30000", "http://10.0.0.8:30000")
    assert (page.active_workers, page.running_requests, page.requests_total) == (2, 4, 1434)
    assert page.hit_rate_since_start == 0.75
    assert reading.data.requests_per_s == 20.0  # 200 requests in 10 s
    assert reading.data.max_total_num_tokens is None  # no KV pool made up
    assert "SGLang router page" in reading.message and "attach to one" in reading.message


def test_vllms_collector_reads_the_router_too_instead_of_refusing_the_page() -> None:
    clock = Clock()
    with PageServer(router(1200)) as server:
        reading = asyncio.run(_two_polls(VllmCollector(server.url, clock=clock), server,
                                         clock))
    assert reading.status is Status.OK, reading.message
    assert reading.data.stack_page is not None and reading.data.requests_per_s == 20.0


def test_an_lmcache_page_with_the_vllm_engine_gives_its_hit_rate() -> None:
    reading = _poll_once(LMCACHE, VllmCollector)
    assert reading.status is Status.OK, reading.message
    page = reading.data.stack_page
    assert page is not None and page.kind == "lmcache" and page.workers == ()
    assert page.hit_rate_since_start == 1103 / 4000


def test_detecting_the_engine_leaves_a_router_to_the_default_engine_which_reads_it() -> None:
    said: list[str | None] = []

    reading = _poll_once(router(1200), lambda url: DetectingCollector(
        url, api_key=None, auth=None, on_engine=lambda _e, note: said.append(note)))
    assert reading.data.stack_page is not None and reading.data.stack_page.kind == "sgl-router"
    assert said == []  # no engine's names: nothing to say of engines


def test_absurd_router_figures_are_no_figures() -> None:
    page = ROUTER.replace("sgl_router_active_workers 2", "sgl_router_active_workers 1e300") \
        .replace("REQUESTS", "-5").replace("} 34", "} -34") \
        .replace("sgl_router_cache_misses_total 25", "sgl_router_cache_misses_total -99")
    worker = "http://" + "w" * 5000 + ":1"
    page += f'sgl_router_running_requests{{worker="{worker}"}} 1\n'

    reading = _poll_once(page, SglangCollector)
    stack = reading.data.stack_page
    assert stack is not None
    assert stack.active_workers is None and stack.requests_total is None
    assert stack.hit_rate_since_start is None  # 75 hits of -24 asked is no rate
    assert all(len(w) <= 120 for w in stack.workers)
    assert "e+300" not in reading.message and "1 active" not in reading.message


def test_an_engines_page_is_never_read_as_a_router() -> None:
    """A page with the engine's own names and a router's (a gateway that adds both) is the
    engine's: its KV pool and latency are read as ever."""
    page = router(1200) + "# TYPE sglang:max_total_num_tokens gauge\n" \
        "sglang:max_total_num_tokens 8192\n"

    reading = _poll_once(page, SglangCollector)
    assert reading.data.stack_page is None and reading.data.max_total_num_tokens == 8192


def _router_store() -> RunStore:
    store = RunStore()
    stack = StackPage(kind="sgl-router", summary="an SGLang router page", workers=(
        "http://10.0.0.7:30000", "http://10.0.0.8:30000"), active_workers=2.0,
        running_requests=4.0, requests_total=1434.0, hit_rate_since_start=0.75)
    store.add("server", Reading("sglang", Status.OK, ServerData(
        url="http://127.0.0.1:30000", healthy=True, requests_per_s=20.0, stack_page=stack),
        message="an SGLang router page: no engine"))
    return store


async def test_the_dashboard_shows_the_router_and_where_its_memory_is() -> None:
    app = EngramTopApp(StaticSession(_router_store()))
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: "SGLang router" in panel_text(app, "#kv"), 10,
                    "the router's rows in the KV panel")
        kv = panel_text(app, "#kv")
        assert "workers 2 active · http://10.0.0.7:30000, http://10.0.0.8:30000" in kv
        assert "requests 4 running · 20.0 req/s" in kv
        assert "cache hit 75.0% since start (cache-aware routing)" in kv
        assert "its workers hold them" in kv
        assert "watch one engram-top attach http://10.0.0.7:30000" in kv
        assert "not allocated yet" not in kv  # no KV pool is waited for
        await quit_app(app, pilot)


async def test_at_100x30_the_router_rows_keep_what_it_is_and_its_requests() -> None:
    app = EngramTopApp(StaticSession(_router_store()))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "SGLang router" in panel_text(app, "#kv"), 10,
                    "the router's rows in the KV panel")
        kv = panel_text(app, "#kv")
        assert "requests 4 running · 20.0 req/s" in kv and "workers 2 active" in kv
        await quit_app(app, pilot)


def test_a_router_reading_goes_through_a_recording() -> None:
    reading = _router_store().latest["server"]
    back = decode_reading(encode_reading(reading))
    assert back.data.stack_page == reading.data.stack_page


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_snapshot_of_a_router_says_what_it_serves_without_waiting_for_a_kv_pool(
        tmp_path: Path) -> None:
    with PageServer(router(1200)) as server:
        done = subprocess.run([*ENGRAM_TOP, "snapshot", "--attach", server.url, "--out",
                               str(tmp_path / "snaps"), "--ready-timeout", "60"],
                              capture_output=True, text=True, timeout=100, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert "did not become ready" not in done.stderr  # a router has no KV pool to wait for
    (folder,) = (tmp_path / "snaps").iterdir()
    summary = (folder / "summary.md").read_text()
    assert "- Serves an SGLang router page: 2 active worker(s), 1,234 requests, 4 running, " \
           "hit rate 75.0% since the start; no GPU memory or KV pool of its own: its workers " \
           "hold them (http://10.0.0.7:30000, http://10.0.0.8:30000)" in summary
    assert "- KV pool:" not in summary
