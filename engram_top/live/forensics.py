"""A server's death, classified as it happens: when a run of ours ends without being asked,
read the kernel's OOM records and counter, the server's log errors and what it held just
before, classify (engram_top.model.death), and put the death on the run's facts (which the
recorder writes, the snapshot and `engram-top why` read) and in the events.

The counter's value at launch and the host's last reading with the server alive are kept
here: after the death, the next poll finds the processes gone."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from collectors.host import HostCollector
from collectors.kernel_log import oom_kills
from collectors.readings import GpuData, HostData
from collectors.source import SourceName
from engram_top.model.death import Evidence, classify
from engram_top.model.store import RunFacts, RunStore, StoreTopic
from scenarios.runstate import RunState
from scenarios.server_run import Run

LOG_TAIL = 30
# A failure the supervisor wrote for a process that ended by itself (not a readiness
# timeout, which it stopped): only those are deaths to classify.
SELF_ENDED = "exited with code"


class DeathWatch:
    def __init__(self, store: RunStore, host: HostCollector, backend: Any) -> None:
        self.store = store
        self.host = host
        self.backend = backend  # collectors.host.HostBackend: vmstat and the kernel log
        self._at_launch: dict[float, HostData | None] = {}  # by the run's launched_at
        self._first_tree: dict[float, HostData] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def launched(self, run: Run) -> None:
        """A run just launched: the kernel's OOM counter and the host as they stand."""
        data = self.store.data(SourceName.HOST)
        self._at_launch[run.launched_at] = data if isinstance(data, HostData) else None

    def changed(self, run: Run, facts: RunFacts | None) -> None:
        """The supervisor's news of a run: a death of ours is classified once."""
        seen = self.host.last_with_tree
        if seen is not None and seen.server_tree is not None \
                and seen.server_tree.root_pid == run.pid:
            self._first_tree.setdefault(run.launched_at, seen)
        if facts is None or facts.death is not None or facts.launched_at != run.launched_at:
            return
        ended = run.state == RunState.EXITED or (
            run.state == RunState.FAILED and (run.failure or "").startswith(SELF_ENDED))
        if not ended or any(t.get_name() == str(run.launched_at) for t in self._tasks):
            return
        task = asyncio.get_running_loop().create_task(self._classify(run, facts),
                                                      name=str(run.launched_at))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _classify(self, run: Run, facts: RunFacts) -> None:
        try:
            evidence = await asyncio.to_thread(self._evidence, run, facts)
            death = classify(evidence)
        except Exception as exc:  # forensics never take the dashboard down with them
            self.store.event("warning", f"{run.scenario.name}'s death could not be "
                                        f"classified: {type(exc).__name__}: {exc}")
            return
        facts.death = death
        self.store.bump(StoreTopic.RUN)
        first = death.evidence[0] if death.evidence else ""
        self.store.event("error", f"{death.headline()}. {first}. Next: {death.action}")

    def _evidence(self, run: Run, facts: RunFacts) -> Evidence:
        """Blocking reads (the kernel log, /proc/vmstat): off the event loop."""
        before = self.host.last_with_tree
        if before is None or before.server_tree is None or before.server_tree.root_pid != run.pid:
            before = None
        pids = {run.pid, *run.members}
        if before is not None and before.server_tree is not None:
            pids.update(before.server_tree.pids)
        text, problem = self.backend.kernel_log()
        now = self.backend.vmstat().get("oom_kill")
        at_launch = self._at_launch.get(run.launched_at)
        then = at_launch.oom_kills if at_launch is not None else None
        gpu = self.store.data(SourceName.GPU)
        return Evidence(
            scenario=run.scenario.name, exit_code=run.exit_code,
            was_ready=run.ready_at is not None,
            phase=run.parser.failed_in or run.phase,
            errors=facts.startup.errors, pids=tuple(sorted(pids)),
            kernel_kills=tuple(k for k in oom_kills(text or "") if k.pid in pids),
            kernel_log_problem=problem,
            oom_kills_delta=None if now is None or then is None else now - then,
            host_before=before, host_at_launch=self._first_tree.get(run.launched_at),
            gpu_before=gpu if isinstance(gpu, GpuData) else None,
            at=time.time(), log_tail=tuple(line for _, line in list(run.lines)[-LOG_TAIL:]))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
