"""A server that keeps dying: its deaths within a window, counted from what the session
classified (engram_top.live.forensics). An attached server keeps its earlier deaths on its
facts when it comes back on its URL; a scenario's runs are facts of their own, one death
each. Pure, over a RunStore; the monitor calls it with the wall clock's now."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from engram_top.alerts.definitions import RESTART_LOOP
from engram_top.alerts.finding import Finding
from engram_top.model.death import Death
from engram_top.model.store import RunStore


def deaths_of(store: RunStore) -> list[tuple[float, Death]]:
    """The watched server's classified deaths with when each was seen, oldest first: an
    attached server's earlier ones and its latest, and those of the same scenario's runs."""
    run = store.run
    if run is None:
        return []
    runs = [r for r in store.runs if r is not run and r.scenario == run.scenario] + [run]
    return sorted(((d.at, d) for r in runs for d in r.deaths if d.at is not None),
                  key=lambda pair: pair[0])


def restart_loop(store: RunStore, wall_now: float, count: int,
                 window_s: float) -> Iterator[Finding]:
    within = [(at, d) for at, d in deaths_of(store) if wall_now - at <= window_s]
    if len(within) < count:
        return
    recent = [d for _, d in within]
    kinds = Counter(str(d.kind) for d in recent)
    said = ", ".join(f"{kind} ×{n}" if n > 1 else kind for kind, n in kinds.most_common())
    last = recent[-1]
    minutes = (wall_now - within[0][0]) / 60
    yield Finding(RESTART_LOOP.name, RESTART_LOOP.severity,
                  f"{last.scenario} died {len(recent)} times in {minutes:,.0f} min (>= {count} "
                  f"in {window_s / 60:g} min: {said}); last: {last.title}; each restart meets "
                  f"the same end: {last.action or 'read its log before the next start'}")
