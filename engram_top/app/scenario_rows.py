"""The dashboard's scenario list: a row for each scenario of the file, each run since, and
each server the session is still attaching (there from the first frame, so the list does
not grow, and the screen is not laid out again, when the start brings its run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import DataTable

from collectors import seconds, tokens, weights_gb
from engram_top import model
from engram_top.app import panels
from engram_top.app.mixin import AppMixin
from engram_top.app.safe import cell
from engram_top.model import RunFacts, RunState, RunStore

if TYPE_CHECKING:
    from engram_top.app.sessions import DashboardSession

# The columns and widths (no cell padding: each width leaves its own gap). All six at every
# size: at 100 columns they take 70 and the log pane the other 30, as the headline figures
# of each placement (KV tokens, weights, host Δ) matter more to a room than a log line's
# tail. A state holds 9 cells: "stopping", "▸ KV pool" (PHASE_SHORT), "attaching".
SCENARIO_COLUMNS = (("scenario", 16), ("state", 10), ("ready", 8), ("KV tokens", 10),
                    ("weights GB", 11), ("host Δ", 11))
ATTACHING = "attaching"  # a server the session's start has not reached yet


class ScenarioRows(AppMixin):
    session: DashboardSession
    _rows: tuple[tuple[str, ...], ...]

    def _lay_out_scenarios(self) -> None:
        """The list's columns (SCENARIO_COLUMNS), and its width: they, a border each side,
        a scroll bar; the log pane takes the rest."""
        table = self.query_one("#scenarios", DataTable)
        for label, width in SCENARIO_COLUMNS:
            table.add_column(label, width=width)
        table.styles.width = sum(width for _, width in SCENARIO_COLUMNS) + 4

    def _scenario_names(self) -> list[str]:
        store = self.session.store
        names = list(store.scenarios.scenarios) if store.scenarios is not None else []
        names += [n for n in store.history if n not in names]
        return names + [url for url in self.session.attaching if url not in names]

    def _refresh_scenarios(self, store: RunStore) -> None:
        rows = []
        for name in self._scenario_names():
            f: RunFacts | None = store.history.get(name)
            r = f.results if f else model.RunFigures()
            current = store.run is not None and f is store.run
            if f is None:
                state = ATTACHING if name in self.session.attaching else "–"
            elif f.state == RunState.STARTING:
                state = f"▸ {panels.PHASE_SHORT.get(f.phase, f.phase)}"
            else:
                state = panels.run_state(store, f, silent=panels.Shown.NO_ANSWER)
            # The live run's is the Host RAM panel's own figure, written the same way.
            delta = panels.host_delta(model.run_host_delta_bytes(store, f))
            row = (("▶ " if current else "  ") + name, state,
                   seconds(r.ready_s), tokens(r.kv_tokens), weights_gb(r.weights_gb), delta)
            rows.append(row)
        if tuple(rows) == self._rows:
            return
        if len(rows) != len(self._rows):
            self.refresh_bindings()  # the footer's numbers follow the rows
        table = self.query_one("#scenarios", DataTable)
        cursor = table.cursor_row
        table.clear()
        for row in rows:
            table.add_row(*(cell(c) for c in row))  # scenario names come from a file
        self._rows = tuple(rows)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))

    def _selected(self) -> str | None:
        names = self._scenario_names()
        row = self.query_one("#scenarios", DataTable).cursor_row
        return names[row] if 0 <= row < len(names) else None
