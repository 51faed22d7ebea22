"""The simulated server's HTTP surface: SGLang's endpoints and its streaming formats over
the server's model (engram_top.sim.core), and the OpenAI endpoints both dialects serve.
Tokens are words: one whitespace-separated word of a text prompt counts as one token."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engram_top.sim.core import CONTEXT_LEN, WARMUP_HEADER, ServerCore
from engram_top.sim.startup import log
from scenarios.workload import PROMPT_TOKENS_FIELD

WORDS = ("the", "engram", "table", "sits", "in", "host", "memory", "while", "kv", "cache",
         "grows", "on", "each", "gpu", "and", "tokens", "stream", "out")


def _word(i: int) -> str:
    return WORDS[i % len(WORDS)]


def streamed(n: int, interval: int, last: int) -> bool:
    """Whether the n-th token goes out in a chunk of its own: with a stream interval above
    1, SGLang and vLLM send the first token at once, then every interval-th after it (1,
    65, 129, ... at 64: SGLang's ``len(output_ids) % stream_interval == 1``), and the last."""
    return n == last or n % interval == 1 % interval


def _input_len(body: dict[str, Any], key: str) -> int:
    # The simulator's own field: a long context as its length, not as its text (the bench
    # sends it to a simulated node only). SGLang itself would ignore it.
    count = body.get(PROMPT_TOKENS_FIELD)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    ids = body.get("input_ids")
    if isinstance(ids, list):
        return max(1, len(ids))
    prompt = body.get(key)
    if isinstance(prompt, list):  # OpenAI prompt as token ids
        return max(1, len(prompt))
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    raise ValueError(f"request needs '{key}' (text) or 'input_ids'")


Handler = Callable[[HttpRequest], Awaitable[Response]]
ErrorReply = Callable[[int, str], Response]


async def read_body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise ValueError(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def _chat_input_len(body: dict[str, Any]) -> int:
    """A chat request's prompt: the words of its messages' text (or the simulator's own
    token-count field)."""
    count = body.get(PROMPT_TOKENS_FIELD)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("request needs 'messages' (a non-empty list)")
    words = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str):
                words += len(text.split())
    return max(1, words)


def openai_handlers(core: ServerCore, error: ErrorReply) -> tuple[Handler, Handler]:
    """/v1/completions and /v1/chat/completions, as SGLang and vLLM both serve them (each
    dialect gives its own error body)."""

    def _text(start: int, end: int) -> str:
        return "".join(" " + _word(i) for i in range(start, end))

    async def serve(request: HttpRequest, chat: bool) -> Response:
        arrived = request.scope["arrived"]
        try:
            body = await read_body(request)
            n_in = _chat_input_len(body) if chat else _input_len(body, "prompt")
            # A chat request without a limit gets the completions' default: the simulator
            # writes no end of sentence to stop at.
            max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16) \
                if chat else int(body.get("max_tokens", 16))
            if max_new < 1:
                raise ValueError("max_tokens must be >= 1")
            core.check_length(n_in, max_new)
            cid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
            gen = core.generate(n_in, max_new, cid, arrived)
        except (ValueError, TypeError) as exc:
            return error(400, str(exc))
        created = int(time.time())
        model = body.get("model") or core.model_name
        kind = "chat.completion" if chat else "text_completion"

        def usage(n: int) -> dict[str, int]:
            return {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}

        def choice(text: str, done: bool, stream: bool) -> dict[str, Any]:
            reason = "length" if done else None
            if not chat:
                return {"index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                        "matched_stop": None}
            key = "delta" if stream else "message"
            return {"index": 0, key: {"role": "assistant", "content": text},
                    "logprobs": None, "finish_reason": reason}

        if not body.get("stream"):
            n = 0
            async for got, _ in gen:
                n = got
            return JSONResponse({"id": cid, "object": kind, "created": created,
                                 "model": model, "choices": [choice(
                                     " ".join(_word(i) for i in range(n)), True, False)],
                                 "usage": usage(n)})
        opts = body.get("stream_options") or {}
        interval = max(1, core.args.stream_interval)
        chunk_kind = "chat.completion.chunk" if chat else kind

        async def events() -> AsyncIterator[bytes]:
            sent = 0
            async for n, _ in gen:
                if not streamed(n, interval, max_new):
                    continue
                text = _text(sent, n)
                sent = n
                payload = {"id": cid, "object": chunk_kind, "created": created,
                           "model": model, "choices": [choice(text, n == max_new, True)]}
                if opts.get("continuous_usage_stats"):
                    payload["usage"] = usage(n)
                yield f"data: {json.dumps(payload)}\n\n".encode()
            if opts.get("include_usage"):
                tail: dict[str, object] = {"id": cid, "object": chunk_kind, "created": created,
                        "model": model, "choices": [], "usage": usage(sent)}
                yield f"data: {json.dumps(tail)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def completions(request: HttpRequest) -> Response:
        return await serve(request, chat=False)

    async def chat_completions(request: HttpRequest) -> Response:
        return await serve(request, chat=True)

    return completions, chat_completions


def stamped(app: ASGIApp) -> ASGIApp:
    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        # A request's ground-truth arrival is the first moment the application sees it,
        # before routing and middleware: those are the server's time, not the network's.
        scope["arrived"] = time.monotonic()
        await app(scope, receive, send)
    return wrapper


def build_app(core: ServerCore) -> ASGIApp:
    api_key = core.args.api_key

    def authorised(request: HttpRequest) -> bool:
        if not api_key or request.url.path.startswith(("/health", "/metrics")):
            return True
        auth = request.headers.get("authorization", "")
        return auth.lower().startswith("bearer ") and auth[7:] == api_key or \
            request.headers.get("x-api-key") == api_key

    def serving(handler: Handler) -> Handler:
        # Until the warm-up request is done, traffic is turned away with a 503, as /health
        # says; only the warm-up's own request (its token, known to this process alone)
        # is served. Admitted, it would queue before the warm-up and could outlast it.
        async def when_ready(request: HttpRequest) -> Response:
            if not core.ready and request.headers.get(WARMUP_HEADER) != core.warmup_token:
                return JSONResponse({"error": {
                    "message": "The server is warming up; retry once /health answers 200",
                    "type": "service_unavailable", "code": 503}}, status_code=503,
                    headers={"Retry-After": "1"})
            return await handler(request)
        return guarded(when_ready)

    def guarded(handler: Handler) -> Handler:
        # Every route but /health* and /metrics needs the key, /server_info included: it
        # echoes the server's arguments, the key among them (SGLang's auth middleware).
        async def checked(request: HttpRequest) -> Response:
            if not authorised(request):
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
            return await handler(request)
        return checked

    async def health(request: HttpRequest) -> Response:
        return Response(status_code=200 if core.ready else 503)

    async def server_info(request: HttpRequest) -> Response:
        if request.url.path == "/get_server_info":
            log("Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead.")
        return JSONResponse(core.server_info())

    async def model_info(request: HttpRequest) -> Response:
        return JSONResponse({"model_path": core.ref.model, "tokenizer_path": core.ref.model,
                             "is_generation": True, "preferred_sampling_params": None,
                             "weight_version": "default", "has_image_understanding": False,
                             "has_audio_understanding": False, "model_type": "deepseek_v41",
                             "architectures": ["DeepseekV4ForCausalLM"]})

    async def models(request: HttpRequest) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": core.ref.model, "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": core.ref.model, "max_model_len": CONTEXT_LEN}]})

    async def sim_requests(request: HttpRequest) -> Response:
        return JSONResponse({"clock": "monotonic", "requests": list(core.done)})

    async def pause_generation(request: HttpRequest) -> Response:
        # SGLang's modes: in_place (the default) keeps the requests and their KV; abort and
        # retract are not simulated, and said so rather than taken as in_place.
        try:
            body = await read_body(request)
        except ValueError:
            body = {}
        mode = body.get("mode", "in_place") if isinstance(body, dict) else "in_place"
        if mode != "in_place":
            return error(400, f"pause mode {mode!r} is not simulated; use 'in_place'")
        core.pause(True)
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(request: HttpRequest) -> Response:
        core.pause(False)
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def metrics(request: HttpRequest) -> Response:
        return PlainTextResponse(core.render_metrics(),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    def error(status: int, message: str) -> Response:
        return JSONResponse({"error": {"message": message, "type": "invalid_request_error",
                                       "code": status}}, status_code=status)

    completions, chat_completions = openai_handlers(core, error)

    async def generate(request: HttpRequest) -> Response:
        arrived = request.scope["arrived"]
        try:
            body = await read_body(request)
            n_in = _input_len(body, "text")
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
            if max_new < 1:
                raise ValueError("max_new_tokens must be >= 1")
            core.check_length(n_in, max_new)
            rid = uuid.uuid4().hex
            gen = core.generate(n_in, max_new, rid, arrived)
        except (ValueError, TypeError) as exc:
            return error(400, str(exc))
        started = time.monotonic()

        def chunk(n: int, done: bool) -> dict[str, Any]:
            return {"text": " ".join(_word(i) for i in range(n)),
                    "output_ids": list(range(100, 100 + n)),
                    "meta_info": {"id": rid, "prompt_tokens": n_in, "completion_tokens": n,
                                  "cached_tokens": 0,
                                  "finish_reason":
                                      {"type": "length", "length": n} if done else None,
                                  "e2e_latency": time.monotonic() - started}}

        if not body.get("stream"):
            try:
                n = 0
                async for got, _ in gen:
                    n = got
            except ValueError as exc:
                return error(400, str(exc))
            return JSONResponse(chunk(n, True))

        interval = max(1, core.args.stream_interval)

        async def events() -> AsyncIterator[bytes]:
            async for n, _ in gen:
                if streamed(n, interval, max_new):
                    yield f"data: {json.dumps(chunk(n, n == max_new))}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    routes = [
        Route("/health", health), Route("/health_generate", health),
        Route("/server_info", guarded(server_info)),
        Route("/get_server_info", guarded(server_info)),
        Route("/model_info", guarded(model_info)), Route("/get_model_info", guarded(model_info)),
        Route("/v1/models", guarded(models)), Route("/metrics", metrics),
        # Not SGLang: the simulated server's own per-request times, for testing clients.
        Route("/sim/requests", guarded(sim_requests)),
        Route("/pause_generation", guarded(pause_generation), methods=["POST"]),
        Route("/continue_generation", guarded(continue_generation), methods=["POST"]),
        Route("/generate", serving(generate), methods=["POST", "PUT"]),
        Route("/v1/completions", serving(completions), methods=["POST"]),
        Route("/v1/chat/completions", serving(chat_completions), methods=["POST"]),
    ]
    return stamped(Starlette(routes=routes))
