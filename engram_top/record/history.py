"""History from before you looked: an agent's recordings of a server, put behind the live
data when a dashboard (or a snapshot) attaches to that server, so its charts and history
go back as far as the agent kept (the last hour, by default), and say since when.

Only the series are taken, on the live session's clock (the recording's wall time less the
difference between the wall and the monotonic clock now): the readings the panels show and
the events stay the live ones.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.pages import split_userinfo
from collectors.readings import Reading
from engram_top.model.store import RunStore
from engram_top.record.file_format import RecordingError
from engram_top.record.reader import read_recording
from engram_top.record.rotation import PATTERN

WINDOW_S = 3600.0  # how far back: the charts' longest span


def recorded(folder: Path, urls: Sequence[str], window_s: float = WINDOW_S
             ) -> list[tuple[str, Reading[Any]]]:
    """The readings of ``urls``' servers (and of their node) that the agent's files in
    ``folder`` hold from the last ``window_s`` seconds, oldest first, on this process's
    monotonic clock: (source key, reading). Files that cannot be read, or of another
    server, are passed over. Pure file work: run it off the event loop."""
    wanted = {split_userinfo(u)[0].rstrip("/") for u in urls}
    now_wall = time.time()
    offset = now_wall - time.monotonic()
    dated = []
    try:
        for p in folder.glob(PATTERN):
            with contextlib.suppress(OSError):  # one gone meanwhile
                dated.append((p.stat().st_mtime, p))
    except OSError:
        return []
    files = [p for mtime, p in sorted(dated) if mtime >= now_wall - window_s]
    out: list[tuple[str, Reading[Any]]] = []
    for path in files:
        try:
            with path.open() as f:
                header = json.loads(f.readline())
            rec = read_recording(path, origin=float(header["wall"]) - offset)
        except (OSError, ValueError, KeyError, TypeError, RecordingError):
            continue
        servers = {str(run.get("url") or run.get("scenario") or "").rstrip("/")
                   for run in rec.first_runs.values()}
        if not servers & wanted:
            continue
        since = time.monotonic() - window_s
        out += [payload for _, kind, payload in rec.records
                if kind == "reading" and payload[1].at >= since]
    return out


def put_behind(store: RunStore, readings: list[tuple[str, Reading[Any]]]) -> float | None:
    """The recorded readings into the store's series only; the wall time of the earliest,
    None when there was none."""
    earliest: float | None = None
    for key, reading in readings:
        store.add_history(key, reading)
        earliest = reading.at if earliest is None else min(earliest, reading.at)
    return None if earliest is None else earliest + time.time() - time.monotonic()
