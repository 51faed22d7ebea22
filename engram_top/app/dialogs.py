"""The dashboard's two dialogs: a question before a server that is serving is stopped, and
the keys in force."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from collectors.safetext import visible


class ConfirmScreen(ModalScreen[bool]):
    """Asks before stopping a server that is serving requests."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble((visible(self.question), "bold"), "\n\n",
                                   ("y", "bold cyan"), " yes   ", ("n", "bold cyan"), " no"),
                     id="confirm")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", id="help-close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys  # (key as shown, what it does)

    def compose(self) -> ComposeResult:
        text = Text("Keys\n\n", style="bold")
        for key, description in self.keys:
            text.append(f"{visible(key):>10}  ", style="bold cyan")
            text.append(f"{visible(description)}\n")
        text.append("\nEvery action is also in the command palette (ctrl+p), and keys can be "
                    "remapped in the config file (README: Configuration).\n\n", style="dim")
        text.append("HBM per GPU comes from NVML; KV pool and latency from SGLang's "
                    "/metrics; host RAM from /proc/meminfo (used = total − MemAvailable; "
                    "pinned host memory, such as the Engram tables, shows in Shmem and huge "
                    "pages). Memory is in GiB; SGLang's \"GB\" are GiB too.", style="dim")
        # A small terminal scrolls it (↑ ↓ PgUp PgDn) rather than cut it.
        with VerticalScroll(id="help"):
            yield Static(text)

    def on_mount(self) -> None:
        self.query_one("#help", VerticalScroll).focus()
