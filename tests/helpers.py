"""What several test modules share: the repository's paths and units, waits with a deadline,
the dashboard's text, child processes that cannot outlive a test, and the simulated SGLang
servers (SimServer, Fleet) that conftest.py's fixtures launch.

Test modules import from here (and scene.py, the snapshots' store), never from one another
or from a conftest.py: those are pytest's to load, once, under names of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import html
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from textual.app import App
from textual.pilot import Pilot

from collectors.host import sample as host_sample
from engram_top.alerts.monitor import AlertWatch
from engram_top.model.store import RunStore
from engram_top.seed import reference
from engram_top.sim import state
from engram_top.sim.backends import SimHostBackend
from scenarios import ports
from scenarios.process import LaunchSpec, ManagedProcess, StopResult

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scenarios" / "demo.toml"
GIB = 1024**3
MIB = 1024**2


def installed_script(name: str = "engram-top") -> Path:
    """The console script pip installed for this interpreter, as the README installs it
    (`pip install -e '.[test]'` into the environment pytest runs in): its scripts folder,
    wherever that is (a venv's bin/, a --user install's ~/.local/bin), then PATH. Never a
    fixed path, and never a silent fallback to `python -m`: a test of the command line
    runs the command a user runs, or says it is not installed."""
    where = os.pathsep.join(p for p in (sysconfig.get_path("scripts"),
                                        str(Path(sys.executable).parent),
                                        os.environ.get("PATH", "")) if p)
    found = shutil.which(name, path=where)
    if found is None:
        raise RuntimeError(f"{name} is not installed for {sys.executable}: "
                           "pip install -e '.[test]' (the README's test command does)")
    return Path(found)


# The console script, as a user runs it.
ENGRAM_TOP = [str(installed_script())]


# --------------------------------------------------------------------------- waits


async def until(pilot: Pilot[Any] | None, predicate: Callable[[], object],
                timeout: float = 10.0, what: str | Callable[[], str] = "the condition") -> None:
    """Until ``predicate()`` holds, the app (if any) processing what is pending between
    checks. A loaded machine may take a while, so no fixed sleep says "long enough": past
    ``timeout`` seconds in all it fails, naming ``what`` (a function: what it says then)
    and what the app last said."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            detail = "" if pilot is None else _app_detail(pilot.app)
            raise AssertionError(f"timed out after {timeout:g} s waiting for {said}{detail}")
        if pilot is not None and pilot.app.is_running:
            await pilot.pause()
        else:
            await asyncio.sleep(0.02)


def wait_until(predicate: Callable[[], object], timeout: float, what: str,
               every: float = 0.05) -> object:
    """``until`` for code without an event loop: the predicate's first true value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def _app_detail(app: App[Any]) -> str:
    """The app's last events and notifications, and where each task is stuck (a hang)."""
    store = getattr(getattr(app, "session", None), "store", None)
    lines = [f"{e.level}: {e.text}" for e in list(getattr(store, "events", ()))[-8:]]
    lines += [f"{n.title}: {n.message}" for n in app._notifications]
    lines.append(f"screen: {type(app.screen).__name__}" if app.is_running else "app exited")
    for task in asyncio.all_tasks():
        lines.append(f"task {task.get_name()}:")
        coro: Any = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
            if frame is not None:
                lines.append(f"    {frame.f_code.co_filename}:{frame.f_lineno} "
                             f"{frame.f_code.co_name}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
    return "\n" + "\n".join(lines)


# --------------------------------------------------------------------------- the dashboard


def screen_text(app: App[Any]) -> str:
    """What the terminal shows, as text: the SVG screenshot's text in screen order."""
    svg = re.sub(r"<[^>]+>", "", app.export_screenshot())
    return html.unescape(svg).replace("\xa0", " ")


def panel_text(app: App[Any], selector: str) -> str:
    """A panel's words as one line: its rows joined where the panel wrapped them (a
    message wrapped at the panel's width reads whole), its border left out."""
    widget = app.query_one(selector)
    rows = [strip.text.strip(" │╭╮╰╯─") for strip in widget.render_lines(
        widget.region.reset_offset)]
    return " ".join(" ".join(rows).replace("\xa0", " ").split())


async def quit_app(app: App[Any], pilot: Pilot[Any]) -> None:
    await pilot.press("q")
    await until(pilot, lambda: not app.is_running, 20, "the app to quit")


class StaticSession:
    """A session whose store the test fills: no processes, fixed values. Its alerts are
    evaluated as a real session's are (the app only shows them)."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.closed = False
        self.alerts = AlertWatch(store)
        self._alerts_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._alerts_task = asyncio.create_task(self.alerts.run())

    async def close(self) -> None:
        self.closed = True
        if self._alerts_task is not None:
            self._alerts_task.cancel()
            await asyncio.gather(self._alerts_task, return_exceptions=True)

    # The rest of the dashboard's session (engram_top.app.sessions): it starts nothing.
    replay = None
    poll_interval = 0.5  # redrawn at the dashboard's fastest
    secrets: tuple[str, ...] = ()
    attaching: tuple[str, ...] = ()
    slos: tuple[Any, ...] = ()

    def close_now(self) -> None:
        self.closed = True

    def left_running(self) -> tuple[()]:
        return ()

    async def start_scenario(self, name: str, force: bool = False) -> None:
        raise RuntimeError("a fixed store: it starts nothing")

    async def switch(self, name: str, force: bool = False) -> None:
        raise RuntimeError("a fixed store: it switches nothing")

    async def stop_scenario(self) -> None:
        raise RuntimeError("a fixed store: it stops nothing")

    async def attach(self, url: str) -> None:
        raise RuntimeError("a fixed store: it attaches to nothing")


# --------------------------------------------------------------------------- processes


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# How long a child of running() has to end on SIGTERM before it is killed.
STOP_GRACE_S = 10.0


@contextlib.contextmanager
def running(argv: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """A child process for the block: stopped and reaped on the way out, whatever happened
    in the block (a failed assertion included). SIGTERM first, as a person or systemd stops
    it, so a program of ours ends as it would (its temporary folder removed: a killed
    agent's stayed in /tmp for good, eight a run from the fleet's test); SIGKILL after
    STOP_GRACE_S. A test that means a SIGKILL sends it itself."""
    proc = subprocess.Popen(argv, **popen)
    with proc:  # closes its pipes and waits for it
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()


_PORTS_GIVEN: set[int] = set()


def _worker() -> tuple[int, int]:
    """(this xdist worker's index, how many there are); (0, 1) without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    index = name.removeprefix("gw")
    return (int(index), max(1, int(count))) if index.isdigit() and count.isdigit() else (0, 1)


# The tests' ports: 10000-19999, below the product's own (scenarios.ports.OURS) and below the
# kernel's ephemeral range, from which every outgoing connection takes its source port: a
# port drawn there was taken by one of the suite's thousands of connections in the second
# before the server bound it (uvicorn: address already in use, exit 3).
TEST_PORTS = (ports.LOWEST, ports.OURS)


def free_port() -> int:
    """A port nothing listens on now, and one not handed out before in this session: servers
    launched together bind theirs seconds later, all at once. Each xdist worker takes only
    ports of its own residue (port % workers), so two workers never hand out the same one
    in the seconds before its server binds it (bind(0) could not do that: it hands out even
    ports first, and a worker of an odd residue waited on it for ever). The product draws
    its own from the band above (scenarios.ports.OURS): a Prometheus of a test's drew a
    port a test's server had drawn and bound first."""
    index, workers = _worker()
    low, high = TEST_PORTS[0], min(TEST_PORTS[1], ports.ephemeral_start())
    drawn = range(low + (index - low) % workers, high, workers)
    for port in random.SystemRandom().sample(drawn, min(200, len(drawn))):
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"tests: 200 ports of residue {index} (mod {workers}) in {low}-{high - 1} "
                       "were all taken")


def run_coro_sync(coro):  # type: ignore[no-untyped-def]
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# --------------------------------------------------------------------------- simulated servers

API_KEY = "sk-engram-top-test"
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ServerSpec:
    placement: str
    time_scale: float
    extra: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the environment it starts with, on top of ours


class SimServer:
    """One `engram_top sim serve` process, launched through ManagedProcess with a log file.
    Only a fixture makes one (conftest.py's fleet), and stops it after the tests.

    A watcher thread probes /health from the moment of launch and keeps the sequence of
    distinct outcomes ("refused", "503", "200", ...), so tests can check how the server came up.
    """

    def __init__(self, name: str, spec: ServerSpec, base: Path) -> None:
        self.name = name
        self.spec = spec
        self.placement = spec.placement
        self.dir = base / name
        self.node_dir = self.dir / "node"
        self.log_path = self.dir / "server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = API_KEY if "--api-key" in spec.extra else None
        # The pre-launch baseline, as a session takes it: the node exists, no server yet.
        state.ensure_node(self.node_dir, reference.default())
        self.baseline_host_used = host_sample(SimHostBackend(self.node_dir), None).used_bytes
        argv = [sys.executable, "-m", "engram_top", "sim", "serve",
                "--placement", spec.placement, "--port", str(self.port),
                "--time-scale", str(spec.time_scale), "--node-dir", str(self.node_dir),
                *spec.extra]
        self.proc = ManagedProcess.start(LaunchSpec(argv, self.log_path, env=dict(spec.env)))
        self.probes: list[str] = []
        self.timeouts = 0  # probes that got no answer in time (not outcomes)
        self.stopped: StopResult | None = None
        self._watcher = threading.Thread(target=self._watch, name=f"probe-{name}", daemon=True)
        self._watcher.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _watch(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                try:
                    outcome = str(client.get(f"{self.url}/health").status_code)
                except httpx.ConnectError:
                    outcome = "refused"
                except httpx.TimeoutException:
                    # The port took the probe but no answer came within the timeout (a
                    # loaded machine): no status observed, so nothing to record.
                    self.timeouts += 1
                    continue
                except httpx.TransportError as exc:
                    outcome = type(exc).__name__
                if not self.probes or self.probes[-1] != outcome:
                    self.probes.append(outcome)
                if outcome == "200" or not self.proc.alive():
                    return
                time.sleep(0.02)

    def wait_probing(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until the watcher is done: the server answered 200, exited, or timed out."""
        self._watcher.join(timeout)

    def wait_ready(self) -> SimServer:
        self.wait_probing()
        if not self.probes or self.probes[-1] != "200":
            pytest.fail(f"sim server {self.name} never became ready (probes {self.probes}, "
                        f"exit {self.proc.returncode}); log tail:\n{self.log_text()[-2000:]}")
        if self.proc.popen is not None and self.proc.popen.poll() is not None:
            # Another process answered on its port: whatever a test reads there is not ours.
            pytest.fail(f"sim server {self.name} exited ({self.proc.popen.returncode}) while "
                        f"port {self.port} answered: another process holds it; log tail:\n"
                        f"{self.log_text()[-2000:]}")
        return self

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_log(self, needle: str, timeout: float = 10.0) -> str:
        """The log once it contains ``needle`` (a line can trail the state it reports)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if needle in text or time.monotonic() > deadline:
                return text
            time.sleep(0.05)

    async def astop(self, grace: float = 10.0) -> StopResult:
        if self.stopped is None:
            self.stopped = await self.proc.stop(grace)
        return self.stopped

    def stop(self, grace: float = 10.0) -> StopResult:
        return run_coro_sync(self.astop(grace))

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


# Every server the live tests use. Shared read-only: "device", "apikey". Used up by one test
# each (stopped or killed): the rest. Host placements' logs stay readable after they stop.
FLEET: dict[str, ServerSpec] = {
    "device": ServerSpec("device", 0.03),
    "apikey": ServerSpec("device", 0.02, ("--api-key", API_KEY)),
    "host": ServerSpec("host", 0.02),
    "host-prefetch": ServerSpec("host-prefetch", 0.02),
    # Started as SGLang's V4.1 preview builds are, with the Engram switches in its
    # environment: what `attach` reads the placement from.
    "attach-env": ServerSpec("host-prefetch", 0.02, env=(
        ("SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE", "1"),
        ("SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT", "shared"),
        ("SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN", "1"),
        ("SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH", "1"))),
    "device-delta": ServerSpec("device", 0.02),
    "rank-kill": ServerSpec("device", 0.02),
    "main-kill": ServerSpec("device", 0.02),
    "fail-weights": ServerSpec("device", 0.02, ("--fail-at", "weights")),
}


class Fleet:
    def __init__(self, base: Path) -> None:
        self.servers: dict[str, SimServer] = {}
        try:
            for name, spec in FLEET.items():
                self.servers[name] = SimServer(name, spec, base)
        except BaseException:
            self.close()  # those already launched: no fixture will get to them
            raise

    def launched(self, name: str) -> SimServer:
        """The server as it is now (starting, ready, or gone)."""
        return self.servers[name]

    def ready(self, name: str) -> SimServer:
        server = self.servers[name]
        if server.stopped is not None:
            pytest.fail(f"sim server {name} was already stopped by another test")
        return server.wait_ready()

    def close(self) -> None:
        """Stop every server, then say which left processes behind."""
        left = {name: server.stop(grace=5.0).survivors for name, server in self.servers.items()}
        assert not any(left.values()), f"survivors: {left}"


class PageServer:
    """A /metrics page of a test's own over real HTTP on 127.0.0.1, with /health and an
    empty /server_info; ``page`` can change between polls; ``asked`` counts the requests
    by path. A thread of the test's process; use it in a with block."""

    def __init__(self, page: str = "") -> None:
        import http.server
        from collections import Counter

        self.page = page
        self.asked: Counter[str] = Counter()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                bodies = {"/metrics": outer.page.encode(), "/health": b"",
                          "/server_info": b"{}"}
                body = bodies.get(self.path, b"")
                outer.asked[self.path] += 1
                self.send_response(200 if self.path in bodies else 404)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> PageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def md_row(markdown: str, label: str) -> list[str]:
    """The cells of the Markdown row whose first cell is `label`."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in\n{markdown}")


def sim_scenario_file(tmp_path: Path, name: str, placement: str, *args: str) -> Path:
    """A scenario file of one simulated server, `name`, on port 30990 with `args`."""
    path = tmp_path / "deaths.toml"
    quoted = ", ".join(f'"{a}"' for a in args)
    path.write_text(f"""
[plan]
name = "deaths"

[defaults]
kind = "simulated"
host = "127.0.0.1"
time_scale = 0.02
readiness_timeout_s = 120
stop_grace_s = 10

[scenarios.{name}]
placement = "{placement}"
port = 30990
args = [{quoted}]
""")
    return path
