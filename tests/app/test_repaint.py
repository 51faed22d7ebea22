"""A repaint draws only the widgets whose cells it writes, over those rows (RowsCompositor),
and what reaches the terminal is what Textual's whole repaint would show: each frame the app
writes is applied to a model of the terminal and compared with the screen drawn whole."""

from __future__ import annotations

import random
from typing import Any

from rich.style import Style
from textual._compositor import ChopsUpdate, LayoutUpdate
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import DataTable, Log, Static

from engram_top.app.repaint import RepaintsRows, RowsCompositor, repaint_rows

Cells = list[list[tuple[str, Style | None]]]


class Counted(Static):
    """A Static that counts the rows it is asked to draw."""

    drawn = 0

    def render_lines(self, crop: Region) -> list[Strip]:
        self.drawn += crop.height
        return super().render_lines(crop)


class CountedScreen(Screen[None]):
    """The screen behind every widget: under every change."""

    drawn = 0

    def render_lines(self, crop: Region) -> list[Strip]:
        self.drawn += crop.height
        return super().render_lines(crop)


class Screenful(RepaintsRows, App[None]):
    CSS = """
    #top, #bottom { height: 1; }
    #row { height: 6; }
    #left, #right { width: 1fr; height: 6; border: round cyan; }
    #far { height: 8; border: round green; }
    Screen { layers: below above; }
    #over { layer: above; offset: 8 5; width: 24; height: 3; border: round red; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.frames: list[Any] = []

    def get_default_screen(self) -> Screen[Any]:
        return repaint_rows(CountedScreen(id="_default"))

    def compose(self) -> ComposeResult:
        yield Counted("header 0", id="top")
        with Horizontal(id="row"):
            yield Counted("\n".join(f"left {i}" for i in range(4)), id="left")
            yield Counted("right", id="right")
        yield Counted("\n".join(f"far {i}" for i in range(6)), id="far")
        yield Counted("events 0", id="bottom")
        yield Counted("over the others", id="over")  # a layer above, as a toast or a menu

    def _display(self, screen: Any, renderable: Any) -> None:
        self.frames.append(renderable)  # headless: Textual would write nothing
        super()._display(screen, renderable)


def _cells(strips: list[Strip]) -> Cells:
    return [[(ch, seg.style) for seg in strip for ch in seg.text] for strip in strips]


def _whole(app: Screenful) -> Cells:
    return _cells(app.screen._compositor.render_strips())


def _apply(terminal: Cells, update: Any) -> None:
    """Write a frame onto the terminal model: a whole one (after a layout) line by line, a
    partial one's changed spans as its chops say; every cell of a span must come from a
    drawn strip (else the terminal would keep a stale cell)."""
    if isinstance(update, LayoutUpdate):
        for y, line in enumerate(update.strips, update.region.y):
            terminal[y][update.region.x:] = _cells([Strip.join(line)])[0]
        return
    assert isinstance(update, ChopsUpdate)
    for y, x1, x2 in update.spans:
        covered = set()
        for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items(), strict=False):
            if strip is None:
                continue
            for i, cell in enumerate(_cells([strip])[0]):
                if x1 <= x + i < x2 and x + i < end:
                    terminal[y][x + i] = cell
                    covered.add(x + i)
        assert covered == set(range(x1, x2)), f"row {y}: cells {x1}-{x2} not all drawn"


async def _frame(app: Screenful, pilot: Any, terminal: Cells) -> dict[str, int]:
    """The frames since the last, applied (a toast comes and goes over a few turns of the
    app's loop); the terminal then shows what the screen drawn whole shows."""
    before = len(app.frames)
    for _ in range(20):
        await pilot.pause()
        if len(app.frames) > before and app.frames[-1] is not None:
            break
    assert len(app.frames) > before, "no frame after a change"
    for update in app.frames[before:]:
        if update is not None:  # nothing to write
            _apply(terminal, update)
    drawn = _drawn(app)
    assert terminal == _whole(app)
    _drawn(app)
    return drawn


def _drawn(app: Screenful) -> dict[str, int]:
    screen = app.screen
    assert isinstance(screen, CountedScreen)
    counts = {w.id or "": w.drawn for w in app.query(Counted)} | {"screen": screen.drawn}
    for w in app.query(Counted):
        w.drawn = 0
    screen.drawn = 0
    return counts


async def test_a_change_at_each_end_draws_neither_widget_between() -> None:
    app = Screenful()
    async with app.run_test(size=(60, 20)) as pilot:
        assert isinstance(app.screen._compositor, RowsCompositor)
        await pilot.pause()
        terminal = _whole(app)
        _drawn(app)
        app.query_one("#top", Static).update("header 1", layout=False)
        app.query_one("#bottom", Static).update("events 1", layout=False)
        drawn = await _frame(app, pilot, terminal)
        assert isinstance(app.frames[-1], ChopsUpdate)  # a repaint, no layout
        # Textual's own repaint draws all of #left, #right and #far here (the box around
        # both changes covers them): 6 + 6 + 8 rows thrown away.
        # Nor the screen, behind both: the widgets in front of it fill every cell written.
        assert drawn == {"top": 1, "left": 0, "right": 0, "far": 0, "bottom": 1, "over": 0,
                         "screen": 0}


async def test_a_changed_line_draws_its_row_and_not_its_neighbour() -> None:
    app = Screenful()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        terminal = _whole(app)
        _drawn(app)
        far = app.query_one("#far", Static)
        far.update("\n".join(f"far {i}" for i in range(6)).replace("far 2", "FAR 2"),
                   layout=False)
        drawn = await _frame(app, pilot, terminal)
        assert drawn["left"] == drawn["right"] == drawn["top"] == drawn["bottom"] == 0
        assert 1 <= drawn["far"] <= 8
        app.query_one("#left", Static).update("left changed", layout=False)
        drawn = await _frame(app, pilot, terminal)
        assert drawn["right"] == drawn["far"] == 0 and drawn["left"] > 0


async def test_a_change_under_a_layer_keeps_the_layer_over_it() -> None:
    """A widget in a layer above others (as a toast or a menu): a change beneath it is drawn
    with the layer over it, and a change of the layer draws nothing beneath it."""
    app = Screenful()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        terminal = _whole(app)
        _drawn(app)
        app.query_one("#far", Static).update("\n".join(["under the layer " * 3] * 6),
                                             layout=False)
        drawn = await _frame(app, pilot, terminal)
        assert drawn["over"] > 0 and drawn["far"] > 0
        app.query_one("#over", Static).update("the layer changed", layout=False)
        drawn = await _frame(app, pilot, terminal)
        # Nothing beneath it: it fills every cell it changed, as Textual's first widget
        # at a cut wins.
        assert drawn["over"] == 3
        assert sum(drawn.values()) == 3
        app.query_one("#over").display = False  # gone (a layout): the widgets beneath shown
        await _frame(app, pilot, terminal)
        assert "under the layer" in "".join(ch for row in terminal[9:12] for ch, _ in row)


async def test_the_dashboard_and_the_fleet_repaint_this_way() -> None:
    from engram_top.app.fleet_screen import FleetApp
    from engram_top.app.main import EngramTopApp

    for app_class in (EngramTopApp, FleetApp):
        assert issubclass(app_class, RepaintsRows)


class Busy(Screenful):
    """Screenful with a log that scrolls and a table beside it, as the dashboard's bottom."""

    CSS = Screenful.CSS + """
    #bottom-row { height: 6; }
    #log { width: 1fr; }
    #table { width: 30; }
    """

    def compose(self) -> ComposeResult:
        yield from super().compose()
        with Horizontal(id="bottom-row"):
            yield Log(id="log")
            yield DataTable(id="table")


async def test_random_changes_write_what_the_whole_screen_shows() -> None:
    """Two hundred frames of random changes (a line of a widget, a scrolling log, a table's
    cell, a layer, a bare repaint of part of a widget), each frame's writes applied to the
    terminal model: it shows what the screen drawn whole shows, every time."""
    rng = random.Random(36)
    app = Busy()
    async with app.run_test(size=(70, 34)) as pilot:
        table = app.query_one(DataTable)
        table.add_column("name", key="name")
        table.add_column("value", key="value")
        for i in range(8):
            table.add_row(f"row {i}", str(i), key=str(i))
        await pilot.pause()
        terminal = _whole(app)
        log = app.query_one(Log)
        statics = list(app.query(Counted))
        for step in range(200):
            for _ in range(rng.randrange(1, 4)):
                what = rng.randrange(5)
                if what == 0:
                    widget = rng.choice(statics)
                    lines = [f"{widget.id} {step} {rng.random():.3f}"] * rng.randrange(1, 4)
                    widget.update("\n".join(lines), layout=False)
                elif what == 1:
                    log.write_line(f"log line {step} " + "x" * rng.randrange(0, 40))
                elif what == 2:
                    table.update_cell(str(rng.randrange(8)), "value", f"{step}")
                elif what == 3:
                    widget = rng.choice(statics)
                    widget.refresh(Region(rng.randrange(0, 5), rng.randrange(0, 3), 6, 1))
                else:
                    app.query_one("#over").styles.offset = (rng.randrange(0, 30),
                                                            rng.randrange(0, 20))
            await _frame(app, pilot, terminal)
        partial = sum(isinstance(frame, ChopsUpdate) for frame in app.frames)
        assert partial >= 100, f"{partial} partial frames: the test is of whole ones"
