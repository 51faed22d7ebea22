"""One launched server from launch to stop, and its processes as the OS shows them.

The supervisor fills a Run in as the server starts, serves and stops; whoever shows runs is
told of each change (SupervisorOwner.run_changed) and reads it here.
"""

from __future__ import annotations

import contextlib
import re
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import psutil

from scenarios.engines import LogParser
from scenarios.engines.base import LogFollower
from scenarios.proc_start import start_of, started_as
from scenarios.process import ManagedProcess, StopResult
from scenarios.runstate import RunState
from scenarios.scenario_file import Scenario

LOG_KEEP = 400  # recent log lines kept for the log pane


class Origin(Enum):
    """Who started a run: this command, or an earlier engram-top whose server this one found
    still running in the state folder and took over (Supervisor.adopt). Closing stops what
    this command launched; an adopted server only when someone here asks for it."""

    LAUNCHED = "launched"
    ADOPTED = "adopted"


@dataclass
class Run:
    """One launched server from launch to stop."""

    scenario: Scenario
    proc: ManagedProcess
    log_path: Path
    launched_at: float
    launched_wall: float
    baseline_gpu: dict[int, int] = field(default_factory=dict)
    baseline_host_used: int | None = None
    estimate_s: float | None = None  # from earlier runs of the same scenario
    state: RunState = RunState.STARTING
    phase: str = "launching"
    ready_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    failure: str | None = None
    stop_result: StopResult | None = None
    # The engine's start-up log parser, behind typed events (set from the scenario's kind).
    follower: LogFollower = field(init=False)
    lines: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=LOG_KEEP))
    lines_seen: int = 0
    http_up: bool = False  # the log said uvicorn is running (cheaper than parser.facts())
    # Host shared memory (Shmem) before launch: where pinned host tables show, for the check
    # that they went with the server.
    baseline_host_shmem: int | None = None
    # The server's processes (pid -> (create time, what it is)) once ready: its TP ranks and
    # helpers. One of them gone while the server still answers is a degraded run.
    members: dict[int, tuple[float, str]] = field(default_factory=dict)
    degraded: str | None = None  # why, once a member died
    key_file: Path | None = None  # the API key, handed over in a 0600 file
    # The run's own temporary folder (engines whose servers leave files behind), removed
    # once the server's processes are gone.
    scratch: Path | None = None
    baseline_note: str | None = None  # why there is no HBM baseline, when there is none
    origin: Origin = Origin.LAUNCHED

    def __post_init__(self) -> None:
        self.follower = self.scenario.engine.follower()

    @property
    def parser(self) -> LogParser:
        return self.follower.parser

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def ready_s(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.launched_at

    @property
    def alive(self) -> bool:
        return self.proc.alive()

    def left_on_close(self, leave_running: bool) -> bool:
        """Whether closing leaves it running: told to (``leave_running``), or an earlier
        engram-top started it (adopted) and nobody here asked to stop it (a stop or switch
        under way is finished)."""
        return leave_running or (self.origin is Origin.ADOPTED
                                 and self.state in (RunState.STARTING, RunState.READY))


def server_members(pid: int) -> dict[int, tuple[float, str]]:
    """The server's process tree below its launcher: pid -> (its start, proc_start's; name)."""
    out: dict[int, tuple[float, str]] = {}
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                started = start_of(child.pid)
                if started is not None:
                    out[child.pid] = (started, _describe(child))
    return out


def gone_members(members: dict[int, tuple[float, str]]) -> list[tuple[int, str]]:
    """(pid, what it was) of each member no longer running (its pid gone, reused or a
    zombie). Reads /proc for each: call it off the event loop."""
    return [(pid, what) for pid, (created, what) in members.items()
            if not started_as(pid, created, running=True)]


def _describe(proc: psutil.Process) -> str:
    """A process as a person reads it: its name (SGLang titles its schedulers with their
    rank, sglang::scheduler_TP2), else its TP rank where its command line says."""
    name = proc.name()
    if re.search(r"TP\d", name):
        return name
    with contextlib.suppress(psutil.Error):
        cmd = proc.cmdline()
        if "--rank" in cmd[:-1]:
            return f"{name}, TP rank {cmd[cmd.index('--rank') + 1]}"
    return name


