"""The quick tier stays quick: outside slow tests no process starts, whichever way it is
asked for, and a test that asks for a real server is slow by itself."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from quick_tier import SERVER_FIXTURES, StartsAProcess, mark_server_tests


def test_a_quick_test_cannot_run_a_command() -> None:
    with pytest.raises(StartsAProcess, match="not marked slow"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(StartsAProcess):
        subprocess.Popen(["true"])
    with pytest.raises(StartsAProcess):
        os.system("true")


async def test_a_quick_test_cannot_start_an_asyncio_subprocess() -> None:
    with pytest.raises(StartsAProcess):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")


def test_a_quick_test_cannot_fork() -> None:
    try:
        pid = os.fork()
    except StartsAProcess:
        return
    if pid == 0:  # the guard failed: the child leaves at once, the parent says so
        os._exit(0)
    os.waitpid(pid, 0)
    pytest.fail("os.fork started a process in a test not marked slow")


@pytest.mark.slow
def test_a_slow_test_runs_commands() -> None:
    done = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "42"


def test_the_slow_marker_is_registered_and_strict(request: pytest.FixtureRequest) -> None:
    markers = request.config.getini("markers")
    assert any(m.startswith("slow:") for m in markers)
    assert request.config.option.strict_markers or "--strict-markers" in str(
        request.config.getini("addopts"))


def test_a_test_asking_for_a_server_is_marked_slow() -> None:
    class Item:
        def __init__(self, fixtures: list[str]) -> None:
            self.fixturenames, self.marks = fixtures, []

        def add_marker(self, mark: pytest.MarkDecorator) -> None:
            self.marks.append(mark.name)

    serving, quick = Item(["tmp_path", "sim_device", "fleet"]), Item(["tmp_path"])
    mark_server_tests([serving, quick])  # type: ignore[list-item]
    assert serving.marks == ["slow"] and quick.marks == []
    assert {"fleet", "sim_device", "cli"} <= SERVER_FIXTURES
