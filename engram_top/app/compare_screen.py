"""Side by side: every scenario's latest run (the live one included) in one table, grouped
as the four panels are, each figure with its change against a baseline the user picks.
The figures are facts.summary(), which the session keeps on each run."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from engram_top.app.panels import tokens
from engram_top.store import RunStore

# (panel, label, results key, format, which direction is better)
ROWS = (
    ("HBM", "weights per GPU (GB)", "weights_gb", "{:.3f}", "lower"),
    ("KV pool", "KV capacity (tokens)", "kv_tokens", "tokens", "higher"),
    ("host RAM", "host Δ since launch (GiB)", "host_delta_gib", "{:+.1f}", "lower"),
    ("start-up", "time to ready (s)", "ready_s", "{:.1f}", "lower"),
    ("latency", "TTFT p50 (ms)", "ttft_p50_ms", "{:.1f}", "lower"),
    ("latency", "TPOT p50 (ms)", "itl_p50_ms", "{:.1f}", "lower"),
    ("latency", "output (tok/s)", "output_tok_s", "{:.1f}", "higher"),
)


def comparison_table(store: RunStore, baseline: str | None) -> Table:
    names = [n for n, f in store.history.items() if f.results]
    base = store.history.get(baseline) if baseline else None
    t = Table(title=f"baseline: {baseline or '–'}  ·  b: next baseline  ·  esc: close",
              expand=True)
    t.add_column("panel", style="dim", no_wrap=True)
    t.add_column("figure", style="bold", no_wrap=True)
    for name in names:
        live = store.run is not None and store.history[name] is store.run
        t.add_column(("▶ " if live else "") + name + (" (baseline)" if name == baseline else ""),
                     justify="right", no_wrap=True)
    for panel, label, key, fmt, better in ROWS:
        cells = []
        for name in names:
            value = store.history[name].results.get(key)
            ref = base.results.get(key) if base is not None else None
            cells.append(_cell(value, ref, fmt, better, name == baseline))
        t.add_row(panel, label, *cells)
    return t


def _cell(value: float | None, ref: float | None, fmt: str, better: str,
          is_baseline: bool) -> Text:
    if value is None:
        return Text("–", style="dim")
    text = Text(tokens(value) if fmt == "tokens" else fmt.format(value))
    if is_baseline or ref in (None, 0):
        return text
    delta = value / ref - 1  # type: ignore[operator]
    good = delta < 0 if better == "lower" else delta > 0
    style = "dim" if abs(delta) < 0.005 else ("green" if good else "red")
    text.append(f" {delta * 100:+.1f}%", style=style)
    return text


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,c,q", "dismiss", "Close"),
                Binding("b", "next_baseline", "Next baseline")]

    def __init__(self, store: RunStore) -> None:
        super().__init__()
        self.store = store
        names = [n for n, f in store.history.items() if f.results]
        self.baseline: str | None = names[0] if names else None

    def compose(self) -> ComposeResult:
        yield Static(id="compare")

    def on_mount(self) -> None:
        self.set_interval(0.5, self._draw)
        self._draw()

    def _draw(self) -> None:
        if not any(f.results for f in self.store.history.values()):
            self.query_one("#compare", Static).update(
                Text("no run has figures yet: start a scenario", style="dim"))
            return
        self.query_one("#compare", Static).update(comparison_table(self.store, self.baseline))

    def action_next_baseline(self) -> None:
        names = [n for n, f in self.store.history.items() if f.results]
        if names:
            i = names.index(self.baseline) + 1 if self.baseline in names else 0
            self.baseline = names[i % len(names)]
            self._draw()


