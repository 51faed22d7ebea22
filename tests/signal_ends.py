"""A test run ended by a signal tears down as one ended by Ctrl-C: every fixture's finally runs,
so the servers, terminals and load drivers the tests started are stopped, not left running.

Python's default for SIGTERM (a CI timeout, `kill`) and SIGHUP (a closed terminal) is to die
on the spot, finally blocks and all. The servers run in sessions of their own (as the
product starts them), so nothing else reaches them: a run killed so left a real vLLM server
running. Here those signals raise KeyboardInterrupt instead, as SIGINT does; and pytest-xdist's
controller, which runs no tests, first passes the signal on to its workers, which would
otherwise be killed when it stops waiting for them (Ctrl-C in a terminal reaches them all;
`kill` reaches the controller alone). A process already ending ignores a second one (a
closed terminal's SIGHUP reaches the workers too): it must not cut the teardown short.
Installed by tests/conftest.py."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from types import FrameType

import psutil
import pytest

ENDING = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(workers: bool) -> Callable[[int, FrameType | None], None]:
    ending: list[int] = []

    def ended(signum: int, _frame: FrameType | None) -> None:
        if ending:
            return  # the teardown is under way: a second signal must not cut it short
        ending.append(signum)
        if workers:
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):  # gone already
                    child.send_signal(signal.SIGTERM)
        raise KeyboardInterrupt(f"the test run was ended by {signal.Signals(signum).name}")
    return ended


def install(config: pytest.Config) -> None:
    """The handlers, where SIGTERM and SIGHUP are at Python's default (run again, it keeps
    those in place)."""
    if all(signal.getsignal(sig) is not signal.SIG_DFL for sig in ENDING):
        return
    # The controller of a distributed run has the workers for children; a worker, or a run
    # without xdist, has only what its tests started, which their fixtures stop.
    controller = not hasattr(config, "workerinput") and \
        bool(getattr(config.option, "numprocesses", 0)) and \
        getattr(config.option, "dist", "no") != "no"
    handler = _interrupt(controller)
    for sig in ENDING:
        if signal.getsignal(sig) is signal.SIG_DFL:  # a harness's own handler stays
            signal.signal(sig, handler)
