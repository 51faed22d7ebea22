"""The demo's load in a process of its own, against a real simulated server: its counters
come over, a stop ends it, and it ends by itself when the process that started it dies."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import psutil
from helpers import SimServer, alive, until, wait_until

from scenarios.load_process import LoadProcess


def drivers(url: str) -> list[int]:
    """Live load drivers aimed at ``url``."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if "scenarios.load_process" in cmd and url in cmd \
                and proc.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(proc.info["pid"])
    return out


async def test_the_load_runs_apart_and_stops(sim_device: SimServer) -> None:
    load = LoadProcess(sim_device.url, concurrency=2, input_len=32, output_len=8)
    await load.start()
    try:
        pid = load.pid
        assert pid is not None and pid in drivers(sim_device.url)
        await until(None, lambda: load.stats.completed >= 3, 30, "requests to complete")
        assert load.stats.sent >= load.stats.completed and load.stats.failed == 0
        assert load.stats.output_tokens >= 3
        assert "--api-key" not in " ".join(load.argv)
    finally:
        await load.stop()
    assert not alive(pid) and not drivers(sim_device.url)


async def test_the_loads_window_comes_over_with_its_counters(sim_device: SimServer) -> None:
    # A 3 s window: a whole one (the bins wait for it) within the test's patience.
    load = LoadProcess(sim_device.url, concurrency=2, input_len=32, output_len=8,
                       window_s=3.0, bounds={"ttft": 60.0})
    await load.start()
    try:
        await until(None, lambda: load.stats.window is not None
                    and load.stats.window.bin_tokens is not None
                    and load.stats.window.tpot_n >= 2, 30, "a whole window of requests")
        w = load.stats.window
        assert w is not None and w.window_s == 3.0 and w.bin_tokens is not None
        assert w.tpot_mean_s is not None and 0 < w.tpot_mean_s < 3.0
        assert w.tpot_sd_s is not None and w.tpot_sd_s >= 0
        assert 0 < sum(w.bin_tokens) <= load.stats.output_tokens
        assert w.bin_good is not None and 0 < sum(w.bin_good) <= load.stats.good
        assert "--window" in load.argv and "3.0" in load.argv
    finally:
        await load.stop()


def test_the_load_ends_when_its_parent_dies(sim_device: SimServer) -> None:
    parent = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parents[2])!r})
        from scenarios.load_process import LoadProcess
        async def main():
            load = LoadProcess({sim_device.url!r}, concurrency=1, input_len=16, output_len=4)
            await load.start()
            print(load.pid, flush=True)
            await asyncio.sleep(3600)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert alive(child)
        proc.send_signal(signal.SIGKILL)  # no stop, no close: the parent is just gone
        proc.wait(10)
        wait_until(lambda: not alive(child), 15, "the orphaned load driver to end")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not drivers(sim_device.url)


async def test_requests_within_the_bounds_count_as_good(sim_device: SimServer) -> None:
    loose = LoadProcess(sim_device.url, concurrency=2, input_len=32, output_len=8,
                        bounds={"ttft": 60.0, "tpot": 60.0})
    tight = LoadProcess(sim_device.url, concurrency=1, input_len=32, output_len=8,
                        bounds={"ttft": 1e-6})  # no first token comes that fast
    await loose.start()
    await tight.start()
    try:
        await until(None, lambda: loose.stats.completed >= 3 and tight.stats.completed >= 2,
                    30, "requests to complete")
    finally:
        await loose.stop()
        await tight.stop()
    assert loose.stats.good == loose.stats.completed >= 3  # the last report: counted alike
    assert tight.stats.good == 0 and tight.stats.completed >= 2
    assert "--bound" in loose.argv and "ttft=60.0" in loose.argv


def test_the_dashboard_says_goodput_from_the_loads_counts() -> None:
    from engram_top.model.facts import _goodput
    load = {"good": 18, "completed": 19, "failed": 1, "node_s": 9.0}
    assert _goodput(load) == (2.0, 0.9)  # requests per node second, their share
    assert _goodput({"good": 0, "completed": 0, "failed": 0, "node_s": 3.0}) is None
    assert _goodput({}) is None
