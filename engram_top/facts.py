"""What a run shows, computed from the store: the same numbers for the dashboard and exports.

Pure functions over a RunStore; no Textual, no I/O. Memory stays in bytes here; SGLang's own
"GB" figures (which are GiB) keep their name and unit.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, is_dataclass
from typing import Any

from collectors.readings import GpuData, HostData, Reading, ServerData
from engram_top.compare import RunResult
from engram_top.store import RunFacts, RunStore

GIB = 1024**3


def source_status(store: RunStore, kind: str, now: float | None = None) -> dict[str, Any]:
    """Status of a source: its latest state, message, and the age of its last good value."""
    now = store.clock() if now is None else now
    latest: Reading[Any] | None = store.latest.get(kind)
    good = store.last_ok.get(kind)
    out: dict[str, Any] = {"status": latest.status.value if latest else "none",
                           "message": latest.message if latest else "no reading yet"}
    out["last_good_age_s"] = None if good is None else round(now - good.at, 3)
    if latest is not None and latest.failing_since is not None:
        out["failing_for_s"] = round(now - latest.failing_since, 3)
    return out


def wall_at(store: RunStore, now: float) -> float:
    """The wall-clock time of monotonic `now`, by the newest reading's pair of clocks: right
    for a replay (its clock runs in recording time) as for a live session."""
    readings = [r for r in store.latest.values() if r is not None]
    if readings:
        newest = max(readings, key=lambda r: r.at)
        return newest.wall + (now - newest.at)
    return time.time() - (time.monotonic() - now)


def server_pids(store: RunStore) -> set[int]:
    host: HostData | None = store.data("host")
    if host is None or host.server_tree is None:
        return set()
    return set(host.server_tree.pids)


def gpu_facts(store: RunStore) -> list[dict[str, Any]]:
    gpus: GpuData | None = store.data("gpu")
    server: ServerData | None = store.data("server")
    run = store.run
    if gpus is None:
        return []
    pids = server_pids(store)
    log_ranks = (run.startup.get("ranks") or {}) if run else {}
    out = []
    for dev in gpus.devices:
        share = sum(p.used_bytes or 0 for p in dev.processes if p.pid in pids)
        # TP rank r runs on GPU r (SGLang's default base_gpu_id 0, gpu_id_step 1).
        rank_metrics = (server.ranks.get(dev.index) if server else None) or {}
        rank_log = log_ranks.get(dev.index) or {}
        baseline = run.baseline_gpu_used.get(dev.index) if run else None
        out.append({
            "index": dev.index, "name": dev.name, "uuid": dev.uuid,
            "total_bytes": dev.total_bytes, "reserved_bytes": dev.reserved_bytes,
            "used_bytes": dev.used_bytes, "free_bytes": dev.free_bytes,
            "server_bytes": share, "baseline_used_bytes": baseline,
            "util_gpu_pct": dev.util_gpu_pct, "power_w": dev.power_w,
            "pcie_rx_bytes_per_s": dev.pcie_rx_bytes_per_s,
            "pcie_tx_bytes_per_s": dev.pcie_tx_bytes_per_s,
            # SGLang's figures: the metric's full precision, else the log's two decimals.
            "weights_gb": rank_metrics.get("weight_gb", rank_log.get("weights_gb")),
            "kv_cache_gb": rank_metrics.get("kv_cache_gb", rank_log.get("kv_total_gb")),
            "kv_tokens": _int(rank_metrics.get("max_total_num_tokens",
                                               rank_log.get("kv_tokens"))),
            "processes": [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes}
                          for p in dev.processes],
        })
    return out


def host_facts(store: RunStore) -> dict[str, Any] | None:
    host: HostData | None = store.data("host")
    if host is None:
        return None
    run = store.run
    base = run.baseline_host_used if run else None
    delta = None if base is None else host.used_bytes - base
    tree = host.server_tree
    return {
        "total_bytes": host.total_bytes, "used_bytes": host.used_bytes,
        "available_bytes": host.available_bytes, "shmem_bytes": host.shmem_bytes,
        "baseline_used_bytes": base, "delta_bytes": delta,
        "delta_gib": None if delta is None else round(delta / GIB, 3),
        "hugepages_bytes": host.anon_hugepages_bytes,
        "swap_used_bytes": host.swap_used_bytes,
        "server_rss_bytes": tree.rss_bytes if tree else None,
        "server_rss_shmem_bytes": tree.rss_shmem_bytes if tree else None,
        "server_pids": list(tree.pids) if tree else [],
    }


def kv_facts(store: RunStore) -> dict[str, Any] | None:
    s: ServerData | None = store.data("server")
    if s is None:
        return None
    return {"capacity_tokens": s.max_total_num_tokens, "used_tokens": _int(s.num_used_tokens),
            "token_usage": s.token_usage, "running": _int(s.num_running_reqs),
            "queued": _int(s.num_queue_reqs), "kv_cache_gb": s.kv_cache_gb,
            "unavailable": _why(s, KV_FIELDS)}


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


def latency_facts(store: RunStore) -> dict[str, Any] | None:
    s: ServerData | None = store.data("server")
    if s is None:
        return None
    out: dict[str, Any] = {"window_s": s.window_s, "output_tokens_per_s": s.output_tokens_per_s,
                           "requests_per_s": s.requests_per_s, "gen_throughput": s.gen_throughput,
                           "unavailable": _why(s, LATENCY_FIELDS)}
    for key in ("ttft", "itl", "e2e"):
        q = getattr(s, key)
        out[key] = None if q is None else asdict(q)
    return out


def run_facts(store: RunStore) -> dict[str, Any] | None:
    run = store.run
    if run is None:
        return None
    startup = run.startup or {}
    tables = startup.get("engram_tables") or []
    ready_s = run.ready_s
    return {
        "scenario": run.scenario, "placement": run.placement, "node": run.node,
        "state": run.state, "phase": run.phase, "pid": run.pid, "url": run.url,
        "log_path": run.log_path, "time_scale": run.time_scale,
        "launched_wall": run.launched_wall, "exit_code": run.exit_code,
        "ready_s": None if ready_s is None else round(ready_s, 3),
        # Node-equivalent: what the same start-up takes at time scale 1.
        "ready_s_node": None if ready_s is None else round(run.node_seconds(ready_s), 2),
        "phase_durations_s": {k: round(v, 3) for k, v in run.phase_durations.items()},
        "max_total_num_tokens_log": startup.get("max_total_num_tokens"),
        "engram_host_tables": [{k: t.get(k) for k in ("label", "layout", "resident_mib",
                                                      "huge_pct", "pinned",
                                                      "no_huge_pages_warning")}
                               for t in tables],
        "log_errors": [e.get("text") for e in (startup.get("errors") or [])][-10:],
    }


def plain(value: Any) -> Any:
    """Dataclasses and tuples to JSON-ready data."""
    if is_dataclass(value) and not isinstance(value, type):
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


def summary(store: RunStore) -> dict[str, Any]:
    """The run's headline figures, kept with the run for the scenario list and comparisons."""
    out: dict[str, Any] = {}
    run = store.run
    if run is not None and run.ready_s is not None:
        out["ready_s"] = round(run.ready_s, 2)
    gpus = gpu_facts(store)
    if gpus:
        out["gpus"] = len(gpus)
        out["weights_gb"] = gpus[0]["weights_gb"]
        out["kv_tokens"] = gpus[0]["kv_tokens"]
    host = host_facts(store)
    if host and host["delta_gib"] is not None:
        out["host_delta_gib"] = host["delta_gib"]
    lat = latency_facts(store)
    if lat:
        for key in ("ttft", "itl"):
            q = lat[key]
            if q and q.get("p50") is not None:
                out[f"{key}_p50_ms"] = round(q["p50"] * 1000, 1)
            if q and q.get("mean") is not None:
                out[f"{key}_mean_ms"] = round(q["mean"] * 1000, 2)
        if lat["output_tokens_per_s"] is not None:
            out["output_tok_s"] = round(lat["output_tokens_per_s"], 1)
    return out


def run_result(run: RunFacts, trial: int, source: str = "live") -> RunResult:
    """A dashboard run's headline figures as one trial for engram_top.compare.

    Time to ready is in node time (divided by the run's time scale). Latencies are the
    run's last 30 s window (SGLang's histograms); SGLang's inter-token latency stands in for
    TPOT, as it does in SGLang's own metrics."""
    r = run.results

    def seconds(key: str) -> float | None:
        return None if r.get(key) is None else r[key] / 1000.0

    # Start-up in node time: a simulated node started x time_scale faster than the node
    # (and the seed) would; a real node's time_scale is 1.
    ready = run.node_seconds(r.get("ready_s"))
    return RunResult(
        scenario=run.scenario, placement=run.placement, source=source, trial=trial,
        gpus=r.get("gpus"), weights_gb=r.get("weights_gb"), kv_tokens=r.get("kv_tokens"),
        host_delta_gib=r.get("host_delta_gib"), ready_s=ready,
        ttft_mean_s=seconds("ttft_mean_ms"), tpot_mean_s=seconds("itl_mean_ms"),
        itl_mean_s=seconds("itl_mean_ms"), e2e_mean_s=None, ttft_p99_s=None, tpot_p99_s=None,
        output_tok_s=r.get("output_tok_s"), request_per_s=None,
        notes=("live: last 30 s window of the server's histograms",))


def run_results(runs: list[RunFacts], source: str = "live") -> list[RunResult]:
    """Every run with figures, each numbered as a trial of its scenario (0, 1, ...)."""
    counts: dict[str, int] = {}
    out = []
    for run in runs:
        if not run.results:
            continue
        trial = counts.get(run.scenario, 0)
        counts[run.scenario] = trial + 1
        out.append(run_result(run, trial, source))
    return out


LOG_ERRORS = ("Traceback", "out of memory", "OutOfMemoryError", "Initialization failed",
              "Error:", "CUDA error", "Health check failed")
LOG_WARNINGS = ("No huge pages", "WARNING", "deprecated")


def classify_log_line(line: str) -> str | None:
    """'error', 'warning' or 'ready' for lines the log pane highlights."""
    if any(m in line for m in LOG_ERRORS):
        return "error"
    if any(m in line for m in LOG_WARNINGS):
        return "warning"
    if "ready to roll" in line:
        return "ready"
    return None


_OWN_POLLS = ('"GET /health HTTP', '"GET /metrics HTTP', '"GET /server_info HTTP',
              '"GET /get_server_info HTTP')


def is_own_poll(line: str) -> bool:
    """An access-log line of the dashboard's own polling."""
    return "INFO:" in line and any(p in line for p in _OWN_POLLS)
