"""What recording, replay and snapshots cost, on an hour of a 4-GPU node at 1 Hz.

Feeds a store the way a session does (gpu, host and server readings once a second for an
hour, a recorder attached) and prints: the recorder's CPU time per second of session and the
file's size; reading the recording back and seeking a replay to its end and to its middle;
and writing one snapshot folder (screen.svg left out: that is Textual's export) with the
size of each file. Figures, not pass/fail: the machine is shared and noisy.

    python benchmarks/bench_export.py [--seconds 3600]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from scene import gpu_device, host_data, server_data  # noqa: E402  (the SVG tests' fixed node)

from collectors.readings import GpuData, Reading, Status  # noqa: E402
from engram_top.export import snapshot  # noqa: E402
from engram_top.model.store import RunStore  # noqa: E402
from engram_top.record.recorder import Recorder, read_recording  # noqa: E402
from engram_top.record.replay import ReplaySession  # noqa: E402
from engram_top.seed import reference  # noqa: E402


async def main(seconds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hour.jsonl"
        store = RunStore()
        t0 = time.monotonic()
        now = [t0]
        # The recorder's clock follows the hour being made, not the seconds making it takes.
        recorder = Recorder(store, path, clock=lambda: now[0]).start()
        cpu0 = time.process_time()
        for k in range(seconds):
            t = now[0] = t0 + k
            used = 140.0 + 0.01 * (k % 50)
            gpus = tuple(gpu_device(i, used, 140.0, 90, 2e9 + k) for i in range(4))
            store.add("gpu", Reading("nvml", Status.OK, GpuData("570", gpus), at=t))
            store.add("host", Reading("host", Status.OK, host_data(240.0 + 0.001 * k), at=t))
            store.add("server", Reading("sglang", Status.OK, server_data(t), at=t))
            if k % 250 == 0:
                await asyncio.sleep(0)  # let the recorder's flush tick run
        recorder.close()
        cpu = time.process_time() - cpu0
        size = path.stat().st_size
        print(f"recorder: {seconds} s of readings (3 sources/s), {cpu / seconds * 1e3:.3f} ms "
              f"CPU per session second (store included), file {size / 1e6:.1f} MB "
              f"({size / seconds / 1e3:.1f} kB/s)")

        t = time.perf_counter()
        rec = read_recording(path)
        print(f"read_recording: {time.perf_counter() - t:.2f} s for {len(rec.records)} records")
        t = time.perf_counter()
        lazy = ReplaySession(path, paused=True, lazy=True)
        opened, at_open = time.perf_counter() - t, len(lazy.recording.records)
        await lazy.start()  # the rest is read on its thread
        while lazy.read_fraction < 1:
            await asyncio.sleep(0.01)
        print(f"ReplaySession(lazy=True), what `replay` opens: {opened * 1e3:.0f} ms to open "
              f"({at_open} records read then), the whole read on its thread "
              f"after {time.perf_counter() - t:.2f} s")
        await lazy.close()
        t = time.perf_counter()
        replay = ReplaySession(path, paused=True)
        print(f"ReplaySession() (read whole first): {time.perf_counter() - t:.2f} s")
        for label, where in (("to the end", replay.duration), ("to the middle",
                                                               replay.duration / 2)):
            t = time.perf_counter()
            replay.seek(where)
            print(f"seek {label}: {(time.perf_counter() - t) * 1e3:.0f} ms")

        ref = reference.default()
        t = time.perf_counter()
        taken = snapshot.prepare(Path(tmp) / "snaps", store, ref, svg=None)
        took_prepare = time.perf_counter() - t
        t = time.perf_counter()
        out = taken.write()
        took_write = time.perf_counter() - t
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e3:.0f} kB"
                          for p in sorted(out.iterdir()))
        print(f"snapshot folder: {took_prepare + took_write:.2f} s: prepare (on the UI loop) "
              f"{took_prepare * 1e3:.0f} ms, write (a thread) {took_write:.2f} s ({sizes})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=int, default=3600)
    asyncio.run(main(p.parse_args().seconds))
