"""The dialog a start or switch that does not fit opens: the fit check's lines, each with
what is needed and what is free, and the choice to start it anyway or not."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from collectors import visible


class FitScreen(ModalScreen[bool]):
    """True: start anyway (with force); False: leave things as they are."""

    DEFAULT_CSS = """
    FitScreen { align: center middle; }
    FitScreen > #fit {
        width: 90%;
        height: auto;
        max-height: 90%;
        border: thick $error;
        background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS = [Binding("s", "answer(True)", "Start anyway"),
                Binding("c,n,escape", "answer(False)", "Cancel")]

    def __init__(self, verb: str, name: str, lines: list[str]) -> None:
        super().__init__()
        # Not .name or .lines: a widget has those already.
        self.verb = verb
        self.scenario = name
        self.said = lines

    def compose(self) -> ComposeResult:
        text = Text()
        head, *rest = self.said or [f"'{self.scenario}' does not fit"]
        text.append(f"{visible(head)}\n", style="bold")
        for line in rest:
            level, _, said = line.strip().partition(": ")
            style = "bold red" if level == "refuse" else "yellow" if level == "warn" else ""
            text.append(f"{visible(level)}: ", style=style)
            text.append(f"{visible(said)}\n")
        what = "switch" if self.verb == "switch" else "start"
        text.append(f"\nNothing was stopped. {what.capitalize()} anyway? ", style="dim")
        text.append("s", style="bold cyan")
        text.append(" start anyway   ")
        text.append("c", style="bold cyan")
        text.append(" cancel")
        with VerticalScroll(id="fit"):
            yield Static(text)

    def action_answer(self, go: bool) -> None:
        self.dismiss(go)
