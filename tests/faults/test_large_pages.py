"""A /metrics page under the size limit that costs much to parse (a server with tens of
thousands of label sets, or a hostile one) is read only as often as its parse costs a
twentieth of a core, parsed off the screen's thread, and the reading says how often; a real
engine's page is read every poll. Real HTTP on loopback; the test moves the clock."""

from __future__ import annotations

import asyncio

from helpers import PageServer

from collectors.engine_http import PACE_STEPS
from collectors.readings import Reading, ServerData, Status
from collectors.sglang.collector import SglangCollector

HEAD = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs RUNNING\n"


def filler(samples: int) -> str:
    """One family of ``samples`` label sets: about 60 bytes each."""
    return "# TYPE sglang:adapter_requests gauge\n" + "".join(
        f'sglang:adapter_requests{{lora="adapter-{i:07d}"}} {i}\n' for i in range(samples))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_page_slow_to_parse_is_read_less_often_and_says_so() -> None:
    big = filler(150_000)  # about 8 MiB: well over a twentieth of a core on any machine
    clock = Clock()

    async def polls(server: PageServer) -> list[tuple[Reading[ServerData], int, float]]:
        collector = SglangCollector(server.url, clock=clock)
        out = []
        try:
            for running, step in ((3, 0.0), (7, 1.0), (9, None)):
                server.page = HEAD.replace("RUNNING", str(running)) + big
                clock.now += collector.metrics_every_s() if step is None else step
                reading = await collector.poll()
                out.append((reading, server.asked["/metrics"], collector.metrics_every_s()))
        finally:
            await collector.close()
        return out

    with PageServer() as server:
        (first, asked1, every), (second, asked2, _), (third, asked3, _) = asyncio.run(
            polls(server))
        health = server.asked["/health"]
    assert first.status is Status.OK, first.message
    assert every in PACE_STEPS
    assert f"is slow to parse: read every {every:.0f} s" in first.message
    assert "metrics page (8 MiB) is slow to parse" in first.message
    assert first.data.num_running_reqs == 3
    # A second later: the page is not fetched again, its last figures stand, /health is
    # asked (so a server that went away meanwhile is seen).
    assert (asked1, asked2) == (1, 1)
    assert second.data.num_running_reqs == 3
    assert health == 3
    # Once the interval has passed it is read again.
    assert asked3 == 2 and third.data.num_running_reqs == 9


def test_a_real_sized_page_is_read_every_poll() -> None:
    clock = Clock()

    async def polls(server: PageServer) -> tuple[list[float | None], float]:
        collector = SglangCollector(server.url, clock=clock)
        seen = []
        try:
            for running in (1, 2, 3):
                server.page = HEAD.replace("RUNNING", str(running)) + filler(300)
                seen.append((await collector.poll()).data.num_running_reqs)
                clock.now += 1.0
        finally:
            await collector.close()
        return seen, collector.metrics_every_s()

    with PageServer() as server:
        seen, every = asyncio.run(polls(server))
        assert server.asked["/metrics"] == 3
    assert seen == [1, 2, 3] and every == 0.0
