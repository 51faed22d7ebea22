"""Side by side: every scenario's runs (the live one included, and any loaded from files) in
one table, grouped as the four panels are, each figure with its change against a baseline
the user picks. Repeated runs of a scenario are its trials: the cell shows their mean and a
95% interval of the change, marked ~ when the interval holds zero (smaller than the noise).

The numbers come from engram_top.compare, the same code as `engram-top bench`'s report."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from engram_top import compare as cmp
from engram_top import facts
from engram_top.compare import Cell, Comparison, Metric, Row, RunResult
from engram_top.reference import Reference
from engram_top.store import RunStore

PANEL = {cmp.WEIGHTS: "HBM", cmp.KV: "KV pool", cmp.KV_RATIO: "KV pool",
         cmp.HOST: "host RAM", cmp.READY: "start-up", cmp.TTFT: "latency", cmp.TPOT: "latency",
         cmp.THROUGHPUT: "latency", cmp.COST: "cost"}


def comparison(store: RunStore, baseline: str | None, *, extra: Sequence[RunResult] = (),
               reference: Reference | None = None,
               price_per_gpu_hour: float | None = None) -> Comparison | None:
    """This session's runs (repeats are trials) and the runs loaded from files, compared."""
    runs = facts.run_results(store.runs) + list(extra)
    if not runs:
        return None
    names = list(dict.fromkeys(r.scenario for r in runs))
    return cmp.compare(runs, baseline if baseline in names else names[0],
                   reference=reference, price_per_gpu_hour=price_per_gpu_hour)


def comparison_table(c: Comparison, store: RunStore) -> Table:
    live = store.run.scenario if store.run is not None else None  # the run on screen
    t = Table(title=f"baseline: {c.baseline}  ·  b: next baseline  ·  esc: close",
              caption="mean of n runs · Δ vs baseline [95% interval] · ~ within the noise",
              expand=True)
    t.add_column("panel", style="dim", no_wrap=True)
    t.add_column("figure", style="bold", no_wrap=True)
    for name in c.scenarios:
        head = ("▶ " if name == live else "") + name
        head += " (baseline)" if name == c.baseline else ""
        head += f"\nn={c.trials[name]}"
        t.add_column(head, justify="right")
    has_ref = any(row.reference for row in c.rows)
    if has_ref:
        t.add_column("seed", justify="right", style="dim")
    for row in c.rows:
        cells = [_cell(row.metric, row.cells[s]) for s in c.scenarios]
        label = f"{row.metric.label} ({row.metric.unit})"
        ref = [Text(_reference(row))] if has_ref else []
        t.add_row(PANEL.get(row.metric, ""), label, *cells, *ref)
    return t


def _value(metric: Metric, value: float) -> str:
    if metric is cmp.KV:
        return f"{value / 1e6:.2f}M"
    if metric is cmp.KV_RATIO:
        return f"{value:.3f}x"
    if metric is cmp.WEIGHTS:
        return f"{value:.3f}"
    if metric is cmp.COST:
        return f"{value:.4f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _cell(metric: Metric, cell: Cell) -> Text:
    if cell.mean is None:
        return Text("–", style="dim")
    text = Text(_value(metric, cell.mean))
    if cell.delta is None:
        return text
    good = cell.delta < 0 if metric.better == "lower" else cell.delta > 0
    if metric.delta == "absolute":  # in the metric's unit: host GiB since launch
        small, unit, scale = abs(cell.delta) < 0.05, f" {metric.unit}", 1.0
    else:
        small, unit, scale = abs(cell.delta) < 0.005, "%", 100.0
    style = "dim" if cell.spans_zero or small else ("green" if good else "red")
    text.append(f" {cell.delta * scale:+.1f}{unit}", style=style)
    if cell.interval is not None:
        text.append(f"\n[{cell.interval.lo * scale:+.1f}, {cell.interval.hi * scale:+.1f}]",
                    style="dim")
    if cell.spans_zero:
        text.append(" ~", style="bold yellow")
    return text


def _reference(row: Row) -> str:
    parts = []
    for f in row.reference:
        if f.is_delta:
            parts.append(f"{f.placement} {f.value * 100:+.2f}%")
        elif row.metric is not cmp.KV_RATIO:
            parts.append(f"{f.placement} {_value(row.metric, f.value)}")
        else:
            parts.append(f"{f.placement} {f.value:.3f}x")
    return "\n".join(parts)


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,c,q", "dismiss", "Close"),
                Binding("b", "next_baseline", "Next baseline")]

    def __init__(self, store: RunStore, *, extra: list[RunResult] | None = None,
                 reference: Reference | None = None,
                 price_per_gpu_hour: float | None = None) -> None:
        super().__init__()
        self.store = store
        self.extra = list(extra or [])
        self.reference = reference
        self.price = price_per_gpu_hour
        self.baseline: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="compare")

    def on_mount(self) -> None:
        self.set_interval(0.5, self._draw)
        self._draw()

    def _comparison(self) -> Comparison | None:
        return comparison(self.store, self.baseline, extra=self.extra,
                          reference=self.reference, price_per_gpu_hour=self.price)

    def _draw(self) -> None:
        c = self._comparison()
        view = self.query_one("#compare", Static)
        if c is None:
            view.update(Text("no run has figures yet: start a scenario", style="dim"))
            return
        self.baseline = c.baseline
        view.update(comparison_table(c, self.store))

    def action_next_baseline(self) -> None:
        c = self._comparison()
        if c is not None:
            names = list(c.scenarios)
            self.baseline = names[(names.index(c.baseline) + 1) % len(names)]
            self._draw()
