"""The dashboard and the fleet's app end through the same code (app.process_end): the
signals that quit them, the SIGCONT guard that never resumes a terminal that closed, a crash
kept for the CLI, and their session closed once as they unmount. The fleet's had a copy of
its own, without the guard."""

from __future__ import annotations

import gc
import signal
import time
from typing import Any

from helpers import StaticSession, until
from scene import scene_store

from engram_top.app.fleet_screen import FleetApp
from engram_top.app.main import EngramTopApp
from engram_top.app.process_end import YOUNG_COLLECTED, EndsAsTheProcess
from engram_top.app.sessions import FleetView

ENDING = ("_handle_signals", "_on_signal", "_on_sigcont", "_handle_exception",
          "close_session", "on_unmount")


def test_both_apps_end_through_process_end() -> None:
    for app in (EngramTopApp, FleetApp):
        assert issubclass(app, EndsAsTheProcess), app.__name__
        own = [name for name in ENDING if name in vars(app)]
        assert own == [], f"{app.__name__} ends its own way: {own}"


class Fleet:
    """A fleet session with no node yet: what the fleet's app reads of one (FleetView)."""

    url = "http://prometheus:9090"
    credential = ""
    interval = 5.0
    polls = 0
    status = None
    nodes: dict[str, tuple[float, object]] = {}
    on_poll: Any = None

    def __init__(self) -> None:
        self.started = self.closed = 0

    @property
    def clock(self) -> Any:
        return time.monotonic

    def rows(self) -> list[Any]:
        return []

    def row_of(self, node: str) -> None:
        return None

    def prom_status(self) -> None:
        return None

    def detail(self, node: str) -> None:
        return None

    def feed(self, d: Any) -> bool:
        return False

    async def load_history(self, d: Any) -> str:
        return ""

    async def start(self) -> None:
        self.started += 1

    async def close(self) -> None:
        self.closed += 1


async def test_a_signal_quits_the_fleet_app_and_closes_its_session_once() -> None:
    session = Fleet()
    assert isinstance(session, FleetView)
    app = FleetApp(session)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert session.started == 1
        app._on_signal(signal.SIGTERM)  # what the CLI's handler calls
        await pilot.pause()
        app._on_signal(signal.SIGHUP)  # a second signal: the first one's quit goes on
        await pilot.pause()
    assert app.stopped_by == signal.SIGTERM and session.closed == 1


async def test_a_borrowed_fleet_session_is_its_owner_s_to_close() -> None:
    session = Fleet()
    app = FleetApp(session, borrowed=True)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
    assert session.started == 0 and session.closed == 0


async def test_as_the_process_what_the_start_made_is_left_out_of_full_collections() -> None:
    assert gc.get_freeze_count() == 0
    threshold = gc.get_threshold()
    try:
        for own in (False, True):
            session = StaticSession(scene_store())
            app = EngramTopApp(session, own_process=own)
            async with app.run_test(size=(160, 50)) as pilot:
                # Its start ends as its alerts begin (the app's next step is the same task's).
                await until(pilot, lambda s=session: s._alerts_task is not None, 10,
                            "the start's end")
                # A test's app keeps nothing from collection (each earlier test's garbage
                # would stay); the process's own leaves its start's objects out.
                assert (gc.get_freeze_count() > 0) is own
                # and collects its youngest objects less often (a test's app as Python does)
                assert gc.get_threshold()[0] == (YOUNG_COLLECTED if own else threshold[0])
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


async def test_as_the_process_the_collector_the_entry_turned_off_is_on_after_the_first_frame(
        ) -> None:
    """The program's entry (engram_top.cli.start) leaves the collector off while a dashboard
    starts; as the process, the dashboard turns it on once its first frame is painted, what
    its start made frozen first. A test's app leaves it as it found it."""
    threshold = gc.get_threshold()
    try:
        for own in (False, True):
            gc.disable()
            app = EngramTopApp(StaticSession(scene_store()), own_process=own)
            async with app.run_test(size=(160, 50)) as pilot:
                await until(pilot, lambda a=app: a.screen._whole_at is not None, 10,
                            "the first frame")
                await until(pilot, lambda o=own: gc.isenabled() is o, 10,
                            "the collector as the app leaves it")
                assert (gc.get_freeze_count() > 0) is own
            gc.unfreeze()
    finally:
        gc.enable()
        gc.unfreeze()
        gc.set_threshold(*threshold)
