"""How the live session polls: each source in a loop of its own, a poll at a time; and a
free port for a scenario that needs one (scenarios.ports)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from collectors.readings import Reading
from collectors.source import Source, SourceKey
from scenarios.ports import EPHEMERAL as EPHEMERAL  # re-exported
from scenarios.ports import free_port as free_port  # re-exported


async def poll_loop(source: Source, interval: float,
                    sink: Callable[[SourceKey, Reading[Any]], None]) -> None:
    """One source's loop: a poll at a time (never two at once), at its own interval."""
    while True:
        started = time.monotonic()
        for key, reading in await source.poll():
            sink(key, reading)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
