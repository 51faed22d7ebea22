"""How the live session polls: each source in a loop of its own, a poll at a time; and a
free port for a scenario that needs one."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.readings import Reading
from collectors.source import Source, SourceKey

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below: the ports services are configured on


def free_port() -> int:
    """A port free now for a server of ours, below the kernel's ephemeral range where one
    is room for it: a port bind(0) gives is drawn from the range every outgoing connection
    takes its source port from too, and a busy node (or test suite) took it in the second
    before the server bound it (uvicorn: address already in use, exit 3). Else bind(0)."""
    low = _ephemeral_start()
    if low - LOWEST >= 1000:
        # The OS's randomness, not the random module's: a process that seeded it (a bench
        # drawing its requests) would offer every process the same ports.
        for port in random.SystemRandom().sample(range(LOWEST, low), 20):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


async def poll_loop(source: Source, interval: float,
                    sink: Callable[[SourceKey, Reading[Any]], None]) -> None:
    """One source's loop: a poll at a time (never two at once), at its own interval."""
    while True:
        started = time.monotonic()
        for key, reading in await source.poll():
            sink(key, reading)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
