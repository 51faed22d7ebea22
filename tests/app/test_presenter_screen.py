"""The dashboard on a projector: 100x30, the smallest supported terminal. Every panel keeps
its headline figures whole (the weights per GPU, the KV tokens, the host Δ, TTFT and TPOT
p50) and every scenario row its own; the footer shows the keys a demo is driven by (Enter
and the rows' numbers), a replay's footer its controls, all whole. Textual's Pilot over the
fixed store of the snapshots (tests/scene.py): no process, no network."""

from __future__ import annotations

import dataclasses
import io
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import StaticSession, until
from rich.console import Console
from scene import NOW, frozen_time_zone, scene_store, three_scenarios_store
from textual.widgets import RichLog

from collectors.readings import Quantiles, Reading
from engram_top.app.main import EngramTopApp
from engram_top.model.store import RunStore

SIZE = (100, 30)


@pytest.fixture(autouse=True)
def _utc() -> None:
    frozen_time_zone()


class RecordingStatic(StaticSession):
    """A fixed store whose start and switch keys are recorded, not run."""

    def __init__(self, store: RunStore) -> None:
        super().__init__(store)
        self.calls: list[tuple[str, str]] = []

    async def start_scenario(self, name: str, force: bool = False) -> None:
        self.calls.append(("start", name))

    async def switch(self, name: str, force: bool = False) -> None:
        self.calls.append(("switch", name))


def screen_lines(app: Any) -> list[str]:
    """The terminal's rows as text, each as wide as the screen (what a viewer sees, blanks
    kept: a figure is whole when its row holds it whole)."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(),
                      force_terminal=True, color_system="truecolor", record=True,
                      legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text().splitlines()


def panel_text(lines: list[str], title: str) -> str:
    """A panel's rows, by its title in the top border: the columns between its corners."""
    for y, line in enumerate(lines):
        at = line.find(f"─ {title} ")
        if at < 0:
            continue
        left = line.rfind("╭", 0, at)
        right = line.find("╮", at)
        rows = []
        for below in lines[y + 1:]:
            inner = below[left + 1:right]
            if below[left] == "╰":
                break
            rows.append(inner.strip())
        return "\n".join(rows)
    raise AssertionError(f"no panel {title!r} on screen:\n" + "\n".join(lines))


async def drawn(pilot: Any) -> None:
    app = pilot.app
    await until(pilot, lambda: app.query_one("#log", RichLog).lines, what="the log pane drawn")
    app.refresh_panels()
    await pilot.pause()


async def test_every_headline_figure_is_whole_at_100x30() -> None:
    store = scene_store()
    app = EngramTopApp(StaticSession(store), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        lines = screen_lines(app)
        hbm = panel_text(lines, "HBM per GPU")
        # The weights per GPU (with the KV pool's GB) on a line of their own, under the GPUs.
        assert re.search(r"^(GPU 0 by SGLang: )?weights 72\.201 · KV 59\.47\b", hbm, re.M), hbm
        assert all(f"\n{gpu} " in f"\n{hbm}" for gpu in range(4))  # every GPU's row
        kv = panel_text(lines, "KV pool")
        assert "capacity 42.70M tokens" in kv
        # The usage says its pool: the sliding window's, not a share of the capacity above.
        assert re.search(r"^in use +[█░]+ swa pool 23\.0% of 112\.6k", kv, re.M), kv
        host = panel_text(lines, "Host RAM")
        assert re.search(r"^Δ +server \+202\.0 GiB", host, re.M), host
        latency = panel_text(lines, "Latency")
        assert re.search(r"^TTFT +402\.5 ms +710\.0 ms", latency, re.M), latency
        assert re.search(r"^TPOT \(ITL\) +28\.8 ms +41\.0 ms", latency, re.M), latency
        # Every scenario row keeps its six figures whole: KV tokens, weights and host Δ too.
        listed = panel_text(lines, "Scenarios")
        assert re.search(r"^scenario +state +ready +KV tokens +weights GB +host Δ$", listed,
                         re.M), listed
        assert re.search(r"^device +stopped +12\.5 s +11\.84M +119\.043 +\+6\.5 GiB$", listed,
                         re.M), listed
        assert re.search(r"^▶ host-prefetch +ready +27\.3 s +42\.70M +72\.201 +\+202\.0 GiB$",
                         listed, re.M), listed


async def test_three_scenarios_keep_their_rows_whole_at_100x30() -> None:
    app = EngramTopApp(StaticSession(three_scenarios_store()), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        listed = panel_text(screen_lines(app), "Scenarios")
        assert re.search(r"^host +stopped +23\.3 s +42\.70M +72\.201 +\+195\.4 GiB$", listed,
                         re.M), listed


def first_bucket_ttft() -> Quantiles:
    """A window of SGLang's TTFT histogram whose 120 requests all took 3-4 ms: every one in
    its first bucket (0-100 ms), so p50 and p99 interpolate to 50 and 99 ms beside an exact
    mean of 3.57 ms (the issue's `--serve-scale 0.05` under a light load)."""
    from collectors.promtext import Histogram
    from collectors.windowed import WindowedHistogram
    bounds = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, float("inf"))
    w = WindowedHistogram(30.0)
    w.add(NOW - 30, Histogram(tuple((b, 0.0) for b in bounds), 0.0, 0.0))
    w.add(NOW, Histogram(tuple((b, 120.0) for b in bounds), 120 * 0.00357, 120.0))
    return w.quantiles(NOW)


def with_ttft(store: RunStore, ttft: Quantiles) -> RunStore:
    reading = store.latest["server"]
    store.add("server", Reading(reading.source, reading.status,
                                dataclasses.replace(reading.data, ttft=ttft), at=NOW,
                                wall=reading.wall))
    return store


async def test_a_ttft_in_the_first_bucket_reads_as_its_bounds_beside_the_exact_mean() -> None:
    """All of a window's TTFTs in the histogram's first bucket: the panel says "<= 100 ms"
    for p50 and p99, not the interpolated 50.0 and 99.0 ms, and keeps the exact mean; the
    row stays whole at 100x30."""
    ttft = first_bucket_ttft()
    assert (ttft.p50, ttft.p99) == (pytest.approx(0.05), pytest.approx(0.099))
    app = EngramTopApp(StaticSession(with_ttft(scene_store(), ttft)), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        latency = panel_text(screen_lines(app), "Latency")
        assert re.search(r"^TTFT +<= 100 ms +<= 100 ms +3\.6 ms$", latency, re.M), latency
        assert "50.0" not in latency and "99.0" not in latency


async def test_a_recording_made_before_buckets_were_kept_reads_the_same() -> None:
    """A recording's Quantiles from before the buckets were kept has only its older flags
    (p50_under, first_bound): the panel reads the first bucket from them all the same."""
    ttft = Quantiles(0.0574, 0.0962, 0.061, 120.0, p50_under=True, p99_under=True,
                     first_bound=0.1)
    app = EngramTopApp(StaticSession(with_ttft(scene_store(), ttft)), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        latency = panel_text(screen_lines(app), "Latency")
        assert re.search(r"^TTFT +<= 100 ms +<= 100 ms +61\.0 ms$", latency, re.M), latency


def footer(app: Any) -> str:
    return screen_lines(app)[-1]


async def test_the_footer_shows_a_number_per_scenario_and_each_starts_its_row() -> None:
    store = scene_store()
    session = RecordingStatic(store)
    app = EngramTopApp(session, clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await until(pilot, lambda: "⏎ 1 2 3 Start/switch" in footer(app),
                    what="the footer's numbers")
        line = footer(app)
        assert " 4 " not in line  # three rows, three numbers
        for key in ("q Quit", "x Stop", "c Compare", "h History", "s Snapshot", "? Keys",
                    "^p palette"):
            assert key in line, line
        await pilot.press("2")  # the second row, "host": a switch from host-prefetch
        await until(pilot, lambda: session.calls, what="the switch")
        assert session.calls == [("switch", "host")]
        # No fourth row: the app refuses its number, so no binding takes 4 (what Textual
        # dispatches a key by) and pressing it calls nothing.
        assert app.check_action("scenario", (4,)) is False
        assert app.check_action("scenario", (3,)) is True
        assert "4" not in app.screen.active_bindings
        await pilot.press("4")
        assert session.calls == [("switch", "host")]


async def test_a_replays_footer_and_header_fit_100_columns(tmp_path: Path) -> None:
    from engram_top.record.recorder import Recorder
    from engram_top.record.replay import ReplaySession
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "2026-11-18T11-06-40-123456.jsonl"
    Recorder(scene_store(), path, clock=lambda: NOW).start().close()
    session = ReplaySession(path, paused=True)
    session.seek(session.duration)
    app = EngramTopApp(session, clock=session.clock)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await until(pilot, lambda: "Play/pause" in footer(app), what="the replay's keys")
        line = footer(app)
        for key in ("q Quit", "c Compare", "h History", "s Snapshot", "? Keys",
                    "space Play/pause", ", . ±10 s", "- + Speed", "^p palette"):
            assert key in line, line
        assert "Start/switch" not in line and "x Stop" not in line  # a replay starts nothing
        head = screen_lines(app)[0]
        assert "REPLAY ⏸" in head and "host-prefetch · READY" in head and "…" not in head


def file_runs() -> list[Any]:
    """Two bench reports' runs as --compare-with loads them: two trials each of device and
    host-prefetch, each file's in columns of their own ("device (A/report.json)")."""
    from pathlib import PurePath

    from engram_top.compare.run_result import RunResult
    from engram_top.compare.runs import from_file
    runs: list[Any] = []
    for name, ttft in (("A", 0.35), ("B", 0.50)):
        results = [RunResult(scenario=p, placement=p, source="bench", trial=t, gpus=4,
                             kv_tokens=kv, ttft_mean_s=ttft * (1.0 + 0.01 * t),
                             output_tok_s=200.0)
                   for p, kv in (("device", 11_840_000), ("host-prefetch", 42_700_288))
                   for t in range(2)]
        runs += from_file(results, PurePath(name) / "report.json")
    return runs


def table_head(lines: list[str]) -> list[str]:
    """The comparison table's header rows: between its top border and its rule (their
    joints, ┳ and ╇: scrolled sideways, the corners are off the screen)."""
    top = next(i for i, line in enumerate(lines) if "━┳━" in line)
    rule = next(i for i, line in enumerate(lines) if "━╇━" in line)
    return lines[top + 1:rule]


async def test_the_comparison_at_100x30_keeps_headers_short_and_scrolls_sideways() -> None:
    """Six columns (the live two, two files' two each) do not fit 100 columns: each header
    wraps to two lines at most (the runs and the baseline are the first row's), and the
    table scrolls sideways to its last column rather than cut it off."""
    from engram_top.app.compare_screen import CompareScreen
    app = EngramTopApp(StaticSession(scene_store()), clock=lambda: NOW,
                       compare_with=file_runs())
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                    and any("┡" in line for line in screen_lines(app)), what="the table")
        for _ in range(30):  # down to the table's header, under the verdict
            if any("┏" in line for line in screen_lines(app)):
                break
            await pilot.press("down")
        head = table_head(screen_lines(app))
        assert len(head) == 2, head
        # A file's column: its scenario over its file, never a third line for its runs.
        assert "figure" in head[1] and "(A/report.json)" in head[1], head
        runs = next(line for line in screen_lines(app) if "│ runs " in line)
        assert "n=1" in runs and "n=2" in runs  # the live runs one each, the files' two
        assert "(B/report.json)" not in "".join(head)  # past the right edge for now
        for _ in range(120):
            if "(B/report.json)" in "".join(table_head(screen_lines(app))):
                break
            await pilot.press("right")
        head = table_head(screen_lines(app))
        assert "(B/report.json)" in "".join(head), head
        assert len(head) == 2


async def test_three_scenarios_compare_with_one_line_headers_at_100x30() -> None:
    from engram_top.app.compare_screen import CompareScreen
    app = EngramTopApp(StaticSession(three_scenarios_store()), clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await drawn(pilot)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                    and any("┏" in line for line in screen_lines(app)), what="the table")
        head = table_head(screen_lines(app))
        assert len(head) == 1 and re.search(r"figure +┃ +device +┃ +host +┃ +▶ host-prefetch",
                                            head[0]), head
        runs = next(line for line in screen_lines(app) if "│ runs " in line)
        assert re.search(r"n=1 · baseline +│ +n=1 +│ +n=1", runs), runs
