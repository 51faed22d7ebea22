"""A panel of lines repaints only the lines that changed, and draws them as the whole panel
(its Group) would: the same cells, whether a new line is drawn straight from its segments
(one that is one row as it stands), with others in one drawing, or alone (where a line takes
more than a row)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from rich.console import Group
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import RichVisual, Visual

from engram_top.app.panel import Panel, one_row
from engram_top.model import RunStore, StoreTopic

WIDTH, HEIGHT = 40, 8


def _lines(version: int) -> list[Text]:
    lines = [
        Text.assemble(("GPU ", "bold"), ("0 ", "cyan"), f"{10 + version:>4} GiB",
                      no_wrap=True, overflow="ellipsis"),
        Text("a line far too long for the panel, cut with an ellipsis " * 2,
             no_wrap=True, overflow="ellipsis"),
        Text(f"wide 表 {version}", style="green"),
        Text("the same every time", style="dim"),
        Text(f"run {version}", style="yellow"),
    ]
    if version >= 2:  # wraps: two rows for one line
        lines.append(Text("wrapping " * 6 + str(version)))
    return lines


class PanelApp(App[None]):
    CSS = f"Panel {{ height: {HEIGHT}; width: {WIDTH}; }}"  # a grid cell's fixed size

    def __init__(self) -> None:
        super().__init__()
        self.store = RunStore()
        self.version = 0

    def compose(self) -> ComposeResult:
        yield Panel("lines", self.draw, (StoreTopic.RUN,), id="lines")

    def draw(self, store: RunStore, rows: int | None = None, cols: int | None = None) -> Group:
        return Group(*_lines(self.version))


def _whole(panel: Panel, version: int) -> list[list[tuple[str, str]]]:
    """The panel's rows as its whole Group draws them, as text with styles."""
    width = panel.size.width
    strips = Visual.to_strips(panel, RichVisual(panel, Group(*_lines(version))), width, None,
                              panel.visual_style)
    rows = [_cells(strip) for strip in strips[:panel.size.height]]
    blank = _cells(Strip.blank(panel.size.width, panel.visual_style.rich_style))
    return rows + [blank] * (panel.size.height - len(rows))


def _shown(panel: Panel) -> list[list[tuple[str, str]]]:
    return [_cells(panel.render_line(y)) for y in range(panel.size.height)]


def _cells(strip: Strip) -> list[tuple[str, str]]:
    """Each cell's character and style, however the strip's segments split them."""
    return [(ch, str(seg.style)) for seg in strip for ch in seg.text]


@pytest.mark.parametrize("version", [1, 2])
async def test_changed_lines_are_drawn_as_the_whole_draws_them(
        monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    app = PanelApp()
    async with app.run_test(size=(WIDTH + 10, HEIGHT + 4)) as pilot:
        panel = app.query_one(Panel)
        panel.refresh_from(app.store)
        await pilot.pause()
        panel.render_line(0)  # its rows, drawn once at this width
        drawings: list[Any] = []
        repainted: list[Region] = []
        to_strips = Visual.to_strips

        def counted(widget: Any, visual: Any, *args: Any, **kw: Any) -> list[Strip]:
            drawings.append(visual)
            return to_strips(widget, visual, *args, **kw)

        monkeypatch.setattr(Visual, "to_strips", counted)
        refresh = panel.refresh
        monkeypatch.setattr(panel, "refresh",
                            lambda *regions, **kw: (repainted.extend(regions),
                                                    refresh(*regions, **kw))[1])
        app.version = version
        app.store.bump(StoreTopic.RUN)
        panel.refresh_from(app.store)
        await pilot.pause()
        shown = _shown(panel)
        monkeypatch.undo()
        assert shown == _whole(panel, version)
        # Three lines changed (GPU, wide, run) and, from version 2, more: the unchanged
        # lines are neither drawn again nor repainted.
        assert repainted and all(r.height == 1 for r in repainted)
        assert {r.y for r in repainted}.isdisjoint({1, 3})
        if version == 1:  # three new lines of one row each: straight from their segments
            assert drawings == []
            assert {r.y for r in repainted} == {0, 2, 4}
        else:  # and a new line of two rows: drawn by Textual, alone
            assert len(drawings) == 1


class InputsApp(PanelApp):
    """A panel with ``inputs``: what its drawing reads, apart from its sources' versions."""

    def __init__(self) -> None:
        super().__init__()
        self.read = 0
        self.drawn = 0

    def compose(self) -> ComposeResult:
        yield Panel("lines", self.draw, (StoreTopic.RUN,), id="lines",
                    inputs=lambda store: self.read)

    def draw(self, store: RunStore, rows: int | None = None, cols: int | None = None) -> Group:
        self.drawn += 1
        return super().draw(store, rows, cols)


async def test_a_panel_with_inputs_is_drawn_only_when_they_change() -> None:
    app = InputsApp()
    async with app.run_test(size=(WIDTH + 10, HEIGHT + 4)) as pilot:
        panel = app.query_one(Panel)
        panel.refresh_from(app.store)
        await pilot.pause()
        drawn = app.drawn
        assert drawn >= 1
        for _ in range(3):  # new versions of its source, the same inputs: not drawn
            app.store.bump(StoreTopic.RUN)
            panel.refresh_from(app.store)
        assert app.drawn == drawn
        app.read, app.version = 1, 1  # what it reads moved: drawn, and its lines shown
        app.store.bump(StoreTopic.RUN)
        panel.refresh_from(app.store)
        await pilot.pause()
        assert app.drawn == drawn + 1
        assert _shown(panel) == _whole(panel, 1)
        panel.refresh_from(app.store, force=True)  # forced (a theme): drawn all the same
        assert app.drawn == drawn + 2


ALPHABET = "abc XYZ 0.5%·│█░⣤▁表é\u0301"
STYLES: list[str | Style] = ["", "bold", "green", "dim", "bold cyan", "on red", "reverse",
                             "magenta on blue", Style(color="red", bgcolor="blue"),
                             Style(bold=True, italic=True)]


def _random_line(rng: random.Random) -> Text:
    plain = "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(0, 50)))
    line = Text(plain, style=rng.choice(STYLES), no_wrap=rng.random() < 0.7,
                overflow=rng.choice(["crop", "ellipsis", "fold", None]),
                justify=rng.choice([None, None, None, "default", "left", "right"]),
                end=rng.choice(["\n"] * 9 + [""]))
    for _ in range(rng.randrange(0, 5)):
        a = rng.randrange(0, len(plain) + 1)
        line.stylize(rng.choice(STYLES), a, rng.randrange(a, len(plain) + 1))
    return line


async def test_a_line_drawn_straight_is_the_row_its_group_draws() -> None:
    """one_row, over 3,000 random lines (styles, spans, wide and zero-width characters,
    every overflow and justification, widths from 1 to 60): where it draws a line, the
    cells are those of the line drawn in a Group by Textual; it leaves to Textual every
    line that would wrap, be cut or justified."""
    rng = random.Random(36)
    app = PanelApp()
    drawn = 0
    async with app.run_test(size=(WIDTH + 10, HEIGHT + 4)):
        panel = app.query_one(Panel)
        for _ in range(3000):
            line, width = _random_line(rng), rng.randrange(1, 61)
            row = one_row(panel, line, width)
            if row is None:
                assert "\n" not in line.plain
                assert (line.cell_len > width or len(line.plain) > width or line.end != "\n"
                        or line.justify in ("left", "right"))
                continue
            drawn += 1
            whole = Visual.to_strips(panel, RichVisual(panel, Group(line)), width, None,
                                     panel.visual_style)
            assert len(whole) == 1 and _cells(row) == _cells(whole[0]), (line, width)
            assert row.cell_length == whole[0].cell_length
    assert drawn > 1000  # most lines fit: the comparison is not a vacuous one
