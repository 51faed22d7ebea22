"""CPU time per poll of each source, against a running simulated node.

Starts one simulated server (device placement, fast start-up), drives a light load so the
metrics page carries histograms, then polls each collector N times and prints the CPU
seconds this process spent per poll (all threads: thread-pool polls count too) and the wall
time per poll. Figures, not pass/fail: the machine is shared and noisy.

    python benchmarks/bench_poll.py [--polls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.host import HostCollector  # noqa: E402
from collectors.nvml import GpuCollector  # noqa: E402
from collectors.sglang.collector import SglangCollector  # noqa: E402
from collectors.sglang.startup_log import StartupLogParser  # noqa: E402
from engram_top.live.demo import DemoOptions, DemoSession  # noqa: E402
from engram_top.live.load import LoadSpec  # noqa: E402
from engram_top.sim.backends import SimGpuBackend, SimHostBackend  # noqa: E402


async def measure(name: str, poll, n: int) -> None:  # type: ignore[no-untyped-def]
    await poll()  # warm: first-time imports and connections
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        reading = await poll()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    status = getattr(reading, "status", "ok")
    print(f"{name:28s} cpu/poll median {statistics.median(cpu) * 1e3:7.3f} ms   "
          f"wall/poll median {statistics.median(wall) * 1e3:7.3f} ms   "
          f"(n={n}, last status {status})")


async def main(polls: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-"))
    session = DemoSession(DemoOptions(
        placement="host-prefetch", time_scale=0.02, node_dir=tmp / "node", run_dir=tmp / "runs",
        poll_interval=5.0, load=LoadSpec(concurrency=4, input_len=256, output_len=64)))
    await session.start()
    try:
        if not await session.wait_ready(60):
            raise SystemExit("the simulated server did not become ready")
        await asyncio.sleep(5)  # let the load fill the histograms
        run = session.store.run
        assert run is not None and run.url and run.pid and run.log_path
        node = tmp / "node"
        gpu = GpuCollector(SimGpuBackend(node))
        host = HostCollector(SimHostBackend(node), root_pid=run.pid)
        sglang = SglangCollector(run.url)
        page_bytes = len((await sglang.client.get("/metrics")).content)
        tree = len(host.backend.children(run.pid) or []) + 1
        print(f"simulated node: 4 GPUs, server pid tree of {tree} processes, "
              f"/metrics page {page_bytes:,} bytes, load running\n")
        await measure("gpu (simulated backend)", gpu.poll, polls)
        await measure("host (simulated backend)", host.poll, polls)
        await measure("sglang (HTTP + parse)", sglang.poll, polls)
        log_text = Path(run.log_path).read_text()
        lines = log_text.splitlines()

        async def parse_log():  # type: ignore[no-untyped-def]
            p = StartupLogParser()
            for line in lines:
                p.feed(line)
            return p.facts()
        await measure(f"startup log ({len(lines)} lines)", parse_log, max(10, polls // 10))
        await sglang.close()
    finally:
        await session.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=200)
    asyncio.run(main(ap.parse_args().polls))
