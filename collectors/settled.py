"""The parts of a host reading that move only when the host's memory does, read at that rate.

A host poll reads a dozen /proc and /sys files a second. A quarter of its cost is the parts
that say where memory sits rather than how much is used: the cgroup's figures (five files),
/dev/shm's size, and whether a member of the server's tree spawned a process. None of them
changes while the host's free and available memory stand still (a spawned worker, a
container's growth, a file in /dev/shm: each is memory taken from the host). So they are
read again when MemFree or MemAvailable moved by MOVE_BYTES since they were last read, when
the server is another process, and at least every MAX_AGE_S; on a node whose memory moves
every second (a start, a load, a busy page cache) that is every poll, as before. (The NUMA
nodes are read every poll: their numa_maps share is the server's shared memory counted
once, its share of the host.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from collectors.readings import CgroupMemory
from collectors.units import MIB

MAX_AGE_S = 5.0
MOVE_BYTES = 16 * MIB


@dataclass(frozen=True, slots=True)
class SettledParts:
    """What the last read of them gave."""

    cgroup: CgroupMemory | None
    shm_mount: tuple[int, int] | None


class Settled:
    """When to read the settled parts again (``due``), and what they were (``kept``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 max_age_s: float = MAX_AGE_S, move_bytes: int = MOVE_BYTES) -> None:
        self.clock = clock
        self.max_age_s = max_age_s
        self.move_bytes = move_bytes
        self.kept: SettledParts | None = None
        self.reads = 0  # how many times they were read (what the cadence saves)
        self._at = 0.0
        self._memory: tuple[int, int] = (0, 0)
        self._root: int | None = None

    def due(self, meminfo: dict[str, int], root_pid: int | None) -> bool:
        """Whether this poll reads them (and, if so, counts from it)."""
        now = self.clock()
        memory = (meminfo.get("MemFree", 0), meminfo.get("MemAvailable", 0))
        if (self.kept is not None and root_pid == self._root
                and now - self._at < self.max_age_s
                and all(abs(a - b) < self.move_bytes
                        for a, b in zip(memory, self._memory, strict=True))):
            return False
        self._at, self._memory, self._root = now, memory, root_pid
        return True

    def keep(self, parts: SettledParts) -> None:
        self.kept = parts
        self.reads += 1
