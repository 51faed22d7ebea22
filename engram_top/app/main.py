"""The Textual dashboard. It reads the session's store after each round of polls and redraws
only the panels whose sources changed; the session does all I/O."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static

from collectors import visible
from engram_top import model
from engram_top.alerts import AlertChange
from engram_top.app import panels
from engram_top.app.after_polls import RedrawsAfterPolls
from engram_top.app.breakpoints import set_size_classes
from engram_top.app.dialogs import ConfirmScreen
from engram_top.app.fit_dialog import FitScreen
from engram_top.app.footer import KeyFooter
from engram_top.app.history_screen import Charts, ChartView, HistoryScreen
from engram_top.app.keymap import keep_a_quit_key
from engram_top.app.palette import KeysShown
from engram_top.app.panel import Panel, text_key
from engram_top.app.process_end import EndsAsTheProcess
from engram_top.app.quitting import QuitsAsking
from engram_top.app.repaint import RepaintsRows
from engram_top.app.replay_keys import ReplayKeys, replay_line
from engram_top.app.safe import SafeOutput, safe
from engram_top.app.scenario_rows import ScenarioRows
from engram_top.app.server_log import ServerLog
from engram_top.app.sessions import DashboardSession, ReplayControls
from engram_top.app.snapshot_keys import TakesSnapshots
from engram_top.app.terminal import SurvivesHangUp
from engram_top.app.verdict_strip import VerdictStrip
from engram_top.model import UNDER_WAY, FitRefused, RunStore
from engram_top.seed import default_reference
from engram_top.settings import UserConfig

if TYPE_CHECKING:  # loaded when used: each costs the first frame tens of milliseconds
    from engram_top.compare import RunResult
    from engram_top.probe import ProbeReport

# The screen follows the readings: redrawn as often as the sources are polled (every 1 s
# by default), and at most twice a second for a faster poll. Keys redraw at once.
REFRESH_S, REFRESH_MAX_S = 0.5, 1.0
MIN_COLS, MIN_ROWS = 100, 30  # the smallest terminal every panel fits whole
# The trend strip's two minutes over its ~70 dot columns (160 columns wide): a column is
# about 1.7 s, so a redraw every 2 s moves it by one column, never less.
CHART_EVERY_S = 2.0
TREND_CHARTS = ("hbm", "kv", "ttft", "rx")
TREND_WINDOW_S = 120.0
START_KEYS = Binding.Group("Start/switch")
SEEK_KEYS = Binding.Group("±10 s")
SPEED_KEYS = Binding.Group("Speed")


class EngramTopApp(KeysShown, ReplayKeys, TakesSnapshots, QuitsAsking, EndsAsTheProcess,
                   SurvivesHangUp, SafeOutput, ScenarioRows, RepaintsRows, RedrawsAfterPolls,
                   App[int]):
    """The dashboard over one session (DashboardSession): the panels, the scenario list,
    the server log and the events line, redrawn from the session's store; its keys call the
    session (start, switch, stop, attach) or move its replay. The keys' help and palette,
    the replay's keys, the snapshot key and the process's signals are the bases' own."""

    CSS_PATH = "app.tcss"
    TITLE = "engram-top"
    # Classes the stylesheet lays out by: 100x30 is the smallest supported terminal.
    # Below 100x30 (MIN_COLS x MIN_ROWS) the panels cannot show every GPU: the screen says
    # so instead (-cramped, -low), rather than hide a GPU or clip a figure.
    HORIZONTAL_BREAKPOINTS = [(0, "-cramped"), (MIN_COLS, "-narrow"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-low"), (MIN_ROWS, "-short"), (48, "-tall")]
    replay: ReplayControls | None = None  # check_action runs before __init__ ends
    BINDINGS = [
        # Enter and the rows' numbers share a footer entry ("⏎ 1 2 3 Start/switch"): one
        # number per row of the list (check_action hides the rest), first, as the keys a
        # demo is driven by. Enter first too where the list has the focus (its own enter).
        Binding("enter", "start_selected", "Start/switch", id="start", priority=True,
                group=START_KEYS),
        *[Binding(str(n), f"scenario({n})", f"Scenario {n}", id=f"scenario-{n}",
                  group=START_KEYS) for n in range(1, 10)],
        Binding("q", "quit", "Quit", id="quit"),
        Binding("x", "stop", "Stop", id="stop"),
        Binding("c", "compare", "Compare", id="compare"),
        Binding("h", "history", "History", id="history"),
        Binding("s", "snapshot", "Snapshot", id="snapshot"),
        Binding("question_mark", "help", "Keys", key_display="?", id="help"),
        # A replay's controls; check_action hides them (and the server keys) by session kind.
        Binding("space", "replay_toggle", "Play/pause", id="replay-toggle"),
        # Not the arrows: the scenario list and the palette's input need those.
        # Paired keys share a footer entry each, so that a replay's footer fits 100 columns.
        Binding("comma", "replay_seek(-10)", "-10 s", key_display=",", id="replay-back",
                group=SEEK_KEYS),
        Binding("full_stop", "replay_seek(10)", "+10 s", key_display=".", id="replay-forward",
                group=SEEK_KEYS),
        Binding("less_than_sign", "replay_seek(-60)", "-1 min", key_display="<", show=False,
                id="replay-back-more"),
        Binding("greater_than_sign", "replay_seek(60)", "+1 min", key_display=">", show=False,
                id="replay-forward-more"),
        Binding("0", "replay_to(0)", "To the start", show=False, id="replay-start"),
        Binding("minus", "replay_speed(0.5)", "Slower", key_display="-", id="replay-slower",
                group=SPEED_KEYS),
        Binding("plus,equals_sign", "replay_speed(2)", "Faster", key_display="+",
                id="replay-faster", group=SPEED_KEYS),
    ]

    def __init__(self, session: DashboardSession, *, clock: Callable[[], float] | None = None,
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
        self.reference = default_reference()  # the seed: the comparison's reference column
        self.config_error = config_error
        # A session that plays a recording says so (and gets the replay's keys).
        self.replay = session.replay
        self.session = session
        if config is not None:  # the user's thresholds, for the alerts the session raises
            # A load's requests are held to the [slo] bounds, and so is the slo alert: the
            # config's where it says them, else the scenario file's (the session's own).
            slos = config.slos if config.slos_given else session.slos
            session.alerts.configure(config.alerts, slos)
            session.slos = slos
        if clock is not None:  # one "now" for the header and the panels' ages
            session.store.clock = clock
        self.clock = session.store.clock
        self.compare_with = list(compare_with)  # runs loaded from files, for the comparison
        self.compare_probe = probe  # --probe: predictions, a column of the comparison
        self.price_per_gpu_hour = price_per_gpu_hour
        self._laid_out = False
        self._rows: tuple[tuple[str, ...], ...] = ()
        self._shown: dict[str, object] = {}  # what a fixed-size line shows now, by widget id

    def compose(self) -> ComposeResult:
        yield Static(id="too-small")
        yield Static(id="header")
        with Grid(id="grid"):
            yield Panel("HBM per GPU", panels.hbm_panel, panels.HBM_SOURCES, id="hbm",
                        inputs=panels.hbm_inputs)
            yield Panel("KV pool", panels.kv_panel, panels.KV_SOURCES, id="kv")
            yield Panel("Host RAM", panels.host_panel, panels.HOST_SOURCES, id="host")
            yield Panel("Latency", panels.latency_panel, panels.LATENCY_SOURCES, id="latency")
        # Shown only on a large terminal (app.tcss): the last two minutes at a glance.
        trends = Charts(self.session.store, self.clock, TREND_WINDOW_S)
        with Horizontal(id="trends"):
            for key in TREND_CHARTS:
                yield ChartView(partial(trends.draw, key), id=f"trend-{key}")
        with Horizontal(id="bottom"):
            # No cell padding: each column's width leaves its own gap (scenario_rows).
            yield DataTable(id="scenarios", cursor_type="row", zebra_stripes=True,
                            cell_padding=0)
            yield ServerLog(id="log", max_lines=500, wrap=False, markup=False)
        yield VerdictStrip(id="verdict")
        yield Static(id="events")
        yield KeyFooter(compact=True)  # one blank between keys: a replay's fit 100 columns

    def on_mount(self) -> None:
        set_size_classes(self)  # before the first layout, not after the first frame
        table = self.query_one("#scenarios", DataTable)
        self._lay_out_scenarios()
        self._notice(self.size.width, self.size.height)
        self._laid_out = True
        table.border_title = "Scenarios"
        # Not _log: App._log is Textual's logging callable (textual.log, `textual console`).
        self._server_log = self.query_one("#log", ServerLog)
        self._server_log.border_title = "Server log"
        # Found once: walking the DOM for them twice a second is a cost of its own.
        self._panels = list(self.query(Panel))
        self._charts = list(self.query(ChartView))
        self._trends = self.query_one("#trends")
        self._charted: tuple[int, ...] | None = None
        self._charted_at = 0.0
        table.focus()
        self.session.alerts.listeners.append(self._alert_changed)
        self._apply_config()
        self._begin_as_the_process()
        self.start_session()
        poll_s = self.session.poll_interval
        self.redraw_after_polls(min(REFRESH_MAX_S, max(REFRESH_S, poll_s)))
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
            self.refresh_panels()  # what it brought (the node, a row) now, not a second on
            self._after_start()
        except FitRefused as exc:  # the session is up; its first start waits for the answer
            self._refused("start", exc)
        except Exception as exc:  # shown, and the app stays up so the user can read it
            self.session.store.event("error", f"could not start: {type(exc).__name__}: {exc}")
            self.notify(f"could not start: {exc}", severity="error", timeout=15)

    def refresh_panels(self) -> None:
        if self._session_closed:
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
                                 lead=replay_line(self.replay) if self.replay else None)
            self._show("#header", head)
            for panel in self._panels:
                panel.refresh_from(store)
            self._refresh_scenarios(store)
            self._server_log.show(store.run)
            if self._trends.display:
                # Redrawn when a reading came, at most every CHART_EVERY_S: between readings
                # nothing on them moves, and a dot column of the strip is longer than that.
                charted = store.version(model.SourceName.GPU, model.SourceName.SERVER)
                now = time.monotonic()
                # (0.9: the redraws come on the polls' grid, 1 s apart give or take a ms.)
                if charted != self._charted and now - self._charted_at >= CHART_EVERY_S * 0.9:
                    self._charted, self._charted_at = charted, now
                    for view in self._charts:
                        view.redraw()
            self.query_one(VerdictStrip).refresh_from(store, self.compare_with)
            self._show("#events", self._events(store))

    def on_resize(self, event: events.Resize) -> None:
        if self._session_closed or not self._laid_out:
            return  # before on_mount (its own layout comes then), or tearing down
        self._notice(event.size.width, event.size.height)

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
        """The session raised or cleared an alert: a raised one is toasted, but a warning
        not over the compare screen (a presenter's: the demo's own load queues requests); it
        is in the header and events when that screen closes."""
        from engram_top.app.compare_screen import CompareScreen
        if change.change == "raised" and not (isinstance(self.screen, CompareScreen)
                                              and change.alert.severity != "error"):
            self.notify(change.alert.message, title="alert",
                        severity="error" if change.alert.severity == "error" else "warning",
                        timeout=10)

    # ------------------------------------------------------------------ control
    def _serving(self) -> str | None:
        """Why stopping now would cut off users: other clients' requests in flight, if any
        (this dashboard's own load never asks: model.in_flight)."""
        return model.why_ask(self.session.store)

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
        if name is not None and name in self.session.attaching:
            self.notify(f"{name}: still attaching")
            return
        if name is None or store.scenarios is None or name not in store.scenarios.scenarios:
            self.notify("nothing to start here", severity="warning")
            return
        run = store.run
        running = run if run is not None and run.owned and run.state in UNDER_WAY \
            else None
        if running is not None and running.scenario == name:
            self.notify(f"{name} is already {running.state}")
            return
        verb = "switch" if running is not None else "start"
        if running is not None and (reason := self._serving()):
            self.push_screen(
                ConfirmScreen(f"Stop {running.scenario} ({reason}) and start {name}?"),
                lambda yes: self._control_if(yes, verb, name))
        else:
            self.control(verb, name)

    def action_stop(self) -> None:
        run = self.session.store.run
        if run is None or not run.owned or run.state not in UNDER_WAY:
            self.notify("no server of ours is running", severity="warning")
            return
        reason = self._serving()
        if reason:
            self.push_screen(ConfirmScreen(f"Stop {run.scenario}? {reason}."),
                             lambda yes: self._control_if(yes, "stop", None))
        else:
            self.control("stop", None)

    def _control_if(self, yes: bool | None, verb: str, name: str | None,
                    force: bool = False) -> None:
        """A dialog's answer: yes runs the control, no (or escape) nothing."""
        if yes:
            self.control(verb, name, force)

    @work(exclusive=True, group="control", exit_on_error=False)
    async def control(self, verb: str, name: str | None, force: bool = False) -> None:
        """start, watch or switch to the scenario ``name``; stop (no name) the server."""
        session = self.session
        try:
            if verb == "stop" or name is None:
                await session.stop_scenario()
            elif verb == "start":
                await session.start_scenario(name, force)
            elif verb == "watch":
                await session.attach(name)
            elif verb == "switch":
                self.notify(f"switching to {name}: stopping the current server first")
                await session.switch(name, force)
        except FitRefused as exc:
            self._refused(verb, exc)
        except Exception as exc:  # a refused start says why; the app stays up
            self.session.store.event("error", f"{verb} failed: {exc}")
            self.notify(str(exc), title=f"{verb} failed", severity="error", timeout=15)

    def _refused(self, verb: str, exc: FitRefused) -> None:
        """A start or switch that does not fit: its figures, and the choice to go ahead."""
        self.session.store.event("warning", f"{verb} {exc.scenario}: " + " ".join(
            line.strip() for line in exc.lines[:2]))
        self.push_screen(FitScreen(verb, exc.scenario, exc.lines),
                         lambda go: self._control_if(go, verb, exc.scenario, True))

    def _events(self, store: RunStore) -> Text:
        """Active alerts first, errors before warnings and the newest first, a line each
        (cut to the line, never wrapped: a long alert hid the ones after it); what does not
        fit is counted. Then the latest events in the lines left, each with its time."""
        # app.tcss: the strip takes one. The dashboard's own screen (the stack's first), not
        # whichever is on top: with help open the events line kept one row or two by chance.
        rows = 1 if self.screen_stack[0].has_class("-verdict") else 2
        alerts = sorted(store.alerts.values(), key=lambda a: (a.severity != "error", -a.since))
        shown, hidden = alerts[:rows], len(alerts[rows:])
        lines = [Text.assemble(
            (f"(+{hidden} more: s writes all) " if hidden and i == len(shown) - 1 else "",
             "yellow"),
            (time.strftime("%H:%M:%S ", time.localtime(a.since)), "dim"),
            (f"⚠ {visible(a.message)}", "bold red" if a.severity == "error" else "bold yellow"))
            for i, a in enumerate(shown)]
        for e in list(store.events)[-(rows - len(lines)):] if len(lines) < rows else []:
            lines.append(Text.assemble((time.strftime("%H:%M:%S ", time.localtime(e.wall)),
                                        "dim"), (visible(e.text[:160]), {
                                            "error": "red", "warning": "yellow"}.get(e.level, ""))))
        return Text("\n").join(lines)  # each cut to its line by app.tcss

    # ------------------------------------------------------------------ which keys apply
    def _applies(self, action: str) -> bool:
        """Whether an action means anything in this session: replay controls in a replay,
        and starting or stopping servers anywhere else."""
        if action.startswith("replay_"):
            return self.replay is not None
        return not (action in ("start_selected", "stop", "scenario") and self.replay is not None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self._applies(action):
            return False
        if action == "scenario" and parameters and isinstance(parameters[0], int):
            # A number with no row is neither shown in the footer nor taken.
            return parameters[0] <= len(self._scenario_names())
        # Enter is a priority binding (the scenario table would take it otherwise); on any
        # screen above the dashboard (the command palette, a dialog) it is that screen's.
        return not (action == "start_selected" and len(self.screen_stack) > 1)

    def action_history(self) -> None:
        self.push_screen(HistoryScreen(self.session.store, self.clock))

    def action_compare(self) -> None:
        from engram_top.app.compare_screen import CompareScreen
        self.clear_passing_toasts()  # the warnings stay in the header and the events line
        self.push_screen(CompareScreen(self.session.store, extra=self.compare_with,
                                       reference=self.reference,
                                       price_per_gpu_hour=self.price_per_gpu_hour,
                                       probe=self.compare_probe))

    def _start_named(self, name: str) -> None:
        names = self._scenario_names()
        if name in names:
            self.query_one("#scenarios", DataTable).move_cursor(row=names.index(name))
            self.action_start_selected()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """A click on the highlighted row (the mouse's enter) starts or switches to it."""
        if event.data_table.id == "scenarios":
            self.action_start_selected()
