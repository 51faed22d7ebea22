"""The dashboard as the process (the CLI's): SIGTERM, SIGHUP and SIGINT quit it as `q` does,
a terminal that closed is never resumed on SIGCONT, and a crash is kept for the CLI to file
rather than printed on the terminal."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import termios
from typing import Any

from engram_top.app.mixin import AppMixin


class EndsAsTheProcess(AppMixin):
    """For the dashboard's App: its own_process, crash and stopped_by, and its action_quit."""

    own_process: bool
    crash: BaseException | None
    stopped_by: signal.Signals | None

    def _handle_signals(self, on: bool) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if on:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                else:
                    loop.remove_signal_handler(sig)
        with contextlib.suppress(ValueError, OSError):  # not the main thread: leave it
            if on:
                self._textual_sigcont = signal.signal(signal.SIGCONT, self._on_sigcont)
            elif self._textual_sigcont is not None:
                signal.signal(signal.SIGCONT, self._textual_sigcont)

    _textual_sigcont: Any = None


    def _on_sigcont(self, signum: int, frame: Any) -> None:
        """Textual resumes the terminal on SIGCONT (after Ctrl-Z). A terminal that closes
        sends SIGHUP and then SIGCONT: resuming a dead terminal starts a writer that dies on
        its first write, and the quit then waits on it for ever. Only a live terminal is
        resumed; the SIGHUP quits us."""
        stdin = sys.__stdin__  # None where the process started without one
        if stdin is None:
            return
        try:
            termios.tcgetattr(stdin.fileno())
        except (termios.error, OSError, ValueError, AttributeError):
            return
        handler = self._textual_sigcont
        if callable(handler):
            handler(signum, frame)
            # Textual puts its own handler back as it resumes: keep ours in front of it.
            self._textual_sigcont = signal.signal(signal.SIGCONT, self._on_sigcont)


    def _on_signal(self, sig: signal.Signals) -> None:
        """Quit as `q` does: the servers we started stop, the recording closes. After a
        SIGHUP the terminal is gone; nothing here waits on it."""
        if self.stopped_by is None:
            self.stopped_by = sig
            # As a key's action runs: on the app's message loop (a worker that calls exit()
            # leaves the app waiting on itself).
            self.call_later(self.action_quit)


    def _handle_exception(self, error: Exception) -> None:
        """A bug: kept for the CLI, which files the traceback and says one line; the
        session is closed on the way out (engram_top.cli.lifetime)."""
        if self.crash is None:
            self.crash = error
        super()._handle_exception(error)
        if self.own_process:
            self._exit_renderables.clear()  # Textual would print the traceback at exit
