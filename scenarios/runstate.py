"""A run's states, one set for the supervisor's Run and the store's RunFacts.

A StrEnum: each state is its string too, so recordings, snapshot.json and the screens read
"ready" as ever, and an older file's plain strings compare equal.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    LAUNCHING = "launching"  # facts made, the process not yet seen (RunFacts only)
    STARTING = "starting"  # launched, not ready: the start-up log's phases
    READY = "ready"  # serving
    STOPPING = "stopping"  # asked to stop, not gone yet
    STOPPED = "stopped"  # stopped because asked to
    EXITED = "exited"  # was ready, then ended without being asked
    FAILED = "failed"  # ended before ready, or never became ready in time
    ATTACHED = "attached"  # someone else's server, watched: its lifetime is not ours


# A server that is, or may soon be, answering; and one that has ended, for whatever reason.
LIVE = frozenset({RunState.LAUNCHING, RunState.STARTING, RunState.READY, RunState.ATTACHED})
ENDED = frozenset({RunState.STOPPED, RunState.EXITED, RunState.FAILED})
UNASKED_END = frozenset({RunState.EXITED, RunState.FAILED})  # ended without a stop asked
# A server that serves requests now: ready, or someone else's we watch.
SERVING = frozenset({RunState.READY, RunState.ATTACHED})
# A server of ours that a stop or a switch would end: starting up or ready.
UNDER_WAY = frozenset({RunState.STARTING, RunState.READY})
# Before ready: its start-up shows as progress.
STARTING_UP = frozenset({RunState.LAUNCHING, RunState.STARTING})
# Asked to stop: going, or gone.
STOP_ASKED = frozenset({RunState.STOPPING, RunState.STOPPED})
