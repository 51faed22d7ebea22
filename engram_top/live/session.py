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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.host import HostCollector, ProcBackend
from collectors.host import sample as host_sample
from collectors.nvml import GpuCollector, NvmlBackend
from collectors.readings import GpuData, HostData
from collectors.shared import SharedSampler
from collectors.source import NodeSource, Source, SourceName
from engram_top.alerts.monitor import CHECK_EVERY_S, AlertWatch
from engram_top.compare.slo import DEFAULT as slo_defaults
from engram_top.compare.slo import Slo
from engram_top.live.attached import AttachedServers, to_attach
from engram_top.live.fit import refusal_for_the_app
from engram_top.live.forensics import DeathWatch
from engram_top.live.load import context_len, counters, driver, load_window
from engram_top.live.options import SessionOptions as SessionOptions  # re-exported
from engram_top.live.polling import after_polls, free_port, poll_loop
from engram_top.live.run_facts import (
    launched,
    read_engram,
    sync,
    take_fingerprint,
    until_port,
)
from engram_top.model.facts import summary
from engram_top.model.left_running import LeftRunning
from engram_top.model.store import RunFacts, RunStore
from engram_top.seed import reference
from engram_top.sim import state
from engram_top.sim.backends import SimGpuBackend, SimHostBackend
from scenarios import engines
from scenarios import scenario_file as config
from scenarios.engines.base import Engine
from scenarios.runstate import ENDED, RunState
from scenarios.scenario_file import Scenario, ScenarioFile
from scenarios.server_run import Origin
from scenarios.statelock import StateLock
from scenarios.supervisor import Run, Supervisor, SupervisorError

if TYPE_CHECKING:
    from scenarios.load_process import LoadProcess

GUARD_MAX_AGE_S = 0.5  # how old a GPU reading the supervisor's baseline and guards take
GUARD_WAIT_S = 10.0  # how long they wait for a query in flight (a hung driver: then said)


class Session(AttachedServers):
    def __init__(self, options: SessionOptions) -> None:
        self.options = options
        self.ref = reference.default()
        self.store = RunStore()
        self.scenarios: ScenarioFile | None = None
        if options.scenario_file is not None:
            self.scenarios = self._adjust(config.load(options.scenario_file))
        # Known before start: a recorder's header (written at the first record) carries them.
        self.store.scenarios = self.scenarios
        # What the load's requests and the slo alert are held to: the scenario file's [slo],
        # else the defaults (the app puts the user's config [slo] over them: app.main).
        self.slos: tuple[Slo, ...] = (self.scenarios.slos if self.scenarios else ()) \
            or slo_defaults
        self.alerts = AlertWatch(self.store, options.thresholds, slos=self.slos)
        self.store.node = (f"simulated {self.ref.gpus}x {self.ref.gpu_name}" if self.simulated
                           else socket.gethostname())
        self.load: LoadProcess | None = None
        self._load_since = 0.0
        self._load_serve = 1.0
        self.run: Run | None = None
        # What is polled, by name: this node's GPUs and host, the watched server, and any
        # source added later (a Prometheus for many nodes); each in its own loop.
        self.sources: dict[str, Source] = {}
        self._polls: dict[str, asyncio.Task[None]] = {}
        # The Engram switches in an attached local server's environment, by URL.
        self._attached_env: dict[str, dict[str, str]] = {}
        self.attaching = to_attach(options.attach)  # listed from the first frame
        self._looked_at, self._look_every = 0.0, 1.0  # the attached server's pid: _look_again
        self._answered: set[str] = set()  # attached URLs that served once (_answers)
        self._attached_engine: dict[str, Engine] = {}  # what a page said, without --engine
        # By scenario: (launch, parser, its version) whose facts the store holds.
        self._startup_seen: dict[str, tuple[float, int, int | None]] = {}
        # by run (launched_at): when last taken, and what it was taken from
        self._fingerprinted: dict[float, tuple[float, tuple[object, ...]]] = {}
        self._steering: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._tmp: Path | None = None
        self.node_dir: Path | None = None  # an attached server's simulated node, once known
        self._closing = False
        self._closed = False
        self.gave_up: str | None = None  # why wait_ready stopped waiting early
        self._leave: bool | None = None  # what close() was told: leave what it started
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
            new = sc.engine.tune(sc, o.time_scale, o.serve_scale, o.stream_interval)
            if o.free_ports:
                new = dataclasses.replace(new, port=free_port())
            changed[name] = new
        return dataclasses.replace(sf, scenarios=changed)

    replay = None  # a live session plays no recording (the app's DashboardSession)

    @property
    def poll_interval(self) -> float:
        return self.options.poll_interval

    @property
    def secrets(self) -> tuple[str, ...]:
        """What a snapshot must not show: the attached servers' API key."""
        return (self.options.api_key,) if self.options.api_key else ()

    @property
    def simulated(self) -> bool:
        """Whether this session's servers run on the simulated node."""
        return self.scenarios is not None and any(
            s.engine.simulated_node for s in self.scenarios.scenarios.values())

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        try:
            await self._start()
        except OSError as exc:  # an unwritable state folder, a full disk: said, with where
            where = f" {exc.filename}" if exc.filename else ""
            raise SupervisorError(f"cannot use the state folder{where}: "
                                  f"{exc.strerror or exc}") from exc
        finally:
            self.attaching = ()  # attached, or never will be by this start

    async def _start(self) -> None:
        o = self.options
        if self.state_lock is not None:  # StateBusy: the caller says who holds it
            await self.state_lock.acquire(o.lock_wait_s, self.announce)
        state_dir = o.state_dir
        if state_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="engram-top-"))
            state_dir = self._tmp / "state"
        node_dir = None
        if self.simulated:
            # Beside the state: a server left running keeps its node for the next session.
            node_dir = o.node_dir or state_dir / "node"
            state.ensure_node(node_dir, self.ref)
            gpu_backend: Any = SimGpuBackend(node_dir)
            host_backend: Any = SimHostBackend(node_dir)
        elif o.attach and o.node_dir is not None:  # attach --node-dir: the server's node
            gpu_backend, host_backend = SimGpuBackend(o.node_dir), SimHostBackend(o.node_dir)
            self._on_node(o.node_dir)
        else:
            gpu_backend, host_backend = NvmlBackend(), ProcBackend()
        # The poll loop and the supervisor's guards read the GPUs through one sampler: a
        # guard that finds a poll's query in flight waits for it and shares its answer,
        # rather than being refused (or skipping a baseline) because the driver was busy.
        self._gpus: SharedSampler[Any] = SharedSampler(gpu_backend)
        self._host_backend = host_backend
        self.gpu = GpuCollector(self._gpus)
        self.host = HostCollector(host_backend)
        self.deaths = DeathWatch(self.store, lambda: self.host, lambda: self._host_backend)
        # The session owns the supervisor (scenarios.owner.SupervisorOwner): it reads the
        # node for it and hears each change to a run ("the supervisor's owner", below).
        self.supervisor = Supervisor(state_dir, self, node_dir=node_dir)
        for source in (NodeSource(SourceName.GPU, self.gpu.poll, self.gpu.close),
                       NodeSource(SourceName.HOST, self.host.poll)):
            for key, reading in await source.poll():  # the first frame has the node
                self.store.add(key, reading)
            self.add_source(source)
        self._tasks = [
            asyncio.create_task(self._tick(), name="figures"),
            asyncio.create_task(self.alerts.run(min(CHECK_EVERY_S, self.options.poll_interval)),
                                name="alerts"),
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
        self._leave = leave
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
        if hasattr(self, "deaths"):
            await self.deaths.close()
        tasks = [*self._tasks, *self._polls.values(), *([self._steering] if self._steering else [])]
        for task in tasks:
            task.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=5) if tasks else ((), ())
        for task in stuck:  # say so rather than hang the quit
            self.store.event("error", f"{task.get_name()} did not stop within 5 s")
        # A start still under way (a quit during attach) may add a source meanwhile: what is
        # here now is closed; add_source closes what comes later.
        sources, self.sources = list(self.sources.values()), {}
        for source in sources:
            await source.close()
        self._release()

    def close_now(self) -> None:
        """What close() must still do once the event loop is gone (a crash, a signal that
        ended the dashboard): stop the server we started, unless told to leave it, and
        remove our temporary folder. Safe after close(), and twice."""
        if self._closed:
            return
        if self.load is not None:
            self.load.stop_now()
        if hasattr(self, "supervisor"):
            self.supervisor.close_now(self.options.leave_running)
        self._release()

    def left_running(self) -> tuple[LeftRunning, ...]:
        """The server closing leaves running (once closed: has left): one it was told to
        leave (--leave-running, a switch), or one an earlier engram-top started that this
        session adopted and nobody here asked to stop (Run.left_on_close)."""
        run = self.supervisor.current if hasattr(self, "supervisor") else None
        told = self.options.leave_running if self._leave is None else self._leave
        if run is None or not run.alive or not run.left_on_close(told):
            return ()
        sc = run.scenario
        return (LeftRunning(sc.name, run.pid, sc.host, sc.port,
                            adopted=run.origin is Origin.ADOPTED, asked=told,
                            stop_with=self.options.stop_command()),)

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

    async def start_scenario(self, name: str, force: bool = False) -> Run:
        async with self._lock:
            sc = self.scenario(name)
            await self._stop_load()
            with refusal_for_the_app():
                run = await self.supervisor.start(sc, force or self.options.force)
            self._bind(run)
            return run

    async def stop_scenario(self) -> None:
        async with self._lock:
            await self._stop_load()
            await self.supervisor.stop()

    async def switch(self, name: str, force: bool = False) -> Run:
        """Stop the running server, wait for its HBM to return, start ``name``."""
        async with self._lock:
            sc = self.scenario(name)
            await self._stop_load()
            with refusal_for_the_app():
                run = await self.supervisor.switch(sc, force or self.options.force)
            self._bind(run)
            return run

    def _bind(self, run: Run) -> None:
        """Point the store and the server collector at a run that was just launched."""
        self.run = run
        sc = run.scenario
        self.store.set_run(launched(run, self.ref, self.store.node))
        self.host.root_pid = run.pid
        self.deaths.launched(run)
        self._watch_server(sc.engine.collector(sc.url, api_key=sc.api_key), run)

    def _watch_server(self, collector: engines.ServerCollector, run: Run | None = None) -> None:
        poll = collector.poll if run is None else until_port(run, collector)
        self.add_source(NodeSource(SourceName.SERVER, poll, collector.close))

    def add_source(self, source: Source, interval: float | None = None) -> None:
        """Poll ``source`` from now on, in a loop of its own; one of the same name goes."""
        if self._closing:  # a start that outlived the quit: nothing more is polled
            self._close_later(source)
            return
        self.drop_source(source.name)
        self.sources[source.name] = source
        self._polls[source.name] = asyncio.create_task(
            poll_loop(source, interval or self.options.poll_interval, self.store.add),
            name=f"poll {source.name}")

    def drop_source(self, name: str) -> None:
        task, old = self._polls.pop(name, None), self.sources.pop(name, None)
        if task is not None:
            task.cancel()
        if old is not None:
            self._close_later(old)

    def _close_later(self, source: Source) -> None:
        # Keep a reference: the loop holds tasks only weakly, and close() must finish.
        closing = asyncio.create_task(source.close())
        self._closers.add(closing)
        closing.add_done_callback(self._closers.discard)

    # ------------------------------------------------------------------ the supervisor's owner
    def gpu_sample(self) -> GpuData:
        """The GPUs for the supervisor's baseline and guards: a reading of the last half
        second will do (the poll loop's, when one is in flight)."""
        return self._gpus.sample(max_age=GUARD_MAX_AGE_S, wait_s=GUARD_WAIT_S)

    def host_used(self) -> int:
        return host_sample(self._host_backend, None).used_bytes

    def host_sample(self, root_pid: int | None) -> HostData:
        return host_sample(self._host_backend, root_pid)

    def host_shmem(self) -> int:
        return host_sample(self._host_backend, None).shmem_bytes

    def event(self, level: str, text: str) -> None:
        self.store.event(level, text)

    # ------------------------------------------------------------------ the run, pushed
    def run_changed(self, run: Run) -> None:
        """The supervisor's news of a run, as it happens: into the store's facts (the UI
        and the recorder read them there), and the load follows the run's state."""
        sync(self.store, run, self._startup_seen)
        self.deaths.changed(run, self.store.facts_for(run.scenario.name))
        if run is self.run and (self._steering is None or self._steering.done()):
            self._steering = asyncio.create_task(self._steer_load(), name="steer load")

    async def _steer_load(self) -> None:
        """Start the load once the watched run is ready, stop it once it is not; again
        after each await, since the run may have moved on meanwhile."""
        while True:
            run = self.run
            if run is None:
                return
            if run.state == RunState.READY and self.load is None and self.options.load is not None \
                    and not self._lock.locked():
                await self._start_load(run.scenario)
            elif run.state != RunState.READY and self.load is not None:
                await self._stop_load()
            else:
                return

    async def _tick(self) -> None:
        """What is derived rather than told: the headline figures from the store's series
        (once a second), the load driver's counters (four times a second)."""
        last_summary = 0.0
        said: set[str] = set()
        while True:
            facts_now = self.store.run
            if facts_now is not None and time.monotonic() - last_summary > 0.9:  # each second
                last_summary = time.monotonic()
                try:
                    if facts_now.state in (RunState.READY, RunState.ATTACHED,
                                           RunState.STARTING):
                        facts_now.results = facts_now.results.merged(summary(self.store))
                    self._read_engram(facts_now)
                    self._follow_node(facts_now)
                    self.deaths.attached(
                        facts_now, self.host.root_pid, answered=self._answers(facts_now),
                        parser=self._attached_engine_of(facts_now.url or "").parser)
                    self._came_back(facts_now)
                    self._look_again(facts_now)
                except Exception as exc:  # a reading nobody foresaw: said once, not fatal
                    why = f"{type(exc).__name__}: {exc}"
                    if why not in said and len(said) < 16:
                        said.add(why)
                        self.store.event("error", f"figures not derived: {why}")
            if self.load is not None:
                # node seconds the load has run: goodput's denominator
                self.store.load = counters(self.load, self.slos, (
                    time.monotonic() - self._load_since) / self._load_serve)
                self.store.load_window = load_window(self.load, self._load_serve)
            # Without a load of ours only the once-a-second part has work: an attached
            # session (an agent's) wakes once a second, not four times (after the polls).
            await after_polls(0.25 if self.load is not None or self.options.load else 1.0)

    def _read_engram(self, facts: RunFacts) -> None:
        """The watched run's model and Engram placement (run_facts.read_engram): ours by
        its scenario, an attached server's by what its page and environment said."""
        run = self.run
        ours = run is not None and facts.owned and facts.launched_at == run.launched_at
        sc = run.scenario if ours and run is not None else None
        engine = sc.engine if sc is not None else self._attached_engine_of(facts.url or "")
        env = {} if sc is not None else self._attached_env.get(facts.url or "", {})
        read_engram(self.store, facts, engine, sc, env)
        # The fingerprint every 10 s, not every tick (a few hundred arguments redacted), and
        # at once when what it reads arrives or changes: one taken at launch, before the
        # server answered (or before attach followed the server's node), would otherwise
        # stand without its version, layout and node for 10 s.
        server = self.store.data(SourceName.SERVER)
        host, gpus = self.store.data(SourceName.HOST), self.store.data(SourceName.GPU)
        basis = (facts.state, server is not None and server.version,
                 server is not None and server.tp_size, bool(facts.startup.parallel),
                 facts.startup.server_args is not None,
                 host is not None and host.total_bytes, gpus is not None and len(gpus.devices))
        taken, was = self._fingerprinted.get(facts.launched_at, (-1e9, ()))
        if basis != was or time.monotonic() - taken > 10.0:
            self._fingerprinted[facts.launched_at] = (time.monotonic(), basis)
            take_fingerprint(self.store, facts, engine, sc, env, self._host_backend.thp())

    async def _start_load(self, sc: Scenario) -> None:
        spec = self.options.load
        if spec is None:
            return
        self.load, said = driver(sc, spec, context_len(self.store), self.slos)
        self._load_since, self._load_serve = time.monotonic(), sc.engine.clock(sc)[1]
        await self.load.start()
        # Known from its start, not from the counters' next pass: until then its requests
        # in flight would read as another client's, and a switch would ask about them.
        self.store.load = counters(self.load, self.slos, 0.0)
        self.store.event("info", said)

    async def _stop_load(self) -> None:
        if self.load is not None:
            load, self.load = self.load, None
            await load.stop()

    async def wait_ready(self, timeout: float) -> bool:
        """Whether the run got ready within ``timeout``; an attached server that nothing on
        this node serves ends the wait at once, its reason in ``gave_up``."""
        deadline = time.monotonic() + timeout
        looked = 0.0
        while time.monotonic() < deadline:
            if time.monotonic() - looked >= 1.0:  # a scan of the node's processes: 1/s
                looked = time.monotonic()
                self.gave_up = self.nobody_serves()
                if self.gave_up is not None:
                    return False
            run = self.run
            if run is not None and run.state == RunState.READY:
                return True
            attached = self.store.run
            if attached is not None and not attached.owned:
                # Someone else's server: ready is when it answers with its figures (a
                # router's or a cache's page has no KV pool to wait for), and its processes
                # are told from other tenants' (a snapshot's ledgers need them).
                server = self.store.latest.get(SourceName.SERVER)
                if server is not None and server.ok and server.data is not None \
                        and (server.data.max_total_num_tokens or server.data.stack_page) \
                        and not attached.finding_processes:
                    return True
            if run is not None and run.state in ENDED:
                return False
            await asyncio.sleep(0.05)
        return False

