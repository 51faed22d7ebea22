"""A terminal that goes away while the dashboard draws on it (its window closed, an ssh
session dropped) must not leave the dashboard stuck on its way out.

Textual writes each frame from a thread of its own, through a queue of 30 writes. Once the
terminal is hung up, a write raises EIO, that thread dies, and the queue fills; quitting
then puts one more item on the full queue and waits for ever, so the process (and, until
it ends, every server it started) outlives its terminal. Here the output file swallows the
error instead: a terminal that is gone takes every later write and discards it, the thread
lives on, and quitting goes through as it does on SIGHUP with the window still open.
"""

from __future__ import annotations

import contextlib
from typing import Any, TextIO

from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

from engram_top.app.key_wait import WakesOnInput
from engram_top.app.mixin import AppMixin


class GoneTolerant:
    """A text file (the terminal) whose writes and flushes, once one fails, are dropped."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._file.write(text)
            except (OSError, ValueError):  # EIO (hung up), EPIPE, a closed file
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except (OSError, ValueError):
                self.gone = True

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding ...
        return getattr(self._file, name)


def tolerant(base: type[Driver]) -> type[Driver]:
    """``base`` (Textual's driver for this platform) writing through GoneTolerant, and on
    Linux reading keys without waking ten times a second (key_wait)."""
    bases = (WakesOnInput,) if base is LinuxDriver else (base,)

    class TolerantDriver(*bases):  # type: ignore[misc]  # bases chosen at run time: mypy takes no variable as a class's base
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            file = getattr(self, "_file", None)
            if file is not None and not isinstance(file, GoneTolerant):
                self._file = GoneTolerant(file)

    TolerantDriver.__name__ = TolerantDriver.__qualname__ = f"Tolerant{base.__name__}"
    return TolerantDriver


class SurvivesHangUp(AppMixin):
    """For an App: its driver keeps quitting possible on a terminal that is gone."""

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()
        with contextlib.suppress(TypeError):  # a driver that cannot be subclassed: as it is
            return tolerant(base)
        return base
