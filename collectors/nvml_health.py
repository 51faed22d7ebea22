"""GPU health through NVML: XID errors as events, polled without blocking.

Decoding the codes (throttle reasons, XID meanings) is nvml_codes', which needs no pynvml.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

import pynvml

KEEP_XIDS = 8  # the last ones per GPU: enough to see a pattern, bounded
_DRAIN = 64  # events taken per GPU per sample at most, so a storm cannot hold a sample
# A GPU that cannot register says so for good; other failures are retried next sample.
_FOR_GOOD = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


class XidWatch:
    """Critical XID events per GPU, polled without blocking (a 0 ms wait).

    NVML delivers only the events that happen after registration: an XID from before
    the watch started is not seen. Not thread-safe: NvmlBackend calls it under its lock.
    """

    def __init__(self) -> None:
        self._sets: dict[str, Any] = {}  # GPU key -> its event set
        self._refused: dict[str, str] = {}  # GPU key -> why it cannot be watched
        self._seen: dict[str, deque[int]] = {}

    def poll(self, key: str, handle: Any) -> tuple[tuple[int, ...], str | None]:
        """(the last XIDs seen on this GPU, why it cannot be watched or None)."""
        if key in self._refused:
            return (), self._refused[key]
        seen = self._seen.setdefault(key, deque(maxlen=KEEP_XIDS))
        try:
            event_set = self._sets.get(key)
            if event_set is None:
                event_set = self._register(key, handle)
            for _ in range(_DRAIN):
                try:
                    data = pynvml.nvmlEventSetWait(event_set, 0)
                except pynvml.NVMLError_Timeout:
                    break  # nothing pending: the usual answer
                if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    seen.append(int(data.eventData))
        except pynvml.NVMLError as exc:
            text = str(exc) or type(exc).__name__
            if exc.value in _FOR_GOOD:
                self._refused[key] = text
            return tuple(seen), text
        return tuple(seen), None

    def _register(self, key: str, handle: Any) -> Any:
        event_set = pynvml.nvmlEventSetCreate()
        try:
            pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError,
                                            event_set)
        except pynvml.NVMLError:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(event_set)
            raise
        self._sets[key] = event_set
        return event_set

    def close(self) -> None:
        """Free the event sets (before nvmlShutdown); the XIDs seen are kept."""
        for event_set in self._sets.values():
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(event_set)
        self._sets.clear()
        self._refused.clear()
