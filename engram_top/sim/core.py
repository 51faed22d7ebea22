"""The simulated server's model and serving loop, speaking SGLang: its batch lines, its
metric names, its /server_info, over the scheduler model. engram_top.sim.http serves it
over HTTP; a dialect of its own (engram_top.sim.vllm) subclasses it.

The model is DeepSeek-V4.1, so the batch lines and metrics speak of its KV pools: the full
pool (the scheduler's KV capacity) and the sliding-window (SWA) pool beside it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from collectors.units import GIB
from engram_top.seed.reference import Placement, Reference
from engram_top.sim import server_args
from engram_top.sim.engram import LOG_INTERVAL_S, EngramStats
from engram_top.sim.hicache import HiCacheSim
from engram_top.sim.memory import PAGE_SIZE, MemoryPlan
from engram_top.sim.metrics_page import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    QUEUE_BUCKETS,
    TTFT_BUCKETS,
    Histogram,
    MetricsPage,
)
from engram_top.sim.model import (
    BATCH_WINDOW_S,
    PREFILL_TOKEN_BUDGET,
    Request,
    Scheduler,
    Step,
)
from engram_top.sim.startup import LAYOUT_WORDS, RankHandle, log

DECODE_LOG_INTERVAL = server_args.DECODE_LOG_INTERVAL
MAX_LAG_S = 0.05  # how far behind plan the serving loop may run before it stops catching up
# A burst's arrivals are gathered until they pause this long (real seconds) or the model's
# batch window, whichever is longer: a client that stalls mid-burst (opening connections,
# a collection pause) must not split it, whatever the serve scale.
BURST_PAUSE_S = 0.03
BURST_MARGIN_S = 0.002  # gathering ends this long before the batch's planned end
CONTEXT_LEN = server_args.CONTEXT_LEN  # as the start-up log's scheduler summary prints it
WARMUP_HEADER = "x-sim-warmup"  # the warm-up request's token (served before ready)


class ServerCore:
    """The simulated server's model and state, speaking SGLang; a dialect of its own
    (engram_top.sim.vllm) overrides the metrics, the hooks a request and a step call,
    and the length check, and keeps the model."""

    # SGLang's V4.1 builds log per-layer Engram statistics (host placements only).
    logs_engram_stats = True

    def __init__(self, ref: Reference, placement: Placement, mem: MemoryPlan, args: Any,
                 version: str) -> None:
        self.ref = ref
        self.placement = placement
        self.mem = mem
        self.args = args
        self.version = version
        self.model_name = ref.model
        self.sched = Scheduler(placement.service, mem.kv_tokens)
        self.ready = False
        self.warmup_token = secrets.token_hex(16)
        self.node_dir: Path | None = None  # the simulated node's folder (server.py sets it)
        self.launched = time.monotonic()
        self.startup_seconds: float | None = None
        self.wake = asyncio.Event()
        # POST /pause_generation (in place): the loop takes no step until /continue_generation,
        # and the requests it holds count as paused, as SGLang's weight-sync pause has them.
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        self.streams: dict[Request, asyncio.Queue[float | None]] = {}
        self.ranks: list[RankHandle] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.busy_s = 0.0  # service time spent in the current utilisation window
        self.host_bytes_read = 0.0
        self.engram = EngramStats() if placement.name != "device" else None
        self.gen_tokens_since_log = 0
        self.gen_log_started = time.monotonic()
        self.decode_steps = 0
        self.last_gen_throughput = 0.0
        self.ids = itertools.count(1)
        self.done: deque[dict[str, Any]] = deque(maxlen=10000)
        self.hicache: HiCacheSim | None = None  # hicache.put_on_page, once its size is known
        self._init_metrics()

    # ------------------------------------------------------------------ metrics
    def _init_metrics(self) -> None:
        m = self.metrics = MetricsPage()
        self.sched_labels = {"model_name": self.model_name, "engine_type": "unified",
                             "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.tok_labels = {"model_name": self.model_name, "engine_type": "unified"}
        for name, help_text in (
                ("sglang:num_running_reqs", "The number of running requests."),
                ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
                ("sglang:num_paused_reqs", "The number of paused requests by async weight sync."),
                ("sglang:num_used_tokens", "The number of used tokens."),
                ("sglang:token_usage", "The token usage: the fullest pool's."),
                ("sglang:full_token_usage", "The token usage of the full KV pool."),
                ("sglang:swa_token_usage", "The token usage of the sliding-window KV pool."),
                ("sglang:kv_used_tokens", "KV tokens in use."),
                ("sglang:kv_available_tokens", "KV tokens free to allocate."),
                ("sglang:kv_evictable_tokens", "KV tokens the prefix cache can evict."),
                ("sglang:num_retracted_reqs", "The number of retracted requests."),
                ("sglang:gen_throughput", "The generation throughput (token/s)."),
                ("sglang:cache_hit_rate", "The prefix cache hit rate."),
                ("sglang:max_total_num_tokens",
                 "Maximum total number of tokens in the KV cache pool."),
                ("sglang:weight_memory_usage_gb", "Memory used by model weights in GB."),
                ("sglang:kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB."),
                ("sglang:graph_memory_usage_gb", "Memory used by captured device graphs in GB."),
                ("sglang:page_size", "The page size of the KV cache.")):
            m.declare(name, "gauge", help_text)
        m.declare("sglang:startup_time_seconds", "gauge", "Startup time of each phase.")
        for name, help_text in (
                ("sglang:prompt_tokens_total", "Number of prefill tokens processed."),
                ("sglang:generation_tokens_total", "Number of generation tokens processed."),
                ("sglang:cached_tokens_total", "Number of cached prompt tokens."),
                ("sglang:num_requests_total", "Number of requests processed."),
                ("sglang:num_aborted_requests_total", "Number of requests aborted."),
                ("sglang:num_retracted_requests_total", "Number of requests retracted.")):
            m.declare(name, "counter", help_text)
        self.counters = {name: 0.0 for name in ("sglang:prompt_tokens_total",
                                                "sglang:generation_tokens_total",
                                                "sglang:cached_tokens_total",
                                                "sglang:num_requests_total",
                                                "sglang:num_aborted_requests_total")}
        # Scheduler-side counters carry the scheduler's labels (the retraction count is the
        # scheduler's own, read when the page is rendered).
        self.sched_counters: dict[str, float] = {}
        self.histograms = {
            "sglang:time_to_first_token_seconds": Histogram(TTFT_BUCKETS),
            "sglang:inter_token_latency_seconds": Histogram(ITL_BUCKETS),
            "sglang:e2e_request_latency_seconds": Histogram(E2E_BUCKETS),
            "sglang:queue_time_seconds": Histogram(QUEUE_BUCKETS),
        }
        for name in self.histograms:
            m.declare(name, "histogram", f"Histogram of {name.split(':')[1].replace('_', ' ')}.")

    def swa_used_tokens(self) -> int:
        """SWA slots held: each running request keeps its window, which can straddle two
        pages (the span the SWA cap reserves per request)."""
        span = self.ref.kv_pools.sliding_window + PAGE_SIZE
        return sum(min(r.input_len + r.generated, span) for r in self.sched.running)

    def usages(self) -> tuple[float, float]:
        """(full pool, SWA pool) usage; SGLang's token_usage is the larger one."""
        return (self.sched.used_tokens / self.mem.kv_tokens,
                self.swa_used_tokens() / self.mem.pools.swa)

    def paused_reqs(self) -> int:
        """The running requests a pause holds (0 while generating)."""
        return 0 if self.unpaused.is_set() else len(self.sched.running)

    def pause(self, paused: bool) -> None:
        if paused:
            self.unpaused.clear()
        else:
            self.unpaused.set()
            self.wake.set()

    def render_metrics(self) -> str:
        m, t = self.metrics, self.tok_labels
        full_usage, swa_usage = self.usages()
        # Free: the slots no running or prefilling request holds. No prefix cache: nothing
        # to evict.
        available = self.mem.kv_tokens - self.sched.kv_used
        retracted = sum(1 for r in self.sched.waiting if r.retractions)
        # Every scheduler reports, as SGLang does with --enable-metrics-for-all-schedulers.
        for rank in range(self.ref.gpus):
            s = {**self.sched_labels, "tp_rank": str(rank)}
            m.set("sglang:num_running_reqs", s, len(self.sched.running))
            m.set("sglang:num_queue_reqs", s, len(self.sched.waiting))
            m.set("sglang:num_paused_reqs", s, self.paused_reqs())
            m.set("sglang:num_used_tokens", s, self.sched.used_tokens)
            m.set("sglang:token_usage", s, max(full_usage, swa_usage))
            m.set("sglang:full_token_usage", s, full_usage)
            m.set("sglang:swa_token_usage", s, swa_usage)
            m.set("sglang:kv_used_tokens", s, self.sched.used_tokens)
            m.set("sglang:kv_available_tokens", s, available)
            m.set("sglang:kv_evictable_tokens", s, 0)
            m.set("sglang:num_retracted_reqs", s, retracted)
            m.set("sglang:num_retracted_requests_total", s, self.sched.retracted_total)
            for name, value in self.sched_counters.items():
                m.set(name, s, value)
            m.set("sglang:gen_throughput", s, self.last_gen_throughput)
            m.set("sglang:cache_hit_rate", s, 0.0)
            m.set("sglang:max_total_num_tokens", s, self.mem.kv_tokens)
            m.set("sglang:weight_memory_usage_gb", s, self.placement.weights_gib)
            m.set("sglang:kv_cache_memory_usage_gb", s, self.mem.kv_bytes / GIB)
            m.set("sglang:graph_memory_usage_gb", {**s, "phase": "decode"},
                  self.mem.graphs_bytes / GIB)
            m.set("sglang:page_size", s, PAGE_SIZE)
            if self.hicache is not None:
                self.hicache.render(m, s)
        scale = self.args.time_scale
        for phase, seconds in self.placement.startup.phases:
            m.set("sglang:startup_time_seconds", {**t, "phase": phase}, seconds * scale)
        for name, value in self.counters.items():
            m.set(name, t, value)
        for name, hist in self.histograms.items():
            m.set(name, self.sched_labels if name == "sglang:queue_time_seconds" else t, hist)
        return m.render()

    # ------------------------------------------------------------------ serving loop
    def start(self, ranks: list[RankHandle]) -> None:
        self.ranks = ranks
        self.tasks = [asyncio.create_task(self._serve_loop()),
                      asyncio.create_task(self._node_loop())]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _serve_loop(self) -> None:
        scale = self.args.serve_scale
        clock: float | None = None  # when the last step should have ended; None after idle
        while True:
            if not self.unpaused.is_set():
                await self.unpaused.wait()
                clock = None
            if not self.sched.running:
                # Idle: the next batch forms as the model forms one, even where its first
                # arrivals came before this loop saw the server go idle.
                idle_since = time.monotonic() if clock is None else clock
                if not self.sched.waiting:
                    self.wake.clear()
                    await self.wake.wait()
                    # Aborted before it was served, or paused meanwhile (the arrival waits).
                    if not self.sched.waiting or not self.unpaused.is_set():
                        continue
                # Served as a burst sent all at once: its batch window counts from its first
                # arrival, not from when the client finished putting it on the wire.
                first = max(idle_since, min(r.arrival for r in self.sched.waiting))
                clock = first + BATCH_WINDOW_S * scale
                await self._gather_burst(scale, clock)
                if not self.unpaused.is_set():  # paused while gathering: nothing admitted
                    continue
                burst = True
            else:
                burst = False
            now = time.monotonic()
            step = self.sched.next_step(now)
            if step is None:
                clock = None
                self.wake.clear()
                await self.wake.wait()
                continue
            # Steps follow their planned ends, so event-loop lateness does not add up into
            # slower decoding; a loop that fell far behind starts afresh from now. A burst's
            # batch keeps its plan (gathering it took no node time) unless that plan has
            # already ended.
            if clock is None:
                start = now
            elif burst:
                start = max(clock, now - step.duration * scale)
            else:
                start = max(clock, now - MAX_LAG_S)
            end = start + step.duration * scale
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            clock = end
            self.busy_s += step.duration * scale
            if self.engram is not None:
                self.host_bytes_read += self.engram.add(step.tokens)
            running_before = len(self.sched.running)
            for req in self.sched.finish(step, end):
                queue = self.streams.get(req)
                if queue is not None:
                    queue.put_nowait(end)
            self.log_step(step, running_before)

    def log_step(self, step: Step, running_before: int) -> None:
        """SGLang's batch lines: every prefill batch, every DECODE_LOG_INTERVAL-th decode."""
        if step.kind == "decode":
            self._log_decode(step.tokens)
            return
        full_usage, swa_usage = self.usages()
        scale = self.args.serve_scale
        log(f"Prefill batch, #new-seq: {len(step.requests)}, #new-token: {step.tokens}, "
            f"#cached-token: 0, full token usage: {full_usage:.2f}, "
            f"swa token usage: {swa_usage:.2f}, #running-req: {running_before}, "
            f"#queue-req: {len(self.sched.waiting)}, #pending-token: 0, "
            f"cuda graph: False, input throughput (token/s): "
            f"{step.tokens / max(1e-9, step.duration * scale):.2f}", 0)

    async def _gather_burst(self, scale: float, start: float) -> None:
        """After idling, gather arrivals until they pause (BURST_PAUSE_S, or the model's batch
        window if longer), so a burst sent together is prefilled together, as the model has
        it. The batch is served as of ``start`` (its first arrival plus the window), so the
        gathering costs nothing until the batch's prefill would have ended: it stops there,
        never delaying the batch past its plan."""
        pause = max(BATCH_WINDOW_S * scale, BURST_PAUSE_S)
        while True:
            seen = len(self.sched.waiting)
            tokens = min(sum(r.held for r in self.sched.waiting), PREFILL_TOKEN_BUDGET)
            limit = start + self.sched.service.prefill_time_s(tokens) * scale - BURST_MARGIN_S
            left = limit - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(pause, left))
            if len(self.sched.waiting) == seen:
                return

    def _log_decode(self, batch: int) -> None:
        self.decode_steps += 1
        self.gen_tokens_since_log += batch
        if self.decode_steps % DECODE_LOG_INTERVAL:
            return
        now = time.monotonic()
        self.last_gen_throughput = self.gen_tokens_since_log / max(1e-9, now - self.gen_log_started)
        self.gen_tokens_since_log = 0
        self.gen_log_started = now
        full_usage, swa_usage = self.usages()
        log(f"Decode batch, #running-req: {batch}, #full token: {self.sched.used_tokens}, "
            f"full token usage: {full_usage:.2f}, #swa token: {self.swa_used_tokens()}, "
            f"swa token usage: {swa_usage:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "
            f"#queue-req: {len(self.sched.waiting)}", 0)

    async def _node_loop(self) -> None:
        """Hand utilisation and PCIe traffic to the ranks twice a second; log the Engram
        statistics every few seconds."""
        period = 0.5
        ticks = 0
        while True:
            await asyncio.sleep(period)
            ticks += 1
            if self.logs_engram_stats and self.engram is not None \
                    and ticks % round(LOG_INTERVAL_S / period) == 0:
                for line in self.engram.lines():
                    log(line, 0)
            util = min(100.0, 100.0 * self.busy_s / period)
            rx = self.host_bytes_read / period / len(self.ranks)
            self.busy_s = 0.0
            self.host_bytes_read = 0.0
            for r in self.ranks:
                r.util, r.pcie_rx = util, rx
                with contextlib.suppress(Exception):
                    r.push()  # a dead rank is the supervisor's news, not ours

    # ------------------------------------------------------------------ requests
    async def generate(self, input_len: int, max_new: int, rid: str | None = None,
                       arrived: float | None = None) -> AsyncIterator[tuple[int, float]]:
        """Yields (tokens generated so far, time) per token; aborts the request if cancelled.

        ``arrived``: when the HTTP request reached the server (the generator itself only
        starts running once the response starts streaming)."""
        arrived = time.monotonic() if arrived is None else arrived
        req = Request(rid or f"{next(self.ids)}", input_len, max_new, arrived)
        self.sched.submit(req)
        queue: asyncio.Queue[float | None] = asyncio.Queue()
        self.streams[req] = queue
        self.wake.set()
        self.on_submit(req)
        last = arrived
        finished = False
        n = 0
        first_sent = first_ready = None
        try:
            while n < max_new:
                t = await queue.get()
                if t is None:
                    break
                n += 1  # one queue item per token; req.generated may already be ahead
                self.on_token(req, n, t, last)
                last = t
                if n == 1:  # about to be written: no client can have it before this
                    first_ready = time.monotonic()
                yield n, t
                if n == 1:  # resumed once the chunk was handed to the socket: sent
                    first_sent = time.monotonic()
            finished = True
            # Ground truth for testing clients: when the request arrived, when its first and
            # last tokens left, on the machine's monotonic clock (shared by its processes);
            # the model's planned times beside them. The first token's write lies between
            # first_token_ready and first_token (a busy machine may resume this coroutine
            # late after it, while the client has already read it).
            self.done.append({"id": req.rid, "arrival": arrived, "first_token": first_sent,
                              "first_token_ready": first_ready,
                              "finished": time.monotonic(), "planned_first_token":
                              req.first_token_at, "planned_finished": req.finished_at,
                              "input_len": input_len, "output_len": n})
            self.on_finish(req, n, last, time.monotonic())
        finally:
            self.streams.pop(req, None)
            if not finished:
                self.sched.abort(req)
                self.on_abort(req)

    # ------------------------------------------------------------------ what requests record
    # In SGLang's metric names; another dialect overrides these four.
    def on_submit(self, req: Request) -> None:
        self.counters["sglang:prompt_tokens_total"] += req.input_len
        if self.hicache is not None:  # its load-back crosses the GPUs' links as Engram's do
            self.host_bytes_read += self.hicache.load_back(req.input_len)

    def on_token(self, req: Request, n: int, t: float, last: float) -> None:
        """The ``n``-th token of ``req`` left at ``t``; the one before at ``last`` (the
        arrival, for the first)."""
        if n == 1:
            self.histograms["sglang:time_to_first_token_seconds"].observe(t - req.arrival)
            # Service times run scaled by --serve-scale; so does the prefill here.
            prefill = (self.placement.service.prefill_time_s(req.input_len)
                       * self.args.serve_scale)
            self.histograms["sglang:queue_time_seconds"].observe(
                max(0.0, t - req.arrival - prefill))
        else:
            itl = self.histograms["sglang:inter_token_latency_seconds"]
            itl.observe_interval(t - last, 1)
        self.counters["sglang:generation_tokens_total"] += 1

    def on_finish(self, req: Request, n: int, last: float, now: float) -> None:
        """``req`` wrote its ``n`` tokens, the last at ``last``; its stream ends ``now``."""
        e2e = self.histograms["sglang:e2e_request_latency_seconds"]
        e2e.observe(now - req.arrival)
        self.counters["sglang:num_requests_total"] += 1
        if self.hicache is not None:
            self.hicache.back_up(req.input_len + n)

    def on_abort(self, req: Request) -> None:
        self.counters["sglang:num_aborted_requests_total"] += 1

    def check_length(self, input_len: int, max_new: int) -> None:
        """ValueError (HTTP 400) for a request past the context; see _check_length."""
        _check_length(input_len, max_new)

    def engram_env(self) -> dict[str, str]:
        """The placement's Engram switches, with the tables' layout it was started with."""
        # The device placement's switch is off: said, so a reader need not guess.
        env = dict(self.placement.env) or {"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "0"}
        if "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT" in env:
            env["SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT"] = LAYOUT_WORDS[
                getattr(self.args, "engram_layout", None) or "shared"]
        return env

    def server_info(self) -> dict[str, Any]:
        a = self.args
        mem = self.mem
        # Every server argument as a flat key, as SGLang returns them. No engram_config: the
        # V4.1 preview build this plays takes its Engram placement from the environment.
        args = server_args.build(self.ref, self.placement, mem, a)
        return {
            **args,
            "status": "ready" if self.ready else "starting",
            "max_total_num_tokens": mem.kv_tokens,
            "max_req_input_len": mem.kv_tokens - 1,
            "internal_states": [{
                **args,
                "use_mla_backend": True,
                "last_gen_throughput": self.last_gen_throughput,
                "memory_usage": {"weight": self.placement.weights_gib,
                                 "kvcache": round(mem.kv_bytes / GIB, 3),
                                 "token_capacity": mem.kv_tokens,
                                 "graph": round(mem.graphs_bytes / GIB, 3)},
                "effective_max_running_requests_per_dp":
                    self.placement.service.max_running_requests,
            }],
            "version": self.version,
            # Not in SGLang: tells tools this server is the simulated node, and its time scale;
            # served on loopback, where its node's folder is (`attach` reads the node there).
            "simulated": {"placement": self.placement.name, "time_scale": a.time_scale,
                          "serve_scale": a.serve_scale, "env": self.engram_env(),
                          **({"node_dir": str(self.node_dir)}
                             if self.node_dir is not None and _loopback(a.host)
                             and not a.hide_node else {})},
        }


def _loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _check_length(input_len: int, max_new: int) -> None:
    # SGLang's tokenizer manager refuses this before scheduling (400). Here it must be checked
    # up front too: core.generate() submits lazily, when a streaming response has already
    # sent its 200, so the scheduler's own refusal would surface as a 500 or a cut stream.
    total = input_len + max_new
    if total >= CONTEXT_LEN:
        raise ValueError(
            f"Requested token count exceeds the model's maximum context length of "
            f"{CONTEXT_LEN} tokens. You requested a total of {total} tokens: {input_len} "
            f"tokens from the input messages and {max_new} tokens for the completion. Please "
            f"reduce the number of tokens in the input messages or the completion to fit "
            f"within the limit.")
