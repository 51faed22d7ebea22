"""A misbehaving SGLang server for the fault tests: real HTTP/1.1 on 127.0.0.1, written on raw
asyncio streams so that it can do what a framework would not let it do: drip a page a byte at
a time, stall a stream forever, cut a connection mid-body, end an SSE stream without its
[DONE], serve NaN and Inf gauges.

Two ways to run it:
- in a test's process: ``BadServer().start()`` runs it on a thread with its own event loop;
  ``server.faults`` says what each endpoint does, and can change while it runs;
- as a process, ``python -m sglang.launch_server`` with ``tests/faults/fake_sglang`` on
  PYTHONPATH (what a scenario file launches): faults come from ``--fault NAME=MODE`` arguments.

Endpoints: /health, /server_info, /metrics (the real SGLang page recorded on this CPU, with
NaN/Inf put in where a fault asks), /v1/completions (streaming, one word a token).

Faults (endpoint=mode):
  metrics=nan | inf   one rank's sglang:num_running_reqs (and token_usage) is NaN / +Inf
  metrics=drip        the page one byte per DRIP_S seconds
  metrics=stall       headers and half the page, then nothing
  metrics=cut         headers and half the page, then the connection closes
  metrics=endless     a chunked page that never ends, as fast as it can be read
  health=drip         /health's body one byte per DRIP_S seconds (it never ends in time)
  stream=stall:K      K tokens, then silence on an open connection
  stream=truncate:K   K tokens, then a clean end of the stream without [DONE]
  info=inject         /server_info's strings (version, model path, a server arg) hold INJECT
  metrics=inject      the page's label values and a HELP text hold INJECT
  info=huge           /server_info's tp_size 1e30 (and the server arg), a 400-digit
                      max_total_num_tokens and a weight memory of 1e308 GB
  metrics=huge        token_usage and the weight gauge 1e308, a rank labelled "²"
  log=inject          (as a process) log lines holding INJECT before the ready line
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = (HERE.parent / "data" / "sglang-cpu" / "metrics.txt").read_text()
SERVER_INFO = json.loads((HERE.parent / "data" / "sglang-cpu" / "server_info.json").read_text())
DRIP_S = 1.0
READY_LINE = "The server is fired up and ready to roll!"
# What a compromised server puts in its strings: an OSC that sets the terminal's title, CSI
# sequences that clear it and colour it, every other C0 control (a newline would only start
# a new line of a page or a log), DEL, every C1 control (0x9b is an 8-bit CSI), and the bidi
# and zero-width controls that make a name read as another.
INJECT = ("\x1b]0;pwned\x07\x1b[2J\x1b[31m"
          + "".join(chr(c) for c in range(0x20) if c != 0x0A) + "\x7f"
          + "".join(chr(c) for c in range(0x80, 0xA0)) + "\u202e\u2066\u200b\ufeff")


def injected_page(page: str) -> str:
    """The page with INJECT in every label value and in one HELP text (escaped as the
    exposition format asks: backslash, quote and newline; the rest goes as it is)."""
    value = INJECT.replace("\\", "\\\\").replace('"', '\\"')
    out = []
    for line in page.split("\n"):
        if line.startswith("# HELP sglang:num_running_reqs"):
            line += " " + value
        elif line and not line.startswith("#") and '="' in line:
            line = line.replace('="', f'="{value}', 1)
        out.append(line)
    return "\n".join(out)


def injected_info() -> dict[str, object]:
    info = dict(SERVER_INFO)
    for key in ("version", "model_path", "attention_backend", "served_model_name"):
        info[key] = f"{info.get(key) or key}{INJECT}"
    return info


def huge_info() -> dict[str, object]:
    """What an absurd or hostile server answers: figures no node could have."""
    info = dict(SERVER_INFO)
    info["tp_size"] = 1e30
    info["max_total_num_tokens"] = 10**400
    states = [dict(s) for s in info.get("internal_states") or [{}]]  # type: ignore[attr-defined]
    states[0]["memory_usage"] = {**(states[0].get("memory_usage") or {}), "weight": 1e308}
    info["internal_states"] = states
    return info


def huge_page(page: str) -> str:
    out = []
    for line in page.split("\n"):
        if line.startswith(("sglang:token_usage{", "sglang:weight_memory_usage_gb{")) \
                and 'tp_rank="0"' in line:
            out.append(line.rsplit(" ", 1)[0] + " 1e308")
            out.append(line.replace('tp_rank="0"', 'tp_rank="²"').rsplit(" ", 1)[0] + " 0.5")
            continue
        out.append(line)
    return "\n".join(out)


def metrics_page(mode: str) -> str:
    """The recorded page, with one rank's running requests and token usage made NaN or +Inf
    (as a broken exporter or a division by zero in a scheduler would print them)."""
    if mode == "inject":
        return injected_page(PAGE)
    if mode == "huge":
        return huge_page(PAGE)
    if mode not in ("nan", "inf"):
        return PAGE
    value = "NaN" if mode == "nan" else "+Inf"
    out = []
    for line in PAGE.split("\n"):
        if line.startswith(("sglang:num_running_reqs{", "sglang:token_usage{")) \
                and 'tp_rank="0"' in line:
            line = line.rsplit(" ", 1)[0] + " " + value
        out.append(line)
    return "\n".join(out)


class BadServer:
    def __init__(self, port: int = 0, faults: dict[str, str] | None = None,
                 tokens: int = 32) -> None:
        self.port = port
        self.faults: dict[str, str] = dict(faults or {})
        self.tokens = tokens  # what a stream sends when nothing is wrong with it
        self.requests: list[str] = []  # "GET /metrics", ... as they arrive
        # The Authorization header of each request (None without one), in the same order.
        self.authorizations: list[str | None] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ running
    async def serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def start(self) -> BadServer:
        """On a thread of its own; returns once it listens."""
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.serve())
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="badserver", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the bad server did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for w in list(self._writers):  # stalled responses: cut them
                w.close()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:  # drips and stalls in progress
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        self._thread.join(10)

    def __enter__(self) -> BadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (h.partition(":") for h in lines[1:] if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(f"{method} {path}")
                self.authorizations.append(headers.get("authorization"))
                if not await self._route(method, path.split("?")[0], body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, method: str, path: str, body: bytes,
                     writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection is done with."""
        if path == "/health":
            mode = self.faults.get("health")
            body = b"." * 30 if mode == "drip" else b""  # something to drip: 30 s of it
            return await self._send(writer, 200, body, "text/plain", mode)
        if path in ("/server_info", "/get_server_info"):
            info = {"inject": injected_info, "huge": huge_info}.get(
                self.faults.get("info", ""), lambda: SERVER_INFO)()
            return await self._send(writer, 200, json.dumps(info).encode(),
                                    "application/json")
        if path == "/metrics" and self.faults.get("metrics") == "endless":
            return await self._endless(writer)
        if path == "/metrics":
            mode = self.faults.get("metrics", "")
            return await self._send(writer, 200, metrics_page(mode).encode(),
                                    "text/plain; version=0.0.4", mode)
        if path == "/v1/completions" and method == "POST":
            return await self._stream(writer, json.loads(body or b"{}"))
        return await self._send(writer, 404, b'{"detail":"Not Found"}', "application/json")

    async def _send(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                    ctype: str, mode: str | None = None) -> bool:
        head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                f"content-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n").encode()
        if mode == "drip":
            writer.write(head)
            for i in range(len(body)):
                writer.write(body[i:i + 1])
                await writer.drain()
                await asyncio.sleep(DRIP_S)
            return True
        if mode in ("stall", "cut"):
            writer.write(head + body[: len(body) // 2])
            await writer.drain()
            if mode == "stall":
                await asyncio.Event().wait()  # until the server stops
            return False  # cut: close mid-body
        writer.write(head + body)
        await writer.drain()
        return True

    async def _endless(self, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        line = b"sglang:num_running_reqs{tp_rank=\"0\"} 0.0\n" * 2048
        chunk = f"{len(line):x}\r\n".encode() + line + b"\r\n"
        while True:
            writer.write(chunk)
            await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, req: dict[str, object]) -> bool:
        """An OpenAI completions stream, chunked, one token a chunk; a fault may stall it or
        end it early without [DONE]."""
        asked = int(req.get("max_tokens", self.tokens))  # type: ignore[call-overload]
        mode, _, k = self.faults.get("stream", "").partition(":")
        stop_after = int(k) if k else asked
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")

        async def chunk(data: bytes) -> None:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        for i in range(min(asked, stop_after)):
            event = {"id": "cmpl-bad", "object": "text_completion",
                     "choices": [{"index": 0, "text": f" w{i}", "finish_reason": None}]}
            await chunk(f"data: {json.dumps(event)}\n\n".encode())
            await asyncio.sleep(0.002)
        if mode == "stall" and stop_after < asked:
            await asyncio.Event().wait()
        if mode != "truncate" or stop_after >= asked:
            await chunk(b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")  # a clean end of the body either way
        await writer.drain()
        return True


def main(argv: list[str] | None = None) -> int:
    """`python -m sglang.launch_server ...` in a scenario: takes --host/--port, ignores the
    rest of SGLang's arguments, and says it is ready as SGLang does."""
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fault", action="append", default=[], metavar="ENDPOINT=MODE")
    args, _ = p.parse_known_args(argv)
    faults = dict(f.split("=", 1) for f in args.fault)
    server = BadServer(args.port, faults)

    async def run() -> None:
        await server.serve()
        print(f"[2026-12-01 00:00:00] faults: {faults or 'none'}", flush=True)
        if faults.get("log") == "inject":  # with SGLang's prefix, and without one
            print(f"[2026-12-01 00:00:00] injected: {INJECT}", flush=True)
            print(f"bare {INJECT}", flush=True)
        print(f"[2026-12-01 00:00:00] {READY_LINE}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())

