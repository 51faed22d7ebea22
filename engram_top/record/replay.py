"""Replay: a recording played into a fresh store in recording time, so the same dashboard
shows it on any machine, with play, pause, seek and speed."""


from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.readings import Reading
from collectors.source import SourceName
from engram_top.alerts.monitor import AlertWatch
from engram_top.alerts.thresholds import Thresholds
from engram_top.model.store import Event, RunFacts, RunStore, StoreTopic
from engram_top.record.file_format import (
    LOG_KEEP,
    MAX_SPEED,
    MIN_SPEED,
    copied_fields,
    update_facts,
)
from engram_top.record.recorder import Recording, read_recording
from engram_top.record.replay_file import LazyRecording, open_recording

# --------------------------------------------------------------------------- replay


class ScenarioList:
    """What the app's scenario list needs of a ScenarioFile: ``.scenarios`` by name (plain
    data here: a replay starts nothing)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        name, scenarios = data.get("name"), data.get("scenarios")
        self.name = name if isinstance(name, str) else ""  # a damaged header: no list
        self.scenarios: dict[str, Any] = {k: v for k, v in scenarios.items()
                                          if isinstance(v, dict)} \
            if isinstance(scenarios, dict) else {}


class ReplayStore(RunStore):
    """A RunStore fed from a recording: readings go in without the status-change events the
    store would make of them, since the recording holds those events already."""

    def __init__(self) -> None:
        super().__init__()
        self._quiet = False

    def event(self, level: str, text: str) -> None:
        if not self._quiet:
            super().event(level, text)

    def add_recorded(self, kind: str, reading: Reading[Any]) -> None:
        self._quiet = True
        try:
            self.add(kind, reading)
        finally:
            self._quiet = False

    def put_event(self, event: Event) -> None:
        self.events.append(event)
        self.bump(StoreTopic.EVENTS)
        self._tell("event", event)

    def reset(self) -> None:
        """Empty, as new, but versions only go up: a panel redraws whatever it saw before."""
        keep = {k: getattr(self, k)
                for k in ("versions", "listeners", "node", "scenarios", "clock")}
        self.__dict__.update(RunStore().__dict__)
        self.__dict__.update(keep)
        self._quiet = False
        for key in {*self.versions, *SourceName, *StoreTopic}:
            self.bump(key)


class ReplaySession:
    """A recording played into a fresh store in recording time, with the surface the app
    uses (store, start, close) and a clock for its ages. Controls: play, pause, toggle,
    seek(seconds), seek_by(delta), set_speed(x); position, duration, playing, speed.

    The replay clock is ``origin + position``, origin being the real monotonic time when the
    session was made; readings' monotonic times are rebased on it, so "12 s old" means twelve
    seconds of recording time.
    """

    # The rest of the app's DashboardSession: a replay runs no load and holds no key.
    poll_interval = 0.5  # records are applied as played: the screen redraws at its fastest
    secrets: tuple[str, ...] = ()
    attaching: tuple[str, ...] = ()
    slos: tuple[Any, ...] = ()

    def __init__(self, path: Path | str, *, speed: float = 1.0, paused: bool = False,
                 clock: Callable[[], float] = time.monotonic,
                 session: int | None = None, thresholds: Thresholds | None = None,
                 lazy: bool = False) -> None:
        """``lazy``: open at once and read the rest while it plays (the dashboard's replay);
        otherwise the whole file is read first (a snapshot of a given second)."""
        self._now = clock
        self.origin = clock()
        self.recording: Recording = (open_recording(path, self.origin, session) if lazy
                                     else read_recording(path, self.origin, session))
        self._told_read = False
        self.path = self.recording.path
        self.store = ReplayStore()
        self.store.clock = self.clock  # ages on screen run in recording time
        header = self.recording.header
        self.store.node = str(header.get("node") or "")
        if isinstance(header.get("scenarios"), dict):
            self.store.scenarios = ScenarioList(header["scenarios"])
        self._speed = _clamp_speed(speed)
        self._start_playing = not paused
        self._playing = False
        self._anchor_pos = 0.0  # position at _anchor_real
        self._anchor_real = clock()
        self._index = 0  # the next record to apply
        self._runs: dict[str, RunFacts] = {}
        self._task: asyncio.Task[None] | None = None
        # Evaluated again as the recording plays, with this user's thresholds; its own
        # events already hold what the live run said, so nothing is announced twice.
        self.alerts = AlertWatch(self.store, thresholds, announce=False)
        # What the file holds beside its data (its sessions, lines skipped): said first,
        # and again after every rebuild.
        self.notes: list[str] = [text for _, text in self.recording.notes()]
        self._notes = [Event(time.time(), level, text)
                       for level, text in self.recording.notes()]
        self._put_notes()
        self._apply_until(0.0)

    # ------------------------------------------------------------------ the app's surface
    def clock(self) -> float:
        return self.origin + self.position

    @property
    def replay(self) -> ReplaySession:
        """Itself: the dashboard shows a replay's controls for it."""
        return self

    async def start(self) -> None:
        if isinstance(self.recording, LazyRecording):
            self.recording.start()
        if self._start_playing:
            self.play()
        self._task = asyncio.create_task(self._run(), name="replay")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if isinstance(self.recording, LazyRecording):
            await asyncio.to_thread(self.recording.close)

    @property
    def read_fraction(self) -> float:
        """How much of the recording has been read (1.0 once all of it has)."""
        rec = self.recording
        return rec.fraction if isinstance(rec, LazyRecording) else 1.0

    def close_now(self) -> None:
        """A replay starts no process and keeps no folder: nothing to close without a loop."""

    def left_running(self) -> tuple[()]:
        return ()  # it runs no server

    # A replay starts and stops nothing; the app's keys get a clear answer.
    async def start_scenario(self, name: str, force: bool = False) -> None:
        raise RuntimeError("this is a replay: it cannot start servers")

    async def switch(self, name: str, force: bool = False) -> None:
        raise RuntimeError("this is a replay: it cannot switch servers")

    async def stop_scenario(self) -> None:
        raise RuntimeError("this is a replay: it cannot stop servers")

    async def attach(self, name: str) -> None:
        raise RuntimeError("this is a replay: it cannot attach to servers")

    # ------------------------------------------------------------------ controls
    @property
    def duration(self) -> float:
        return self.recording.duration

    @property
    def position(self) -> float:
        if not self._playing:
            return self._anchor_pos
        pos = self._anchor_pos + (self._now() - self._anchor_real) * self._speed
        return min(pos, self.duration)

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def speed(self) -> float:
        return self._speed

    def play(self) -> None:
        if self.position >= self.duration:
            self.seek(0.0)  # at the end: from the start again, as players do
        self._anchor(self.position)
        self._playing = True

    def pause(self) -> None:
        pos = self.position
        self._playing = False
        self._anchor(pos)
        self._apply_until(pos)

    def toggle(self) -> bool:
        """Play if paused, pause if playing; returns whether it plays now."""
        if self._playing:
            self.pause()
        else:
            self.play()
        return self._playing

    def set_speed(self, x: float) -> float:
        """Speed, clamped to 0.25x..16x; returns the speed now in force."""
        self._anchor(self.position)
        self._speed = _clamp_speed(x)
        return self._speed

    def seek(self, seconds: float) -> float:
        """To ``seconds`` of recording time (clamped to the recording); returns the position.
        Backwards rebuilds the store from the start."""
        target = min(max(0.0, float(seconds)), self.duration)
        records = self.recording.records
        if self._index > 0 and records[self._index - 1][0] > target:
            self._rebuild()
        self._anchor(target)
        self._apply_until(target)
        return target

    def seek_by(self, delta: float) -> float:
        return self.seek(self.position + delta)

    # ------------------------------------------------------------------ internals
    def _anchor(self, pos: float) -> None:
        self._anchor_pos = pos
        self._anchor_real = self._now()

    async def _run(self) -> None:
        records = self.recording.records
        while True:
            pos = self.position
            self._apply_until(pos)
            if self._playing and pos >= self.duration:
                self._playing = False  # the end: stay on the last moment
                self._anchor(self.duration)
            self._tell_read()
            delay = 0.1
            if self._playing and self._index < len(records):
                delay = min(delay, max(0.005, (records[self._index][0] - pos) / self._speed))
            await asyncio.sleep(delay)

    def _tell_read(self) -> None:
        """Once the reading thread is done: the lines it skipped beyond those said at the
        opening; a file it could no longer read, once the replay gets there."""
        rec = self.recording
        if not isinstance(rec, LazyRecording) or self._told_read:
            return
        if rec.error is not None and self._index >= len(rec.records):
            self._told_read = True
            self._note("error", f"{rec.error}: the replay stops here")
            if self._playing:
                self.pause()
        elif rec.loaded:
            self._told_read = True
            for _, text in rec.notes():
                if text not in self.notes:  # more skipped than the opening knew
                    self._note("warning", text)

    def _note(self, level: str, text: str) -> None:
        self.notes.append(text)
        note = Event(time.time(), level, text)
        self._notes.append(note)
        self.store.put_event(note)

    def _put_notes(self) -> None:
        for note in self._notes:
            self.store.put_event(note)

    def _rebuild(self) -> None:
        self.store.reset()
        self.alerts.reset()
        self._runs = {}
        self._index = 0
        self._put_notes()

    def _take_late(self) -> None:
        """Records the reading thread found out of time order, put in their place; one
        before what was applied already means the store is built again up to here."""
        rec = self.recording
        late = rec.take_late() if isinstance(rec, LazyRecording) else []
        if not late:
            return
        earliest = len(rec.records)
        for record in late:
            at = bisect.bisect_right(rec.records, record[0], key=lambda r: r[0])
            rec.records.insert(at, record)
            earliest = min(earliest, at)
        if earliest < self._index:
            self._rebuild()  # then applied again up to where it was, by the caller

    def _apply_until(self, pos: float) -> None:
        self._take_late()
        records = self.recording.records
        while self._index < len(records) and records[self._index][0] <= pos:
            _, kind, payload = records[self._index]
            self._index += 1
            self._apply(kind, payload)
        self.alerts.check()

    def _apply(self, kind: str, payload: Any) -> None:
        store = self.store
        if kind == "reading":
            store.add_recorded(*payload)
        elif kind == "event":
            store.put_event(payload)
        elif kind == "run":
            rid, set_run, fields = payload
            facts = self._runs.get(rid)
            if facts is None:
                # A fresh object each rebuild: a replayed run is mutated as it plays.
                facts = self._runs[rid] = RunFacts(**copied_fields(self.recording.first_runs[rid]))
                facts.log_lines = deque(maxlen=LOG_KEEP)
            update_facts(facts, fields)
            if set_run:
                store.set_run(facts)
            else:
                store.bump(StoreTopic.RUN)
        elif kind == "log":
            rid, lines = payload
            facts = self._runs.get(rid)
            if facts is not None:
                facts.log_lines.extend(lines)
                facts.lines_seen += len(lines)
                store.bump(StoreTopic.RUN)
        elif kind == "load":
            store.load = dict(payload)


def _clamp_speed(x: float) -> float:
    return min(MAX_SPEED, max(MIN_SPEED, float(x)))
