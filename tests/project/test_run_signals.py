"""A test run ended by SIGTERM (a CI timeout, `kill`) or SIGHUP (a closed terminal) stops what
its tests started, as Ctrl-C does (tests/signal_ends.py): a pytest run of its own, with
xdist's workers and without, whose tests each hold a process in a session of its own (as the
product's servers are), is signalled once every process is held, and every fixture's finally
must have stopped its process. Before, such a run left them all running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import wait_until

pytestmark = pytest.mark.slow  # starts a pytest run and the processes its tests hold

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
import signal_ends

def pytest_configure(config):
    signal_ends.install(config)
"""

HOLDING = """
import os, subprocess, threading
from pathlib import Path

import pytest

@pytest.fixture
def held():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        (Path("held") / str(proc.pid)).write_text("")
        yield proc
    finally:
        proc.kill()
        proc.wait()
        (Path("stopped") / str(proc.pid)).write_text("")

def test_holds(held):
    threading.Event().wait(300)  # until the run is ended
"""


def run_in(folder: Path, args: list[str]) -> subprocess.Popen[str]:
    (folder / "pytest.ini").write_text("[pytest]\n")  # not this project's settings
    (folder / "conftest.py").write_text(CONFTEST)
    for name in ("test_one.py", "test_two.py"):
        (folder / name).write_text(HOLDING)
    (folder / "held").mkdir()
    (folder / "stopped").mkdir()
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             *args], cwd=folder, env=env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("args", "held", "how"), [
    (["-n", "2", "--dist", "loadfile"], 2, "SIGTERM to pytest"),
    (["-n", "2", "--dist", "loadfile"], 2, "SIGHUP to its process group"),
    (["-p", "no:xdist"], 1, "SIGTERM to pytest"),
])
def test_a_run_ended_by_a_signal_stops_what_its_tests_started(
        tmp_path: Path, args: list[str], held: int, how: str) -> None:
    run = run_in(tmp_path, args)
    try:
        wait_until(lambda: run.poll() is not None or
                   len(list((tmp_path / "held").iterdir())) == held, 120,
                   f"{held} held processes")
        assert run.poll() is None, run.communicate()[0]  # it ended before it held them
        if how == "SIGTERM to pytest":
            run.send_signal(signal.SIGTERM)
        else:
            os.killpg(run.pid, signal.SIGHUP)
        out, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        pids = [int(f.name) for f in (tmp_path / "held").iterdir()]
        for pid in pids:  # whatever the run left, this test does not leave
            if not (tmp_path / "stopped" / str(pid)).exists():
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
    name = how.split()[0]
    assert f"KeyboardInterrupt: the test run was ended by {name}" in out, out
    assert sorted(int(f.name) for f in (tmp_path / "stopped").iterdir()) == sorted(pids), out
