"""The dashboard's size classes are set before its first layout, by Textual's own rule, so
the first frame is laid out once for the terminal it opens in; what the session's start
brings (the node, the runs) is drawn when the start ends; a server being attached has its
row from the first frame, and its run takes that row."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import StaticSession, screen_text, until
from scene import scene_store
from textual.screen import Screen
from textual.widgets import DataTable

from engram_top.app.breakpoints import breakpoints
from engram_top.app.main import EngramTopApp
from engram_top.model.store import RunFacts, RunStore
from scenarios.runstate import RunState

H, V = EngramTopApp.HORIZONTAL_BREAKPOINTS, EngramTopApp.VERTICAL_BREAKPOINTS


@pytest.mark.parametrize("points", [H, V])
def test_the_rule_is_textuals(points: list[tuple[int, str]]) -> None:
    screen = Screen()
    for cells in range(0, 260):
        ours = {name for name, on in breakpoints(cells, points).items() if on}
        assert ours == screen._get_breakpoint_classes(cells, points), cells
        assert set(breakpoints(cells, points)) == {name for _, name in points}


@pytest.mark.parametrize(("size", "classes"), [
    ((160, 50), {"-wide", "-tall"}), ((120, 36), {"-narrow", "-short"}),
    ((90, 24), {"-cramped", "-low"})])
async def test_the_first_layout_has_the_classes_of_its_size(
        size: tuple[int, int], classes: set[str]) -> None:
    app = EngramTopApp(StaticSession(scene_store()))
    seen: list[set[str]] = []
    original = Screen._refresh_layout

    def first_layout(screen: Screen[object], *args: object, **kwargs: object) -> None:
        if not seen:
            seen.append(set(screen.classes))
        original(screen, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Screen, "_refresh_layout", first_layout)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            every = {name for _, name in H + V}
            assert seen[0] & every == classes
            assert set(app.screen.classes) & every == classes
            await pilot.resize_terminal(120, 36)  # Textual's own classes from here on
            await pilot.pause()
            assert set(app.screen.classes) & every == {"-narrow", "-short"}


class _FilledAtStart(StaticSession):
    """A session whose node and runs arrive when it starts, as a live session's first
    readings and an attached server's row do (after the first frame)."""

    def __init__(self) -> None:
        super().__init__(RunStore())

    async def start(self) -> None:
        await super().start()
        filled = scene_store()
        self.store.node, self.store.scenarios = filled.node, filled.scenarios
        for run in filled.runs:
            self.store.set_run(run)


async def test_what_the_start_brought_is_drawn_when_it_ends_not_at_the_next_redraw() -> None:
    app = EngramTopApp(_FilledAtStart())
    with pytest.MonkeyPatch.context() as patch:
        # No timed redraw at all: only the start's end can draw what it brought.
        patch.setattr(EngramTopApp, "redraw_after_polls", lambda self, every_s: None)
        async with app.run_test(size=(160, 50)) as pilot:
            table = app.query_one("#scenarios", DataTable)
            await until(pilot, lambda: table.row_count == 3, 10, "the start's three rows")
            assert "simulated 4x NVIDIA B200" in screen_text(app)


URL = "http://127.0.0.1:30000"


class _AttachingAtStart(StaticSession):
    """A session attaching one server, whose start ends when the test says (an attach
    stays in its start while the node's first readings come)."""

    def __init__(self) -> None:
        super().__init__(RunStore())
        self.attaching = (URL,)
        self.go = asyncio.Event()

    async def start(self) -> None:
        await super().start()
        await self.go.wait()
        self.store.set_run(RunFacts(
            scenario=URL, placement="?", node=self.store.node, time_scale=1.0,
            launched_wall=time.time(), launched_at=time.monotonic(), state=RunState.ATTACHED,
            url=URL, owned=False))
        self.attaching = ()


async def test_a_server_being_attached_has_its_row_from_the_first_frame() -> None:
    session = _AttachingAtStart()
    app = EngramTopApp(session)
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        table = app.query_one("#scenarios", DataTable)
        await until(pilot, lambda: table.row_count == 1, 10, "the server's row")
        assert [str(c) for c in table.get_row_at(0)][:2] == ["  http://127.0.0.1:30000",
                                                             "attaching"]
        assert app.check_action("scenario", (1,))  # its number key, at once
        size = table.virtual_size
        await pilot.press("enter")  # nothing to start or watch yet, and it says so
        await until(pilot, lambda: "still attaching" in screen_text(app), 10, "the toast")
        session.go.set()
        await until(pilot, lambda: str(table.get_row_at(0)[1]) == "attached", 10,
                    "its run in the row")
        # The same row: the table neither grew nor asked for another layout of the screen.
        assert table.row_count == 1 and table.virtual_size == size
        assert str(table.get_row_at(0)[0]) == "▶ http://127.0.0.1:30000"
