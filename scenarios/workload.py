"""The workload driver: an async httpx streaming client for SGLang's /v1/completions and
/generate, with sglang.bench_serving's definitions.

Per request: TTFT = time to the first non-empty chunk; inter-token latencies = the gaps
between chunks; TPOT = (latency - TTFT) / (output tokens - 1); end-to-end latency. Output
and request throughput are taken over the measured duration. Failures are counted and kept
with their message, never dropped. Prompts are words: the simulated node and the tiny CPU
model's word-level tokenizer both count one word as one token.

- ClosedLoopLoad: a steady load for the dashboard (runs until stopped).
- run_workload(): a measured run for benchmarks: closed loop (fixed concurrency) or open
  loop (Poisson arrivals at a rate), per level, with excluded warm-up requests and a seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from collectors.pages import bearer
from scenarios.load_window import LoadWindow, RequestWindow

if TYPE_CHECKING:
    # httpx where requests are sent: the dashboard's side of the load (LoadProcess, its
    # LoadStats) never sends one, and httpx costs that process about 7 MiB and 0.1 s.
    import httpx

_WIRE_EVENTS = ("connection.connect_tcp.started", "http11.send_request_headers.started")

# The simulated node's own request field: the prompt's length in tokens (count_prompts).
PROMPT_TOKENS_FIELD = "sim_prompt_tokens"
PROMPT_WORDS = ("engram", "rows", "live", "in", "host", "memory", "and", "the", "gpu", "reads")


@dataclass(frozen=True)
class RequestRecord:
    started: float  # monotonic, when the request was sent
    input_len: int
    output_len: int
    ttft: float
    e2e: float
    itls: tuple[float, ...]
    rid: str = ""  # the server's request id, when its chunks carry one
    level: int = 0  # which level of a run_workload() it belongs to

    @property
    def tpot(self) -> float | None:
        if self.output_len <= 1:
            return None
        return (self.e2e - self.ttft) / (self.output_len - 1)


class RequestFailed(Exception):
    """A request that did not complete: ``kind`` "failed" (an error, no answer in time) or
    "incomplete" (the stream ended, or was cut, before its end); ``received`` tokens came."""

    def __init__(self, reason: str, received: int = 0, kind: str = "failed") -> None:
        super().__init__(reason)
        self.received = received
        self.kind = kind


@dataclass(frozen=True)
class FailedRequest:
    """A request left out of the latency and throughput figures, and why."""

    started: float  # monotonic
    input_len: int
    output_len: int  # asked for
    received: int  # tokens that came before it failed
    kind: str  # "failed" or "incomplete"
    reason: str
    level: int = 0


def prompt(words: int) -> str:
    return " ".join(PROMPT_WORDS[i % len(PROMPT_WORDS)] for i in range(words))


async def stream_request(client: httpx.AsyncClient, input_len: int, output_len: int, *,
                         endpoint: str = "/v1/completions", model: str | None = None,
                         level: int = 0, deadline_s: float | None = None,
                         count_prompt: bool = False) -> RequestRecord:
    """One streaming request, done within ``deadline_s`` in all (a per-read timeout never
    ends a stream that drips); raises RequestFailed saying why when it does not complete."""
    import httpx
    got = _Progress()
    try:
        async with asyncio.timeout(deadline_s):
            return await _stream(client, input_len, output_len, endpoint, model, level, got,
                                 count_prompt)
    except TimeoutError:
        raise RequestFailed(f"no complete answer within {deadline_s:g} s "
                            f"({got.tokens} of {output_len} tokens came)", got.tokens) from None
    except httpx.HTTPError as exc:  # cut mid-stream, refused, a read timeout
        text = str(exc).strip() or type(exc).__name__
        raise RequestFailed(f"{type(exc).__name__}: {text} ({got.tokens} of {output_len} "
                            "tokens came)", got.tokens,
                            "incomplete" if got.tokens else "failed") from None


@dataclass
class _Progress:
    tokens: int = 0


async def _stream(client: httpx.AsyncClient, input_len: int, output_len: int, endpoint: str,
                  model: str | None, level: int, got: _Progress,
                  count_prompt: bool = False) -> RequestRecord:
    text = prompt(1 if count_prompt else input_len)
    if endpoint == "/generate":
        body: dict[str, object] = {"text": text, "stream": True, "sampling_params": {
            "max_new_tokens": output_len, "ignore_eos": True}}
    else:
        body = {"prompt": text, "max_tokens": output_len, "stream": True,
                "ignore_eos": True, "stream_options": {"include_usage": True}}
        if model:
            body["model"] = model
    if count_prompt:
        body[PROMPT_TOKENS_FIELD] = input_len
    # "Sent" is when the request starts onto the wire (its connection opening, or its
    # headers going out on a pooled one): httpx's own request building before that is
    # client overhead, not latency, and would add to every TTFT.
    wire: list[float] = []

    async def trace(name: str, info: dict[str, object]) -> None:
        if not wire and name in _WIRE_EVENTS:
            wire.append(time.perf_counter())

    called = time.perf_counter()
    first: float | None = None
    last = end = called
    itls: list[float] = []
    tokens = 0
    rid = ""
    done = False
    chunks = 0  # chunks with text (completions)
    async with client.stream("POST", endpoint, json=body, extensions={"trace": trace}) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode("utf-8", "replace")[:200]
            raise RequestFailed(f"HTTP {resp.status_code}: {text}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            # Latency ends at the last event, [DONE] included (bench_serving's definition);
            # the stream is still read to its end so the connection goes back to the pool.
            now = end = time.perf_counter()
            if payload == "[DONE]":
                done = True
                continue
            try:
                chunk = json.loads(payload)
            except ValueError:
                raise RequestFailed(f"not JSON in the stream after {tokens} tokens: "
                                    f"{payload[:80]!r}", tokens, "incomplete") from None
            if "error" in chunk:
                raise RequestFailed(f"stream error: {chunk['error']}", tokens,
                                    "incomplete" if tokens else "failed")
            if endpoint == "/generate":
                meta = chunk.get("meta_info") or {}
                rid = rid or str(meta.get("id", ""))
                count = int(meta.get("completion_tokens", tokens))
                if count <= tokens:
                    continue
                tokens = count
            else:
                rid = rid or str(chunk.get("id", ""))
                usage = chunk.get("usage")
                if usage and not chunk.get("choices"):
                    tokens = int(usage.get("completion_tokens", tokens))
                    continue
                choices = chunk.get("choices") or [{}]
                if not choices[0].get("text"):
                    continue
                # A chunk is at least one token; the usage chunk, if any, has the count.
                chunks += 1
                tokens = max(tokens, chunks)
            if first is None:
                first = now
            else:
                itls.append(now - last)
            last = now
            got.tokens = tokens
    if not done:
        # A stream that ends without [DONE] was cut short, however cleanly: counting it would
        # put a quarter-length request into TPOT and tok/s as if it were whole.
        raise RequestFailed(f"the stream ended after {tokens} of {output_len} tokens without "
                            "[DONE]", tokens, "incomplete")
    if first is None:
        raise RequestFailed("the stream ended without a token")
    sent = wire[0] if wire else called
    # started is on the monotonic clock, the one the simulated server's ground truth and
    # the supervisor use; durations stay on perf_counter.
    started = time.monotonic() - (time.perf_counter() - sent)
    return RequestRecord(started, input_len, tokens, first - sent, end - sent, tuple(itls),
                         rid, level)


# --------------------------------------------------------------------------- steady load


@dataclass
class LoadStats:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    good: int = 0  # completed within every per-request bound (the SLOs): goodput's count
    last_error: str = ""
    # The last window's requests (scenarios.load_window), where the load keeps them.
    window: LoadWindow | None = None
    recent: deque[RequestRecord] = field(default_factory=lambda: deque(maxlen=2048))


class ClosedLoopLoad:
    """``concurrency`` requests in flight at all times, until stopped."""

    def __init__(self, base_url: str, *, concurrency: int = 8, input_len: int = 512,
                 output_len: int = 128, range_ratio: float = 0.5, seed: int = 1,
                 model: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, request_timeout_s: float = 300.0,
                 bounds: dict[str, float] | None = None, count_prompt: bool = False,
                 window_s: float | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.input_len = input_len
        self.output_len = output_len
        self.range_ratio = range_ratio
        self.rng = random.Random(seed)
        self.model = model
        self.headers = bearer(api_key)
        self.timeout = timeout  # per read
        self.request_timeout_s = request_timeout_s  # per request, in all
        self.stats = LoadStats()
        # Per-request latency bounds in seconds ("ttft", "tpot", "e2e"): a completed request
        # within all of them counts as good (stats.good), as goodput counts it.
        self.bounds = dict(bounds or {})
        self.count_prompt = count_prompt  # a simulated server's prompt length as a number
        # The requests of the last window_s seconds, for the intervals of a run measured
        # once (scenarios.load_window); None: not kept.
        self.window_s = window_s
        self.window: RequestWindow | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None

    def _draw(self, full: int) -> int:
        return self.rng.randint(max(1, int(full * self.range_ratio)), full)

    async def start(self) -> None:
        import httpx
        limits = httpx.Limits(max_connections=self.concurrency + 2)
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                         timeout=self.timeout, limits=limits)
        if self.window_s is not None:
            self.window = RequestWindow(self.window_s, time.monotonic(), slo=bool(self.bounds))
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.concurrency)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _worker(self) -> None:
        while True:
            n_in, n_out = self._draw(self.input_len), self._draw(self.output_len)
            self.stats.sent += 1
            try:
                record = await self.one(n_in, n_out)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # counted, shown, and the loop goes on
                self.stats.failed += 1
                self.stats.last_error = (str(exc) if isinstance(exc, RequestFailed)
                                         else f"{type(exc).__name__}: {exc}")[:300]
                await asyncio.sleep(0.5)  # a dead server must not turn this into a busy loop
                continue
            self.stats.completed += 1
            self.stats.output_tokens += record.output_len
            good = bool(self.bounds) and within(record, self.bounds)
            self.stats.good += good
            self.stats.recent.append(record)
            if self.window is not None:
                self.window.add(time.monotonic(), record.tpot, record.output_len, good)

    async def one(self, input_len: int, output_len: int) -> RequestRecord:
        assert self._client is not None, "start() first"
        return await stream_request(self._client, input_len, output_len, model=self.model,
                                    deadline_s=self.request_timeout_s,
                                    count_prompt=self.count_prompt)


def within(record: RequestRecord, bounds: dict[str, float]) -> bool:
    """The request met every bound (a one-token request has no TPOT to break)."""
    values = {"ttft": record.ttft, "tpot": record.tpot, "e2e": record.e2e}
    return all((value := values.get(k)) is None or value <= v for k, v in bounds.items())


# --------------------------------------------------------------------------- measured runs


@dataclass(frozen=True)
class Level:
    requests: int
    concurrency: int | None = None  # closed loop
    rate: float | None = None  # open loop: requests per second, Poisson arrivals


@dataclass(frozen=True)
class WorkloadSpec:
    levels: tuple[Level, ...]
    input_len: int = 1024
    output_len: int = 192
    range_ratio: float = 1.0  # lengths drawn from [len * ratio, len], as bench_serving
    seed: int = 1
    warmup_requests: int = 1
    endpoint: str = "/v1/completions"
    model: str | None = None
    request_timeout_s: float = 300.0  # each request's total deadline
    # Prompts as a token count, not as text: only the simulated node takes this (a long
    # context would otherwise travel as hundreds of kilobytes of words per request).
    count_prompts: bool = False

    def lengths(self, count: int, rng: random.Random) -> list[tuple[int, int]]:
        def draw(full: int) -> int:
            return rng.randint(max(1, int(full * self.range_ratio)), full)
        return [(draw(self.input_len), draw(self.output_len)) for _ in range(count)]


@dataclass
class DriverResult:
    records: list[RequestRecord]
    failed: int
    errors: list[str]
    duration_s: float  # summed over levels, first send to last completion
    driver_cpu_s: float  # the driver's own CPU time: it must not be the bottleneck
    # Every request left out of the figures, with why (failed + incomplete = ``failed``).
    failures: list[FailedRequest] = field(default_factory=list)
    level_durations: list[float] = field(default_factory=list)  # seconds, per level

    @property
    def incomplete(self) -> int:
        return sum(1 for f in self.failures if f.kind == "incomplete")

    @property
    def output_tokens(self) -> int:
        return sum(r.output_len for r in self.records)

    def mean(self, attr: str) -> float | None:
        values = [v for v in (getattr(r, attr) for r in self.records) if v is not None]
        return sum(values) / len(values) if values else None

    def quantile(self, attr: str, q: float) -> float | None:
        values = sorted(v for v in (getattr(r, attr) for r in self.records) if v is not None)
        if not values:
            return None
        return values[min(len(values) - 1, int(q * len(values)))]

    @property
    def output_tok_s(self) -> float | None:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else None

    @property
    def request_per_s(self) -> float | None:
        return len(self.records) / self.duration_s if self.duration_s > 0 else None


async def run_workload(base_url: str, spec: WorkloadSpec, *, api_key: str | None = None,
                       timeout: float = 600.0,
                       lengths: list[list[tuple[int, int]]] | None = None,
                       on_level: Callable[[int, str], Awaitable[None]] | None = None
                       ) -> DriverResult:
    """Warm up (excluded), then each level in turn. Lengths are drawn from ``spec.seed``
    unless given per level. ``on_level(index, "start" | "end")`` is awaited around each
    level (a bench reads the server's counters there); ``level_durations`` says each
    level's length."""
    import httpx
    rng = random.Random(spec.seed)
    headers = bearer(api_key)
    biggest = max((lv.concurrency or 64) for lv in spec.levels)
    # Keep every connection a level opened (httpx keeps 20 by default): a level above 20
    # streams would otherwise reconnect on each request past the twentieth.
    limits = httpx.Limits(max_connections=biggest + 4, max_keepalive_connections=biggest + 4)
    cpu0 = time.process_time()
    result = DriverResult([], 0, [], 0.0, 0.0)
    async with httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                 timeout=timeout, limits=limits) as client:

        async def send(n_in: int, n_out: int, level: int) -> None:
            started = time.monotonic()
            try:
                result.records.append(await stream_request(
                    client, n_in, n_out, endpoint=spec.endpoint, model=spec.model, level=level,
                    deadline_s=spec.request_timeout_s, count_prompt=spec.count_prompts))
            except Exception as exc:  # counted and kept, never dropped
                failure = _failure(exc, started, n_in, n_out, level)
                result.failures.append(failure)
                result.failed += 1
                if len(result.errors) < 50:
                    result.errors.append(f"{failure.kind}: {failure.reason}"[:300])

        for n_in, n_out in spec.lengths(spec.warmup_requests, random.Random(spec.seed + 1)):
            try:  # warm-up: measured nowhere, but a failure is still said
                await stream_request(client, n_in, n_out, endpoint=spec.endpoint,
                                     model=spec.model, deadline_s=spec.request_timeout_s,
                                     count_prompt=spec.count_prompts)
            except Exception as exc:
                result.errors.append(f"warm-up: {_failure(exc, 0.0, n_in, n_out, 0).reason}"
                                     [:300])
        for index, level in enumerate(spec.levels):
            todo = deque(lengths[index] if lengths else spec.lengths(level.requests, rng))
            if level.rate is None:
                await _open_connections(client, level.concurrency or 1)
            if on_level is not None:
                await on_level(index, "start")
            started = time.perf_counter()
            if level.rate is not None:
                tasks = []
                arrivals = random.Random(spec.seed * 1000 + index)
                while todo:
                    n_in, n_out = todo.popleft()
                    tasks.append(asyncio.create_task(send(n_in, n_out, index)))
                    if todo:
                        await asyncio.sleep(arrivals.expovariate(level.rate))
                await asyncio.gather(*tasks)
            else:
                async def worker(queue: deque[tuple[int, int]], level_index: int) -> None:
                    while queue:
                        n_in, n_out = queue.popleft()
                        await send(n_in, n_out, level_index)
                await asyncio.gather(*(worker(todo, index)
                                       for _ in range(level.concurrency or 1)))
            took = time.perf_counter() - started
            result.duration_s += took
            result.level_durations.append(took)
            if on_level is not None:
                await on_level(index, "end")
    result.driver_cpu_s = time.process_time() - cpu0
    return result


async def _open_connections(client: httpx.AsyncClient, streams: int) -> None:
    """Open a closed-loop level's connections before it starts, so its first requests go out
    together on open connections: opening a dozen as the level begins spreads its burst over
    tens of milliseconds (more on a busy machine), which a server may serve as two batches.
    Any answer will do (a kept-alive connection is all that is wanted); none is measured."""
    import httpx

    async def touch() -> None:
        with contextlib.suppress(httpx.HTTPError):
            await client.get("/health", timeout=5.0)
    await asyncio.gather(*(touch() for _ in range(streams)))


def _failure(exc: Exception, started: float, n_in: int, n_out: int,
             level: int) -> FailedRequest:
    if isinstance(exc, RequestFailed):
        return FailedRequest(started, n_in, n_out, exc.received, exc.kind, str(exc), level)
    return FailedRequest(started, n_in, n_out, 0, "failed", f"{type(exc).__name__}: {exc}",
                         level)


async def run_requests(base_url: str, lengths: list[tuple[int, int]], concurrency: int,
                       *, api_key: str | None = None) -> tuple[list[RequestRecord], float, int]:
    """A fixed list of (input, output) requests, ``concurrency`` at a time, no warm-up."""
    spec = WorkloadSpec(levels=(Level(len(lengths), concurrency=concurrency),),
                        warmup_requests=0)
    res = await run_workload(base_url, spec, api_key=api_key, lengths=[lengths])
    return res.records, res.duration_s, res.failed
