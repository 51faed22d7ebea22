"""Launch a server as an argv list in its own process group, and stop the whole group.

The seed of the supervisor: never a shell string, one log file per run, SIGTERM to the group,
a grace period, then SIGKILL, and a check that nothing of the group survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from scenarios.private import open_private, private_folder
from scenarios.proc_start import start_of, started_as


@dataclass(frozen=True)
class LaunchSpec:
    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None


@dataclass(frozen=True)
class StopResult:
    returncode: int | None
    killed: bool  # the grace period ran out and SIGKILL was sent
    survivors: tuple[int, ...]  # pids of the group still alive afterwards (should be empty)


def _step(steps: Generator[float, None, StopResult]) -> float | StopResult:
    """The next step of a stop: the pause to take, or the stop's result. StopIteration
    cannot cross a thread's future, so it ends here."""
    try:
        return next(steps)
    except StopIteration as done:
        result: StopResult = done.value
        return result


def _exited(proc: psutil.Process) -> bool:
    """Gone but for its exit status. A process whose main thread has exited while other
    threads of it still run (an interpreter finishing its native threads) also reads as a
    zombie, yet it is alive, holds its memory and cannot be reaped: that one counts."""
    if proc.status() != psutil.STATUS_ZOMBIE:
        return False
    try:
        return len(os.listdir(f"/proc/{proc.pid}/task")) <= 1
    except OSError:  # no /proc (or already reaped): a zombie as psutil says
        return True


class ManagedProcess:
    def __init__(self, spec: LaunchSpec, popen: subprocess.Popen[bytes] | None,
                 pid: int | None = None, started: float | None = None) -> None:
        self.spec = spec
        self.popen = popen
        self.pid = popen.pid if popen is not None else int(pid or 0)
        self.pgid = self.pid  # start_new_session makes the child its group's leader
        # When it started (proc_start): tells it from a later process given its pid.
        self.started = started if started is not None else start_of(self.pid)

    @classmethod
    def start(cls, spec: LaunchSpec) -> ManagedProcess:
        if not spec.argv:
            raise ValueError("empty argv")
        private_folder(spec.log_path.parent)
        # The server's raw output (SGLang prints its ServerArgs, API keys included): its
        # owner's alone. The child keeps the descriptor; we close our copy.
        log = open_private(spec.log_path, "ab")
        try:
            popen = subprocess.Popen(
                spec.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"},
                cwd=spec.cwd, start_new_session=True)
        finally:
            log.close()
        return cls(spec, popen)

    @classmethod
    def adopt(cls, spec: LaunchSpec, pid: int, started: float) -> ManagedProcess | None:
        """A server an earlier engram-top launched (its group leader), if it still runs."""
        try:
            if not started_as(pid, started) or os.getpgid(pid) != pid:
                return None  # the pid was reused by something else
        except ProcessLookupError:
            return None
        return cls(spec, None, pid, started)

    @property
    def returncode(self) -> int | None:
        if self.popen is not None:
            return self.popen.poll()
        return None  # not our child: its exit status is its parent's to read

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            proc = psutil.Process(self.pid)
            return (self.started is None or started_as(self.pid, self.started)) \
                and not _exited(proc)
        except psutil.Error:
            return False

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes still in the launch's process group."""
        out = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == self.pgid and not _exited(proc):
                    out.append(proc.pid)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return out

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    async def stop(self, grace: float = 10.0) -> StopResult:
        """SIGTERM, a grace period, SIGKILL; then check that nothing of the group survives.

        The first half of the grace period, SIGTERM goes to the leader alone: SGLang's
        launcher then drains and takes down its scheduler and detokenizer itself, whereas a
        scheduler hit by a group-wide SIGTERM counts as crashed and sends the launcher down
        its crash path (seen on a real server: +5 s of "crash diagnostics"). Whatever is
        left then gets SIGTERM as a group, and after the whole grace period SIGKILL.
        """
        steps = self._stopping(grace)
        while True:
            # Each step scans the process table: on a thread, not the caller's event loop.
            step = await asyncio.to_thread(_step, steps)
            if isinstance(step, StopResult):
                return step
            await asyncio.sleep(step)

    def stop_now(self, grace: float = 10.0) -> StopResult:
        """stop() without an event loop: for a process that is exiting because its loop
        died (a crash, a signal), when nothing else will stop this server."""
        steps = self._stopping(grace)
        while True:
            step = _step(steps)
            if isinstance(step, StopResult):
                return step
            time.sleep(step)

    def _stopping(self, grace: float) -> Generator[float, None, StopResult]:
        """The stop as a series of pauses for the caller to take (awaited or slept)."""
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        group_termed = False
        while time.monotonic() - started < grace:
            self._reap()
            if not self.group_members():
                return StopResult(self.returncode, False, ())
            if not group_termed and (time.monotonic() - started >= grace / 2 or not self.alive()):
                self._signal_group(signal.SIGTERM)
                group_termed = True
            yield 0.05
        self._signal_group(signal.SIGKILL)
        for _ in range(100):
            self._reap()
            if not self.group_members():
                break
            yield 0.05
        return StopResult(self.returncode, True, tuple(self.group_members()))

    def _reap(self) -> None:
        """Reap the leader (if it is our child) so it does not linger as a zombie."""
        if self.popen is not None:
            self.popen.poll()
