"""The dashboard driven as a user drives it: Textual's run_test and Pilot, over a real
simulated server (a real process, real HTTP on loopback) or a store filled by hand."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from helpers import screen_text, until

from engram_top.app.main import EngramTopApp
from engram_top.live.demo import DemoOptions, DemoSession
from engram_top.live.load import LoadSpec

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
