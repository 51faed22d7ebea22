"""A server's death, classified as it happens: when a run of ours ends without being asked,
or the process of an attached server (the agent's, `attach`'s) is gone, read the kernel's
OOM records and counter, the server's log errors and what it held just before, classify
(engram_top.model.death), and put the death on the run's facts (which the recorder writes,
the snapshot and `engram-top why` read) and in the events.

The counter's value at launch and the host's first and last readings with the server alive
are kept here: after the death, the next poll finds its processes gone."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from collectors.host import HostCollector
from collectors.kernel_log import oom_kills
from collectors.readings import GpuData, HostData
from collectors.source import SourceName
from collectors.startup_facts import LogError, StartupFacts
from engram_top.model.death import Evidence, classify
from engram_top.model.store import RunFacts, RunStore, StoreTopic
from scenarios.engines.base import LogParser
from scenarios.logtail import MAX_LINE
from scenarios.runstate import RunState
from scenarios.server_run import Run

LOG_TAIL = 30
# The end of an attached server's log file read after its death: enough for its last
# traceback and the phase it was in, never the whole of a long-lived server's file.
LOG_FILE_TAIL_BYTES = 1 << 20
KEEP_RUNS = 64  # runs whose launch figures are kept (a death is classified soon after)
# A failure the supervisor wrote for a process that ended by itself (not a readiness
# timeout, which it stopped): only those are deaths to classify.
SELF_ENDED = "exited with code"


@dataclass(frozen=True)
class Ended:
    """What the session knows of a server whose process ended."""

    scenario: str
    key: float  # its facts' launched_at: one classification per run
    pid: int
    members: tuple[int, ...]
    exit_code: int | None  # None: not ours to wait for (attached)
    was_ready: bool
    phase: str
    errors: tuple[LogError, ...]
    log_tail: tuple[str, ...]
    # An attached server's log file (its output, where that is a file) and its engine's
    # parser, read after the death; None for a run of ours (its log was followed).
    log_file: str | None = None
    parser: Callable[[], LogParser] | None = field(default=None, compare=False)


class DeathWatch:
    def __init__(self, store: RunStore, host: Callable[[], HostCollector],
                 backend: Callable[[], Any]) -> None:
        self.store = store
        # The session's host collector and backend, asked each time: an attached simulated
        # server's node replaces them (live.attached._follow_node).
        self.host = host
        self.backend = backend  # a collectors.host.HostBackend: vmstat and the kernel log
        self._at_launch: dict[float, int | None] = {}  # the OOM count, by run (launched_at)
        self._first_tree: dict[float, HostData] = {}
        self._ready_tree: dict[float, HostData] = {}
        self._tasks: dict[float, asyncio.Task[None]] = {}
        # The attached server's process, asked each second whether it ended: kept, as
        # making one reads its /proc entry twice more than asking it.
        self._watched: psutil.Process | None = None

    def launched(self, run: Run) -> None:
        """A run just launched: the kernel's OOM counter and the host as they stand."""
        self._launched(run.launched_at)

    def _launched(self, key: float) -> None:
        if len(self._at_launch) > KEEP_RUNS:  # a bench's or an agent's many runs: the latest
            for old in sorted(self._at_launch)[:-KEEP_RUNS]:
                self._at_launch.pop(old, None)
                self._first_tree.pop(old, None)
                self._ready_tree.pop(old, None)
                task = self._tasks.get(old)
                if task is not None and task.done():
                    del self._tasks[old]
        if key not in self._at_launch:
            data = self.store.data(SourceName.HOST)
            self._at_launch[key] = data.oom_kills if isinstance(data, HostData) else None

    def _seen_alive(self, key: float, pid: int, ready: bool) -> None:
        seen = self.host().last_with_tree
        if seen is not None and seen.server_tree is not None and seen.server_tree.root_pid == pid:
            self._first_tree.setdefault(key, seen)
            if ready:  # what it held once serving: a death while serving grew from there
                self._ready_tree.setdefault(key, seen)

    def changed(self, run: Run, facts: RunFacts | None) -> None:
        """The supervisor's news of a run of ours: a death is classified once."""
        self._seen_alive(run.launched_at, run.pid, run.state == RunState.READY)
        if facts is None or facts.death is not None or facts.launched_at != run.launched_at:
            return
        ended = run.state == RunState.EXITED or (
            run.state == RunState.FAILED and (run.failure or "").startswith(SELF_ENDED))
        if ended:
            self._start(facts, Ended(
                run.scenario.name, run.launched_at, run.pid, tuple(run.members),
                run.exit_code, run.ready_at is not None, run.parser.failed_in or run.phase,
                facts.startup.errors, tuple(line for _, line in list(run.lines)[-LOG_TAIL:])))

    def attached(self, facts: RunFacts, pid: int | None, *, answered: bool = True,
                 parser: Callable[[], LogParser] | None = None) -> None:
        """Once a second, for the attached server watched (``pid``: its process, once
        found, while it starts too): its process gone is a death, though not ours to wait
        for; one that never ``answered`` died in start-up. Its log is read from the file
        its output went to, where there is one (facts.log_path, with ``parser``)."""
        if facts.owned or facts.death is not None or pid is None:
            return
        self._launched(facts.launched_at)
        self._seen_alive(facts.launched_at, pid, answered)
        if not self._gone(pid):
            return
        self._start(facts, Ended(facts.scenario, facts.launched_at, pid, (), None, answered,
                                 "running" if answered else "starting",
                                 facts.startup.errors, (), log_file=facts.log_path,
                                 parser=parser))

    def _gone(self, pid: int) -> bool:
        if self._watched is None or self._watched.pid != pid:
            try:
                self._watched = psutil.Process(pid)
            except psutil.NoSuchProcess:
                return True
            except psutil.Error:
                return False
        return _gone(self._watched)

    def _start(self, facts: RunFacts, ended: Ended) -> None:
        if ended.key in self._tasks:
            return
        task = asyncio.get_running_loop().create_task(self._classify(facts, ended),
                                                      name=f"death of {ended.scenario}")
        self._tasks[ended.key] = task

    async def _classify(self, facts: RunFacts, ended: Ended) -> None:
        try:
            evidence = await asyncio.to_thread(self._evidence, ended)
            death = classify(evidence)
        except Exception as exc:  # forensics never take the dashboard down with them
            self.store.event("warning", f"{ended.scenario}'s death could not be "
                                        f"classified: {type(exc).__name__}: {exc}")
            return
        facts.death = death
        self.store.bump(StoreTopic.RUN)
        first = death.evidence[0] if death.evidence else ""
        self.store.event("error", f"{death.headline()}. {first}. Next: {death.action}")

    def _evidence(self, ended: Ended) -> Evidence:
        """Blocking reads (the kernel log, /proc/vmstat): off the event loop."""
        before = self.host().peak_with_tree
        tree = before.server_tree if before is not None else None
        if tree is None or tree.root_pid != ended.pid:
            before, tree = None, None
        pids = {ended.pid, *ended.members, *(tree.pids if tree is not None else ())}
        backend = self.backend()
        text, problem = backend.kernel_log()
        now = backend.vmstat().get("oom_kill")
        then = self._at_launch.get(ended.key)
        gpu = self.store.data(SourceName.GPU)
        ready = self._ready_tree.get(ended.key) if ended.was_ready else None
        first = ready if ready is not None else self._first_tree.get(ended.key)
        # Its memory cgroup's own OOM count, read again now: the kill came after the last poll.
        cg_then = first.cgroup if first is not None else None
        cg_now = backend.reread_cgroup(cg_then) if cg_then is not None else None
        cg_delta = None if cg_now is None or cg_then is None or cg_now.oom_kills is None \
            or cg_then.oom_kills is None else cg_now.oom_kills - cg_then.oom_kills
        errors, phase, tail, log_read = ended.errors, ended.phase, ended.log_tail, True
        if ended.exit_code is None:  # attached: its log is what its output file holds
            read = _read_log(ended.log_file, ended.parser)
            log_read = read is not None
            if read is not None:
                errors, tail = read[0].errors or errors, read[1]
                if not ended.was_ready:
                    phase = read[0].failed_in or read[0].phase or phase
        return Evidence(
            scenario=ended.scenario, exit_code=ended.exit_code, was_ready=ended.was_ready,
            phase=phase, errors=errors, pids=tuple(sorted(pids)),
            kernel_kills=tuple(k for k in oom_kills(text or "") if k.pid in pids),
            kernel_log_problem=problem,
            # Backwards: not the same kernel's count (an attached simulated server's node
            # read in place of this machine's after the first reading): unknown.
            oom_kills_delta=None if now is None or then is None or now < then else now - then,
            cgroup_oom_kills_delta=cg_delta, cgroup_now=cg_now,
            host_before=before, since="ready" if ready is not None else "launch",
            host_at_launch=first,
            gpu_before=gpu if isinstance(gpu, GpuData) else None,
            at=time.time(), log_tail=tail, log_read=log_read)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _read_log(path: str | None, parser: Callable[[], LogParser] | None
              ) -> tuple[StartupFacts, tuple[str, ...]] | None:
    """What the end of a log file says (its engine's parser over its last
    LOG_FILE_TAIL_BYTES) and its last LOG_TAIL lines; None where it cannot be read."""
    # A regular file only: what is at the path now may be a pipe, whose open would wait.
    if not path or parser is None or not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - LOG_FILE_TAIL_BYTES))
            text = f.read(LOG_FILE_TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    if size > LOG_FILE_TAIL_BYTES:
        lines = lines[1:]  # the first is cut at its start
    reader = parser()
    for line in lines:
        reader.feed(line[-MAX_LINE:])  # a line without end: its start cut, as the follower does
    return reader.facts(), tuple(lines[-LOG_TAIL:])


def _gone(proc: psutil.Process) -> bool:
    """Its process ended: no such pid, or a zombie its parent has not reaped yet (a server
    killed under a supervisor that waits later)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # not ours to look at: alive as far as we can tell
        return False
