"""The least a Textual dashboard costs: six bordered panels of twelve lines and a footer,
each panel's text changed once a second (new figures, as a watched server's change under
load), nothing read or computed. bench_ui_cpu.py --floor runs it beside nvitop and
engram-top, so that engram-top's figure can be read against what the framework itself
takes to draw the same screen once a second.

    python benchmarks/textual_floor.py [--still | --lines]

--still: the panels drawn once and never changed (Textual's own timers and input thread
alone).
--lines: each panel a widget of lines (Textual's line API) whose changed lines alone are
marked for repainting, with no layout pass: how engram-top's panels redraw (app/panel.py);
here every line changes every second, the most such a panel redraws.
"""

from __future__ import annotations

import random
import sys

from rich.segment import Segment
from textual.app import App, ComposeResult
from textual.containers import Grid
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Static

TITLES = ("HBM per GPU", "KV pool", "Host RAM", "Latency", "Scenarios", "Events")


class Lines(Widget):
    """A panel of lines: a new text marks only its changed lines for repainting."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.strips: list[Strip] = []

    def update(self, text: str) -> None:
        width = self.content_region.width
        for y, line in enumerate(text.split("\n")):
            if y < len(self.texts) and self.texts[y] == line:
                continue
            strip = Strip([Segment(line)]).crop_extend(0, width, None)
            if y < len(self.texts):
                self.texts[y], self.strips[y] = line, strip
            else:
                self.texts.append(line)
                self.strips.append(strip)
            self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        return self.strips[y] if y < len(self.strips) else Strip.blank(self.content_region.width)


class Floor(App[None]):
    CSS = """
    Grid { grid-size: 2 3; }
    Static, Lines { border: round $accent; padding: 0 1; height: 1fr; }
    """
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        with Grid():
            for title in TITLES:
                panel = Lines() if self.lines else Static()
                panel.border_title = title
                yield panel
        yield Footer()

    def __init__(self, still: bool, lines: bool) -> None:
        super().__init__()
        self.still = still
        self.lines = lines

    def on_mount(self) -> None:
        if not self.still:
            self.set_interval(1.0, self.tick)
        self.call_after_refresh(self.tick)  # once the panels have their width

    def tick(self) -> None:
        for panel in self.query(Lines) if self.lines else ():
            panel.update(figures())
        for static in () if self.lines else self.query(Static):
            static.update(figures())


def figures() -> str:
    return "\n".join(f"row {i:2}  {random.uniform(0, 1000):9.1f}  {random.uniform(0, 100):5.1f}%  "
                     f"{'█' * random.randint(0, 20)}" for i in range(12))


if __name__ == "__main__":
    Floor(still="--still" in sys.argv[1:], lines="--lines" in sys.argv[1:]).run()
