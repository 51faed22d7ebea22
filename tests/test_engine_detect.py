"""A server attached without --engine is read by the engine its /metrics page names."""

from __future__ import annotations

from helpers import PageServer

from engram_top.engine_detect import DetectingCollector, metric_names, speaker_of
from scenarios import engines

SGLANG = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank="0"} 2\n'
VLLM = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 1\n'


def test_the_page_names_the_engine_and_a_broken_line_does_not_stop_it() -> None:
    assert metric_names('a{x="1"} 1\n  b 2\n# HELP c\n\nd{oops\n') == ["a", "b", "d"]
    assert speaker_of(metric_names(VLLM)).kind == "vllm"  # type: ignore[union-attr]
    assert speaker_of(metric_names(SGLANG)).kind == "sglang"  # type: ignore[union-attr]
    # A pipeline's spelling (vllm_ for vllm:) and no engine's names at all.
    assert speaker_of(["vllm_num_requests_running"]).kind == "vllm"  # type: ignore[union-attr]
    assert speaker_of(["process_cpu_seconds_total", "up"]) is None


async def test_the_first_page_decides_once() -> None:
    told: list[str] = []
    with PageServer(VLLM) as server:
        c = DetectingCollector(server.url, api_key=None, auth=None,
                               on_engine=lambda e: told.append(e.kind))
        try:
            assert c.engine is engines.get(engines.DEFAULT)
            first = await c.poll()
            assert told == ["vllm"] and c.engine.kind == "vllm"
            assert first.data is not None and first.data.extra.get("engine") == "vllm"
            server.page = SGLANG  # decided: a later page does not switch it back
            await c.poll()
            assert told == ["vllm"] and c.engine.kind == "vllm"
        finally:
            await c.close()


async def test_a_page_of_no_engine_leaves_the_default() -> None:
    told: list[str] = []
    with PageServer("up 1\n") as server:
        c = DetectingCollector(server.url, api_key=None, auth=None,
                               on_engine=lambda e: told.append(e.kind))
        try:
            await c.poll()
            assert told == [] and c.engine.kind == engines.DEFAULT
        finally:
            await c.close()


async def test_a_server_not_up_yet_decides_nothing() -> None:
    with PageServer(VLLM) as server:
        url = server.url
    # Nothing listens there now: the default reads (and says the connection is refused).
    told: list[str] = []
    c = DetectingCollector(url, api_key=None, auth=None, on_engine=lambda e: told.append(e.kind))
    try:
        reading = await c.poll()
        assert not reading.ok and told == [] and c.engine.kind == engines.DEFAULT
    finally:
        await c.close()
