"""Which local process serves an attached URL, or was started to (an engine loading its
weights listens only once they are loaded), and where its log goes: command lines as
written, and real processes of the test's own with their output in a file or a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import free_port

from collectors.server_process import _started_for, output_file, starting_pid


def test_a_dashboard_naming_an_engine_is_no_server_starting() -> None:
    """This dashboard's own kind of command line (`--engine sglang`, a URL on the default
    port) is not taken for a server loading its weights; a launcher without --port is."""
    assert not _started_for(["engram-top", "attach", "http://127.0.0.1:30000", "--engine",
                             "sglang"], 30000)
    assert _started_for(["python3", "-m", "sglang.launch_server", "--model-path", "m"], 30000)
    assert _started_for(["/usr/bin/vllm", "serve", "m"], 8000)
    assert not _started_for(["/usr/bin/vllm", "serve", "m"], 30000)
    assert _started_for(["python3", "-m", "sglang.launch_server", "--port=31000"], 31000)
    assert not _started_for(["python3", "-m", "sglang.launch_server", "--port", "31001"], 31000)


@pytest.mark.slow  # starts processes (tests/quick_tier.py)
def test_the_starting_process_is_the_launcher_and_its_log_is_its_output_file(
        tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    # A launcher whose child names the port too (as a rank's command line can): the launcher.
    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)', '--port', sys.argv[2]]); time.sleep(60)")
    with log.open("w") as out:
        launcher = subprocess.Popen([sys.executable, "-c", code, "--port", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # its child goes with it
    piped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while not psutil.Process(launcher.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)  # a wait on a condition, with a deadline
        assert psutil.Process(launcher.pid).children(), "the launcher's child did not start"
        assert starting_pid(url) == launcher.pid
        assert output_file(launcher.pid) == str(log)
        assert output_file(piped.pid) is None  # a pipe is no log file
        assert starting_pid(f"http://10.0.0.7:{port}") is None  # another host: not told
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        piped.kill()
        for proc in (launcher, piped):
            proc.wait(5)
