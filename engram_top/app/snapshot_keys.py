"""The `s` key: the screen as it is now, with everything behind it, in a new folder under
the snapshot folder; written on a thread, told on the events line and in a toast."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work

from engram_top.app.mixin import AppMixin
from engram_top.app.sessions import DashboardSession

if TYPE_CHECKING:  # loaded when used: pandas and Parquet cost the first frame
    from engram_top import export
    from engram_top.compare import RunResult
    from engram_top.seed import Reference


class TakesSnapshots(AppMixin):
    """For the dashboard's App: what a snapshot takes besides the screen."""

    session: DashboardSession
    snapshot_dir: Path
    reference: Reference
    compare_with: list[RunResult]
    price_per_gpu_hour: float | None

    def action_snapshot(self) -> None:
        """The screen as it is now, with everything behind it, in a new folder. What the
        store holds is taken here, on the UI loop; the files are written on a thread, so the
        dashboard stays live through pandas, Parquet and fsync (about half a second)."""
        store = self.session.store
        secrets = list(self.session.secrets)
        from engram_top import export
        try:
            # Its one comparison (snapshot.json and summary.md) takes the runs loaded from
            # files and the price, as the compare screen does.
            taken = export.prepare(
                self.snapshot_dir, store, self.reference, svg=self.export_screenshot(),
                compare_with=self.compare_with, price_per_gpu_hour=self.price_per_gpu_hour,
                secrets=secrets)
        except export.SnapshotError as exc:
            self._snapshot_failed(exc)
            return
        self._write_snapshot(taken)

    @work(group="snapshot", exit_on_error=False)
    async def _write_snapshot(self, taken: export.Prepared) -> None:
        # A thread for the files; the result is told here, on the loop. Quitting meanwhile
        # cancels this worker, not the write: Python waits for the thread before it exits.
        from engram_top.export import SnapshotError
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
