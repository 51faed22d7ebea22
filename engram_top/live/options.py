"""What a live session is asked to do: its scenario file or attached servers, its node, its
polls, its load and its lifetime (the commands build these from their options)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from engram_top.alerts.thresholds import Thresholds
from engram_top.live.load import LoadSpec
from engram_top.settings.paths import default_state_dir


@dataclass(frozen=True)
class SessionOptions:
    scenario_file: Path | None = None
    start: str | None = None
    attach: tuple[str, ...] = ()
    api_key: str | None = None  # for attached servers
    engine: str | None = None  # the engine attached servers speak (default: engines.DEFAULT)
    state_dir: Path | None = None  # logs and start-up history; default: a temporary folder
    node_dir: Path | None = None  # the simulated node's folder (simulated scenarios)
    poll_interval: float = 1.0
    load: LoadSpec | None = LoadSpec()
    leave_running: bool = False
    # Start and switch even where the fit check says the scenario does not fit (--force).
    force: bool = False
    free_ports: bool = False  # give every scenario a free port (the embedded demo)
    time_scale: float | None = None  # overrides for simulated scenarios
    serve_scale: float | None = None
    stream_interval: int | None = None  # a chunk per N tokens (SGLang's --stream-interval)
    # Who holds the state folder's lock, and how long to wait for a headless holder.
    command: str = "run"
    lock_wait_s: float = 0.0
    # The user's alert thresholds (their config file's [alerts]); None: the defaults.
    thresholds: Thresholds | None = None

    def stop_command(self) -> str:
        """`engram-top stop FILE`, with --state-dir where this session's is not FILE's own:
        what stops a server it leaves running."""
        words = ["engram-top", "stop", str(self.scenario_file)]
        if self.scenario_file is not None and self.state_dir is not None and \
                self.state_dir.resolve() != default_state_dir(self.scenario_file).resolve():
            words += ["--state-dir", str(self.state_dir)]
        return shlex.join(words)
