"""A steady synthetic load: an async httpx streaming client against /v1/completions.

Closed loop: ``concurrency`` requests in flight at all times. Per request it measures TTFT,
inter-token gaps, TPOT and end-to-end latency with sglang.bench_serving's definitions
(TTFT = first non-empty chunk; TPOT = (latency - TTFT) / (output tokens - 1)). Failures are
counted and kept, never dropped silently. Prompts are words: the simulated node and a real
server with a word-level tokenizer both count one word as one token.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from dataclasses import dataclass, field

import httpx

PROMPT_WORDS = ("engram", "rows", "live", "in", "host", "memory", "and", "the", "gpu", "reads")


@dataclass(frozen=True)
class RequestRecord:
    started: float  # monotonic
    input_len: int
    output_len: int
    ttft: float
    e2e: float
    itls: tuple[float, ...]

    @property
    def tpot(self) -> float | None:
        if self.output_len <= 1:
            return None
        return (self.e2e - self.ttft) / (self.output_len - 1)


@dataclass
class LoadStats:
    sent: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    last_error: str = ""
    recent: deque[RequestRecord] = field(default_factory=lambda: deque(maxlen=2048))


class ClosedLoopLoad:
    def __init__(self, base_url: str, *, concurrency: int = 8, input_len: int = 512,
                 output_len: int = 128, range_ratio: float = 0.5, seed: int = 1,
                 model: str | None = None, api_key: str | None = None,
                 timeout: float = 600.0) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.input_len = input_len
        self.output_len = output_len
        self.range_ratio = range_ratio
        self.rng = random.Random(seed)
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.stats = LoadStats()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None

    def _draw(self, full: int) -> int:
        return self.rng.randint(max(1, int(full * self.range_ratio)), full)

    async def start(self) -> None:
        limits = httpx.Limits(max_connections=self.concurrency + 2)
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                         timeout=self.timeout, limits=limits)
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
                self.stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
                await asyncio.sleep(0.5)  # a dead server must not turn this into a busy loop
                continue
            self.stats.completed += 1
            self.stats.output_tokens += record.output_len
            self.stats.recent.append(record)

    async def one(self, input_len: int, output_len: int) -> RequestRecord:
        assert self._client is not None, "start() first"
        prompt = " ".join(PROMPT_WORDS[i % len(PROMPT_WORDS)] for i in range(input_len))
        body = {"prompt": prompt, "max_tokens": output_len, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        if self.model:
            body["model"] = self.model
        started = time.perf_counter()
        first: float | None = None
        last = started
        itls: list[float] = []
        tokens = 0
        async with self._client.stream("POST", "/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode("utf-8", "replace")[:200]
                raise RuntimeError(f"HTTP {resp.status_code}: {text}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise RuntimeError(f"stream error: {chunk['error']}")
                usage = chunk.get("usage")
                if usage and not chunk.get("choices"):
                    tokens = int(usage.get("completion_tokens", tokens))
                    continue
                choices = chunk.get("choices") or [{}]
                if not choices[0].get("text"):
                    continue
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    itls.append(now - last)
                last = now
                tokens = max(tokens, len(itls) + 1)
        if first is None:
            raise RuntimeError("the stream ended without a token")
        end = time.perf_counter()
        return RequestRecord(time.monotonic() - (end - started), input_len, tokens,
                             first - started, end - started, tuple(itls))


async def run_requests(base_url: str, lengths: list[tuple[int, int]], concurrency: int,
                       *, api_key: str | None = None) -> tuple[list[RequestRecord], float, int]:
    """Send a fixed list of (input, output) requests, ``concurrency`` at a time (closed loop).

    Returns the records, the duration from the first send to the last completion, and the
    number of failed requests.
    """
    load = ClosedLoopLoad(base_url, concurrency=concurrency, api_key=api_key)
    queue: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
    for item in lengths:
        queue.put_nowait(item)
    records: list[RequestRecord] = []
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while not queue.empty():
            n_in, n_out = queue.get_nowait()
            try:
                records.append(await load.one(n_in, n_out))
            except Exception as exc:  # counted and kept, never dropped
                failed += 1
                load.stats.last_error = f"{type(exc).__name__}: {exc}"[:300]

    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=load.base_url, headers=load.headers,
                                 timeout=load.timeout, limits=limits) as client:
        load._client = client
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        duration = time.perf_counter() - started
        load._client = None
    return records, duration, failed
