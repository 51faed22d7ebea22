"""History: how HBM, the KV pool, host RAM, latency and PCIe traffic moved over the last
minutes, and which processes hold each GPU's memory now.

Memory axes are fixed (0 to the GPU's or the host's total), so a placement's footprint
reads the same on any run; latency and PCIe axes scale to what is visible. Everything is
read from the store's series; a source that stopped answering leaves a gap.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.content import Content
from textual.events import Resize
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget
from textual.widgets import DataTable, Static

from collectors import GIB, gib, percent, visible
from engram_top import model
from engram_top.app.charts import PALETTE, Line, chart_lines, rate_unit
from engram_top.app.panel import one_row
from engram_top.app.repaint import repaint_rows
from engram_top.app.row_styles import row_styles
from engram_top.app.safe import cell, safe_text
from engram_top.model import GPU_LABEL, LOCAL, RunStore, Series, SeriesName, SourceName

REFRESH_S = 0.5  # at most 2 Hz, as the dashboard
WINDOWS_S = (60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
# One chart each, drawn by _lines_<name>; the per-process table takes what is left of the
# grid's last row.
CHARTS = ("hbm", "kv", "host", "ttft", "tpot", "rx", "tx")
CELL_MIN_WIDTH = 60  # columns a chart wants before the grid adds another column

Draw = Callable[[int, int], list[Text]]  # a chart's lines at (width, height)


def window_points(series: Series | None, start: float, now: float,
                  scale: float = 1.0) -> tuple[list[tuple[float, float]], float | None]:
    """The points of a series from just before start to now, scaled, and the spacing
    beyond which two of them count as a gap: 3x the usual step of the tier in view
    (the coarse tier's steps are coarse_every times longer and are not gaps)."""
    if series is None or not series.fine:
        return [], None
    fine = series.fine
    if fine[0][0] < start:
        # The fine tier covers the window (the trend strip's case, redrawn every 2 s): read
        # back from its end to the point before the window, never the whole series; its
        # usual step is the one of the points in view.
        points: list[tuple[float, float]] = []
        for t, v in reversed(fine):
            if t <= now:
                points.append((t, v * scale))
            if t < start:
                break  # the point before the window, so the line enters it
        points.reverse()
        step = _median_step(points)
        return points, None if step is None else 3 * step
    everything = series.points()
    coarse_in_view = everything[0][0] < fine[0][0] and fine[0][0] > start
    step = _median_step(series.coarse if coarse_in_view else fine)
    for i, (t, _) in enumerate(everything):
        if t >= start:
            first = max(0, i - 1)  # one point before the window, so the line enters it
            break
    else:
        first = len(everything) - 1
    points = [(t, v * scale) for t, v in everything[first:] if t <= now]
    return points, None if step is None else 3 * step


def _median_step(points: Sequence[tuple[float, float]]) -> float | None:
    times = [t for t, _ in points]
    steps = sorted(map(operator.sub, times[1:], times[:-1]))
    return steps[len(steps) // 2] if steps else None


def gpu_indices(store: RunStore, what: SeriesName) -> list[int]:
    """The GPUs of this node that have a series of ``what``, by index."""
    return sorted({int(gpu) for key in store.series
                   if key.node == LOCAL and key.source == SourceName.GPU and key.metric == what
                   and (gpu := key.label(GPU_LABEL)) is not None})


def process_rows(gpu_data: Any) -> list[tuple[str, str, str, str, str]]:
    """GPU, pid, name, used GiB, share of that GPU's total: by GPU, then most memory first;
    NVML's None (it cannot say, e.g. in some containers) is 'not reported', listed last."""
    if gpu_data is None:
        return []
    rows = []
    for dev in gpu_data.devices:
        procs = sorted(dev.processes, key=lambda p: (p.used_bytes is None, -(p.used_bytes or 0),
                                                     p.pid))
        for p in procs:
            if p.used_bytes is None:
                used, share = "not reported", "–"
            else:
                used = gib(p.used_bytes, 2)
                share = "–" if dev.total_bytes <= 0 else percent(p.used_bytes / dev.total_bytes)
            rows.append((str(dev.index), str(p.pid), p.name or "–", used, share))
    return rows


def window_label(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


class ChartView(Widget):
    """One chart, drawn at whatever size its grid cell has now (so a resize redraws it).

    It renders line by line (Textual's line API), each line through the same conversion a
    whole Text gets, and keeps each line's strip: a redraw repaints only the lines that
    look different. A line growing by a dot, or a legend's value moving, repaints that line
    of the chart, not all of it (while the trend strip's two minutes fill, every redraw
    changes something, and usually one or two lines)."""

    ALLOW_SELECT = False  # a chart's braille dots are no text to copy

    def __init__(self, draw: Draw, *, id: str) -> None:
        super().__init__(id=id, classes="history-chart")
        row_styles(self)  # its changed lines framed as the last (engram_top.app.row_styles)
        self.draw = draw
        self._chart_size: tuple[int, int] | None = None  # the size the lines were drawn at
        self._chart_lines: list[Text] = []
        self._chart_keys: list[tuple[object, ...]] = []
        self._chart_strips: dict[int, Strip] = {}  # rendered lines, by row

    def _take(self, chart: list[Text], size: tuple[int, int]) -> list[int] | None:
        """Keep a new drawing (its lines); the rows that changed (None: all of them)."""
        # A legend may name what a server or Prometheus labelled: no control goes through.
        lines = [safe_text(line) for line in chart]
        keys = [_key(line) for line in lines]
        changed = None
        if size == self._chart_size and len(keys) == len(self._chart_keys):
            changed = [y for y, (old, new) in enumerate(zip(self._chart_keys, keys, strict=True))
                       if old != new]
        self._chart_size, self._chart_lines, self._chart_keys = size, lines, keys
        if changed is None:
            self._chart_strips.clear()
        else:
            for y in changed:
                self._chart_strips.pop(y, None)
        return changed

    def _current_size(self) -> tuple[int, int]:
        return (self.content_size.width, self.content_size.height)

    def render(self) -> Text:
        """The whole chart as one Text (what it shows; the screen draws it line by line)."""
        size = self._current_size()
        if size != self._chart_size:
            self._take(self.draw(*size), size)
        text = Text("\n").join(self._chart_lines)
        text.no_wrap, text.overflow = True, "crop"
        return text

    def render_line(self, y: int) -> Strip:
        size = self._current_size()
        if size != self._chart_size:
            self._take(self.draw(*size), size)
        strip = self._chart_strips.get(y)
        if strip is None:
            width = size[0]
            if 0 <= y < len(self._chart_lines):
                line = self._chart_lines[y]
                # A row as it stands, from its segments (a quarter of the cost while the
                # trend strip fills and each redraw changes its rows); else Textual's drawing.
                strip = one_row(self, line, width)
                if strip is None:
                    content = Content.from_rich_text(line, console=self.app.console)
                    strips = Visual.to_strips(self, content, width, 1, self.visual_style,
                                              apply_selection=False)
                    strip = strips[0] if strips else Strip.blank(width)
            else:
                strip = Strip.blank(width, self.visual_style.rich_style)
            self._chart_strips[y] = strip
        return strip

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> ChartView:
        if repaint and not regions:
            self._chart_strips.clear()  # all of it: a style or the theme may have changed
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def notify_style_update(self) -> None:
        self._chart_strips.clear()
        super().notify_style_update()

    def redraw(self) -> None:
        """Draw it again, and repaint only the lines that look different: a flat line moving
        on with time, or a window with nothing new in it, costs a draw but no repaint."""
        size = self._current_size()
        changed = self._take(self.draw(*size), size)
        if changed is None:
            self.refresh()
        elif changed:
            self.refresh(*[Region(0, y, size[0], 1) for y in changed])


def _key(text: Text) -> tuple[object, ...]:
    return (text.plain, tuple(text.spans))


class Charts:
    """The history charts over a store: one per CHARTS key, over the last window_s seconds.
    Shared by the history screen and the dashboard's trend strip on large terminals."""

    def __init__(self, store: RunStore, clock: Callable[[], float], window_s: float) -> None:
        self.store = store
        self.clock = clock
        self.window_s = window_s

    def draw(self, key: str, width: int, height: int) -> list[Text]:
        """The chart `key` (one of CHARTS) at this size, over the window up to now: its
        lines."""
        now = self.clock()
        start = now - self.window_s
        lines, y_max, title = getattr(self, f"_lines_{key}")(start, now, width)
        return chart_lines(lines, width=width, height=height, t_window=self.window_s,
                           now=now, y_max=y_max, title=title)

    def _line(self, series: Series | None, label: str, colour: str, start: float, now: float,
              width: int, scale: float = 1.0) -> Line:
        points, gap = window_points(series, start, now, scale)
        # A pause shorter than a dot column or two is not worth breaking the line for.
        column_s = self.window_s / max(1, 2 * width)
        return Line(label, points, colour, None if gap is None else max(gap, 2 * column_s))

    def _per_gpu(self, what: SeriesName, start: float, now: float, width: int,
                 scale: float) -> list[Line]:
        return [self._line(self.store.line(SourceName.GPU, what, gpu=str(i)), f"GPU{i}",
                           PALETTE[n % len(PALETTE)], start, now, width, scale)
                for n, i in enumerate(gpu_indices(self.store, what))]

    def _lines_hbm(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        gpu = self.store.data(SourceName.GPU)
        total = max((d.total_bytes for d in gpu.devices), default=0) if gpu else 0
        y_max = total / GIB if total else None
        title = "HBM used (GiB)" if not total else f"HBM used (GiB of {gib(total, 0)})"
        return self._per_gpu(SeriesName.USED, start, now, width, 1 / GIB), y_max, title

    def _lines_kv(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        kv = self.store.line(SourceName.SERVER, SeriesName.TOKEN_USAGE)
        return [self._line(kv, "KV", "magenta", start, now, width, 100.0)], \
            100.0, "KV cache usage (%)"

    def _lines_host(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        host = self.store.data(SourceName.HOST)
        y_max = host.total_bytes / GIB if host and host.total_bytes else None
        title = "Host RAM used (GiB)" if y_max is None else \
            f"Host RAM used (GiB of {y_max:,.0f})"
        used = self.store.line(SourceName.HOST, SeriesName.USED)
        return [self._line(used, "used", "bright_blue", start, now, width, 1 / GIB)], \
            y_max, title

    def _lines_ttft(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        # Histogram_quantile's figure, interpolated inside its bucket: where the bucket is
        # too wide, the latency panel shows the bucket's bounds instead ("<= 100 ms").
        ttft = self.store.line(SourceName.SERVER, SeriesName.TTFT_P50)
        return [self._line(ttft, "p50", "yellow", start, now, width, 1000.0)], \
            None, "TTFT p50 (ms, interpolated)"

    def _lines_tpot(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        itl = self.store.line(SourceName.SERVER, SeriesName.ITL_P50)
        return [self._line(itl, "p50", "green", start, now, width, 1000.0)], \
            None, "TPOT p50 (ms, interpolated)"

    def _pcie(self, what: SeriesName, label: str, start: float, now: float,
              width: int) -> tuple[list[Line], Any, str]:
        raw = self._per_gpu(what, start, now, width, 1.0)
        peak = max((v for line in raw for t, v in line.points if start <= t <= now),
                   default=0.0)
        divisor, unit = rate_unit(peak)
        lines = [Line(ln.label, [(t, v / divisor) for t, v in ln.points], ln.colour, ln.gap_s)
                 for ln in raw]
        return lines, None, f"PCIe {label} ({unit})"

    def _lines_rx(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        return self._pcie(SeriesName.PCIE_RX, "receive", start, now, width)

    def _lines_tx(self, start: float, now: float, width: int) -> tuple[list[Line], Any, str]:
        return self._pcie(SeriesName.PCIE_TX, "transmit", start, now, width)



class HistoryScreen(Screen[None]):
    BINDINGS = [
        Binding("escape,h", "close", "Close"),
        Binding("left_square_bracket,minus", "zoom(-1)", "Shorter window", key_display="["),
        Binding("right_square_bracket,plus,equals_sign", "zoom(1)", "Longer window",
                key_display="]"),
    ]

    def __init__(self, store: RunStore, clock: Callable[[], float],
                 window_s: float = 300.0) -> None:
        super().__init__()
        repaint_rows(self)
        self.store = store
        self.clock = clock
        self.windows = tuple(sorted(set(WINDOWS_S) | {float(window_s)}))
        self.charts = Charts(store, clock, float(window_s))
        self._table_key: tuple[Any, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="history-bar")
        with Grid(id="history-grid"):
            for key in CHARTS:
                yield ChartView(self._drawer(key), id=f"chart-{key}")
            with Vertical(id="history-procs"):
                yield Static(id="procs-title")
                yield DataTable(id="procs-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self._arrange(self.app.size.width)
        self.set_interval(REFRESH_S, self.redraw)
        self.call_after_refresh(self.redraw)  # once the cells have their sizes

    def on_resize(self, event: Resize) -> None:
        self._arrange(event.size.width)
        self.call_after_refresh(self.redraw)  # process names are cut to the new width

    def _arrange(self, width: int) -> None:
        """More columns of charts as the terminal widens; rows share the height."""
        cols = max(2, min(4, width // CELL_MIN_WIDTH))
        grid = self.query_one("#history-grid", Grid)
        grid.styles.grid_size_columns = cols
        rows = math.ceil((len(CHARTS) + 1) / cols)
        grid.styles.grid_size_rows = rows
        # The table takes whatever the charts leave of the last row.
        self.query_one("#history-procs").styles.column_span = rows * cols - len(CHARTS)

    # ------------------------------------------------------------------ drawing
    def redraw(self) -> None:
        with self.app.batch_update():
            self.query_one("#history-bar", Static).update(self._bar())
            for view in self.query(ChartView):
                view.redraw()
            self._refresh_table()

    def _bar(self) -> Text:
        # Keys first, so a narrow terminal cuts the run's name rather than them.
        text = Text.assemble(("History", "bold"), f" · last {window_label(self.window_s)}",
                             ("  [ ] window · esc close", "dim"))
        run = self.store.run
        if run is not None:
            text.append(" · run ")
            text.append(visible(run.scenario), style="bold cyan")
            text.append(": KV and latency since its launch", style="dim")
        return text

    def _drawer(self, key: str) -> Draw:
        def draw(width: int, height: int) -> list[Text]:
            return self.charts.draw(key, width, height)
        return draw

    # ------------------------------------------------------------------ process table
    def _refresh_table(self) -> None:
        table = self.query_one("#procs-table", DataTable)
        # Room left for the name once the other columns (and cell padding) are laid out.
        name_w = max(8, self.query_one("#history-procs").size.width - 38)
        rows = process_rows(self.store.data(SourceName.GPU))
        self.query_one("#procs-title", Static).update(self._table_title(rows))
        key = (tuple(rows), name_w)
        if key == self._table_key:
            return  # unchanged: keep the user's cursor and scroll position
        cursor = table.cursor_row
        # Columns only ever widen as rows come in, so a narrower screen starts them afresh.
        table.clear(columns=self._table_key is None or self._table_key[1] != name_w)
        self._table_key = key
        if not table.columns:
            for label in ("GPU", "pid", "process", "used GiB", "share"):
                table.add_column(label, key=label)
        for gpu, pid, name, used, share in rows:
            name = visible(name)  # any process can name itself, controls and all
            if len(name) > name_w:
                name = name[: name_w - 1] + "…"
            table.add_row(gpu, pid, cell(name), Text(used, justify="right"),
                          Text(share, justify="right"))
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def _table_title(self, rows: list[Any]) -> Text:
        text = Text("GPU memory by process", style="bold")
        st = model.source_status(self.store, SourceName.GPU, now=self.clock())
        if self.store.data(SourceName.GPU) is None:
            text.append(" · no GPU reading yet", style="dim")
        elif not rows:
            text.append(" · no process holds GPU memory", style="dim")
        if st.status not in ("ok", "starting", "none"):
            age = st.last_good_age_s
            text.append(f" · {visible(st.message)}"
                        + ("" if age is None else f" (as of {age:.0f} s ago)"),
                        style="yellow")
        return text

    # ------------------------------------------------------------------ keys
    @property
    def window_s(self) -> float:
        return self.charts.window_s

    def action_zoom(self, step: int) -> None:
        i = self.windows.index(self.window_s) + step
        self.charts.window_s = self.windows[max(0, min(len(self.windows) - 1, i))]
        self.redraw()

    def action_close(self) -> None:
        self.dismiss()
