"""A panel of lines repaints only the lines that changed, and draws them as the whole panel
(its Group) would: the same cells, whether its new lines are drawn together (one drawing for
all of them) or one by one (where a line takes more than a row)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Group
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import RichVisual, Visual

from engram_top.app.panel import Panel
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
        if version == 1:  # three new one-row lines: drawn together, once
            assert len(drawings) == 1
            assert {r.y for r in repainted} == {0, 2, 4}
        else:  # a new line of two rows: each of them drawn alone
            assert len(drawings) > 1


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
