"""The pids of the server's process tree, kept between polls.

Finding a process's descendants means reading every process's parent: psutil walks all of
/proc, the dearest read of a host poll (about 5 ms a second on a quiet 2-core machine, far
more on a node with a thousand processes). A serving tree's members change only at start-up,
when a rank dies and when a new worker is spawned, so the listing is kept and made again
only when something says it changed:

- a member is gone (its status read failed);
- a member's main thread has a child the listing does not hold (/proc/PID/task/PID/children,
  one small read per member: how multiprocessing's spawns appear), looked at when the host
  poll reads its settled parts (collectors.settled: a new process takes memory from the
  host, so its spawn is looked for within a poll of it, and at least every few seconds);
- RELIST_S have passed (a child forked by another thread, or a kernel without the children
  file, is seen within that);
- the root is another process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

RELIST_S = 30.0


class TreeBackend(Protocol):
    def children(self, pid: int) -> list[int] | None:
        """The process's descendants; None if the process is gone."""

    def thread_children(self, pid: int) -> list[int] | None:
        """The children of the process's main thread; None where the kernel does not say."""


class TreeMembers:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.root: int | None = None
        self.pids: tuple[int, ...] = ()
        self.listed_at = float("-inf")
        self.stale = True
        self.listings = 0  # how many whole listings were made (what the cache saves)

    def get(self, backend: TreeBackend, root: int, spawns: bool = True) -> list[int] | None:
        """The root and its descendants; None when the root is gone. ``spawns``: whether
        a kept listing is checked for new children this time."""
        now = self.clock()
        if (root != self.root or self.stale or now - self.listed_at >= RELIST_S
                or (spawns and self._spawned(backend))):
            kids = backend.children(root)
            self.listings += 1
            if kids is None:
                self.root, self.pids, self.stale = None, (), True
                return None
            self.root, self.pids, self.listed_at, self.stale = root, (root, *kids), now, False
        return list(self.pids)

    def gone(self) -> None:
        """A member's read failed: list the tree again next time."""
        self.stale = True

    def _spawned(self, backend: TreeBackend) -> bool:
        known = set(self.pids)
        for pid in self.pids:
            kids = backend.thread_children(pid)
            if kids is None:
                continue  # gone (its status read says so) or no children file: RELIST_S
            if not known.issuperset(kids):
                return True
        return False
