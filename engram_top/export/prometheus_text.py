"""What a node's agent knows, in Prometheus' text format (0.0.4) for a scrape: the figures no
other exporter has (the HBM ledger per GPU and line with its unexplained rest, the host-RAM
ledger per NUMA node and line, the KV pool, alerts with their severity) beside the sources'
health, so the fleet view and Grafana can see them.

Conventions as prometheus_client writes them: names ``engram_top_<what>_<unit>`` (bytes,
seconds, tokens, ratio), a HELP and a TYPE line per family, label values escaped (\\\\, \\",
\\n). A figure nobody reports is left out, never written as 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from collectors.readings import Status
from engram_top.model.facts import gpu_facts, kv_facts
from engram_top.model.hicache import engram_rx_estimate, hicache_facts
from engram_top.model.ledger import hbm_ledger, host_ledger
from engram_top.model.store import RunStore

PREFIX = "engram_top_"
_PID = re.compile(r" \(pid \d+(?:, [^()]*)?\)$")  # with its container, where named


@dataclass
class Family:
    name: str  # without the prefix
    help: str
    type: str = "gauge"
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float | int | None, **labels: str) -> None:
        if value is not None and math.isfinite(value):
            self.samples.append((labels, float(value)))


@dataclass(frozen=True)
class AgentHealth:
    """The agent's own figures: its recording's state and size, when it started."""

    recording: bool
    recording_bytes: int
    started_wall: float


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def render(families: Iterable[Family]) -> str:
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        name = PREFIX + fam.name
        out.append(f"# HELP {name} {fam.help}")
        out.append(f"# TYPE {name} {fam.type}")
        for labels, value in fam.samples:
            body = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{body}}} {_number(value)}" if body else
                       f"{name} {_number(value)}")
    return "\n".join(out) + "\n"


def node_families(store: RunStore, health: AgentHealth, now: float,
                  more: Iterable[Family] = ()) -> list[Family]:
    """Every family the agent serves, from the store as it is now (``now``: the store's
    monotonic clock, for the sources' ages); ``more``: families built elsewhere (the fit
    check's), before the agent's own."""
    return [*_sources(store, now), *_server(store), *_hbm(store), *_host(store), *_kv(store),
            *_alerts(store), *more, *_agent(health)]


def _sources(store: RunStore, now: float) -> list[Family]:
    up = Family("source_up", "1 while the source's last poll gave a good reading, else 0.")
    age = Family("source_last_good_age_seconds",
                 "Seconds since the source's last good reading.")
    for key, reading in sorted(store.readings.items(), key=lambda kv: str(kv[0])):
        name = str(key)
        up.add(1 if reading.status in (Status.OK, Status.STARTING) else 0, source=name)
        good = store.good.get(key)
        if good is not None:
            age.add(max(0.0, now - good.at), source=name)
    return [up, age]


def _server(store: RunStore) -> list[Family]:
    run = store.run
    info = Family("server_info", "The watched server: its scenario, placement and state "
                  "(always 1).")
    ready = Family("server_ready", "1 while the watched server is ready to serve, else 0.")
    if run is None:
        return [info, ready]
    placement = run.engram.placement if run.engram is not None and run.engram.placement \
        else run.placement or ""
    info.add(1, scenario=run.scenario, placement=placement or "", state=str(run.state))
    ready.add(1 if str(run.state) == "ready" else 0, scenario=run.scenario)
    return [info, ready, _death(store)]


def _death(store: RunStore) -> Family:
    """When each server that died was seen to die, by the death's class: an alert rule
    pages on its change, a dashboard says which class (engram-top why names the evidence)."""
    died = Family("server_death_timestamp_seconds", "When a watched server died, by its "
                  "class of death (host-oom-kill, hbm-oom-runtime, ...), in seconds since the "
                  "epoch.")
    latest: dict[tuple[str, str], float] = {}  # one series each: the latest of its kind
    for run in store.runs:
        for death in run.deaths:  # a server restarted on its URL has several
            if death.at is not None:
                key = (run.scenario, death.kind.value)
                latest[key] = max(death.at, latest.get(key, death.at))
    for (scenario, kind), at in latest.items():
        died.add(at, scenario=scenario, kind=kind)
    return died


def _hbm(store: RunStore) -> list[Family]:
    lines = Family("hbm_ledger_bytes", "GPU memory by ledger line: the server's parts (weights, "
                   "KV pool, CUDA graphs...) and other processes, as NVML and the server say.")
    unexplained = Family("hbm_unexplained_bytes", "NVML's used memory less every ledger line "
                         "(CUDA contexts, allocator slack, parts nobody reports).")
    used = Family("hbm_used_bytes", "GPU memory in use, as NVML says.")
    total = Family("hbm_total_bytes", "GPU memory, as NVML says.")
    rx = Family("gpu_pcie_rx_bytes_per_second", "PCIe receive rate (host to GPU), as NVML "
                "says.")
    engram = Family("engram_rx_estimate_bytes_per_second", "An ESTIMATE of the Engram rows' "
                    "PCIe traffic: the GPU's receive less HiCache's load-back on its rank "
                    "(none where HiCache's load-back is not reported).")
    for ledger in hbm_ledger(store):
        gpu = str(ledger.index)
        by_line: dict[str, float | None] = {}
        for line in ledger.lines:
            # Another process's line by its name alone: a pid as a label value would make
            # a new series at every restart (labels stay bounded); two of one name add up.
            name = _PID.sub("", line.name)
            known = [v for v in (by_line.get(name), line.bytes) if v is not None]
            by_line[name] = sum(known) if known else None
        for name, value in by_line.items():
            lines.add(value, gpu=gpu, line=name)
        unexplained.add(ledger.unexplained_bytes, gpu=gpu)
        used.add(ledger.used_bytes, gpu=gpu)
        total.add(ledger.total_bytes, gpu=gpu)
    received = {view.index: view.pcie_rx_bytes_per_s for view in gpu_facts(store)}
    for index, value in received.items():
        rx.add(value, gpu=str(index))
    hicache = hicache_facts(store)
    if hicache is not None and hicache.load_back_by_rank:
        for index, value in engram_rx_estimate(received, hicache).items():
            engram.add(value, gpu=str(index))
    return [lines, unexplained, used, total, rx, engram]


def _host(store: RunStore) -> list[Family]:
    lines = Family("host_ledger_bytes", "Host memory by ledger line, node-wide: the server's "
                   "(Engram tables, HiCache pools, its processes), page cache, other tenants.")
    numa = Family("host_ledger_numa_bytes", "Host memory by NUMA node and ledger line.")
    available = Family("host_available_bytes", "Host memory available (MemAvailable).")
    total = Family("host_total_bytes", "Host memory (MemTotal).")
    ledger = host_ledger(store)
    if ledger is None:
        return [lines, numa, available, total]
    for line in ledger.lines:
        lines.add(line.bytes, line=line.name)
    for node, node_lines in sorted(ledger.per_node.items()):
        for line in node_lines:
            numa.add(line.bytes, numa_node=str(node), line=line.name)
    available.add(ledger.available_bytes)
    total.add(ledger.total_bytes)
    return [lines, numa, available, total]


def _kv(store: RunStore) -> list[Family]:
    capacity = Family("kv_capacity_tokens", "The KV pool's capacity in tokens.")
    used = Family("kv_used_tokens", "KV pool tokens in use.")
    usage = Family("kv_usage_ratio", "The KV pool's use, 0 to 1 (a hybrid model's fullest "
                   "pool).")
    running = Family("requests_running", "Requests the server is running.")
    queued = Family("requests_queued", "Requests waiting in the server's queue.")
    kv = kv_facts(store)
    if kv is not None:
        capacity.add(kv.capacity_tokens)
        used.add(kv.used_tokens)
        usage.add(kv.token_usage)
        running.add(kv.running)
        queued.add(kv.queued)
    return [capacity, used, usage, running, queued]


def _alerts(store: RunStore) -> list[Family]:
    active = Family("alert_active", "1 for each alert that is active now, by its name, id "
                    "and severity.")
    for alert_id, alert in sorted(store.alerts.items()):
        active.add(1, alert=alert.name, id=alert_id, severity=alert.severity)
    return [active]


def _agent(health: AgentHealth) -> list[Family]:
    recording = Family("recording_up", "1 while the agent records, 0 after a write failed "
                       "(a full disk): it says why in its events.")
    size = Family("recording_bytes", "Bytes of the agent's recordings kept on disk.")
    started = Family("agent_start_time_seconds", "When the agent started, in seconds since "
                     "the epoch.")
    recording.add(1 if health.recording else 0)
    size.add(health.recording_bytes)
    started.add(health.started_wall)
    return [recording, size, started]
