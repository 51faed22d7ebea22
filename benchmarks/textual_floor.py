"""The least a Textual dashboard costs: six bordered panels of twelve lines and a footer,
each panel's text changed once a second (new figures, as a watched server's change under
load), nothing read or computed. bench_ui_cpu.py --floor runs it beside nvitop and
engram-top, so that engram-top's figure can be read against what the framework itself
takes to draw the same screen once a second.

    python benchmarks/textual_floor.py [--still]

--still: the panels drawn once and never changed (Textual's own timers and input thread
alone).
"""

from __future__ import annotations

import random
import sys

from textual.app import App, ComposeResult
from textual.containers import Grid
from textual.widgets import Footer, Static

TITLES = ("HBM per GPU", "KV pool", "Host RAM", "Latency", "Scenarios", "Events")


class Floor(App[None]):
    CSS = """
    Grid { grid-size: 2 3; }
    Static { border: round $accent; padding: 0 1; height: 1fr; }
    """
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        with Grid():
            for title in TITLES:
                panel = Static(id=title.lower().replace(" ", "-"))
                panel.border_title = title
                yield panel
        yield Footer()

    def __init__(self, still: bool) -> None:
        super().__init__()
        self.still = still

    def on_mount(self) -> None:
        if not self.still:
            self.set_interval(1.0, self.tick)
        self.tick()

    def tick(self) -> None:
        for panel in self.query(Static):
            panel.update("\n".join(
                f"row {i:2}  {random.uniform(0, 1000):9.1f}  {random.uniform(0, 100):5.1f}%  "
                f"{'█' * random.randint(0, 20)}" for i in range(12)))


if __name__ == "__main__":
    Floor(still="--still" in sys.argv[1:]).run()
