"""Memory over an hour: the dashboard replaying an hour-long recording at 16x, its RSS at
one minute of recording time and at sixty (and between), and whether the replay keeps up.

Records an hour of a 4-GPU node at 1 Hz the way a session does (gpu, host and server
readings, a run, a server log growing), then plays it at 16x in the real dashboard
(Textual's headless driver, 160x50) and samples this process's RSS as the recording's
position passes each mark. The hour takes 225 s. Figures, not pass/fail.

    python benchmarks/bench_rss.py [--seconds 3600] [--speed 16]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from scene import _log_line, gpu_device, host_data, server_data  # noqa: E402

from collectors.readings import GpuData, Reading, Status  # noqa: E402
from engram_top.app.main import EngramTopApp  # noqa: E402
from engram_top.model.store import RunFacts, RunStore  # noqa: E402
from engram_top.record.recorder import Recorder  # noqa: E402
from engram_top.record.replay import ReplaySession  # noqa: E402

MARKS = (60, 600, 1200, 1800, 2400, 3000, 3540)  # recording seconds to sample RSS at


async def record(path: Path, seconds: int) -> None:
    store = RunStore()
    t0 = time.monotonic()
    now = [t0]
    # The recorder's clock follows the hour being made, not the seconds it takes to make it.
    recorder = Recorder(store, path, clock=lambda: now[0]).start()
    run = RunFacts(scenario="host-prefetch", placement="host-prefetch", node="n",
                   time_scale=1.0, launched_wall=time.time(), launched_at=t0, state="ready",
                   ready_at=t0 + 1, baseline_host_used=40 * 2**30)
    run.log_lines = deque(maxlen=400)
    store.set_run(run)
    for k in range(seconds):
        t = now[0] = t0 + k
        gpus = tuple(gpu_device(i, 140.0 + 0.01 * (k % 50), 140.0, 90, 2e9 + k)
                     for i in range(4))
        store.add("gpu", Reading("nvml", Status.OK, GpuData("570", gpus), at=t))
        store.add("host", Reading("host", Status.OK, host_data(240.0 + 0.001 * k), at=t))
        store.add("server", Reading("sglang", Status.OK, server_data(t), at=t))
        run.log_lines.append((time.time(), _log_line(0, f"Decode batch, #running-req: 8, "
                                                        f"#token: {k}", 0)))
        run.lines_seen += 1
        store.bump("run")
        if k % 50 == 0:
            await asyncio.sleep(0)  # the recorder's ticks
    recorder.close()


async def replay(path: Path, speed: float) -> None:
    session = ReplaySession(path, speed=speed, lazy=True)
    app = EngramTopApp(session, clock=session.clock)
    me = psutil.Process()
    samples: list[tuple[float, float, float]] = []  # (position, RSS MiB, real seconds)
    started = time.monotonic()
    async with app.run_test(size=(160, 50)) as pilot:
        for mark in MARKS:
            if mark > session.duration:
                break
            while session.position < mark and session.playing:
                await pilot.pause(0.2)
            samples.append((session.position, me.memory_info().rss / 2**20,
                            time.monotonic() - started))
        late = max(0.0, (time.monotonic() - started) - session.position / speed)
        await pilot.press("q")
    for pos, rss, real in samples:
        print(f"at {pos / 60:5.1f} min of the recording ({real:6.1f} s played): RSS {rss:.0f} MiB")
    first, last = samples[0][1], samples[-1][1]
    print(f"RSS from the first to the last mark: {last - first:+.0f} MiB ({last / first:.2f}x); "
          f"the replay ran {late:.1f} s behind {speed:g}x at its last mark")


async def main(seconds: int, speed: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hour.jsonl"
        await record(path, seconds)
        print(f"recording: {seconds} s, {path.stat().st_size / 1e6:.1f} MB")
        await replay(path, speed)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=3600)
    p.add_argument("--speed", type=float, default=16.0)
    args = p.parse_args()
    asyncio.run(main(args.seconds, args.speed))
