"""The Textual dashboard. It reads the session's store twice a second and redraws only the
panels whose sources changed; the session does all I/O."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from engram_top.app import panels
from engram_top.store import RunStore

REFRESH_S = 0.5  # at most 2 Hz


class Session(Protocol):
    store: RunStore

    async def start(self) -> None: ...
    async def close(self) -> None: ...


class Panel(Static):
    """A bordered panel redrawn from the store when one of its sources has a new version."""

    def __init__(self, title: str, render_fn: Callable[[RunStore], Any],
                 sources: tuple[str, ...], *, id: str) -> None:
        super().__init__(classes="panel", id=id)
        self.border_title = title
        self.render_fn = render_fn
        self.sources = sources
        self._seen: tuple[int, ...] | None = None

    def refresh_from(self, store: RunStore, force: bool = False) -> None:
        version = store.version(*self.sources)
        if version == self._seen and not force:
            return
        self._seen = version
        self.update(self.render_fn(store))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.keys = bindings

    def compose(self) -> ComposeResult:
        text = Text("Keys\n\n", style="bold")
        for b in self.keys:
            text.append(f"{b.key_display or b.key:>8}  ", style="bold cyan")
            text.append(f"{b.description}\n")
        text.append("\nHBM per GPU comes from NVML; KV pool and latency from SGLang's "
                    "/metrics; host RAM from /proc/meminfo (used = total − MemAvailable). "
                    "Memory is in GiB; SGLang's \"GB\" are GiB too.", style="dim")
        yield Static(text, id="help")


class EngramTopApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "engram-top"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Keys", key_display="?", id="help"),
    ]

    def __init__(self, session: Session, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.session = session
        self.clock = clock
        self._closed = False

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Grid(id="grid"):
            yield Panel("HBM per GPU", panels.hbm_panel, ("gpu", "host", "server", "run"),
                        id="hbm")
            yield Panel("KV pool", panels.kv_panel, ("server",), id="kv")
            yield Panel("Host RAM", panels.host_panel, ("host", "run"), id="host")
            yield Panel("Latency", panels.latency_panel, ("server",), id="latency")
        yield Static(id="events")
        yield Footer()

    def on_mount(self) -> None:
        self.start_session()
        self.set_interval(REFRESH_S, self.refresh_panels)
        self.refresh_panels()

    @work(exclusive=True, group="session", exit_on_error=False)
    async def start_session(self) -> None:
        try:
            await self.session.start()
        except Exception as exc:  # shown, and the app stays up so the user can read it
            self.session.store.event("error", f"could not start: {type(exc).__name__}: {exc}")
            self.notify(f"could not start: {exc}", severity="error", timeout=15)

    def refresh_panels(self) -> None:
        if self._closed:
            return  # quitting: the widgets may already be gone
        store = self.session.store
        with self.batch_update():
            self.query_one("#header", Static).update(panels.header(store, self.clock()))
            for panel in self.query(Panel):
                panel.refresh_from(store)
            self.query_one("#events", Static).update(self._events(store))

    def _events(self, store: RunStore) -> Text:
        text = Text()
        for e in list(store.events)[-3:]:
            style = {"error": "red", "warning": "yellow"}.get(e.level, "")
            text.append(time.strftime("%H:%M:%S ", time.localtime(e.wall)), style="dim")
            text.append(e.text[:160] + "\n", style=style)
        return text

    def action_help(self) -> None:
        self.push_screen(HelpScreen([b for b in self.BINDINGS if isinstance(b, Binding)]))

    async def action_quit(self) -> None:
        """Stop what we started (load, server, polls), then leave."""
        self.query_one("#header", Static).update(Text("stopping the server…", style="bold"))
        await self.close_session()
        self.exit(0)

    async def close_session(self) -> None:
        if not self._closed:
            self._closed = True
            await self.session.close()

    async def on_unmount(self) -> None:
        await self.close_session()
