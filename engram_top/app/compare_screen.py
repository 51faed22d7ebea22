"""Side by side: every scenario's runs (the live one included, and any loaded from files) in
one table, grouped as the four panels are, each figure with its change against a baseline
the user picks. Repeated runs of a scenario are its trials: the cell shows their mean and a
95% interval of the change, marked ~ when the interval holds zero (smaller than the noise).

The numbers come from engram_top.compare.runs.comparison, the one comparison a snapshot writes too,
over engram_top.compare.comparison, the same code as `engram-top bench`'s report; the rows are the
registered metrics (engram_top.compare.measures)."""

from __future__ import annotations

import dataclasses

from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from collectors import pct_change, visible
from engram_top.compare import (
    NO_INTERVAL,
    PROBE_ROW,
    QUICK_CAVEAT,
    WARMING_UP,
    Cell,
    Comparison,
    Metric,
    Registry,
    Row,
    RunResult,
    compare_runs,
    verdict_of,
)
from engram_top.model import RunStore
from engram_top.probe import HOST_MODES, ProbeReport
from engram_top.seed import Reference


def comparison_table(c: Comparison, store: RunStore) -> Table:
    """One column per scenario (its name never cut: a header wraps between words), a row
    per figure under its panel's heading, and the seed's figure for the scenario's placement
    in its own cell: one cell, at most three short lines, so a 100-column terminal holds
    three scenarios. Names come from files and servers: a Table reads its strings as Rich
    markup, so each is made visible and escaped (a name holding "[/]" would break it)."""
    live = store.run.scenario if store.run is not None else None  # the run on screen
    t = Table(title=f"baseline: {_name(c.baseline)}  ·  b: next baseline  ·  "
                    "↑↓ ←→ PgUp PgDn: scroll  ·  esc: close",
              caption="mean of n runs · Δ vs baseline [95% interval] · ~ within the noise · "
                      "seed: the seed benchmark's figure for that placement († an "
                      "assumption of the seeds file, not the benchmark's)",
              expand=True)
    t.add_column("figure", style="bold", no_wrap=True)
    for name in c.scenarios:
        # The name alone: its runs and the baseline are the first row's, so that a header
        # wraps to two lines at most at 100 columns ("device" over "(B/report.json)").
        head = ("▶ " if name == live else "") + _name(name)
        longest = max(len(word) for word in head.split())
        t.add_column(head, justify="right", min_width=longest, overflow="fold")
    # A probe's predictions: a column of their own, apart from every measured cell.
    probe = [] if c.probe is None else [c.probe]
    for p in probe:
        cell = _probe_cell(p)
        head = "predicted by probe " + (_name(p.device_name) if p.meaningful_for_placement
                                        else "(CPU: not meaningful)")
        widest = max(len(line) for line in cell.plain.split("\n"))  # a line per batch, unwrapped
        t.add_column(head, justify="right", overflow="fold", min_width=widest,
                     style="italic" if p.meaningful_for_placement else "dim italic")
        t.caption = f"{t.caption}\npredicted by probe: {_probe_caption(p)}"
    blank = [""] * (len(c.scenarios) + len(probe))
    t.add_row("runs", *[_runs_cell(c, s) for s in c.scenarios], *[""] * len(probe))
    if c.engines:  # which engine and placement each column is
        t.add_row("engine · placement", *[Text(visible(c.engine_placement(s)), style="cyan")
                                          for s in c.scenarios], *[""] * len(probe))
    if c.windows:  # what a live column's latencies were measured over
        t.add_row("measured over", *[Text(visible(c.windows.get(s, "–")), style="dim")
                                     for s in c.scenarios], *[""] * len(probe))
    panel = None
    marked = []
    for row in c.rows:
        if row.metric.panel != panel:
            panel = row.metric.panel
            t.add_row(Text(panel, style="dim italic"), *blank)
        cells: list[Text | str] = [
            _cell(row.metric, row.cells[s], _seed(row, c.placements.get(s)), c.warming.get(s))
            for s in c.scenarios]
        # Two engines that mean different things by a figure: marked, and said below.
        mark = " ‡" if c.mixed_engines and row.metric.engine_note else ""
        if mark:
            marked.append(row.metric.engine_note)
        cells += [cell if row.metric.key == PROBE_ROW else "" for _ in probe]
        t.add_row(f"{row.metric.label} ({row.metric.unit}){mark}", *cells)
    if marked:
        t.caption = f"{t.caption}\n" + "\n".join(f"‡ {note}" for note in marked)
    if c.throttled:  # a run on a GPU held down is no fair side of the comparison
        t.add_row(Text("GPU health", style="dim italic"), *blank)
        t.add_row("throttled while serving", *[
            Text("\n".join(map(visible, c.throttled[s])), style="bold yellow")
            if s in c.throttled
            else Text("–", style="dim") for s in c.scenarios], *[""] * len(probe))
    return t


def verdict_text(c: Comparison) -> Text:
    """The verdict (compare.verdict), a line per axis: each scenario's change against the
    baseline with its interval and ▲ it wins, ▼ the baseline wins, ≈ not distinguishable,
    ? no interval (one run each), then how the intervals were made. Measured lines only: a
    probe's predictions stay in their own column. The sentences are in summary.md."""
    found = verdict_of(c, warming=c.warming)
    text = Text(f"Verdict against {visible(c.baseline)}", style="bold")
    if not found.findings:
        text.append("  one scenario only: start another to compare", style="dim")
        return text
    text.append("  ▲ wins · ▼ loses · ≈ not distinguishable · ? one run each: no interval",
                style="dim")
    for label, findings in found.by_axis():
        text.append(f"\n  {label}: ", style="bold")
        for i, f in enumerate(findings):
            text.append(" · " if i else "")
            style = "bold" if f.winner else "yellow" if f.outcome in (WARMING_UP, NO_INTERVAL) \
                else ""
            text.append(f"{visible(f.evidence.scenario)} {visible(f.brief)}", style=style)
    methods = sorted({f"{f.evidence.level * 100:g}% {f.evidence.method}" for f in found.findings
                      if f.evidence.has_interval and f.evidence.method})
    warm = [f.evidence.warming for f in found.findings if f.outcome == WARMING_UP]
    if warm:
        text.append(f"\n  warming up: {visible(warm[0])}", style="yellow")
    if c.quick:  # said where a presenter reads the verdict, not only under the table
        text.append(f"\n  ⚠ {visible(', '.join(c.quick))}: {QUICK_CAVEAT}", style="bold yellow")
    if methods:
        text.append(f"\n  intervals: {', '.join(methods)}", style="dim")
    return text


def _probe_cell(p: ProbeReport) -> Text:
    """A line per batch, "b8 +4.1% · +0.5%", under "host · pf": the changes against device."""
    lines = [f"b{b.batch} " + " · ".join(f"{b.predicted_tpot_change[m] * 100:+.1f}%"
                                         for m in HOST_MODES) for b in p.batches]
    text = Text("vs device: host · pf", style="dim")
    for line in lines:
        text.append(f"\n{line}")
    if not p.meaningful_for_placement:
        text.append("\nnot meaningful", style="bold yellow")
    return text


def _probe_caption(p: ProbeReport) -> str:
    what = "a CPU run: NOT meaningful for placement" if not p.meaningful_for_placement \
        else _name(p.device_name)
    return (f"TPOT change per decode batch b (pf: host-prefetch) from {what}, synthetic "
            "tables; a prediction, not a measured run")


def _name(text: str) -> str:
    """A name from outside, for a string the Table reads as markup."""
    return escape(visible(text))


def _runs_cell(c: Comparison, s: str) -> Text:
    """A column's runs, and what its changes are against where that is not the baseline (a
    file's runs: their own file's, another workload than the live runs')."""
    n = f"n={c.trials[s]}"
    if s == c.baseline or c.against.get(s) == s:
        return Text(f"{n} · baseline" if s == c.baseline else f"{n} · its file's baseline",
                    style="bold")
    if s in c.unpaired:
        return Text(f"{n} · no baseline in its file", style="yellow")
    if s in c.against:
        return Text(f"{n} · vs {visible(c.against[s])}")
    return Text(n)


def _cell(metric: Metric, cell: Cell, seed: str | None = None,
          warming: str | None = None) -> Text:
    if cell.mean is None and warming:  # a live run's window does not mean anything yet
        text = Text("warming up", style="yellow")
    else:
        text = _figure(metric, cell)
    if seed is not None:
        text.append(f"\nseed {seed}", style="dim")
    return text


def _figure(metric: Metric, cell: Cell) -> Text:
    if cell.mean is None:
        return Text("–", style="dim")
    text = Text(metric.screen_fmt(cell.mean))
    if cell.delta is None:
        return text
    good = cell.delta < 0 if metric.better == "lower" else cell.delta > 0
    if metric.delta == "absolute":  # in the metric's unit (the row names it): host GiB
        small, unit, scale = abs(cell.delta) < 0.05, "", 1.0
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


def _seed(row: Row, placement: str | None) -> str | None:
    """The seed's figure for this placement, as the cell shows it (a change where the seed
    gives only the change against device)."""
    for f in row.reference:
        if f.placement == placement:
            # † as the Markdown files mark it: the seeds file's assumption, not a figure of
            # the seed's benchmark (the caption says so).
            return (pct_change(f.value) if f.is_delta else row.metric.screen_fmt(f.value)) \
                + ("†" if f.assumed else "")
    return None


class CompareScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,c,q", "dismiss", "Close"),
                Binding("b", "next_baseline", "Next baseline"),
                Binding("s", "snapshot", "Snapshot")]

    def __init__(self, store: RunStore, *, extra: list[RunResult] | None = None,
                 reference: Reference | None = None,
                 price_per_gpu_hour: float | None = None,
                 metrics: Registry | None = None, probe: ProbeReport | None = None) -> None:
        super().__init__()
        self.metrics = metrics
        self.probe = probe  # `--probe`: its predictions, a column beside the runs
        self.store = store
        self.extra = list(extra or [])
        self.reference = reference
        self.price = price_per_gpu_hour

    def compose(self) -> ComposeResult:
        # Taller than the screen with three scenarios at 100x30: it scrolls (its container
        # is focused, so ↑ ↓ PgUp PgDn Home End move it). The verdict first: what a
        # presenter says; the table below is its evidence.
        with VerticalScroll(id="compare"):
            yield Static(id="compare-verdict")
            yield Static(id="compare-table")

    def on_mount(self) -> None:
        self.query_one("#compare", VerticalScroll).focus()
        self.set_interval(1.0, self._draw)
        self._draw()

    def _comparison(self) -> Comparison | None:
        c = compare_runs(self.store.runs, baseline=self.store.baseline, extra=self.extra,
                             reference=self.reference, price_per_gpu_hour=self.price,
                             metrics=self.metrics)
        return c if c is None or self.probe is None else dataclasses.replace(c, probe=self.probe)

    def _draw(self) -> None:
        view = self.query_one("#compare-table", Static)
        said = self.query_one("#compare-verdict", Static)
        try:
            c = self._comparison()
        except Exception as exc:  # runs nobody foresaw: said here, the dashboard stays up
            view.update(Text(f"no comparison: {type(exc).__name__}: {exc}", style="red"))
            said.update("")
            return
        if c is None:
            view.update(Text("no run has figures yet: start a scenario", style="dim"))
            said.update("")
            return
        said.update(verdict_text(c))
        table = comparison_table(c, self.store)
        # As wide as the screen; wider, scrolled sideways (← →), where even its narrowest
        # form (each header wrapped between words) does not fit: never a column cut off.
        room = self.query_one("#compare", VerticalScroll).scrollable_content_region.width
        console = self.app.console  # measured unbounded: a Measurement is clamped to it
        least = Measurement.get(console, console.options.update_width(100_000), table).minimum
        view.styles.width = least if room and least > room else None
        view.update(table)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # `s` where the app takes snapshots (the dashboard's, not the fleet's compare).
        return action != "snapshot" or hasattr(self.app, "action_snapshot")

    def action_snapshot(self) -> None:
        """The dashboard's `s`, here too: this screen (its verdict and table) with
        everything behind it, the comparison against the baseline chosen here."""
        take = getattr(self.app, "action_snapshot", None)
        if take is not None:
            take()

    def action_next_baseline(self) -> None:
        c = self._comparison()
        if c is not None:
            names = list(c.scenarios)
            # The session's: the strip and snapshots take it too, and it stays once this
            # screen is closed.
            self.store.choose_baseline(names[(names.index(c.baseline) + 1) % len(names)])
            self._draw()
