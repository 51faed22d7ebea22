"""Every source is polled on one grid of the poll interval, so a second's readings land
together and their readers (the panels, the headline figures, the alerts) come once just
after: the grid's arithmetic, and a poll loop's times on a clock of the test's own."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from collectors import AFTER_POLLS_S, until_next
from engram_top.live import polling


def test_the_next_point_of_the_grid() -> None:
    assert until_next(1.0, now=100.25) == pytest.approx(0.75)
    assert until_next(1.0, now=100.0) == pytest.approx(1.0)  # on a point: the next one
    assert until_next(1.0, AFTER_POLLS_S, now=100.1) == pytest.approx(0.1)
    assert until_next(1.0, AFTER_POLLS_S, now=100.3) == pytest.approx(0.9)
    assert until_next(0.25, AFTER_POLLS_S, now=100.0) == pytest.approx(0.2)
    assert until_next(1.0, now=100.9, at_least=0.5) == pytest.approx(1.1)  # not in a moment
    assert until_next(0.0, now=5.0) == 0.0 and until_next(-1.0, now=5.0) == 0.0


@pytest.mark.parametrize("start", [10.03, 10.09, 10.0, 10.06])
async def test_a_poll_loop_polls_on_the_grid_never_twice_in_a_moment(
        monkeypatch: pytest.MonkeyPatch, start: float) -> None:
    clock = [start]
    polls: list[float] = []

    class Source:
        name = "gpu"

        async def poll(self) -> list[Any]:
            polls.append(clock[0])
            clock[0] += 0.013  # what a poll takes
            return []

    async def sleep(seconds: float) -> None:
        assert seconds >= 0
        clock[0] += seconds
        if len(polls) >= 8:
            raise asyncio.CancelledError

    monkeypatch.setattr(polling, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(polling, "asyncio", SimpleNamespace(sleep=sleep))
    with pytest.raises(asyncio.CancelledError):
        await polling.poll_loop(Source(), 0.1, lambda key, reading: None)

    assert polls[0] == start  # the first at once
    for earlier, later in zip(polls, polls[1:], strict=False):
        assert later - earlier >= 0.05 - 1e-9  # never two polls in a moment
    for t in polls[1:]:
        assert round(t * 10) == pytest.approx(t * 10, abs=1e-6)  # then each on a point
    assert polls[-1] - polls[1] == pytest.approx(0.1 * (len(polls) - 2))
