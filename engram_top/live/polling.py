"""How the live session polls: each source in a loop of its own, a poll at a time, all on
one grid (collectors.poll_grid), their readers just after; and a free port for a scenario
that needs one (scenarios.ports)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from collectors.poll_grid import AFTER_POLLS_S, until_next
from collectors.readings import Reading
from collectors.source import Source, SourceKey
from scenarios.ports import EPHEMERAL as EPHEMERAL  # re-exported
from scenarios.ports import free_port as free_port  # re-exported


async def poll_loop(source: Source, interval: float,
                    sink: Callable[[SourceKey, Reading[Any]], None]) -> None:
    """One source's loop: a poll at a time (never two at once), at its own interval, on the
    process's grid of it (collectors.poll_grid): at least half an interval after the last
    began, so a loop that starts between two points does not poll twice in a moment."""
    while True:
        started = time.monotonic()
        for key, reading in await source.poll():
            sink(key, reading)
        now = time.monotonic()
        await asyncio.sleep(until_next(interval, now=now,
                                       at_least=interval / 2 - (now - started)))


async def after_polls(every_s: float) -> None:
    """Sleep to just after the next round of polls (a reader of them: collectors.poll_grid)."""
    await asyncio.sleep(until_next(every_s, AFTER_POLLS_S))
