"""One device, several readers: the poll loop and the supervisor's guards read the same GPUs.

A driver answers one query at a time, so readers must not queue their own queries behind one
another's (with 8 GPUs at 25 ms a query, a poll holds the driver 200 ms). Instead a reader
that finds a sample in flight waits for it and takes its result; one that finds a result
recent enough takes that. The device is queried no more often than by one reader, and no
reader is refused because another was reading: a switch's HBM-release guard waits for the
poll's sample rather than failing on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class SampleBusy(RuntimeError):
    """The sample in flight has not returned within the wait (a hung driver)."""


class SharedSampler(Generic[T]):
    """Wraps a blocking ``sample()`` for readers on any thread."""

    def __init__(self, backend: Any, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self._clock = clock
        self._cond = threading.Condition()
        self._busy_since: float | None = None
        # The last outcome: when its sample finished, and its value or exception.
        self._last: tuple[float, T | None, BaseException | None] | None = None

    def sample(self, max_age: float = 0.0, wait_s: float = 2.0) -> T:
        """A result that finished at most ``max_age`` seconds before this call (one in flight
        now qualifies once it finishes), else a sample of its own. SampleBusy if the sample
        in flight has not returned within ``wait_s``."""
        asked = self._clock()
        deadline = asked + wait_s
        with self._cond:
            while True:
                last = self._last
                if last is not None and last[0] >= asked - max_age:
                    return _outcome(last)
                if self._busy_since is None:
                    self._busy_since = self._clock()
                    break
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise SampleBusy(f"the sample in flight has not returned for "
                                     f"{self._clock() - self._busy_since:.1f} s (driver hung?)")
                self._cond.wait(remaining)
        value: T | None = None
        error: BaseException | None = None
        try:
            value = self.backend.sample()
        except BaseException as exc:  # shared with the readers waiting on it, then raised
            error = exc
        outcome = (self._clock(), value, error)
        with self._cond:
            self._busy_since = None
            self._last = outcome
            self._cond.notify_all()
        return _outcome(outcome)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()


def _outcome(last: tuple[float, Any, BaseException | None]) -> Any:
    if last[2] is not None:
        raise last[2]
    return last[1]
