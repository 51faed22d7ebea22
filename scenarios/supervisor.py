"""The supervisor: start, follow, stop and switch SGLang servers, one at a time.

Only one DeepSeek server fits on a node, so the supervisor owns at most one running server.
It launches from an argv list with the scenario's environment, keeps one log per run,
takes a baseline of HBM and host memory before launch, follows readiness through the
start-up log's phases and /health, stops by process group (SIGTERM, grace, SIGKILL, then a
check that nothing survived), and before the next start waits until the GPUs are back near
the baseline. No Textual, no product code: whoever runs it is its owner
(scenarios.owner.SupervisorOwner), which reads the node for it and hears its news.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

from collectors.base import SourceUnavailable, TooLarge, describe
from collectors.pages import PageClient, PageError, bearer
from scenarios.engines import EngineError, Signal
from scenarios.fit import FitVerdict
from scenarios.fit_check import check_fit
from scenarios.guards import host_figure, host_guard, release_guard
from scenarios.logtail import LogTail
from scenarios.owner import SupervisorOwner
from scenarios.ports import port_in_use, who_listens
from scenarios.private import private_folder, write_private
from scenarios.process import LaunchSpec, ManagedProcess, StopResult
from scenarios.run_files import RunFiles
from scenarios.runstate import ENDED, UNASKED_END, RunState
from scenarios.scenario_file import Scenario
from scenarios.server_run import Origin, Run, gone_members, server_members
from scenarios.shm_sweep import sweep as sweep_shm

FOLLOW_S = 0.1  # log tail and liveness cadence while a server starts
HEALTH_S = 0.5  # /health probe cadence once the log shows the HTTP server is up
HEALTH_DEADLINE_S = 3.0  # a /health probe's whole answer, however slowly it drips
HEALTH_LIMIT = 1024 * 1024  # and at most this much of it


class SupervisorError(Exception):
    """A start, stop or switch that cannot go ahead; the message says why and what to do."""


class DoesNotFit(SupervisorError):
    """A start or switch the fit check refused (scenarios.fit): its verdict has the figures;
    the caller may start it anyway (force)."""

    def __init__(self, verdict: FitVerdict) -> None:
        super().__init__("\n".join([*verdict.report(), "(--force starts it anyway)"]))
        self.verdict = verdict
        self.scenario = verdict.scenario
        self.lines = verdict.report()


def _drop_key_file(run: Run) -> None:
    if run.key_file is not None:
        with contextlib.suppress(OSError):
            run.key_file.unlink()


def _drop_scratch(run: Run) -> None:
    if run.scratch is not None:
        shutil.rmtree(run.scratch, ignore_errors=True)


class Supervisor:
    def __init__(self, state_dir: Path, owner: SupervisorOwner, *,
                 node_dir: Path | None = None) -> None:
        self.state_dir = state_dir
        # Reads the node for the baselines and guards; told of each run's change and event.
        self.owner = owner
        self.node_dir = node_dir  # the simulated node's folder, for engines that run on it
        self.current: Run | None = None
        self._follow_task: asyncio.Task[None] | None = None
        self._health: dict[str, PageClient] = {}  # by server URL: its own connection
        self.files = RunFiles(state_dir)
        private_folder(state_dir)
        private_folder(state_dir / "logs")

    def _tell(self, run: Run) -> None:
        try:
            self.owner.run_changed(run)
        except Exception as exc:  # an owner's fault must not stop following the server
            self.owner.event("error", f"showing {run.scenario.name}'s change failed: "
                             f"{describe(exc)}")

    def estimate(self, scenario: Scenario) -> float | None:
        """Median time to ready of the last runs of this scenario, if any."""
        return self.files.estimate(scenario.name)

    # ------------------------------------------------------------------ the running server
    def _save_current(self, run: Run) -> None:
        try:
            self.files.save_current(run)
        except OSError as exc:  # the server runs; only a later command will not find it
            self.owner.event("warning", f"could not note {run.scenario.name} (pid {run.pid}) "
                             f"in {self.files.current_path}: {exc.strerror or exc}: a later "
                             "stop or switch will not find it")

    def _forget_current(self, run: Run | None = None) -> None:
        self.files.forget_current()
        if run is not None:
            _drop_key_file(run)
            _drop_scratch(run)

    def adopt(self, scenarios: dict[str, Scenario]) -> Run | None:
        """Take over the server an earlier engram-top left running here (Origin.ADOPTED)."""
        try:
            data = self.files.read_current()
            sc = scenarios[data["scenario"]]
            if isinstance(data.get("port"), int) and data["port"] != sc.port:
                sc = dataclasses.replace(sc, port=data["port"])  # launched on a free port
            log_path = Path(data["log_path"])
            started = data["started"] if "started" in data else data["create_time"]  # older
            proc = ManagedProcess.adopt(LaunchSpec([], log_path), int(data["pid"]),
                                        float(started))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if proc is None:
            self._forget_current()
            return None
        age = max(0.0, time.time() - float(data.get("launched_wall", time.time())))
        run = Run(sc, proc, log_path, time.monotonic() - age, float(data["launched_wall"]),
                  {int(k): int(v) for k, v in (data.get("baseline_gpu") or {}).items()},
                  data.get("baseline_host_used"), self.estimate(sc),
                  baseline_host_shmem=data.get("baseline_host_shmem"), origin=Origin.ADOPTED)
        if isinstance(data.get("key_file"), str):
            run.key_file = Path(data["key_file"])
        if isinstance(data.get("scratch"), str):
            run.scratch = Path(data["scratch"])
        self.current = run
        self._tell(run)
        self.owner.event("info", f"found {sc.name} still running (pid {run.pid}), launched "
                         f"{age:.0f} s ago by an earlier engram-top")
        self._follow_task = asyncio.create_task(self._follow(run), name=f"follow {sc.name}")
        return run

    # ------------------------------------------------------------------ start
    def preflight(self, scenario: Scenario) -> None:
        """Everything that would make a launch fail at once, said before launching."""
        cur = self.current
        if cur is not None and cur.alive:
            raise SupervisorError(f"'{cur.scenario.name}' (pid {cur.pid}) is still running: "
                                  "stop it first, or switch")
        if cur is not None and cur.proc.group_members():
            raise SupervisorError(f"processes of '{cur.scenario.name}' are still alive "
                                  f"(pids {cur.proc.group_members()}): they may hold the GPUs")
        self.check_target(scenario)

    def check_target(self, scenario: Scenario, port: bool = True) -> None:
        """What would refuse this scenario whatever runs now: its port, its paths."""
        if port and port_in_use(scenario.host, scenario.port):
            raise SupervisorError(f"port {scenario.port} is in use by "
                                  f"{who_listens(scenario.port)}: stop it or give scenario "
                                  f"'{scenario.name}' another port")
        try:
            scenario.engine.check(scenario)
        except EngineError as exc:
            raise SupervisorError(str(exc)) from None

    def baseline(self) -> tuple[dict[int, int], int | None, int | None,
                                tuple[str, str] | None]:
        """HBM per GPU, host memory used and Shmem before a launch, and (level, why) the HBM
        one is missing if it is: never skipped in silence, since the release guard and the
        run's HBM deltas rest on it."""
        gpu: dict[int, int] = {}
        note = None
        try:
            gpu = {d.index: d.used_bytes for d in self.owner.gpu_sample().devices}
        except SourceUnavailable as exc:  # no driver here (a CPU machine): a state
            note = ("info", f"no HBM baseline: {exc}")
        except Exception as exc:
            note = ("warning", f"no HBM baseline: {describe(exc)}: the HBM-release guard "
                               "cannot check this run")
        return (gpu, host_figure(self.owner.host_used), host_figure(self.owner.host_shmem),
                note)

    async def start(self, scenario: Scenario, force: bool = False, *,
                    fit_checked: bool = False) -> Run:
        """Launch ``scenario``; refused (DoesNotFit) where the fit check says it cannot fit,
        unless ``force``. ``fit_checked``: a switch checked it before stopping the last."""
        await asyncio.to_thread(self.preflight, scenario)  # port checks, paths: off the loop
        if not fit_checked:
            self._judge(await check_fit(self.owner, scenario), force)
        gpu, host, shmem, note = await asyncio.to_thread(self.baseline)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_name = f"{scenario.name}-{stamp}-{os.getpid()}"
        log_path = self.state_dir / "logs" / f"{run_name}.log"
        key_file = self._key_file(scenario, run_name)
        argv = scenario.argv(key_file, self.node_dir)
        scratch, env = self._scratch(scenario, run_name)
        try:
            proc = ManagedProcess.start(LaunchSpec(argv, log_path, env))
        except OSError as exc:
            if key_file is not None:
                key_file.unlink(missing_ok=True)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise SupervisorError(f"cannot launch '{scenario.name}': {argv[0]}: "
                                  f"{exc.strerror or exc}") from exc
        run = Run(scenario, proc, log_path, time.monotonic(), time.time(), gpu, host,
                  self.estimate(scenario), baseline_host_shmem=shmem, key_file=key_file,
                  scratch=scratch, baseline_note=None if note is None else note[1])
        self.current = run
        self._tell(run)
        self._save_current(run)
        self.owner.event("info", f"launched {scenario.name} (pid {proc.pid}) on {scenario.url}")
        if note is not None:
            self.owner.event(*note)
        self._follow_task = asyncio.create_task(self._follow(run), name=f"follow {scenario.name}")
        return run

    def _scratch(self, scenario: Scenario,
                 run_name: str) -> tuple[Path | None, dict[str, str]]:
        """The run's temporary folder, for an engine that asks for one, and the launch
        environment with it (the scenario file's env still wins). In the system's temporary
        folder, with a short name: a server's IPC socket paths in it must stay under the
        107 bytes a Unix socket address holds, which a state folder's depth would pass."""
        env = scenario.launch_env()
        if not scenario.engine.scratch_env(Path(".")):
            return None, env
        try:
            folder = Path(tempfile.mkdtemp(prefix="engram-top-"))
        except OSError as exc:
            raise SupervisorError(f"cannot make {run_name}'s temporary folder in "
                                  f"{tempfile.gettempdir()}: {exc.strerror or exc}") from exc
        return folder, {**scenario.engine.scratch_env(folder), **env}

    def _key_file(self, scenario: Scenario, run_name: str) -> Path | None:
        """The API key in a 0600 file for the server to read, out of the argv that `ps`
        shows every local user (SGLang: a --config YAML file, hence the suffix)."""
        text = scenario.key_file_text()
        if text is None:
            return None
        path = private_folder(self.state_dir / "keys") / f"{run_name}.yaml"
        try:
            write_private(path, text)
        except OSError as exc:
            raise SupervisorError(f"cannot write the API key file {path}: "
                                  f"{exc.strerror or exc}") from exc
        return path

    # ------------------------------------------------------------------ follow
    async def _follow(self, run: Run) -> None:
        tail = LogTail(run.log_path)
        rule = run.scenario.engine.readiness
        last_health = 0.0
        health_ok_since: float | None = None
        while run.state in (RunState.STARTING, RunState.READY):
            await self._read(run, tail)
            if run.state not in (RunState.STARTING, RunState.READY):
                return  # stopped meanwhile: its stop says how it ended, not a dead process
            now = time.monotonic()
            if not run.alive:
                await self._read(run, tail)
                run.exit_code = run.proc.returncode
                run.ended_at = now
                if await asyncio.to_thread(run.proc.group_members):  # no child may outlive it
                    run.stop_result = await run.proc.stop(min(5.0, run.scenario.stop_grace_s))
                if not await asyncio.to_thread(run.proc.group_members):
                    self._forget_current(run)
                if run.state == RunState.READY:
                    run.state = RunState.EXITED
                    self._tell(run)
                    self.owner.event("error", f"{run.scenario.name} exited (code {run.exit_code})")
                else:
                    run.state = RunState.FAILED
                    # The phase it failed in: the parser's phase reads "failed" by now.
                    phase = run.parser.failed_in or run.phase
                    run.failure = (f"exited with code {run.exit_code} during {phase}"
                                   + self._last_error(run))
                    self._tell(run)
                    self.owner.event("error", f"{run.scenario.name}: {run.failure}")
                return
            if run.state == RunState.READY:
                await self._check_members(run)
            if run.state == RunState.STARTING:
                http_up = run.http_up or run.phase in rule.http_phases
                probe = http_up or now - run.launched_at > rule.probe_after_s
                if probe and now - last_health > HEALTH_S:
                    last_health = now
                    if not await self._healthy(run):
                        health_ok_since = None
                    elif health_ok_since is None:
                        health_ok_since = now
                    # A server may answer /health during its warm-up (SGLang 0.5.23 does):
                    # when the log shows its HTTP lines, its ready line decides, and
                    # /health alone only after a while (a log without info lines).
                    # (Still starting: a stop may have begun while /health was asked.)
                    if health_ok_since is not None and run.state == RunState.STARTING and (
                            not http_up or now - health_ok_since > rule.health_only_after_s):
                        self._mark_ready(run, time.monotonic())
                late = now - run.launched_at > run.scenario.readiness_timeout_s
                if run.state == RunState.STARTING and late:
                    phase = run.parser.failed_in or run.phase
                    run.failure = (f"not ready after {run.scenario.readiness_timeout_s:.0f} s "
                                   f"(last phase: {phase})" + self._last_error(run))
                    self.owner.event("error", f"{run.scenario.name}: {run.failure}; stopping it")
                    await self._stop(run, end_as=RunState.FAILED)
                    return
            await asyncio.sleep(FOLLOW_S if run.state == RunState.STARTING else 0.25)

    async def _read(self, run: Run, tail: LogTail) -> None:
        # Read on a thread (a slow disk must not stall the dashboard); parsed here, in order.
        new = await asyncio.to_thread(tail.read_new)
        for at, line in new:
            run.lines.append((at, line))
            run.lines_seen += 1
            for event in run.follower.feed(line, at):
                if event.signal is Signal.HTTP_UP:
                    run.http_up = True
                elif event.signal is Signal.READY and run.state == RunState.STARTING:
                    if run.scenario.engine.readiness.log_decides:
                        self._mark_ready(run, at)
                    else:  # its ready line says only that HTTP is up: /health decides
                        run.http_up = True
        phase, run.phase = run.phase, run.parser.current_phase()
        if new or phase != run.phase:
            self._tell(run)

    def _mark_ready(self, run: Run, at: float) -> None:
        run.state = RunState.READY
        run.ready_at = at if run.ready_at is None else min(run.ready_at, at)
        run.members = server_members(run.pid)
        _drop_key_file(run)  # read at launch; a ready server needs it no more
        self.files.remember(run)
        self._tell(run)
        self.owner.event("info", f"{run.scenario.name} ready after {run.ready_s:.1f} s")

    async def _check_members(self, run: Run) -> None:
        """A process of the server that died while the server lives on (a TP rank killed by
        the OOM killer, a crashed scheduler): the server may still answer /health, but a
        GPU's share of the model is gone. Said once; the run is degraded from then on."""
        if run.degraded is not None:
            return
        members = dict(run.members)
        # /proc reads of every member, four times a second: on a thread, not the loop.
        gone = await asyncio.to_thread(gone_members, members)
        if run.state != RunState.READY:  # stopped meanwhile: members go as asked
            return
        if gone:
            names = ", ".join(f"pid {pid} ({what})" for pid, what in gone)
            run.degraded = f"{'a process' if len(gone) == 1 else 'processes'} of the " \
                           f"server died: {names}"
            self._tell(run)
            self.owner.event("error", f"{run.scenario.name}: {run.degraded}; the server still "
                             "runs, degraded (its GPUs' share of the model is gone)")

    async def _healthy(self, run: Run) -> bool:
        sc = run.scenario
        client = self._health.get(sc.url)
        if client is None:
            client = self._health[sc.url] = PageClient(sc.url, headers=bearer(sc.api_key))
        try:
            # A whole answer within the deadline: a /health that drips a byte a second would
            # otherwise hold the follow loop (and its readiness timeout) forever.
            rule = sc.engine.readiness
            page = await client.get(rule.health_path, deadline_s=HEALTH_DEADLINE_S,
                                    limit_bytes=HEALTH_LIMIT)
            if page.status_code != 200 or rule.confirm_path is None:
                return page.status_code == 200
            page = await client.get(rule.confirm_path, deadline_s=HEALTH_DEADLINE_S,
                                    limit_bytes=sc.engine.page_limit(rule.confirm_path))
        except (PageError, TooLarge, TimeoutError):
            return False
        return page.status_code == 200 and rule.confirm_text in page.text

    @staticmethod
    def _last_error(run: Run) -> str:
        # A port taken first (the traceback after it is uvicorn's), else the last error.
        taken = [ln for _, ln in run.lines if "address already in use" in ln]
        found = taken or [ln for _, ln in run.lines if any(
            m in ln for m in run.scenario.engine.error_markers)]
        said = "its port was taken by another process" if taken else "last error in the log"
        return f"; {said}: {found[-1].strip()[:200]}" if found else ""

    async def wait_ready(self, run: Run, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or run.scenario.readiness_timeout_s + 5)
        while time.monotonic() < deadline:
            if run.state == RunState.READY:
                return True
            if run.state in ENDED:
                return False
            await asyncio.sleep(0.05)
        return run.state == RunState.READY

    # ------------------------------------------------------------------ stop
    async def stop(self) -> StopResult | None:
        run = self.current
        if run is None or run.state == RunState.STOPPED:
            return None
        return await self._stop(run)

    async def _stop(self, run: Run, end_as: RunState | None = None) -> StopResult:
        """Stop ``run``; it ends as ``end_as`` when given (a readiness timeout: failed), set
        before the shared-memory sweep awaits, so no watcher ever sees it stopped first."""
        previous = run.state
        run.state = RunState.STOPPING
        self._tell(run)
        result = await run.proc.stop(run.scenario.stop_grace_s)
        run.stop_result = result
        run.exit_code = result.returncode
        if not result.survivors:
            self._forget_current(run)
        run.ended_at = run.ended_at or time.monotonic()
        # An end it had already come to (exited, failed) stays what it was.
        run.state = end_as or (previous if previous in UNASKED_END else RunState.STOPPED)
        self._tell(run)
        if result.killed:
            self.owner.event("warning", f"{run.scenario.name} ignored SIGTERM for "
                             f"{run.scenario.stop_grace_s:g} s and was killed")
        if result.survivors:
            self.owner.event("error", f"{run.scenario.name}: processes survived the stop: "
                             f"{list(result.survivors)}")
        else:
            self.owner.event("info", f"stopped {run.scenario.name}")
            left = await asyncio.to_thread(sweep_shm, run.launched_wall)
            if left:
                self.owner.event("info", f"removed {len(left)} shared-memory segment(s) "
                                 f"{run.scenario.name} left in /dev/shm ({left[0]}, ...)")
        if self._follow_task is not None and self._follow_task is not asyncio.current_task():
            self._follow_task.cancel()
            with contextlib.suppress(BaseException):
                await self._follow_task
        return result

    # ------------------------------------------------------------------ switch
    async def switch(self, to: Scenario, force: bool = False) -> Run:
        """Stop the current server, wait for its HBM to return, start ``to``."""
        run = self.current
        # A start that would be refused is refused before the running server is stopped;
        # the fit counts what the running server holds as free.
        await asyncio.to_thread(self.check_target, to,
                                run is None or run.scenario.port != to.port)
        self._judge(await check_fit(self.owner, to, run if run is not None and run.alive
                                    else None), force)
        if run is not None and run.state != RunState.STOPPED:
            await self._stop(run)
        if run is not None:
            if run.stop_result is not None and run.stop_result.survivors:
                raise SupervisorError(f"not starting '{to.name}': processes of "
                                      f"'{run.scenario.name}' survived the stop: "
                                      f"{list(run.stop_result.survivors)}")
            guard = await release_guard(self.owner, run)
            if guard.note:
                self.owner.event("info", guard.note)
            if not guard.released:
                detail = "; ".join(guard.holders) or guard.note
                raise SupervisorError(f"not starting '{to.name}': HBM did not return to the "
                                      f"baseline within {run.scenario.hbm_release_timeout_s:g} s"
                                      f" ({detail})")
            if guard.waited_s > 0.5:
                self.owner.event("info", f"HBM released after {guard.waited_s:.1f} s")
            host = await host_guard(self.owner, run)
            if host.note:
                self.owner.event("info" if host.released else "warning", host.note)
        return await self.start(to, fit_checked=True)

    def _judge(self, verdict: FitVerdict, force: bool) -> None:
        """Refuse what does not fit (unless forced); say what fits only in part."""
        if verdict.refused and not force:
            raise DoesNotFit(verdict)
        if verdict.refused or verdict.warned:
            lines = verdict.report()
            if verdict.refused:
                lines[0] = f"{lines[0][:-1]}, started anyway (force):"
            self.owner.event("warning", " ".join(line.strip() for line in lines))

    def close_now(self, leave_running: bool = False) -> None:
        """close() for a process whose event loop is gone (a crash, a signal): stop the
        server we started, without a loop (not an adopted one: Run.left_on_close)."""
        run = self.current
        if run is None or run.left_on_close(leave_running) or run.state == RunState.STOPPED \
                or not run.alive:
            return
        run.stop_result = run.proc.stop_now(run.scenario.stop_grace_s)
        run.state = RunState.STOPPED
        if not run.stop_result.survivors:
            self._forget_current(run)

    async def close(self, leave_running: bool = False) -> None:
        run = self.current  # what we started is stopped (not an adopted one: left_on_close)
        if run is not None and run.alive and not run.left_on_close(leave_running):
            await self._stop(run)
        elif run is not None and run.alive:
            whose = ", started by an earlier engram-top" if run.origin is Origin.ADOPTED else ""
            self.owner.event("info", f"left {run.scenario.name} running (pid {run.pid}{whose})")
        if self._follow_task is not None:
            self._follow_task.cancel()
            with contextlib.suppress(BaseException):
                await self._follow_task
        for client in self._health.values():
            await client.aclose()
        self._health.clear()
