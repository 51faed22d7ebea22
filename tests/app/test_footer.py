"""The key footer: one line drawn as Textual's Footer draws its widgets, cell for cell, made
again only when what it shows changes, with no layout pass; its keys clicked, lit and
told under the mouse as Textual's are, and a line too long scrolled by the wheel."""

from __future__ import annotations

from typing import Any

import pytest
from rich.style import Style
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input

from engram_top.app.footer import KeyFooter

GROUP = Binding.Group("Start/switch")
PAIR = Binding.Group("Pair", compact=True)


class Keys(App[None]):
    # Ours gives a group's label its blank after it where Textual's compact footer has none.
    CSS = "Footer.-compact FooterLabel { margin: 0 1 0 0; }"
    BINDINGS = [Binding("enter", "go", "Go", group=GROUP),
                Binding("1", "pick(1)", "One", group=GROUP),
                Binding("2", "pick(2)", "Two", group=GROUP),
                Binding("q", "quit", "Quit", id="quit"), Binding("x", "stop", "Stop"),
                Binding("comma", "seek(-1)", "-1", key_display=",", group=PAIR),
                Binding("full_stop", "seek(1)", "+1", key_display=".", group=PAIR),
                Binding("h", "hidden", "Hidden", show=False)]

    def __init__(self, footer: type[Footer] | type[KeyFooter] = KeyFooter,
                 compact: bool = True) -> None:
        super().__init__()
        self.footer, self.compact = footer, compact
        self.stop = False  # None: the stop key shown disabled
        self.done: list[str] = []

    def compose(self) -> ComposeResult:
        yield DataTable()
        yield Input()
        yield self.footer(compact=self.compact)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.stop if action == "stop" else True

    def action_go(self) -> None:
        self.done.append("go")

    def action_pick(self, n: int) -> None:
        self.done.append(f"pick {n}")

    def action_seek(self, n: int) -> None:
        self.done.append(f"seek {n}")

    def action_stop(self) -> None:
        self.done.append("stop")


def cells(app: App[Any]) -> list[tuple[str, Style | None]]:
    """The screen's last line as drawn: a character and its colours and attributes each
    (a segment's meta, Textual's mouse offsets, left out)."""
    out: list[tuple[str, Style | None]] = []
    for seg in app.screen._compositor.render_strips()[-1]:
        s = seg.style
        style = None if s is None else Style(color=s.color, bgcolor=s.bgcolor, bold=s.bold,
                                             dim=s.dim)
        out += [(c, style) for c in seg.text]
    return out


def text(app: App[Any]) -> str:
    return "".join(c for c, _ in cells(app))


async def drawn(width: int, compact: bool, footer: Any, stop: bool | None,
                hover: int | None, keymap: dict[str, str] | None = None) -> list[Any]:
    app = Keys(footer, compact)
    app.stop = stop  # type: ignore[assignment]
    async with app.run_test(size=(width, 6)) as pilot:
        if keymap:
            app.set_keymap(keymap)
        await pilot.pause()
        await pilot.pause()
        if hover is not None:
            await pilot.hover(footer, offset=(hover, 0))
            await pilot.pause()
        return cells(app)


@pytest.mark.parametrize(("width", "compact", "stop", "hover"), [
    (100, True, True, None), (100, False, True, None), (100, True, None, None),
    (100, False, None, None), (100, True, True, 3), (100, True, True, 19),
    (100, False, True, 20), (100, True, True, 95), (100, False, None, 90),
    (100, True, None, 24), (40, False, True, None)])
async def test_the_line_is_textuals_footer_cell_for_cell(
        width: int, compact: bool, stop: bool | None, hover: int | None) -> None:
    # Keys, a group of keys alone and a compact one, a disabled key (dim), a hidden one, the
    # palette's on the right, the key under the mouse lit: as Textual's widgets draw them.
    ours = await drawn(width, compact, KeyFooter, stop, hover)
    assert ours == await drawn(width, compact, Footer, stop, hover)
    assert "Start/switch" in "".join(c for c, _ in ours)


async def test_a_remapped_key_reads_as_textuals() -> None:
    ours = await drawn(100, True, KeyFooter, True, None, {"quit": "ctrl+q"})
    assert ours == await drawn(100, True, Footer, True, None, {"quit": "ctrl+q"})
    assert "^q Quit" in "".join(c for c, _ in ours)


async def test_the_keys_change_with_no_layout_and_only_when_they_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = Keys()
    async with app.run_test(size=(100, 6)) as pilot:
        await pilot.pause()
        footer = app.query_one(KeyFooter)
        assert "q Quit" in text(app) and "Stop" not in text(app)
        lines: list[int] = []
        layouts: list[int] = []
        original_line, original_layout = KeyFooter.render_line, Screen._refresh_layout

        def counted_line(self: KeyFooter, y: int) -> Any:
            lines.append(y)
            return original_line(self, y)

        def counted_layout(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
            layouts.append(1)
            original_layout(self, *args, **kwargs)

        monkeypatch.setattr(KeyFooter, "render_line", counted_line)
        monkeypatch.setattr(Screen, "_refresh_layout", counted_layout)
        for _ in range(5):  # what the dashboard's start sends: nothing shown changes
            app.refresh_bindings()
        app.query_one(DataTable).focus()  # its keys are hidden ones
        await pilot.pause()
        await pilot.pause()
        assert lines == [] and layouts == []

        app.stop = True  # a key that appears: drawn again, with no layout of the screen
        app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert lines and layouts == []
        assert "x Stop" in text(app)
        assert footer.region.height == 1


async def test_a_click_presses_its_key_and_a_disabled_one_rings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = Keys()
    app.stop = None  # type: ignore[assignment]
    rang: list[int] = []
    monkeypatch.setattr(Keys, "bell", lambda self: rang.append(1))
    async with app.run_test(size=(100, 6)) as pilot:
        await pilot.pause()
        line = text(app)
        await pilot.click(KeyFooter, offset=(line.index(" 2 ") + 1, 0))
        await pilot.click(KeyFooter, offset=(line.index("Pair") - 2, 0))  # the "."
        await pilot.pause()
        assert app.done == ["pick 2", "seek 1"]
        await pilot.click(KeyFooter, offset=(line.index("x Stop") + 2, 0))
        await pilot.pause()
        assert app.done == ["pick 2", "seek 1"] and rang == [1]
        await pilot.click(KeyFooter, offset=(line.index("Start/switch") + 2, 0))  # a label
        await pilot.pause()
        assert app.done == ["pick 2", "seek 1"] and rang == [1]


async def test_the_key_under_the_mouse_tells_its_tooltip() -> None:
    app = Keys()
    async with app.run_test(size=(100, 6)) as pilot:
        await pilot.pause()
        footer = app.query_one(KeyFooter)
        line = text(app)
        await pilot.hover(KeyFooter, offset=(line.index(" 1 ") + 1, 0))
        assert footer.tooltip == "One"  # a grouped key tells its description
        await pilot.hover(KeyFooter, offset=(line.index("palette"), 0))
        assert footer.tooltip == "Open the command palette"
        await pilot.hover(KeyFooter, offset=(line.index("Pair") + 8, 0))  # a blank
        assert footer.tooltip is None


async def wheel(pilot: Any, event: type[events.MouseEvent]) -> None:
    """One turn of the wheel over the footer (Pilot's own way of sending mouse events)."""
    await pilot._post_mouse_events([event], KeyFooter, offset=(2, 0))


async def test_a_line_too_long_keeps_the_palette_right_and_scrolls_by_the_wheel() -> None:
    app = Keys()
    async with app.run_test(size=(30, 6)) as pilot:
        await pilot.pause()
        before = text(app)
        assert before.endswith("▏^p palette ") and before.startswith(" 1 2 Start/switch")
        await pilot.hover(KeyFooter, offset=(2, 0))
        for _ in range(3):
            await wheel(pilot, events.MouseScrollDown)
        await pilot.pause()
        after = text(app)
        assert after.endswith("▏^p palette ") and after.startswith("2 Start/switch q")
        for _ in range(10):  # not past its start
            await wheel(pilot, events.MouseScrollUp)
        await pilot.pause()
        assert text(app) == before
