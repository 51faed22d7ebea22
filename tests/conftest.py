"""Shared fixtures: simulated SGLang servers running as real processes on 127.0.0.1.

Starting a simulated server costs its start-up phases (seconds even at --time-scale 0.02),
and this machine has two cores. So the servers the live tests need are launched together,
once per session, the first time any of them is asked for (`fleet`): their start-ups overlap
and the tests that only read share one. Tests that stop or kill a server get one of their own
from the same launch. Every server keeps its node state and log under the session's tmp dir.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from collectors.host import sample as host_sample
from engram_top import reference
from engram_top.simnode import state
from engram_top.simnode.backends import SimHostBackend
from scenarios.process import LaunchSpec, ManagedProcess, StopResult

API_KEY = "sk-engram-top-test"


@pytest.fixture(autouse=True)
def _own_state_folder(tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every command it runs) keeps its state folders, locks and
    recordings to itself, never in the user's ~/.local/state."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))
READY_TIMEOUT_S = 60.0


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, and one not handed out before in this session: the
    fleet's servers bind theirs seconds after launch, all at once."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port


def run_coro_sync(coro):  # type: ignore[no-untyped-def]
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass(frozen=True)
class ServerSpec:
    placement: str
    time_scale: float
    extra: tuple[str, ...] = ()


class SimServer:
    """One `engram_top sim serve` process, launched through ManagedProcess with a log file.

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
        self.proc = ManagedProcess.start(LaunchSpec(argv, self.log_path))
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
    "device-delta": ServerSpec("device", 0.02),
    "rank-kill": ServerSpec("device", 0.02),
    "main-kill": ServerSpec("device", 0.02),
    "fail-weights": ServerSpec("device", 0.02, ("--fail-at", "weights")),
}


class Fleet:
    def __init__(self, base: Path) -> None:
        self.servers = {name: SimServer(name, spec, base) for name, spec in FLEET.items()}

    def launched(self, name: str) -> SimServer:
        """The server as it is now (starting, ready, or gone)."""
        return self.servers[name]

    def ready(self, name: str) -> SimServer:
        server = self.servers[name]
        if server.stopped is not None:
            pytest.fail(f"sim server {name} was already stopped by another test")
        return server.wait_ready()

    def close(self) -> None:
        for server in self.servers.values():
            result = server.stop(grace=5.0)
            assert not result.survivors, f"{server.name}: survivors {result.survivors}"


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield f
    finally:
        f.close()


@pytest.fixture(scope="session")
def sim_device(fleet: Fleet) -> SimServer:
    """The shared device-placement server (--time-scale 0.03). Read it; do not stop it."""
    return fleet.ready("device")


@pytest.fixture(scope="session")
def sim_apikey(fleet: Fleet) -> SimServer:
    """A shared device-placement server started with --api-key. Read it; do not stop it."""
    return fleet.ready("apikey")


@pytest.fixture(scope="session")
def device_metrics_page(sim_device: SimServer) -> str:
    return httpx.get(f"{sim_device.url}/metrics", timeout=5.0).raise_for_status().text
