"""A misbehaving Prometheus for the fleet's fault tests: its HTTP API (/api/v1/query and
/api/v1/query_range) on 127.0.0.1, on raw asyncio streams on a thread of the test's process,
as badserver.py serves SGLang. ``BadProm.mode`` says how it answers and can change while it
runs; healthy answers describe ``nodes`` nodes as dcgm-exporter, node-exporter and SGLang
label them behind a scrape config that sets `node` and `placement`.

Modes:
  healthy        every query answered as a real Prometheus would (vector, or matrix for a
                 range query)
  slow           nothing for ``slow_s`` seconds (past the client's deadline), then the answer
  slow-one       the gpu query alone slow; the others an HTTP 503 at once
  stopped        nothing listens: connection refused (``stop_listening``/``listen``)
  html           a proxy's HTML error page with HTTP 200
  503            HTTP 503 with a text body
  body-list | no-status | refused
                 the answer a JSON list, an object without `status`, or Prometheus's own
                 refusal (HTTP 400, status "error", errorType "bad_data")
  data-null | data-list | data-str | data-empty | result-dict | result-odd
                 `data` null, a list, a string, `[]`, `result` a dict, `result` items that
                 are not samples (strings, numbers, `metric` a list, label values numbers,
                 `value` short or a dict)
  value:X        node 0's every value is X, JSON text put in as it is ("NaN", "+Inf", "1e308",
                 1e308, -1e300, "garbage", a 400-digit integer, null ...), in its history too:
                 the others healthy
  max            node 0's every value the top of its field's plausible range (history too)
  gpu-label:X    node 0's third GPU labelled gpu=X (a JSON string) beside "0", "1" and "3"
  inject         node and placement labels holding terminal controls (OSC title, CSI, C1)
  deep           100,000-deep nested JSON
  huge           an answer past the client's 32 MiB bound
  range:X        healthy instant answers; a range query's every value is X (JSON text): a
                 node's history (range:max: each value the top of its field's range)
  range-times    a range query's points at times nobody asked for (1e308, -1, "x", null)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from collectors.prom_answer import RANGES
from collectors.prometheus import GPU_FIELDS, HOST_FIELDS

GPUS = 4
MIB = 1024 * 1024
GIB = 1024 * MIB
INJECTED = ("\x1b]0;pwned\x07", "\x1b[2J\x1b[31m", "\x9b31m\x85\x9d", "\r\n\t\x7f\x00")
DEEP = 100_000
HUGE_BYTES = 33 * MIB


def _node_name(i: int, mode: str) -> str:
    if mode == "inject":
        return f"evil-{i}{INJECTED[i % len(INJECTED)]}"
    return f"node-{i:04d}"


@functools.lru_cache(maxsize=32)
def healthy_series(nodes: int, key: str, mode: str = "healthy"
                   ) -> list[tuple[dict[str, str], Any]]:
    """(labels, value) of one query's answer for ``nodes`` healthy nodes (the same list for
    the same arguments: never changed by its callers)."""
    out: list[tuple[dict[str, str], Any]] = []
    for i in range(nodes):
        node = _node_name(i, mode)
        placement = "device" if i % 2 == 0 else "host"
        if mode == "inject":
            placement = "host\x1b]0;title\x07\x1b[?1049h"
        base = {"node": node, "placement": placement}
        host = f"10.0.{i // 256}.{i % 256}" + ("\x1b]0;x\x07\n" if mode == "inject" else "")
        if key == "gpu":
            for g in range(GPUS):
                gpu = {**base, "gpu": str(g), "modelName": "NVIDIA B200",
                       "instance": f"{host}:9400"}
                used = 120_000 + 100 * g + i
                for name, v in (("DCGM_FI_DEV_FB_USED", used),
                                ("DCGM_FI_DEV_FB_FREE", 183_000 - used),
                                ("DCGM_FI_DEV_FB_RESERVED", 500),
                                ("DCGM_FI_DEV_GPU_UTIL", 87), ("DCGM_FI_DEV_POWER_USAGE", 712.5)):
                    out.append(({**gpu, "__name__": name}, v))
        elif key == "host":
            inst = {**base, "instance": f"{host}:9100"}
            for name, v in (("node_memory_MemTotal_bytes", 2048 * GIB),
                            ("node_memory_MemAvailable_bytes", 1500 * GIB),
                            ("node_memory_Shmem_bytes", 190 * GIB if i % 2 else 2 * GIB)):
                out.append(({**inst, "__name__": name}, v))
        elif key == "server":
            inst = {**base, "instance": f"{host}:30000"}
            for name, v in (("sglang:token_usage", 0.42), ("sglang:num_running_reqs", 12),
                            ("sglang:max_total_num_tokens", 11_840_000),
                            ("sglang:weight_memory_usage_gb", 72.2)):
                out.append(({**inst, "__name__": name}, v))
        elif key == "latency":
            for figure, v in (("ttft_p50", 0.35), ("ttft_p99", 1.2), ("tpot_p50", 0.026),
                              ("tpot_p99", 0.04), ("output_tok_s", 224.0)):
                out.append(({**base, "instance": f"{host}:30000", "figure": figure}, v))
        elif key == "up":
            for job, port in (("dcgm-exporter", 9400), ("node-exporter", 9100),
                              ("sglang", 30000)):
                out.append(({**base, "job": job,
                             "instance": f"{host}:{port}"}, 1))
    return out


def _flavour(mode: str) -> str:
    """The healthy series a mode starts from: the injected labels, or the plain ones."""
    return "inject" if mode == "inject" else "healthy"


def top_of(labels: dict[str, str]) -> str:
    """The top of the plausible range of the figure a series gives, as JSON text."""
    name = labels.get("__name__", "")
    field = GPU_FIELDS.get(name) or HOST_FIELDS.get(name) or labels.get("figure") \
        or name.split(":", 1)[-1]
    return json.dumps(f"{RANGES.get(field, (0, 1))[1]:.17g}")


def matcher(query: str) -> Callable[[dict[str, str]], bool]:
    """Whether a series answers the query's `instance=~"..."` matcher, as Prometheus reads
    it: the PromQL string unescaped, then RE2's pattern (its \\x{...} as Python's), anchored.
    A series without an instance answers no such query; a query without one takes all."""
    found = re.search(r'instance=~"((?:[^"\\]|\\.)*)"', query)
    if found is None:
        return lambda labels: True
    pattern = re.sub(r"\\(.)", r"\1", found.group(1))
    pattern = re.sub(r"\\x\{([0-9a-fA-F]+)\}", lambda m: f"\\U{int(m[1], 16):08x}", pattern)
    compiled = re.compile(pattern, re.DOTALL)
    return lambda labels: compiled.fullmatch(labels.get("instance", "")) is not None


def key_of(query: str) -> str:
    """Which of the fleet's queries this is, by the names it selects (the agents' and the
    routers' are answered as `up` is: their figures are not what these faults are about)."""
    if "histogram_quantile" in query:
        return "latency"
    for key, needle in (("gpu", "DCGM_FI"), ("host", "node_memory"), ("server", "sglang")):
        if needle in query:
            return key
    return "up"


class BadProm:
    def __init__(self, nodes: int = 3, mode: str = "healthy", slow_s: float = 3.0) -> None:
        self.nodes = nodes
        self.mode = mode
        self.slow_s = slow_s
        self.port = 0
        self.requests = 0  # every request answered or not, for "it does not spin"
        self.range_requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._huge: bytes | None = None
        self._answers: dict[tuple[str, str, int], str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ running
    def start(self) -> BadProm:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._listen())
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="badprom", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the bad Prometheus did not start")
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _unlisten(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()

    def _call(self, coro: Any) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def stop_listening(self) -> None:
        """Connection refused from now on (the port stays ours to listen on again)."""
        self.mode = "stopped"
        self._call(self._unlisten())

    def listen(self, mode: str = "healthy") -> None:
        self.mode = mode
        if self._server is None:
            self._call(self._listen())

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def close() -> None:
            await self._unlisten()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        self._thread.join(10)

    def __enter__(self) -> BadProm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.decode("latin-1").split("\r\n")[0].split(" ")[1]
                self.requests += 1
                parts = urlsplit(target)
                args = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if not await self._answer(parts.path, args, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                IndexError, asyncio.CancelledError):
            return  # a client gone, or the server stopping
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, path: str, args: dict[str, str],
                      writer: asyncio.StreamWriter) -> bool:
        mode = self.mode
        key = key_of(args.get("query", ""))
        if mode == "slow" or (mode == "slow-one" and key == "gpu"):
            await asyncio.sleep(self.slow_s)
        if mode == "html":
            return await self._send(writer, 200, b"<html><body><h1>Sign in</h1></body></html>",
                                     "text/html")
        if mode == "503" or (mode == "slow-one" and key != "gpu"):
            return await self._send(writer, 503, b"upstream connect error", "text/plain")
        if mode in ("body-list", "no-status"):
            return await self._send(writer, 200, b"[1, 2]" if mode == "body-list"
                                    else b'{"data": {"result": []}}')
        if mode == "refused":
            return await self._send(writer, 400, b'{"status": "error", "errorType": "bad_data",'
                                    b' "error": "1:1: parse error: unexpected end of input"}')
        if mode == "deep":
            return await self._send(writer, 200, b"[" * DEEP + b"]" * DEEP)
        if mode == "huge":
            if self._huge is None:
                self._huge = b'{"status":"success","data":{"result":[' \
                    + b'{"metric":{},"value":[0,"1"]},' * (HUGE_BYTES // 30) + b"{}]}}"
            return await self._send(writer, 200, self._huge)
        if path == "/api/v1/query_range":
            self.range_requests += 1
            body = self._range(key, args, mode)
        elif path == "/api/v1/query":
            # Made once per query and mode (a 2,000-node answer takes a while in Python);
            # the samples' times are those of the first answer, which nothing here reads.
            cached = (key, mode, self.nodes)
            if cached not in self._answers:
                self._answers[cached] = self._instant(key, mode)
            body = self._answers[cached]
        else:
            return await self._send(writer, 404, b"404 page not found", "text/plain")
        return await self._send(writer, 200, body.encode())

    def _instant(self, key: str, mode: str) -> str:
        odd = {"data-null": "null", "data-list": "[1, 2]", "data-str": '"x"', "data-empty": "[]",
               "result-dict": '{"resultType": "vector", "result": {"a": 1}}'}
        if mode in odd:
            return '{"status": "success", "data": ' + odd[mode] + "}"
        now = time.time()
        items = []
        for labels, v in self._series(key, mode):
            items.append('{"metric": ' + json.dumps(labels) + f', "value": [{now:.3f}, {v}]}}')
        if mode == "result-odd":
            items += ['"a string"', "42", "null", '{"metric": [1, 2], "value": [0, "1"]}',
                      '{"metric": {"node": 7, "gpu": ["0"], "__name__": "DCGM_FI_DEV_FB_USED"},'
                      ' "value": [0, "1"]}',
                      '{"metric": {"node": "node-0000", "__name__": "DCGM_FI_DEV_FB_USED",'
                      ' "gpu": "1"}, "value": [0]}',
                      '{"metric": {"node": "node-0000", "__name__": "DCGM_FI_DEV_FB_USED",'
                      ' "gpu": "1"}, "value": {"a": 1}}',
                      '{"metric": {"node": "node-0000"}, "values": "x"}']
        return ('{"status": "success", "data": {"resultType": "vector", "result": ['
                + ", ".join(items) + "]}}")

    def _series(self, key: str, mode: str) -> list[tuple[dict[str, str], str]]:
        """(labels, the value as JSON text) of one answer, node 0's made odd as asked."""
        out = []
        kind, _, x = mode.partition(":")
        for labels, v in healthy_series(self.nodes, key, _flavour(mode)):
            text = json.dumps(str(v))  # Prometheus writes a sample's value as a string
            if labels.get("node") == "node-0000":
                if kind == "value":
                    text = x
                elif kind == "max":
                    text = top_of(labels)
                elif kind == "gpu-label" and labels.get("gpu") == "2":
                    labels = {**labels, "gpu": json.loads(x)}
            out.append((labels, text))
        return out

    def _range(self, key: str, args: dict[str, str], mode: str) -> str:
        try:
            start, end, step = (float(args[k]) for k in ("start", "end", "step"))
        except (KeyError, ValueError):
            return '{"status": "error", "errorType": "bad_data", "error": "bad range"}'
        kind, _, x = mode.partition(":")
        times = [start + i * step for i in range(int((end - start) / step) + 1)][-400:]
        items = []
        wanted = matcher(args.get("query", ""))
        series = [(labels, v) for labels, v in healthy_series(self.nodes, key, _flavour(mode))
                  if wanted(labels)]
        if kind == "range-times":  # no time a range query could have asked for
            odd = '[1e308, "1"], [-1, "1"], ["x", "1"], ["NaN", "1"], [null, "1"], "x", [], 7'
            return ('{"status": "success", "data": {"resultType": "matrix", "result": ['
                    + ", ".join('{"metric": ' + json.dumps(labels) + ', "values": [' + odd
                                + "]}" for labels, _ in series) + "]}}")
        for labels, v in series:
            text = json.dumps(str(v))
            if kind == "range":
                text = top_of(labels) if x == "max" else x
            elif labels.get("node") == "node-0000" and kind in ("value", "max"):
                text = x if kind == "value" else top_of(labels)
            points = ", ".join(f"[{t:.3f}, {text}]" for t in times)
            items.append('{"metric": ' + json.dumps(labels) + ', "values": [' + points + "]}")
        return ('{"status": "success", "data": {"resultType": "matrix", "result": ['
                + ", ".join(items) + "]}}")

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                    ctype: str = "application/json") -> bool:
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "Error")
        writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
                     f"content-length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        return True
