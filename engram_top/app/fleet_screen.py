"""The fleet screen: one row per node that Prometheus reports, sortable and filtered, with a
node's detail on Enter and the placements compared across nodes on `c`."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from collectors import GIB, gib, percent, tokens, visible
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.footer import KeyFooter
from engram_top.app.node_screen import NodeScreen
from engram_top.app.process_end import EndsAsTheProcess
from engram_top.app.repaint import RepaintsRows
from engram_top.app.safe import SafeOutput, safe
from engram_top.app.sessions import FleetView
from engram_top.app.terminal import SurvivesHangUp
from engram_top.fleet import FLEET_METRICS, UNREAD, FleetRow, fleet_results
from engram_top.model import RunStore

DASH = "–"


def _ms(v: float | None) -> str:
    return DASH if v is None else f"{v * 1000:,.0f}"


def _pair(a: str, b: str) -> str:
    return f"{a}/{b}"


def _hbm(r: FleetRow) -> str:
    if r.hbm_min is None or r.hbm_max is None:
        return DASH
    lo, hi = r.hbm_min / GIB, r.hbm_max / GIB
    return f"{hi:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}–{hi:.1f}"


def _kv(r: FleetRow) -> str:
    if r.kv_usage is None:
        return DASH
    if r.kv_swa is None:
        return percent(r.kv_usage, 0)
    return f"{percent(r.kv_full or r.kv_usage, 0)}/{percent(r.kv_swa, 0)}"


FIT_MARKS = ("✓", "~", "✗")  # fits, in part, does not (the agent's fit_level)


def _fits(r: FleetRow) -> str:
    """The node's agent's scenarios that would not fit whole (✗ not, ~ in part); else how
    many fit."""
    if r.agent is None or not r.agent.fits:
        return DASH
    short = [f"{FIT_MARKS[f.level]} {f.scenario}" for f in r.agent.fits if f.level]
    return " ".join(short) if short else f"all {len(r.agent.fits)} fit"


def _fit_sort(r: FleetRow) -> tuple[int, int]:
    levels = [f.level for f in r.agent.fits if f.level is not None] if r.agent else []
    return (sum(1 for v in levels if v == 2), sum(1 for v in levels if v == 1))


def _numa(r: FleetRow) -> str:
    if r.agent is None or not r.agent.numa_free:
        return DASH
    return "/".join(gib(b, 0) for _, b in r.agent.numa_free)


def _unexplained(r: FleetRow) -> str:
    most = r.agent.unexplained_max if r.agent is not None else None
    return DASH if most is None else gib(most, 1)


# (key, heading, width, text of a row, sort key, shown from this terminal width on)
Column = tuple[str, str, int, Callable[[FleetRow], str], Callable[[FleetRow], Any], int]
COLUMNS: tuple[Column, ...] = (
    ("node", "node", 9, lambda r: r.node, lambda r: r.node, 0),
    ("placement", "placement", 13, lambda r: r.placement, lambda r: r.placement, 0),
    ("state", "state", 9, lambda r: r.state, lambda r: r.state, 0),
    ("hbm", "HBM/GPU GiB", 11, _hbm, lambda r: r.hbm_max or 0, 0),
    ("kv", "KV full/SWA", 11, _kv, lambda r: r.kv_usage or 0, 0),
    ("kvcap", "KV cap", 7, lambda r: tokens(r.kv_tokens), lambda r: r.kv_tokens or 0, 150),
    ("host", "host used/free GiB", 18,
     lambda r: _pair(gib(r.host_used, 0), gib(r.host_available, 0)),
     lambda r: r.host_available_pct if r.host_available_pct is not None else 101, 0),
    ("ttft", "TTFT p50/p99 ms", 15, lambda r: _pair(_ms(r.ttft_p50), _ms(r.ttft_p99)),
     lambda r: r.ttft_p99 or 0, 120),
    ("tpot", "TPOT p50/p99 ms", 15, lambda r: _pair(_ms(r.tpot_p50), _ms(r.tpot_p99)),
     lambda r: r.tpot_p99 or 0, 135),
    ("tok", "out tok/s", 9, lambda r: DASH if r.output_tok_s is None else f"{r.output_tok_s:,.0f}",
     lambda r: r.output_tok_s or 0, 110),
    ("energy", "J/tok", 6, lambda r: DASH if r.joules_per_token is None
     else f"{r.joules_per_token:.1f}", lambda r: r.joules_per_token or 0, 165),
    # An engram-top agent's figures, where the node runs one.
    ("fits", "fits (agent)", 20, _fits, _fit_sort, 185),
    ("numa", "NUMA free GiB", 13, _numa,
     lambda r: (r.agent.numa_free_min if r.agent else None) or 0, 200),
    ("unexpl", "HBM unexpl.", 11, _unexplained,
     lambda r: (r.agent.unexplained_max if r.agent else None) or 0, 215),
    ("alerts", "alerts", 24, lambda r: ", ".join(r.alerts + r.missing[:1]) or "",
     lambda r: (-len(r.alerts), r.node), 0),
)


def columns_for(width: int) -> list[Column]:
    return [c for c in COLUMNS if width >= c[5]]


class FleetApp(EndsAsTheProcess, SurvivesHangUp, SafeOutput, RepaintsRows, App[int]):
    """The fleet's rows over a fleet session (FleetView); a node's detail on Enter, the
    placements compared on `c`. It ends as the dashboard does (process_end)."""

    TITLE = "engram-top fleet"
    CSS_PATH = "app.tcss"  # the dashboard's panels and history screen, for a node's detail
    CSS = """
    #fleet-header { height: auto; padding: 0 1; }
    #fleet { height: 1fr; }
    #filter { dock: bottom; display: none; }
    #filter.-shown { display: block; }
    #node-head { height: 1; padding: 0 1; background: $panel; }
    #node-foot { height: auto; max-height: 4; padding: 0 1; }
    """
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("enter", "detail", "Node", priority=True),
        Binding("o", "sort", "Sort"),
        Binding("r", "reverse", "Reverse"),
        Binding("slash", "filter", "Filter", key_display="/"),
        Binding("c", "compare", "Compare"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    session: FleetView

    def __init__(self, session: FleetView, *, own_process: bool = False,
                 borrowed: bool = False) -> None:
        super().__init__()
        self.session = session
        self.own_process = own_process
        # A session someone else polls and closes (a headless snapshot's): drawn, not run.
        self.borrowed = borrowed
        self.sort_key = "node"
        self.descending = False
        self.filter_text = ""
        self.crash: BaseException | None = None
        self.stopped_by: signal.Signals | None = None
        self._shown: list[str] = []
        self._drawn: tuple[Any, ...] | None = None
        self._every_rows: tuple[tuple[int, int], list[FleetRow]] | None = None
        self._row_cells: dict[str, tuple[tuple[Any, ...], tuple[Text, ...]]] = {}
        self._filter_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-header")
        yield DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="filter: words, or column=value (placement=host state=stale)",
                    id="filter")
        yield KeyFooter()

    async def on_mount(self) -> None:
        self._begin_as_the_process()
        if not self.borrowed:
            self.session.on_poll = self.refresh_fleet
            await self.session.start()
        # Between polls only ages change: a row turns stale, the header's age goes on (in
        # whole seconds: a redraw of two thousand rows is no thing to do more often).
        self.set_interval(max(1.0, self.session.interval), self.refresh_fleet)
        self.refresh_fleet()

    # ------------------------------------------------------------------ drawing
    def rows(self, every: list[FleetRow] | None = None) -> list[FleetRow]:
        every = self.session.rows() if every is None else every
        rows = [r for r in every if r.matches(self.filter_text)]
        key = next(c[4] for c in COLUMNS if c[0] == self.sort_key)
        return sorted(rows, key=key, reverse=self.descending)

    def refresh_fleet(self) -> None:
        # Polls and ticks come only once mounted (on_mount sets them up). No is_mounted test:
        # an App's is_mounted is a method (of a widget), always true as a test.
        with contextlib.suppress(NoMatches):  # a tick during teardown: nothing to draw on
            self._draw()

    def _every(self) -> list[FleetRow]:
        """Every node's row, once a refresh and once a second at most (a row's age counts in
        whole seconds): a key that only sorts or filters takes them as they are."""
        when = (self.session.polls, int(self.session.clock()))
        if self._every_rows is None or self._every_rows[0] != when:
            self._every_rows = (when, self.session.rows())
        return self._every_rows[1]

    def _cells(self, cols: list[Column], r: FleetRow) -> tuple[Text, ...]:
        """A row's cells, looked at again only when its figures, state or alerts changed (its
        figures are those of one answer: the time they were read names them); even then a
        cell is made again only when its words or style changed, so that a refresh of 2,000
        nodes builds the few cells that moved and the table's diff finds the rest by identity."""
        entry = self.session.nodes.get(r.node)
        key = (tuple(c[0] for c in cols), entry[0] if entry else None, r.state, r.alerts)
        hit = self._row_cells.get(r.node)
        if hit is not None and hit[0] == key:
            return hit[1]
        old = dict(zip(hit[0][0], hit[1], strict=True)) if hit is not None else {}
        cells = []
        for c in cols:
            words, style = self._words(c, r)
            cell = old.get(c[0])
            if cell is None or cell.plain != words or cell.style != style:
                cell = Text(words, style=style, no_wrap=True, overflow="ellipsis")
            cells.append(cell)
        self._row_cells[r.node] = (key, tuple(cells))
        return tuple(cells)

    def _draw(self) -> None:
        every = self._every()  # the header and the table share it
        # The header quotes Prometheus (its errors, odd values): no control goes through.
        self.query_one("#fleet-header", Static).update(safe(self.header(every), "\n"))
        table = self.query_one("#fleet", DataTable)
        cols = columns_for(self.size.width)
        rows = self.rows(every)
        cells = [self._cells(cols, r) for r in rows]
        drawn = (tuple(c[0] for c in cols), tuple(cells), self.sort_key, self.descending)
        if drawn == self._drawn:
            return
        previous, self._drawn = self._drawn, drawn
        if previous is not None and previous[0] == drawn[0] and previous[2:] == drawn[2:] \
                and [r.node for r in rows] == self._shown:
            # The same rows in the same order: only the cells that changed are redrawn
            # (rebuilding 128 rows of a DataTable is most of a refresh's cost).
            for r, old, new in zip(rows, previous[1], cells, strict=True):
                for c, a, b in zip(cols, old, new, strict=True):
                    if a != b:
                        table.update_cell(r.node, c[0], b)
            return
        keep = table.cursor_row
        table.clear(columns=True)
        widths = [max(c[2], len(c[1]) + 2) for c in cols]
        # The last column (alerts) takes what the others leave, so no row scrolls sideways:
        # each column has 2 cells of padding, and the vertical scrollbar takes 2.
        widths[-1] = max(12, self.size.width - sum(w + 2 for w in widths[:-1]) - 4)
        for c, width in zip(cols, widths, strict=True):
            mark = (" ▼" if self.descending else " ▲") if c[0] == self.sort_key else ""
            table.add_column(c[1] + mark, key=c[0], width=width)
        for r, row_cells in zip(rows, cells, strict=True):
            table.add_row(*row_cells, key=r.node)
        self._shown = [r.node for r in rows]
        if rows:
            table.move_cursor(row=min(keep, len(rows) - 1))

    @staticmethod
    def _words(c: Column, r: FleetRow) -> tuple[str, str]:
        """A cell's words and style."""
        style = ""
        if c[0] == "alerts" and r.alerts:
            style = "bold red" if "server silent" in r.alerts else "bold yellow"
        elif (c[0] == "alerts" and r.missing
              or c[0] == "state" and r.state in UNREAD):
            style = "yellow"
        elif c[0] == "placement" and r.placement_inferred:
            style = "dim"
        # Node, placement and alerts are Prometheus labels: shown, never sent on.
        return visible(c[3](r)), style

    def header(self, rows: list[FleetRow]) -> Text:
        s = self.session
        t = Text()
        t.append("engram-top fleet", style="bold")
        t.append(f"  ·  {visible(s.url)}")
        if s.credential:  # which credential is sent: a 401 then reads as what it is
            t.append(f" ({visible(s.credential)})", style="dim")
        t.append("  ·  ")
        shown = sum(1 for r in rows if r.matches(self.filter_text))
        t.append(f"{len(rows)} nodes" + (f", {shown} shown" if self.filter_text else ""))
        alerts = sum(1 for r in rows if r.alerts)
        if alerts:
            t.append(f"  ·  {alerts} with alerts", style="bold yellow")
        status = s.status
        if status is None:
            t.append("\nasking Prometheus…", style="dim")
        elif not status.ok:
            since = status.failing_since or status.at
            t.append(f"\n{visible(status.message)}", style="bold red")
            wall = time.time() - (time.monotonic() - since)
            kept = ""
            if rows:
                newest = max(at for at, _ in s.nodes.values())
                kept = (f"; the figures below are the last it gave, "
                        f"{max(0.0, s.clock() - newest):.0f} s old")
            t.append(f"  (since {time.strftime('%H:%M:%S', time.localtime(wall))}{kept})",
                     style="red")
        else:
            st = s.prom_status()
            assert st is not None
            read = time.strftime("%H:%M:%S", time.localtime(status.wall))
            t.append(f"\nread at {read}  ·  {st.series} series "
                     f"in {st.query_ms:.0f} ms  ·  every {s.interval:g} s", style="dim")
            if st.odd:
                t.append(f"  ·  {st.odd} odd values left out, first: {st.odd_first}",
                         style="yellow")
        if self.filter_text:
            t.append(f"  ·  filter: {self.filter_text}", style="bold")
        return t

    # ------------------------------------------------------------------ actions
    def action_sort(self) -> None:
        keys = [c[0] for c in columns_for(self.size.width)]
        i = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_key = keys[(i + 1) % len(keys)]
        self.refresh_fleet()

    def action_reverse(self) -> None:
        self.descending = not self.descending
        self.refresh_fleet()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key == self.sort_key:
            self.descending = not self.descending
        self.sort_key = key
        self.refresh_fleet()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("-shown")
        box.value = self.filter_text
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        # Once the typing pauses: each key's redraw of a big fleet would queue behind the last.
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._filter_timer = self.set_timer(0.15, self.refresh_fleet)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#fleet", DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.filter_text = ""
        self.query_one("#fleet", DataTable).focus()
        self.refresh_fleet()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Enter in the filter box submits it; on a screen above this one it is that screen's.
        if action == "detail":
            return len(self.screen_stack) == 1 and not isinstance(self.focused, Input)
        if action in ("sort", "reverse", "filter", "compare", "clear_filter"):
            return len(self.screen_stack) == 1  # the table's keys, not a node's detail's
        return True

    def action_detail(self) -> None:
        table = self.query_one("#fleet", DataTable)
        if self._shown and 0 <= table.cursor_row < len(self._shown):
            self.push_screen(NodeScreen(self.session, self._shown[table.cursor_row]))

    def action_compare(self) -> None:
        runs = fleet_results(self.rows())
        if not runs:
            self.notify("no serving node to compare yet", severity="warning")
            return
        self.push_screen(CompareScreen(RunStore(), extra=runs, metrics=FLEET_METRICS))

    async def action_quit(self) -> None:
        await self.close_session()
        self.exit(0)


async def render_svg(session: FleetView, size: tuple[int, int] = (160, 48)) -> str:
    """The fleet screen as it draws the session now, as SVG (the session is not touched)."""
    app = FleetApp(session, borrowed=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_fleet()
        await pilot.pause()
        return app.export_screenshot()
