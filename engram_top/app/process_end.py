"""How an app ends, the dashboard's and the fleet's alike. As the process (the CLI's):
SIGTERM, SIGHUP and SIGINT quit it as `q` does, a terminal that closed is never resumed on
SIGCONT, and a crash is kept for the CLI to file rather than printed on the terminal. Either
way its session is closed once as it unmounts (a borrowed one is its owner's to close), and
what its start made is left out of the garbage collector's full collections."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import termios
from typing import TYPE_CHECKING, Any, Protocol

from engram_top.app.mixin import AppMixin

# New objects (less those freed) between two collections of the youngest generation, once
# the dashboard's start ended (Python's default: 700).
YOUNG_COLLECTED = 7000


class Closes(Protocol):
    """What ending needs of a session (the dashboard's and the fleet's both have it)."""

    async def close(self) -> None: ...


class EndsAsTheProcess(AppMixin):
    """For an App: its own_process, crash and stopped_by, its session closed as it unmounts,
    and its action_quit on a signal."""

    own_process: bool
    crash: BaseException | None
    stopped_by: signal.Signals | None
    if TYPE_CHECKING:  # the App's own, of its kind (a DashboardSession, a FleetView)
        @property
        def session(self) -> Closes: ...
    # A session someone else polls and closes (a headless snapshot's): drawn, not closed.
    borrowed: bool = False
    # Not _closed: MessagePump's own (set, the app dropped its messages as it closed).
    _session_closed = False

    async def close_session(self) -> None:
        if not self._session_closed and not self.borrowed:
            self._session_closed = True
            await self.session.close()

    def _begin_as_the_process(self) -> None:
        """As the process (on mount): its signals quit it as `q` does, and the garbage
        collector, off while the program started (engram_top.cli.start), comes back on
        after the first frame. What the start made is frozen first: the collector's first
        pass would otherwise walk all of it (about 90,000 objects) a moment after the frame.
        A test's app leaves both alone."""
        if self.own_process:
            self._handle_signals(True)
            self.call_after_refresh(_collect_from_now_on)

    def _after_start(self) -> None:
        """The session's start ended. As the process: what it holds now (its modules and
        classes, the widgets, the first readings) is left out of every later full collection
        of the cyclic garbage collector, which a loaded dashboard triggers about two minutes
        in and every five or so after, and which walked all of it each time: 40-50 ms of a
        core, holding the GIL, for about 75,000 objects. What is freed by its counts is freed
        as before; cycles among these already garbage (about 1,500 objects) stay for the
        process's life. Not for an app a test runs: each earlier test's garbage would stay.

        And the youngest generation is collected after YOUNG_COLLECTED new objects rather
        than 700: under load the dashboard made about 47 such collections a minute, 17-23 ms
        of a core, with 4 of the next generation's (6-10 ms); at YOUNG_COLLECTED, 6 a minute
        (8 ms) and none of the next, at the same RSS (52 MiB)."""
        if self.own_process:
            gc.freeze()
            gc.set_threshold(YOUNG_COLLECTED, *gc.get_threshold()[1:])

    async def on_unmount(self) -> None:
        if self.own_process:
            self._handle_signals(False)
        await self.close_session()

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


def _collect_from_now_on() -> None:
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
