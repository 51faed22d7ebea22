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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder

FILE_BYTES = 64 * 1024 * 1024  # one file's most, before the next begins
FILE_AGE_S = 3600.0  # and its longest: an hour's file is quick to replay
PATTERN = "agent-*.jsonl"
RETRY_S = 60.0  # after a failed write, how soon a new file is tried
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
AGES = ("s", "m", "h", "d", "w")


@dataclass(frozen=True)
class Retention:
    max_age_s: float | None = 7 * 86400.0
    max_bytes: int | None = 10**9

    @classmethod
    def parse(cls, text: str) -> Retention:
        """``7d``, ``2GB``, or both joined by a comma (``7d,2GB``); ValueError naming what
        it cannot read."""
        age: float | None = None
        size: int | None = None
        for part in text.split(","):
            m = _AMOUNT.fullmatch(part)
            unit = m.group(2).lower() if m else ""
            if m is None or unit not in _UNITS:
                raise ValueError(f"{part.strip()!r} is no age (30m, 12h, 7d) or size (500MB, "
                                 "2GiB)")
            value = float(m.group(1)) * _UNITS[unit]
            if value <= 0:
                raise ValueError(f"{part.strip()!r}: must be more than 0")
            if unit in AGES:
                age = value
            else:
                size = int(value)
        return cls(age, size)


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

    @property
    def active(self) -> bool:
        return self.current is not None and self.current.active

    def files(self) -> list[Path]:
        """The agent's files, oldest first."""
        return [p for p, _ in self._stats()]

    def kept_bytes(self) -> int:
        return sum(st.st_size for _, st in self._stats())

    def _stats(self) -> list[tuple[Path, os.stat_result]]:
        """The agent's files with their stat, oldest first; one gone meanwhile left out."""
        out = []
        try:
            found = list(self.folder.glob(PATTERN))
        except OSError:
            return []
        for p in found:
            with contextlib.suppress(OSError):
                out.append((p, p.stat()))
        return sorted(out, key=lambda ps: (ps[1].st_mtime, ps[0].name))

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
        now = time.time()
        current = self.current.path if self.current is not None else None
        stats = self._stats()
        total = sum(st.st_size for _, st in stats)
        gone: list[Path] = []
        for p, st in stats:  # oldest first
            if p == current:
                continue
            too_old = self.retention.max_age_s is not None and \
                now - st.st_mtime > self.retention.max_age_s
            too_big = self.retention.max_bytes is not None and total > self.retention.max_bytes
            if not (too_old or too_big):
                continue
            with contextlib.suppress(OSError):
                p.unlink()
                total -= st.st_size
                gone.append(p)
        return gone

    def close(self) -> None:
        if self.current is not None:
            self.current.close()

    def _open(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.folder / f"agent-{stamp}-{os.getpid()}.jsonl"
        n = 2
        while path.exists():
            path = self.folder / f"agent-{stamp}-{os.getpid()}-{n}.jsonl"
            n += 1
        self.current = Recorder(self.store, path).start()
        self._opened_at = self.clock()
