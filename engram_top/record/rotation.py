"""An agent's recording, kept bounded for months: one Recorder at a time into a folder of
its own, a new file when the current one reaches its size or its age, and the oldest files
removed while the folder holds more than the retention allows (an age, a size, or both).

A write that fails (a full disk) stops the current file and says so once in the store's
events (the Recorder's own rule); the next rotation tries a new file, so recording comes
back by itself once there is room, and the rest of the agent never stops.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder
from engram_top.record.retention import files, trim
from engram_top.settings.retention import Retention as Retention  # re-exported

FILE_BYTES = 64 * 1024 * 1024  # one file's most, before the next begins
FILE_AGE_S = 3600.0  # and its longest: an hour's file is quick to replay
PATTERN = "agent-*.jsonl"
RETRY_S = 60.0  # after a failed write, how soon a new file is tried


class RotatingRecording:
    def __init__(self, store: RunStore, folder: Path, retention: Retention, *,
                 file_bytes: int = FILE_BYTES, file_age_s: float = FILE_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.folder = folder
        self.retention = retention
        self.file_bytes = file_bytes
        self.file_age_s = file_age_s
        self.clock = clock
        self.current: Recorder | None = None
        self._opened_at = 0.0
        self._stamp, self._serial = "", 0  # the last file's second, and its number in it

    @property
    def active(self) -> bool:
        return self.current is not None and self.current.active

    def files(self) -> list[Path]:
        """The agent's files, oldest first."""
        return [p for p, _ in self._stats()]

    def kept_bytes(self) -> int:
        return sum(st.st_size for _, st in self._stats())

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        return files(self.folder, PATTERN)

    def start(self) -> None:
        self._open()
        self.prune()

    def check(self) -> None:
        """Begin a new file when the current one is full, old or stopped; then prune."""
        cur = self.current
        age = self.clock() - self._opened_at
        if cur is not None and not cur.active and age < RETRY_S:
            return  # stopped (a full disk): a new file once a minute, not every check
        due = cur is None or not cur.active or age >= self.file_age_s
        if not due and cur is not None:
            with contextlib.suppress(OSError):
                due = cur.path.stat().st_size >= self.file_bytes
        if due:
            if cur is not None:
                cur.close()
            self._open()
            self.prune()

    def prune(self) -> list[Path]:
        """Remove the oldest files (never the current one) while the folder holds more than
        the retention: older than its age, or past its size altogether."""
        current = self.current.path if self.current is not None else None
        return [p for p, _ in trim(self.folder, PATTERN, self.retention, writing=current)]

    def close(self) -> None:
        if self.current is not None:
            self.current.close()

    def _open(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        # Files opened within one second take -2, -3, ...: counted, so that a name a trim
        # freed is never taken again by a newer file (it would pass for the old one).
        n = self._serial + 1 if stamp == self._stamp else 1
        while True:
            path = self.folder / (f"agent-{stamp}-{os.getpid()}.jsonl" if n == 1
                                  else f"agent-{stamp}-{os.getpid()}-{n}.jsonl")
            if not path.exists():
                break
            n += 1
        self._stamp, self._serial = stamp, n
        self.current = Recorder(self.store, path).start()
        self._opened_at = self.clock()
