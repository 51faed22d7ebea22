"""Fault classes 19-20: the command palette's keys are the palette's, and it lists each
command once, only where it applies."""

from __future__ import annotations

from pathlib import Path

import pytest
from drive import SIZE, make_recording
from faultkit import sim_scenario_file
from helpers import quit_app, until
from textual.command import CommandList, CommandPalette

from engram_top.app.dialogs import HelpScreen
from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions
from engram_top.record.replay import ReplaySession

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

REPLAY_ONLY = {"Play/pause", "-10 s", "+10 s", "-1 min", "+1 min", "To the start", "Slower",
               "Faster"}
SERVERS = {"Start/switch", "Stop"}


def titles(app: EngramTopApp) -> list[str]:
    return [c.title for c in app.get_system_commands(app.screen)]


def idle_session(tmp_path: Path) -> Session:
    """A scenario file's dashboard that starts nothing by itself."""
    return Session(SessionOptions(scenario_file=sim_scenario_file(tmp_path), start=None,
                                  state_dir=tmp_path / "state", load=None))


async def test_fault_19_enter_in_the_palette_runs_the_palette_command(tmp_path: Path) -> None:
    session = idle_session(tmp_path)
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app._rows) == 1, 10, "the scenario list")
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), 5, "the palette")
        await pilot.press(*"Help: keys")
        await until(pilot, lambda: app.screen.query_one(CommandList).option_count, 5,
                    "a match")
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), 5,
                    "the help the palette chose")
        assert session.store.run is None, "Enter in the palette started a server"
        assert session.supervisor.current is None
        await pilot.press("escape")
        await quit_app(app, pilot)


async def test_fault_20_the_palette_lists_what_applies_once(tmp_path: Path) -> None:
    app = EngramTopApp(idle_session(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        live = titles(app)
        assert len(live) == len(set(live)), live
        assert not REPLAY_ONLY & set(live) and set(live) >= SERVERS
        assert live.count("Keys") == 1 and "Start or switch to device" in live
        await quit_app(app, pilot)

    replay = ReplaySession(make_recording(tmp_path / "rec.jsonl"), paused=True)
    app = EngramTopApp(replay, clock=replay.clock)
    async with app.run_test(size=SIZE) as pilot:
        played = titles(app)
        assert len(played) == len(set(played)), played
        assert set(played) >= REPLAY_ONLY and not SERVERS & set(played)
        assert not [t for t in played if t.startswith("Start or switch")]
        await quit_app(app, pilot)
