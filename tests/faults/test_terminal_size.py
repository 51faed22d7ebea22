"""The dashboard on a real terminal takes the terminal's size, not an exported COLUMNS and
LINES (a CI runner's 80x24, a shell profile's): Textual reads those first, at start and at
every resize, and a 120x40 window was held at "too small" for good."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from drive import make_recording
from faultkit import Cli, Terminal, no_traceback
from helpers import ENGRAM_TOP, wait_until

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def test_an_exported_80x24_does_not_shrink_a_120x40_terminal(cli: Cli, tmp_path: Path) -> None:
    recording = make_recording(tmp_path / "rec.jsonl")
    env = {**cli.env, "COLUMNS": "80", "LINES": "24"}
    term = Terminal([*ENGRAM_TOP, "replay", str(recording)], env, cli.tmp, size=(40, 120))
    try:
        wait_until(lambda: "Quit" in term.output and "device" in term.output, 60,
                   "the replay's dashboard drawn")
        assert "needs at least" not in term.output, term.output[-2000:]
        term.proc.send_signal(signal.SIGTERM)
        assert term.wait(30) == 143
        no_traceback(term.output)
    finally:
        term.kill()
