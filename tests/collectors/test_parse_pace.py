"""What paces /metrics is the page's own parse cost. A long-lived process (a dashboard after
hours, a test worker after a thousand tests) holds many objects, and a full garbage
collection that a parse's allocations set off can take tens of milliseconds of the same
thread's CPU: counted as the page's, one such collection made the collector skip the next
reads of a small page (the recorded vLLM page, 18 kB, paced to 2 s in a full suite run)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from corpus import URL, ManualClock, attach, played, recording

from collectors import engine_http
from collectors.vllm.collector import VllmCollector

COLLECTION_CPU_S = 0.2  # a slow collection, four times the page's share of a 1 s poll


@pytest.fixture
def slow_collection_in_the_parse(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Each parse sets off a collection (the young generation's threshold at 1) that spends
    COLLECTION_CPU_S of this thread's CPU, once a parse: the times it ran are yielded."""
    armed: list[bool] = []
    ran: list[float] = []
    read = engine_http.page_kind.read

    def arming_read(*args: Any) -> Any:
        armed.append(True)
        return read(*args)

    def collection(phase: str, _info: dict[str, int]) -> None:
        if phase == "start" and armed:
            armed.clear()
            end = time.thread_time() + COLLECTION_CPU_S
            while time.thread_time() < end:
                pass
            ran.append(time.monotonic())

    monkeypatch.setattr(engine_http.page_kind, "read", arming_read)
    threshold = gc.get_threshold()
    gc.callbacks.append(collection)
    gc.set_threshold(1)
    try:
        yield ran
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(collection)


async def test_a_collection_set_off_by_the_parse_does_not_pace_the_page(
        slow_collection_in_the_parse: list[float]) -> None:
    rec, clock = recording("vllm-device"), ManualClock()
    collector = VllmCollector(URL, window_s=60.0, clock=clock)
    client = attach(collector, clock)
    for poll in played(rec, clock):
        client.serve(poll.answers)
        reading = await collector.poll()
        assert reading.ok, reading.message
    pages = len(rec.polls)
    assert client.asked.count("/metrics") == pages  # no page skipped for the collections
    assert len(slow_collection_in_the_parse) == pages  # each parse set one off, and it ran
    assert collector.metrics_every_s() == 0.0
