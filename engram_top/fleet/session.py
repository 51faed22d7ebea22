"""The fleet as Prometheus reports it: one row per node, its alerts, its placement, and each
node's run as a trial of its placement for the comparison.

A FleetSession polls one PrometheusSource at its own interval (never two polls at once) and
keeps each node's last answer and when it came, so a node Prometheus stops reporting keeps
its last figures, marked with their age, instead of vanishing. A node's detail (its panels)
takes its half hour of history from range queries, then each refresh's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from collectors.agent_series import AgentFigures
from collectors.fleet_dialect import FleetDialect
from collectors.prometheus import DEADLINE_S, FleetNodeData, PrometheusSource, PromStatus
from collectors.readings import Reading, Status
from collectors.router_series import StackFigures
from collectors.units import GIB
from engram_top.alerts.thresholds import Thresholds, fleet_alerts
from engram_top.compare.measures import (
    ENERGY,
    KV,
    KV_RATIO,
    THROUGHPUT,
    WEIGHTS,
    Metric,
    Registry,
    ms,
)
from engram_top.compare.run_result import RunResult
from engram_top.fleet.detail import HISTORY_S, NodeDetail, history_step
from scenarios import engines

HOST_TABLES_MIN_BYTES = 64 * GIB  # shared or huge-page memory this large: Engram tables
# The least pause between two refreshes, however slow the last one or small the interval:
# a refresh loop never spins.
MIN_PAUSE_S = 0.1

# What a fleet can compare: Prometheus has quantiles from histograms, not per-request means,
# and no start-up or host-delta figure (a node's memory before launch is not kept). Its
# histogram_quantile answers a figure interpolated inside a bucket, without the bucket: the
# rows and their intervals say so (label and note), as none can be told resolved or not.
INTERPOLATED_NOTE = ("p50 and p99 TTFT and TPOT are Prometheus's histogram_quantile, "
                     "interpolated inside a histogram bucket (the first from 0) that its answer "
                     "does not name: a figure, and an interval across nodes, no finer than "
                     "that bucket, which may be wider than the difference.")
TTFT_P50 = Metric("ttft_p50_ms", "p50 TTFT, interpolated", "ms", "lower",
                  extract=lambda r: ms(r.ttft_p50_s), panel="latency", note=INTERPOLATED_NOTE)
TPOT_P50 = Metric("tpot_p50_ms", "p50 TPOT, interpolated", "ms", "lower",
                  extract=lambda r: ms(r.tpot_p50_s), panel="latency")
TTFT_P99 = Metric("ttft_p99_ms", "p99 TTFT, interpolated", "ms", "lower",
                  extract=lambda r: ms(r.ttft_p99_s), panel="latency")
TPOT_P99 = Metric("tpot_p99_ms", "p99 TPOT, interpolated", "ms", "lower",
                  extract=lambda r: ms(r.tpot_p99_s), panel="latency")
METRICS = Registry((WEIGHTS, KV, KV_RATIO, TTFT_P50, TTFT_P99, TPOT_P50, TPOT_P99, THROUGHPUT,
                    ENERGY))


class NodeState(StrEnum):
    """A fleet node's state in its row: its server's, as Prometheus last told it."""

    SERVING = "serving"  # requests running
    IDLE = "idle"
    NO_SERVER = "no server"  # the node answers, its inference engine's series do not
    ROUTER = "router"  # no engine: a router's or LMCache's series (its row's stack)
    STALE = "stale"  # its figures are older than the fleet's stale_after_s


# No figures of a server to show (a router's are its own, in the row's stack).
UNREAD = frozenset({NodeState.NO_SERVER, NodeState.STALE, NodeState.ROUTER})


@dataclass(frozen=True)
class FleetRow:
    node: str
    placement: str  # "?" where neither a label nor the figures tell
    placement_inferred: bool
    state: NodeState
    gpus: int
    hbm_min: int | None
    hbm_max: int | None
    hbm_total: int | None
    kv_usage: float | None  # 0..1, the fullest pool's
    kv_full: float | None
    kv_swa: float | None
    kv_tokens: int | None
    weights_gb: float | None
    host_used: int | None
    host_available: int | None
    host_total: int | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    output_tok_s: float | None
    running: float | None
    alerts: tuple[str, ...]
    missing: tuple[str, ...]
    age_s: float
    power_w: float | None = None  # every GPU's draw (dcgm-exporter), summed
    engine: str = ""  # whose series its server figures are ("" where it has none)
    # No engine's series, or the scrape job named for its engine down (FleetNodeData's).
    server_missing: bool = False
    # What the node's engram-top agent serves (NUMA free, unexplained HBM, each scenario's
    # fit, its alerts); None where no agent runs there.
    agent: AgentFigures | None = None
    stack: StackFigures | None = None  # a router's or LMCache's figures, where it runs one

    @property
    def joules_per_token(self) -> float | None:
        """The node's GPUs' draw over its output rate: energy per output token."""
        if self.power_w is None or not self.output_tok_s:
            return None
        return self.power_w / self.output_tok_s

    @property
    def hbm_pct(self) -> float | None:
        if self.hbm_max is None or not self.hbm_total:
            return None
        return 100.0 * self.hbm_max / self.hbm_total

    @property
    def kv_pct(self) -> float | None:
        return None if self.kv_usage is None else 100 * self.kv_usage

    @property
    def silent_s(self) -> float | None:
        """How long the node's server has been silent as far as the fleet can tell: without
        end when its exporter is missing, its age once the row is stale."""
        if self.server_missing:
            return math.inf
        return self.age_s if self.state == NodeState.STALE else None

    @property
    def host_available_pct(self) -> float | None:
        if self.host_available is None or not self.host_total:
            return None
        return 100.0 * self.host_available / self.host_total

    def matches(self, text: str) -> bool:
        """The filter: every word must appear in the node, placement, state or an alert;
        `key=value` words match that column alone."""
        hay = {"node": self.node, "placement": self.placement, "state": self.state,
               "alerts": " ".join(self.alerts), "missing": " ".join(self.missing)}
        for word in text.lower().split():
            key, eq, value = word.partition("=")
            if eq:
                if key not in hay or value not in hay[key].lower():
                    return False
            elif not any(word in v.lower() for v in hay.values()):
                return False
        return True


def dialects() -> tuple[FleetDialect, ...]:
    """Every engine's series a fleet reads, each once (an engine and its simulated twin
    share theirs), the default engine's first."""
    found = (engines.get(kind).fleet for kind in engines.kinds())
    return tuple({id(d): d for d in found if d is not None}.values())


def infer_placement(data: FleetNodeData) -> tuple[str, bool]:
    """The scrape config's `placement` label; else what host memory shows: Engram tables in
    host memory take ~190 GiB of shared or huge-page memory, which a device placement lacks.
    Synchronous reads and prefetch look alike from outside: "host?" says only that much."""
    if data.placement:
        return data.placement, False
    if data.agent is not None and data.agent.placement:
        return data.agent.placement, False  # the agent read it from the server itself
    h = data.host
    huge = h.get("huge_total", 0.0) - h.get("huge_free", 0.0)
    tables = max(huge * h.get("huge_size", 2 * 1024 * 1024), h.get("shmem", 0.0))
    if not h:
        return "?", True
    return ("host?" if tables >= HOST_TABLES_MIN_BYTES else "device?"), True


def row(data: FleetNodeData, age_s: float, t: Thresholds, stale_after_s: float) -> FleetRow:
    placement, inferred = infer_placement(data)
    used = [g.used_bytes for g in data.gpus if g.used_bytes is not None]
    totals = [g.total_bytes for g in data.gpus if g.total_bytes is not None]
    h, s, lat = data.host, data.server, data.latency
    total = _int(h.get("total"))
    available = _int(h.get("available"))
    kv = s.get("token_usage")
    if age_s > stale_after_s:
        state = NodeState.STALE
    elif not s:
        state = NodeState.ROUTER if data.stack is not None else NodeState.NO_SERVER
    else:
        state = NodeState.SERVING if (s.get("num_running_reqs") or 0) > 0 else NodeState.IDLE
    r = FleetRow(
        node=data.node, placement=placement, placement_inferred=inferred, state=state,
        gpus=len(data.gpus), hbm_min=min(used) if used else None,
        hbm_max=max(used) if used else None, hbm_total=max(totals) if totals else None,
        kv_usage=kv, kv_full=s.get("full_token_usage"), kv_swa=s.get("swa_token_usage"),
        kv_tokens=_int(s.get("max_total_num_tokens")), weights_gb=s.get("weight_memory_usage_gb"),
        host_used=None if total is None or available is None else total - available,
        host_available=available, host_total=total,
        ttft_p50=lat.get("ttft_p50"), ttft_p99=lat.get("ttft_p99"),
        tpot_p50=lat.get("tpot_p50"), tpot_p99=lat.get("tpot_p99"),
        output_tok_s=lat.get("output_tok_s"), running=s.get("num_running_reqs"),
        alerts=(), missing=data.missing, age_s=age_s, server_missing=data.server_silent,
        engine=data.dialect.name if data.dialect is not None else "", agent=data.agent,
        stack=data.stack,
        power_w=sum(g.power_w for g in data.gpus if g.power_w is not None)
        if data.gpus and all(g.power_w is not None for g in data.gpus) else None)
    # The dashboard's alerts, with the user's thresholds (the rules are in the alerts'
    # definitions), read from the row itself. It is new and nobody holds it yet, so they are
    # set in place: dataclasses.replace copied every field, a third of a 2,000-node refresh.
    ids = (i for i, _ in r.agent.alerts) if r.agent is not None else ()
    object.__setattr__(r, "alerts", fleet_alerts(r, t, ids))
    return r


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def results(rows: list[FleetRow]) -> list[RunResult]:
    """Each serving node as one trial of its placement (inferred ones under their "?" name,
    so they never mix with labelled ones)."""
    out = []
    trials: dict[str, int] = {}
    for r in rows:
        if r.state in UNREAD or r.placement == "?":
            continue
        trial = trials[r.placement] = trials.get(r.placement, 0) + 1
        out.append(RunResult(
            scenario=r.placement, placement=r.placement.rstrip("?"),
            source=f"prometheus:{r.node}", trial=trial, gpus=r.gpus or None,
            weights_gb=r.weights_gb, kv_tokens=r.kv_tokens,
            ttft_p50_s=r.ttft_p50, tpot_p50_s=r.tpot_p50, ttft_p99_s=r.ttft_p99,
            tpot_p99_s=r.tpot_p99, output_tok_s=r.output_tok_s,
            joules_per_token=r.joules_per_token,
            notes=("latencies: Prometheus's histogram_quantile over the rate window, "
                   "interpolated inside its buckets",)))
    return out


@dataclass
class FleetSession:
    """Prometheus polled every `interval` seconds; the nodes' last answers kept."""

    url: str
    interval: float = 5.0
    window: str = "1m"
    deadline_s: float = DEADLINE_S  # each query's whole answer, at most
    thresholds: Thresholds = field(default_factory=Thresholds)
    nodes: dict[str, tuple[float, FleetNodeData]] = field(default_factory=dict)
    status: Reading[Any] | None = None
    polls: int = 0
    on_poll: Callable[[], None] | None = None
    demo: Any = None  # a FleetDemo this session started and stops
    clock: Callable[[], float] = time.monotonic  # readings' `at` are on this clock
    wall_clock: Callable[[], float] = time.time
    # How Prometheus is asked (engram_top.cli.credentials), and the header's words for it.
    headers: dict[str, str] | None = field(default=None, repr=False)
    auth: tuple[str, str] | None = field(default=None, repr=False)
    credential: str = ""

    def __post_init__(self) -> None:
        self.source = PrometheusSource(self.url, dialects=dialects(), window=self.window,
                                       deadline_s=self.deadline_s,
                                       headers=self.headers, auth=self.auth)
        self.url = self.source.url  # shown everywhere: without a URL's user:password@
        self.walls: dict[str, float] = {}  # when each node's figures were read (wall clock)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="poll prometheus")

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception as exc:  # a drawing callback's: the refreshes go on regardless
                self._failed(exc)
            await asyncio.sleep(max(MIN_PAUSE_S, self.interval - (time.monotonic() - started)))

    async def poll_once(self) -> None:
        try:
            out = await self.source.poll()
        except Exception as exc:  # what the source did not foresee: an error reading too
            self._failed(exc)
            out = []
        for key, reading in out:
            if key.source == "fleet" and reading.data is not None:
                self.nodes[key.node] = (reading.at, reading.data)
                self.walls[key.node] = reading.wall
            elif key.source == "prometheus":
                self.status = reading
        self.polls += 1
        if self.on_poll is not None:
            self.on_poll()

    def _failed(self, exc: Exception) -> None:
        """A refresh that raised: an error reading with its words and since when."""
        old = self.status
        since = old.failing_since if old is not None and not old.ok else None
        self.status = Reading("prometheus", Status.ERROR,
                              message=f"Prometheus: {self.source.why(exc)}",
                              failing_since=since or time.monotonic())

    @property
    def ok(self) -> bool:
        return self.status is not None and self.status.status is Status.OK

    def rows(self, now: float | None = None) -> list[FleetRow]:
        return [r for node in sorted(self.nodes) if (r := self.row_of(node, now)) is not None]

    def row_of(self, node: str, now: float | None = None) -> FleetRow | None:
        if node not in self.nodes:
            return None
        at, data = self.nodes[node]
        now = self.clock() if now is None else now
        stale = max(3 * self.interval, self.thresholds.server_silent_s)
        return row(data, now - at, self.thresholds, stale)

    def detail(self, node: str) -> NodeDetail | None:
        """The node's figures as the dashboard's panels take them (its newest ones in)."""
        r = self.row_of(node)
        if r is None:
            return None
        d = NodeDetail(node, self.url, self.window, r.placement, clock=self.clock,
                       wall_clock=self.wall_clock)
        self.feed(d)
        return d

    def feed(self, d: NodeDetail) -> bool:
        """The node's newest figures into its detail; False when it has them already."""
        entry = self.nodes.get(d.node)
        return entry is not None and d.add(self.walls.get(d.node, self.wall_clock()), entry[1])

    async def history(self, node: str, span_s: float = HISTORY_S
                      ) -> list[tuple[float, FleetNodeData]]:
        """The node's last ``span_s`` seconds from Prometheus's range queries (raises
        PageError, TimeoutError or OSError as a refresh's queries do)."""
        entry = self.nodes.get(node)
        if entry is None:
            return []
        end = self.wall_clock()
        return await self.source.history(entry[1], end - span_s, end,
                                         history_step(self.interval, span_s))

    async def load_history(self, d: NodeDetail, span_s: float = HISTORY_S) -> str:
        """The node's history into its detail; what came of it, in words for the screen
        (whatever the answers were: this never raises but for cancellation)."""
        try:
            points = await self.history(d.node, span_s)
            taken = d.backfill(points)
        except Exception as exc:
            return f"history: none ({self.source.why(exc)})"
        if not taken:
            return "history: Prometheus holds nothing older for this node"
        return (f"history: {taken} readings over the last {span_s / 60:.0f} min, "
                f"from Prometheus's range queries")

    def close_now(self) -> None:
        """Without an event loop (a crash, a signal): stop what the demo started."""
        if self.demo is not None:
            self.demo.stop_now()
            self.demo = None

    def prom_status(self) -> PromStatus | None:
        return self.status.data if self.status is not None and self.status.ok else None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # The loop ends only by this cancel; whatever else ended it is no reason to fail
            # a quit.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.source.close()
        if self.demo is not None:
            demo, self.demo = self.demo, None
            await demo.stop()
