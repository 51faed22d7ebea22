"""Whose requests a stop or a switch would cut off: the rule the dashboard asks by.

The load this dashboard drives itself (the demo's, or `run`'s unless --no-load) is a closed
loop of synthetic requests that starts again on the next server once it is ready: stopping
it loses nobody's work, so it never asks. Requests beyond it are another client's (a user,
a benchmark, another tool): those are what a confirmation protects.
"""

from __future__ import annotations

from collectors.source import SourceName
from engram_top.model.facts import kv_facts
from engram_top.model.store import RunStore


def own_streams(store: RunStore) -> int:
    """How many requests this dashboard's own load can have in flight: its streams (a
    closed loop holds at most one request per stream), 0 without a load."""
    streams = store.load.get("concurrency") if store.load else None
    return streams if isinstance(streams, int) and not isinstance(streams, bool) \
        and streams > 0 else 0


def others_in_flight(store: RunStore) -> int:
    """Requests running or queued on the watched server beyond what this dashboard's own
    load can hold (a lower bound on the other clients' share: the server counts them all
    alike)."""
    if _read_before_ready(store):
        return 0
    kv = kv_facts(store)
    busy = 0 if kv is None else (kv.running or 0) + (kv.queued or 0)
    return max(0, busy - own_streams(store))


def _read_before_ready(store: RunStore) -> bool:
    """The server's newest page was read before it was ready (or it is still starting): the
    request it ran then was its own warm-up (SGLang sends one /generate before it says
    ready), not another client's. Counted as one, it asked before every switch made in the
    half second after a server came up."""
    run, reading = store.run, store.last_ok.get(SourceName.SERVER)
    if run is None or reading is None:
        return False
    return run.ready_at is None or reading.at <= run.ready_at


def why_ask(store: RunStore) -> str | None:
    """Why stopping the watched server now would cut off someone, or None: it is idle, or
    every request in flight may be this dashboard's own load's."""
    others = others_in_flight(store)
    if not others:
        return None
    own = own_streams(store)
    besides = f" besides this dashboard's load of {own}" if own else ""
    return f"{others} requests from other clients are running or queued{besides}"
