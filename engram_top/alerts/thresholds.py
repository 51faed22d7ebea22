"""When each alert starts: its thresholds, each with its default and the check of its
[alerts] key in the user's config file (engram_top.settings.user_config reads the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scenarios.bounds import Range, bounded_float

ALERT_NAMES = ("hbm", "kv", "host-available", "swap-in", "queue-growth", "no-huge-pages",
               "server-died", "rank-died", "server-silent", "recording", "xid", "ecc")


def _setting(default: Any, kind: str | Range, what: str = "") -> Any:
    """A Thresholds field with how the file's [alerts] value is checked: kind is "bool",
    "names" (a list of ALERT_NAMES) or the Range of a number; what is how a refusal
    describes a good value (a Range says its own)."""
    if isinstance(kind, Range):
        what = kind.describe()
    return field(default=default, metadata={"kind": kind, "what": what})


# Every number has its range, so that none can be what start-up cannot take (a 400-digit
# integer is no float) or a window without end. Why these ends: the readings come once a
# second, so a window under a second holds one of them; a day is as long as a live alert
# can mean; a MiB/s rate of a million is past any swap device.
_PCT = bounded_float(0, 100, what="a percentage")
_WINDOW_S = bounded_float(1, 86400, unit="seconds")


@dataclass(frozen=True)
class Thresholds:
    """When each alert starts. Percentages are 0-100, times in seconds. Each field is one
    [alerts] key of the config file, with its default and its check, written once here."""

    enabled: bool = _setting(True, "bool", "true or false")
    # Alert names switched off one by one.
    disabled: tuple[str, ...] = _setting(
        (), "names", f"a list of alert names ({', '.join(ALERT_NAMES)})")
    hbm_used_pct: float = _setting(95.0, _PCT)
    kv_usage_pct: float = _setting(90.0, _PCT)
    host_available_pct: float = _setting(10.0, _PCT)
    swap_in_mib_per_s: float = _setting(1.0, bounded_float(0, 1e6, what="a rate in MiB/s"))
    swap_window_s: float = _setting(5.0, _WINDOW_S)
    queue_growth_window_s: float = _setting(30.0, _WINDOW_S)
    server_silent_s: float = _setting(10.0, _WINDOW_S)
    # A percentage alert clears only this far back on the safe side of its threshold, and
    # any alert only once it has stayed clear this long: a value hovering at a threshold
    # gives one alert, not one a second.
    hysteresis_pct: float = _setting(2.0, _PCT)
    clear_after_s: float = _setting(5.0, bounded_float(0, 86400, unit="seconds"))

    def on(self, name: str) -> bool:
        return self.enabled and name not in self.disabled
