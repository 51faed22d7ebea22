"""The simulated server's stream interval as SGLang's and vLLM's: the first token at once,
then a chunk every interval-th token after it, and the last (in-process: the app over
httpx's ASGI transport, the serving loop running)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from engram_top.seed import reference
from engram_top.sim import memory
from engram_top.sim.core import ServerCore
from engram_top.sim.http import build_app, streamed

REF = reference.default()


def test_the_rule_sends_the_first_token_then_every_interval_th_and_the_last() -> None:
    assert [n for n in range(1, 201) if streamed(n, 64, 200)] == [1, 65, 129, 193, 200]
    assert [n for n in range(1, 6) if streamed(n, 1, 5)] == [1, 2, 3, 4, 5]
    assert [n for n in range(1, 4) if streamed(n, 1000, 3)] == [1, 3]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    args = argparse.Namespace(host="127.0.0.1", port=0, time_scale=1.0, serve_scale=0.001,
                              stream_interval=64, api_key=None)
    core = ServerCore(REF, REF.placements["device"], memory.plan(REF, "device"), args, "test")
    core.ready = True
    loop = asyncio.create_task(core._serve_loop())
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(build_app(core)),
                                     base_url="http://sim") as c:
            yield c
    finally:
        loop.cancel()


def _events(text: str) -> list[dict[str, object]]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: {")]


async def test_a_completion_streams_its_first_token_at_once(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/completions", json={
        "prompt": "where do the engram rows live", "max_tokens": 130, "stream": True})
    chunks = [e for e in _events(resp.text) if e.get("choices")]
    words = [len(str(c["choices"][0]["text"]).split()) for c in chunks]  # type: ignore[index]
    assert words == [1, 64, 64, 1]


async def test_generate_streams_its_first_token_at_once(client: httpx.AsyncClient) -> None:
    resp = await client.post("/generate", json={
        "text": "where do the engram rows live", "stream": True,
        "sampling_params": {"max_new_tokens": 130}})
    counts = [e["meta_info"]["completion_tokens"] for e in _events(resp.text)]  # type: ignore[index]
    assert counts == [1, 65, 129, 130]
