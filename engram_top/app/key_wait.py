"""The terminal's keys, read by a thread that sleeps until there is something to do.

Textual's input thread waits on the terminal with a tenth of a second's timeout, to see
whether it should stop: ten wake-ups a second for as long as the dashboard is open, about
a tenth of a percent of a core here (as much as reading four GPUs through NVML). This one
waits for a key, for a lone Escape's short wait to run out (what follows it may make it
part of a longer key), or for the driver to stop it, which writes a byte on a pipe of its
own; nothing else wakes it. Keys reach Textual as its own thread gives them: through its
parser and the driver's process_message.
"""

from __future__ import annotations

import contextlib
import os
import threading
from codecs import getincrementaldecoder
from collections.abc import Callable
from selectors import EVENT_READ, DefaultSelector
from typing import Any

from textual._parser import ParseError
from textual._xterm_parser import XTermParser  # what Textual's own input thread parses with
from textual.drivers.linux_driver import LinuxDriver

# Textual's own pace while a parse waits (a lone Escape): the parser's timeout is checked
# by tick() as often as this.
PENDING_WAIT_S = 0.1


class WakesOnInput(LinuxDriver):
    """A LinuxDriver whose input thread sleeps until a key, an Escape's timeout or a stop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_lock = threading.Lock()
        self._wake_fd: int | None = None  # the pipe's writing end, while the thread runs

    def run_input_thread(self) -> None:
        read_end, write_end = os.pipe()
        with self._wake_lock:
            self._wake_fd = write_end
        try:
            self._read_keys(read_end)
        finally:
            with self._wake_lock:  # never a write to a closed (or reused) descriptor
                self._wake_fd = None
                os.close(write_end)
            os.close(read_end)

    def disable_input(self) -> None:
        with self._wake_lock:
            if self._wake_fd is not None and not self.exit_event.is_set():
                with contextlib.suppress(OSError):
                    os.write(self._wake_fd, b"\0")
        super().disable_input()

    def _read_keys(self, wake: int) -> None:
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        with DefaultSelector() as selector:
            selector.register(self.fileno, EVENT_READ)
            selector.register(wake, EVENT_READ)
            reading = True
            while True:
                # The parser's timeout is its own attribute: where a Textual has none, it
                # is waited for at Textual's pace, as Textual's own thread does.
                pending = getattr(parser, "_timeout_time", 0.0) is not None
                ready = {key.fd for key, _ in selector.select(
                    PENDING_WAIT_S if pending else None)}
                if wake in ready:
                    break
                if reading and self.fileno in ready:
                    text = self._read(decode)
                    if text:
                        for event in parser.feed(text):
                            self.process_message(event)
                    else:  # the input ended (a pipe, a terminal hung up): wait for the stop
                        selector.unregister(self.fileno)
                        reading = False
                for event in parser.tick():
                    self.process_message(event)
            # Stopping: what was typed up to now is still delivered, then the parse ends.
            if reading and any(key.fd == self.fileno for key, _ in selector.select(0)):
                text = self._read(decode, final=True)
                for event in parser.feed(text) if text else ():
                    self.process_message(event)
        with contextlib.suppress(EOFError, ParseError):
            for _ in parser.feed(""):
                pass

    def _read(self, decode: Callable[..., str], final: bool = False) -> str:
        """What the terminal has for us; "" once it is gone (EIO after a hang-up: the
        SIGHUP that comes with it ends the dashboard, not a traceback from this thread)."""
        try:
            return decode(os.read(self.fileno, 4096), final=final)
        except OSError:
            return ""
