"""The dashboard's size classes are set before its first layout, by Textual's own rule, so
the first frame is laid out once for the terminal it opens in; what the session's start
brings (the node, the runs) is drawn when the start ends."""

from __future__ import annotations

import pytest
from helpers import StaticSession, screen_text, until
from scene import scene_store
from textual.screen import Screen
from textual.widgets import DataTable

from engram_top.app.breakpoints import breakpoints
from engram_top.app.main import EngramTopApp
from engram_top.model.store import RunStore

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
