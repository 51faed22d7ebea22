"""A monitoring session: one launched (or attached) server, its collectors, poll loops, the
load driver and the run store. No Textual here: the dashboard and the headless snapshot
both drive a session; the UI never talks to a socket or a process itself.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collectors.host import HostCollector
from collectors.nvml import GpuCollector
from collectors.readings import Reading, Status
from collectors.sglang import SglangCollector
from collectors.startup_log import StartupLogParser
from engram_top import reference
from engram_top.simnode import state
from engram_top.simnode.backends import SimGpuBackend, SimHostBackend
from engram_top.store import RunFacts, RunStore
from scenarios.logtail import LogTail
from scenarios.process import LaunchSpec, ManagedProcess
from scenarios.workload import ClosedLoopLoad


@dataclass(frozen=True)
class LoadSpec:
    concurrency: int = 8
    input_len: int = 512
    output_len: int = 128
    range_ratio: float = 0.5
    seed: int = 1


@dataclass(frozen=True)
class DemoOptions:
    placement: str = "device"
    time_scale: float = 0.1
    serve_scale: float = 1.0
    port: int | None = None
    node_dir: Path | None = None
    run_dir: Path | None = None
    poll_interval: float = 1.0
    load: LoadSpec | None = LoadSpec()
    stop_grace: float = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def poll_loop(poll: Callable[[], Awaitable[Reading[Any]]], interval: float,
                    sink: Callable[[Reading[Any]], None]) -> None:
    """One source's loop: a poll at a time (never two at once), at its own interval."""
    while True:
        started = time.monotonic()
        sink(await poll())
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))


class DemoSession:
    """The embedded default: a simulated 4x B200 node serving DeepSeek-V4.1-Flash."""

    def __init__(self, options: DemoOptions | None = None) -> None:
        self.options = options or DemoOptions()
        self.ref = reference.default()
        self.store = RunStore()
        self._tmp: Path | None = None
        self.server: ManagedProcess | None = None
        self.load: ClosedLoopLoad | None = None
        self.parser = StartupLogParser()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        o = self.options
        if o.node_dir is None or o.run_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="engram-top-demo-"))
        node_dir = o.node_dir or self._tmp / "node"  # type: ignore[operator]
        run_dir = o.run_dir or self._tmp / "runs"  # type: ignore[operator]
        state.ensure_node(node_dir, self.ref)
        self.gpu = GpuCollector(SimGpuBackend(node_dir))
        self.host_backend = SimHostBackend(node_dir)
        self.host = HostCollector(self.host_backend)
        port = o.port or free_port()
        url = f"http://127.0.0.1:{port}"
        self.sglang = SglangCollector(url)

        # The pre-launch baseline: what the node holds before our server exists.
        gpu0, host0 = await self.gpu.poll(), await self.host.poll()
        self.store.add("gpu", gpu0)
        self.store.add("host", host0)
        log_path = run_dir / f"{o.placement}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        run = RunFacts(scenario=f"demo/{o.placement}", placement=o.placement,
                       node=f"simulated {self.ref.gpus}x {self.ref.gpu_name}",
                       time_scale=o.time_scale, launched_wall=time.time(),
                       launched_at=time.monotonic(), log_path=str(log_path), url=url,
                       expected_ready_s=self.ref.placements[o.placement].ready_s * o.time_scale)
        if host0.data is not None:
            run.baseline_host_used = host0.data.used_bytes
        if gpu0.data is not None:
            run.baseline_gpu_used = {d.index: d.used_bytes for d in gpu0.data.devices}
        self.store.run = run
        argv = [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", o.placement,
                "--port", str(port), "--time-scale", str(o.time_scale),
                "--serve-scale", str(o.serve_scale), "--node-dir", str(node_dir)]
        self.server = ManagedProcess.start(LaunchSpec(argv, log_path))
        run.pid = self.server.pid
        run.state = "starting"
        self.host.root_pid = self.server.pid
        self.logtail = LogTail(log_path)
        self.store.event("info", f"launched {run.scenario} (pid {run.pid}) on {url}")
        i = o.poll_interval
        self._tasks = [
            asyncio.create_task(poll_loop(self.gpu.poll, i, lambda r: self.store.add("gpu", r)),
                                name="poll gpu"),
            asyncio.create_task(poll_loop(self.host.poll, i, lambda r: self.store.add("host", r)),
                                name="poll host"),
            asyncio.create_task(poll_loop(self.sglang.poll, i, self._on_server),
                                name="poll sglang"),
            asyncio.create_task(self._watch(min(0.25, i)), name="watch server"),
        ]

    async def close(self) -> None:
        """Stop the load and the server we started, then the poll loops."""
        if self._closing:
            return
        self._closing = True
        await self.stop_server()
        for task in self._tasks:
            task.cancel()
        _, stuck = await asyncio.wait(self._tasks, timeout=5) if self._tasks else ((), ())
        for task in stuck:  # say so rather than hang the quit
            self.store.event("error", f"{task.get_name()} did not stop within 5 s")
        await self.sglang.close()
        await self.gpu.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    async def stop_server(self) -> None:
        if self.load is not None:
            await self.load.stop()
            self.load = None
        if self.server is not None and self.server.alive():
            run = self.store.run
            if run is not None:
                run.state = "stopping"
            result = await self.server.stop(self.options.stop_grace)
            if result.survivors:
                self.store.event("error", f"processes still alive after stop: {result.survivors}")
            if run is not None:
                run.state, run.exit_code = "stopped", result.returncode
                run.ended_at = time.monotonic()
            self.store.bump("run")

    # ------------------------------------------------------------------ loops
    def _on_server(self, reading: Reading[Any]) -> None:
        self.store.add("server", reading)

    async def _watch(self, interval: float) -> None:
        """Tail the server log into the parser; follow the process; start the load."""
        while True:
            self._read_log()
            run = self.store.run
            assert run is not None and self.server is not None
            if run.state in ("starting", "ready") and not self.server.alive():
                self._read_log()
                run.exit_code = self.server.returncode
                run.ended_at = time.monotonic()
                run.state = "exited" if run.state == "ready" else "failed"
                self.store.event("error", f"server exited with code {run.exit_code}")
                if self.load is not None:
                    await self.load.stop()
                    self.load = None
                self.store.bump("run")
            server = self.store.latest.get("server")
            if (run.state == "starting" and server is not None and server.status is Status.OK
                    and server.data is not None and server.data.healthy):
                run.state = "ready"
                run.ready_at = run.ready_at or time.monotonic()
                self.store.event("info", f"server ready after {run.ready_s:.1f} s")
                self.store.bump("run")
                await self._start_load()
            if self.load is not None:
                s = self.load.stats
                self.store.load = {"concurrency": self.load.concurrency, "sent": s.sent,
                                   "completed": s.completed, "failed": s.failed,
                                   "output_tokens": s.output_tokens, "last_error": s.last_error}
            # Tail fast while starting: the ready line's arrival time is the ready time.
            await asyncio.sleep(0.05 if run.state == "starting" else interval)

    def _read_log(self) -> None:
        run = self.store.run
        lines = self.logtail.read_new()
        if not lines or run is None:
            return
        for at, line in lines:
            events = self.parser.feed(line, at)
            if "ready" in events and run.ready_at is None:
                run.ready_at = at
        run.phase = self.parser.current_phase()
        run.phase_durations = self.parser.phase_durations()
        run.startup = self.parser.facts().to_dict()
        self.store.bump("run")

    async def _start_load(self) -> None:
        spec = self.options.load
        run = self.store.run
        if spec is None or run is None or run.url is None:
            return
        self.load = ClosedLoopLoad(run.url, concurrency=spec.concurrency,
                                   input_len=spec.input_len, output_len=spec.output_len,
                                   range_ratio=spec.range_ratio, seed=spec.seed)
        await self.load.start()
        self.store.event("info", f"load started: {spec.concurrency} streams, closed loop")

    # ------------------------------------------------------------------ conveniences
    async def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.store.run
            if run is not None and run.state == "ready":
                return True
            if run is not None and run.state in ("failed", "exited"):
                return False
            await asyncio.sleep(0.1)
        return False

