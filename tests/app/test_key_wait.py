"""The dashboard's input thread on a real pseudo-terminal: keys arrive, a lone Escape
arrives once its wait runs out with nothing typed after it, the thread sleeps (no
timeout) whenever no parse is pending, and a stop or a closed terminal ends it cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import queue
import selectors
import signal
import threading
import tty
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import wait_until
from textual import events
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

from engram_top.app import key_wait
from engram_top.app.key_wait import PENDING_WAIT_S, WakesOnInput
from engram_top.app.terminal import tolerant

DEADLINE_S = 10.0


class Keys(WakesOnInput):
    """The driver with its messages kept instead of posted to an app."""

    got: queue.Queue[Message]

    def process_message(self, message: Message) -> None:
        self.got.put(message)

    def next_key(self) -> str:
        while True:
            message = self.got.get(timeout=DEADLINE_S)
            if isinstance(message, events.Key):
                return message.key


class Spied(selectors.DefaultSelector):  # type: ignore[misc,valid-type]  # an alias chosen per platform
    """The thread's selector, each wait's timeout written down."""

    timeouts: list[float | None] = []

    def select(self, timeout: float | None = None) -> list[Any]:
        Spied.timeouts.append(timeout)
        return super().select(timeout)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Keys, int]]:
    """The driver reading a pty's far end (its own thread), and the near end to type on."""
    master, slave = pty.openpty()
    tty.setraw(slave)  # as the dashboard sets its terminal: each key as typed
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    monkeypatch.setattr(key_wait, "DefaultSelector", Spied)
    Spied.timeouts = []

    async def made() -> Keys:  # a driver takes the running loop when made
        return Keys(object(), mouse=False)  # type: ignore[arg-type]  # no app: messages kept

    driver = asyncio.run(made())
    driver.got = queue.Queue()
    driver.fileno = slave
    failed: list[BaseException] = []

    def run() -> None:
        try:
            driver.run_input_thread()
        except BaseException as exc:  # a dashboard would panic with its traceback
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield driver, master
    finally:
        driver.disable_input()
        thread.join(DEADLINE_S)
        for sig, handler in saved.items():  # the driver's own, put in place when made
            signal.signal(sig, handler)
        for fd in (master, slave):
            with contextlib.suppress(OSError):  # the hang-up's test closed its own
                os.close(fd)
        assert not thread.is_alive(), "the input thread did not stop"
        assert not failed, failed


def test_keys_arrive_and_the_thread_waits_without_a_timeout_between_them(
        terminal: tuple[Keys, int]) -> None:
    driver, master = terminal
    os.write(master, b"h")
    assert driver.next_key() == "h"
    os.write(master, b"\x1b")  # alone: it may begin a longer key, so the parser waits
    assert driver.next_key() == "escape"  # nothing typed after it: it arrives all the same
    os.write(master, b"q")
    assert driver.next_key() == "q"
    waits = Spied.timeouts
    # Each wait with no parse pending has no timeout (Textual's own thread: 0.1 s each);
    # only the Escape's are short, at Textual's pace.
    assert waits[0] is None
    assert set(waits) == {None, PENDING_WAIT_S}
    assert PENDING_WAIT_S in waits


def test_a_stop_ends_the_sleeping_thread(terminal: tuple[Keys, int]) -> None:
    driver, master = terminal
    os.write(master, b"x")
    assert driver.next_key() == "x"
    # The fixture's disable_input wakes it through its pipe; a thread left asleep fails it.


def test_a_closed_terminal_leaves_the_thread_waiting_for_its_stop(
        terminal: tuple[Keys, int]) -> None:
    driver, master = terminal
    os.write(master, b"y")
    assert driver.next_key() == "y"
    waits = len(Spied.timeouts)
    os.close(master)  # the terminal hung up: reads fail with EIO, never a traceback
    wait_until(lambda: len(Spied.timeouts) > waits and Spied.timeouts[-1] is None,
               DEADLINE_S, "the thread back asleep after the hang-up")
    assert not any(isinstance(m, events.Key) for m in list(driver.got.queue))
    # The fixture stops it, as the dashboard's quit (on the SIGHUP that comes with it) does.


def test_the_dashboard_reads_its_keys_with_this_thread() -> None:
    assert issubclass(tolerant(LinuxDriver), WakesOnInput)
