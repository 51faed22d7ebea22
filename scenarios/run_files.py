"""A state folder's files about its runs: history.json (each scenario's last times to
ready, for the next start's estimate) and current.json (the server this folder's supervisor
launched, so a later engram-top, a headless `switch` or a new dashboard, finds it and never
starts a second)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from scenarios.private import write_private
from scenarios.server_run import Run

HISTORY_KEEP = 20  # times to ready kept per scenario
ESTIMATE_FROM = 5  # the last this many make the estimate


class RunFiles:
    def __init__(self, state_dir: Path) -> None:
        self.history_path = state_dir / "history.json"
        self.current_path = state_dir / "current.json"

    # ------------------------------------------------------------------ history
    def _history(self) -> dict[str, list[float]]:
        try:
            data = json.loads(self.history_path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def estimate(self, name: str) -> float | None:
        """Median time to ready of the last runs of this scenario, if any."""
        past = self._history().get(name, [])[-ESTIMATE_FROM:]
        import statistics  # here: it brings fractions, decimal and random, 6 ms of a start

        return statistics.median(past) if past else None

    def remember(self, run: Run) -> None:
        """The run's time to ready, once it has one (the state folder is per scenario file
        already, so the scenario's name is its key)."""
        if run.ready_s is None:
            return
        data = self._history()
        key = run.scenario.name
        data[key] = [*data.get(key, [])[-(HISTORY_KEEP - 1):], round(run.ready_s, 3)]
        with contextlib.suppress(OSError):
            write_private(self.history_path, json.dumps(data, indent=1))

    # ------------------------------------------------------------------ the running server
    def save_current(self, run: Run) -> None:
        """OSError where it cannot be written: the server runs; only a later command will
        not find it (the caller says so)."""
        data = {"scenario": run.scenario.name, "pid": run.pid,
                "started": run.proc.started, "log_path": str(run.log_path),
                "launched_wall": run.launched_wall, "port": run.scenario.port,
                "key_file": None if run.key_file is None else str(run.key_file),
                "scratch": None if run.scratch is None else str(run.scratch),
                "baseline_gpu": {str(k): v for k, v in run.baseline_gpu.items()},
                "baseline_host_used": run.baseline_host_used,
                "baseline_host_shmem": run.baseline_host_shmem}
        write_private(self.current_path, json.dumps(data, indent=1))

    def read_current(self) -> dict[str, Any]:
        """current.json as written; OSError or ValueError where there is none to read."""
        data = json.loads(self.current_path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{self.current_path}: not a JSON object")
        return data

    def forget_current(self) -> None:
        with contextlib.suppress(OSError):
            self.current_path.unlink()
