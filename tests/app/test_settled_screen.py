"""The apps' first screen is laid out again only when something changed: a Resize to the size
it is laid out at is nothing to do (Textual's own screen lays itself out for the app's and
the driver's Resize after its first frame), the notification rack is hidden from the
first layout rather than in a layout of its own after it, and a whole pass is not followed
by another for the sizes it gave. A real resize, a toast, a line grown and a scrollbar that
comes work as they did, and the places are Textual's own."""

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


class _Pane(App[None]):
    """A screen of the dashboard's kinds of widgets: an auto-height line, a table, a log
    that grows past its height (a scrollbar comes), on SettledScreen or Textual's own."""

    CSS = "#log { height: 6; } #table { height: 5; }"

    def __init__(self, settled: bool) -> None:
        super().__init__()
        self.settled = settled

    def get_default_screen(self) -> Screen[Any]:
        return SettledScreen(id="_default") if self.settled else Screen(id="_default")

    def compose(self) -> Any:
        from textual.widgets import DataTable, Log, Static
        yield Static("a line", id="head")
        yield DataTable(id="table")
        yield Log(id="log")

    def on_mount(self) -> None:
        from textual.widgets import DataTable
        table = self.query_one(DataTable)
        table.add_columns("scenario", "state")
        table.add_row("device", "ready")


def _placed(app: App[Any]) -> dict[str, Any]:
    """Where each widget is (a scrollbar by its widget's id), as the screen's map has it."""
    return {w.id or f"{type(w).__name__} of {w.parent.id if w.parent else None}":
            (geometry.region, geometry.virtual_size)
            for w, geometry in app.screen._compositor.full_map.items()}


async def test_a_whole_pass_is_the_last_for_the_sizes_it_gave() -> None:
    """Textual lays a screen out again after a pass that sized its widgets (their new sizes
    ask for it); SettledScreen takes that as met: one pass to the first frame settled, and
    the same places and the same screen as Textual's own. A line grown, a log grown past its
    height (its scrollbar comes) are laid out as Textual lays them out."""
    from textual.widgets import Log, Static
    shown: dict[bool, tuple[dict[str, Any], str, int, bool]] = {}
    for settled in (False, True):
        app = _Pane(settled)
        with pytest.MonkeyPatch.context() as patch:
            passes = _counting(patch)
            async with app.run_test(size=(60, 20)) as pilot:
                for _ in range(5):
                    await pilot.pause()
                first = len(passes)
                app.query_one("#head", Static).update("a line\nand another")
                app.query_one(Log).write_lines(f"line {i}" for i in range(12))
                for _ in range(5):
                    await pilot.pause()
                shown[settled] = (_placed(app), screen_text(app), first,
                                  app.query_one(Log).show_vertical_scrollbar)
    (places, text, _, bar), (settled_places, settled_text, settled_first, settled_bar) = \
        shown[False], shown[True]
    assert settled_first == 1 < shown[False][2]
    assert settled_places == places and settled_text == text and settled_bar == bar
    assert places["head"][0].height == 2 and "line 11" in text and bar
    assert "ScrollBar of log" in places


async def test_the_first_frame_is_painted_whole_once_and_a_resume_after_a_screen_again() -> None:
    """Textual paints a screen whole for its first frame and again for its first resume
    (which lays it out, or comes just after); SettledScreen paints it whole once, and reads
    the same. A screen shown over it and closed: painted whole again, as Textual does."""
    from textual._compositor import Compositor
    from textual.widgets import Static
    counts: dict[bool, tuple[int, int, str]] = {}
    for settled in (False, True):
        app = _Pane(settled)
        with pytest.MonkeyPatch.context() as patch:
            wholes: list[Compositor] = []
            original = Compositor.render_full_update

            def whole(compositor: Compositor, *args: Any, wholes: list[Compositor] = wholes,
                      original: Any = original, **kwargs: Any) -> Any:
                wholes.append(compositor)
                return original(compositor, *args, **kwargs)

            patch.setattr(Compositor, "render_full_update", whole)
            async with app.run_test(size=(60, 20)) as pilot:
                for _ in range(5):
                    await pilot.pause()
                first = len(wholes)
                app.query_one("#head", Static).update("a line, changed")
                for _ in range(3):
                    await pilot.pause()
                text, mine = screen_text(app), app.screen._compositor
                await app.push_screen(Screen(id="over"))
                await pilot.pause()
                popped = len(wholes)
                app.pop_screen()
                for _ in range(3):
                    await pilot.pause()
                assert screen_text(app) == text
                counts[settled] = (first, wholes[popped:].count(mine), text)
    (textual_first, textual_again, textual_text), (first, again, text) = \
        counts[False], counts[True]
    assert first == 1 < textual_first
    assert text == textual_text and "a line, changed" in text
    assert again >= 1 and textual_again >= 1  # closed over it: painted whole again
