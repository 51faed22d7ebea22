"""A monitoring session: a scenario file, the supervisor that runs its servers one at a
time, the node's collectors and poll loops, the load driver and the run store. Or attached
servers someone else started. No Textual here: the dashboard and the headless commands
drive a session; the UI never talks to a socket or a process itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from collectors.host import HostCollector, ProcBackend
from collectors.host import sample as host_sample
from collectors.nvml import GpuCollector, NvmlBackend
from collectors.readings import Reading
from collectors.sglang import SglangCollector
from collectors.shared import SharedSampler
from engram_top import reference
from engram_top.facts import summary
from engram_top.simnode import state
from engram_top.simnode.backends import SimGpuBackend, SimHostBackend
from engram_top.store import RunFacts, RunStore
from scenarios import config
from scenarios.config import Scenario, ScenarioFile
from scenarios.statelock import StateLock
from scenarios.supervisor import Run, Supervisor, SupervisorError
from scenarios.workload import ClosedLoopLoad

GUARD_MAX_AGE_S = 0.5  # how old a GPU reading the supervisor's baseline and guards take
GUARD_WAIT_S = 10.0  # how long they wait for a query in flight (a hung driver: then said)


def demo_file() -> Path:
    """scenarios/demo.toml, installed with the package."""
    return Path(str(resources.files("scenarios").joinpath("demo.toml")))


@dataclass(frozen=True)
class LoadSpec:
    concurrency: int = 8
    input_len: int = 512
    output_len: int = 128
    range_ratio: float = 0.5
    seed: int = 1


@dataclass(frozen=True)
class SessionOptions:
    scenario_file: Path | None = None
    start: str | None = None
    attach: tuple[str, ...] = ()
    api_key: str | None = None  # for attached servers
    state_dir: Path | None = None  # logs and start-up history; default: a temporary folder
    node_dir: Path | None = None  # the simulated node's folder (simulated scenarios)
    poll_interval: float = 1.0
    load: LoadSpec | None = LoadSpec()
    leave_running: bool = False
    free_ports: bool = False  # give every scenario a free port (the embedded demo)
    time_scale: float | None = None  # overrides for simulated scenarios
    serve_scale: float | None = None
    # Who holds the state folder's lock, and how long to wait for a headless holder.
    command: str = "run"
    lock_wait_s: float = 0.0


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its user:password@, and the pair (None without one)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    netloc = host + (f":{port}" if port else "")
    shown = urlunsplit(parts._replace(netloc=netloc))
    return shown, (unquote(parts.username or ""), unquote(parts.password or ""))


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


class Session:
    def __init__(self, options: SessionOptions) -> None:
        self.options = options
        self.ref = reference.default()
        self.store = RunStore()
        self.scenarios: ScenarioFile | None = None
        if options.scenario_file is not None:
            self.scenarios = self._adjust(config.load(options.scenario_file))
        # Known before start: a recorder's header (written at the first record) carries them.
        self.store.scenarios = self.scenarios
        self.store.node = (f"simulated {self.ref.gpus}x {self.ref.gpu_name}" if self.simulated
                           else socket.gethostname())
        self.load: ClosedLoopLoad | None = None
        self.run: Run | None = None
        self.sglang: SglangCollector | None = None
        self._server_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._tmp: Path | None = None
        self._closing = False
        self._closed = False
        self._lock = asyncio.Lock()  # one start/stop/switch at a time
        self._closers: set[asyncio.Task[None]] = set()
        # One command at a time starts and stops a scenario file's servers (its state
        # folder's lock); a demo's own temporary folder needs none.
        self.state_lock: StateLock | None = None
        if options.scenario_file is not None and options.state_dir is not None:
            self.state_lock = StateLock(options.state_dir, options.command)
        for warning in self.scenarios.warnings if self.scenarios else ():
            self.store.event("warning", warning)
        # Where a wait of the session's own is said (for the state folder's lock): an event
        # for a dashboard; a headless command prints it.
        self.announce: Callable[[str], None] = lambda text: self.store.event("info", text)

    def _adjust(self, sf: ScenarioFile) -> ScenarioFile:
        o = self.options
        changed = {}
        for name, sc in sf.scenarios.items():
            new = sc
            if o.free_ports:
                new = dataclasses.replace(new, port=free_port())
            if sc.kind == "simulated" and o.time_scale is not None:
                new = dataclasses.replace(new, time_scale=o.time_scale)
            if sc.kind == "simulated" and o.serve_scale is not None:
                new = dataclasses.replace(new, serve_scale=o.serve_scale)
            changed[name] = new
        return dataclasses.replace(sf, scenarios=changed)

    @property
    def simulated(self) -> bool:
        return self.scenarios is not None and any(
            s.kind == "simulated" for s in self.scenarios.scenarios.values())

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        try:
            await self._start()
        except OSError as exc:  # an unwritable state folder, a full disk: said, with where
            where = f" {exc.filename}" if exc.filename else ""
            raise SupervisorError(f"cannot use the state folder{where}: "
                                  f"{exc.strerror or exc}") from exc

    async def _start(self) -> None:
        o = self.options
        if self.state_lock is not None:  # StateBusy: the caller says who holds it
            await self.state_lock.acquire(o.lock_wait_s, self.announce)
        if o.state_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="engram-top-"))
        state_dir = o.state_dir or self._tmp / "state"  # type: ignore[operator]
        if self.simulated:
            # Beside the state: a server left running keeps its node for the next session.
            node_dir = o.node_dir or state_dir / "node"
            state.ensure_node(node_dir, self.ref)
            gpu_backend: Any = SimGpuBackend(node_dir)
            host_backend: Any = SimHostBackend(node_dir)
            entry = [sys.executable, "-m", "engram_top", "sim", "serve", "--node-dir",
                     str(node_dir)]
        else:
            gpu_backend, host_backend, entry = NvmlBackend(), ProcBackend(), None
        # The poll loop and the supervisor's guards read the GPUs through one sampler: a
        # guard that finds a poll's query in flight waits for it and shares its answer,
        # rather than being refused (or skipping a baseline) because the driver was busy.
        gpus: SharedSampler[Any] = SharedSampler(gpu_backend)
        self.gpu = GpuCollector(gpus)
        self.host = HostCollector(host_backend)

        def host_used() -> int:
            return host_sample(host_backend, None).used_bytes

        def host_shmem() -> int:
            return host_sample(host_backend, None).shmem_bytes

        def gpu_sample() -> Any:  # a reading of the last half second will do
            return gpus.sample(max_age=GUARD_MAX_AGE_S, wait_s=GUARD_WAIT_S)

        self.supervisor = Supervisor(state_dir, gpu_sample=gpu_sample,
                                     host_used=host_used, host_shmem=host_shmem,
                                     simulated_entry=entry, on_event=self.store.event)
        self.store.add("gpu", await self.gpu.poll())
        self.store.add("host", await self.host.poll())
        i = o.poll_interval
        self._tasks = [
            asyncio.create_task(poll_loop(self.gpu.poll, i, lambda r: self.store.add("gpu", r)),
                                name="poll gpu"),
            asyncio.create_task(poll_loop(self.host.poll, i, lambda r: self.store.add("host", r)),
                                name="poll host"),
            asyncio.create_task(self._watch(), name="watch run"),
        ]
        adopted = self.supervisor.adopt(self.scenarios.scenarios) if self.scenarios else None
        if adopted is not None:
            self._bind(adopted)
        if o.attach:
            for url in reversed(o.attach):  # listed in order; the first is watched
                await self.attach(url)
        elif o.start and adopted is None:
            await self.start_scenario(o.start)
        elif o.start and adopted is not None and adopted.scenario.name != o.start:
            self.store.event("warning", f"not starting {o.start}: {adopted.scenario.name} is "
                             "running; switch to it instead")

    async def close(self, leave_running: bool | None = None) -> None:
        """Stop the load and (unless told to leave it) the server we started, then polls.
        ``leave_running``: this once, instead of the options' (an interrupted switch takes
        back what it started)."""
        if self._closing:
            return
        self._closing = True
        leave = self.options.leave_running if leave_running is None else leave_running
        closing = asyncio.ensure_future(self._close(leave))
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            # A signal while closing (a bench that was just finishing): a stop is not cut in
            # half. Finish it, within its own deadlines, then give in.
            await closing
            raise

    async def _close(self, leave: bool) -> None:
        await self._stop_load()
        if hasattr(self, "supervisor"):
            await self.supervisor.close(leave)
            self._sync()
        tasks = [*self._tasks, *([self._server_task] if self._server_task else [])]
        for task in tasks:
            task.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=5) if tasks else ((), ())
        for task in stuck:  # say so rather than hang the quit
            self.store.event("error", f"{task.get_name()} did not stop within 5 s")
        if self.sglang is not None:
            await self.sglang.close()
        if hasattr(self, "gpu"):
            await self.gpu.close()
        self._release()

    def close_now(self) -> None:
        """What close() must still do once the event loop is gone (a crash, a signal that
        ended the dashboard): stop the server we started, unless told to leave it, and
        remove our temporary folder. Safe after close(), and twice."""
        if self._closed:
            return
        if hasattr(self, "supervisor"):
            self.supervisor.close_now(self.options.leave_running)
        self._release()

    def _release(self) -> None:
        self._closed = True
        if self.state_lock is not None:
            self.state_lock.release()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # ------------------------------------------------------------------ control
    def scenario(self, name: str) -> Scenario:
        if self.scenarios is None:
            raise SupervisorError("no scenario file: this session only watches attached servers")
        return self.scenarios.get(name)

    async def start_scenario(self, name: str) -> Run:
        async with self._lock:
            sc = self.scenario(name)
            await self._stop_load()
            run = await self.supervisor.start(sc)
            self._bind(run)
            return run

    async def stop_scenario(self) -> None:
        async with self._lock:
            await self._stop_load()
            await self.supervisor.stop()
            self._sync()

    async def switch(self, name: str) -> Run:
        """Stop the running server, wait for its HBM to return, start ``name``."""
        async with self._lock:
            sc = self.scenario(name)
            await self._stop_load()
            old = self.supervisor.current
            try:
                run = await self.supervisor.switch(sc)
            finally:
                if old is not None:
                    self._sync(old)
            self._bind(run)
            return run

    async def attach(self, url: str) -> None:
        """Watch a server someone else started: no process of ours, no lifetime to own.
        One attached server is watched at a time; the others wait in the list.

        A password in the URL (http://user:PASS@host) goes to the collector alone: the
        store, the screen, recordings and snapshots know the server by its URL without it."""
        shown, auth = split_credentials(url)
        facts = self.store.facts_for(shown) or RunFacts(
            scenario=shown, placement="?", node=self.store.node, time_scale=1.0,
            launched_wall=time.time(), launched_at=time.monotonic(), state="attached",
            url=shown, owned=False, title="attached: its lifetime is not ours")
        self.store.set_run(facts)
        self._watch_server(SglangCollector(shown, api_key=self.options.api_key, auth=auth))

    def _bind(self, run: Run) -> None:
        """Point the store and the server collector at a run that was just launched."""
        self.run = run
        sc = run.scenario
        estimate = run.estimate_s
        planned = None
        if sc.kind == "simulated" and sc.placement in self.ref.placements:
            planned = self.ref.placements[sc.placement].ready_s  # the model the sim runs
            estimate = estimate if estimate is not None else planned * sc.time_scale
        facts = RunFacts(scenario=sc.name, placement=sc.placement or "?", node=self.store.node,
                         time_scale=sc.time_scale if sc.kind == "simulated" else 1.0,
                         launched_wall=run.launched_wall, launched_at=run.launched_at,
                         state=run.state, pid=run.pid, log_path=str(run.log_path), url=sc.url,
                         expected_ready_s=estimate, baseline_host_used=run.baseline_host_used,
                         baseline_gpu_used=dict(run.baseline_gpu), title=sc.title,
                         planned_ready_s=planned)
        facts.log_lines = run.lines
        self.store.set_run(facts)
        self.host.root_pid = run.pid
        self._watch_server(SglangCollector(sc.url, api_key=sc.api_key))

    def _watch_server(self, collector: SglangCollector) -> None:
        if self._server_task is not None:
            self._server_task.cancel()
        old = self.sglang
        if old is not None:
            # Keep a reference: the loop holds tasks only weakly, and close() must finish.
            closing = asyncio.create_task(old.close())
            self._closers.add(closing)
            closing.add_done_callback(self._closers.discard)
        self.sglang = collector
        self._server_task = asyncio.create_task(
            poll_loop(collector.poll, self.options.poll_interval,
                      lambda r: self.store.add("server", r)), name="poll sglang")

    # ------------------------------------------------------------------ loops
    def _sync(self, run: Run | None = None) -> None:
        """Copy the supervisor's view of a run into the store's facts."""
        run = run or self.run
        facts = self.store.facts_for(run.scenario.name) if run else None
        if run is None or facts is None or facts.launched_at != run.launched_at:
            return
        before = (facts.state, facts.phase, facts.lines_seen)
        facts.state, facts.phase = run.state, run.phase
        facts.ready_at, facts.ended_at = run.ready_at, run.ended_at
        facts.exit_code, facts.failure = run.exit_code, run.failure
        if facts.degraded != run.degraded:
            facts.degraded = run.degraded
            self.store.bump("run")
        if run.lines_seen != facts.lines_seen:
            facts.lines_seen = run.lines_seen
            parsed = run.parser.facts()
            facts.phase_durations = parsed.phase_durations()
            facts.startup = parsed.to_dict()
        if (facts.state, facts.phase, facts.lines_seen) != before:
            self.store.bump("run")

    async def _watch(self) -> None:
        last_summary = 0.0
        while True:
            self._sync()
            run = self.run
            facts_now = self.store.run
            if facts_now is not None and time.monotonic() - last_summary > 1.0:
                last_summary = time.monotonic()
                if facts_now.state in ("ready", "attached", "starting"):
                    facts_now.results.update(summary(self.store))
            if run is not None and run.state == "ready" and self.load is None \
                    and self.options.load is not None and not self._lock.locked():
                await self._start_load(run.scenario)
            if run is not None and run.state not in ("ready",) and self.load is not None:
                await self._stop_load()
            if self.load is not None:
                s = self.load.stats
                self.store.load = {"concurrency": self.load.concurrency, "sent": s.sent,
                                   "completed": s.completed, "failed": s.failed,
                                   "output_tokens": s.output_tokens, "last_error": s.last_error}
            starting = run is not None and run.state == "starting"
            await asyncio.sleep(0.05 if starting else 0.25)

    async def _start_load(self, sc: Scenario) -> None:
        spec = self.options.load
        if spec is None:
            return
        self.load = ClosedLoopLoad(sc.url, concurrency=spec.concurrency, input_len=spec.input_len,
                                   output_len=spec.output_len, range_ratio=spec.range_ratio,
                                   seed=spec.seed, api_key=sc.api_key)
        await self.load.start()
        self.store.event("info", f"load started: {spec.concurrency} streams, closed loop")

    async def _stop_load(self) -> None:
        if self.load is not None:
            load, self.load = self.load, None
            await load.stop()

    async def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run
            if run is not None and run.state == "ready":
                self._sync()
                return True
            attached = self.store.run
            if attached is not None and not attached.owned:
                # Someone else's server: ready is when it answers with its figures.
                server = self.store.latest.get("server")
                if server is not None and server.ok and server.data.max_total_num_tokens:
                    return True
            if run is not None and run.state in ("failed", "exited", "stopped"):
                self._sync()
                return False
            await asyncio.sleep(0.05)
        return False


# --------------------------------------------------------------------------- the demo


@dataclass(frozen=True)
class DemoOptions:
    placement: str = "device"
    time_scale: float = 0.1
    serve_scale: float = 1.0
    node_dir: Path | None = None
    run_dir: Path | None = None
    poll_interval: float = 1.0
    load: LoadSpec | None = LoadSpec()


class DemoSession(Session):
    """The embedded default: scenarios/demo.toml on a simulated node, on free ports."""

    def __init__(self, options: DemoOptions | None = None) -> None:
        o = options or DemoOptions()
        super().__init__(SessionOptions(
            scenario_file=demo_file(), start=o.placement, state_dir=o.run_dir,
            node_dir=o.node_dir, poll_interval=o.poll_interval, load=o.load, free_ports=True,
            time_scale=o.time_scale, serve_scale=o.serve_scale))

