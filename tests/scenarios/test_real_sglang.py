"""A real SGLang server on this CPU (scenarios/tiny-cpu.toml): launched, followed through its
start-up phases, measured, and switched to the variant with the larger KV pool.

Needs the environment scripts/setup-sglang-cpu.sh builds (the README's test command runs
it). Outside CI a missing environment skips these tests, saying why; in CI it fails them.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import until

from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions
from scenarios.ports import port_in_use
from scenarios.shm_sweep import FAMILIES

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-sglang"
READY = (VENV / "bin" / "python").exists() and (VENV / "tiny-llama" / "config.json").exists()
if not READY and not os.environ.get("CI"):
    pytest.skip("no SGLang CPU environment: run scripts/setup-sglang-cpu.sh",
                allow_module_level=True)


def tree(pid: int) -> list[int]:
    try:
        return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(pids: list[int]) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


API_KEY = "sk-real-sglang-from-a-file"


def keyed_copy(tmp_path: Path) -> Path:
    """tiny-cpu.toml with an API key on its 16k variant (paths made absolute)."""
    text = (ROOT / "scenarios" / "tiny-cpu.toml").read_text()
    text = text.replace('"../.venv-sglang', f'"{VENV}')
    text = text.replace("[scenarios.tiny-16k]\n", f'[scenarios.tiny-16k]\napi_key = "{API_KEY}"\n')
    path = tmp_path / "tiny-cpu.toml"
    path.write_text(text)
    return path


@pytest.mark.timeout(400)
async def test_real_sglang_start_measure_switch(tmp_path: Path) -> None:
    assert READY, "the SGLang CPU environment is missing: run scripts/setup-sglang-cpu.sh"
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    session = Session(SessionOptions(
        scenario_file=keyed_copy(tmp_path), start="tiny-8k",
        state_dir=tmp_path / "state", free_ports=True, poll_interval=0.5,
        load=LoadSpec(concurrency=2, input_len=24, output_len=16)))
    try:
        await session.start()
        run = session.run
        assert run is not None
        await until(None, lambda: run.state != "starting", 300, "the server's start-up")
        assert run.state == "ready", f"{run.failure}\n" + "\n".join(line for _, line in run.lines)
        # Through its phases, from the real log: weights and the KV pool before ready.
        facts = run.parser.facts()
        assert facts.ranks[0].weights_type == "LlamaForCausalLM"
        assert facts.ranks[0].kv_tokens == 8192
        assert facts.max_total_num_tokens == 8192
        assert facts.ready and facts.uvicorn_url is not None
        timeline = [span.phase for span in facts.timeline]
        assert timeline.index("weights") < timeline.index("kv_pool") < timeline.index("ready")
        assert 0 < run.ready_s < 300
        # Measured through the collectors: KV capacity, and a real load served.
        store = session.store
        await until(None, lambda: store.data("server") is not None
                    and store.data("server").healthy
                    and store.data("server").max_total_num_tokens == 8192, 30,
                    "the server's KV capacity in a healthy reading")
        await until(None, lambda: store.load.get("completed", 0) >= 4, 60,
                    "requests served by the real server")
        server = store.data("server")
        assert server.healthy and server.ranks[0]["max_total_num_tokens"] == 8192
        # No GPU here: the scenario list and comparison take the server's own figures.
        await until(None, lambda: store.run.results.kv_tokens == 8192, 10,
                    "the run's KV capacity among its figures")
        assert store.run.model.endswith("tiny-llama")
        # A Llama has no Engram tables.
        assert store.run.engram is None or store.run.engram.placement is None
        host = store.data("host")
        assert host.server_tree is not None and host.server_tree.rss_bytes > 500 * 1024**2
        first_pids = tree(run.pid)
        assert len(first_pids) >= 3  # launcher, scheduler, detokenizer
        first_port = run.scenario.port

        # Switch to the variant with twice the KV pool.
        new = await session.switch("tiny-16k")
        assert not alive(first_pids), "processes of the first server survived the switch"
        assert not port_in_use("127.0.0.1", first_port)
        # The session's wait, not the supervisor's: it copies the run's state into the store's
        # facts, which the assertions below read (the watch loop would, 50 ms later).
        assert await session.wait_ready(300), new.failure
        await until(None, lambda: store.data("server") is not None
                    and store.data("server").healthy
                    and store.data("server").max_total_num_tokens == 16384, 30,
                    "the new KV capacity in a healthy reading")
        assert store.history["tiny-8k"].state == "stopped"
        # Both runs compared on their own figures; the seed's (DeepSeek's) are no reference.
        from engram_top.compare.runs import comparison
        from engram_top.seed import reference
        await until(None, lambda: store.run.results.kv_tokens == 16384, 10, "its figures")
        c = comparison(store.runs, reference=reference.default())
        assert c is not None and c.row("kv_tokens").cells["tiny-16k"].mean == 16384
        assert c.row("kv_tokens").cells["tiny-8k"].mean == 8192
        assert all(not row.reference for row in c.rows)
        assert store.history["tiny-16k"].state == "ready"
        assert new.parser.facts().ranks[0].kv_tokens == 16384
        second_pids = tree(new.pid)
        # Its API key went in a --config YAML file, not on any command line `ps` shows; the
        # real server took it from there (it refuses a request without it), and the file
        # is gone now that the server is up.
        for pid in second_pids:
            assert API_KEY not in " ".join(psutil.Process(pid).cmdline())
        assert "--config" in psutil.Process(new.pid).cmdline()
        async with httpx.AsyncClient(base_url=new.scenario.url, timeout=10) as client:
            assert (await client.get("/server_info")).status_code == 401
            keyed = await client.get("/server_info",
                                     headers={"Authorization": f"Bearer {API_KEY}"})
            assert keyed.status_code == 200
        assert new.key_file is not None and not new.key_file.exists()
        # A real SGLang drains on SIGTERM to its launcher: no crash path, no SIGKILL needed.
        assert run.stop_result is not None and not run.stop_result.killed
        first_log = run.log_path.read_text()
        assert "SIGTERM received" in first_log and "crashed" not in first_log
    finally:
        await session.close()
    assert not alive(second_pids), "processes of the second server survived the close"
    # SGLang unlinks its load-snapshot segments only on a clean exit: each stop left one in
    # /dev/shm (host RAM) for good, until the supervisor swept what its servers left.
    if os.path.isdir("/dev/shm"):
        left = {n for n in os.listdir("/dev/shm") if n.startswith(FAMILIES)} - shm_before
        assert not left, left


@pytest.mark.timeout(400)
async def test_bench_runs_on_the_real_cpu_server(tmp_path: Path) -> None:
    assert READY, "the SGLang CPU environment is missing: run scripts/setup-sglang-cpu.sh"
    from engram_top.bench.plan import load_plan
    from engram_top.bench.runner import run_bench
    plan = load_plan(ROOT / "scenarios" / "tiny-cpu-bench.toml")
    report = await run_bench(plan, tmp_path / "out", say=lambda text: None)
    results = {r["scenario"]: r for r in report["results"]}
    assert results["tiny-8k"]["kv_tokens"] == 8192 and results["tiny-16k"]["kv_tokens"] == 16384
    for r in results.values():
        assert r["completed"] == 16 and r["failed"] == 0
        assert r["ttft_mean_s"] > 0 and r["tpot_mean_s"] > 0 and r["output_tok_s"] > 0
        assert 0 < r["ready_s"] < 300
    rows = {row["key"]: row for row in report["comparison"]["rows"]}
    assert rows["kv_ratio"]["cells"]["tiny-16k"]["mean"] == pytest.approx(2.0)
    assert (tmp_path / "out" / "report.md").read_text().count("tiny-16k") >= 1
    # A Llama's bench: no column of the seed's DeepSeek figures.
    assert all(not row["reference"] for row in rows.values())
    assert "seed reference" not in (tmp_path / "out" / "report.md").read_text()
    assert len((tmp_path / "out" / "requests.csv").read_text().splitlines()) == 33
