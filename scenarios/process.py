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
from dataclasses import dataclass, field
from pathlib import Path

import psutil


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


class ManagedProcess:
    def __init__(self, spec: LaunchSpec, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session makes the child its group's leader
        self.started_at = time.monotonic()

    @classmethod
    def start(cls, spec: LaunchSpec) -> ManagedProcess:
        if not spec.argv:
            raise ValueError("empty argv")
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(spec.log_path, "ab")  # noqa: SIM115 - the child keeps it; we close our copy
        try:
            popen = subprocess.Popen(
                spec.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"},
                cwd=spec.cwd, start_new_session=True)
        finally:
            log.close()
        return cls(spec, popen)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def group_members(self) -> list[int]:
        """Live (non-zombie) processes still in the launch's process group."""
        out = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if os.getpgid(proc.pid) == self.pgid and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc.pid)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return out

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    async def stop(self, grace: float = 10.0) -> StopResult:
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.popen.poll()  # reap the leader so it does not linger as a zombie
            if not self.group_members():
                return StopResult(self.popen.poll(), False, ())
            await asyncio.sleep(0.05)
        self._signal_group(signal.SIGKILL)
        for _ in range(100):
            self.popen.poll()
            if not self.group_members():
                break
            await asyncio.sleep(0.05)
        return StopResult(self.popen.poll(), True, tuple(self.group_members()))
