"""The run store: the latest reading of every source, the last good one, bounded time series
with a coarser tier for long runs (memory stays flat), the run's facts, and events.

Readings are kept under their source's key (node, source) and series under (node, source,
metric, labels), so one source can feed many nodes. ``latest`` and ``last_ok`` show this
node's sources by name ("gpu", "host", "server"), "server" being the watched server.

One writer (the session's poll loops) and readers on the same event loop (UI, exports).
Each source has a version number so a UI can redraw only what changed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, overload

from collectors.engram_setting import EngramSetting
from collectors.readings import GpuData, HostData, OtherData, Reading, ServerData, Status
from collectors.source import LOCAL, SourceKey, SourceName
from collectors.startup_facts import StartupFacts
from engram_top.model.death import Death
from engram_top.model.figures import RunFigures
from engram_top.model.fingerprint import Fingerprint
from scenarios.load_window import LoadWindow
from scenarios.runstate import RunState


class SeriesName(StrEnum):
    """The series the store keeps of its sources' readings, by metric: named here once, for
    the store that writes them and every chart, alert and export that reads them (a name
    spelt wrong is an error, not an empty chart). A reading of another type keeps its
    numbers under their own field names."""

    # Of each GPU (labelled gpu=INDEX).
    USED = "used"  # also the host's
    UTIL = "util"
    PCIE_RX = "pcie_rx"
    PCIE_TX = "pcie_tx"
    ENERGY = "energy"  # cumulative, mJ
    # Of the host.
    SWAP_IN = "swap_in"  # cumulative, bytes
    # Of the server.
    TOKEN_USAGE = "token_usage"
    RUNNING = "num_running_reqs"
    QUEUED = "num_queue_reqs"
    OUTPUT_TOKENS_PER_S = "output_tokens_per_s"
    TTFT_P50 = "ttft.p50"
    TTFT_P50_LO = "ttft.p50_lo"
    TTFT_P50_HI = "ttft.p50_hi"
    ITL_P50 = "itl.p50"
    ITL_P50_LO = "itl.p50_lo"
    ITL_P50_HI = "itl.p50_hi"


class StoreTopic(StrEnum):
    """What the store keeps versions of besides its sources (SourceName, "NODE/SOURCE"):
    a redraw asks for the versions of what it shows."""

    RUN = "run"  # the watched run's facts
    EVENTS = "events"
    BASELINE = "baseline"  # the comparisons' baseline, as the user chose it


# A series of the server's latency: the interpolated p50, and its coarse bucket's bounds.
_P50 = {"ttft": (SeriesName.TTFT_P50, SeriesName.TTFT_P50_LO, SeriesName.TTFT_P50_HI),
        "itl": (SeriesName.ITL_P50, SeriesName.ITL_P50_LO, SeriesName.ITL_P50_HI)}
_SERVER_GAUGES = (SeriesName.TOKEN_USAGE, SeriesName.RUNNING, SeriesName.QUEUED,
                  SeriesName.OUTPUT_TOKENS_PER_S)


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

    # Readers that look at the last seconds (the alerts each second, the sparklines each
    # redraw) read from the newest point back: a full series holds 600 fine and 720 coarse
    # points, and an agent runs for months, so copying them all each second was a cost
    # that grew for two hours and then stayed.

    def values(self, last: int | None = None) -> list[float]:
        if last is None:
            return [v for _, v in self.fine]
        newest = [v for _, v in itertools.islice(reversed(self.fine), max(0, last))]
        newest.reverse()
        return newest

    def points(self) -> list[tuple[float, float]]:
        """Coarse history older than the fine window, then the fine points."""
        start = self.fine[0][0] if self.fine else float("inf")
        return [p for p in self.coarse if p[0] < start] + list(self.fine)

    def fine_since(self, start: float) -> list[tuple[float, float]]:
        """The fine points at or after ``start``, oldest first."""
        newest: list[tuple[float, float]] = []
        for p in reversed(self.fine):
            if p[0] < start:
                break
            newest.append(p)
        newest.reverse()
        return newest

    def around(self, start: float) -> tuple[tuple[float, float] | None,
                                            list[tuple[float, float]]]:
        """Of :meth:`points`: the last point at or before ``start`` (None if none) and
        every point after it, oldest first."""
        after: list[tuple[float, float]] = []
        for p in reversed(self.fine):
            if p[0] <= start:
                after.reverse()
                return p, after
            after.append(p)
        first = self.fine[0][0] if self.fine else float("inf")
        for p in reversed(self.coarse):
            if p[0] >= first:
                continue  # averaged from points the fine tier still has
            if p[0] <= start:
                after.reverse()
                return p, after
            after.append(p)
        after.reverse()
        return None, after


Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: (("gpu", "0"),)
GPU_LABEL = "gpu"  # the label of a GPU's series: its index


class SeriesKey(NamedTuple):
    """One time series: what it measures (metric) of which source on which node, and of
    which part (labels: the GPU's index)."""

    node: str
    source: str
    metric: str
    labels: Labels = ()

    @property
    def name(self) -> str:
        """Its column in exports: gpu0.used, host.used, server.ttft.p50; NODE/... elsewhere."""
        base = f"{self.source}{''.join(v for _, v in self.labels)}.{self.metric}"
        return base if self.node == LOCAL else f"{self.node}/{base}"

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


def node_key(name: str, server: SourceKey) -> SourceKey:
    """A source of this node by name, "server" being the watched server's."""
    return server if name == SourceName.SERVER else SourceKey(LOCAL, name)


class NodeView(Mapping[str, "Reading[Any]"]):
    """Readings of this node's sources by name, "server" being the watched server's."""

    def __init__(self, readings: dict[SourceKey, Reading[Any]], server: SourceKey) -> None:
        self._readings = readings
        self._server = server

    def __getitem__(self, name: str) -> Reading[Any]:
        return self._readings[node_key(name, self._server)]

    def __iter__(self) -> Iterator[str]:
        for key in self._readings:
            if key == self._server:
                yield SourceName.SERVER
            elif key.node == LOCAL and key.source != SourceName.SERVER:
                yield key.source

    def __len__(self) -> int:
        return sum(1 for _ in self)


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
    state: RunState = RunState.LAUNCHING
    pid: int | None = None
    log_path: str | None = None
    url: str | None = None
    ready_at: float | None = None  # monotonic
    ended_at: float | None = None
    exit_code: int | None = None
    baseline_host_used: int | None = None
    baseline_gpu_used: dict[int, int] = field(default_factory=dict)
    startup: StartupFacts = field(default_factory=StartupFacts)  # what the log parser learnt
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
    results: RunFigures = field(default_factory=RunFigures)  # headline figures (facts.summary)
    # A simulated server's modelled launch-to-ready (node time, the seed's 125.04 s), which
    # it runs time_scale times faster; None for a real server.
    planned_ready_s: float | None = None
    # The node its server's readings come under: this node's for a server we started, its
    # URL for one someone else started (several can be attached and polled at once).
    server_node: str = LOCAL
    # Access-log fragments of the dashboard's own polls in this server's log (its engine's),
    # which the log pane hides.
    own_polls: tuple[str, ...] = ()
    # The model it serves (the scenario's model path, else what the server says), and its
    # Engram placement and prefetch verdict as the engine reads them (None: not read yet).
    model: str | None = None
    engram: EngramSetting | None = None
    # Whose dialect its server speaks, as its engine names itself (Engine.speaks): what the
    # panels call its figures; "" until known (set by whoever knows its engine).
    engine: str = ""
    engine_name: str = ""  # as a comparison names it (Engine.display)
    # Its engine's words where they differ from the dashboard's ("retracted": "preempted"):
    # declared by the engine, read by the panels through facts.word.
    words: dict[str, str] = field(default_factory=dict)
    # An attached server whose process is still being looked for on this host (its port's
    # owner, a second's walk of the sockets): until then its processes on a GPU cannot be
    # told from other tenants'.
    finding_processes: bool = False
    # Why it died, once classified (engram_top.live.forensics), where it ended unasked.
    death: Death | None = None
    # An attached server's deaths before it last came back on its URL (restarted by
    # systemd, a container's policy, a person), oldest first, the latest few: the
    # restart-loop alert counts them with ``death``.
    earlier_deaths: tuple[Death, ...] = ()
    # What it ran as, on what (engram_top.model.fingerprint): for `engram-top diff`.
    fingerprint: Fingerprint | None = None

    @property
    def deaths(self) -> tuple[Death, ...]:
        """Every death classified of its server, oldest first (the earlier ones of a server
        restarted on its URL, then the latest)."""
        return (*self.earlier_deaths, *(() if self.death is None else (self.death,)))

    @property
    def ready_s(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.launched_at

    @overload
    def node_seconds(self, real_s: float) -> float: ...
    @overload
    def node_seconds(self, real_s: None) -> None: ...
    @overload
    def node_seconds(self, real_s: float | None) -> float | None: ...

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
        self.readings: dict[SourceKey, Reading[Any]] = {}
        self.good: dict[SourceKey, Reading[Any]] = {}  # the last good reading of each
        self.versions: dict[str, int] = {}
        self.series: dict[SeriesKey, Series] = {}
        self._lines: dict[tuple[SourceKey, str, Labels], Series] = {}  # _point's index
        # The server whose figures the panels show: the watched run's.
        self.watched = SourceKey(LOCAL, SourceName.SERVER)
        self.run: RunFacts | None = None
        self.history: dict[str, RunFacts] = {}  # the latest run of each scenario
        self.runs: list[RunFacts] = []  # every run, oldest first: repeated runs are trials
        # "Now" for ages on screen: a replay or a test sets its own clock here.
        self.clock: Callable[[], float] = time.monotonic
        self.events: deque[Event] = deque(maxlen=500)
        self.alerts: dict[str, Any] = {}  # active alerts by id (engram_top.alerts.monitor.Alert)
        # Standing problems a part of the session reports (the recorder cannot write):
        # alert name -> message; an alert (of its definition's severity) while it stands.
        self.conditions: dict[str, str] = {}
        self.load: dict[str, Any] = {}
        # The demo load's own requests over the last window, in node time: the intervals of
        # TPOT, throughput and goodput for a run measured once (None: no load of ours, or
        # not yet).
        self.load_window: LoadWindow | None = None
        self.node = ""
        self.scenarios: Any = None  # the session's ScenarioFile, for the scenario list
        # The scenario every comparison of the session is against, as the user chose it
        # (`b` on the compare screen): the strip, the compare screen and snapshots alike.
        # None: the device placement's scenario, else the first (compare.runs).
        self.baseline: str | None = None
        # Called as listener(what, payload) for ("reading", (kind, Reading)), ("event", Event)
        # and ("run", RunFacts) after the store has taken them in: how a recorder follows
        # the store without the session knowing about it. A listener must not raise.
        self.listeners: list[Callable[[str, Any], None]] = []
        self.derived: dict[str, tuple[tuple[object, ...], Any]] = {}  # model.derived's

    def _tell(self, what: str, payload: Any) -> None:
        for listener in self.listeners:
            listener(what, payload)

    @property
    def latest(self) -> Mapping[str, Reading[Any]]:
        return NodeView(self.readings, self.watched)

    @property
    def last_ok(self) -> Mapping[str, Reading[Any]]:
        return NodeView(self.good, self.watched)

    def line(self, source: str, metric: SeriesName | str, **labels: str) -> Series | None:
        """A series of this node's source (SERVER: the watched one), by metric and labels."""
        node = self.watched.node if source == SourceName.SERVER else LOCAL
        return self.series.get(SeriesKey(node, source, metric, tuple(sorted(labels.items()))))

    def set_run(self, facts: RunFacts) -> None:
        """A new run becomes the one shown. A server we start speaks at this node's server
        key, so the previous server's readings go; an attached one keeps its own."""
        self.run = facts
        self.history[facts.scenario] = facts
        if not any(r is facts for r in self.runs):
            self.runs.append(facts)
        self.watched = SourceKey(facts.server_node, SourceName.SERVER)
        if facts.server_node == LOCAL:
            self.readings.pop(self.watched, None)
            self.good.pop(self.watched, None)
            for key in [k for k in self.series
                        if (k.node, k.source) == (LOCAL, SourceName.SERVER)]:
                del self.series[key]
            self._lines.clear()
        self.bump(SourceName.SERVER)
        self.load = {}
        self.load_window = None
        self.bump(StoreTopic.RUN)
        self._tell("run", facts)

    def facts_for(self, scenario: str) -> RunFacts | None:
        return self.history.get(scenario)

    # ------------------------------------------------------------------ writing
    def bump(self, key: str) -> None:
        self.versions[key] = self.versions.get(key, 0) + 1

    def choose_baseline(self, scenario: str | None) -> None:
        if scenario != self.baseline:
            self.baseline = scenario
            self.bump(StoreTopic.BASELINE)

    def event(self, level: str, text: str) -> None:
        event = Event(time.time(), level, text)
        self.events.append(event)
        self.bump(StoreTopic.EVENTS)
        self._tell("event", event)

    def add(self, key: SourceKey | str, reading: Reading[Any]) -> None:
        """Store a reading under its source's key: a SourceName on this node, "NODE/SOURCE"
        on another."""
        key = key if isinstance(key, SourceKey) else SourceKey.parse(key)
        # What the UI keeps versions of.
        kind = SourceName.SERVER if key == self.watched else str(key)
        previous = self.readings.get(key)
        self.readings[key] = reading
        if reading.data is not None and reading.status in (Status.OK, Status.STARTING):
            self.good[key] = reading
            self._record_series(key, reading)
        if previous is None or previous.status != reading.status:
            level = "info" if reading.status in (Status.OK, Status.STARTING) else "warning"
            text = reading.message or reading.status.value
            self.event(level, f"{key}: {text}")
        elif reading.status is Status.OK and reading.message and \
                reading.message != previous.message:
            # A source that reads with a fault (a metrics page with lines left out): said
            # once, when it starts or changes, not every poll.
            self.event("warning", f"{key}: {reading.message}")
        self.bump(kind)
        self._tell("reading", (key, reading))

    def add_history(self, key: SourceKey | str, reading: Reading[Any]) -> None:
        """A reading from before this session (an agent's recording) into the series alone:
        the readings shown and the events stay the live ones. Oldest first, before the live
        ones. ValueError for a key that is no source key."""
        key = key if isinstance(key, SourceKey) else SourceKey.parse(key)
        if reading.data is not None and reading.status in (Status.OK, Status.STARTING):
            self._record_series(key, reading)

    def _record_series(self, key: SourceKey, reading: Reading[Any]) -> None:
        t = reading.at
        data = reading.data

        def point(metric: str, value: float | None, labels: Labels = ()) -> None:
            self._point(key, metric, labels, t, value)

        if isinstance(data, GpuData):
            for dev in data.devices:
                gpu = ((GPU_LABEL, str(dev.index)),)
                self._point(key, SeriesName.USED, gpu, t, dev.used_bytes)
                self._point(key, SeriesName.UTIL, gpu, t, dev.util_gpu_pct)
                self._point(key, SeriesName.PCIE_RX, gpu, t, dev.pcie_rx_bytes_per_s)
                self._point(key, SeriesName.PCIE_TX, gpu, t, dev.pcie_tx_bytes_per_s)
                # Cumulative: energy per token takes its deltas over a window.
                self._point(key, SeriesName.ENERGY, gpu, t, dev.energy_mj)
        elif isinstance(data, HostData):
            point(SeriesName.USED, data.used_bytes)
            point(SeriesName.SWAP_IN, data.swap_in_bytes)  # cumulative: alerts take rates
        elif isinstance(data, ServerData):
            for name in _SERVER_GAUGES:
                point(name, getattr(data, name))
            for field_name, (p50, lo, hi) in _P50.items():
                q = getattr(data, field_name)
                # The interpolated figure (the charts plot it), and beside it the bucket it
                # lies in where that is too wide for it to be a measurement: the exports'
                # p50_lo and p50_hi (no p50_hi in the open +Inf bucket).
                b = None if q is None else q.bucketed("p50")
                point(p50, None if b is None else b.value)
                if b is not None and b.coarse:
                    point(lo, b.lo)
                    point(hi, b.hi)
        else:
            # A reading of a type this store has no panel for (a new source's): its
            # numbers are kept as series all the same, by field name, never dropped.
            for field_name, value in _numbers(data):
                point(field_name, value)

    def _point(self, key: SourceKey, metric: str, labels: Labels, t: float,
               value: float | None) -> None:
        if value is None or not math.isfinite(value):  # a gap, not a NaN that poisons
            return  # averages and axes
        # The hot path of polling and of a replay's seek (a dozen points a reading): the
        # series found by a plain tuple, not by building and hashing a SeriesKey each time.
        series = self._lines.get((key, metric, labels))
        if series is None:
            name = SeriesKey(key.node, key.source, metric, labels)
            series = self.series.get(name)
            if series is None:
                series = self.series[name] = Series()
            self._lines[(key, metric, labels)] = series
        series.add(t, float(value))

    # ------------------------------------------------------------------ reading
    def data(self, kind: str) -> Any:
        """The newest good data of a source (None if it never answered). What last_ok
        gives, looked up straight (the panels and checks ask it about 60 times a second)."""
        reading = self.good.get(node_key(kind, self.watched))
        return None if reading is None else reading.data

    def version(self, *kinds: str) -> tuple[int, ...]:
        return tuple(self.versions.get(k, 0) for k in kinds)


def _numbers(data: Any) -> list[tuple[str, float]]:
    """The top-level numbers of a dataclass or a mapping (booleans are not figures)."""
    if isinstance(data, OtherData):
        items = list(data.fields.items())
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        items = [(f.name, getattr(data, f.name)) for f in dataclasses.fields(data)]
    elif isinstance(data, Mapping):
        items = list(data.items())
    else:
        return []
    return [(str(k), float(v)) for k, v in items
            if isinstance(v, numbers.Real) and not isinstance(v, bool)]
