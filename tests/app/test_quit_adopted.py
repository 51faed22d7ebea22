"""A dashboard stops on quit only what it started itself. A server an earlier engram-top left
running (`switch`, `run --leave-running`, a crashed dashboard), which the dashboard found and
took over, is asked about on `q`: leave it (the default), stop it, or stay. Real simulated
servers, real HTTP, Textual's Pilot; every server a test starts is stopped by the
`leftovers` fixture whatever happens. The CLI's signals and closed terminal are
tests/faults/test_adopted_servers.py's."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from helpers import DEMO, alive, screen_text, until, wait_until

from engram_top.app.dialogs import QuitAdoptedScreen
from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions
from engram_top.model.left_running import LeftRunning
from scenarios.runstate import RunState
from scenarios.server_run import Origin

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

SIZE = (150, 45)


def options(state_dir: Path, **changes: object) -> SessionOptions:
    base: dict[str, object] = {"scenario_file": DEMO, "start": None, "state_dir": state_dir,
                               "free_ports": True, "time_scale": 0.02, "poll_interval": 0.5,
                               "load": None}
    return SessionOptions(**{**base, **changes})  # type: ignore[arg-type]


def strays(tmp_path: Path) -> list[psutil.Process]:
    """Live processes launched for this test: their argv names its node folder."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(proc.info["cmdline"] or ()) and \
                    proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
    return out


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[Callable[[], list[psutil.Process]]]:
    """What of this test still runs; on the way out, whatever passed or failed, each is
    killed with its process group."""
    yield lambda: strays(tmp_path)
    for proc in strays(tmp_path):
        with contextlib.suppress(OSError, psutil.Error):
            os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
        with contextlib.suppress(OSError, psutil.Error):
            proc.kill()
    wait_until(lambda: not strays(tmp_path), 15, "the test's servers to go")


async def left_by_an_earlier_command(state_dir: Path, name: str) -> LeftRunning:
    """What `engram-top switch FILE --to NAME --wait-ready` does: start it, wait until it is
    ready, leave it running, noted in the state folder."""
    first = Session(options(state_dir, start=name, leave_running=True, command="switch"))
    try:
        await first.start()
        assert await first.wait_ready(60), [e.text for e in first.store.events]
    finally:
        await first.close()
    (left,) = first.left_running()
    assert not left.adopted and left.asked
    return left


def answers(left: LeftRunning) -> bool:
    try:
        return httpx.get(f"http://{left.host}:{left.port}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(120)
async def test_q_asks_about_an_adopted_server_escape_stays_and_leave_leaves_it(
        tmp_path: Path, leftovers: Callable[[], list[psutil.Process]]) -> None:
    state_dir = tmp_path / "state"
    left = await left_by_an_earlier_command(state_dir, "host-prefetch")
    session = Session(options(state_dir))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: session.run is not None, 20, "the server to be adopted")
        run = session.supervisor.current
        assert run is not None and run.pid == left.pid and run.origin is Origin.ADOPTED
        await until(pilot, lambda: run.state == RunState.READY, 20, "it to read ready")

        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        assert app.screen.question == (
            f"host-prefetch (pid {left.pid}, port {left.port}) was started by an earlier "
            "engram-top. Quit and leave it running, or stop it?")
        text = screen_text(app)
        assert "l/enter leave it running   s stop it   esc cancel" in text
        await pilot.press("escape")  # no quit
        await until(pilot, lambda: not isinstance(app.screen, QuitAdoptedScreen), 5,
                    "the dialog to close")
        assert app.is_running and run.state == RunState.READY and run.alive

        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        await pilot.press("enter")  # the default: leave it running
        await until(pilot, lambda: not app.is_running, 30, "the app to quit")
    assert alive(left.pid) and answers(left)
    assert "info: stopped host-prefetch" not in [f"{e.level}: {e.text}"
                                                for e in session.store.events]
    (said,) = session.left_running()
    assert said.adopted and not said.asked and said.pid == left.pid
    assert said.line() == (f"left running: host-prefetch (pid {left.pid}) on "
                           f"127.0.0.1:{left.port}, adopted; stop it with "
                           f"`engram-top stop {DEMO} --state-dir {state_dir}`")
    assert (state_dir / "current.json").exists()  # the next run or stop finds it

    # It is found again, and `stop`'s session stops it.
    stop = Session(options(state_dir, command="stop"))
    try:
        await stop.start()
        assert stop.run is not None and stop.run.pid == left.pid
        await stop.stop_scenario()
    finally:
        await stop.close()
    await until(None, lambda: not leftovers(), 15, "the server to be stopped")
    assert not (state_dir / "current.json").exists()


@pytest.mark.timeout(120)
async def test_q_then_s_stops_the_adopted_server(
        tmp_path: Path, leftovers: Callable[[], list[psutil.Process]]) -> None:
    state_dir = tmp_path / "state"
    left = await left_by_an_earlier_command(state_dir, "device")
    session = Session(options(state_dir))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: session.run is not None, 20, "the server to be adopted")
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        await pilot.press("s")
        await until(pilot, lambda: not app.is_running, 40, "the app to quit")
    assert session.left_running() == ()
    await until(None, lambda: not leftovers(), 15, lambda: f"the server to go: {leftovers()}")
    assert not answers(left)
    assert not (state_dir / "current.json").exists()


@pytest.mark.timeout(150)
async def test_a_server_switched_to_from_an_adopted_one_is_stopped_on_q_without_asking(
        tmp_path: Path, leftovers: Callable[[], list[psutil.Process]]) -> None:
    """Switching away from the adopted server is the user stopping it; what the switch
    launched is this dashboard's own, and q stops it as ever."""
    state_dir = tmp_path / "state"
    left = await left_by_an_earlier_command(state_dir, "device")
    session = Session(options(state_dir))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: session.run is not None, 20, "the server to be adopted")
        await until(pilot, lambda: len(app._rows) == 3, 10, "the scenario table")
        await pilot.press("2")  # host
        await until(pilot, lambda: session.run is not None and session.run.scenario.name
                    == "host" and session.run.state == RunState.READY, 60, "host to be ready")
        launched = session.run
        assert launched.origin is Origin.LAUNCHED
        assert not alive(left.pid)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 30, "the app to quit")
    assert session.left_running() == ()
    await until(None, lambda: not leftovers(), 15, lambda: f"the servers to go: {leftovers()}")
    assert not (state_dir / "current.json").exists()
