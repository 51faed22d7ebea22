"""The simulated node speaking vLLM's dialect (`sim serve --dialect vllm`), read from real
processes on 127.0.0.1 by the real vLLM readers: its start-up log through VllmLogParser,
its endpoints and /metrics through VllmCollector, with the numbers the same model gives
SGLang's dialect; the engine kind `simulated-vllm`; and the mixed plan
(scenarios/demo-mixed.toml) in the bench and on the dashboard.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import (
    API_KEY,
    ENGRAM_TOP,
    ROOT,
    ServerSpec,
    SimServer,
    free_port,
    screen_text,
    until,
    wait_until,
)

from collectors.readings import ServerData, Status
from collectors.units import GIB
from collectors.vllm.collector import VllmCollector
from collectors.vllm.startup_log import VllmLogParser
from engram_top.bench.plan import load_plan
from engram_top.seed import reference
from engram_top.sim import memory, state, vllm_log
from engram_top.sim.model import CLIP_MAX_NEW_TOKENS, INIT_NEW_TOKEN_RATIO
from engram_top.sim.server_args import CONTEXT_LEN
from scenarios import engines, scenario_file
from scenarios.workload import PROMPT_TOKENS_FIELD

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

REF = reference.default()
PLAN = {p: memory.plan(REF, p) for p in ("device", "host-prefetch")}
MIXED = ROOT / "scenarios" / "demo-mixed.toml"
VLLM = ("--dialect", "vllm")
# KV pressure on the device pool: 12 requests whose prompts fill it but for the output
# admission reserves (new_token_ratio 0.7 of at most 4096 tokens each); they write more.
PRESSURE_N, PRESSURE_OUT = 12, 8000
PRESSURE_IN = (PLAN["device"].kv_tokens // PRESSURE_N
               - int(min(PRESSURE_OUT, CLIP_MAX_NEW_TOKENS) * INIT_NEW_TOKEN_RATIO) - 1)
SERVERS = {
    # Requests served 10x faster than the node's, so a long prompt is cheap to hold.
    "device": ServerSpec("device", 0.02, (*VLLM, "--serve-scale", "0.1", "--api-key", API_KEY)),
    "host-prefetch": ServerSpec("host-prefetch", 0.02, VLLM),
    # 1000x: twelve prompts of ~1M tokens prefill in a second, and decode overflows soon.
    "pressure": ServerSpec("device", 0.02, (*VLLM, "--serve-scale", "0.001",
                                            "--stream-interval", "1000")),
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SimServer]]:
    """The module's simulated vLLM servers, launched together (their start-ups overlap)
    and stopped on every path."""
    base = tmp_path_factory.mktemp("sim-vllm")
    launched: dict[str, SimServer] = {}
    try:
        for name, spec in SERVERS.items():
            launched[name] = SimServer(f"vllm-{name}", spec, base)
        yield launched
    finally:
        left = {n: s.stop(grace=5.0).survivors for n, s in launched.items()}
        assert not any(left.values()), f"survivors: {left}"


def ready(servers: dict[str, SimServer], name: str) -> SimServer:
    server = servers[name]
    if server.stopped is not None:  # said plainly, rather than a wait for a dead port
        pytest.fail(f"sim server vllm-{name} was already stopped by another test")
    return server.wait_ready()


def facts_of(server: SimServer, needle: str = "Application startup complete."):  # type: ignore[no-untyped-def]
    parser = VllmLogParser()
    parser.feed_text(server.wait_log(needle, timeout=30))
    return parser.facts()


def collector(server: SimServer) -> VllmCollector:
    return VllmCollector(server.url, api_key=server.api_key)


async def poll_until(c: VllmCollector, predicate, timeout: float, what: str) -> ServerData:  # type: ignore[no-untyped-def]
    """Polls until the reading's data satisfies ``predicate`` (a condition, not a sleep)."""
    last: list[ServerData] = []

    async def ok() -> bool:
        reading = await c.poll()
        if reading.status is Status.OK and reading.data is not None:
            last[:] = [reading.data]
            return bool(predicate(reading.data))
        return False

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await ok():
        if loop.time() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s; last reading: {last}")
        await asyncio.sleep(0.1)
    return last[0]


# --------------------------------------------------------------------------- coming up


def test_port_refuses_until_the_engine_is_up_then_health_is_200(
        servers: dict[str, SimServer]) -> None:
    server = ready(servers, "device")
    # Like vLLM: the port is bound at launch, listened on once the engine is up; /health is
    # never 503 (no warm-up request after it opens).
    assert server.probes == ["refused", "200"]
    text = server.log_text()
    assert text.index("init engine (profile, create kv cache, warmup model)") \
        < text.index(f"Starting vLLM server on http://127.0.0.1:{server.port}") \
        < text.index("INFO:     Application startup complete.")
    with httpx.Client(base_url=server.url, timeout=5, headers=server.headers()) as c:
        health = c.get("/health")
        assert health.status_code == 200 and health.content == b""
        assert c.get("/version").json() == {"version": vllm_log.VERSION}
        models = c.get("/v1/models").json()["data"]
        assert models[0]["id"] == REF.model and models[0]["owned_by"] == "vllm"
        assert models[0]["max_model_len"] == CONTEXT_LEN
        # No SGLang endpoint in this dialect; FastAPI's 404.
        for path in ("/server_info", "/get_server_info", "/get_model_info", "/model_info"):
            resp = c.get(path)
            assert resp.status_code == 404 and resp.json() == {"detail": "Not Found"}, path
        assert c.post("/generate", json={"text": "a"}).status_code == 404
    # Its workers are the rank processes, named as vLLM's are.
    names = sorted(p.name for p in state.live_procs(server.node_dir))
    assert names == ["VLLM::Worker_TP0", "VLLM::Worker_TP1", "VLLM::Worker_TP2",
                     "VLLM::Worker_TP3", "vllm::APIServer"]


def test_host_placement_is_refused() -> None:
    res = subprocess.run([*ENGRAM_TOP, "sim", "serve", *VLLM, "--placement", "host"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert "vLLM has no 'host' placement" in res.stderr and "host-prefetch" in res.stderr


def test_a_failed_start_is_read_as_vllms(tmp_path: Path) -> None:
    res = subprocess.run([*ENGRAM_TOP, "sim", "serve", *VLLM, "--fail-at", "weights",
                          "--time-scale", "0.01", "--port", str(free_port()), "--node-dir",
                          str(tmp_path / "node")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    parser = VllmLogParser()
    parser.feed_text(res.stdout)
    f = parser.facts()
    assert f.failed_in == "weights" and not f.ready
    assert "RuntimeError: simulated failure during weights" in res.stdout
    assert "EngineCore failed to start." in res.stdout
    assert not state.live_procs(tmp_path / "node")  # its workers went with it


# --------------------------------------------------------------------------- the log


def log_span_s(text: str) -> float:
    """Seconds from a vLLM log's first timed line to the last time before its ready line."""
    stamps = []
    for line in text.splitlines():
        if "Application startup complete" in line:
            break
        m = re.search(r" (?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d (\d\d):(\d\d):(\d\d) ", line)
        if m:
            h, mi, sec = map(int, m.groups())
            stamps.append(h * 3600 + mi * 60 + sec)
    assert stamps, "no timed line before the ready line"
    return float((stamps[-1] - stamps[0]) % 86400)


@pytest.mark.parametrize("name", ["device", "host-prefetch"])
def test_the_parser_reads_the_models_figures_from_its_log(
        servers: dict[str, SimServer], name: str) -> None:
    server = ready(servers, name)
    plan, seed = PLAN[server.placement], REF.placements[server.placement]
    f = facts_of(server)
    text = server.log_text()
    # vLLM's own lines, prefixed with its process tags.
    assert re.search(r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[api_utils\.py:"
                     r"\d+\] .* version 0\.32\.0", text, re.MULTILINE)
    assert re.search(r"^\(Worker_TP0 pid=\d+\) INFO .* \[gpu_model_runner\.py:\d+\] Model "
                     r"loading took [\d.]+ GiB memory and [\d.]+ seconds$", text, re.MULTILINE)
    assert "simulated by engram-top" in text  # nobody takes it for a measured vLLM
    assert f.ready and f.errors == () and f.scheduler_extra["version"] == vllm_log.VERSION
    # The model's figures, as vLLM rounds them (format_gib: two places).
    rank = f.ranks[0]
    assert rank.weights_gb == pytest.approx(seed.weights_gib, abs=0.005)
    assert rank.kv_total_gb == pytest.approx(plan.kv_bytes / GIB, abs=0.005)
    assert f.kv_capacity_tokens == f.max_total_num_tokens == plan.kv_tokens
    assert f.scheduler_extra["kv_device"] == "GPU"
    assert rank.graph_mem_usage_gb == pytest.approx(REF.graphs_gib, abs=0.005)
    assert f.context_len == CONTEXT_LEN
    assert f.max_running_requests == seed.service.max_running_requests
    assert f.server_args is not None and f.server_args.tp_size == REF.gpus
    assert set(f.startup_timings_s) == {"load_weights", "compile", "init_engine"}
    # torch.compile before the KV cache is sized, graph capture after (its phase again).
    assert [s.phase for s in f.timeline] == ["distributed_init", "weights", "graphs",
                                             "kv_pool", "graphs", "http", "ready"]
    # Launch to ready, as the log's own times say: its first timed line to the last time
    # before uvicorn's untimed "Application startup complete." (vLLM's lines carry whole
    # seconds). The simulated start-up counts from the process's launch, so the span is at
    # most the seed's ready_s scaled (and a second of rounding); on a machine loaded enough
    # that the imports outlast the scaled phases, every line lands in one second.
    took = f.ready_at - f.launch_at
    assert took == log_span_s(text), took
    assert took <= seed.ready_s * 0.02 + 1.0, took
    if name == "device":
        assert f.server_args.raw["engram_config"] == {"cpu_offload": False}
        assert f.engram_config == {}
    else:
        assert "engram_config" not in f.server_args.raw  # vLLM's default: offloaded
        e = f.engram_config
        assert (e["placement"], e["pinned"], e["replication"]) == ("cpu", "true", "per_rank")
        # Two tables on each of the four ranks: the model's Engram tables in all.
        assert float(e["size_gib"]) * 2 * REF.gpus == pytest.approx(
            plan.host_table_bytes / GIB, abs=0.05)
        assert len(f.engram_messages) == 2 * REF.gpus


def test_a_stop_is_read_as_vllms_shutdown(servers: dict[str, SimServer]) -> None:
    server = ready(servers, "host-prefetch")
    assert not server.stop(grace=10.0).survivors
    f = facts_of(server, "Application shutdown complete.")
    assert f.phase == "stopped" and f.stopping_at is not None and f.stopped_at is not None
    assert "[shutdown] EngineCore: trigger received signal=SIGTERM" in server.log_text()


# --------------------------------------------------------------------------- HTTP


async def _complete(client: httpx.AsyncClient, body: dict) -> dict:
    resp = await client.post("/v1/completions", json=body)
    resp.raise_for_status()
    return resp.json()


async def test_the_collector_reads_capacity_usage_and_latency(
        servers: dict[str, SimServer]) -> None:
    server = ready(servers, "device")
    plan = PLAN["device"]
    c = collector(server)
    headers = server.headers()
    try:
        idle = await poll_until(c, lambda d: d.max_total_num_tokens is not None, 10, "a page")
        assert idle.max_total_num_tokens == plan.kv_tokens
        assert idle.extra["capacity_from"] == "kv_cache_size_tokens"
        assert idle.extra["cache_config"]["num_gpu_blocks"] == str(plan.kv_tokens // 256)
        assert idle.version == vllm_log.VERSION and idle.model_path == REF.model
        assert idle.num_running_reqs == 0 and idle.token_usage == 0
        async with httpx.AsyncClient(base_url=server.url, timeout=60, headers=headers) as h:
            # The key guards /v1, as vLLM's does; /metrics and /health answer anyone.
            async with httpx.AsyncClient(base_url=server.url, timeout=5) as anon:
                assert (await anon.post("/v1/completions", json={"prompt": "a"})).status_code \
                    == 401
                assert (await anon.get("/health")).status_code == 200
            # One long prompt (as its length: the simulator's own field) holds KV a while.
            big = asyncio.create_task(_complete(h, {
                "prompt": "x", PROMPT_TOKENS_FIELD: 200_000, "max_tokens": 400}))
            busy = await poll_until(c, lambda d: (d.num_running_reqs or 0) >= 1
                                    and (d.token_usage or 0) > 0.015, 30, "the KV in use")
            assert busy.token_usage == pytest.approx(200_000 / plan.kv_tokens, rel=0.1)
            small = [await _complete(h, {"prompt": "the engram table", "max_tokens": 8}),
                     (await h.post("/v1/chat/completions", json={
                         "messages": [{"role": "user", "content": "where are the tables"}],
                         "max_tokens": 8})).json()]
            assert small[0]["usage"] == {"prompt_tokens": 3, "completion_tokens": 8,
                                         "total_tokens": 11}
            assert small[1]["object"] == "chat.completion"
            assert small[1]["usage"]["prompt_tokens"] == 4
            assert (await big)["usage"]["completion_tokens"] == 400
        done = await poll_until(c, lambda d: d.ttft is not None and d.ttft.count >= 3
                                and d.num_running_reqs == 0, 15, "three requests' figures")
        for q in (done.ttft, done.itl, done.e2e, done.tpot, done.queue_time):
            assert q is not None and q.count >= 3 and q.p50 is not None
        assert done.itl.count >= 399 + 2 * 7  # one observation per token after the first
        assert done.output_tokens_per_s and done.output_tokens_per_s > 0
        assert done.token_usage == 0 and done.retracted_per_s == 0
        assert done.page_problems == ()
        # The same figures the model gives SGLang's dialect: served 10x fast, a decode step
        # of one request takes the service model's step, scaled.
        step = REF.placements["device"].service.decode_s(1) * 0.1
        assert done.itl.mean == pytest.approx(step, rel=0.5)
        page = httpx.get(f"{server.url}/metrics", timeout=5).text
        assert "[modelled: engram-top's simulated node, not a measured vLLM]" in page
        assert re.search(r'^engram_top:simulated_info\{dialect="vllm",placement="device",'
                         r'model="seed-calibrated"', page, re.MULTILINE)
        assert 'vllm:request_success_total{engine="0",finished_reason="length",' \
               f'model_name="{REF.model}"}} 3.0' in page
        assert 'le="2560.0"' in page and 'le="7680.0"' in page  # vLLM's buckets
    finally:
        await c.close()


async def test_kv_pressure_preempts(servers: dict[str, SimServer]) -> None:
    server = ready(servers, "pressure")
    c = collector(server)

    async def one(h: httpx.AsyncClient) -> None:
        body = {"prompt": "x", PROMPT_TOKENS_FIELD: PRESSURE_IN, "max_tokens": PRESSURE_OUT,
                "stream": True}
        async with h.stream("POST", "/v1/completions", json=body) as resp:
            async for _ in resp.aiter_bytes():
                pass

    async with httpx.AsyncClient(base_url=server.url, timeout=120) as h:
        tasks = [asyncio.create_task(one(h)) for _ in range(PRESSURE_N)]
        try:
            usage: list[float] = []

            def preempted(d: ServerData) -> bool:
                usage.append(d.token_usage or 0.0)
                return (d.retracted_per_s or 0) > 0
            page = await poll_until(c, preempted, 40, "a preemption")
            assert max(usage) > 0.99  # the twelve prompts filled the cache first
            assert page.num_queue_reqs >= 1  # the preempted request waits to be recomputed
        finally:
            for t in tasks:
                t.cancel()  # the streams close: the server aborts them
            await asyncio.gather(*tasks, return_exceptions=True)
            await c.close()
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    n = re.search(r"^vllm:num_preemptions_total\{[^}]*\} ([\d.]+)$", text, re.MULTILINE)
    assert n and float(n.group(1)) >= 1

    def ended() -> bool:
        """Every request ended, written out or aborted as its stream closed; none is left
        holding KV."""
        page = httpx.get(f"{server.url}/metrics", timeout=5).text
        counts = {m[0]: float(m[1]) for m in re.findall(
            r'^vllm:request_success_total\{engine="0",finished_reason="(\w+)",[^}]*\} (\S+)$',
            page, re.MULTILINE)}
        return counts.get("length", 0) + counts.get("abort", 0) == PRESSURE_N \
            and re.search(r"^vllm:kv_cache_usage_perc\{[^}]*\} 0\.0$", page, re.MULTILINE) \
            is not None
    wait_until(ended, 15, "the twelve requests to end")


# --------------------------------------------------------------------------- the engine


def test_the_simulated_vllm_engine(tmp_path: Path) -> None:
    sf = scenario_file.load(MIXED)
    kinds = {n: (sc.kind, sc.engine.display, sc.placement) for n, sc in sf.scenarios.items()}
    assert kinds == {
        "sglang-device": ("simulated", "SGLang (simulated)", "device"),
        "sglang-host-prefetch": ("simulated", "SGLang (simulated)", "host-prefetch"),
        "vllm-host-prefetch": ("simulated-vllm", "vLLM (simulated)", "host-prefetch"),
        "vllm-device": ("simulated-vllm", "vLLM (simulated)", "device")}
    sc = sf.scenarios["vllm-host-prefetch"]
    engine = engines.get("simulated-vllm")
    assert engine.simulated_node and engine.follows_reference and engine.speaks == "vLLM"
    argv = sc.argv(None, Path("/tmp/node"))
    assert argv[1:4] == ["-m", "engram_top", "sim"] and argv[-2:] == ["--dialect", "vllm"]
    assert sc.launch_env() == {}  # no SGLang Engram switches in its environment
    assert engine.clock(sc) == (0.1, 1.0)
    # vLLM's readiness: /health and a first page with its families.
    assert engine.readiness.confirm_path == "/metrics" and not engine.readiness.log_decides
    bench = load_plan(ROOT / "scenarios" / "demo-mixed-bench.toml")
    assert bench.scenarios_file == MIXED and bench.baseline in bench.scenarios
    bad = MIXED.read_text().replace('placement = "device"\nport = 30124',
                                    'placement = "host"\nport = 30124')
    path = tmp_path / "mixed.toml"
    path.write_text(bad)
    with pytest.raises(scenario_file.ScenarioError) as info:
        scenario_file.load(path)
    assert "vLLM has no host placement without prefetch" in str(info.value)


# --------------------------------------------------------------------------- the mixed plan

@pytest.mark.timeout(90)
async def test_the_dashboard_fills_the_vllm_panels(tmp_path: Path) -> None:
    from engram_top.app.main import EngramTopApp
    from engram_top.live.load import LoadSpec
    from engram_top.live.session import Session, SessionOptions
    options = SessionOptions(scenario_file=MIXED, start="vllm-host-prefetch",
                             state_dir=tmp_path / "state", node_dir=tmp_path / "node",
                             poll_interval=0.5, free_ports=True, time_scale=0.02,
                             load=LoadSpec(concurrency=2, input_len=64, output_len=16))
    session = Session(options)
    app = EngramTopApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.state == "ready", 60, "vLLM to be ready")
        await until(pilot, lambda: "42.70M" in screen_text(app), 15, "its KV capacity")
        await until(pilot, lambda: session.store.load.get("completed", 0) > 2
                    and "TTFT" in screen_text(app), 20, "served requests")
        server = session.store.data("server")
        assert server is not None and server.ttft is not None and server.ttft.count > 0
        assert server.token_usage is not None
        text = screen_text(app)
        assert "vLLM" in text and "READY" in text
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 15, "the app to quit")


async def test_attach_without_engine_reads_a_vllm_server_as_vllm(
        servers: dict[str, SimServer], tmp_path: Path) -> None:
    # `engram-top attach URL` with no --engine: the page's vllm: names decide, and the
    # panels show vLLM's figures rather than the SGLang reader's "not my page".
    from engram_top.app.main import EngramTopApp
    from engram_top.live.session import Session, SessionOptions
    server = ready(servers, "device")  # host-prefetch's is stopped by a test above
    session = Session(SessionOptions(attach=(server.url,), api_key=server.api_key, load=None,
                                     poll_interval=0.5, state_dir=tmp_path / "state"))
    app = EngramTopApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.engine == "vLLM", 20, "the engine read off its page")
        await until(pilot, lambda: "11.84M" in screen_text(app), 20, "its KV capacity")
        server_data = session.store.data("server")
        assert server_data is not None and server_data.extra.get("engine") == "vllm"
        assert any("its /metrics page is vLLM's" in e.text for e in session.store.events)
        assert "vLLM server's page" not in screen_text(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 15, "the app to quit")


def test_a_snapshot_of_an_attached_vllm_server_names_its_engine(
        servers: dict[str, SimServer], tmp_path: Path) -> None:
    server = ready(servers, "device")
    # No --engine: the CLI leaves it to the page.
    out = subprocess.run([*ENGRAM_TOP, "snapshot", "--attach", server.url, "--after", "1",
                          "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"),
                              "ENGRAM_TOP_API_KEY": server.api_key or ""})
    assert out.returncode == 0, out.stderr
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("engram-top-")]
    snap = json.loads((folder / "snapshot.json").read_text())
    assert snap["runs"][0]["engine"] == "vLLM"
    assert snap["readings"]["server"]["data"]["extra"]["engine"] == "vllm"
