"""A run's data and how it reads: the store, its facts and views, formatted; no I/O."""

from scenarios.runstate import (
    ENDED,
    LIVE,
    SERVING,
    STARTING_UP,
    STOP_ASKED,
    UNASKED_END,
    UNDER_WAY,
    RunState,
)

__all__ = ["ENDED", "LIVE", "SERVING", "STARTING_UP", "STOP_ASKED", "UNASKED_END",
           "UNDER_WAY", "RunState"]
