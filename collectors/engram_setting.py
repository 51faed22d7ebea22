"""A server's Engram placement and its prefetch verdict, as its engine reads them
(scenarios.engines: the environment, the server args, the start-up log, the GPU): a typed
reading the store keeps with the run, and the panels and exports read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngramSetting:
    """The Engram placement of one server and its prefetch verdict (a recording keeps its
    fields)."""

    placement: str | None  # device, host, host-prefetch; None when nothing says
    layout: str | None  # shared, private, auto (host placements)
    pinned: bool | None
    source: str  # what it was read from: "environment", "engram-config", "log", ...
    prefetch: str  # "engaged", "would not engage: ...", "off", "asked: ..." or "n/a"
    reasons: tuple[str, ...] = ()  # why it would not engage (each condition that fails)

    @property
    def verdict(self) -> str:
        return f"prefetch: {self.prefetch}"
