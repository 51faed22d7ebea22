"""How a command ends, whatever ends it: Ctrl-C, SIGTERM, a closed terminal (SIGHUP), a crash.

Every process a command started is stopped on every exit path (unless the user asked to
leave it running), its temporary folders go, and the user reads one line, never a traceback.
A server an earlier engram-top started, which the command found running and took over
(adopted), is stopped only when the user asks for it (a key, the quit dialog, `stop`): on a
signal or a crash no one can be asked, so it is left running. Every server a command leaves
running is named as it ends, with the command that stops it (``say_left``).

- Headless commands (bench, switch, stop, snapshot) run as one asyncio task: a signal cancels
  it, so its own ``finally`` blocks stop what it started; the exit code is 128 + the signal.
- A dashboard handles the signals on its event loop (the app quits as from `q`), and after
  the app has returned, anything its session did not get to close is closed without a loop
  (``Session.close_now``): after a crash, the loop is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from engram_top.settings.paths import state_base

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(text: str) -> None:
    """One line on stderr; a closed terminal (SIGHUP, EIO) or pipe is no reason to fail."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def run_until_signal(main: Callable[[], Awaitable[int]], name: str) -> int:
    """asyncio.run(main()) where SIGINT, SIGTERM and SIGHUP cancel main, whose finally
    blocks then stop what it started; a second signal meanwhile is ignored (the stop is
    already under way and has deadlines of its own)."""
    caught: list[signal.Signals] = []

    async def guarded() -> int:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            if not caught and task is not None:
                caught.append(sig)
                task.cancel()

        for sig in SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            return await main()
        except asyncio.CancelledError:
            if caught:
                return 128 + caught[0]
            raise
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)

    code = asyncio.run(guarded())
    if caught:
        say(f"engram-top {name}: stopped by {caught[0].name}; what it started is stopped")
    return code


@contextlib.contextmanager
def ignoring_signals() -> Iterator[None]:
    """While the last cleanup runs: a second Ctrl-C must not cut a stop in half."""
    old = {}
    for sig in SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            old[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, handler)


NEEDS_TERMINAL = ("the dashboard needs a terminal: {problem}. Without one, `engram-top "
                  "snapshot` writes what it would show, and `switch` and `stop` start and stop "
                  "servers")


def terminal_problem() -> str | None:
    """Why a dashboard cannot run here, or None. Textual reads keys from standard input: at
    the end of a file or a pipe (a cron job, `ssh host cmd`, `< /dev/null`) its reader loops
    on the empty reads at a whole core, and nothing could ever quit it but a signal."""
    # Textual reads keys from standard input and draws on standard error (standard output
    # may go to a file: `engram-top > log` is a dashboard all the same).
    for name, stream in (("input", sys.__stdin__), ("error", sys.__stderr__)):
        try:
            ok = stream is not None and stream.isatty()
        except (OSError, ValueError):  # closed
            ok = False
        if not ok:
            return f"standard {name} is not one"
    return None


def without_terminal(session: Any, command: str) -> bool:
    """True, said and with what the session holds closed, when a dashboard cannot run here.
    Asked once a command's arguments and files are checked (their mistakes are worth saying
    anywhere) and before anything is drawn or started."""
    problem = terminal_problem()
    if problem is None:
        return False
    with ignoring_signals():
        session.close_now()
    say(f"engram-top {command}: " + NEEDS_TERMINAL.format(problem=problem))
    return True


def left_running(session: Any) -> tuple[Any, ...]:
    """The servers a session leaves running (LeftRunning); a fleet's runs none."""
    return tuple(getattr(session, "left_running", tuple)())


def say_left(session: Any, prefix: str = "engram-top") -> None:
    """A line for each server the session left running as it closed (LeftRunning.line):
    which, whose, and the command that stops it."""
    for server in left_running(session):
        say(f"{prefix}: {server.line()}")


def size_from_the_terminal() -> None:
    """Drop an exported COLUMNS and LINES when the output is a terminal: Textual (its Rich
    console, made with the app) sizes the screen by them before it asks the terminal, at
    start and at every resize, so a pair a CI runner or a shell profile exported (80x24,
    say) held a 120x40 window at "too small" for good. A shell sets them unexported; the
    terminal's own size is the truth. Called before any app is made."""
    out = sys.__stdout__  # what Textual draws on
    if out is not None and out.isatty():
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


def run_dashboard(app: Any, crash_dir: Path | None) -> int:
    """Run the Textual app; then close what its session left open (a crash, a signal), and
    say in one line what happened, and a line for each server left running. The traceback
    of a crash goes to a file under ``crash_dir``, never to the terminal."""
    session = app.session
    interrupted: BaseException | None = None
    try:
        app.run()
    except BaseException as exc:  # KeyboardInterrupt before or after Textual's loop
        interrupted = exc
    finally:
        with ignoring_signals():
            session.close_now()
    try:
        return _ended(app, interrupted, crash_dir)
    finally:
        say_left(session)


def _ended(app: Any, interrupted: BaseException | None, crash_dir: Path | None) -> int:
    # What it launched is stopped, unless it was told to leave it (say_left names that).
    stopped = "what this dashboard started is stopped" if not any(
        not s.adopted for s in left_running(app.session)) else ""
    crash = getattr(app, "crash", None)
    if crash is not None:
        where = write_crash_report(crash_dir, crash)
        say(f"engram-top: internal error: {type(crash).__name__}: {crash}."
            + (f" {stopped.capitalize()}." if stopped else "")
            + (f" Details: {where}" if where else ""))
        return 1
    sig = getattr(app, "stopped_by", None)
    if sig is not None:
        say(f"engram-top: stopped by {sig.name}" + (f"; {stopped}" if stopped else ""))
        return 128 + sig
    if isinstance(interrupted, KeyboardInterrupt):
        say("engram-top: interrupted" + (f"; {stopped}" if stopped else ""))
        return 130
    if interrupted is not None and not isinstance(interrupted, Exception):
        raise interrupted  # SystemExit and the like: theirs to end the process
    if interrupted is not None:
        where = write_crash_report(crash_dir, interrupted)
        say(f"engram-top: internal error: {type(interrupted).__name__}: {interrupted}"
            + (f". Details: {where}" if where else ""))
        return 1
    return app.return_code or 0


def write_crash_report(folder: Path | None, exc: BaseException) -> Path | None:
    """The traceback in a 0600 file for a bug report; None if it cannot be written."""
    base = folder or state_base()
    path = base / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path
