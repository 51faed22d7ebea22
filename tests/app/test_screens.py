"""SVG snapshots of the main screens at fixed sizes: a fixed store (tests/scene.py), a
frozen clock, UTC. A change in what the dashboard draws fails here until the new picture
is looked at and accepted:

    .venv/bin/pytest tests/app/test_screens.py --snapshot-update

(pytest-textual-snapshot writes tests/app/__snapshots__/test_screens/*.svg and, on a failure,
an HTML report that shows the old and the new picture side by side.) Textual and Rich are
pinned in the test extra so the pictures do not move with their releases.
"""

from __future__ import annotations

import pytest
from helpers import StaticSession, until
from scene import NOW, frozen_time_zone, scene_store, three_scenarios_store
from textual.widgets import RichLog

from engram_top.app.main import EngramTopApp


@pytest.fixture(autouse=True)
def _utc() -> None:
    frozen_time_zone()


def dashboard() -> EngramTopApp:
    return EngramTopApp(StaticSession(scene_store()), clock=lambda: NOW)


async def settle(pilot) -> None:  # type: ignore[no-untyped-def]
    """Until the dashboard is laid out: the log pane holds back its lines until it knows its
    size, and the panels drawn before that are drawn again at the final size."""
    app = pilot.app
    await until(pilot, lambda: app.query_one("#log", RichLog).lines, what="the log pane drawn")
    app.refresh_panels()
    await pilot.pause()


def test_dashboard_at_the_smallest_supported_size(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(100, 30), run_before=settle)


def test_dashboard_on_a_large_terminal_shows_the_trend_strip(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(180, 50), run_before=settle)


def test_compare_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(140, 40), press=["c", "_"],
                        run_before=settle)


def test_history_screen_small(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(100, 30), press=["h", "_", "_"],
                        run_before=settle)


def test_history_screen_large(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(200, 60), press=["h", "_", "_"],
                        run_before=settle)


def test_help_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(dashboard(), terminal_size=(100, 30), press=["question_mark", "_"],
                        run_before=settle)


def test_compare_screen_at_the_smallest_size_scrolls_to_its_last_row(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Three scenarios at 100x30: taller than the screen, it scrolls (End: its last rows,
    the latency figures), no header is cut, the seed's figure sits in its scenario's cell."""
    app = EngramTopApp(StaticSession(three_scenarios_store()), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=(100, 30), press=["c", "_", "end", "_"],
                        run_before=settle)


def test_a_terminal_below_the_smallest_size_says_so(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """80x24: no panel with a GPU missing or a figure clipped, but what it needs."""
    async def drawn(pilot) -> None:  # type: ignore[no-untyped-def]
        await until(pilot, lambda: "This terminal is 80x24" in str(
            pilot.app.query_one("#too-small").render()), what="the notice")

    assert snap_compare(dashboard(), terminal_size=(80, 24), run_before=drawn)


def fleet_app(nodes: int = 32):  # type: ignore[no-untyped-def]
    from scene import fleet_session

    from engram_top.app.fleet_screen import FleetApp
    return FleetApp(fleet_session(nodes), borrowed=True)


def test_fleet_screen_small(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(fleet_app(), terminal_size=(100, 30))


def test_fleet_screen_large(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(fleet_app(), terminal_size=(200, 60))


def test_fleet_node_detail(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def opened(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.press("down", "enter")
        await until(pilot, lambda: "readings over" in str(
            pilot.app.screen.query_one("#node-foot").render()), what="the node's history")

    assert snap_compare(fleet_app(), terminal_size=(120, 36), run_before=opened)
