"""A server attached without --engine is read by the engine its /metrics page names."""

from __future__ import annotations

import pytest
from helpers import PageServer

from engram_top.live.engine_detect import DetectingCollector, metric_names, speaker_of, verdict
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


def page(sglang: int, vllm: int) -> str:
    """A page of so many families of each engine; each a histogram (its _bucket, _sum and
    _count series are one family, not three)."""
    out = []
    for prefix, n in (("sglang:", sglang), ("vllm:", vllm)):
        for i in range(n):
            out += [f'{prefix}h{i}_bucket{{le="1"}} 1', f'{prefix}h{i}_bucket{{le="+Inf"}} 2',
                    f"{prefix}h{i}_sum 3", f"{prefix}h{i}_count 2"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(("sglang", "vllm", "kind", "says"), [
    (3, 1, "sglang", "holds SGLang's (3 families) and vLLM's (1 family) names: read as SGLang, "
                     "whose names are the most"),
    (1, 4, "vllm", "holds vLLM's (4 families) and SGLang's (1 family) names: read as vLLM, "
                   "whose names are the most"),
    (2, 2, None, "holds SGLang's (2 families) and vLLM's (2 families) names, as many of each: "
                 "which engine serves it cannot be told from the page (give --engine)"),
])
def test_a_page_of_both_engines_is_read_by_the_most_and_said(sglang: int, vllm: int,
                                                              kind: str | None,
                                                              says: str) -> None:
    found = verdict(metric_names(page(sglang, vllm)))
    assert (found.engine.kind if found.engine else None) == kind
    assert found.note is not None and says in found.note


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_first_page_decides_and_a_change_of_engine_must_hold() -> None:
    told: list[tuple[str, str | None]] = []
    with PageServer(VLLM) as server:
        c = DetectingCollector(server.url, api_key=None, auth=None,
                               on_engine=lambda e, note: told.append((e.kind, note)))
        try:
            assert c.engine is engines.get(engines.DEFAULT)
            first = await c.poll()
            assert told == [("vllm", None)] and c.engine.kind == "vllm"
            assert first.data is not None and first.data.extra.get("engine") == "vllm"
            # One page of the other engine (a proxy's hiccup) changes nothing.
            server.page = SGLANG
            assert not (await c.poll()).ok  # vLLM's reader: no vllm: names on this page
            await c.poll()  # the page asked again: SGLang's, once
            server.page = VLLM
            assert (await c.poll()).ok and told == [("vllm", None)]
            # Restarted as SGLang: two pages in a row, and the collector is SGLang's.
            server.page = SGLANG
            for _ in range(6):
                reading = await c.poll()
                if len(told) > 1:
                    break
            assert c.engine.kind == "sglang" and told[1][0] == "sglang"
            assert told[1][1] == ("its /metrics page is now SGLang's, where it was vLLM's "
                                  "(restarted as another engine?): read as SGLang from now on")
            reading = await c.poll()
            assert reading.ok and reading.data is not None
            assert reading.data.extra.get("engine") != "vllm"
        finally:
            await c.close()


async def test_a_mixed_page_is_said_once_and_followed_when_it_shifts() -> None:
    told: list[tuple[str, str | None]] = []
    clock = Clock()
    with PageServer(SGLANG + page(3, 1)) as server:
        c = DetectingCollector(server.url, api_key=None, auth=None, clock=clock,
                               on_engine=lambda e, note: told.append((e.kind, note)))
        try:
            for _ in range(3):
                await c.poll()
                clock.now += 40  # a page read well is asked again every RECHECK_S
            assert len(told) == 1 and told[0][0] == "sglang"
            assert "holds SGLang's (4 families) and vLLM's (1 family) names: read as SGLang" \
                in (told[0][1] or "")
            server.page = SGLANG + page(1, 5)  # still SGLang's names: its reader reads well
            for _ in range(3):
                await c.poll()
                clock.now += 40
            assert c.engine.kind == "vllm" and len(told) == 2
            assert (told[1][1] or "").startswith("its /metrics page is now vLLM's, where it was "
                                                 "SGLang's")
            assert "read as vLLM, whose names are the most" in (told[1][1] or "")
        finally:
            await c.close()


async def test_a_page_of_no_engine_leaves_the_default() -> None:
    told: list[str] = []
    with PageServer("up 1\n") as server:
        c = DetectingCollector(server.url, api_key=None, auth=None,
                               on_engine=lambda e, note: told.append(e.kind))
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
    c = DetectingCollector(url, api_key=None, auth=None,
                           on_engine=lambda e, note: told.append(e.kind))
    try:
        reading = await c.poll()
        assert not reading.ok and told == [] and c.engine.kind == engines.DEFAULT
    finally:
        await c.close()


def test_inspect_metrics_says_a_page_holds_another_engines_names_too() -> None:
    from collectors import page_kind, promtext, sglang, vllm
    known = (("sglang", sglang.PAGE_PREFIXES), ("vllm", vllm.PAGE_PREFIXES))
    kind = page_kind.of_families(promtext.parse(page(3, 1)), known)
    assert kind.kind == "sglang" and kind.found["other_engines"] == {"vllm": 1}
    assert kind.summary.endswith("; it also holds 1 of vllm's family")
    tie = page_kind.of_families(promtext.parse(page(2, 2)), known)
    assert tie.kind == "sglang"
    assert tie.summary.endswith("; it also holds 2 of vllm's families, as many: read as the "
                                "default engine's")
