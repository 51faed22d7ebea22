"""When polls happen: on one grid of the poll interval for every source of a process (its
monotonic clock's multiples of the interval), so that a second's readings land together,
and what is derived from them (the panels, the headline figures, the alerts) is read once,
just after (AFTER_POLLS_S), from all of them: a figure derived once for all its readers
(engram_top.model.derived) is then worked out once a second, not once per reader, and a
reading is on the screen a fifth of a second after it is taken rather than up to a second."""

from __future__ import annotations

import time

AFTER_POLLS_S = 0.2  # where the readers of a round of polls come: most polls take less


def until_next(interval: float, after: float = 0.0, *, now: float | None = None,
               at_least: float = 0.0) -> float:
    """Seconds from ``now`` to the next point of the grid of ``interval`` moved on by
    ``after``, the first at least ``at_least`` away. No grid (0 s) without an interval."""
    if interval <= 0:
        return 0.0
    now = time.monotonic() if now is None else now
    wait = interval - (now - after) % interval
    while wait < at_least:
        wait += interval
    return wait
