"""One command at a time per state folder: whoever starts or stops the servers of a scenario
file holds an exclusive lock on its state folder (flock on `lock`), and says who it is in
the same file, so a second command can say what it waits for.

The kernel drops the lock when its holder exits, however it exits: a killed command never
leaves the folder locked. A dashboard holds it for its whole life (its servers are its to
start and stop); a headless switch, stop or bench only while it works.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from scenarios.private import private_folder

POLL_S = 0.1


class StateBusy(Exception):
    """Another command holds the state folder; the message says which and what to do."""


class StateLock:
    def __init__(self, state_dir: Path, command: str) -> None:
        self.path = state_dir / "lock"
        self.command = command
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> dict[str, object]:
        """Who holds it, as its holder wrote it (empty if unknown)."""
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        private_folder(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": self.command,
                                 "since": time.time()}).encode())
        self._fd = fd
        return True

    def describe(self) -> str:
        h = self.holder()
        if not h:
            return "another engram-top"
        # A time as try_acquire writes it; anything else in the file (a string, a list, an
        # Inf: another build's, a hand's) is no time, where float() or localtime() would
        # raise in the middle of this message.
        at = h.get("since")
        when = at if isinstance(at, int | float) and abs(at) < 1e12 else 0
        since = time.strftime("%H:%M:%S", time.localtime(when))
        return f"engram-top {h.get('command', '?')} (pid {h.get('pid', '?')}, since {since})"

    def holder_is_dashboard(self) -> bool:
        return self.holder().get("command") in DASHBOARDS

    def busy_error(self) -> StateBusy:
        who = self.describe()
        folder = self.path.parent
        if self.holder_is_dashboard():
            return StateBusy(f"the servers of this scenario file are run by {who} "
                             f"(state folder {folder}): use that dashboard, or quit it first")
        return StateBusy(f"the state folder {folder} is in use by {who}")

    async def acquire(self, wait_s: float,
                      on_wait: Callable[[str], None] = lambda text: None) -> None:
        """Take the lock, waiting up to ``wait_s`` for a headless holder to finish (never
        for a dashboard: it does not finish by itself). StateBusy when it cannot."""
        if self.try_acquire():
            return
        if wait_s <= 0 or self.holder_is_dashboard():
            raise self.busy_error()
        on_wait(f"waiting for {self.describe()} to finish (up to {wait_s:.0f} s)")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
            if self.try_acquire():
                return
            if self.holder_is_dashboard():
                break
        raise self.busy_error()

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


DASHBOARDS = ("run",)  # commands that hold the lock until a person quits them

