"""What the supervisor asks of whoever runs it, as one object with named methods.

A live session is the owner in the product (engram_top.live.session.LiveSession); a test
writes a small class. The supervisor reads the node through it (its baseline before a
launch, its guards before the next) and tells it what happens, as it happens.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from collectors.readings import GpuData, HostData
from scenarios.server_run import Run


@runtime_checkable
class SupervisorOwner(Protocol):
    def gpu_sample(self) -> GpuData:
        """The node's GPUs now, for the HBM baseline and the release guard. Raises
        collectors.base.SourceUnavailable where there are none to read (a CPU machine):
        the run then has no HBM baseline and its release is not checked."""
        ...

    def host_used(self) -> int:
        """Host memory in use, in bytes (any exception: no host baseline)."""
        ...

    def host_shmem(self) -> int:
        """Host shared memory (Shmem) in bytes, where pinned host tables show (any
        exception: their release is not checked)."""
        ...

    def host_sample(self, root_pid: int | None) -> HostData:
        """The host's memory now, per NUMA node too, with the process tree of ``root_pid``
        (the server a switch replaces), for the fit check (any exception: host unchecked)."""
        ...

    def event(self, level: str, text: str) -> None:
        """A line for the events pane: level is info, warning or error."""
        ...

    def run_changed(self, run: Run) -> None:
        """Every change to a run (state, phase, new log lines, a dead member), as it
        happens: whoever shows the run hears it here rather than polling it."""
        ...
