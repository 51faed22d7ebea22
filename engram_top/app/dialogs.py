"""The dashboard's dialogs: a question before a server that is serving is stopped, what to
do on quit with a server an earlier engram-top started, and the keys in force."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from collectors import visible
from engram_top.model import LeftRunning


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


class QuitAdoptedScreen(ModalScreen[str | None]):
    """On quit, with a server running that an earlier engram-top started (this dashboard
    adopted it): "leave" it running (the default), "stop" it, or None: do not quit."""

    BINDINGS = [Binding("l,enter,q", "answer('leave')", "Leave it running"),
                Binding("s", "answer('stop')", "Stop it"),
                Binding("c,escape", "answer(None)", "Cancel")]

    def __init__(self, server: LeftRunning, serving: str | None = None) -> None:
        super().__init__()
        self.server = server
        self.serving = serving  # other clients' requests in flight on it, if any

    @property
    def question(self) -> str:
        s = self.server
        return (f"{s.scenario} (pid {s.pid}, port {s.port}) was started by an earlier "
                "engram-top. Quit and leave it running, or stop it?")

    def compose(self) -> ComposeResult:
        text = Text.assemble((visible(self.question), "bold"))
        if self.serving:
            text.append(f"\n{visible(self.serving)}.", style="yellow")
        text.append_text(Text.assemble(
            "\n\n", ("l", "bold cyan"), "/", ("enter", "bold cyan"), " leave it running   ",
            ("s", "bold cyan"), " stop it   ", ("esc", "bold cyan"), " cancel"))
        yield Static(text, id="confirm")

    def action_answer(self, choice: str | None) -> None:
        self.dismiss(choice)


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
