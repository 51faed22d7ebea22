"""A widget's lines drawn through RowStyles (its kept frame around each changed line) are
Textual's own, line for line and segment for segment: borders of each kind and colour,
padding, transparent backgrounds, border titles, focus, themes, styles changed at run time,
partial crops; and where Textual does more to a line than frame it (text opacity, tint,
hatch, outline, opacity) Textual draws it."""

from __future__ import annotations

import random

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static

from engram_top.app.row_styles import StylesCache, row_styles

pytestmark = pytest.mark.skipif(StylesCache is None, reason="Textual without _styles_cache")

# id -> whether the kept frame can draw its lines (False: Textual does more than frame them)
FRAMED = {"plain": True, "round": True, "heavy-pad": True, "tall-bg": True, "none-pad": True,
          "titled": True, "wide": True, "faded": False, "tinted": False, "hatched": False,
          "outlined": False, "see-through": False}

CSS = """
Screen { layout: grid; grid-size: 3; }
Framed { height: 9; }
#round { border: round $accent; }
#heavy-pad { border: heavy red; padding: 1 2; background: $panel; }
#tall-bg { border: tall $primary; background: blue 40%; padding: 0 1; }
#none-pad { padding: 0 3; background: $surface; }
#titled { border: solid green; border-title-align: center; }
#wide { border: wide yellow; color: $text-muted; }
#faded { border: round white; text-opacity: 60%; }
#tinted { border: round white; tint: red 30%; }
#hatched { border: round white; hatch: cross $primary 30%; padding: 1; }
#outlined { outline: heavy magenta; }
#see-through { border: round white; opacity: 70%; }
Framed:focus { border: double $accent; background: $boost; }
"""


class Framed(Static, can_focus=True):
    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        row_styles(self)
        self.border_title = id


class FramedApp(App[None]):
    CSS = CSS

    def compose(self) -> ComposeResult:
        for name in FRAMED:
            yield Framed(id=name)


def _content(rng: random.Random) -> Text:
    words = ["GPU0", "KV pool", "12.4 GiB", "ë中", "p50 41.2 ms", "", "█▇▆", "  spaced  "]
    lines = []
    for _ in range(rng.randint(0, 9)):
        line = Text()
        for _ in range(rng.randint(0, 5)):
            line.append(rng.choice(words) + " ",
                        style=rng.choice(["", "bold", "red", "dim italic", "on blue"]))
        lines.append(line)
    return Text("\n").join(lines)


def _segments(strips: list) -> list[list]:
    return [list(strip) for strip in strips]


def _crops(rng: random.Random, width: int, height: int) -> list[Region]:
    crops = [Region(0, 0, width, height)]
    for _ in range(3):
        y = rng.randrange(height)
        x = rng.randrange(width)
        crops += [Region(0, y, width, 1),
                  Region(x, y, rng.randint(1, width - x), rng.randint(1, height - y))]
    return crops


async def test_lines_drawn_through_the_kept_frame_are_textuals_own() -> None:
    app = FramedApp()
    rng = random.Random(11)
    themes = ["textual-dark", "textual-light", "nord"]
    async with app.run_test(size=(120, 40)) as pilot:
        widgets = list(app.query(Framed))
        framed_lines = 0
        for step in range(40):
            for widget in widgets:
                if rng.random() < 0.6:
                    widget.update(_content(rng))
            if step % 7 == 3:
                rng.choice(widgets).focus()
            if step % 11 == 5:
                app.theme = rng.choice(themes)
            if step == 20:  # styles changed at run time: the frame follows
                app.query_one("#plain", Framed).styles.border = ("heavy", "orange")
                app.query_one("#round", Framed).styles.padding = (0, 2)
            await pilot.pause()
            for widget in widgets:
                width, height = widget.size
                for crop in _crops(rng, width, height):
                    ours = widget._styles_cache.render_widget(widget, crop)
                    textuals = StylesCache().render_widget(widget, crop)
                    assert _segments(ours) == _segments(textuals), (widget.id, step, crop)
                kept = widget._styles_cache._frame is not None
                assert kept == FRAMED[widget.id], widget.id
                framed_lines += kept
        assert framed_lines >= 40 * 6
