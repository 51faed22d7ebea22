"""What every collector shares: failures become readings, and polls are bounded in time."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from collectors.readings import Reading, Status
from collectors.units import MIB

if TYPE_CHECKING:  # httpx only where a caller brings a client: the polls need none of it
    import httpx

T = TypeVar("T")


class SourceUnavailable(Exception):
    """The source cannot exist on this machine (no NVIDIA driver): a state, not a fault."""


class FailureTracker:
    """Remembers when the current run of failures began, so the UI can show its age.
    ``clock`` gives a reading's time (monotonic seconds); a test passes its own."""

    def __init__(self, source: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.clock = clock
        self._failing_since: float | None = None
        self.last_good_at: float | None = None

    def ok(self, data: T, status: Status = Status.OK, message: str = "") -> Reading[T]:
        now = self.clock()
        self._failing_since = None
        self.last_good_at = now
        return Reading(self.source, status, data, message, at=now)

    def fail(self, status: Status, message: str, data: T | None = None) -> Reading[T]:
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        return Reading(self.source, status, data, message, at=now,
                       failing_since=self._failing_since)


def describe(exc: BaseException) -> str:
    """One line for an exception: its type and message, never a traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, TooLarge) and text:
        return text  # our own words say it whole ("URL: more than 64 MiB")
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


class TooLarge(ValueError):
    """A response past the size a page of its kind could have: read no further."""


async def get_bounded(client: httpx.AsyncClient, url: str, *, deadline_s: float,
                      limit_bytes: int) -> httpx.Response:
    """GET whose whole answer comes within ``deadline_s`` (httpx's timeout is per read: a page
    that drips a byte a second never trips it) and is at most ``limit_bytes`` (a server that
    streams without end would otherwise fill memory before any deadline). TimeoutError or
    TooLarge past them; httpx errors as httpx raises them."""
    async with asyncio.timeout(deadline_s), client.stream("GET", url) as resp:
        body = bytearray()
        async for chunk in resp.aiter_bytes():  # decoded: a gzip bomb counts as it unpacks
            body += chunk
            if len(body) > limit_bytes:
                raise TooLarge(f"{url}: more than {limit_bytes / MIB:g} MiB")
        headers = [(k, v) for k, v in resp.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length")]
        return type(resp)(resp.status_code, headers=headers, content=bytes(body),
                          request=resp.request)


def uncollected(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with the cyclic garbage collector off, on again after (also when it
    fails; left off where something else had turned it off). For work that makes many
    objects and frees them by their counts: a full collection it triggers would hold the GIL
    50-100 ms in a big process (a fleet's decode), or be counted as its own CPU time (a
    /metrics page's parse, whose cost paces the reads)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return fn(*args)
    finally:
        if was:
            gc.enable()


async def run_blocking(fn: Callable[[], T], timeout: float) -> T:
    """Run a blocking call (ctypes, /proc) in a thread, giving up after ``timeout`` seconds.

    A thread cannot be killed; on timeout the call finishes in the background and its
    result is dropped. Callers never start a second poll of the same source meanwhile
    (the poll loop awaits each poll), so timed-out calls cannot pile up.

    Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives as the
    call completes, and a poll loop that was asked to stop would then run on forever.
    """
    fut = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        done, _ = await asyncio.wait({fut}, timeout=timeout)
    except asyncio.CancelledError:
        fut.cancel()
        raise
    if not done:
        fut.cancel()
        raise TimeoutError(f"no answer within {timeout:g} s")
    return fut.result()


def read_text(path: str) -> str:
    """A /proc or /sys file's text by a plain open of its string path (the host poll reads
    a dozen of them each second, where building a pathlib.Path costs as much as the read);
    the kernel's bytes are any bytes (a process's name), so undecodable ones are replaced."""
    with open(path, errors="replace") as f:
        return f.read()
