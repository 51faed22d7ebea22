"""The fault matrix's tools: the real CLI as a subprocess (or under a real terminal, a pty),
every process it starts tagged through its environment so that the process table shows
whether anything outlived it; scenario files and bench plans for stand-in servers.

Every command gets its own state, config and temporary folders: what it leaves behind there
is the test's to see.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path

import psutil
from helpers import ENGRAM_TOP, free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_SGLANG = HERE / "fake_sglang"
CRASH_HOOK = HERE / "crash_hook"
TAG = "ENGRAM_TOP_FAULT_TAG"


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text[-3000:]


NAMED_KEYS = {"escape": "\x1b", "enter": "\r", "tab": "\t"}


class Terminal:
    """A command on a real pseudo-terminal it holds as its controlling terminal, as when a
    person runs it: closing the terminal (hang_up) sends it SIGHUP. Its output is drained
    all along, as a terminal would, so it never blocks on a full pty."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path,
                 size: tuple[int, int] = (30, 100)) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))

        def controlling() -> None:  # after setsid: this terminal becomes the session's
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                     cwd=cwd, start_new_session=True, preexec_fn=controlling)
        os.close(slave)
        self._closing = threading.Event()
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        # Never blocked in read() when the terminal is closed: a read in progress holds the
        # master open, and the kernel hangs the terminal up only once the last hold is gone
        # (a dashboard with nothing to redraw would then never see its terminal close).
        while not self._closing.is_set():
            try:
                ready, _, _ = select.select([self.master], [], [], 0.05)
                if not ready:
                    continue
                data = os.read(self.master, 65536)
            except (OSError, ValueError):  # EIO once the other side is gone
                return
            if not data:
                return
            self._chunks.append(data)

    @property
    def output(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def shown(self) -> str:
        """What the terminal shows now: its output's tail here (a screen, where emulated)."""
        return self.output[-3000:]

    def press(self, keys: str) -> None:
        """Type ``keys``; a key's name ("escape", "enter", "tab") is that key, not its
        letters (typing "escape" once took a snapshot with its s)."""
        os.write(self.master, NAMED_KEYS.get(keys, keys).encode())

    def hang_up(self) -> None:
        """Close the terminal, as closing its window does."""
        self._close_master()

    def _close_master(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._reader.join(5)
        with contextlib.suppress(OSError):
            os.close(self.master)

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:  # what the screen said, not a bare timeout
            raise AssertionError(f"still running after {timeout:.0f} s; it showed:\n"
                                 f"{self.shown()}") from None
        self._reader.join(2)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, psutil.Error):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self._close_master()


class Cli:
    """engram-top as a user runs it, with its own folders and a tag in its environment."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = uuid.uuid4().hex
        self.state = tmp / "xdg-state"
        self.tmpdir = tmp / "tmp"
        self.tmpdir.mkdir()
        self.env = {**os.environ, TAG: self.tag, "XDG_STATE_HOME": str(self.state),
                    "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "TMPDIR": str(self.tmpdir),
                    "TERM": "xterm-256color"}
        self.env.pop("ENGRAM_TOP_CONFIG", None)
        self._terminals: list[Terminal] = []
        self._procs: list[subprocess.Popen[str]] = []

    def run(self, *args: str, timeout: float = 60.0,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*ENGRAM_TOP, *args], capture_output=True, text=True,
                              timeout=timeout, env={**self.env, **(env or {})}, cwd=self.tmp)

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen([*ENGRAM_TOP, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=self.tmp,
                                env={**self.env, **(env or {})})
        self._procs.append(proc)
        return proc

    def terminal(self, *args: str, env: dict[str, str] | None = None) -> Terminal:
        term = Terminal([*ENGRAM_TOP, *args], {**self.env, **(env or {})}, self.tmp)
        self._terminals.append(term)
        return term

    def processes(self, needle: str = "") -> list[psutil.Process]:
        """Live processes started under this test's tag (whose command line holds
        ``needle``), the test process itself aside."""
        out = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if proc.environ().get(TAG) == self.tag and needle in " ".join(proc.cmdline()):
                    out.append(proc)
            except psutil.Error:
                continue
        return out

    def servers(self) -> list[psutil.Process]:
        """Server processes (simulated or stand-in SGLang), ranks included."""
        return [p for p in self.processes() if _is_server(p)]

    def close(self) -> list[str]:
        """Kill whatever is left; return what was left, for the test's own assertions."""
        for term in self._terminals:
            term.kill()
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)
        left = self.processes()
        names = [command_line(p)[:120] for p in left]
        for p in left:
            with contextlib.suppress(OSError, psutil.Error):
                p.kill()
        return names


def _is_server(proc: psutil.Process) -> bool:
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return "sim serve" in cmd or "sim.rank" in cmd or "sglang.launch_server" in cmd


def scenario_file(tmp: Path, body: str) -> Path:
    """A scenario file for stand-in SGLang servers (tests/faults/fake_sglang): `python -m
    sglang.launch_server` runs the bad server with the scenario's args (--fault ...)."""
    path = tmp / "scenarios.toml"
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    path.write_text(f"""
[defaults]
kind = "sglang"
python = "{sys.executable}"
model_path = "{model}"
stop_grace_s = 2
readiness_timeout_s = 60
hbm_release_timeout_s = 5
env = {{ PYTHONPATH = "{FAKE_SGLANG}" }}
{body}""")
    return path


def sim_scenario_file(tmp: Path, body: str = "") -> Path:
    """Scenarios of the simulated node, started at x0.02, on ports of their own."""
    path = tmp / "sim.toml"
    path.write_text(f"""
[defaults]
kind = "simulated"
time_scale = 0.02
stop_grace_s = 5
hbm_release_timeout_s = 20
[scenarios.device]
placement = "device"
port = {free_port()}
{body}""")
    return path


PLAN = """
[bench]
scenarios_file = "{scenarios}"
scenarios = {names}
baseline = "ok"
[workload]
levels = [{{ concurrency = 2, requests = 4 }}]
input_len = 16
output_len = 32
range_ratio = 1.0
warmup_requests = 0
request_timeout_s = 2
"""


def bench_with(cli: Cli, tmp_path: Path, fault: str) -> tuple[dict, list[dict], float]:
    """Bench a healthy stand-in server against one whose streams misbehave (--fault):
    the report, the rows of requests.csv, and how long the bench took."""
    scenarios = scenario_file(tmp_path, f"""
[scenarios.ok]
port = {free_port()}
[scenarios.bad]
port = {free_port()}
args = ["--fault", "{fault}"]
""")
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(scenarios=scenarios, names='["ok", "bad"]'))
    out = tmp_path / "out"
    started = time.monotonic()
    res = cli.run("bench", str(plan), "--out", str(out), timeout=120)
    took = time.monotonic() - started
    no_traceback(res.stdout, res.stderr)
    # 1: a scenario measured nothing (every request of it failed); the reports are written.
    assert res.returncode in (0, 1), res.stdout + res.stderr
    report = json.loads((out / "report.json").read_text())
    assert res.returncode == (0 if all(r["completed"] for r in report["results"]) else 1)
    with open(out / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    return report, rows, took


def command_line(proc: psutil.Process) -> str:
    """Its command line, or what psutil says instead for one that ended as we looked."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error as e:
        return f"pid {proc.pid} ({type(e).__name__})"
