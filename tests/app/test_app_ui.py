"""The dashboard as a user drives it beyond the panels: the config's key remaps and theme,
the command palette, alerts as toasts and in the events pane, the generated help, the mouse.
A fixed store (tests/scene.py) and a frozen clock; no processes."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import pytest
from helpers import GIB, StaticSession, screen_text, until
from scene import NOW, WALL, frozen_time_zone, scene_store
from textual.command import CommandList, CommandPalette
from textual.message import Message
from textual.widgets import DataTable, RichLog

from collectors.readings import GpuData, Reading, Status
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.dialogs import HelpScreen
from engram_top.app.main import EngramTopApp
from engram_top.settings.user_config import UserConfig, parse_config_text


class RecordingSession(StaticSession):
    """Takes the app's start/switch/stop calls and records them."""

    def __init__(self) -> None:
        super().__init__(scene_store())
        self.calls: list[tuple[str, str | None]] = []

    async def start_scenario(self, name: str, force: bool = False) -> None:
        self.calls.append(("start", name))

    async def switch(self, name: str, force: bool = False) -> None:
        self.calls.append(("switch", name))

    async def stop_scenario(self) -> None:
        self.calls.append(("stop", None))


def config_events(session: RecordingSession) -> list[str]:
    return [e.text for e in session.store.events if e.text.startswith("config: ")]


def highlighted_command(app: EngramTopApp) -> str:
    """The palette's highlighted command, title and help ("" before there is one)."""
    results = app.screen.query_one(CommandList)
    at = results.highlighted
    return "" if at is None else str(results.get_option_at_index(at).prompt)


def log_lines(app: EngramTopApp) -> list[str]:
    return [strip.text for strip in app.query_one("#log", RichLog).lines]


async def test_keys_and_theme_come_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    config = parse_config_text('theme = "nord"\n[keys]\ncompare = "k"\nhelp = "f1"\n', path)
    app = EngramTopApp(RecordingSession(), config=config)
    async with app.run_test(size=(120, 36)) as pilot:
        assert app.theme == "nord"
        # Remapped away: no binding takes c any more (what Textual dispatches a key by),
        # and k takes compare's place.
        keys = app.screen.active_bindings
        assert "c" not in keys
        assert keys["k"].binding.action == "compare" and keys["k"].enabled
        await pilot.press("k")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        await pilot.press("escape")
        await pilot.press("f1")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        text = screen_text(app)
        assert "k  Compare" in text and "f1  Keys" in text  # the help shows the remaps


async def test_a_bad_config_entry_is_reported_by_name_and_the_rest_applies(tmp_path) -> None:
    path = tmp_path / "config.toml"
    config = parse_config_text('theme = "no-such-theme"\n[keys]\ncompare = "k"\n'
                               'comapre = "j"\n', path)
    session = RecordingSession()
    app = EngramTopApp(session, config=config)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: config_events(session), what="the config's problems told")
        events = config_events(session)
        assert any(f"{path}: theme: unknown theme 'no-such-theme'" in e for e in events)
        assert any(f"{path}: keys.comapre: no such action" in e for e in events)
        await pilot.press("k")  # the good remap still applies
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")


async def test_a_broken_config_file_leaves_the_defaults_and_says_why(tmp_path) -> None:
    session = RecordingSession()
    app = EngramTopApp(session, config=UserConfig(),
                       config_error=f"{tmp_path}/config.toml:3: alerts.hbm_used_pct: must be 0-100")
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: config_events(session), what="the config's problem told")
        assert any("config.toml:3: alerts.hbm_used_pct" in e for e in config_events(session))
        await pilot.press("c")  # default keys work
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")


async def test_a_refresh_during_teardown_is_quiet_and_a_missing_widget_is_not() -> None:
    """The refresh timer can fire while Textual tears the screen down (leaving run_test, a
    signal): no widgets, nothing to do. A widget missing while the dashboard is still there
    is a bug and must surface."""
    from textual.css.query import NoMatches
    app = EngramTopApp(RecordingSession())
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: app.query("#header"), what="the dashboard")

        def broken() -> None:
            raise NoMatches("No nodes match '#events'")

        real, app._refresh_panels = app._refresh_panels, broken
        with pytest.raises(NoMatches):
            app.refresh_panels()  # the header is there: not a teardown
        app._refresh_panels = real
        await app.screen.query("*").remove()
        app.refresh_panels()  # torn down: quiet


async def test_every_action_is_in_the_palette() -> None:
    session = RecordingSession()
    session.store.run.state = "stopped"  # nothing running: starting asks no question
    app = EngramTopApp(session)
    async with app.run_test(size=(120, 36)) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Start/switch", "Stop", "Compare", "Keys", "Start or switch to host",
                      "Start or switch to device", "Theme"):
            assert any(t.startswith(title) for t in titles), (title, titles)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        await pilot.press(*"switch to device")
        await until(pilot, lambda: highlighted_command(app).startswith(
            "Start or switch to device"), what="the command highlighted")
        await pilot.press("enter")
        await until(pilot, lambda: session.calls, what="the command to run")
    assert session.calls == [("start", "device")]


async def test_an_alert_is_toasted_and_listed_with_its_time() -> None:
    frozen_time_zone()
    session = RecordingSession()
    store = session.store
    gpu = store.latest["gpu"].data
    hot = dataclasses.replace(gpu.devices[2], used_bytes=172 * GIB,
                              free_bytes=gpu.devices[2].total_bytes - 172 * GIB - GIB // 2)
    data = GpuData(gpu.driver_version, (*gpu.devices[:2], hot, *gpu.devices[3:]), gpu.backend)
    store.add("gpu", Reading("nvml", Status.OK, data, at=NOW, wall=WALL))
    app = EngramTopApp(session, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        # Raised by the session; the app toasts it and lists it in the events pane.
        await until(pilot, lambda: "hbm:gpu2" in store.alerts, what="the HBM alert")
        await until(pilot, lambda: "⚠ GPU 2 HBM 96.1% used (> 95%)" in screen_text(app),
                    what="the alert in the events pane")
        toasts = [n.message for n in app._notifications]
        assert any("GPU 2 HBM 96.1%" in m for m in toasts)


class Mark(Message, bubble=False):
    """Posted to a widget to know when it has handled every message posted before."""


async def test_clicking_the_highlighted_scenario_starts_it() -> None:
    session = RecordingSession()
    session.store.run.state = "stopped"  # nothing running: a click starts, no question
    app = EngramTopApp(session)
    messages: list[Message] = []
    async with app.run_test(size=(120, 36), message_hook=messages.append) as pilot:
        table = app.query_one("#scenarios")
        await pilot.click(table, offset=(4, 3))  # the second data row: "host"
        await until(pilot, lambda: app._selected() == "host", what="the row highlighted")
        # The first click only highlights. A selection (what starts a row) would have been
        # posted to the table by the handler that moved its cursor, so it is handled before
        # a mark posted now: none was, once the table has handled the mark.
        mark = Mark()
        table.post_message(mark)
        await until(pilot, lambda: mark in messages, what="the table to handle the mark")
        assert not [m for m in messages if isinstance(m, DataTable.RowSelected)]
        assert session.calls == []
        await pilot.click(table, offset=(4, 3))
        await until(pilot, lambda: session.calls, what="the start")
    assert session.calls == [("start", "host")]


async def test_s_writes_a_snapshot_folder_and_a_bad_folder_is_reported(tmp_path) -> None:
    session = RecordingSession()
    app = EngramTopApp(session, snapshot_dir=tmp_path / "snaps")

    def said(level: str, text: str) -> list[str]:
        return [e.text for e in session.store.events if e.level == level and text in e.text]

    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: "42.70M" in screen_text(app), what="the KV panel drawn")
        # Twice at once: two folders (the files are written on a thread while the dashboard
        # goes on).
        await pilot.press("s", "s")
        await until(pilot, lambda: len(said("info", "snapshot written")) == 2, 20,
                    "two snapshots written")
        folders = sorted((tmp_path / "snaps").iterdir())
        assert len(folders) == 2
        for folder in folders:
            assert sorted(p.name for p in folder.iterdir()) == [
                "history.png", "screen.svg", "snapshot.json", "summary.md", "timeseries.csv",
                "timeseries.parquet"]
        svg = html.unescape((folder / "screen.svg").read_text()).replace("\xa0", " ")
        assert "HBM per GPU" in svg and "42.70M" in svg
        summary = (folder / "summary.md").read_text()
        assert "host-prefetch" in summary and "+15.57%" in summary  # the seed's column
        assert {f"snapshot written: {f}" for f in folders} == set(said("info", "snapshot"))
        # A file where the folder should be: refused, said, nothing left behind.
        blocked = tmp_path / "blocked"
        blocked.write_text("not a folder")
        app.snapshot_dir = blocked
        await pilot.press("s")
        await until(pilot, lambda: said("error", "snapshot"), 20, "the refusal")
        assert said("error", "snapshot") == [
            f"snapshot: cannot write into {blocked}: not a folder"]
        assert blocked.read_text() == "not a folder"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "snaps"]
        assert app.is_running


async def test_the_log_pane_shortens_sglang_prefixes_and_keeps_the_rest() -> None:
    """"[2026-11-29 11:03:58 TP0] " takes a third of a narrow pane: the pane shows the time
    and the ranks; lines of any other shape are shown whole."""
    from collections import deque
    session = RecordingSession()
    run = session.store.run
    run.log_lines = deque([
        (0.0, "[2026-11-29 11:03:58 TP0] Load weight begin. avail mem=178.50 GB"),
        (1.0, "[2026-11-29 11:03:59 DP1 TP3] KV Cache is allocated. #tokens: 42700288"),
        (2.0, "[2026-11-29 11:04:07] The server is fired up and ready to roll!"),
        (3.0, "Traceback (most recent call last):"),
        (4.0, "[2026-11-29] not SGLang's prefix"),
    ], maxlen=400)
    app = EngramTopApp(session)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: len(log_lines(app)) >= 6, what="the log pane's 5 lines")
        pane = log_lines(app)
    assert pane[1:] == ["11:03:58 TP0 Load weight begin. avail mem=178.50 GB",
                        "11:03:59 DP1 TP3 KV Cache is allocated. #tokens: 42700288",
                        "11:04:07 The server is fired up and ready to roll!",
                        "Traceback (most recent call last):",
                        "[2026-11-29] not SGLang's prefix"]


async def test_the_log_pane_shows_every_line_however_far_the_counters_lag() -> None:
    """The supervisor appends to the run's log deque on its own schedule; the facts' line
    count catches up later. The pane must still show every line, once, in order."""
    from collections import deque
    session = RecordingSession()
    run = session.store.run
    run.log_lines = deque(maxlen=400)
    run.lines_seen = 0
    for i in range(10):
        run.log_lines.append((float(i), f"line {i}"))
    app = EngramTopApp(session)
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: len(log_lines(app)) >= 11, what="the first 10 lines")
        run.lines_seen = 3  # lagging behind the deque
        for i in range(10, 15):
            run.log_lines.append((float(i), f"line {i}"))
        await until(pilot, lambda: len(log_lines(app)) >= 16, what="the 5 lines added")
        pane = log_lines(app)
    assert pane[1:] == [f"line {i}" for i in range(15)]


def test_the_header_keeps_the_scenario_and_its_state_whatever_the_width() -> None:
    from rich.text import Text

    from engram_top.app.panels import header
    store = scene_store()
    lead = (Text(" REPLAY ▶  12:04/60:00 ×16"), Text(" a-long-recording-name-20261202.jsonl"))
    wide = header(store, NOW, width=300, lead=lead).plain
    assert wide.startswith(" REPLAY ▶  12:04/60:00 ×16 a-long-recording-name")
    assert "engram-top · simulated 4x NVIDIA B200 · host-prefetch · READY in 27.3 s " \
           "(×0.1: 273 s node time)" in wide
    for width in (98, 70, 60):
        text = header(store, NOW, width=width, lead=lead).plain
        assert "host-prefetch · READY in 27.3 s" in text, (width, text)
        assert "REPLAY ▶" in text
    # A stopped run's header is no countdown.
    store.run.state = "stopped"
    text = header(store, NOW, width=120).plain
    assert "STOPPED · it had been ready in 27.3 s" in text and "STOPPED in" not in text


def test_a_starting_header_and_the_scenario_list_fit_a_100_column_terminal() -> None:
    from engram_top.app.panels import PHASE_SHORT, header
    from engram_top.app.scenario_rows import ATTACHING, SCENARIO_COLUMNS
    store = scene_store()
    run = store.run
    run.state, run.phase, run.ready_at = "starting", "weights", None
    run.launched_at, run.expected_ready_s = NOW - 12.3, 27.3
    text = header(store, NOW, width=98).plain
    assert len(text.rstrip()) <= 98
    assert "host-prefetch · STARTING" in text and "loading weights · 12.3 s of ~27.3 s" in text
    # The list's state column holds its phase whole ("▸ weights", not "▸ loading wei–"),
    # and a server being attached, with a blank before the next column.
    width = dict(SCENARIO_COLUMNS)["state"]
    assert all(len(f"▸ {label}") < width for label in PHASE_SHORT.values())
    assert len(ATTACHING) < width


def host_delta_shown(app: EngramTopApp, scenario: str) -> tuple[str, str]:
    """The Host RAM panel's Δ ("+6.4 GiB", or "–") and the scenario list's host Δ cell for
    ``scenario``, as they are on screen at this moment."""
    found = re.search(r"│ ?Δ +(?:server (?:\w+ \(had )?)?(–|[+-][\d,.]+ GiB)", screen_text(app))
    assert found is not None, screen_text(app)
    table = app.query_one("#scenarios", DataTable)
    assert str(list(table.columns.values())[5].label) == "host Δ"
    cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
    (cell,) = [row[5] for row in cells if row[0].strip(" ▶") == scenario]
    return found.group(1), cell


async def test_a_launch_s_host_delta_is_the_host_ram_panel_s() -> None:
    """3 s into a launch the scenario row once read +6.5 GiB while the Host RAM panel read
    +17.5: the row had the run's figures of the last second. The live run's row and the panel
    take one figure and write it one way, even where rounding it twice would differ."""
    store = scene_store()
    run = store.run
    run.state, run.phase, run.ready_at = "starting", "weights", None
    run.results = dataclasses.replace(run.results, host_delta_gib=17.5)  # an older figure
    used = 40 * GIB + round(6.4496 * GIB)  # 6.4496 GiB over the baseline: +6.4, not +6.5
    # The server's share (its tree's memory) is the Δ: 6.4496 GiB of it, nothing shared.
    host = store.data("host")
    tree = dataclasses.replace(host.server_tree, rss_anon_bytes=round(6.4496 * GIB),
                               rss_shmem_bytes=0)
    store.add("host", Reading("host", Status.OK, dataclasses.replace(
        host, used_bytes=used, available_bytes=2048 * GIB - used, server_tree=tree), at=NOW))
    app = EngramTopApp(StaticSession(store), clock=lambda: NOW)
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.query_one("#scenarios").row_count > 0, 5, "the list")
        assert host_delta_shown(app, "host-prefetch") == ("+6.4 GiB", "+6.4 GiB")
        # Stopped, the row keeps the run's own figure; the panel goes on "since launch".
        run.state = "stopped"
        store.bump("run")
        await until(pilot, lambda: host_delta_shown(app, "host-prefetch")[1] == "+17.5 GiB",
                    5, "the row to show the run's figure")


async def test_the_events_line_puts_errors_and_new_alerts_first_a_line_each() -> None:
    """Four alerts, each longer than the screen is wide, in two rows: the error first, then
    the newest warning, cut to their line (a wrapped alert hid the ones after it), and the
    rest counted by name on the last row."""
    from engram_top.alerts.monitor import Alert

    session = StaticSession(scene_store())
    tail = " and more words" * 20
    session.store.alerts = {
        "kv": Alert("kv", "warning", "KV pool 96% used (> 90%)" + tail, WALL - 60, NOW - 60),
        "slo": Alert("slo", "warning", "p99 TTFT 19.8 s: past [slo]" + tail, WALL - 50,
                     NOW - 50),
        "hicache-drops": Alert("hicache-drops", "warning", "HiCache dropped 181 tokens/s"
                               + tail, WALL - 10, NOW - 10),
        "xid:gpu1": Alert("xid:gpu1", "error", "GPU 1 XID 79: fallen off the bus" + tail,
                          WALL - 5, NOW - 5),
    }
    app = EngramTopApp(session, clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        def rows() -> list[str]:
            return [s.text for s in app.query_one("#events").render_lines(
                app.query_one("#events").region.reset_offset)]

        await until(pilot, lambda: "GPU 1 XID 79" in "".join(rows()),
                    what="the alerts on the events line")
        shown = [r.strip() for r in rows() if r.strip()]
        # The scene's two placements have figures: the verdict strip takes a row of two.
        assert app.screen.has_class("-verdict") and len(shown) == 1
        assert shown[0].startswith("(+3 more: s writes all)")
        assert "⚠ GPU 1 XID 79" in shown[0] and shown[0].endswith("…")
        app.screen.remove_class("-verdict")
        app.query_one("#events").update(app._events(session.store))
        await until(pilot, lambda: len([r for r in rows() if r.strip()]) == 2,
                    what="two rows of alerts")
        first, second = [r.strip() for r in rows() if r.strip()]
        assert "⚠ GPU 1 XID 79" in first and first.endswith("…")
        assert second.startswith("(+2 more: s writes all)") and "HiCache dropped 181" in second


async def test_a_server_that_stopped_answering_reads_so_in_the_header_and_its_row() -> None:
    """A killed server is known by its failed polls: the header and the scenario list both
    say so (the list said 'ready' or 'attached' for a dead server)."""
    session = StaticSession(scene_store())
    store = session.store
    store.add("server", Reading("sglang", Status.ERROR, None,
                                "no server at http://127.0.0.1:30000 (connection refused)",
                                at=NOW))
    app = EngramTopApp(session, clock=lambda: NOW)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "NOT ANSWERING" in screen_text(app).upper(),
                    what="the header's state")
        table = app.query_one("#scenarios", DataTable)
        current = [table.get_row_at(i) for i in range(table.row_count)
                   if str(table.get_row_at(i)[0]).startswith("▶")]
        assert current and str(current[0][1]) == "no answer"
