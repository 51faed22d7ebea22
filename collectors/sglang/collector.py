"""SGLang over HTTP: /health, /server_info and /metrics, with windowed latency quantiles from
histogram deltas and throughput from counter deltas (what rate() and histogram_quantile()
do in SGLang's Grafana board)."""

from __future__ import annotations

import math
from typing import Any

from collectors import promread, promtext
from collectors.engine_http import EngineCollector
from collectors.figure_bounds import index
from collectors.sglang import PAGE_PREFIXES
from collectors.sglang.families import (  # noqa: F401  (the collector's readers use them)
    MAX,
    MEAN,
    SUM,
    counter_figure,
    find,
    finite_gauge,
    gauge_figure,
    primary,
)
from collectors.sglang.hicache_metrics import HiCacheRates
from collectors.units import MIB
from collectors.windowed import WindowedHistogram, WindowedRate

# Each figure: SGLang's current name first, then the older spellings it has had.
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("sglang:time_to_first_token_seconds",),
    # Before inter_token_latency_seconds, TPOT's histogram was the inter-token source.
    "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e": ("sglang:e2e_request_latency_seconds",),
    "queue_time": ("sglang:queue_time_seconds",),
}
# The most a page of each kind can hold (SGLang's /metrics with every scheduler and DP rank
# reporting is a few MB): past it, a server that streams without end is cut off.
PAGE_LIMITS = {"/health": MIB, "/metrics": 64 * MIB}
GAUGES: dict[str, tuple[tuple[str, ...], str]] = {
    "num_running_reqs": (("sglang:num_running_reqs", "sglang:num_requests_running"), SUM),
    "num_queue_reqs": (("sglang:num_queue_reqs", "sglang:num_requests_waiting"), SUM),
    "num_used_tokens": (("sglang:num_used_tokens",), SUM),
    "token_usage": (("sglang:token_usage",), MAX),
    "gen_throughput": (("sglang:gen_throughput",), SUM),
    "full_token_usage": (("sglang:full_token_usage",), MAX),
    "swa_token_usage": (("sglang:swa_token_usage",), MAX),
    "kv_used_tokens": (("sglang:kv_used_tokens",), SUM),
    "kv_available_tokens": (("sglang:kv_available_tokens",), SUM),
    "kv_evictable_tokens": (("sglang:kv_evictable_tokens",), SUM),
    "num_retracted_reqs": (("sglang:num_retracted_reqs",), SUM),
    "cache_hit_rate": (("sglang:cache_hit_rate",), MEAN),
    "hicache_host_used_tokens": (("sglang:hicache_host_used_tokens",), SUM),
    "hicache_host_total_tokens": (("sglang:hicache_host_total_tokens",), SUM),
    "num_paused_reqs": (("sglang:num_paused_reqs",), SUM),
    "mamba_usage": (("sglang:mamba_usage",), MAX),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "output_tokens": ("sglang:generation_tokens_total",),
    "requests": ("sglang:num_requests_total",),
    "prompt_tokens": ("sglang:prompt_tokens_total", "sglang:prompt_tokens"),
    "retracted": ("sglang:num_retracted_requests_total", "sglang:num_retracted_requests"),
    # Prompt tokens served from a cache, by cache_source (device, host, storage).
    "cached_tokens": ("sglang:cached_tokens_total", "sglang:cached_tokens"),
    "aborted": ("sglang:num_aborted_requests_total", "sglang:num_aborted_requests"),
    # PD disaggregation's KV transfers that failed (a prefill or decode server's page).
    "transfer_failed": ("sglang:num_transfer_failed_reqs_total",
                        "sglang:num_transfer_failed_reqs"),
}
MAX_PROBLEMS = 20  # a page wrong everywhere: the first ones say enough
MAX_SOURCES = 16  # cache_source values kept apart; SGLang has three



def canonical(fams: dict[str, promtext.Family]) -> dict[str, promtext.Family]:
    """SGLang's names whatever the spelling: a gateway or a Prometheus pipeline may write
    ``sglang_`` for ``sglang:``."""
    if any(name.startswith("sglang:") for name in fams):
        return fams
    if any(name.startswith("sglang_") for name in fams):
        return promread.renamed(fams, "sglang_", "sglang:")
    return fams


def page_figures(fams: dict[str, promtext.Family]) -> dict[str, Any]:
    """What one /metrics page says, as ServerData fields (the windowed figures apart): the
    gauges, the memory constants, the figures that are not numbers, and the page's own
    faults in the families read. Pure, for the collector and for inspect-metrics."""
    out: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    issues: list[str] = []
    for key, (names, how) in GAUGES.items():
        fam = find(fams, names)
        out[key], why = gauge_figure(fam, how)
        if why:
            unavailable[key] = why
        if fam is not None:
            issues += promtext.problems(fam)
    rate = out.get("cache_hit_rate")
    if rate is not None and rate > 1.0:  # 2024 builds gave it in percent
        out["cache_hit_rate"] = rate / 100.0
    out["unavailable"] = unavailable
    # Newer SGLang builds export these constants; prefer them to /server_info's rounding.
    for key, name in (("weight_gb", "sglang:weight_memory_usage_gb"),
                      ("kv_cache_gb", "sglang:kv_cache_memory_usage_gb"),
                      ("max_total_num_tokens", "sglang:max_total_num_tokens")):
        value = promread.gauge(fams, name)
        if value is not None and math.isfinite(value):
            out[key] = int(value) if key == "max_total_num_tokens" else memory_gb(value)
    out["ranks"] = rank_constants(fams)
    out.update(since_start(fams))
    for names in HISTOGRAMS.values():
        fam = find(fams, names)
        if fam is not None and fam.type == "histogram":
            issues += promtext.problems(fam)
    out["page_problems"] = tuple(dict.fromkeys(issues))[:MAX_PROBLEMS]
    return out


class SglangCollector(EngineCollector):
    PAGE_LIMITS = PAGE_LIMITS
    PAGE_PREFIXES = PAGE_PREFIXES
    SOURCE = "sglang"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._windows = {k: WindowedHistogram(self.window_s) for k in HISTOGRAMS}
        self._rates = {k: WindowedRate(self.window_s) for k in COUNTERS}
        self._hicache = HiCacheRates(self.window_s)

    async def _server_info(self) -> dict[str, Any]:
        resp = await self._get("/server_info")
        if resp.status_code == 404:  # builds before the rename
            resp = await self._get("/get_server_info")
        resp.raise_for_status()
        info = resp.json()
        if not isinstance(info, dict):
            raise ValueError("/server_info is not a JSON object")
        return server_info_fields(info)

    async def _metrics(self, now: float) -> dict[str, Any]:
        resp = await self._get("/metrics")
        if resp.status_code == 404:
            raise ValueError("/metrics is 404: start SGLang with --enable-metrics")
        resp.raise_for_status()
        fams = canonical(await self._families(resp.text))
        stack = self._stack_fields(now)
        if stack is not None:
            return stack
        if not any(n.startswith("sglang:") for n in fams) \
                and any(n.startswith(("vllm:", "vllm_")) for n in fams):
            raise ValueError("/metrics is a vLLM server's page: watch it with --engine vllm")
        out = page_figures(fams)
        for key, names in HISTOGRAMS.items():
            fam = find(fams, names)
            if fam is not None and fam.type == "histogram":
                self._windows[key].add(now, merged_histogram(fam))
            out[key] = self._windows[key].quantiles(now)
        for key, names in COUNTERS.items():
            total = counter_figure(find(fams, names))
            if total is not None and math.isfinite(total):  # a NaN would poison the window
                self._rates[key].add(now, total)
        out["output_tokens_per_s"] = self._rates["output_tokens"].rate(now)
        out["requests_per_s"] = self._rates["requests"].rate(now)
        out["retracted_per_s"] = self._rates["retracted"].rate(now)
        out["cached_tokens_per_s"] = self._rates["cached_tokens"].rate(now)
        out["aborted_per_s"] = self._rates["aborted"].rate(now)
        out.update(self._hicache.add(now, fams))
        out["window_s"] = self.window_s
        return out


def since_start(fams: dict[str, promtext.Family]) -> dict[str, Any]:
    """The request counters' totals since the server started: cached prompt tokens (and by
    cache_source), aborted requests, and the share of prompt tokens a cache served (what
    one page can say of the hit rate: since the start, not over a window). None where the
    page lacks the counter."""
    cached_fam = find(fams, COUNTERS["cached_tokens"])
    cached = counter_figure(cached_fam)
    prompt = counter_figure(find(fams, COUNTERS["prompt_tokens"]))
    aborted = counter_figure(find(fams, COUNTERS["aborted"]))
    transfer_failed = counter_figure(find(fams, COUNTERS["transfer_failed"]))
    by_source: dict[str, float] = {}
    if cached_fam is not None:
        sources = {dict(x.labels).get("cache_source", "") for x in cached_fam.samples}
        for source in sorted(sources - {""})[:MAX_SOURCES]:
            total = counter_figure(promtext.Family(
                cached_fam.name, cached_fam.type, cached_fam.help,
                [x for x in cached_fam.samples if dict(x.labels).get("cache_source") == source]))
            if total is not None and math.isfinite(total):
                by_source[source] = total
    rate = None
    if cached is not None and prompt and math.isfinite(cached) and math.isfinite(prompt):
        rate = min(1.0, max(0.0, cached / prompt))
    return {"cached_tokens_total": _finite(cached), "cached_tokens_by_source": by_source,
            "aborted_requests_total": _finite(aborted), "cache_hit_rate_since_start": rate,
            "transfer_failed_total": _finite(transfer_failed)}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def memory_gb(value: object) -> float | None:
    """A memory figure in GB as a float, or None when it is not one.

    Negative values are clamped to 0.0: on the CPU SGLang measures weights as the drop in free
    host RAM, which other allocations can make slightly negative (-0.0023 GB). A dict (the
    per-phase ``graph`` object of 0.5.x ``/server_info``) is the SUM of its numeric values:
    the memory of all captured graphs, as the per-phase ``sglang:graph_memory_usage_gb``
    series add up to; non-numeric entries are ignored, an empty or all-non-numeric dict is
    None. Booleans, strings, None and non-finite numbers are None.
    """
    if isinstance(value, dict):
        parts = [memory_gb(v) for v in value.values() if not isinstance(v, dict)]
        known = [v for v in parts if v is not None]
        return memory_gb(sum(known)) if known else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int) and abs(value) > 10**15:
        return None  # no memory figure: and a 400-digit integer cannot become a float
    number = float(value)
    if not math.isfinite(number):
        return None
    return max(0.0, number) + 0.0  # + 0.0: never -0.0


def _count(value: object) -> int | None:
    """An integer field (tp_size, max_total_num_tokens): ints and integral floats only."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def server_info_fields(info: dict[str, Any]) -> dict[str, Any]:
    """The ServerData fields taken from a ``/server_info`` (or ``/get_server_info``) body.

    Pure, for tests on saved bodies. Every field is None when absent or of the wrong type:
    a float field never receives a non-number (see :func:`memory_gb` for the memory figures,
    read from ``internal_states[0].memory_usage``: weight, kvcache, graph).
    """
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states else None
    usage = first.get("memory_usage") if isinstance(first, dict) else None
    if not isinstance(usage, dict):
        usage = {}
    sim = info.get("simulated")
    args = {k: info[k] for k in PLACEMENT_ARGS if k in info
            and (info[k] is None or isinstance(info[k], str | int | float | bool | dict))}
    return {
        "version": _text(info.get("version")),
        "model_path": _text(info.get("model_path")),
        "tp_size": _count(info.get("tp_size")),
        "max_total_num_tokens": _count(info.get("max_total_num_tokens")),
        "weight_gb": memory_gb(usage.get("weight")),
        "kv_cache_gb": memory_gb(usage.get("kvcache")),
        "graph_gb": memory_gb(usage.get("graph")),
        # Only what a dashboard needs; /server_info also echoes api keys, never kept.
        "server_args": args,
        "simulated": sim if isinstance(sim, dict) else None,
    }


# The server args (/server_info gives every one as a flat key) that say where the Engram
# tables are and whether their prefetch can engage; nothing secret among them.
PLACEMENT_ARGS = (
    "model_path", "tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention",
    "attention_backend", "decode_attention_backend", "prefill_attention_backend",
    "speculative_algorithm", "page_size", "kv_cache_dtype", "mem_fraction_static",
    "enable_hierarchical_cache", "hicache_size", "hicache_ratio", "engram_config",
    "swa_full_tokens_ratio",
)


def merged_histogram(family: promtext.Family) -> promtext.Histogram:
    """The series that count (see :func:`primary`) summed by bucket: sum by (le) (...)."""
    by_labels = promtext.histogram_series(family)
    return promtext.summed([by_labels[ls] for members in primary(list(by_labels)).values()
                            for ls in members])


RANK_GAUGES = {"weight_gb": "sglang:weight_memory_usage_gb",
               "kv_cache_gb": "sglang:kv_cache_memory_usage_gb",
               "max_total_num_tokens": "sglang:max_total_num_tokens"}


def rank_constants(fams: dict[str, promtext.Family]) -> dict[int, dict[str, float]]:
    """Per-TP-rank memory constants, from the scheduler gauges' tp_rank label (memory figures
    clamped at 0.0 as in :func:`memory_gb`; non-finite values left out)."""
    ranks: dict[int, dict[str, float]] = {}
    for key, name in RANK_GAUGES.items():
        fam = fams.get(name)
        if fam is None:
            continue
        for sample in fam.samples:
            label = dict(sample.labels).get("tp_rank")
            rank = None if label is None else index(label)
            if rank is None:
                continue
            value = sample.value if key == "max_total_num_tokens" else memory_gb(sample.value)
            if value is not None and math.isfinite(value):
                ranks.setdefault(rank, {})[key] = value
    return ranks
