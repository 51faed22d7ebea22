"""One node of a fleet as the dashboard's own panels see it: its Prometheus figures turned
into the readings a local node's collectors give (GPUs, host memory, the server), kept in a
RunStore of its own, with its history from Prometheus's range queries.

What Prometheus does not carry stays unknown, never zero: dcgm-exporter has no per-process
memory (no "this server" share of a GPU), node-exporter sees no process tree (no server
RSS), and nothing says when the node launched (no host Δ since launch).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from collectors.prom_answer import small_index
from collectors.prometheus import FleetGpu, FleetNodeData
from collectors.readings import GpuData, GpuDevice, HostData, Quantiles, Reading, ServerData, Status
from collectors.source import LOCAL, SourceKey, SourceName
from engram_top.model.store import RunFacts, RunStore, StoreTopic
from scenarios.runstate import RunState

HISTORY_S = 1800.0  # a node's detail opens with its last half hour
HISTORY_POINTS = 360  # at most, per series: the store's fine tier holds 600
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
          "y": 31536000.0}


def duration_s(text: str) -> float | None:
    """A Prometheus duration ("1m", "30s", "1h30m") in seconds; None if it is not one."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _device(i: int, g: FleetGpu) -> GpuDevice:
    used = g.used_bytes or 0
    total = g.total_bytes or used
    return GpuDevice(
        index=i if (n := small_index(g.index)) is None else n, name=g.model or "GPU", uuid="",
        total_bytes=total, reserved_bytes=g.reserved_bytes or 0, used_bytes=used,
        free_bytes=g.free_bytes if g.free_bytes is not None else max(0, total - used),
        util_gpu_pct=None if g.util_pct is None else round(g.util_pct),
        power_w=g.power_w, pcie_rx_bytes_per_s=g.pcie_rx_bytes_per_s,
        pcie_tx_bytes_per_s=g.pcie_tx_bytes_per_s)


def _host(h: dict[str, float]) -> HostData:
    def b(name: str) -> int:
        return int(h.get(name, 0))
    total, available = b("total"), b("available")
    return HostData(
        total_bytes=total, available_bytes=available, used_bytes=total - available,
        free_bytes=b("free") if "free" in h else available, cached_bytes=b("cached"),
        shmem_bytes=b("shmem"), hugepages_total=b("huge_total"), hugepages_free=b("huge_free"),
        hugepage_size_bytes=b("huge_size"), anon_hugepages_bytes=b("anon_huge"),
        swap_total_bytes=b("swap_total"), swap_used_bytes=max(0, b("swap_total") - b("swap_free")),
        swap_in_bytes=0, swap_out_bytes=0, backend="node-exporter")


def _quantiles(lat: dict[str, float], name: str) -> Quantiles | None:
    p50, p99 = lat.get(f"{name}_p50"), lat.get(f"{name}_p99")
    return None if p50 is None and p99 is None else Quantiles(p50=p50, p99=p99, mean=None,
                                                              count=0)


def _server(url: str, d: FleetNodeData, window_s: float | None) -> ServerData:
    s = d.server
    weights = s.get("weight_memory_usage_gb")
    capacity = s.get("max_total_num_tokens")
    rank0 = {k: v for k, v in (("weight_gb", weights), ("max_total_num_tokens", capacity))
             if v is not None}
    return ServerData(
        url=url, healthy=True,
        max_total_num_tokens=None if capacity is None else int(capacity), weight_gb=weights,
        num_running_reqs=s.get("num_running_reqs"), num_queue_reqs=s.get("num_queue_reqs"),
        num_used_tokens=s.get("num_used_tokens"),
        token_usage=s.get("token_usage"), gen_throughput=s.get("gen_throughput"),
        full_token_usage=s.get("full_token_usage"), swa_token_usage=s.get("swa_token_usage"),
        ttft=_quantiles(d.latency, "ttft"), itl=_quantiles(d.latency, "tpot"),
        output_tokens_per_s=d.latency.get("output_tok_s"), window_s=window_s,
        # The fullest rank's figures (the query takes the max across ranks): rank 0's here.
        ranks={0: rank0} if rank0 else {})


def readings(d: FleetNodeData, url: str, window_s: float | None, at: float,
             wall: float) -> dict[str, Reading[object]]:
    """The node's readings by source name, as its own collectors would give them; a source
    whose exporter Prometheus lacks for this node is an error reading that says which."""
    def missing(what: str) -> str:
        return f"Prometheus has no {what} for this node"
    gpu: Reading[object] = (
        Reading(SourceName.GPU, Status.OK,
                data=GpuData(driver_version="", backend="dcgm-exporter",
                             devices=tuple(_device(i, g) for i, g in enumerate(d.gpus))),
                at=at, wall=wall) if d.gpus else
        Reading(SourceName.GPU, Status.ERROR, message=missing("dcgm-exporter series"), at=at,
                wall=wall))
    host: Reading[object] = (
        Reading(SourceName.HOST, Status.OK, data=_host(d.host), at=at, wall=wall)
        if "total" in d.host
        else Reading(SourceName.HOST, Status.ERROR, message=missing("node-exporter series"),
                     at=at, wall=wall))
    server: Reading[object] = (
        Reading(SourceName.SERVER, Status.OK, data=_server(url, d, window_s), at=at, wall=wall)
        if d.server else
        Reading(SourceName.SERVER, Status.ERROR, message=missing("inference engine's series"),
                at=at, wall=wall))
    return {SourceName.GPU: gpu, SourceName.HOST: host, SourceName.SERVER: server}


class NodeDetail:
    """A node's RunStore, fed by the fleet's refreshes and, once, by its history."""

    def __init__(self, node: str, url: str, window: str, placement: str,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.node, self.url = node, url
        self.window_s = duration_s(window)
        self.clock, self.wall_clock = clock, wall_clock
        self.store = RunStore()
        self.store.clock = clock
        self.store.node = node
        now = clock()
        self.store.set_run(RunFacts(
            scenario=node, placement=placement, node=node, time_scale=1.0,
            launched_wall=wall_clock(), launched_at=now, state=RunState.ATTACHED,
            url=url, owned=False, title=f"{node} through Prometheus"))
        self.last_wall = 0.0  # the newest reading's wall time: older ones are not added

    def _at(self, wall: float) -> float:
        return self.clock() - (self.wall_clock() - wall)

    def add(self, wall: float, data: FleetNodeData) -> bool:
        """Take the node's figures read at ``wall``; False when not newer than the last."""
        if wall <= self.last_wall:
            return False
        self.last_wall = wall
        self._speaks(data)
        for name, reading in readings(data, self.url, self.window_s, self._at(wall),
                                      wall).items():
            self.store.add(SourceKey(LOCAL, name), reading)
        return True

    def _speaks(self, data: FleetNodeData) -> None:
        """The node's engine, once its series say which: what its panels call its figures,
        in that engine's words."""
        run, dialect = self.store.run, data.dialect
        if run is not None and dialect is not None and run.engine != dialect.name:
            run.engine = run.engine_name = dialect.name
            run.words = dict(dialect.words)
            self.store.bump(StoreTopic.RUN)

    def backfill(self, points: list[tuple[float, FleetNodeData]]) -> int:
        """The node's history and what the store already holds, in time order, in a new
        store (a series takes its points oldest first); returns the points taken."""
        taken = [(t, d) for t, d in points if t != self.last_wall]
        if not taken:
            return 0
        old, last = self.store, self.last_wall
        self.store = RunStore()
        self.store.clock, self.store.node = self.clock, self.node
        if old.run is not None:
            self.store.set_run(old.run)
        self.last_wall = 0.0
        now_in = False
        for t, d in sorted(taken, key=lambda p: p[0]):
            if not now_in and t > last:  # the refreshes' newest figures, in their place
                self._keep(old)
                now_in = True
            self.add(t, d)
        if not now_in:
            self._keep(old)
        self.last_wall = max(self.last_wall, last)
        return len(taken)

    def _keep(self, old: RunStore) -> None:
        for key, reading in sorted(old.readings.items(), key=lambda kv: kv[1].at):
            self.store.add(key, reading)


def history_step(interval_s: float, span_s: float = HISTORY_S) -> float:
    """The range query's step: the refresh interval, coarser where the span would give
    more than HISTORY_POINTS points."""
    return max(interval_s, span_s / HISTORY_POINTS)
