"""SGLang over HTTP: /health, /server_info and /metrics, with windowed latency quantiles from
histogram deltas and throughput from counter deltas (what rate() and histogram_quantile()
do in SGLang's Grafana board)."""

from __future__ import annotations

import math
import time
from typing import Any

import httpx

from collectors import promtext
from collectors.base import FailureTracker, TooLarge, describe, get_bounded
from collectors.readings import Reading, ServerData, Status, finite, spell
from collectors.units import MIB
from collectors.windowed import WindowedHistogram, WindowedRate

HISTOGRAMS = {
    "ttft": "sglang:time_to_first_token_seconds",
    "itl": "sglang:inter_token_latency_seconds",
    "e2e": "sglang:e2e_request_latency_seconds",
}
# The most a page of each kind can hold (SGLang's /metrics with every scheduler and DP rank
# reporting is a few MB): past it, a server that streams without end is cut off.
PAGE_LIMITS = {"/health": MIB, "/metrics": 64 * MIB}
GAUGES = {
    "num_running_reqs": "sglang:num_running_reqs",
    "num_queue_reqs": "sglang:num_queue_reqs",
    "num_used_tokens": "sglang:num_used_tokens",
    "token_usage": "sglang:token_usage",
    "gen_throughput": "sglang:gen_throughput",
}


class SglangCollector:
    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 2.0,
                 deadline_s: float = 5.0, window_s: float = 30.0, info_every_s: float = 15.0,
                 source: str | None = None, client: httpx.AsyncClient | None = None,
                 auth: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.window_s = window_s
        self.info_every_s = info_every_s
        # httpx's timeout is per read: a page that drips a byte a second never trips it.
        # Each request gets this long in all, so a poll always ends and the next one goes.
        self.deadline_s = deadline_s
        self.tracker = FailureTracker(source or f"sglang {self.url}")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # Loopback or a node's own network only; never follow redirects to elsewhere.
        self.client = client or httpx.AsyncClient(base_url=self.url, timeout=timeout,
                                                  headers=headers, follow_redirects=False,
                                                  auth=auth)
        self._own_client = client is None
        self._windows = {k: WindowedHistogram(window_s) for k in HISTOGRAMS}
        self._out_rate = WindowedRate(window_s)
        self._req_rate = WindowedRate(window_s)
        self._info: dict[str, Any] | None = None
        self._info_at = 0.0

    async def close(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def poll(self) -> Reading[ServerData]:
        try:
            return await self._poll()
        except Exception as exc:  # a collector never lets a failure escape
            return self.tracker.fail(Status.ERROR, describe(exc))

    async def _get(self, path: str) -> httpx.Response:
        """GET within the deadline and the size a page of its kind can have: TimeoutError
        (the builtin) or TooLarge past them."""
        return await get_bounded(self.client, path, deadline_s=self.deadline_s,
                                 limit_bytes=PAGE_LIMITS.get(path, 16 * MIB))

    async def _poll(self) -> Reading[ServerData]:
        try:
            health = await self._get("/health")
        except httpx.ConnectError:
            return self.tracker.fail(Status.ERROR, f"no server at {self.url} (connection refused)")
        except (httpx.TimeoutException, TimeoutError):
            return self.tracker.fail(Status.ERROR, f"{self.url}/health gave no whole answer "
                                                   f"within {self.deadline_s:g} s")
        except TooLarge as exc:
            return self.tracker.fail(Status.ERROR, f"/health: {exc}")
        healthy = health.status_code == 200
        if health.status_code not in (200, 503):
            return self.tracker.fail(Status.ERROR,
                                     f"/health answered HTTP {health.status_code}")
        fields: dict[str, Any] = {"url": self.url, "healthy": healthy}
        problems: list[str] = []
        now = time.monotonic()
        if self._info is None or now - self._info_at > self.info_every_s:
            try:
                self._info = await self._server_info()
                self._info_at = now
            except TimeoutError:
                problems.append(f"server_info: no whole answer within {self.deadline_s:g} s")
            except (httpx.HTTPError, ValueError) as exc:
                problems.append(f"server_info: {describe(exc)}")
        if self._info is not None:
            fields.update(self._info)
        try:
            fields.update(await self._metrics(now))
        except promtext.PromTextError as exc:
            problems.append(f"metrics page: {exc}")
        except TimeoutError:
            problems.append(f"/metrics: no whole page within {self.deadline_s:g} s")
        except (httpx.HTTPError, ValueError) as exc:
            problems.append(f"metrics: {describe(exc)}")
        data = finite(ServerData(**fields))
        if problems:
            return self.tracker.fail(Status.ERROR, "; ".join(problems), data)
        if not healthy:
            return self.tracker.ok(data, Status.STARTING, "server is starting (/health 503)")
        return self.tracker.ok(data)

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
        fams = promtext.parse(resp.text)
        out: dict[str, Any] = {}
        unavailable: dict[str, str] = {}
        for key, name in GAUGES.items():
            out[key], why = finite_gauge(fams, name)
            if why:
                unavailable[key] = why
        out["unavailable"] = unavailable
        # Newer SGLang builds export these constants; prefer them to /server_info's rounding.
        for key, name in (("weight_gb", "sglang:weight_memory_usage_gb"),
                          ("kv_cache_gb", "sglang:kv_cache_memory_usage_gb"),
                          ("max_total_num_tokens", "sglang:max_total_num_tokens")):
            value = promtext.gauge(fams, name)
            if value is not None and math.isfinite(value):
                out[key] = int(value) if key == "max_total_num_tokens" else memory_gb(value)
        out["ranks"] = rank_constants(fams)
        for key, name in HISTOGRAMS.items():
            fam = fams.get(name)
            if fam is not None:
                self._windows[key].add(now, merged_histogram(fam))
            out[key] = self._windows[key].quantiles(now)
        for rate, name in ((self._out_rate, "sglang:generation_tokens_total"),
                           (self._req_rate, "sglang:num_requests_total")):
            total = promtext.counter_total(fams, name)
            if total is not None and math.isfinite(total):  # a NaN would poison the window
                rate.add(now, total)
        out["output_tokens_per_s"] = self._out_rate.rate(now)
        out["requests_per_s"] = self._req_rate.rate(now)
        out["window_s"] = self.window_s
        return out


def finite_gauge(fams: dict[str, promtext.Family], name: str) -> tuple[float | None, str | None]:
    """A gauge's first finite sample, or None and why ("n/a: NaN from rank 0") when every
    sample is NaN or infinite: a broken exporter is a reading with a reason, not a number."""
    fam = fams.get(name)
    if fam is None:
        return None, None
    bad: promtext.Sample | None = None
    for sample in fam.samples:
        if sample.name != name:
            continue
        if math.isfinite(sample.value):
            return sample.value, None
        bad = bad or sample
    if bad is None:
        return None, None
    rank = dict(bad.labels).get("tp_rank")
    return None, f"n/a: {spell(bad.value)} from {'rank ' + rank if rank else 'the server'}"


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
    return {
        "version": _text(info.get("version")),
        "model_path": _text(info.get("model_path")),
        "tp_size": _count(info.get("tp_size")),
        "max_total_num_tokens": _count(info.get("max_total_num_tokens")),
        "weight_gb": memory_gb(usage.get("weight")),
        "kv_cache_gb": memory_gb(usage.get("kvcache")),
        "graph_gb": memory_gb(usage.get("graph")),
        # Only what a dashboard needs; /server_info also echoes api keys, never kept.
        "extra": {"simulated": info["simulated"]} if "simulated" in info else {},
    }


def merged_histogram(family: promtext.Family) -> promtext.Histogram:
    """All label sets of one histogram summed by bucket: sum by (le) (...)."""
    series = list(promtext.histogram_series(family).values())
    if len(series) == 1:
        return series[0]
    counts: dict[float, float] = {}
    total = 0.0
    count = 0.0
    for hist in series:
        for bound, c in hist.buckets:
            counts[bound] = counts.get(bound, 0.0) + c
        total += hist.sum
        count += hist.count
    return promtext.Histogram(buckets=tuple(sorted(counts.items())), sum=total, count=count)


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
            rank = dict(sample.labels).get("tp_rank")
            if rank is None or not rank.isdigit():
                continue
            value = sample.value if key == "max_total_num_tokens" else memory_gb(sample.value)
            if value is not None and math.isfinite(value):
                ranks.setdefault(int(rank), {})[key] = value
    return ranks
