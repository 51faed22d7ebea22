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

Nothing here is a measured vLLM figure: the banner says so, every metric's HELP says so,
and ``engram_top:simulated_info`` names the model behind the page.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from collectors.units import GIB
from engram_top.seed.reference import Placement, Reference
from engram_top.sim.http import Handler, ServerCore, openai_handlers, stamped
from engram_top.sim.memory import PAGE_SIZE, MemoryPlan
from engram_top.sim.metrics_page import Histogram, MetricsPage
from engram_top.sim.model import Request, Step
from engram_top.sim.pools import CHUNKED_PREFILL_SIZE
from engram_top.sim.server_args import CONTEXT_LEN
from engram_top.sim.startup import TABLES, RankHandle, Startup, StartupFailed

VERSION = "0.32.0+engram-top-sim"
ARCHITECTURE = "DeepseekV41ForCausalLM"  # vLLM's registry name for the V4.1 checkpoints
# The KV cache's block: the memory plan's page (its KV capacity is in whole pages).
BLOCK_SIZE = PAGE_SIZE
# Assumption: one Engram row is 256 fp8 values (engram.ROW_BYTES' row); vLLM's tables add
# one E8M0 scale byte per block of 32 (ParallelEngramEmbedding's default block_size).
ENGRAM_DIM = 256
ENGRAM_SCALE_BLOCK = 32
STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL's default (wall seconds)
SIMULATED = ("simulated by engram-top: every figure is the seed-calibrated model's "
             "(modelled, not measured on a vLLM)")
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
ROUTES = (("/health", "GET"), ("/load", "GET"), ("/version", "GET"), ("/metrics", "GET"),
          ("/v1/models", "GET"), ("/v1/completions", "POST"),
          ("/v1/chat/completions", "POST"))
API, ENGINE = "APIServer", "EngineCore"


# --------------------------------------------------------------------------- the log


def log(msg: str, proc: str = API, where: str = "api_server.py:1", level: str = "INFO",
        pid: int | None = None) -> None:
    """One line as vLLM's logger writes it: process tag, level, date without the year,
    the file and line that logged."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    raw(f"({proc} pid={pid or os.getpid()}) {level} {stamp} [{where}] {msg}")


def raw(line: str) -> None:
    """A line without vLLM's prefix: tqdm's bars, tracebacks, uvicorn's own lines."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def worker(rank: RankHandle, msg: str, where: str, level: str = "INFO") -> None:
    # The workers are the rank processes: their own pids.
    log(msg, f"Worker_TP{rank.rank}", where, level, rank.proc.pid)


def format_gib(nbytes: float) -> str:
    """vLLM's format_gib: GiB rounded to two places."""
    return f"{round(nbytes / GIB, 2)}"


def engine_args(ref: Reference, placement: Placement, mem: MemoryPlan,
                args: Any) -> dict[str, Any]:
    """What its ``non-default args`` line holds: the launch a real vLLM of this placement
    gets (the model's cap on running requests and its GPU share as flags; the key
    redacted, as vLLM does)."""
    out: dict[str, Any] = {"host": args.host, "port": args.port}
    if args.api_key:
        out["api_key"] = "***"
    out.update({"model": ref.model, "trust_remote_code": True,
                "tensor_parallel_size": ref.gpus,
                "gpu_memory_utilization": mem.mem_fraction_static,
                "max_num_seqs": placement.service.max_running_requests})
    if placement.name == "device":
        out["engram_config"] = {"cpu_offload": False}  # --engram-config.cpu_offload false
    return out


def preamble(ref: Reference, placement: Placement, mem: MemoryPlan, args: Any) -> None:
    """The API server's first lines and the engine core's config, before the workers."""
    where = "api_utils.py:347"
    for line in ("", "       █     █     █▄   ▄█",
                 f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VERSION}",
                 f"  █▄█▀ █     █     █     █  model   {ref.model}",
                 "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""):
        log(line, where=where)
    log(SIMULATED, where="vllm.py:1", level="WARNING")
    log(f"non-default args: {engine_args(ref, placement, mem, args)}", where="api_utils.py:286")
    log(f"Resolved architecture: {ARCHITECTURE}", where="model.py:733")
    log(f"Using max model len {CONTEXT_LEN}", where="model.py:2152")
    log(f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{ref.model}', "
        f"speculative_config=None, tokenizer='{ref.model}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=True, dtype=torch.bfloat16, "
        f"max_seq_len={CONTEXT_LEN}, download_dir=None, load_format=auto, "
        f"tensor_parallel_size={ref.gpus}, pipeline_parallel_size=1, data_parallel_size=1, "
        f"disable_custom_all_reduce=False, quantization=fp8, enforce_eager=False, "
        f"kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name={ref.model}, "
        f"enable_prefix_caching=True, enable_chunked_prefill=True", ENGINE, "core.py:133")


def bind(host: str, port: int) -> socket.socket:
    """vLLM binds its port at launch and listens once the engine is up: until then a
    connection is refused, and no other server can take the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def http_lines(args: Any) -> None:
    log(f"Starting vLLM server on http://{args.host}:{args.port}", where="entry.py:140")
    log("Available routes are:", where="launcher.py:186")
    for path, methods in ROUTES:
        log(f"Route: {path}, Methods: {methods}", where="launcher.py:195")


def failed(why: str) -> None:
    """The API server's last words when the engine did not come up."""
    raw("Traceback (most recent call last):")
    raw('  File "vllm/v1/engine/utils.py", line 1, in wait_for_engine_startup')
    raw(f"RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {{'EngineCore': 1}} ({why})")


def shutdown_lines(signame: str, workers: int) -> None:
    """What vLLM 0.32 logs on SIGTERM before uvicorn's own shutdown lines."""
    for proc, where, msg in (
            (API, "launcher.py:254", "[shutdown] API server: shutdown triggered"),
            (API, "launcher.py:270",
             "[shutdown] API server: stopping engine client mode=abort timeout=0s"),
            (ENGINE, "core.py:1454",
             f"[shutdown] EngineCore: trigger received signal={signame}"),
            (ENGINE, "core.py:1635", "[shutdown] EngineCore: start mode=abort timeout=0s"),
            (ENGINE, "core.py:1499", "[shutdown] EngineCore: exiting busy loop"),
            (ENGINE, "multiproc_executor.py:479",
             f"[shutdown] Executor: waiting for worker exit count={workers}"),
            (API, "core_client.py:777", "[shutdown] MPClient: complete"),
            (API, "launcher.py:279", "[shutdown] API server: engine client stopped"),
            (API, "launcher.py:304",
             "[shutdown] API server: shutting down FastAPI HTTP server")):
        log(msg, proc, where)


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own format (vLLM leaves it alone), on stdout beside the rest."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "uvicorn.logging.DefaultFormatter",
                        "fmt": "%(levelprefix)s %(message)s", "use_colors": False},
            "access": {"()": "uvicorn.logging.AccessFormatter",
                       "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" '
                              '%(status_code)s', "use_colors": False},
        },
        "handlers": {
            "default": {"formatter": "default", "class": "logging.StreamHandler",
                        "stream": "ext://sys.stdout"},
            "access": {"formatter": "access", "class": "logging.StreamHandler",
                       "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }


# --------------------------------------------------------------------------- start-up


class VllmStartup(Startup):
    """vLLM's GPU path over the same memory and the seed's phase lengths (see the module's
    note on which phase is which)."""

    compile_s = 0.0

    def check_fail(self, phase: str) -> None:
        if self.fail_at != phase:
            return
        worker(self.ranks[0], "WorkerProc failed to start.", "multiproc_executor.py:772",
               "ERROR")
        raw("Traceback (most recent call last):")
        raw(f'  File "engram_top/sim/vllm.py", line 1, in {phase}')
        raw(f"RuntimeError: simulated failure during {phase} (--fail-at {phase})")
        log("EngineCore failed to start.", ENGINE, "core.py:1093", "ERROR")
        raise StartupFailed(f"simulated failure during {phase}")

    async def run(self) -> None:
        n = len(self.ranks)
        lead = self.ranks[0]
        self.main_host()
        for r in self.ranks:
            worker(r, f"world_size={n} rank={r.rank} local_rank={r.rank} "
                      f"distributed_init_method=tcp://127.0.0.1:29500 backend=nccl",
                   "parallel_state.py:1907")
        await self.ramp(self.phase_s["distributed_init"], 4, self.dist_memory)
        self.check_fail("distributed_init")
        # info_once with the local scope: only local rank 0 says most of what follows.
        worker(lead, f"rank 0 in world size {n} is assigned as DP rank 0, PP rank 0, PCP rank "
                     f"0, TP rank 0, ETP rank 0, EP rank N/A, EPLB rank N/A",
               "parallel_state.py:2350")
        await self.load_weights()
        t0 = time.monotonic()
        await self.compile()
        await self.kv_pool()
        await self.graphs()
        log(f"init engine (profile, create kv cache, warmup model) took "
            f"{time.monotonic() - t0:.2f} s (compilation: {self.compile_s:.2f} s)",
            ENGINE, "core.py:395")
        log("Supported tasks: ['generate']", where="entry.py:136")

    def engram_lines(self) -> list[str]:
        """vLLM's offload line, once per table on every rank: each holds its share of the
        hash heads (TP-sharded, no DP replicas to share with)."""
        out = []
        row_bytes = ENGRAM_DIM + ENGRAM_DIM // ENGRAM_SCALE_BLOCK
        for _, share in TABLES:
            rows = int(self.mem.host_table_bytes * share / len(self.ranks) // row_bytes)
            out.append(f"Engram table offloaded to pinned host memory: {rows} rows x "
                       f"{ENGRAM_DIM}, {rows * row_bytes / GIB:.2f} GiB per rank")
        return out

    async def load_weights(self) -> None:
        lead = self.ranks[0]
        t0 = time.monotonic()
        worker(lead, f"Starting to load model {self.ref.model}...", "gpu_model_runner.py:5039")
        if self.host:  # logged as the model is built, before its weights load
            for r in self.ranks:
                for line in self.engram_lines():
                    worker(r, line, "engram.py:1021")
        shards = 64
        progress = {"shard": 0}

        def weights(frac: float) -> None:
            self.weights_memory(frac)
            shard = int(frac * shards)
            if shard >= progress["shard"] + 8 or shard == shards:
                progress["shard"] = shard
                raw(f"Loading safetensors checkpoint shards: {shard * 100 // shards:3d}% "
                    f"Completed | {shard}/{shards}")
        await self.ramp(self.phase_s["weights"], 40, weights)
        self.check_fail("weights")
        elapsed = time.monotonic() - t0
        worker(lead, f"Loading weights took {elapsed:.2f} seconds", "default_loader.py:501")
        worker(lead, f"Model loading took {format_gib(self.mem.weights_bytes)} GiB memory and "
                     f"{elapsed:.6f} seconds", "gpu_model_runner.py:5149")

    async def compile(self) -> None:
        t0 = time.monotonic()
        for r in self.ranks:
            worker(r, "[backbone] Starting torch.compile", "monitor.py:40")
        await self.ramp(self.phase_s["warmup"], 2, lambda f: None)
        self.check_fail("warmup")
        self.compile_s = time.monotonic() - t0
        for r in self.ranks:
            worker(r, f"[backbone] Compiling a graph for compile range (1, "
                      f"{CHUNKED_PREFILL_SIZE}) takes {self.compile_s:.2f} s", "backends.py:398")
            worker(r, f"[backbone] torch.compile took {self.compile_s:.2f} s in total",
                   "monitor.py:62")

    async def kv_pool(self) -> None:
        mem = self.mem
        worker(self.ranks[0], f"Available KV cache memory: {format_gib(mem.kv_bytes)} GiB",
               "gpu_worker.py:759")
        await self.ramp(self.phase_s["kv_pool"], 2, lambda f: None)
        self.check_fail("kv_pool")
        self.kv_memory()
        self.push_all()
        log(f"GPU KV cache size: {mem.kv_tokens:,} tokens, Maximum concurrency for "
            f"{CONTEXT_LEN:,} tokens per request: {mem.kv_tokens / CONTEXT_LEN:.2f}x",
            ENGINE, "kv_cache_utils.py:2327")

    async def graphs(self) -> None:
        t0 = time.monotonic()
        grow = self.graphs_memory()
        bar = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
        raw(f"{bar}:   0%|          | 0/51 [00:00<?, ?it/s]")
        await self.ramp(self.phase_s["graphs"], 10, grow)
        raw(f"{bar}: 100%|██████████| 51/51")
        raw("Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35")
        self.check_fail("graphs")
        worker(self.ranks[0], f"Graph capturing finished in {time.monotonic() - t0:.0f} secs, "
                              f"took {self.mem.graphs_bytes / GIB:.2f} GiB",
               "gpu_model_runner.py:6581")


# --------------------------------------------------------------------------- serving


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
