"""vLLM over HTTP: /health, /version, /v1/models and /metrics, windowed like the SGLang
collector (histogram and counter deltas over the last 30 s).

What vLLM's metrics give, and what they do not: the KV cache's size (the labels of
``vllm:cache_config_info``), its usage as a fraction, running and waiting requests, TTFT,
inter-token, per-request TPOT, end-to-end and queue-time histograms, preemptions (vLLM's
analogue of SGLang's retractions) and prefix-cache hits. No vLLM metric gives the weights',
the CUDA graphs' or the Engram tables' memory: those come from NVML and the start-up log,
and a panel says so (``NOT_REPORTED``).

Every family carries ``engine`` (the data-parallel engine core, "0".."N-1") and
``model_name``; figures add up over engines, usages take the fullest.
"""

from __future__ import annotations

import math
from typing import Any

from collectors import promread, promtext
from collectors.engine_http import EngineCollector
from collectors.readings import spell
from collectors.units import GIB, MIB
from collectors.vllm import PAGE_PREFIXES, SOURCE
from collectors.windowed import WindowedHistogram, WindowedRate

SUM, MAX = "sum", "max"
# Each figure: vLLM's current name first, then older spellings (the v0 engine's).
GAUGES: dict[str, tuple[tuple[str, ...], str]] = {
    "num_running_reqs": (("vllm:num_requests_running",), SUM),
    "num_queue_reqs": (("vllm:num_requests_waiting",), SUM),
    "token_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), MAX),
    # v0 engines gave the prefix cache's hit rate as a gauge; v1 gives counters (below).
    "cache_hit_rate": (("vllm:gpu_prefix_cache_hit_rate",), MAX),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    # Before 0.10 the inter-token histogram was called time_per_output_token.
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    # One observation per request: its decode time over its output tokens. Not the ITL.
    "tpot": ("vllm:request_time_per_output_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue_time": ("vllm:request_queue_time_seconds",),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "output_tokens": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    "requests": ("vllm:request_success_total", "vllm:request_success"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "retracted": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prefix_queries": ("vllm:prefix_cache_queries_total",
                       "vllm:gpu_prefix_cache_queries_total"),
}
INFO = "vllm:cache_config_info"
ABORT = "abort"  # request_success's finished_reason for a request that was aborted
PAGE_LIMITS = {"/health": MIB, "/version": MIB, "/v1/models": 4 * MIB, "/metrics": 64 * MIB}
# Figures an SGLang server gives that no vLLM metric does: field -> what the panel says.
NOT_REPORTED = {
    "weight_gb": "n/a (vLLM does not report it; NVML and the start-up log do)",
    "graph_gb": "n/a (vLLM does not report it; the start-up log does, on GPUs)",
    "num_used_tokens": "n/a (vLLM reports the KV cache's usage as a fraction only)",
}


def canonical(fams: dict[str, promtext.Family]) -> dict[str, promtext.Family]:
    """vLLM's names whatever the spelling: a Prometheus pipeline may write ``vllm_``."""
    if any(name.startswith("vllm:") for name in fams):
        return fams
    if any(name.startswith("vllm_") for name in fams):
        return promread.renamed(fams, "vllm_", "vllm:")
    return fams


def is_vllm_page(fams: dict[str, promtext.Family]) -> bool:
    return any(name.startswith("vllm:") for name in fams)


def find(fams: dict[str, promtext.Family], names: tuple[str, ...]) -> promtext.Family | None:
    for name in names:
        if name in fams:
            return fams[name]
    return None


def _engine(labels: promtext.Labels) -> str:
    return dict(labels).get("engine", "")


def gauge_figure(fam: promtext.Family | None, how: str) -> tuple[float | None, str | None]:
    """One figure over the engines (each engine's series added up, then the engines added
    or the fullest taken), or None and why when every sample is NaN or infinite."""
    if fam is None:
        return None, None
    per_engine: dict[str, float] = {}
    bad: float | None = None
    seen: set[promtext.Labels] = set()
    for s in fam.samples:
        if s.name != fam.name or s.labels in seen:
            continue
        seen.add(s.labels)
        if not math.isfinite(s.value):
            bad = s.value
            continue
        key = _engine(s.labels)
        per_engine[key] = per_engine.get(key, 0.0) + s.value
    if not per_engine:
        return (None, None) if bad is None else (None, f"n/a: {spell(bad)} from the server")
    values = list(per_engine.values())
    return (max(values) if how == MAX else sum(values)), None


def counter_figure(fam: promtext.Family | None) -> float | None:
    """A counter's total over every series (engines, finished reasons)."""
    if fam is None:
        return None
    by_labels: dict[promtext.Labels, float] = {}
    for s in fam.samples:
        if not s.name.endswith("_created"):
            by_labels.setdefault(s.labels, s.value)
    return sum(by_labels.values()) if by_labels else None


def merged_histogram(fam: promtext.Family) -> promtext.Histogram:
    """Every engine's series summed by bucket."""
    return promtext.summed(list(promtext.histogram_series(fam).values()))


def cache_config(fams: dict[str, promtext.Family]) -> list[dict[str, str]]:
    """The labels of ``vllm:cache_config_info``, one dict per engine (an info gauge: its
    value is 1 and its labels are the data)."""
    fam = fams.get(INFO)
    if fam is None:
        return []
    out: dict[str, dict[str, str]] = {}
    for s in fam.samples:
        labels = dict(s.labels)
        out.setdefault(labels.get("engine", ""), labels)
    return [out[k] for k in sorted(out)]


def _int_label(labels: dict[str, str], key: str) -> int | None:
    text = labels.get(key, "").replace(",", "")
    try:
        value = float(text)
    except ValueError:  # "None", "", a word: not given
        return None
    return int(value) if math.isfinite(value) and value >= 0 else None


def capacity(configs: list[dict[str, str]]) -> tuple[int | None, int | None, str]:
    """(KV capacity in tokens, KV cache bytes, where the tokens came from) over the engines.
    vLLM 0.11+ labels the size in tokens; before, it is the blocks times the block size."""
    tokens = 0
    size = 0
    how = ""
    for labels in configs:
        n = _int_label(labels, "kv_cache_size_tokens")
        if n is not None:
            how = how or "kv_cache_size_tokens"
        else:
            blocks = _int_label(labels, "num_gpu_blocks")
            block = _int_label(labels, "block_size")
            if blocks is None or block is None:
                return None, None, ""
            n = blocks * block
            how = how or "num_gpu_blocks x block_size"
        tokens += n
        size += _int_label(labels, "kv_cache_memory_bytes") or 0
    if not configs:
        return None, None, ""
    return tokens, size or None, how


def since_start(fams: dict[str, promtext.Family]) -> dict[str, Any]:
    """What one page's counters say since the server started: the prefix cache's hit rate
    (its hit tokens over the tokens looked up: a rate since the start, not the window's),
    the tokens it served, and the requests that finished aborted. None where the page lacks
    the counter (an older page with no queries, or none looked up yet)."""
    hits = counter_figure(find(fams, COUNTERS["prefix_hits"]))
    queries = counter_figure(find(fams, COUNTERS["prefix_queries"]))
    rate = None
    if hits is not None and queries and math.isfinite(hits) and math.isfinite(queries):
        rate = min(1.0, max(0.0, hits / queries))
    aborted = None
    fam = find(fams, COUNTERS["requests"])
    if fam is not None and any(dict(x.labels).get("finished_reason") for x in fam.samples):
        aborted = counter_figure(promtext.Family(fam.name, fam.type, fam.help, [
            x for x in fam.samples if dict(x.labels).get("finished_reason") == ABORT])) or 0.0
    return {"cache_hit_rate_since_start": rate,
            "cached_tokens_total": hits if hits is not None and math.isfinite(hits) else None,
            "aborted_requests_total": aborted if aborted is None or math.isfinite(aborted)
            else None}


def page_figures(fams: dict[str, promtext.Family]) -> dict[str, Any]:
    """What one /metrics page says, as ServerData fields (the windowed figures apart).
    Pure, for the collector and for inspect-metrics."""
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
    configs = cache_config(fams)
    tokens, size, how = capacity(configs)
    out["max_total_num_tokens"] = tokens
    out["kv_cache_gb"] = None if size is None else size / GIB
    out["unavailable"] = unavailable
    for names in HISTOGRAMS.values():
        fam = find(fams, names)
        if fam is not None and fam.type == "histogram":
            issues += promtext.problems(fam)
    out["page_problems"] = tuple(dict.fromkeys(issues))[:20]
    out.update(since_start(fams))
    out["not_reported"] = dict(NOT_REPORTED)
    extra: dict[str, object] = {"engine": "vllm"}
    if configs:
        first = configs[0]
        extra["cache_config"] = {k: first[k] for k in (
            "block_size", "cache_dtype", "gpu_memory_utilization", "enable_prefix_caching",
            "kv_cache_memory_bytes", "kv_cache_size_tokens", "num_gpu_blocks",
            "kv_offloading_backend", "kv_offloading_size") if k in first}
        extra["engines"] = len(configs)
        extra["capacity_from"] = how
    models = {dict(s.labels).get("model_name") for f in fams.values() for s in f.samples[:1]}
    models.discard(None)
    if len(models) == 1:
        extra["model_name"] = models.pop()
    out["extra"] = extra
    return out


class VllmCollector(EngineCollector):
    PAGE_LIMITS = PAGE_LIMITS
    PAGE_PREFIXES = PAGE_PREFIXES
    SOURCE = SOURCE  # collectors.vllm's, where the engine reads it without this module

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._windows = {k: WindowedHistogram(self.window_s) for k in HISTOGRAMS}
        self._rates = {k: WindowedRate(self.window_s) for k in COUNTERS}
        self._aborted = WindowedRate(self.window_s)

    async def _server_info(self) -> dict[str, Any]:
        """vLLM has no /server_info: its version, and the model it serves."""
        info: dict[str, Any] = {}
        resp = await self._get("/version")
        if resp.status_code == 200:
            body = resp.json()
            if isinstance(body, dict):
                info["version"] = body.get("version")
        resp = await self._get("/v1/models")
        if resp.status_code == 200:
            body = resp.json()
            data = body.get("data") if isinstance(body, dict) else None
            if isinstance(data, list) and data and isinstance(data[0], dict):
                info["model_path"] = data[0].get("root") or data[0].get("id")
        # Strings only: a field of another type is not given (and never a crash).
        return {k: v for k, v in info.items() if isinstance(v, str)}

    async def _metrics(self, now: float) -> dict[str, Any]:
        resp = await self._get("/metrics")
        if resp.status_code == 404:
            raise ValueError("/metrics is 404: is this a vLLM server?")
        resp.raise_for_status()
        fams = canonical(await self._families(resp.text))
        stack = self._stack_fields(now)
        if stack is not None:
            return stack
        if not is_vllm_page(fams):
            raise ValueError("/metrics has no vllm: families: is this a vLLM server?")
        out = page_figures(fams)
        for key, names in HISTOGRAMS.items():
            fam = find(fams, names)
            if fam is not None and fam.type == "histogram":
                self._windows[key].add(now, merged_histogram(fam))
            out[key] = self._windows[key].quantiles(now)
        for key, names in COUNTERS.items():
            total = counter_figure(find(fams, names))
            if total is not None and math.isfinite(total):
                self._rates[key].add(now, total)
        out["output_tokens_per_s"] = self._rates["output_tokens"].rate(now)
        out["requests_per_s"] = self._rates["requests"].rate(now)
        out["retracted_per_s"] = self._rates["retracted"].rate(now)
        out["cached_tokens_per_s"] = self._rates["prefix_hits"].rate(now)
        if out["aborted_requests_total"] is not None:
            self._aborted.add(now, out["aborted_requests_total"])
        out["aborted_per_s"] = self._aborted.rate(now)
        hits = self._rates["prefix_hits"].rate(now)
        queries = self._rates["prefix_queries"].rate(now)
        if out.get("cache_hit_rate") is None and hits is not None and queries:
            out["cache_hit_rate"] = min(1.0, hits / queries)  # of the tokens looked up
        out["window_s"] = self.window_s
        return out

