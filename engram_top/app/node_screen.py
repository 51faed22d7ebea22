"""A node of the fleet in the dashboard's own panels (HBM, KV pool, host RAM, latency), fed
from Prometheus: its last half hour from range queries, then each refresh; `h` opens the
history charts over the same store."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Static

from engram_top import model
from engram_top.app import panels
from engram_top.app.footer import KeyFooter
from engram_top.app.history_screen import HistoryScreen
from engram_top.app.panel import Panel
from engram_top.app.repaint import repaint_rows
from engram_top.app.safe import safe
from engram_top.app.sessions import FleetView
from engram_top.fleet import HISTORY_S, agent_lines, stack_line


class NodeScreen(Screen[None]):
    BINDINGS = [Binding("escape,q,enter", "dismiss", "Back"),
                Binding("h", "history", "History")]

    def __init__(self, session: FleetView, node: str) -> None:
        super().__init__()
        repaint_rows(self)
        self.session = session
        self.node = node
        self.detail = session.detail(node)
        self.history_note = "history: asking Prometheus for the last " \
                            f"{HISTORY_S / 60:.0f} min…"

    def compose(self) -> ComposeResult:
        yield Static(id="node-head")
        with Grid(id="grid"):
            yield Panel("HBM per GPU · dcgm-exporter", panels.hbm_panel, panels.HBM_SOURCES,
                        id="hbm")
            # Whose series the node's are (SGLang's, vLLM's), as its detail read them.
            engine = model.engine_of(self.detail.store) if self.detail else "the server"
            yield Panel(f"KV pool · {engine}", panels.kv_panel, panels.KV_SOURCES, id="kv")
            yield Panel("Host RAM · node-exporter", panels.host_panel, panels.HOST_SOURCES,
                        id="host")
            yield Panel("Latency · histogram_quantile", panels.latency_panel,
                        panels.LATENCY_SOURCES, id="latency")
        yield Static(id="node-foot")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.set_interval(1.0, self.draw)
        self.call_after_refresh(self.draw)  # once the panels have their sizes
        if self.detail is not None:
            self.run_worker(self._history(), exclusive=True)

    async def _history(self) -> None:
        assert self.detail is not None
        try:
            self.history_note = await self.session.load_history(self.detail)
        except Exception as exc:  # a worker's exception would end the app: said here instead
            self.history_note = f"history: none ({type(exc).__name__}: {exc})"
        self.draw(force=True)

    def draw(self, force: bool = False) -> None:
        d = self.detail
        if d is not None:
            self.session.feed(d)
            for panel in self.query(Panel):
                panel.refresh_from(d.store, force=force)
        # Prometheus's labels and answers: shown with their controls visible.
        self.query_one("#node-head", Static).update(safe(self._head()))
        self.query_one("#node-foot", Static).update(safe(self._foot(), "\n"))

    def _head(self) -> Text:
        r = self.session.row_of(self.node)
        if r is None or self.detail is None:
            return Text(f"{safe(self.node)}: Prometheus reports nothing for this node",
                        style="yellow")
        entry = self.session.nodes[self.node]
        # Labels made visible before they are Text (Rich drops BEL, BS, VT, FF and CR unseen).
        placement = safe(r.placement) + (" (inferred from host memory)" if r.placement_inferred
                                         else "")
        return Text.assemble((safe(self.node), "bold"),
                             f"  placement {placement}  ·  {r.state}  ·  "
                             f"read {self.session.clock() - entry[0]:.0f} s ago",
                             ("  h history · esc back", "dim"), no_wrap=True,
                             overflow="ellipsis")

    def _foot(self) -> Text:
        r = self.session.row_of(self.node)
        t = Text(safe(self.history_note), style="dim")
        if r is not None and r.alerts:
            t.append("\n" + "  ".join(f"⚠ {safe(a)}" for a in r.alerts), style="bold yellow")
        if r is not None and r.missing:
            t.append("\nmissing: " + "; ".join(map(safe, r.missing)), style="yellow")
        if r is not None and r.agent is not None:  # its scenarios' names are labels: made safe
            t.append("".join(f"\nagent {safe(line)}" for line in agent_lines(r.agent)))
        if r is not None and r.stack is not None:  # a router's or LMCache's, no engine's
            t.append(f"\n{stack_line(r.stack)}")
        return t

    def action_history(self) -> None:
        if self.detail is not None:
            self.app.push_screen(HistoryScreen(self.detail.store, self.session.clock,
                                               window_s=HISTORY_S))
