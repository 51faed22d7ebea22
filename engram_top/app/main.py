"""The Textual dashboard. It reads the session's store twice a second and redraws only the
panels whose sources changed; the session does all I/O."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import termios
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.markup import escape as escape_markup
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, RichLog, Static

from collectors.safetext import visible
from collectors.units import seconds, tokens, weights_gb
from engram_top.alerts.monitor import AlertChange
from engram_top.app import panels
from engram_top.app.history_screen import Charts, ChartView, HistoryScreen
from engram_top.app.keymap import keep_a_quit_key
from engram_top.app.panel import Panel, text_key
from engram_top.app.safe import SafeOutput, cell, safe
from engram_top.app.terminal import SurvivesHangUp
from engram_top.model import facts
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from engram_top.seed import reference
from engram_top.settings.user_config import UserConfig

if TYPE_CHECKING:  # loaded when used: each costs the first frame tens of milliseconds
    from engram_top.compare.comparison import RunResult
    from engram_top.export import snapshot
    from engram_top.probe.report import ProbeReport
    from engram_top.record.replay import ReplaySession

# The screen follows the readings: redrawn as often as the sources are polled (every 1 s
# by default), and at most twice a second for a faster poll. Keys redraw at once.
REFRESH_S = 0.5
REFRESH_MAX_S = 1.0
MIN_COLS, MIN_ROWS = 100, 30  # the smallest terminal every panel fits whole
SCENARIO_COLUMNS = (("scenario", 16), ("state", 12), ("ready", 8), ("KV tokens", 10),
                    ("weights GB", 11), ("host Δ", 11))
WIDE_LIST_COLS = 130  # from this width the scenario list shows weights and host Δ too
# The trend strip's two minutes over its ~70 dot columns (160 columns wide): a column is
# about 1.7 s, so a redraw every 2 s moves it by one column, never less.
CHART_EVERY_S = 2.0
TREND_CHARTS = ("hbm", "kv", "ttft", "rx")
TREND_WINDOW_S = 120.0
# Textual's own palette entries cover quitting; the rest of our keys get one each.
_NOT_IN_PALETTE = {"quit"}
# Palette titles where the key's own label would read as one of Textual's commands ("Keys").
_PALETTE_TITLES = {"help": "Help: keys and panels"}
_PALETTE_HELP = {
    "start_selected": "start the highlighted scenario, or switch to it",
    "stop": "stop the server this dashboard started",
    "compare": "every scenario's runs side by side against a baseline",
    "help": "the keys, generated from the bindings in force",
    "history": "plots of HBM, KV, host RAM, latency and PCIe per GPU; GPU memory by process",
    "snapshot": "write the screen, readings, series and comparison to a folder under "
                "snapshots/ (secrets redacted)",
}


class Session(Protocol):
    store: RunStore

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    def close_now(self) -> None: ...


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


def _replay_line(replay: ReplaySession) -> tuple[Text, Text]:
    def clock(seconds: float) -> str:
        minutes, secs = divmod(int(seconds), 60)
        if minutes < 60:
            return f"{minutes:02d}:{secs:02d}"
        return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"  # a long session: H:MM:SS

    state = "▶" if replay.playing else "⏸"
    read = replay.read_fraction
    # Blanks end a run rather than start one (some SVG viewers drop a leading blank).
    return (Text.assemble((f" REPLAY {state} ", "bold reverse"),
                          f" {clock(replay.position)}/{clock(replay.duration)} "
                          f"×{replay.speed:g} ",
                          (f"reading {read:.0%} ", "dim") if read < 1 else ""),
            Text(visible(replay.path.name), style="dim"))


class EngramTopApp(SurvivesHangUp, SafeOutput, App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "engram-top"
    # Classes the stylesheet lays out by: 100x30 is the smallest supported terminal.
    # Below 100x30 (MIN_COLS x MIN_ROWS) the panels cannot show every GPU: the screen says
    # so instead (-cramped, -low), rather than hide a GPU or clip a figure.
    HORIZONTAL_BREAKPOINTS = [(0, "-cramped"), (MIN_COLS, "-narrow"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-low"), (MIN_ROWS, "-short"), (48, "-tall")]
    replay: ReplaySession | None = None  # check_action runs before __init__ ends
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("enter", "start_selected", "Start/switch", id="start", priority=True),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("c", "compare", "Compare", id="compare"),
        Binding("h", "history", "History", id="history"),
        Binding("s", "snapshot", "Snapshot", id="snapshot"),
        *[Binding(str(n), f"scenario({n})", f"Scenario {n}", show=False, id=f"scenario-{n}")
          for n in range(1, 10)],
        Binding("question_mark", "help", "Keys", key_display="?", id="help"),
        # A replay's controls; check_action hides them (and the server keys) by session kind.
        Binding("space", "replay_toggle", "Play/pause", id="replay-toggle"),
        # Not the arrows: the scenario list and the palette's input need those.
        Binding("comma", "replay_seek(-10)", "-10 s", key_display=",", id="replay-back"),
        Binding("full_stop", "replay_seek(10)", "+10 s", key_display=".", id="replay-forward"),
        Binding("less_than_sign", "replay_seek(-60)", "-1 min", key_display="<", show=False,
                id="replay-back-more"),
        Binding("greater_than_sign", "replay_seek(60)", "+1 min", key_display=">", show=False,
                id="replay-forward-more"),
        Binding("0", "replay_to(0)", "To the start", show=False, id="replay-start"),
        Binding("minus", "replay_speed(0.5)", "Slower", key_display="-", id="replay-slower"),
        Binding("plus,equals_sign", "replay_speed(2)", "Faster", key_display="+",
                id="replay-faster"),
    ]

    def __init__(self, session: Session, *, clock: Callable[[], float] | None = None,
                 compare_with: Sequence[RunResult] = (),
                 price_per_gpu_hour: float | None = None,
                 config: UserConfig | None = None, config_error: str | None = None,
                 snapshot_dir: Path = Path("snapshots"), own_process: bool = False,
                 probe: ProbeReport | None = None) -> None:
        super().__init__()
        # The dashboard is the process (the CLI): SIGTERM, SIGHUP and SIGINT quit it as `q`
        # does, and a crash's traceback is the CLI's to file, not the terminal's to show.
        self.own_process = own_process
        self.crash: BaseException | None = None
        self.stopped_by: signal.Signals | None = None
        self.snapshot_dir = snapshot_dir
        self.config = config or UserConfig()
        self.reference = reference.default()  # the seed: the comparison's reference column
        self.config_error = config_error
        # A session that plays a recording says so (and gets the replay's keys).
        self.replay = session if getattr(session, "is_replay", False) else None
        self.session = session
        if config is not None:  # the user's thresholds, for the alerts the session raises
            session.alerts.configure(config.alerts)
            if hasattr(session, "slos"):  # the demo load's requests are held to these
                session.slos = config.slos
        if clock is not None:  # one "now" for the header and the panels' ages
            session.store.clock = clock
        self.clock = session.store.clock
        self.compare_with = list(compare_with)  # runs loaded from files, for the comparison
        self.compare_probe = probe  # --probe: predictions, a column of the comparison
        self.price_per_gpu_hour = price_per_gpu_hour
        self._closed = False
        self._scenario_columns = 0  # how many of SCENARIO_COLUMNS the list shows
        self._laid_out = False
        self._rows: tuple[tuple[str, ...], ...] = ()
        self._shown: dict[str, object] = {}  # what a fixed-size line shows now, by widget id

    def compose(self) -> ComposeResult:
        yield Static(id="too-small")
        yield Static(id="header")
        with Grid(id="grid"):
            yield Panel("HBM per GPU", panels.hbm_panel, ("gpu", "host", "server", "run"),
                        id="hbm")
            yield Panel("KV pool", panels.kv_panel, ("server", "run"), id="kv")
            yield Panel("Host RAM", panels.host_panel, ("host", "run"), id="host")
            yield Panel("Latency", panels.latency_panel, ("server",), id="latency")
        # Shown only on a large terminal (app.tcss): the last two minutes at a glance.
        trends = Charts(self.session.store, self.clock, TREND_WINDOW_S)
        with Horizontal(id="trends"):
            for key in TREND_CHARTS:
                yield ChartView(partial(trends.draw, key), id=f"trend-{key}")
        with Horizontal(id="bottom"):
            # No cell padding: each column's width leaves its own gap, and the six columns
            # fit in 72 cells, so a 100-column terminal shows them all without scrolling.
            yield DataTable(id="scenarios", cursor_type="row", zebra_stripes=True,
                            cell_padding=0)
            yield RichLog(id="log", max_lines=500, wrap=False, markup=False)
        yield Static(id="events")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#scenarios", DataTable)
        self._lay_out_scenarios(self.size.width)
        self._notice(self.size.width, self.size.height)
        self._laid_out = True
        table.border_title = "Scenarios"
        self.query_one("#log", RichLog).border_title = "Server log"
        # Found once: walking the DOM for them twice a second is a cost of its own.
        self._panels = list(self.query(Panel))
        self._charts = list(self.query(ChartView))
        self._trends = self.query_one("#trends")
        self._charted: tuple[int, ...] | None = None
        self._charted_at = 0.0
        self._log_source: object = None
        self._log_last: object = None  # the last log entry written to the pane
        table.focus()
        self.session.alerts.listeners.append(self._alert_changed)
        self._apply_config()
        if self.own_process:
            self._handle_signals(True)
        self.start_session()
        poll_s = getattr(getattr(self.session, "options", None), "poll_interval", REFRESH_S)
        self.set_interval(min(REFRESH_MAX_S, max(REFRESH_S, poll_s)), self.refresh_panels)
        self.refresh_panels()

    def _apply_config(self) -> None:
        """Theme and key remaps from the user's config; a bad entry is reported and skipped,
        never fatal."""
        problems = [self.config_error] if self.config_error else []
        where = str(self.config.path or "config")
        theme = self.config.theme
        if theme is not None:
            if theme in self.available_themes:
                self.theme = theme
            else:
                problems.append(f"{where}: theme: unknown theme {theme!r} (known: "
                                f"{', '.join(sorted(self.available_themes))})")
        ids = {b.id for b in self.BINDINGS if isinstance(b, Binding) and b.id}
        keymap = {}
        for binding_id, keys in self.config.keys.items():
            if binding_id in ids:
                keymap[binding_id] = keys
            else:
                problems.append(f"{where}: keys.{binding_id}: no such action (known: "
                                f"{', '.join(sorted(ids))})")
        problems += keep_a_quit_key(keymap, self.BINDINGS, where)
        if keymap:
            self.set_keymap(keymap)
        for problem in problems:
            self.session.store.event("error", f"config: {problem}")
            self.notify(problem, title="config", severity="error", timeout=20)

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
        try:
            self._refresh_panels()
        except NoMatches:
            # The timer outlived the widgets: the app is being torn down without our quit
            # (a test harness leaving run_test, a signal). Nothing left to refresh.
            if self.query("#header"):
                raise  # the dashboard is still here: a real bug, not the teardown

    def _refresh_panels(self) -> None:
        store = self.session.store
        with self.batch_update():
            head = panels.header(store, self.clock(), width=self.size.width - 2,
                                 lead=_replay_line(self.replay) if self.replay else None)
            self._show("#header", head)
            for panel in self._panels:
                panel.refresh_from(store)
            self._refresh_scenarios(store)
            self._refresh_log(store.run)
            if self._trends.display:
                # Redrawn when a reading came, at most every CHART_EVERY_S: between readings
                # nothing on them moves, and a dot column of the strip is longer than that.
                charted = store.version("gpu", "server")
                now = time.monotonic()
                if charted != self._charted and now - self._charted_at >= CHART_EVERY_S:
                    self._charted, self._charted_at = charted, now
                    for view in self._charts:
                        view.redraw()
            self._show("#events", self._events(store))

    def on_resize(self, event: events.Resize) -> None:
        if self._closed or not self._laid_out:
            return  # before on_mount (its own layout comes then), or tearing down
        self._notice(event.size.width, event.size.height)
        self._lay_out_scenarios(event.size.width)

    def _lay_out_scenarios(self, cols: int) -> None:
        """The scenario list's columns: all six from WIDE_LIST_COLS, else the four that
        decide a placement, so that a 100-column terminal's log pane keeps room for its
        lines (weights and host Δ are in the panels and the comparison)."""
        columns = SCENARIO_COLUMNS if cols >= WIDE_LIST_COLS else SCENARIO_COLUMNS[:4]
        if len(columns) == self._scenario_columns:
            return
        self._scenario_columns = len(columns)
        table = self.query_one("#scenarios", DataTable)
        table.clear(columns=True)
        for label, width in columns:
            table.add_column(label, width=width)
        # Its own width: the columns, a border each side, a scroll bar.
        table.styles.width = sum(width for _, width in columns) + 4
        self._rows = ()  # filled again at the next refresh

    def _notice(self, cols: int, rows: int) -> None:
        """Below 100x30 the screen says what it needs, rather than hide a GPU."""
        if cols >= MIN_COLS and rows >= MIN_ROWS:
            return
        self._show("#too-small", Text.assemble(
            (f"This terminal is {cols}x{rows}.", "bold"), "\n\n",
            f"engram-top needs at least {MIN_COLS}x{MIN_ROWS} to show every GPU and every "
            "panel whole.\nWiden the window or use a smaller font; ",
            ("q", "bold cyan"), " quits, ", ("?", "bold cyan"), " lists the keys."))

    def _show(self, selector: str, content: Text) -> None:
        """A line of fixed height (header, events) given new content only when it differs:
        the same text again costs no repaint."""
        content = safe(content, "\n")  # names, messages and files quoted in it
        key = text_key(content)
        if self._shown.get(selector) != key:
            self._shown[selector] = key
            self.query_one(selector, Static).update(content, layout=False)

    def _alert_changed(self, change: AlertChange) -> None:
        """The session raised or cleared an alert: a raised one is toasted."""
        if change.change == "raised":
            self.notify(change.alert.message, title="alert",
                        severity="error" if change.alert.severity == "error" else "warning",
                        timeout=10)

    # ------------------------------------------------------------------ scenario list
    def _scenario_names(self) -> list[str]:
        store = self.session.store
        names = list(store.scenarios.scenarios) if store.scenarios is not None else []
        return names + [n for n in store.history if n not in names]

    def _refresh_scenarios(self, store: RunStore) -> None:
        rows = []
        for name in self._scenario_names():
            f: RunFacts | None = store.history.get(name)
            r = f.results if f else RunFigures()
            current = store.run is not None and f is store.run
            state = "–" if f is None else (f.state if f.state != "starting"
                                           else f"▸ {panels.PHASE_SHORT.get(f.phase, f.phase)}")
            # The live run's is the Host RAM panel's own figure, written the same way.
            delta = panels.host_delta(facts.run_host_delta_bytes(store, f))
            row = (("▶ " if current else "  ") + name, state,
                   seconds(r.ready_s), tokens(r.kv_tokens), weights_gb(r.weights_gb), delta)
            rows.append(row[:self._scenario_columns])
        if tuple(rows) == self._rows:
            return
        table = self.query_one("#scenarios", DataTable)
        cursor = table.cursor_row
        table.clear()
        for row in rows:
            table.add_row(*(cell(c) for c in row))  # scenario names come from a file
        self._rows = tuple(rows)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def _selected(self) -> str | None:
        names = self._scenario_names()
        row = self.query_one("#scenarios", DataTable).cursor_row
        return names[row] if 0 <= row < len(names) else None

    # ------------------------------------------------------------------ log pane
    def _refresh_log(self, run: RunFacts | None) -> None:
        log = self.query_one("#log", RichLog)
        lines = run.log_lines if run is not None else None
        if lines is not self._log_source:
            self._log_source, self._log_last = lines, None
            log.clear()
            if run is not None and run.log_path:
                log.write(safe(Text(f"── {run.scenario}: {run.log_path}", style="dim")))
        if not lines:
            return
        # What came after the last entry written, found by identity from the end: the
        # supervisor appends to this bounded deque on its own schedule, so no counter kept
        # beside it (RunFacts.lines_seen lags it) can say where the new lines start.
        recent = list(lines)
        start = 0
        for i in range(len(recent) - 1, -1, -1):
            if recent[i] is self._log_last:
                start = i + 1
                break
        if start == len(recent):
            return
        self._log_last = recent[-1]
        styles = {"error": "bold red", "warning": "yellow", "ready": "bold green"}
        for _, line in recent[start:]:
            if run is not None and facts.is_own_poll(line, run.own_polls):
                continue  # our own /health and /metrics polls: noise here, kept in the file
            style = styles.get(facts.classify_log_line(line) or "", "")
            # The server's own bytes: an ESC or a C1 in them is shown, never sent on (made
            # visible before it is a Text, which would drop BEL, BS, VT, FF and CR unseen).
            log.write(panels.log_line(visible(line, "\t"), style))

    # ------------------------------------------------------------------ control
    def _serving(self) -> str | None:
        """Why stopping now would cut off users: requests in flight, if any."""
        kv = facts.kv_facts(self.session.store)
        busy = 0 if kv is None else (kv.running or 0) + (kv.queued or 0)
        return f"{busy} requests are running or queued" if busy else None

    def action_scenario(self, number: int) -> None:
        """One key: start, or switch to, the scenario in that row of the list."""
        if not 1 <= number <= len(self._scenario_names()):
            self.notify(f"no scenario {number}", severity="warning")
            return
        self.query_one("#scenarios", DataTable).move_cursor(row=number - 1)
        self.action_start_selected()

    def action_start_selected(self) -> None:
        name = self._selected()
        store = self.session.store
        attached = store.history.get(name) if name else None
        if attached is not None and not attached.owned:
            if attached is not store.run:
                self.control("watch", name)
            return
        if name is None or store.scenarios is None or name not in store.scenarios.scenarios:
            self.notify("nothing to start here", severity="warning")
            return
        run = store.run
        running = run is not None and run.owned and run.state in ("starting", "ready")
        if running and run.scenario == name:
            self.notify(f"{name} is already {run.state}")
            return
        verb = "switch" if running else "start"
        reason = self._serving() if running else None
        if reason:
            self.push_screen(ConfirmScreen(f"Stop {run.scenario} ({reason}) and start {name}?"),
                             lambda yes: self.control(verb, name) if yes else None)
        else:
            self.control(verb, name)

    def action_stop(self) -> None:
        run = self.session.store.run
        if run is None or not run.owned or run.state not in ("starting", "ready"):
            self.notify("no server of ours is running", severity="warning")
            return
        reason = self._serving()
        if reason:
            self.push_screen(ConfirmScreen(f"Stop {run.scenario}? {reason}."),
                             lambda yes: self.control("stop", None) if yes else None)
        else:
            self.control("stop", None)

    @work(exclusive=True, group="control", exit_on_error=False)
    async def control(self, verb: str, name: str | None) -> None:
        session: Any = self.session
        try:
            if verb == "start":
                await session.start_scenario(name)
            elif verb == "watch":
                await session.attach(name)
            elif verb == "switch":
                self.notify(f"switching to {name}: stopping the current server first")
                await session.switch(name)
            else:
                await session.stop_scenario()
        except Exception as exc:  # a refused start says why; the app stays up
            self.session.store.event("error", f"{verb} failed: {exc}")
            self.notify(str(exc), title=f"{verb} failed", severity="error", timeout=15)

    def _events(self, store: RunStore) -> Text:
        """Active alerts first, then the latest events, each with its time."""
        text = Text()
        alerts = sorted(store.alerts.values(), key=lambda a: a.since)
        for alert in alerts:
            text.append(time.strftime("%H:%M:%S ", time.localtime(alert.since)), style="dim")
            style = "bold red" if alert.severity == "error" else "bold yellow"
            text.append(f"⚠ {visible(alert.message)}\n", style=style)
        events = list(store.events)[-(2 - len(alerts)):] if len(alerts) < 2 else []
        for e in events:
            style = {"error": "red", "warning": "yellow"}.get(e.level, "")
            text.append(time.strftime("%H:%M:%S ", time.localtime(e.wall)), style="dim")
            text.append(visible(e.text[:160]) + "\n", style=style)
        return text

    def action_snapshot(self) -> None:
        """The screen as it is now, with everything behind it, in a new folder. What the
        store holds is taken here, on the UI loop; the files are written on a thread, so the
        dashboard stays live through pandas, Parquet and fsync (about half a second)."""
        store = self.session.store
        options = getattr(self.session, "options", None)
        secrets = [getattr(options, "api_key", None) or ""]
        from engram_top.export import snapshot
        try:
            # Its one comparison (snapshot.json and summary.md) takes the runs loaded from
            # files and the price, as the compare screen does.
            taken = snapshot.prepare(
                self.snapshot_dir, store, self.reference, svg=self.export_screenshot(),
                compare_with=self.compare_with, price_per_gpu_hour=self.price_per_gpu_hour,
                secrets=secrets)
        except snapshot.SnapshotError as exc:
            self._snapshot_failed(exc)
            return
        self._write_snapshot(taken)

    @work(group="snapshot", exit_on_error=False)
    async def _write_snapshot(self, taken: snapshot.Prepared) -> None:
        # A thread for the files; the result is told here, on the loop. Quitting meanwhile
        # cancels this worker, not the write: Python waits for the thread before it exits.
        from engram_top.export.snapshot import SnapshotError  # loaded by action_snapshot already
        try:
            path = await asyncio.to_thread(taken.write)
        except SnapshotError as exc:  # nothing half-written; the app goes on
            self._snapshot_failed(exc)
        except Exception as exc:  # a bug must still be seen, not lost with the worker
            self._snapshot_failed(RuntimeError(f"{type(exc).__name__}: {exc}"))
        else:
            self._snapshot_written(path)

    def _snapshot_failed(self, exc: Exception) -> None:
        self.session.store.event("error", f"snapshot: {exc}")
        self.notify(str(exc), title="snapshot failed", severity="error", timeout=15)

    def _snapshot_written(self, path: Path) -> None:
        self.session.store.event("info", f"snapshot written: {path}")
        self.notify(str(path), title="snapshot written")

    # ------------------------------------------------------------------ replay
    def _applies(self, action: str) -> bool:
        """Whether an action means anything in this session: replay controls in a replay,
        and starting or stopping servers anywhere else."""
        if action.startswith("replay_"):
            return self.replay is not None
        return not (action in ("start_selected", "stop", "scenario") and self.replay is not None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self._applies(action):
            return False
        # Enter is a priority binding (the scenario table would take it otherwise); on any
        # screen above the dashboard (the command palette, a dialog) it is that screen's.
        return not (action == "start_selected" and len(self.screen_stack) > 1)

    def action_replay_toggle(self) -> None:
        if self.replay is not None:
            self.replay.toggle()
            self.refresh_panels()

    def action_replay_seek(self, seconds: float) -> None:
        if self.replay is not None:
            self.replay.seek_by(seconds)
            self.refresh_panels()

    def action_replay_to(self, position: float) -> None:
        if self.replay is not None:
            self.replay.seek(position)
            self.refresh_panels()

    def action_replay_speed(self, factor: float) -> None:
        if self.replay is not None:
            self.replay.set_speed(self.replay.speed * factor)
            self.refresh_panels()

    def action_history(self) -> None:
        self.push_screen(HistoryScreen(self.session.store, self.clock))

    def action_compare(self) -> None:
        from engram_top.app.compare_screen import CompareScreen
        self.push_screen(CompareScreen(self.session.store, extra=self.compare_with,
                                       reference=self.reference,
                                       price_per_gpu_hour=self.price_per_gpu_hour,
                                       probe=self.compare_probe))

    def action_help(self) -> None:
        """The keys in force (remaps included), the app's and the screen's; a widget's own
        cursor keys are left to the widget."""
        by_action: dict[str, tuple[list[str], str]] = {}
        for active in self.screen.active_bindings.values():
            b = active.binding
            if not b.description or b.action.startswith("scenario(") or not (
                    active.node is self or isinstance(active.node, Screen)):
                continue
            keys, _ = by_action.setdefault(b.action, ([], b.description))
            if (shown := self.get_key_display(b)) not in keys:
                keys.append(shown)
        keys = [(", ".join(k), d) for k, d in by_action.values()]
        keys.append(("1-9", "start or switch to scenario 1-9 of the list"))
        keys.append(("↑/↓, click", "select a scenario (click it again, or ⏎, to start it)"))
        self.push_screen(HelpScreen(keys))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every action of ours that applies here, once each, beside Textual's own (themes,
        keys, quit): a live dashboard lists no replay controls, a replay nothing that starts
        or stops a server."""
        titles: set[str] = set()
        for command in super().get_system_commands(screen):
            titles.add(command.title)
            yield command
        if isinstance(screen, ModalScreen):
            return  # a dialog's own keys are its commands
        for b in self.BINDINGS:
            if not isinstance(b, Binding) or not b.description or b.id in _NOT_IN_PALETTE \
                    or b.action.startswith("scenario("):
                continue
            title = _PALETTE_TITLES.get(b.action, b.description)
            if title in titles or not self._applies(b.action.split("(")[0]):
                continue
            titles.add(title)
            yield SystemCommand(title, _PALETTE_HELP.get(b.action, b.description),
                                partial(self.run_action, b.action))
        if self.replay is not None:
            return
        for name in self._scenario_names():
            shown = escape_markup(visible(name))  # the palette reads titles as markup
            yield SystemCommand(f"Start or switch to {shown}", f"stop the running server "
                                f"if any, then start {shown}",
                                partial(self._start_named, name))

    def _start_named(self, name: str) -> None:
        names = self._scenario_names()
        if name in names:
            self.query_one("#scenarios", DataTable).move_cursor(row=names.index(name))
            self.action_start_selected()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """A click on the highlighted row (the mouse's enter) starts or switches to it."""
        if event.data_table.id == "scenarios":
            self.action_start_selected()

    async def action_quit(self) -> None:
        """Stop what we started (load, server, polls), then leave."""
        self._show("#header", Text("stopping the server…", style="bold"))
        await self.close_session()
        self.exit(0)

    async def close_session(self) -> None:
        if not self._closed:
            self._closed = True
            await self.session.close()

    async def on_unmount(self) -> None:
        if self.own_process:
            self._handle_signals(False)
        await self.close_session()

    # ------------------------------------------------------------------ the process's end
    def _handle_signals(self, on: bool) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if on:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                else:
                    loop.remove_signal_handler(sig)
        with contextlib.suppress(ValueError, OSError):  # not the main thread: leave it
            if on:
                self._textual_sigcont = signal.signal(signal.SIGCONT, self._on_sigcont)
            elif self._textual_sigcont is not None:
                signal.signal(signal.SIGCONT, self._textual_sigcont)

    _textual_sigcont: Any = None

    def _on_sigcont(self, signum: int, frame: Any) -> None:
        """Textual resumes the terminal on SIGCONT (after Ctrl-Z). A terminal that closes
        sends SIGHUP and then SIGCONT: resuming a dead terminal starts a writer that dies on
        its first write, and the quit then waits on it for ever. Only a live terminal is
        resumed; the SIGHUP quits us."""
        try:
            termios.tcgetattr(sys.__stdin__.fileno())  # type: ignore[union-attr]
        except (termios.error, OSError, ValueError, AttributeError):
            return
        handler = self._textual_sigcont
        if callable(handler):
            handler(signum, frame)
            # Textual puts its own handler back as it resumes: keep ours in front of it.
            self._textual_sigcont = signal.signal(signal.SIGCONT, self._on_sigcont)

    def _on_signal(self, sig: signal.Signals) -> None:
        """Quit as `q` does: the servers we started stop, the recording closes. After a
        SIGHUP the terminal is gone; nothing here waits on it."""
        if self.stopped_by is None:
            self.stopped_by = sig
            # As a key's action runs: on the app's message loop (a worker that calls exit()
            # leaves the app waiting on itself).
            self.call_later(self.action_quit)

    def _handle_exception(self, error: Exception) -> None:
        """A bug: kept for the CLI, which files the traceback and says one line; the
        session is closed on the way out (engram_top.cli.lifetime)."""
        if self.crash is None:
            self.crash = error
        super()._handle_exception(error)
        if self.own_process:
            self._exit_renderables.clear()  # Textual would print the traceback at exit
