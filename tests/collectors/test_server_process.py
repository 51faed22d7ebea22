"""Which local process serves an attached URL, or was started to (an engine loading its
weights listens only once they are loaded), and where its log goes: command lines as
written, and real processes of the test's own with their output in a file or a pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import free_port, wait_until

from collectors import listening
from collectors.listening import listening_inodes
from collectors.server_process import (
    _started_for,
    listening_pid,
    output_file,
    starting_pid,
)


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
    # Both wait on their standard input (the test's pipe), which the test closes at the end.
    wait = "import sys; sys.stdin.read()"
    code = (f"import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', {wait!r}, "
            f"'--port', sys.argv[2]]); {wait}")
    with log.open("w") as out:
        launcher = subprocess.Popen([sys.executable, "-c", code, "--port", str(port)],
                                    stdin=subprocess.PIPE, stdout=out,
                                    stderr=subprocess.STDOUT,
                                    start_new_session=True)  # its child goes with it
    piped = subprocess.Popen([sys.executable, "-c", wait], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: psutil.Process(launcher.pid).children(), 30,
                   "the launcher's child")
        assert starting_pid(url) == launcher.pid
        assert output_file(launcher.pid) == str(log)
        assert output_file(piped.pid) is None  # a pipe is no log file
        assert starting_pid(f"http://10.0.0.7:{port}") is None  # another host: not told
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        piped.kill()
        for proc in (launcher, piped):
            proc.communicate(timeout=5)  # closes its pipes too


# Listens on a port of its own, forks a child that keeps the socket open too (a launcher and
# its forked workers), says both pids, and waits on its standard input.
LISTENER = """
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
kid = os.fork()
if kid == 0:
    sys.stdin.read()
    os._exit(0)
print(s.getsockname()[1], os.getpid(), kid, flush=True)
sys.stdin.read()
os.waitpid(kid, 0)
"""


@pytest.mark.slow  # starts processes (tests/quick_tier.py)
def test_the_listening_process_is_the_eldest_that_holds_the_socket() -> None:
    """From the socket's inode and the processes newest first: the launcher, not its forked
    child that holds the socket too (psutil's listing names one holder, here the child, and
    a tree rooted there would leave the launcher out)."""
    with subprocess.Popen([sys.executable, "-c", LISTENER], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            port, pid, kid = (int(x) for x in parent.stdout.readline().split())
            assert listening_pid(port) == pid
            assert kid != pid
            # The kernel's socket diagnostics and /proc/net/tcp name the same socket.
            assert listening_inodes(port) == listening._by_proc(port, "/proc") != set()
            assert listening_pid(free_port()) is None and listening_inodes(free_port()) == set()
        finally:
            parent.communicate("")  # both read their standard input to its end


def test_where_netlink_is_refused_proc_net_tcp_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that refuses netlink sockets (seccomp): /proc/net/tcp is read instead."""
    import socket
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        inode = os.fstat(server.fileno()).st_ino
        assert listening_inodes(port) == {inode}

        def refused(*args: object, **kwargs: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(listening, "_by_netlink", refused)
        assert listening_inodes(port) == {inode}
        assert listening_pid(port) == os.getpid()
