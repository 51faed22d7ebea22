"""The dashboard driven as a user drives it: Textual's run_test and Pilot, over a real
simulated server (a real process, real HTTP on loopback) or a store filled by hand."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from helpers import GIB, StaticSession, screen_text, until
from scene import SEED_RESULTS

from collectors.readings import GpuData, GpuDevice, Reading, ServerData, Status
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.dialogs import HelpScreen
from engram_top.app.main import EngramTopApp
from engram_top.compare.run_result import RunResult
from engram_top.live.demo import DemoOptions, DemoSession
from engram_top.live.load import LoadSpec
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@pytest.mark.timeout(120)
async def test_live_demo_kill_and_quit(tmp_path) -> None:
    options = DemoOptions(placement="device", time_scale=0.03, node_dir=tmp_path / "node",
                          run_dir=tmp_path / "runs", poll_interval=0.5,
                          load=LoadSpec(concurrency=2, input_len=64, output_len=24))
    session = DemoSession(options)
    app = EngramTopApp(session)
    async with app.run_test(size=(150, 42)) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.state == "ready", 60, "the server to be ready")
        await until(pilot, lambda: "11.84M" in screen_text(app), 10, "the KV capacity")
        await until(pilot, lambda: "TTFT" in screen_text(app)
                    and session.store.load.get("completed", 0) > 0, 20, "served requests")
        text = screen_text(app)
        assert "READY" in text
        assert "119.043" in text  # SGLang's weights per GPU, as the seed reports them
        # NVML view of each GPU: context + weights + KV (full pool + the fixed SWA pool) + graphs
        assert "143.4/179" in text
        assert "+6.5 GiB" in text  # host memory since launch

        run = session.store.run
        server_pid = run.pid
        group = [server_pid] + [c.pid for c in psutil.Process(server_pid).children()]
        os.kill(server_pid, signal.SIGKILL)  # a crash, not a stop
        await until(pilot, lambda: run.state == "exited", 5, "the exit to be noticed")
        # Within a poll the GPUs are back at their baseline: the ranks died with the server.
        await until(pilot, lambda: all(
            d.used_bytes == 0 for d in session.store.latest["gpu"].data.devices), 5,
            "HBM to return")
        await until(pilot, lambda: "0.0/179" in screen_text(app), 3, "the HBM panel")
        await until(pilot, lambda: "connection refused" in screen_text(app), 3,
                    "the dead server to be shown")
        await until(pilot, lambda: "EXITED" in screen_text(app), 3, "the header to say so")
        # Said once in the events (the supervisor's line); the alert stays on screen.
        await until(pilot, lambda: "⚠ server device exited" in screen_text(app), 5,
                    "the server-died alert")
        assert [e.text for e in session.store.events if "exited" in e.text] == [
            "device exited (code -9)"]
        assert app.is_running

        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 15, "the app to quit")
    def live() -> list[int]:
        alive = []
        for pid in group:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        return alive

    # The session reaps what it started before quitting; a loaded machine may lag a moment.
    await until(None, lambda: not live(), 5, f"the server's processes {group} to go")
    assert not (tmp_path / "node" / "procs").exists() or not list(
        (tmp_path / "node" / "procs").glob("*.json"))


def filled_store() -> RunStore:
    store = RunStore()
    now = time.monotonic()
    store.run = RunFacts(scenario="demo/host-prefetch", placement="host-prefetch",
                         node="test node", time_scale=1.0, launched_wall=time.time(),
                         launched_at=now - 300, state="ready", ready_at=now - 27,
                         baseline_host_used=40 * GIB)
    dev = GpuDevice(index=0, name="NVIDIA B200", uuid="GPU-x", total_bytes=179 * GIB,
                    reserved_bytes=GIB // 2, used_bytes=140 * GIB, free_bytes=38 * GIB,
                    util_gpu_pct=97, pcie_rx_bytes_per_s=2e6)
    store.add("gpu", Reading("gpu", Status.OK, GpuData("t", (dev,)), at=now - 30))
    store.add("server", Reading("sglang", Status.OK, ServerData(
        url="http://127.0.0.1:1", healthy=True, max_total_num_tokens=42_700_288,
        token_usage=0.25, num_running_reqs=8, num_queue_reqs=3), at=now - 30))
    # Then both sources fail: the panels must say so, with the age of their last good values.
    store.add("gpu", Reading("gpu", Status.UNAVAILABLE,
                             message="no NVIDIA driver: libnvidia-ml.so.1 not found",
                             failing_since=now - 12))
    store.add("server", Reading("sglang", Status.ERROR,
                                message="metrics page: line 7: bad value",
                                failing_since=now - 10))
    return store


async def test_failing_sources_are_shown_with_their_age() -> None:
    session = StaticSession(filled_store())
    app = EngramTopApp(session)
    async with app.run_test(size=(150, 42)) as pilot:
        await until(pilot, lambda: "no NVIDIA driver" in screen_text(app),
                    what="the panels drawn from the store")
        text = screen_text(app)
        assert "last good value 30 s old" in text
        assert "metrics page: line 7: bad value" in text
        assert "42.70M tokens" in text  # the last good KV reading is kept on screen
        assert "3 queued" in text
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        assert "Quit" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen),
                    what="the help screen to close")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")
    assert session.closed


async def test_compare_screen_puts_runs_side_by_side_against_a_chosen_baseline() -> None:
    store = RunStore()
    now = time.monotonic()
    for name, results in SEED_RESULTS.items():
        facts = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                         launched_wall=time.time(), launched_at=now, state="stopped")
        facts.results = RunFigures.from_json(results)
        store.set_run(facts)
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        text = screen_text(app)
        assert "baseline: device" in text and "n=1 · baseline" in text
        assert "42.70M +260.6%" in text  # KV capacity gained, against device
        assert "72.201 -39.3%" in text and "191.8 -14.4%" in text
        assert "▶ host-prefetch" in text  # the live (latest) run is marked
        await pilot.press("b")  # host-prefetch becomes the baseline
        await until(pilot, lambda: "baseline: host-prefetch" in screen_text(app),
                    what="the new baseline")
        assert "11.84M -72.3%" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen),
                    what="the comparison to close")
        assert "baseline" not in screen_text(app)


async def test_compare_screen_treats_repeated_runs_as_trials_with_intervals() -> None:
    """Three runs of each placement: means, a 95% interval of each change, and ~ where
    the interval holds zero; runs loaded from a file join as another column."""
    store = RunStore()
    now = time.monotonic()
    ttft = {"device": (350.0, 352.0, 348.0), "host-prefetch": (404.0, 405.0, 403.0)}
    tpot = {"device": (26.0, 28.0, 24.0), "host-prefetch": (27.0, 24.0, 26.5)}
    for trial in range(3):
        for name in ("device", "host-prefetch"):
            facts = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                             launched_wall=time.time(), launched_at=now, state="stopped")
            facts.results = RunFigures.from_json({"gpus": 4, "ttft_mean_ms": ttft[name][trial],
                                                  "itl_mean_ms": tpot[name][trial],
                                                  "output_tok_s": 200.0})
            store.set_run(facts)
    imported = RunResult(
        scenario="bench_serving", placement=None, source="bench_serving:x.jsonl", trial=0,
        gpus=4, weights_gb=None, kv_tokens=None, host_delta_gib=None, ready_s=None,
        ttft_mean_s=0.7, tpot_mean_s=0.026, itl_mean_s=None, e2e_mean_s=None, ttft_p99_s=None,
        tpot_p99_s=None, output_tok_s=100.0, request_per_s=None)
    app = EngramTopApp(StaticSession(store), compare_with=[imported], price_per_gpu_hour=2.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        text = screen_text(app)
        assert "n=3" in text and "bench_serving" in text
        # TTFT: mean 404.0 vs 350.0 = +15.4%, paired interval tight around it.
        assert "404.0 +15.4%" in text and "[+14.5, +16.4]" in text
        # TPOT: 25.83 vs 26.0; the interval holds zero, so it is marked.
        assert "25.8 -0.6%" in text and "[-31.8, +31.8] ~" in text
        assert "700.0 +100.0%" in text  # the imported run, one trial: no interval
        assert "11.1111" in text  # 2 per GPU-hour x 4 GPUs at 200 tok/s, per Mtok


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [(160, 48), (100, 30)])
async def test_live_host_prefetch_shows_its_pools_and_the_engram_row(tmp_path, size) -> None:
    """DeepSeek-V4.1's dialect on screen: the full pool as the capacity with the other
    pools beside it, and the Engram row with the prefetch verdict, at any supported size."""
    options = DemoOptions(placement="host-prefetch", time_scale=0.02, node_dir=tmp_path / "node",
                          run_dir=tmp_path / "runs", poll_interval=0.5, load=None)
    session = DemoSession(options)
    app = EngramTopApp(session)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.state == "ready", 60, "the server to be ready")
        await until(pilot, lambda: "prefetch: engaged" in screen_text(app), 15,
                    "the prefetch verdict")
        await until(pilot, lambda: "capacity 42.70M tokens" in screen_text(app), 15,
                    "the full pool as the KV capacity")
        text = screen_text(app)
        assert "Engram host-prefetch · shared" in text
        if size[1] >= 48:  # room for every row: each pool's use and size
            assert "pools    full 0.0% · swa 0.0% of 112.6k · c4 10.68M · c128 333.6k" in text
            assert "GiB resident, pinned, 100% in huge pages" in text
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 15, "the app to quit")
