"""The apps' first screen is laid out again only when something changed: a Resize to the size
it is laid out at is nothing to do (Textual's own screen lays itself out for the app's and
the driver's Resize after its first frame), and the notification rack is hidden from the
first layout rather than in a layout of its own after it. A real resize and a toast work
as they did."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import StaticSession, screen_text, until
from scene import scene_store
from textual.app import App
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets._toast import ToastRack

from engram_top.app.main import EngramTopApp
from engram_top.app.settled_screen import SettledScreen


def _counting(patch: pytest.MonkeyPatch) -> list[Size | None]:
    passes: list[Size | None] = []
    original = Screen._refresh_layout

    def counted(screen: Screen[Any], size: Size | None = None, scroll: bool = False) -> None:
        passes.append(size)
        original(screen, size, scroll)

    patch.setattr(Screen, "_refresh_layout", counted)
    return passes


async def test_a_resize_to_its_own_size_lays_nothing_out_and_a_new_size_does() -> None:
    app = EngramTopApp(StaticSession(scene_store()))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SettledScreen)
        with pytest.MonkeyPatch.context() as patch:
            passes = _counting(patch)
            screen._screen_resized(Size(160, 50))
            assert passes == []
            Screen._screen_resized(screen, Size(160, 50))  # Textual's own: a whole layout
            assert passes == [Size(160, 50)]
            await pilot.resize_terminal(120, 40)
            grid = app.query_one("#grid")
            await until(pilot, lambda: grid.size.width == 120, 10, "the panels at 120")
            assert Size(120, 40) in passes


async def test_the_rack_is_hidden_for_the_first_layout_and_a_toast_still_shows() -> None:
    app = EngramTopApp(StaticSession(scene_store()))
    at_first_frame: list[object] = []
    original = App._display

    def display(self: App[Any], *args: Any, **kwargs: Any) -> None:
        if not at_first_frame:
            rack = self.screen.query_one(ToastRack)
            at_first_frame.append(rack.styles.inline.get_rule("display"))
        original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(App, "_display", display)
        async with app.run_test(size=(160, 50), notifications=True) as pilot:
            await until(pilot, lambda: at_first_frame, 10, "the first frame")
            assert at_first_frame == ["none"]
            rack = app.screen.query_one(ToastRack)
            app.notify("the rack still shows its toasts", timeout=30)
            await until(pilot, lambda: "the rack still shows its toasts" in screen_text(app),
                        10, "the toast")
            assert rack.display
            app.clear_notifications()
            await until(pilot, lambda: not rack.display, 10, "the rack hidden again")
