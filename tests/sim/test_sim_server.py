"""The simulated SGLang server as a real process on 127.0.0.1: how it comes up, its endpoints
and formats (SGLang's metrics, endpoints and log lines), its start-up log, and the
virtual GPU memory its rank processes own (gone when they die, whichever way).

The read-only tests share the session's device server; the destructive ones each get their
own server from the fleet launched in conftest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil
import pytest
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families

from collectors.units import GIB
from engram_top.seed import reference
from engram_top.sim import memory, state
from engram_top.sim.backends import SimGpuBackend
from engram_top.sim.core import ServerCore
from engram_top.sim.model import BATCH_WINDOW_S

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

if TYPE_CHECKING:
    from helpers import Fleet, SimServer

REF = reference.default()
PLAN = {p: memory.plan(REF, p) for p in reference.PLACEMENTS}

# Default buckets from the notes (section 1.4).
TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
               8.000]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
               1200, 1800, 2400]
SCHED_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}


def sse_payloads(body: str) -> list[str]:
    """The `data: ` payloads of a text/event-stream body, checking its framing."""
    assert body.endswith("\n\n"), body[-80:]
    events = [e for e in body.split("\n\n") if e]
    for e in events:
        assert e.startswith("data: "), e
    return [e[len("data: "):] for e in events]


def client(server: SimServer, **kw: object) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10.0, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- coming up


def test_port_refuses_until_loaded_then_health_goes_ready(sim_device: SimServer) -> None:
    # Like SGLang, uvicorn starts only after weights, KV pool and graphs; /health says 503
    # during warm-up (usually too short to catch at this time scale) and 200 when ready.
    assert sim_device.probes[0] == "refused"
    assert sim_device.probes in (["refused", "200"], ["refused", "503", "200"])
    with client(sim_device) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health_generate").status_code == 200
        assert c.get("/server_info").json()["status"] == "ready"


def test_nothing_listens_before_uvicorn_line(sim_device: SimServer) -> None:
    text = sim_device.wait_log("fired up and ready to roll")
    uvicorn_at = text.index(f"Uvicorn running on http://127.0.0.1:{sim_device.port}")
    assert text.index("Capture cuda graph end") < uvicorn_at
    assert uvicorn_at < text.index("The server is fired up and ready to roll!")


# --------------------------------------------------------------------------- info endpoints


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_server_info(sim_device: SimServer, path: str) -> None:
    plan = PLAN["device"]
    with client(sim_device) as c:
        resp = c.get(path)
    assert resp.status_code == 200
    info = resp.json()
    assert info["status"] == "ready"
    assert info["max_total_num_tokens"] == plan.kv_tokens == 11_840_000
    assert info["max_req_input_len"] == plan.kv_tokens - 1
    assert isinstance(info["version"], str) and info["version"]
    assert info["tp_size"] == 4
    assert info["model_path"] == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert info["enable_metrics"] is True
    assert info["page_size"] == memory.PAGE_SIZE
    # SGLang's /server_info carries every server argument as a flat key.
    assert (info["pp_size"], info["dp_size"], info["ep_size"]) == (1, 1, 1)
    assert info["enable_dp_attention"] is False
    assert info["kv_cache_dtype"] == "fp8_e4m3"
    assert info["mem_fraction_static"] == plan.mem_fraction_static
    assert len(info["internal_states"]) == 1  # one per DP rank
    usage = info["internal_states"][0]["memory_usage"]
    assert set(usage) == {"weight", "kvcache", "token_capacity", "graph"}
    assert usage["weight"] == 119.043
    assert usage["token_capacity"] == 11_840_000
    assert usage["kvcache"] == pytest.approx(plan.kv_bytes / GIB, abs=1e-3)
    assert usage["graph"] == pytest.approx(2.3, abs=1e-3)
    assert info["simulated"]["placement"] == "device"
    if path == "/get_server_info":
        text = sim_device.wait_log("Endpoint '/get_server_info' is deprecated")
        assert "Please use '/server_info' instead." in text


@pytest.mark.parametrize("path", ["/model_info", "/get_model_info"])
def test_model_info(sim_device: SimServer, path: str) -> None:
    with client(sim_device) as c:
        info = c.get(path).raise_for_status().json()
    assert set(info) == {"model_path", "tokenizer_path", "is_generation",
                         "preferred_sampling_params", "weight_version",
                         "has_image_understanding", "has_audio_understanding", "model_type",
                         "architectures"}
    assert info["is_generation"] is True
    assert info["architectures"] == ["DeepseekV4ForCausalLM"]


def test_v1_models(sim_device: SimServer) -> None:
    with client(sim_device) as c:
        body = c.get("/v1/models").raise_for_status().json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == card["root"] == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert card["object"] == "model"
    assert card["owned_by"] == "sglang"
    assert isinstance(card["created"], int)
    assert card["max_model_len"] > 0


# --------------------------------------------------------------------------- /metrics


def test_metrics_is_valid_exposition_with_sglang_names(sim_device: SimServer,
                                                       device_metrics_page: str) -> None:
    with client(sim_device) as c:
        resp = c.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    # prometheus_client's own parser accepts the page (it raises on malformed text).
    fams = {f.name: f for f in text_string_to_metric_families(device_metrics_page)}
    assert fams and all(name.startswith("sglang:") for name in fams)
    # prometheus_client names a counter family without its _total; SGLang's samples keep it.
    expected = {
        "sglang:num_running_reqs": "gauge", "sglang:num_queue_reqs": "gauge",
        "sglang:num_used_tokens": "gauge", "sglang:token_usage": "gauge",
        "sglang:gen_throughput": "gauge", "sglang:cache_hit_rate": "gauge",
        "sglang:max_total_num_tokens": "gauge", "sglang:weight_memory_usage_gb": "gauge",
        "sglang:kv_cache_memory_usage_gb": "gauge", "sglang:graph_memory_usage_gb": "gauge",
        "sglang:prompt_tokens": "counter", "sglang:generation_tokens": "counter",
        "sglang:num_requests": "counter", "sglang:num_aborted_requests": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:e2e_request_latency_seconds": "histogram",
        "sglang:queue_time_seconds": "histogram",
    }
    for name, kind in expected.items():
        assert name in fams, name
        assert fams[name].type == kind, name
    for fam in fams.values():
        if fam.type == "counter":
            assert all(s.name.endswith("_total") for s in fam.samples), fam.name
    # Scheduler gauges: SGLang's label set, one series per TP rank.
    running = fams["sglang:num_running_reqs"].samples
    assert all(set(s.labels) >= SCHED_LABELS for s in running)
    assert sorted(int(s.labels["tp_rank"]) for s in running) == [0, 1, 2, 3]
    for s in running:
        assert s.labels["model_name"] == "deepseek-ai/DeepSeek-V4.1-Flash"
        assert s.labels["engine_type"] == "unified"
        assert s.labels["pp_rank"] == s.labels["moe_ep_rank"] == "0"
    for s in fams["sglang:max_total_num_tokens"].samples:
        assert s.value == 11_840_000
    for s in fams["sglang:weight_memory_usage_gb"].samples:
        assert s.value == 119.043
    # Tokenizer-side metrics carry model_name.
    for name in ("sglang:prompt_tokens", "sglang:time_to_first_token_seconds"):
        assert all(s.labels.get("model_name") for s in fams[name].samples)


@pytest.mark.parametrize(("name", "bounds"), [
    ("sglang:time_to_first_token_seconds", TTFT_BUCKETS),
    ("sglang:inter_token_latency_seconds", ITL_BUCKETS),
    ("sglang:e2e_request_latency_seconds", E2E_BUCKETS),
])
def test_metrics_default_buckets(device_metrics_page: str, name: str,
                                 bounds: list[float]) -> None:
    fams = {f.name: f for f in text_string_to_metric_families(device_metrics_page)}
    buckets = [s for s in fams[name].samples if s.name == f"{name}_bucket"]
    les = [float(s.labels["le"]) for s in buckets]
    assert les == [*bounds, math.inf]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)  # cumulative
    [count] = [s.value for s in fams[name].samples if s.name == f"{name}_count"]
    assert count == counts[-1]


def test_metrics_count_what_was_served(sim_device: SimServer) -> None:
    def counters() -> dict[str, float]:
        page = httpx.get(f"{sim_device.url}/metrics", timeout=5).text
        return {s.name: s.value for f in text_string_to_metric_families(page)
                for s in f.samples if s.name.endswith(("_total", "seconds_count"))}

    # Other tests may be serving on this server too; only this test's own requests are
    # certain, so the deltas are lower bounds.
    before = counters()
    with client(sim_device) as c:
        c.post("/generate", json={"text": "one two three four",
                                  "sampling_params": {"max_new_tokens": 6}}).raise_for_status()
    after = counters()
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    assert d["sglang:prompt_tokens_total"] >= 4
    assert d["sglang:generation_tokens_total"] >= 6
    assert d["sglang:num_requests_total"] >= 1
    assert d["sglang:time_to_first_token_seconds_count"] >= 1
    assert d["sglang:e2e_request_latency_seconds_count"] >= 1
    # SGLang's ITL histogram counts tokens: 5 gaps after the first of 6 tokens.
    assert d["sglang:inter_token_latency_seconds_count"] >= 5


# --------------------------------------------------------------------------- generation


def test_generate_streaming(sim_device: SimServer) -> None:
    with client(sim_device) as c:
        resp = c.post("/generate", json={"text": "where do the engram rows live",
                                         "sampling_params": {"max_new_tokens": 5},
                                         "stream": True})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(resp.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len(chunks) == 5  # --stream-interval 1: one chunk per token
    previous = ""
    for n, chunk in enumerate(chunks, start=1):
        meta = chunk["meta_info"]
        assert meta["completion_tokens"] == n
        assert meta["prompt_tokens"] == 6
        assert len(chunk["output_ids"]) == n
        # Cumulative text (SGLang's default, without --incremental-streaming-output).
        assert chunk["text"].startswith(previous)
        assert len(chunk["text"].split()) == n
        previous = chunk["text"]
        assert meta["id"] == chunks[0]["meta_info"]["id"]
        if n < 5:
            assert meta["finish_reason"] is None
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}


def test_generate_non_streaming(sim_device: SimServer) -> None:
    with client(sim_device) as c:
        body = c.post("/generate", json={"text": "a b c",
                                         "sampling_params": {"max_new_tokens": 4}}).json()
        by_ids = c.post("/generate", json={"input_ids": [1, 2, 3, 4, 5, 6, 7],
                                           "sampling_params": {"max_new_tokens": 2}}).json()
    assert len(body["text"].split()) == 4
    assert len(body["output_ids"]) == 4
    meta = body["meta_info"]
    assert meta["prompt_tokens"] == 3
    assert meta["completion_tokens"] == 4
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert meta["e2e_latency"] > 0
    assert by_ids["meta_info"]["prompt_tokens"] == 7
    assert by_ids["meta_info"]["completion_tokens"] == 2


def test_completions_streaming_with_usage(sim_device: SimServer) -> None:
    with client(sim_device) as c:
        resp = c.post("/v1/completions", json={
            "prompt": "engram rows in host memory", "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True}})
        full = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 6}).json()
    assert resp.status_code == 200
    payloads = sse_payloads(resp.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    *token_chunks, usage_chunk = chunks
    assert len(token_chunks) == 6
    for i, chunk in enumerate(token_chunks):
        assert chunk["object"] == "text_completion"
        assert chunk["id"] == token_chunks[0]["id"] and chunk["id"].startswith("cmpl-")
        [choice] = chunk["choices"]
        assert choice["index"] == 0
        assert len(choice["text"].split()) == 1  # a delta, not the text so far
        last = i == len(token_chunks) - 1
        assert choice["finish_reason"] == ("length" if last else None)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 5, "completion_tokens": 6,
                                    "total_tokens": 11}
    streamed = "".join(ch["choices"][0]["text"] for ch in token_chunks)
    # Non-streaming: the same words, one finish_reason, usage inline.
    assert streamed.split() == full["choices"][0]["text"].split()
    assert full["choices"][0]["finish_reason"] == "length"
    assert full["usage"] == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}


def test_completions_streaming_without_usage_ends_with_done(sim_device: SimServer) -> None:
    with client(sim_device) as c:
        resp = c.post("/v1/completions", json={"prompt": "a b", "max_tokens": 3, "stream": True})
    payloads = sse_payloads(resp.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len(chunks) == 3 and all(ch["choices"] for ch in chunks)
    assert all("usage" not in ch for ch in chunks)


@pytest.mark.parametrize(("path", "body", "needle"), [
    ("/generate", b"{not json", "invalid JSON"),
    ("/generate", b"[1, 2]", "JSON object"),
    ("/generate", b'{"sampling_params": {"max_new_tokens": 3}}', "'text'"),
    ("/generate", b'{"text": "a", "sampling_params": {"max_new_tokens": 0}}', "max_new_tokens"),
    ("/v1/completions", b"{not json", "invalid JSON"),
    ("/v1/completions", b'{"max_tokens": 3}', "'prompt'"),
    ("/v1/completions", b'{"prompt": "a", "max_tokens": 0}', "max_tokens"),
    # Longer than the context: refused up front as SGLang does, not a 500 mid-request.
    ("/v1/completions", b'{"prompt": "a", "max_tokens": 20000000}', "maximum context length"),
    ("/v1/completions", b'{"prompt": "a", "max_tokens": 20000000, "stream": true}',
     "maximum context length"),
    ("/generate", b'{"text": "a", "sampling_params": {"max_new_tokens": 20000000}, '
                  b'"stream": true}', "maximum context length"),
])
def test_bad_requests_are_400_with_a_message(sim_device: SimServer, path: str, body: bytes,
                                             needle: str) -> None:
    with client(sim_device) as c:
        resp = c.post(path, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    message = resp.json()["error"]["message"]
    assert needle in message


def test_api_key_guards_all_but_health_and_metrics(sim_apikey: SimServer) -> None:
    gen = {"text": "a b", "sampling_params": {"max_new_tokens": 2}}
    with client(sim_apikey) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/metrics").status_code == 200
        resp = c.post("/generate", json=gen)
        assert resp.status_code == 401
        assert resp.json() == {"error": "Unauthorized"}
        assert c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1}).status_code == 401
        assert c.post("/generate", json=gen,
                      headers={"Authorization": "Bearer wrong"}).status_code == 401
        # /server_info echoes the server's arguments, the key among them: never without it.
        assert c.get("/server_info").status_code == 401
        assert c.get("/v1/models").status_code == 401
        good = c.post("/generate", json=gen, headers=sim_apikey.headers())
        assert good.status_code == 200
        assert good.json()["meta_info"]["completion_tokens"] == 2
        assert c.post("/generate", json=gen,
                      headers={"x-api-key": sim_apikey.api_key or ""}).status_code == 200
        assert c.get("/server_info", headers=sim_apikey.headers()).status_code == 200


# --------------------------------------------------------------------------- start-up log


def _rank_lines(text: str, rank: int, needle: str) -> list[str]:
    return [ln for ln in text.splitlines() if f" TP{rank}] " in ln and needle in ln]


@pytest.mark.parametrize(("name", "weights", "tokens"), [
    ("device", "119.04", 11_840_000),
    ("host", "72.20", 42_700_288),
    ("host-prefetch", "72.20", 42_700_288),
])
def test_startup_log_has_sglang_lines_per_rank(fleet: Fleet, name: str, weights: str,
                                               tokens: int) -> None:
    server = fleet.launched(name)
    text = server.wait_log("The server is fired up and ready to roll!", timeout=60)
    assert "The server is fired up and ready to roll!" in text, text[-2000:]
    for r in range(4):
        for needle in ("Init torch distributed begin.", "Load weight begin. avail mem=",
                       "Using KV cache dtype:", "Memory pool end. avail mem=",
                       "Capture cuda graph begin."):
            assert _rank_lines(text, r, needle), (r, needle)
        [end] = _rank_lines(text, r, "Load weight end.")
        assert re.search(r"Load weight end\. elapsed=\d+\.\d\d s, type=DeepseekV4ForCausalLM, "
                         rf"quant=fp8, avail mem=\d+\.\d\d GB, mem usage={weights} GB\.$", end)
        # DeepSeek-V4's several pools, not the one-pool line of other models (the DSV4
        # lines themselves: test_sim_dialect.py).
        assert not _rank_lines(text, r, "KV Cache is allocated")
        [pools] = _rank_lines(text, r, "DSV4 pool sizes:")
        assert f"DSV4 pool sizes: full={tokens}, swa=" in pools
        [graph] = _rank_lines(text, r, "Capture cuda graph end.")
        assert re.search(r"Time elapsed: \d+\.\d\d s\. mem usage=2\.30 GB\. "
                         r"avail mem=\d+\.\d\d GB\.$", graph)
    assert f"max_total_num_tokens={tokens}, chunked_prefill_size=" in text
    assert re.search(r"Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)", text)
    tables = re.findall(r"engram host table (L\d+): layout=shared, (\d+) MiB resident", text)
    env = re.findall(r"\] env (\w+)=1$", text, re.MULTILINE)
    if name == "device":
        assert tables == [] and env == []
    else:
        assert [t[0] for t in tables] == ["L1", "L14"]
        total_mib = sum(int(t[1]) for t in tables)
        assert abs(total_mib / 1024 - 187.37) < 0.01
        assert "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE" in env
        assert ("SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH" in env) == (name == "host-prefetch")


# --------------------------------------------------------------------------- virtual HBM


def _used(node_dir: Path) -> list[int]:
    return [d.used_bytes for d in SimGpuBackend(node_dir).sample().devices]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_gpu_backend_shows_the_plan_owned_by_the_ranks(sim_device: SimServer) -> None:
    plan = PLAN["device"]
    data = SimGpuBackend(sim_device.node_dir).sample()
    assert data.backend == "simulated"
    assert [d.index for d in data.devices] == [0, 1, 2, 3]
    ranks = {c.pid for c in psutil.Process(sim_device.pid).children()}
    owners = []
    for dev in data.devices:
        assert dev.name == "NVIDIA B200"
        assert dev.total_bytes == REF.gpu_total_bytes
        assert dev.reserved_bytes == REF.gpu_reserved_bytes
        assert dev.used_bytes == plan.gpu_bytes
        assert dev.free_bytes == dev.total_bytes - dev.reserved_bytes - dev.used_bytes
        [proc] = dev.processes  # one process per GPU: its TP rank
        assert proc.pid in ranks
        assert proc.used_bytes == plan.gpu_bytes
        assert proc.name == f"sglang::scheduler_TP{dev.index}"
        owners.append(proc.pid)
    assert len(set(owners)) == 4
    assert len({d.uuid for d in data.devices}) == 4


def test_sigkill_of_the_server_takes_its_ranks_and_their_memory(fleet: Fleet) -> None:
    server = fleet.ready("main-kill")
    node = server.node_dir
    assert _used(node) == [PLAN["device"].gpu_bytes] * 4
    ranks = [p.pid for d in SimGpuBackend(node).sample().devices for p in d.processes]
    assert sorted(ranks) == sorted(c.pid for c in psutil.Process(server.pid).children())
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait_exit(5) == -signal.SIGKILL
    # The ranks follow their parent (PR_SET_PDEATHSIG, stdin EOF) and take their memory.
    wait_until(lambda: all(_gone(pid) for pid in ranks), 3.0, "the ranks to exit")
    assert _used(node) == [0, 0, 0, 0]
    assert all(not d.processes for d in SimGpuBackend(node).sample().devices)
    # The killed main process could not clean up; its stale file goes on sight.
    assert list(state.procs_dir(node).glob("*.json")) == []


def test_sigkill_of_a_rank_frees_its_gpu_and_sigterm_stops_the_group(fleet: Fleet) -> None:
    server = fleet.ready("rank-kill")
    node = server.node_dir
    gpu_bytes = PLAN["device"].gpu_bytes
    devices = SimGpuBackend(node).sample().devices
    victim = devices[1].processes[0].pid
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: _gone(victim), 2.0, "the rank to die")
    # No grace: the memory belongs to a dead process, so it is gone at the next sample.
    assert _used(node) == [gpu_bytes, 0, gpu_bytes, gpu_bytes]
    assert not (state.procs_dir(node) / f"{victim}.json").exists()

    survivors = [p.pid for d in devices for p in d.processes if p.pid != victim]
    result = server.stop(grace=10.0)
    assert result.survivors == ()
    assert not result.killed  # SIGTERM was enough
    assert result.returncode == 0
    assert server.proc.group_members() == []
    assert all(_gone(pid) for pid in [server.pid, *survivors])
    assert _used(node) == [0, 0, 0, 0]
    assert list(state.procs_dir(node).glob("*.json")) == []
    assert "Shutting down." in server.log_text()


def test_fail_at_weights_exits_nonzero_with_a_traceback(fleet: Fleet) -> None:
    server = fleet.launched("fail-weights")
    rc = server.wait_exit(30)
    assert rc is not None and rc != 0
    server.wait_probing()
    text = server.log_text()
    assert "Traceback (most recent call last):" in text
    assert "RuntimeError: simulated failure during weights (--fail-at weights)" in text
    assert "Initialization failed." in text
    assert "Load weight end." not in text
    assert "Uvicorn running on" not in text
    assert set(server.probes) == {"refused"}
    wait_until(lambda: _used(server.node_dir) == [0, 0, 0, 0], 3.0, "the ranks' memory to go")


# --------------------------------------------------------------------------- aborts and timing


def _metric(page: str, name: str) -> float:
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            if s.name == name and s.labels.get("tp_rank", "0") == "0":
                return s.value
    raise KeyError(name)


def test_client_disconnect_aborts_the_request(sim_device: SimServer) -> None:
    def page() -> str:
        return httpx.get(f"{sim_device.url}/metrics", timeout=5).text

    aborted = _metric(page(), "sglang:num_aborted_requests_total")
    with client(sim_device) as c, c.stream("POST", "/generate", json={
            "text": "a b", "sampling_params": {"max_new_tokens": 5000}, "stream": True}) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= 4:
                break  # leave after two tokens (a data line and a blank one each)
    wait_until(lambda: _metric(page(), "sglang:num_aborted_requests_total") >= aborted + 1,
               3.0, "the server to count the abort")
    # The request left the batch and gave back its KV.
    wait_until(lambda: _metric(page(), "sglang:num_running_reqs") == 0
               and _metric(page(), "sglang:num_used_tokens") == 0, 3.0, "an idle scheduler")


async def test_queue_time_excludes_the_scaled_prefill() -> None:
    # In-process, without a rank: the serving loop alone. At --serve-scale 20 a 200-token
    # prefill takes ~0.6 s of wall time; a lone request queues only for the model's batch
    # window after idle (0.4 s at this scale), never for its own prefill.
    args = argparse.Namespace(host="127.0.0.1", port=0, time_scale=1.0, serve_scale=20.0,
                              stream_interval=1, api_key=None)
    placement = REF.placements["device"]
    core = ServerCore(REF, placement, PLAN["device"], args, "test")
    loop_task = asyncio.create_task(core._serve_loop())
    try:
        got = [n async for n, _ in core.generate(200, 1)]
    finally:
        loop_task.cancel()
    assert got == [1]
    queue = core.histograms["sglang:queue_time_seconds"]
    ttft = core.histograms["sglang:time_to_first_token_seconds"]
    assert ttft.sum >= placement.service.prefill_time_s(200) * 20 * 0.9
    assert sum(queue.counts) == 1
    assert queue.sum == pytest.approx(BATCH_WINDOW_S * 20, abs=0.1)


async def _first_tokens(core: ServerCore, sizes: list[int]) -> list[tuple[float, float]]:
    """Each request's arrival and first-token time; request i is sent when the list says
    (seconds after the first arrival), its arrival stamped then, as the HTTP layer stamps it.
    The delays count from the first arrival's stamp, not from the senders' start: on a busy
    machine a loop that stalls past them would otherwise send the whole list at once."""
    first: list[float] = []
    started = asyncio.Event()

    async def one(n_in: int, after: float) -> tuple[float, float]:
        if after:
            await started.wait()
            while (left := first[0] + after - time.monotonic()) > 0:
                await asyncio.sleep(left)
        arrived = time.monotonic()
        if not first:
            first.append(arrived)
            started.set()
        async for _, t in core.generate(n_in, 1, arrived=arrived):
            return arrived, t
        raise AssertionError("no token")
    return list(await asyncio.gather(*(one(n, d) for n, d in zip(sizes, DELAYS, strict=True))))


# A burst of 16 whose client stalls 15 ms half-way (opening connections, a collection
# pause): longer than the model's batch window at this scale, shorter than BURST_PAUSE_S.
DELAYS = [0.0] * 8 + [0.015] * 8


async def test_a_burst_the_client_spread_is_one_batch_served_as_the_model_plans_it() -> None:
    args = argparse.Namespace(host="127.0.0.1", port=0, time_scale=1.0, serve_scale=0.1,
                              stream_interval=1, api_key=None)
    core = ServerCore(REF, REF.placements["device"], PLAN["device"], args, "test")
    loop_task = asyncio.create_task(core._serve_loop())
    try:
        got = await _first_tokens(core, [800] * 16)
    finally:
        loop_task.cancel()
    arrivals, firsts = [a for a, _ in got], {t for _, t in got}
    # One prefill batch: every request's first token at the same step's end.
    assert len(firsts) == 1
    # Served as of its first arrival plus the model's window, not of its last arrival (at
    # least 15 ms later). Measured from the first arrival's own stamp, so a loop slow to start
    # the senders (a busy machine) moves both alike.
    assert max(arrivals) - min(arrivals) >= 0.015
    planned = (BATCH_WINDOW_S + REF.placements["device"].service.prefill_time_s(16 * 800)) * 0.1
    assert firsts.pop() - min(arrivals) == pytest.approx(planned, abs=0.01)


def test_a_hidden_node_is_left_out_of_server_info(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # --hide-node: the server looks like one on a real node (attach reads NVML and /proc);
    # without it, a loopback server names its folder.
    def info(hide: bool) -> dict:  # type: ignore[type-arg]
        args = argparse.Namespace(host="127.0.0.1", port=0, time_scale=1.0, serve_scale=1.0,
                                  stream_interval=1, api_key=None, hide_node=hide)
        core = ServerCore(REF, REF.placements["device"], PLAN["device"], args, "test")
        core.node_dir = tmp_path
        return core.server_info()["simulated"]
    assert info(False)["node_dir"] == str(tmp_path)
    assert "node_dir" not in info(True) and info(True)["placement"] == "device"
