"""Follow a growing log file: complete lines since the last read, each stamped on arrival."""

from __future__ import annotations

import time
from pathlib import Path

from collectors.units import KIB, MIB

MAX_READ = MIB  # a burst bigger than this is read over several polls
# A line longer than this is given as it stands, its start cut: a server that writes without
# a newline (a progress bar's carriage returns, a binary dump) must not fill memory.
MAX_LINE = 64 * KIB


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
        if len(self._partial) > MAX_LINE:
            lines.append(self._partial)
            self._partial = b""
        now = time.monotonic()
        return [(now, _text(line)) for line in lines]


def _text(line: bytes) -> str:
    if len(line) > MAX_LINE:
        line = b"..." + line[-MAX_LINE:]
    return line.decode("utf-8", "replace").rstrip("\r")
