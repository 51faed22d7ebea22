"""The run store: the latest reading of every source, the last good one, bounded time series
with a coarser tier for long runs (memory stays flat), the run's facts, and events.

One writer (the session's poll loops) and readers on the same event loop (UI, exports).
Each source has a version number so a UI can redraw only what changed.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collectors.readings import GpuData, HostData, Reading, ServerData, Status


class Series:
    """Recent points at full rate, and older ones averaged ``coarse_every`` to one."""

    def __init__(self, fine_len: int = 600, coarse_every: int = 10, coarse_len: int = 720) -> None:
        self.fine: deque[tuple[float, float]] = deque(maxlen=fine_len)
        self.coarse: deque[tuple[float, float]] = deque(maxlen=coarse_len)
        self.coarse_every = coarse_every
        self._pending: list[tuple[float, float]] = []

    def add(self, t: float, value: float) -> None:
        self.fine.append((t, value))
        self._pending.append((t, value))
        if len(self._pending) >= self.coarse_every:
            ts = [p[0] for p in self._pending]
            vs = [p[1] for p in self._pending]
            self.coarse.append((ts[-1], sum(vs) / len(vs)))
            self._pending = []

    def values(self, last: int | None = None) -> list[float]:
        pts = list(self.fine)
        if last is not None:
            pts = pts[-last:]
        return [v for _, v in pts]

    def points(self) -> list[tuple[float, float]]:
        """Coarse history older than the fine window, then the fine points."""
        start = self.fine[0][0] if self.fine else float("inf")
        return [p for p in self.coarse if p[0] < start] + list(self.fine)


@dataclass
class Event:
    wall: float
    level: str  # "info", "warning", "error"
    text: str


@dataclass
class RunFacts:
    """One scenario instance from launch to stop."""

    scenario: str
    placement: str
    node: str
    time_scale: float
    launched_wall: float
    launched_at: float  # monotonic
    state: str = "launching"  # launching, starting, ready, stopping, stopped, exited, failed
    pid: int | None = None
    log_path: str | None = None
    url: str | None = None
    ready_at: float | None = None  # monotonic
    ended_at: float | None = None
    exit_code: int | None = None
    baseline_host_used: int | None = None
    baseline_gpu_used: dict[int, int] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)  # what the log parser extracted
    phase: str = "launching"
    phase_durations: dict[str, float] = field(default_factory=dict)
    expected_ready_s: float | None = None  # what start-up should take (for progress)
    title: str = ""
    owned: bool = True  # False for a server someone else started (attach)
    failure: str | None = None
    # Why a ready server is not whole (a TP rank died while it still answers), else None.
    degraded: str | None = None
    lines_seen: int = 0
    # The supervisor's recent log lines (a bounded deque it appends to): the log pane's source.
    log_lines: Any = None
    results: dict[str, Any] = field(default_factory=dict)  # headline figures (facts.summary)
    # A simulated server's modelled launch-to-ready (node time, the seed's 125.04 s), which
    # it runs time_scale times faster; None for a real server.
    planned_ready_s: float | None = None

    @property
    def ready_s(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.launched_at

    def node_seconds(self, real_s: float | None) -> float | None:
        """A start-up time as the node would take it (node_time)."""
        return None if real_s is None else node_time(real_s, self.time_scale,
                                                     self.planned_ready_s)


def node_time(real_s: float, time_scale: float, planned_s: float | None) -> float:
    """Start-up seconds as the node would take them. A simulated server runs its modelled
    start-up (``planned_s``, node time) ``time_scale`` times faster; what this machine
    adds on top (interpreter start, a busy CPU, the log read at its cadence) is real time
    that counts once, not 1/time_scale times: at x0.02, half a second of load would
    otherwise read as 25 s more start-up."""
    if planned_s is None or time_scale == 1:
        return real_s / time_scale
    return planned_s + (real_s - planned_s * time_scale)


class RunStore:
    def __init__(self) -> None:
        self.latest: dict[str, Reading[Any]] = {}
        self.last_ok: dict[str, Reading[Any]] = {}
        self.versions: dict[str, int] = {}
        self.series: dict[str, Series] = {}
        self.run: RunFacts | None = None
        self.history: dict[str, RunFacts] = {}  # the latest run of each scenario
        self.runs: list[RunFacts] = []  # every run, oldest first: repeated runs are trials
        # "Now" for ages on screen: a replay or a test sets its own clock here.
        self.clock: Callable[[], float] = time.monotonic
        self.events: deque[Event] = deque(maxlen=500)
        self.alerts: dict[str, Any] = {}  # active alerts by id (engram_top.alerts.Alert)
        # Standing problems a part of the session reports (the recorder cannot write):
        # alert name -> (severity, message); an alert while it stands.
        self.conditions: dict[str, tuple[str, str]] = {}
        self.load: dict[str, Any] = {}
        self.node = ""
        self.scenarios: Any = None  # the session's ScenarioFile, for the scenario list
        # Called as listener(what, payload) for ("reading", (kind, Reading)), ("event", Event)
        # and ("run", RunFacts) after the store has taken them in: how a recorder follows
        # the store without the session knowing about it. A listener must not raise.
        self.listeners: list[Callable[[str, Any], None]] = []

    def _tell(self, what: str, payload: Any) -> None:
        for listener in self.listeners:
            listener(what, payload)

    def set_run(self, facts: RunFacts) -> None:
        """A new run becomes the one shown; the previous server's readings go with it."""
        self.run = facts
        self.history[facts.scenario] = facts
        if not any(r is facts for r in self.runs):
            self.runs.append(facts)
        for kind in ("server",):
            self.latest.pop(kind, None)
            self.last_ok.pop(kind, None)
            self.bump(kind)
        for name in [n for n in self.series if n.startswith("server.")]:
            del self.series[name]
        self.load = {}
        self.bump("run")
        self._tell("run", facts)

    def facts_for(self, scenario: str) -> RunFacts | None:
        return self.history.get(scenario)

    # ------------------------------------------------------------------ writing
    def bump(self, key: str) -> None:
        self.versions[key] = self.versions.get(key, 0) + 1

    def event(self, level: str, text: str) -> None:
        event = Event(time.time(), level, text)
        self.events.append(event)
        self.bump("events")
        self._tell("event", event)

    def add(self, kind: str, reading: Reading[Any]) -> None:
        """Store a reading under its kind ("gpu", "host", "server")."""
        previous = self.latest.get(kind)
        self.latest[kind] = reading
        if reading.data is not None and reading.status in (Status.OK, Status.STARTING):
            self.last_ok[kind] = reading
            self._record_series(kind, reading)
        if previous is None or previous.status != reading.status:
            level = "info" if reading.status in (Status.OK, Status.STARTING) else "warning"
            text = reading.message or reading.status.value
            self.event(level, f"{kind}: {text}")
        self.bump(kind)
        self._tell("reading", (kind, reading))

    def _record_series(self, kind: str, reading: Reading[Any]) -> None:
        t = reading.at
        data = reading.data
        if isinstance(data, GpuData):
            for dev in data.devices:
                self._point(f"gpu{dev.index}.used", t, dev.used_bytes)
                if dev.util_gpu_pct is not None:
                    self._point(f"gpu{dev.index}.util", t, dev.util_gpu_pct)
                if dev.pcie_rx_bytes_per_s is not None:
                    self._point(f"gpu{dev.index}.pcie_rx", t, dev.pcie_rx_bytes_per_s)
                if dev.pcie_tx_bytes_per_s is not None:
                    self._point(f"gpu{dev.index}.pcie_tx", t, dev.pcie_tx_bytes_per_s)
        elif isinstance(data, HostData):
            self._point("host.used", t, data.used_bytes)
            self._point("host.swap_in", t, data.swap_in_bytes)  # cumulative: alerts take rates
        elif isinstance(data, ServerData):
            for key in ("token_usage", "num_running_reqs", "num_queue_reqs",
                        "output_tokens_per_s"):
                value = getattr(data, key)
                if value is not None:
                    self._point(f"server.{key}", t, value)
            for key in ("ttft", "itl"):
                q = getattr(data, key)
                if q is not None and q.p50 is not None:
                    self._point(f"server.{key}.p50", t, q.p50)

    def _point(self, name: str, t: float, value: float) -> None:
        if not math.isfinite(value):  # a gap, not a NaN that poisons averages and axes
            return
        series = self.series.get(name)
        if series is None:
            series = self.series[name] = Series()
        series.add(t, float(value))

    # ------------------------------------------------------------------ reading
    def data(self, kind: str) -> Any:
        """The newest good data of a source (None if it never answered)."""
        reading = self.last_ok.get(kind)
        return None if reading is None else reading.data

    def version(self, *kinds: str) -> tuple[int, ...]:
        return tuple(self.versions.get(k, 0) for k in kinds)
