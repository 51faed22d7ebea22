"""`engram-top sim serve --dialect vllm`: the simulated server speaking vLLM 0.32's dialect.

The same server as SGLang's dialect (engram_top.sim.server): the same memory plan, the
same scheduler and the same seed-calibrated service times for its placement, so every
figure here is the model's; only the words differ. What a real vLLM 0.32 prints and serves
on a 4x B200 node, TP4:

  - its start-up log, with vLLM's process tags (``(APIServer pid=N) INFO MM-DD HH:MM:SS
    [file.py:line] msg``; the workers are the rank processes, ``Worker_TP0`` ...) and its
    GPU path's lines: the banner, ``non-default args``, weights, torch.compile, the KV
    cache in GiB and in tokens, CUDA graph capture, the Engram tables' offload (host
    placement), ``init engine``, the API server, uvicorn's own lines, and on a stop the
    ``[shutdown]`` lines;
  - its endpoints: /health (200, empty), /version, /v1/models, /load, /v1/completions,
    /v1/chat/completions and /metrics in vLLM's names, labels and default buckets. No
    SGLang endpoint (/server_info, /get_model_info, /generate).

Like vLLM, the port is bound at launch but listened on only once the engine is up: a
connection before then is refused, and /health is 200 from the first answer on.

The phases take the seed's [startup] lengths for the placement, so launch to ready is the
seed's ready_s: distributed init, weights and the KV cache as SGLang's phases of those
names; torch.compile (run before the KV cache is sized, on the profile run) takes the
warm-up's length (both are the server's first forward passes); the CUDA graph capture the
graph phase's; the API server's start the http phase's.

Its log and start-up are engram_top.sim.vllm_log's; its model, metrics and endpoints here.

Nothing here is a measured vLLM figure: the banner says so, every metric's HELP says so,
and ``engram_top:simulated_info`` names the model behind the page.
"""

from __future__ import annotations

import asyncio
import time

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from engram_top.sim.core import ServerCore
from engram_top.sim.http import Handler, openai_handlers, stamped
from engram_top.sim.memory import PAGE_SIZE
from engram_top.sim.metrics_page import Histogram, MetricsPage
from engram_top.sim.model import Request, Step
from engram_top.sim.server_args import CONTEXT_LEN
from engram_top.sim.startup import RankHandle
from engram_top.sim.vllm_log import log

# The KV cache's block: the memory plan's page (its KV capacity is in whole pages).
BLOCK_SIZE = PAGE_SIZE
STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL's default (wall seconds)
MODELLED = " [modelled: engram-top's simulated node, not a measured vLLM]"
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM's default buckets (vllm/v1/metrics/buckets.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": (TTFT_BUCKETS,
                                         "Histogram of time to first token in seconds."),
    "vllm:inter_token_latency_seconds": (ITL_BUCKETS,
                                         "Histogram of inter-token latency in seconds."),
    "vllm:request_time_per_output_token_seconds": (
        ITL_BUCKETS, "Histogram of time_per_output_token_seconds per request."),
    "vllm:e2e_request_latency_seconds": (LATENCY_BUCKETS,
                                         "Histogram of e2e request latency in seconds."),
    "vllm:request_queue_time_seconds": (
        LATENCY_BUCKETS, "Histogram of time spent in WAITING phase for request."),
}


class VllmCore(ServerCore):
    """The model's server with vLLM's metrics and stats lines."""

    logs_engram_stats = False  # SGLang's build logs them; vLLM's does not

    def _init_metrics(self) -> None:
        m = self.metrics = MetricsPage()
        self.labels = {"engine": "0", "model_name": self.model_name}
        for name, kind, help_text in (
                ("vllm:num_requests_running", "gauge",
                 "Number of requests in model execution batches."),
                ("vllm:num_requests_waiting", "gauge",
                 "Number of requests waiting to be processed."),
                ("vllm:kv_cache_usage_perc", "gauge",
                 "KV-cache usage. 1 means 100 percent usage."),
                ("vllm:prefix_cache_queries_total", "counter",
                 "Prefix cache queries, in terms of number of queried tokens."),
                ("vllm:prefix_cache_hits_total", "counter",
                 "Prefix cache hits, in terms of number of cached tokens."),
                ("vllm:num_preemptions_total", "counter",
                 "Cumulative number of preemption from the engine."),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
                ("vllm:generation_tokens_total", "counter",
                 "Number of generation tokens processed."),
                ("vllm:request_success_total", "counter",
                 "Count of successfully processed requests.")):
            m.declare(name, kind, help_text + MODELLED)
        for name, (_, help_text) in HISTOGRAMS.items():
            m.declare(name, "histogram", help_text + MODELLED)
        m.declare("vllm:cache_config_info", "gauge",
                  "Information of the LLMEngine CacheConfig" + MODELLED)
        m.declare("engram_top:simulated_info", "gauge",
                  "This server is engram-top's simulated node: its figures are the "
                  "seed-calibrated model's, not measurements.")
        self.counters = dict.fromkeys(("vllm:prompt_tokens_total",
                                       "vllm:generation_tokens_total",
                                       "vllm:prefix_cache_queries_total",
                                       "vllm:prefix_cache_hits_total"), 0.0)
        self.finished = dict.fromkeys(FINISHED_REASONS, 0.0)
        self.histograms = {name: Histogram(bounds) for name, (bounds, _) in HISTOGRAMS.items()}
        # Since the last stats line: prompt and generated tokens, and the preemptions.
        self.since = {"prompt": 0, "generation": 0}
        self.last_rates = (0.0, 0.0)
        self.preempted_logged = 0

    def kv_usage(self) -> float:
        """The share of the KV cache held, running and prefilling requests' alike (vLLM
        counts allocated blocks)."""
        return min(1.0, self.sched.kv_used / self.mem.kv_tokens)

    def render_metrics(self) -> str:
        m, labels = self.metrics, self.labels
        m.set("vllm:num_requests_running", labels, len(self.sched.running))
        m.set("vllm:num_requests_waiting", labels, len(self.sched.waiting))
        m.set("vllm:kv_cache_usage_perc", labels, self.kv_usage())
        for name, value in self.counters.items():
            m.set(name, labels, value)
        # vLLM's preemption is the scheduler's retraction: freed, queued, recomputed.
        m.set("vllm:num_preemptions_total", labels, self.sched.retracted_total)
        for reason, count in self.finished.items():
            m.set("vllm:request_success_total",
                  {"engine": "0", "finished_reason": reason, "model_name": self.model_name},
                  count)
        for name, hist in self.histograms.items():
            m.set(name, labels, hist)
        mem = self.mem
        m.set("vllm:cache_config_info", {
            "block_size": str(BLOCK_SIZE), "cache_dtype": "auto",
            "enable_prefix_caching": "True", "engine": "0",
            "gpu_memory_utilization": str(mem.mem_fraction_static),
            "kv_cache_max_concurrency": str(round(mem.kv_tokens / CONTEXT_LEN, 2)),
            # Set only by --kv-cache-memory-bytes, which a GPU launch leaves to the
            # profiler: the log's "Available KV cache memory" says the size.
            "kv_cache_memory_bytes": "None",
            "kv_cache_size_tokens": str(mem.kv_tokens),
            "kv_offloading_backend": "native", "kv_offloading_size": "None",
            "num_cpu_blocks": "None", "num_gpu_blocks": str(mem.kv_tokens // BLOCK_SIZE),
            "sliding_window": "None"}, 1)
        m.set("engram_top:simulated_info", {
            "dialect": "vllm", "placement": self.placement.name,
            "model": "seed-calibrated", "time_scale": repr(self.args.time_scale),
            "serve_scale": repr(self.args.serve_scale)}, 1)
        return m.render()

    # ------------------------------------------------------------------ requests
    def on_submit(self, req: Request) -> None:
        self.counters["vllm:prompt_tokens_total"] += req.input_len
        # No prefix cache in the model: every prompt token is looked up, none is found.
        self.counters["vllm:prefix_cache_queries_total"] += req.input_len

    def on_token(self, req: Request, n: int, t: float, last: float) -> None:
        if n == 1:
            self.histograms["vllm:time_to_first_token_seconds"].observe(t - req.arrival)
            admitted = req.admitted_at if req.admitted_at is not None else t
            self.histograms["vllm:request_queue_time_seconds"].observe(
                max(0.0, admitted - req.arrival))
        else:
            self.histograms["vllm:inter_token_latency_seconds"].observe(t - last)
        self.counters["vllm:generation_tokens_total"] += 1

    def on_finish(self, req: Request, n: int, last: float, now: float) -> None:
        self.histograms["vllm:e2e_request_latency_seconds"].observe(now - req.arrival)
        first = req.first_token_at if req.first_token_at is not None else last
        # vLLM's per-request TPOT: its decode time over the tokens after the first.
        self.histograms["vllm:request_time_per_output_token_seconds"].observe(
            (last - first) / (n - 1) if n > 1 else 0.0)
        self.finished["length"] += 1  # max_tokens reached: the simulator writes no EOS

    def on_abort(self, req: Request) -> None:
        self.finished["abort"] += 1

    def check_length(self, input_len: int, max_new: int) -> None:
        total = input_len + max_new
        if total > CONTEXT_LEN:
            raise ValueError(
                f"This model's maximum context length is {CONTEXT_LEN} tokens. However, you "
                f"requested {total} tokens ({input_len} in the messages, {max_new} in the "
                f"completion). Please reduce the length of the messages or completion.")

    # ------------------------------------------------------------------ stats lines
    def log_step(self, step: Step, running_before: int) -> None:
        if step.kind == "prefill":
            self.since["prompt"] += step.tokens
        self.since["generation"] += len(step.requests)

    def start(self, ranks: list[RankHandle]) -> None:
        super().start(ranks)
        self.tasks.append(asyncio.create_task(self._stats_loop()))

    async def _stats_loop(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(STATS_INTERVAL_S)
            self.stats_line(time.monotonic() - started)

    def stats_line(self, seconds: float) -> str | None:
        """vLLM's periodic engine line; none when idle (vLLM logs it at debug then)."""
        rates = (self.since["prompt"] / seconds, self.since["generation"] / seconds)
        self.since = {"prompt": 0, "generation": 0}
        idle = not any((*rates, *self.last_rates))
        self.last_rates = rates
        if idle:
            return None
        parts = [f"Avg prompt throughput: {rates[0]:.1f} tokens/s",
                 f"Avg generation throughput: {rates[1]:.1f} tokens/s",
                 f"Running: {len(self.sched.running)} reqs",
                 f"Waiting: {len(self.sched.waiting)} reqs"]
        preempted = self.sched.retracted_total - self.preempted_logged
        self.preempted_logged = self.sched.retracted_total
        if preempted:
            parts.append(f"Preemptions: {preempted}")
        parts.append(f"GPU KV cache usage: {100 * self.kv_usage():.1f}%")
        if self.counters["vllm:prefix_cache_queries_total"]:
            parts.append("Prefix cache hit rate: 0.0%")
        line = "Engine 000: " + ", ".join(parts)
        log(line, where="loggers.py:335")
        return line


def build_app(core: VllmCore) -> ASGIApp:
    api_key = core.args.api_key

    def guarded(handler: Handler) -> Handler:
        # vLLM's key guards its /v1 routes (a Bearer token); /health, /metrics, /version
        # and /load answer anyone.
        async def checked(request: HttpRequest) -> Response:
            auth = request.headers.get("authorization", "")
            if api_key and auth != f"Bearer {api_key}":
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
            return await handler(request)
        return checked

    def error(status: int, message: str) -> Response:
        return JSONResponse({"error": {"message": message, "type": "BadRequestError",
                                       "param": None, "code": status}}, status_code=status)

    completions, chat_completions = openai_handlers(core, error)

    async def health(request: HttpRequest) -> Response:
        return Response(status_code=200)  # listening means the engine is up

    async def version(request: HttpRequest) -> Response:
        return JSONResponse({"version": core.version})

    async def load(request: HttpRequest) -> Response:
        return JSONResponse({"server_load": len(core.sched.running) + len(core.sched.waiting)})

    async def models(request: HttpRequest) -> Response:
        created = int(time.time())
        return JSONResponse({"object": "list", "data": [{
            "id": core.model_name, "object": "model", "created": created, "owned_by": "vllm",
            "root": core.model_name, "parent": None, "max_model_len": CONTEXT_LEN,
            "permission": [{"id": f"modelperm-{created}", "object": "model_permission",
                            "created": created, "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}]})

    async def metrics(request: HttpRequest) -> Response:
        return PlainTextResponse(core.render_metrics(),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    async def sim_requests(request: HttpRequest) -> Response:
        return JSONResponse({"clock": "monotonic", "requests": list(core.done)})

    async def not_found(request: HttpRequest, exc: Exception) -> Response:
        return JSONResponse({"detail": "Not Found"}, status_code=404)  # FastAPI's

    routes = [
        Route("/health", health), Route("/load", load), Route("/version", version),
        Route("/metrics", metrics), Route("/v1/models", guarded(models)),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
        Route("/v1/chat/completions", guarded(chat_completions), methods=["POST"]),
        # Not vLLM: the simulated server's own per-request times, for testing clients.
        Route("/sim/requests", guarded(sim_requests)),
    ]
    return stamped(Starlette(routes=routes, exception_handlers={404: not_found}))
