"""What a run shows, computed from the store: the same numbers for the dashboard and exports.

Pure functions over a RunStore, returning the frozen views of engram_top.model.views (plain()
writes them as JSON); no Textual, no I/O. Memory stays in bytes here; SGLang's own
"GB" figures (which are GiB) keep their name and unit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, fields, is_dataclass
from typing import Any, NamedTuple

from collectors.log_markers import ERROR_MARKERS, WARNING_MARKERS
from collectors.readings import GpuData, Quantiles, Reading, ServerData, StackPage
from collectors.source import SourceName
from collectors.startup_facts import DecodeStats, PrefillStats, StartupFacts
from collectors.units import GIB
from engram_top.model import energy, ledger
from engram_top.model.derived import once
from engram_top.model.figures import RunFigures
from engram_top.model.hicache import hicache_facts as hicache_facts  # re-exported
from engram_top.model.host import gpu_server_pids
from engram_top.model.host import host_facts as host_facts  # re-exported
from engram_top.model.host import server_pids as server_pids  # re-exported
from engram_top.model.store import RunFacts, RunStore
from engram_top.model.views import (
    EngramTableView,
    EngramView,
    GpuProcessView,
    GpuView,
    KvView,
    LatencyView,
    RunView,
    SourceStatus,
)
from scenarios.load_window import LoadWindow
from scenarios.runstate import SERVING


def source_status(store: RunStore, kind: str, now: float | None = None) -> SourceStatus:
    """Status of a source: its latest state, message, and the age of its last good value."""
    now = store.clock() if now is None else now
    latest: Reading[Any] | None = store.latest.get(kind)
    good = store.last_ok.get(kind)
    failing = latest.failing_since if latest is not None else None
    return SourceStatus(
        status=latest.status.value if latest else "none",
        message=latest.message if latest else "no reading yet",
        last_good_age_s=None if good is None else round(now - good.at, 3),
        failing_for_s=None if failing is None else round(now - failing, 3))


def wall_at(store: RunStore, now: float) -> float:
    """The wall-clock time of monotonic `now`, by the newest reading's pair of clocks: right
    for a replay (its clock runs in recording time) as for a live session."""
    readings = [r for r in store.latest.values() if r is not None]
    if readings:
        newest = max(readings, key=lambda r: r.at)
        return newest.wall + (now - newest.at)
    return time.time() - (time.monotonic() - now)


def gpu_facts(store: RunStore) -> list[GpuView]:
    """Each GPU as the panels, the alerts and the exports see it (computed once a reading
    for all of them)."""
    run = store.run
    inputs = (store.data(SourceName.GPU), store.data(SourceName.SERVER),
              store.data(SourceName.HOST), run, run.startup if run else None,
              run.baseline_gpu_used if run else None)
    return list(once(store, "gpu_facts", inputs, lambda: tuple(_gpu_facts(store))))


def _gpu_facts(store: RunStore) -> list[GpuView]:
    gpus: GpuData | None = store.data(SourceName.GPU)
    server: ServerData | None = store.data(SourceName.SERVER)
    run = store.run
    if gpus is None:
        return []
    pids = server_pids(store)
    log_ranks = run.startup.ranks if run else {}
    out = []
    for dev in gpus.devices:
        # TP rank r runs on GPU r (SGLang's default base_gpu_id 0, gpu_id_step 1).
        rank_metrics = (server.ranks.get(dev.index) if server else None) or {}
        rank_log = log_ranks.get(dev.index)
        logged = rank_log or ledger.NO_RANK  # a rank the log says nothing of: figures None
        mine = gpu_server_pids(dev, pids, bool(rank_metrics) or rank_log is not None)
        share = sum(p.used_bytes or 0 for p in dev.processes if p.pid in mine)
        baseline = run.baseline_gpu_used.get(dev.index) if run else None
        out.append(GpuView(
            index=dev.index, name=dev.name, uuid=dev.uuid,
            total_bytes=dev.total_bytes, reserved_bytes=dev.reserved_bytes,
            used_bytes=dev.used_bytes, free_bytes=dev.free_bytes,
            server_bytes=share, baseline_used_bytes=baseline,
            util_gpu_pct=dev.util_gpu_pct, power_w=dev.power_w,
            pcie_rx_bytes_per_s=dev.pcie_rx_bytes_per_s,
            pcie_tx_bytes_per_s=dev.pcie_tx_bytes_per_s,
            # SGLang's figures: the metric's full precision, else the log's two decimals.
            weights_gb=rank_metrics.get("weight_gb", logged.weights_gb),
            kv_cache_gb=rank_metrics.get("kv_cache_gb", logged.kv_total_gb),
            kv_tokens=_int(rank_metrics.get("max_total_num_tokens", logged.kv_tokens)),
            processes=tuple(GpuProcessView(pid=p.pid, name=p.name, used_bytes=p.used_bytes,
                                           server=p.pid in mine, seen=p.seen,
                                           container=p.container)
                            for p in dev.processes),
            power_limit_w=dev.power_limit_w, temperature_c=dev.temperature_c,
            sm_clock_mhz=dev.sm_clock_mhz, throttle_reasons=dev.throttle_reasons,
            energy_mj=dev.energy_mj, pcie_gen=dev.pcie_gen, pcie_width=dev.pcie_width,
            nvlink_rx_bytes_per_s=dev.nvlink_rx_bytes_per_s,
            nvlink_tx_bytes_per_s=dev.nvlink_tx_bytes_per_s,
            ecc_uncorrected=dev.ecc_uncorrected, xids=dev.xids,
        ))
    return out


def run_host_delta_bytes(store: RunStore, run: RunFacts | None) -> float | None:
    """What a run has taken of host memory since its launch: its server's share alone (the
    host ledger's), so other tenants' growth never counts; the Host RAM panel and the
    scenario list take this one figure."""
    return ledger.run_server_delta_bytes(store, run)


def kv_facts(store: RunStore) -> KvView | None:
    s: ServerData | None = store.data(SourceName.SERVER)
    if s is None:
        return None
    startup = store.run.startup if store.run is not None else StartupFacts()
    # The log's latest batch line speaks of the pools too: it stands in where the metrics
    # page lacks a figure (a build or a setting without the multi-pool gauges).
    batch = _latest_batch(startup)
    full, swa = s.full_token_usage, s.swa_token_usage
    if full is None and batch is not None:
        full = batch.full_token_usage
    if swa is None and batch is not None:
        swa = batch.swa_token_usage
    hit = s.cache_hit_rate
    if hit is None and isinstance(batch, DecodeStats):  # vLLM's stats line states it
        hit = batch.cache_hit_rate
    used = s.num_used_tokens if s.num_used_tokens is not None else s.kv_used_tokens
    return KvView(capacity_tokens=s.max_total_num_tokens or _logged_capacity(startup),
                  used_tokens=_int(used),
                  token_usage=s.token_usage, running=_int(s.num_running_reqs),
                  queued=_int(s.num_queue_reqs), kv_cache_gb=s.kv_cache_gb,
                  unavailable=_why(s, KV_FIELDS),
                  full_usage=full, swa_usage=swa,
                  available_tokens=_int(s.kv_available_tokens),
                  evictable_tokens=_int(s.kv_evictable_tokens),
                  retracted=_int(s.num_retracted_reqs), retracted_per_s=s.retracted_per_s,
                  queue_time=s.queue_time, cache_hit_rate=hit,
                  cache_hit_since_start=s.cache_hit_rate_since_start,
                  paused=_int(s.num_paused_reqs), aborted_total=_int(s.aborted_requests_total),
                  aborted_per_s=s.aborted_per_s, mamba_usage=s.mamba_usage,
                  pools=_pools(startup), page_problems=tuple(s.page_problems))


def _latest_batch(startup: StartupFacts) -> DecodeStats | PrefillStats | None:
    """The later of the log's last decode and prefill batch lines, or None."""
    lines = [b for b in (startup.decode, startup.prefill) if b is not None]
    if not lines:
        return None
    return max(lines, key=_batch_at)


def _batch_at(batch: DecodeStats | PrefillStats) -> float:
    return batch.at if batch.at is not None else float("-inf")


def _logged_capacity(startup: StartupFacts) -> int | None:
    """The KV capacity the log gave: its max_total_num_tokens, else the full pool's size."""
    return _int(startup.kv_capacity_tokens or startup.max_total_num_tokens)


def _pools(startup: StartupFacts) -> dict[str, int] | None:
    """The main model's KV pools by name, as the log sized them (hybrid models only)."""
    pools = {k: int(v) for k, v in startup.pool_sizes.items() if k in POOL_NAMES}
    return pools or None


POOL_NAMES = ("full", "swa", "c4", "c128", "c4_state", "c128_state")


def engram_facts(store: RunStore) -> EngramView | None:
    """The watched run's Engram row: placement and verdict (the engine's reading, kept with
    the run), the host tables' residency and the layers' lookups (the server's log)."""
    run = store.run
    if run is None or run.engram is None:
        return None
    e = run.engram
    tables = run.startup.engram_tables
    resident = sum(t.resident_mib for t in tables) or None
    huge = sum(t.huge_mib for t in tables)
    pins = {t.pinned for t in tables}
    lookups_per_s, hit_rate = _lookups(run.startup.engram_layers, run.startup.last_line_at)
    return EngramView(
        placement=e.placement, layout=e.layout, source=e.source,
        prefetch=e.prefetch, reasons=e.reasons,
        resident_mib=resident,
        pinned=(pins.pop() if len(pins) == 1 else None) if tables else e.pinned,
        huge_pct=None if not resident else round(100 * huge / resident, 1),
        lookups_per_s=lookups_per_s, hit_rate_pct=hit_rate)


def _lookups(layers: Mapping[int, Mapping[str, object]],
             now: float | None) -> tuple[float | None, float | None]:
    """(lookups per second over all layers, the lookup-weighted hit rate) from each
    layer's latest statistics line: its lookups since the line before, over the time
    between the two. A server logs no line while no token flows: a layer whose line is
    older (by the log's latest line, ``now``) than two of its intervals looks nothing up."""
    rate = 0.0
    hits = 0.0
    counted = 0.0
    timed = False
    for stats in layers.values():
        if not isinstance(stats, dict):
            continue
        lookups = stats.get("lookups")
        interval = stats.get("interval_s")
        at = stats.get("at")
        if isinstance(lookups, int | float) and isinstance(interval, int | float) and interval > 0:
            timed = True
            stale = isinstance(now, int | float) and isinstance(at, int | float) \
                and now - at > 2 * interval
            rate += 0.0 if stale else lookups / interval
        pct = stats.get("hit_rate_pct")
        if isinstance(lookups, int | float) and isinstance(pct, int | float):
            hits += lookups * pct
            counted += lookups
    return (round(rate, 1) if timed else None,
            round(hits / counted, 1) if counted else None)


# ServerData fields behind each panel, by the names its unavailable reasons use.
KV_FIELDS = {"max_total_num_tokens": "capacity", "num_used_tokens": "used tokens",
             "token_usage": "usage", "num_running_reqs": "running",
             "num_queue_reqs": "queued", "kv_cache_gb": "KV GB"}
LATENCY_FIELDS = {"ttft": "TTFT", "itl": "TPOT", "e2e": "end to end",
                  "output_tokens_per_s": "output", "requests_per_s": "requests",
                  "gen_throughput": "gen throughput"}


def _why(s: ServerData, names: dict[str, str]) -> dict[str, str]:
    """What the server sent for these fields that is not a number, by label: the panels
    say "running n/a: NaN from rank 0" rather than show nothing, or crash."""
    return {label: s.unavailable[key] for key, label in names.items() if key in s.unavailable}


def latency_facts(store: RunStore) -> LatencyView | None:
    s: ServerData | None = store.data(SourceName.SERVER)
    if s is None:
        return None
    return LatencyView(window_s=s.window_s, output_tokens_per_s=s.output_tokens_per_s,
                       requests_per_s=s.requests_per_s, gen_throughput=s.gen_throughput,
                       unavailable=_why(s, LATENCY_FIELDS), ttft=s.ttft, itl=s.itl, e2e=s.e2e,
                       tpot=s.tpot, engine=engine_of(store))


def engine_of(store: RunStore) -> str:
    """Whose dialect the watched server speaks, as the panels name it ("the server" until
    its engine is known)."""
    run = store.run
    return run.engine if run is not None and run.engine else "the server"


def word(store: RunStore, key: str, default: str | None = None) -> str:
    """The watched server's engine's word for what the dashboard calls ``key`` ("retracted":
    vLLM's "preempted"), as the engine declares it; else ``default``, else ``key`` itself."""
    words = store.run.words if store.run is not None else {}
    return words.get(key, key if default is None else default)


def not_reported(store: RunStore) -> dict[str, str]:
    """Figures the watched server's engine does not report at all (field -> why)."""
    s: ServerData | None = store.data(SourceName.SERVER)
    return dict(s.not_reported) if s is not None else {}


def stack_page(store: RunStore) -> StackPage | None:
    """What the watched URL serves where it is a router's or LMCache's page, no engine's."""
    s: ServerData | None = store.data(SourceName.SERVER)
    return s.stack_page if s is not None else None


def run_facts(store: RunStore) -> RunView | None:
    run = store.run
    if run is None:
        return None
    startup = run.startup
    ready_s = run.ready_s
    return RunView(
        scenario=run.scenario, placement=run.placement, node=run.node,
        state=run.state, phase=run.phase, pid=run.pid, url=run.url,
        log_path=run.log_path, time_scale=run.time_scale,
        launched_wall=run.launched_wall, exit_code=run.exit_code,
        ready_s=None if ready_s is None else round(ready_s, 3),
        # Node-equivalent: what the same start-up takes at time scale 1.
        ready_s_node=None if ready_s is None else round(run.node_seconds(ready_s), 2),
        phase_durations_s={k: round(v, 3) for k, v in run.phase_durations.items()},
        max_total_num_tokens_log=startup.max_total_num_tokens,
        engram_host_tables=tuple(EngramTableView(**{f: getattr(t, f) for f in _TABLE_FIELDS})
                                 for t in startup.engram_tables),
        log_errors=tuple(e.text for e in startup.errors)[-10:],
    )


_TABLE_FIELDS = tuple(f.name for f in fields(EngramTableView))


def plain(value: Any) -> Any:
    """Dataclasses and tuples to JSON-ready data; a value with a JSON form of its own
    (to_json, as RunFigures keeps the *_ms keys files have always had) in that form."""
    if is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_json"):
            return plain(value.to_json())
        return plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def finite_json(value: Any) -> Any:
    """JSON data with NaN and infinities as null: Python's json writes them as bare NaN and
    Infinity, which no other JSON reader takes."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def _int(value: Any) -> int | None:
    """A count as an int; None when absent or not a finite number (a NaN gauge says n/a)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return int(value)


def summary(store: RunStore) -> RunFigures:
    """The run's headline figures now, kept with the run for the scenario list and
    comparisons (RunFigures.merged onto what it had). Rounded as the scenario list and the
    comparison show them: ready and latencies to 0.01 s and 0.01 ms, p50s to 0.1 ms."""
    run = store.run
    gpus = gpu_facts(store)
    lat = latency_facts(store)
    ttft, itl = (lat.ttft, lat.itl) if lat else (None, None)
    rate = lat.output_tokens_per_s if lat else None
    server: ServerData | None = store.data(SourceName.SERVER)
    weights = gpus[0].weights_gb if gpus else None
    kv_tokens = gpus[0].kv_tokens if gpus else None
    if weights is None and server is not None:  # no GPU facts (a CPU server): its own
        weights = server.weight_gb
    if kv_tokens is None:
        kv = kv_facts(store)
        kv_tokens = kv.capacity_tokens if kv is not None else None
    serving = _serving(gpus)
    power = energy.window_power_w(store, [g.index for g in serving], lat.window_s if lat else None)
    per_token = energy.joules_per_token(power, rate)
    goodput = _goodput(store.load)
    return RunFigures(
        ready_s=None if run is None or run.ready_s is None else round(run.ready_s, 2),
        gpus=len(gpus) or None,
        weights_gb=weights,
        kv_tokens=kv_tokens,
        host_delta_gib=_gib(run_host_delta_bytes(store, run)),
        ttft_p50_s=_round_ms(ttft.p50 if ttft else None, 1),
        ttft_mean_s=_round_ms(ttft.mean if ttft else None, 2),
        ttft_sd_s=_round_ms(ttft.sd if ttft else None, 2),
        ttft_over=None if ttft is None or not ttft.count else int(ttft.over),
        ttft_p50_bucket_s=_coarse_bucket(ttft),
        itl_p50_s=_round_ms(itl.p50 if itl else None, 1),
        itl_p50_bucket_s=_coarse_bucket(itl),
        itl_mean_s=_round_ms(itl.mean if itl else None, 2),
        output_tok_s=None if rate is None else round(rate, 1),
        joules_per_token=None if per_token is None else round(per_token, 3),
        throttled=_throttled(run, server, serving),
        goodput_rps=goodput.rps if goodput is not None else None,
        slo_attainment=goodput.attainment if goodput is not None else None,
        **_window(store, run, lat, ttft), **_load_window(store.load_window))


def _coarse_bucket(q: Quantiles | None) -> tuple[float, float | None] | None:
    """The bucket a p50 lies in where it is too wide to resolve it (Quantiles.bucketed)."""
    b = None if q is None else q.bucketed("p50")
    return (b.lo, b.hi) if b is not None and b.coarse and b.lo is not None else None


def _window(store: RunStore, run: RunFacts | None, lat: LatencyView | None,
            ttft: Quantiles | None) -> dict[str, Any]:
    """What the latency figures were measured over, for a comparison's warming up."""
    served = None if run is None or run.ready_at is None else store.clock() - run.ready_at
    return {"window_s": lat.window_s if lat else None,
            # None with no request in the window: the last count stands (RunFigures.merged).
            "window_requests": int(ttft.count) if ttft is not None and ttft.count else None,
            "served_s": None if served is None else round(max(0.0, served), 1)}


def _load_window(w: LoadWindow | None) -> dict[str, Any]:
    """The demo load's window as a run's figures (RunFigures.load_*); none of them without
    one, so a run's last ones stand (RunFigures.merged)."""
    if w is None:
        return {}
    out: dict[str, Any] = {}
    if w.tpot_mean_s is not None and w.tpot_n:
        out.update(load_tpot_mean_s=_round_ms(w.tpot_mean_s, 3), load_tpot_n=w.tpot_n,
                   load_tpot_sd_s=_round_ms(w.tpot_sd_s, 3))
    if (rate := w.tok_s()) is not None:
        out.update(load_tok_s=round(rate[0], 2), load_tok_s_sd=round(rate[1], 2),
                   load_bins=rate[2])
    if (good := w.good_rps()) is not None:
        out.update(load_good_rps=round(good[0], 4), load_good_rps_sd=round(good[1], 4))
    return out


def _gib(nbytes: float | None) -> float | None:
    return None if nbytes is None else round(nbytes / GIB, 3)


class _Goodput(NamedTuple):
    rps: float
    attainment: float


def _goodput(load: dict[str, Any]) -> _Goodput | None:
    """The demo load's goodput so far: its good requests per node second, and their share
    of those that ended; nothing before a request has ended."""
    good, node_s = load.get("good"), load.get("node_s")
    ended = (load.get("completed") or 0) + (load.get("failed") or 0)
    if not isinstance(good, int) or not isinstance(node_s, int | float) or node_s <= 0 \
            or not ended:
        return None
    return _Goodput(round(good / node_s, 4), round(good / ended, 4))


def _serving(gpus: list[GpuView]) -> list[GpuView]:
    """The GPUs the watched server holds memory on; every GPU where nobody's processes are
    known (dcgm-exporter lists none)."""
    return [g for g in gpus if g.server_bytes > 0] or gpus


def serving_gpus(store: RunStore) -> list[int]:
    return [g.index for g in _serving(gpu_facts(store))]


def _throttled(run: RunFacts | None, server: ServerData | None,
               gpus: list[GpuView]) -> tuple[str, ...] | None:
    """What holds each serving GPU's clocks down now, while the server serves requests
    (clocks held down while it idles cost no figure)."""
    if run is None or run.state not in SERVING:
        return None
    if server is None or not server.num_running_reqs:
        return None
    found = tuple(f"GPU {g.index} {why}" for g in gpus for why in g.throttle_reasons or ())
    return found or None


def _round_ms(seconds: float | None, digits: int) -> float | None:
    """Seconds rounded to `digits` decimals of a millisecond."""
    return None if seconds is None else round(seconds * 1000, digits) / 1000


def classify_log_line(line: str) -> str | None:
    """'error', 'warning' or 'ready' for lines the log pane highlights."""
    if any(m in line for m in ERROR_MARKERS):
        return "error"
    if any(m in line for m in WARNING_MARKERS):
        return "warning"
    if "ready to roll" in line:
        return "ready"
    return None


def is_own_poll(line: str, patterns: tuple[str, ...]) -> bool:
    """An access-log line of the dashboard's own polling (``patterns``: the run's engine's)."""
    return any(p in line for p in patterns)
