"""The simulated node under pressure from others, as real processes on 127.0.0.1: another
tenant's HBM (`sim serve --neighbour-hbm`) and host RAM (`--host-hog`), the Engram tables'
NUMA layouts (`--engram-layout`), and traffic that arrives while the server warms up.

What each asserts is what the node's collectors read through the simulated backends: the
neighbour in the GPUs' process lists, the hog in the host's used memory and its NUMA node,
never in the server's process tree; a server that plans its KV pool around what others hold
or fails as SGLang does when nothing is left; tenants gone with the server however it dies.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import uvicorn
from helpers import GIB, ServerSpec, SimServer, alive, free_port, until, wait_until
from prometheus_client.parser import text_string_to_metric_families

from collectors.host import sample as host_sample
from engram_top.seed import reference
from engram_top.sim import memory, sockets, state
from engram_top.sim.backends import SimGpuBackend, SimHostBackend
from engram_top.sim.core import WARMUP_HEADER, ServerCore
from engram_top.sim.http import build_app
from engram_top.sim.startup import RankHandle, Startup
from engram_top.sim.tenant import HOG_NAME, NEIGHBOUR_NAME
from scenarios.load_process import LoadProcess

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

REF = reference.default()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    """Start servers of the test's own; every one is stopped (its group, tenants included)
    on the way out, and none may leave a process behind."""
    started: list[SimServer] = []

    def start(name: str, placement: str, *extra: str, time_scale: float = 0.02) -> SimServer:
        server = SimServer(name, ServerSpec(placement, time_scale, tuple(extra)), tmp_path)
        started.append(server)
        return server

    try:
        yield start
    finally:
        left = {s.name: s.stop(grace=5.0).survivors for s in started}
        assert not any(left.values()), f"survivors: {left}"


def _tenants(node_dir: Path) -> dict[str, state.ProcState]:
    return {p.name: p for p in state.live_procs(node_dir)
            if p.name in (NEIGHBOUR_NAME, HOG_NAME)}


def test_a_neighbour_and_a_hog_are_other_tenants_the_server_plans_around(launch) -> None:  # type: ignore[no-untyped-def]
    server = launch("tenants", "device", "--neighbour-hbm", "10", "--neighbour-gpus", "2,3",
                    "--host-hog", "300", "--host-hog-node", "1").wait_ready()
    tenants = _tenants(server.node_dir)
    assert set(tenants) == {NEIGHBOUR_NAME, HOG_NAME}
    neighbour, hog = tenants[NEIGHBOUR_NAME], tenants[HOG_NAME]

    # NVML's view: the neighbour's 10 GiB on GPUs 2 and 3 only, under its own name and pid.
    gpus = SimGpuBackend(server.node_dir).sample()
    for dev in gpus.devices:
        others = [p for p in dev.processes if p.pid == neighbour.pid]
        if dev.index in (2, 3):
            assert [(p.name, p.used_bytes) for p in others] == [(NEIGHBOUR_NAME, 10 * GIB)]
        else:
            assert others == []
    # The server found 10 GiB less on its fullest GPU: its KV pool is that much smaller,
    # and every rank gets the same pool (SGLang sizes the pools alike on every rank).
    expected = memory.plan(REF, "device", 10 * GIB)
    assert 0 < expected.kv_tokens < memory.plan(REF, "device").kv_tokens
    info = httpx.get(f"{server.url}/server_info", timeout=5).json()
    assert info["max_total_num_tokens"] == expected.kv_tokens
    assert f"rest_memory={expected.kv_bytes / GIB:.2f} GB" in server.log_text()

    # /proc's view: the hog's 300 GiB are the host's used memory, on NUMA node 1, and in
    # no process of the server's tree (it detached: its parent is not the server).
    backend = SimHostBackend(server.node_dir)
    host = host_sample(backend, server.pid)
    assert host.used_bytes - server.baseline_host_used >= 300 * GIB
    nodes = backend.node_meminfo()
    assert nodes is not None
    assert nodes[1]["MemUsed"] - nodes[0]["MemUsed"] >= 300 * GIB - 32 * GIB
    tree = {server.pid, *(c.pid for c in psutil.Process(server.pid).children(recursive=True))}
    assert not tree & {neighbour.pid, hog.pid}
    assert psutil.Process(hog.pid).ppid() != server.pid
    assert sockets.node_of(hog, REF.gpus) == 1

    # Killed, the server takes its tenants along (their pipe closes), and their memory.
    os.kill(server.pid, signal.SIGKILL)
    assert server.wait_exit(5) == -signal.SIGKILL
    wait_until(lambda: not alive(neighbour.pid) and not alive(hog.pid), 10.0,
               "the tenants to leave with the server")
    wait_until(lambda: not state.live_procs(server.node_dir), 10.0, "the node to empty")
    assert all(d.used_bytes == 0 for d in SimGpuBackend(server.node_dir).sample().devices)


def test_a_neighbour_that_leaves_no_room_for_the_kv_pool_fails_the_start(launch) -> None:  # type: ignore[no-untyped-def]
    # 20 GiB of the device placement's 20.5 GiB KV budget: not one page of the full pool.
    server = launch("no-room", "device", "--neighbour-hbm", "20")
    assert server.wait_exit(60) == 1
    log = server.wait_log("Shutting down.")
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." \
        in log
    assert "Initialization failed. Not enough memory for the KV cache" in log
    assert "fired up" not in log
    wait_until(lambda: not state.live_procs(server.node_dir), 10.0, "the node to empty")


def test_a_neighbour_past_the_weights_is_cuda_out_of_memory(launch) -> None:  # type: ignore[no-untyped-def]
    server = launch("oom", "device", "--neighbour-hbm", "60", "--neighbour-gpus", "1")
    assert server.wait_exit(60) == 1
    log = server.wait_log("Shutting down.")
    assert "torch.OutOfMemoryError: CUDA out of memory." in log
    assert "GPU 1 has a total capacity" in log
    assert "Initialization failed. CUDA out of memory on GPU 1" in log


@pytest.mark.parametrize("option", [
    ("--neighbour-hbm", "193"), ("--neighbour-hbm", "nan"), ("--host-hog", "-1"),
    ("--neighbour-gpus", "4"), ("--neighbour-gpus", "a,b"), ("--host-hog-node", "2"),
    ("--engram-layout", "private"),
])
def test_tenant_and_layout_options_out_of_range_are_refused(option: tuple[str, str],
                                                            tmp_path: Path) -> None:
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "engram_top", "sim", "serve", "--node-dir",
                           str(tmp_path / "node"), "--port", "1", *option],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert f"argument {option[0]}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "node").exists()  # nothing started


@pytest.mark.parametrize(("layout", "word", "holders"), [
    ("shared", "shared", [0]), ("numa-replicated", "numa_shared", [0, 2]),
    ("per-rank", "per_rank", [0, 1, 2, 3]),
])
def test_the_table_layouts_hold_a_copy_per_node_or_per_rank(layout: str, word: str,
                                                            holders: list[int]) -> None:
    # Pure: which ranks hold a copy (the first rank on each NUMA node, or every rank).
    ranks = [RankHandle(r, None) for r in range(REF.gpus)]  # type: ignore[arg-type]
    startup = Startup(REF, REF.placements["host"], memory.plan(REF, "host"), ranks, 1.0)
    startup.layout = layout
    assert [r.rank for r in startup.table_holders()] == holders
    startup.weights_memory(1.0)
    tables = memory.plan(REF, "host").host_table_bytes
    assert [r.host_huge for r in ranks] == [tables if r.rank in holders else 0 for r in ranks]


def test_a_numa_replicated_server_holds_one_copy_on_each_numa_node(launch) -> None:  # type: ignore[no-untyped-def]
    server = launch("numa", "host", "--engram-layout", "numa-replicated").wait_ready()
    log = server.log_text()
    # SGLang's line from each copy's holder: TP0 (node 0) and TP2 (node 1), each table.
    for rank in (0, 2):
        for label in ("L1", "L14"):
            assert f" TP{rank}] engram host table {label}: layout=numa_shared," in log
    assert " TP1] engram host table" not in log and " TP3] engram host table" not in log
    nodes = SimHostBackend(server.node_dir).node_meminfo()
    assert nodes is not None
    tables = memory.plan(REF, "host").host_table_bytes
    for n in (0, 1):  # a copy in each node's shared memory
        assert nodes[n]["Shmem"] >= tables
        assert nodes[n]["ShmemHugePages"] == tables


def test_traffic_during_warm_up_gets_503_and_the_server_comes_up(launch) -> None:  # type: ignore[no-untyped-def]
    # Clients that knock from launch on, as a load balancer would: while the server warms
    # up each request is turned away with a 503 (never admitted ahead of the warm-up, whose
    # own request then timed out and crashed the server); once ready, served.
    server = launch("warm", "device", time_scale=0.05)
    answers: list[int] = []
    bodies: list[str] = []
    stop = threading.Event()

    def knock() -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                try:
                    r = client.post(f"{server.url}/generate", json={
                        "text": "a b c", "sampling_params": {"max_new_tokens": 64}})
                except httpx.ConnectError:
                    stop.wait(0.01)  # the port is not open yet
                    continue
                answers.append(r.status_code)
                if r.status_code == 503:
                    bodies.append(r.text)
                if r.status_code == 200:
                    return
    knockers = [threading.Thread(target=knock) for _ in range(4)]
    for t in knockers:
        t.start()
    try:
        server.wait_ready()
        wait_until(lambda: answers.count(200) >= 4, 30.0, "every client to be served")
    finally:
        stop.set()
        for t in knockers:
            t.join(30)
    assert set(answers) <= {200, 503}, answers
    assert all("warming up" in b for b in bodies)
    assert server.proc.alive()
    log = server.log_text()
    assert "fired up and ready to roll" in log and "Initialization failed" not in log


async def test_before_ready_only_the_warm_up_request_is_served() -> None:
    # The HTTP surface alone, in this process, over real loopback HTTP: each serving route
    # answers 503 before ready, but for the warm-up's own request (its token).
    args = argparse.Namespace(host="127.0.0.1", port=0, time_scale=1.0, serve_scale=0.01,
                              stream_interval=1, api_key=None, hicache_size=0)
    core = ServerCore(REF, REF.placements["device"], memory.plan(REF, "device"), args, "t")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(core), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve())
    loop = asyncio.create_task(core._serve_loop())
    bodies = {"/generate": {"text": "a b", "sampling_params": {"max_new_tokens": 2}},
              "/v1/completions": {"prompt": "a b", "max_tokens": 2},
              "/v1/chat/completions": {"messages": [{"role": "user", "content": "a b"}],
                                       "max_tokens": 2}}
    try:
        await until(None, lambda: server.started, 10.0, "the in-process server to listen")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            assert (await c.get("/health")).status_code == 503
            for path, body in bodies.items():
                r = await c.post(path, json=body)
                assert r.status_code == 503, path
                assert r.json()["error"]["code"] == 503
                assert r.headers["retry-after"] == "1"
                wrong = await c.post(path, json=body, headers={WARMUP_HEADER: "guess"})
                assert wrong.status_code == 503
            warm = await c.post("/generate", json=bodies["/generate"],
                                headers={WARMUP_HEADER: core.warmup_token})
            assert warm.status_code == 200
            assert warm.json()["meta_info"]["completion_tokens"] == 2
            core.ready = True
            for path, body in bodies.items():
                assert (await c.post(path, json=body)).status_code == 200, path
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        loop.cancel()


async def test_a_load_of_long_prompts_exhausts_the_kv_pool(launch) -> None:  # type: ignore[no-untyped-def]
    # `demo --concurrency 32 --prompt-tokens 1048576`'s load, its prompts sent as lengths:
    # 32 prompts of 0.5M to 1M tokens ask for more than the device pool's 11.84M, so the
    # scheduler admits what fits and queues the rest, far under its 256 running requests.
    server = launch("kv-full", "device", "--serve-scale", "0.02").wait_ready()
    load = LoadProcess(server.url, concurrency=32, input_len=1_048_000, output_len=4000,
                       count_prompt=True)
    assert "--count-prompt" in load.argv

    def gauges() -> dict[str, float]:
        page = httpx.get(f"{server.url}/metrics", timeout=5).text
        out = {}
        for family in text_string_to_metric_families(page):
            for sample in family.samples:
                if sample.labels.get("tp_rank") == "0":
                    out[sample.name] = sample.value
        return out

    await load.start()
    try:
        await until(None, lambda: (g := gauges())["sglang:num_queue_reqs"] > 0
                    and g["sglang:num_running_reqs"] > 0, 30.0, "requests queued for KV")
        g = gauges()
        assert g["sglang:num_running_reqs"] + g["sglang:num_queue_reqs"] <= 32
        assert g["sglang:num_running_reqs"] < 32  # the pool, not the request cap, holds them
        # As their prompts are prefilled, the admitted requests fill the pool.
        capacity = memory.plan(REF, "device").kv_tokens
        await until(None, lambda: gauges()["sglang:kv_used_tokens"] >= 0.5 * capacity, 60.0,
                    "the admitted prompts to fill half the pool")
        assert gauges()["sglang:num_queue_reqs"] > 0  # and the rest still wait
        assert load.stats.failed == 0
    finally:
        await load.stop()
