"""When each alert starts: Thresholds, one field per [alerts] key of the user's config file
(engram_top.settings.user_config reads the file). The switches and the settings against
flapping are here; each alert's own thresholds come from its definition
(engram_top.alerts.definitions), so a new alert's keys need no second listing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from engram_top.alerts.definitions import ALERT_NAMES, ALERTS, BY_NAME, PCT, Setting
from scenarios.bounds import bounded_float

ENABLED = Setting("enabled", True, "bool", "true or false")
# Alert names switched off one by one.
DISABLED = Setting("disabled", (), "names", f"a list of alert names ({', '.join(ALERT_NAMES)})")
# A percentage alert clears only this far back on the safe side of its threshold, and any
# alert only once it has stayed clear this long: a value hovering at a threshold gives one
# alert, not one a second.
HYSTERESIS = Setting("hysteresis_pct", 2.0, PCT)
CLEAR_AFTER = Setting("clear_after_s", 5.0, bounded_float(0, 86400, unit="seconds"))

# Every [alerts] key, in the config file's order.
SETTINGS: tuple[Setting, ...] = (ENABLED, DISABLED, *(s for a in ALERTS for s in a.settings),
                                 HYSTERESIS, CLEAR_AFTER,
                                 *(s for a in ALERTS for s in a.hold_settings()))


def _on(self: Any, name: str) -> bool:
    return bool(self.enabled) and name not in self.disabled


def _hold(self: Any, name: str, what: str) -> float:
    """An alert's hold ("for_s", "keep_firing_s"): the config's where the definition has
    one, else its definition's (0: none)."""
    a = BY_NAME.get(name)
    if a is None:
        return 0.0
    return float(getattr(self, f"{a.key}_{what}", getattr(a, what)))


# A frozen dataclass made from SETTINGS: each field's default and, in its metadata, how the
# file's value is checked ("kind": "bool", "names" or a Range; "what": how a refusal
# describes a good value). Percentages are 0-100, times in seconds.
Thresholds: Any = dataclasses.make_dataclass(
    "Thresholds",
    [(s.key, type(s.default),
      dataclasses.field(default=s.default, metadata={"kind": s.kind, "what": s.described}))
     for s in SETTINGS],
    namespace={"on": _on, "hold": _hold,
               "__doc__": "When each alert starts: one field per [alerts] key."},
    frozen=True)
Thresholds.__module__ = __name__


def first_judged_s(t: Any, server_window_s: float) -> float:
    """Seconds after a server is ready until every alert has judged a whole window: the
    server's own (``server_window_s``) and each windowed alert's, then its longest hold
    before firing, and one evaluation (once a second) to see it."""
    windows = (server_window_s, t.queue_growth_window_s, t.swap_window_s, t.pcie_window_s)
    holds = (t.hold(a.name, "for_s") for a in ALERTS)
    return max(windows) + max(holds, default=0.0) + 1.0


def fleet_alerts(row: Any, t: Any, agent_ids: Iterable[str] = ()) -> tuple[str, ...]:
    """The dashboard's alerts the fleet can tell from one node's row (FleetRow), with the
    user's thresholds: each alert whose definition has a fleet rule; then those a node's
    agent has active (``agent_ids``: `hbm:gpu2`, `host-available`), where no rule of the
    fleet's said the same alert already and the user's config has it on."""
    said: list[str] = []
    names: set[str] = set()
    for a in ALERTS:
        if a.fleet is not None and t.on(a.name):
            text = a.fleet.says(row, getattr(t, a.fleet.setting))
            if text is not None:
                said.append(text)
                names.add(a.name)
    said += [i for i in agent_ids if i.split(":")[0] not in names and t.on(i.split(":")[0])]
    return tuple(said)
