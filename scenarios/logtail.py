"""Follow a growing log file: complete lines since the last read, each stamped on arrival."""

from __future__ import annotations

import time
from pathlib import Path

MAX_READ = 1 << 20  # a burst bigger than this is read over several polls


class LogTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = b""

    def read_new(self) -> list[tuple[float, str]]:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self._pos:  # truncated or replaced: start over
                    self._pos, self._partial = 0, b""
                f.seek(self._pos)
                chunk = f.read(MAX_READ)
        except FileNotFoundError:
            return []
        self._pos += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # the last piece has no newline yet
        now = time.monotonic()
        return [(now, line.decode("utf-8", "replace").rstrip("\r")) for line in lines]
