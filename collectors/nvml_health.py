"""GPU health through NVML: clock-event (throttle) reasons as names, XID errors as events.

The bit values are NVML's (nvmlClocksEventReason*, the same bits as the older
nvmlClocksThrottleReason*), spelt out so that decoding needs no driver and reads the same
whatever pynvml a machine has.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any

import pynvml

# Bits that say the clocks are held down, in NVML's order.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
)
# An idle GPU clocks down, and applications clocks are a setting someone chose: neither
# costs a serving GPU anything, so neither counts as throttling.
NOT_THROTTLING = 0x1 | 0x2


def throttle_names(mask: int) -> tuple[str, ...]:
    """The throttling reasons in an NVML clock-event bitmask; a bit NVML adds later is
    shown by its value rather than dropped."""
    mask &= ~NOT_THROTTLING
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_BITS)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"0x{bit:x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


# What the common XIDs mean (NVIDIA's XID catalogue), for the alert's text.
XID_MEANINGS = {
    13: "graphics engine exception", 31: "GPU memory page fault",
    43: "GPU stopped processing", 45: "preemptive cleanup", 48: "double-bit ECC error",
    63: "ECC page retirement or row remapping", 64: "ECC row remapping failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate",
    94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout",
    120: "GSP error",
}


def xid_text(xid: int) -> str:
    meaning = XID_MEANINGS.get(xid)
    return f"XID {xid}" + (f" ({meaning})" if meaning else "")


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
