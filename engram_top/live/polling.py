"""How the live session polls: each source in a loop of its own, a poll at a time; and a
free port for a scenario that needs one."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

from collectors.readings import Reading
from collectors.source import Source, SourceKey


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def poll_loop(source: Source, interval: float,
                    sink: Callable[[SourceKey, Reading[Any]], None]) -> None:
    """One source's loop: a poll at a time (never two at once), at its own interval."""
    while True:
        started = time.monotonic()
        for key, reading in await source.poll():
            sink(key, reading)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
