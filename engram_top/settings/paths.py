"""Where engram-top keeps its state: one lookup for every command and module."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def state_base() -> Path:
    """The per-user state folder: $XDG_STATE_HOME/engram-top, else ~/.local/state/engram-top
    (crash reports, the default recordings, one folder per scenario file)."""
    root = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(root) / "engram-top"


def default_state_dir(scenario_file: Path) -> Path:
    """Per scenario file: its logs, start-up history and the server it left running."""
    resolved = scenario_file.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:8]
    return state_base() / f"{resolved.stem}-{digest}"
