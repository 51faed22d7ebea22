"""The quit's dialog on a session without processes: what `q` does with a server an earlier
engram-top started (adopted), one the user said to leave (--leave-running), and a signal.
The same on real servers and the real CLI: tests/app/test_quit_adopted.py and
tests/faults/test_adopted_servers.py."""

from __future__ import annotations

import signal

from helpers import StaticSession, until

from engram_top.app.dialogs import QuitAdoptedScreen
from engram_top.app.main import EngramTopApp
from engram_top.model.left_running import LeftRunning
from engram_top.model.store import RunStore

SIZE = (100, 30)


def server(*, adopted: bool = True, asked: bool = False) -> LeftRunning:
    return LeftRunning("host-prefetch", 48213, "127.0.0.1", 30103, adopted=adopted,
                       asked=asked, stop_with="engram-top stop scenarios/demo.toml")


class LeavingSession(StaticSession):
    """A fixed store whose close would leave ``left`` running; a stop takes it away."""

    def __init__(self, left: LeftRunning) -> None:
        super().__init__(RunStore())
        self.left: tuple[LeftRunning, ...] = (left,)
        self.stops = 0

    def left_running(self) -> tuple[LeftRunning, ...]:  # type: ignore[override]
        return self.left

    async def stop_scenario(self) -> None:
        self.stops += 1
        self.left = ()


def test_the_line_names_the_server_whose_it_is_and_how_to_stop_it() -> None:
    assert server().line() == ("left running: host-prefetch (pid 48213) on 127.0.0.1:30103, "
                               "adopted; stop it with `engram-top stop scenarios/demo.toml`")
    assert server(adopted=False, asked=True).line() == (
        "left running: host-prefetch (pid 48213) on 127.0.0.1:30103; stop it with "
        "`engram-top stop scenarios/demo.toml`")


async def test_q_asks_escape_stays_q_again_leaves() -> None:
    session = LeavingSession(server())
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        assert app.screen.question == ("host-prefetch (pid 48213, port 30103) was started by "
                                       "an earlier engram-top. Quit and leave it running, or "
                                       "stop it?")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, QuitAdoptedScreen), 5,
                    "the dialog to close")
        assert app.is_running and not session.closed
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        await pilot.press("q")  # q again: the default, leave it
        await until(pilot, lambda: not app.is_running, 10, "the app to quit")
    assert session.closed and session.stops == 0


async def test_s_in_the_dialog_stops_it_before_quitting() -> None:
    session = LeavingSession(server())
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitAdoptedScreen), 5, "the dialog")
        await pilot.press("s")
        await until(pilot, lambda: not app.is_running, 10, "the app to quit")
    assert session.closed and session.stops == 1


async def test_no_question_for_a_server_the_user_said_to_leave_nor_on_a_signal() -> None:
    session = LeavingSession(server(asked=True))  # --leave-running
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 10, "the app to quit")
    assert session.closed and session.stops == 0

    session = LeavingSession(server())
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app._on_signal(signal.SIGTERM)  # what the CLI's handler calls: no one to answer
        await until(None, lambda: not app.is_running, 10, "the app to quit")
    assert session.closed and session.stops == 0 and app.stopped_by == signal.SIGTERM
