"""The quick tier: `pytest -m "not slow"` runs the tests that start no process.

A test that starts one (a simulated server, the CLI, Prometheus, a load driver, a terminal)
is marked slow: its module says `pytestmark = pytest.mark.slow`, or the test its own
@pytest.mark.slow, or it asks for a fixture that starts a server (SERVER_FIXTURES, marked
here at collection). Outside slow tests, starting a process raises StartsAProcess, so a new
one that forgets its mark fails at once instead of slowing the quick tier down unnoticed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

# The fixtures (tests/conftest.py, tests/faults/conftest.py) that start real processes.
SERVER_FIXTURES = frozenset({"fleet", "sim_device", "sim_apikey", "device_metrics_page",
                             "cli"})


class StartsAProcess(RuntimeError):
    """A test outside the slow tier started a process."""


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise StartsAProcess(
        "this test starts a process but is not marked slow: mark it @pytest.mark.slow (or "
        "its module `pytestmark = pytest.mark.slow`) so that `pytest -m \"not slow\"` stays "
        "the quick tier")


# Every way a process starts: Popen (subprocess.run, asyncio's subprocesses and
# multiprocessing's spawn go through it), a fork (multiprocessing, pty), a spawn, a shell.
_STARTS: tuple[tuple[Any, str], ...] = (
    (subprocess.Popen, "_execute_child"),
    *((os, name) for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")
      if hasattr(os, name)),
)


@contextlib.contextmanager
def no_processes() -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name in _STARTS]
    try:
        for owner, name, _ in saved:
            setattr(owner, name, _refuse)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def mark_server_tests(items: list[pytest.Item]) -> None:
    """A test that asks for a real server is slow, whatever its module says."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None
