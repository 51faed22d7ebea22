"""Recording: every reading, event, run-facts change, load figure and server log line of a
session appended to a JSON-lines file as it arrives (engram_top.record.file_format says what
the lines hold). Reading such a file back (runs for the comparison, records for a replay)
is engram_top.record.reader's; its names are here too, where callers have always found them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.readings import Reading
from collectors.source import SourceKey
from engram_top.alerts.definitions import RECORDING
from engram_top.model import facts as facts_mod
from engram_top.model.redact import redact, redact_text
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import (
    FACTS_S,
    FORMAT,
    PATCH_FIELDS,
    TICK_S,
    encode_facts,
    encode_reading,
    engram_top_version,
    loose,
    patch_of,
    scenarios_plain,
)
from engram_top.record.file_format import RecordingError as RecordingError
from engram_top.record.reader import Recording as Recording
from engram_top.record.reader import is_recording as is_recording
from engram_top.record.reader import read_recording as read_recording
from engram_top.record.reader import read_sessions as read_sessions
from engram_top.record.reader import runs_from_recording as runs_from_recording
from engram_top.record.retention import Retention, said, trim
from engram_top.settings.paths import state_base
from scenarios.private import open_private

# --------------------------------------------------------------------------- recording


def default_path(state_dir: Path | None = None) -> Path:
    """<state_dir>/recordings/<local time>.jsonl; without a state folder, the per-user one."""
    if state_dir is None:
        state_dir = state_base()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return state_dir / "recordings" / f"{stamp}-{os.getpid()}.jsonl"


def fresh_path(path: Path) -> Path:
    """``path``, or the first free ``STEM-N.jsonl`` beside it when it already holds
    something: one file, one session (appending a second would make both unreadable as
    one)."""
    n = 2
    candidate = path
    while candidate.is_file() and candidate.stat().st_size > 0:
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        n += 1
    return candidate


KEEP_RECORDINGS = 50  # sessions a default folder keeps, whatever its retention allows
TRIM_S = 3600.0  # how often a recording kept within a retention looks at its folder again


class Recorder:
    """Follows a RunStore (store.listeners) and appends what it takes in to a JSON-lines file.

    start() opens the file (and its folder) and attaches; close() samples a last time, writes
    an "end" record and closes. What the store tells it reaches the OS at once (a write a
    reading); a tick task on the running event loop (started with the first record) looks
    at the run's facts once a second, and at a load's figures four times a second while one
    runs. On any write failure (disk full, unwritable path) the recorder stops, says so once
    in the store's events, and the session goes on.
    """

    def __init__(self, store: RunStore, path: Path | str, *,
                 clock: Callable[[], float] = time.monotonic, keep: Retention | None = None,
                 keep_files: int | None = None) -> None:
        self.store = store
        self.path = Path(path)
        self.clock = clock
        # A default folder's retention: the older sessions beside this one past it are
        # removed as it starts and hourly while it runs (never this one), and that is said.
        self.keep = keep
        self.keep_files = keep_files
        self._trimmed_at = float("-inf")
        self.origin = clock()
        self.wall0 = time.time()
        self.records = 0  # lines written, header included
        self.last_t: float | None = None  # "t" of the last record written
        self.error: str | None = None
        self._file: Any = None
        self._closed = False
        self._header = False
        self._dirty = False
        self._tick: asyncio.Task[None] | None = None
        self._run_ids: dict[int, str] = {}  # id(RunFacts) -> "r1", ...
        self._run_refs: list[RunFacts] = []  # keeps the ids above from being reused
        self._plain: dict[str, dict[str, Any]] = {}  # run id -> its facts last written, unredacted
        self._last_line: dict[str, Any] = {}  # run id -> the last log entry written (identity)
        self._run_version = -1
        self._facts_at = float("-inf")  # when facts mutated in place were last looked at
        self._load: Any = {}  # as a fresh store (and a replay) starts
        # Secret values seen in the scenario definitions (API keys, tokens): scrubbed from
        # events and log lines too (SGLang logs its whole ServerArgs, api_key included).
        self.secrets: set[str] = set()

    @property
    def active(self) -> bool:
        return self._file is not None and not self._closed

    def start(self) -> Recorder:
        try:
            if not self.path.parent.exists():  # a file in its place: open says "Not a directory"
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # 0600: a recording holds the servers' log lines (scrubbed, but still theirs).
            self._file = open_private(self.path, "a")
        except OSError as exc:
            self._fail(exc)
            return self
        scenarios_plain(self.store.scenarios, self.secrets)  # learn the secrets first
        self.store.listeners.append(self._on_store)
        if self.store.run is not None or self.store.latest:
            self._guard(self._catch_up)  # attached late: what the store holds already
        self._trim()  # said in the events, and so in this recording
        return self

    def close(self) -> None:
        """Sample once more, mark the end, flush and close. Safe to call twice."""
        if self._closed:
            return
        if self._file is not None:
            self._guard(self._finish)
        self._stop()

    def sample(self) -> None:
        """Write run facts, log lines and load that changed since the last sample."""
        def both() -> None:
            self._sample(force=True)
            self._flush()
        self._guard(both)

    # ------------------------------------------------------------------ internals
    def _on_store(self, what: str, payload: Any) -> None:
        self._guard(lambda: self._take(what, payload))

    def _take(self, what: str, payload: Any) -> None:
        self._start_tick()
        if what == "run":
            self._write_run(payload, set_run=True)
        elif what == "event":
            self._write({"type": "event", "wall": payload.wall, "level": payload.level,
                         "text": redact_text(payload.text, self.secrets)})
        elif what == "reading":
            self._write_reading(*payload)
        self._sample(force=False)
        self._flush()

    def _write_reading(self, key: SourceKey, reading: Reading[Any]) -> None:
        # Any data type goes: one without a format of its own as its plain fields.
        self._write({"type": "reading", "kind": str(key),
                     "reading": encode_reading(reading, self.origin)})

    def _guard(self, fn: Callable[[], None]) -> None:
        """A listener must not raise: a failure stops the recording, the session goes on."""
        if self._closed or self._file is None:
            return
        try:
            fn()
        except Exception as exc:  # disk full, a closed file, data it cannot encode
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        self.error = f"{type(exc).__name__}: {reason}" if not isinstance(exc, OSError) else reason
        self._stop()
        message = f"recording stopped: {self.path}: {self.error}"
        self.store.event("error", message)
        # Standing, so it shows until quit (the events line scrolls off in a second).
        self.store.conditions[RECORDING.name] = message

    def _stop(self) -> None:
        self._closed = True
        # A new list, not remove(): the store may be iterating the old one right now.
        self.store.listeners = [f for f in self.store.listeners if f != self._on_store]
        if self._tick is not None and not self._tick.done():
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                self._tick.cancel()
        if self._file is not None:
            # A close that fails to flush: that data is lost either way.
            with contextlib.suppress(OSError):
                self._file.close()

    def _finish(self) -> None:
        self._sample(force=True)
        self._write({"type": "end"})
        self._file.flush()
        os.fsync(self._file.fileno())

    def _start_tick(self) -> None:
        if self._tick is not None and not self._tick.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: writes still flush when due
        self._tick = loop.create_task(self._ticker(), name="recorder tick")

    async def _ticker(self) -> None:
        # Four times a second only while a load's figures move (the demo's): waking the
        # event loop four times a second cost the agent a sixth of its CPU under load.
        while not self._closed:
            await asyncio.sleep(TICK_S if self.store.load else FACTS_S)
            self._guard(self._on_tick)

    def _trim(self) -> None:
        if self.keep is None:
            return
        self._trimmed_at = self.clock()
        try:
            gone = trim(self.path.parent, "*.jsonl", self.keep, writing=self.path,
                        max_files=self.keep_files)
        except Exception as exc:  # a folder it cannot list: said, and the recording goes on
            self.store.event("warning", f"recordings: cannot trim {self.path.parent}: {exc}")
            return
        if gone:
            self.store.event("info", said(gone, self.path.parent, self.keep))

    def _on_tick(self) -> None:
        now = self.clock()
        if self.keep is not None and now - self._trimmed_at >= TRIM_S:
            self._trim()
        due = now - self._facts_at >= FACTS_S
        if due:
            self._facts_at = now
        self._sample(force=due)
        self._flush()

    def _flush(self) -> None:
        """What was written reaches the OS: once a store event or a tick is taken, so a
        killed process loses only the record being written (a write(2) a reading)."""
        if self._dirty:
            self._file.flush()
            self._dirty = False

    def _write(self, record: dict[str, Any]) -> None:
        if not self._header:
            self._header = True
            self._write_line({"type": "header", "format": FORMAT,
                              "engram_top": engram_top_version(), "node": self.store.node,
                              "wall": self.wall0, "monotonic": self.origin,
                              "scenarios": scenarios_plain(self.store.scenarios,
                                                           self.secrets)})
        t = self.clock() - self.origin
        self._write_line({"type": record["type"], "t": t,
                          **{k: v for k, v in record.items() if k != "type"}})
        self.last_t = t

    def _write_line(self, record: dict[str, Any]) -> None:
        try:
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a NaN somewhere: null, so any JSON reader takes the file
            line = json.dumps(facts_mod.finite_json(record), separators=(",", ":"))
        self._file.write(line + "\n")
        self.records += 1
        self._dirty = True

    def _run_id(self, facts: RunFacts) -> str:
        rid = self._run_ids.get(id(facts))
        if rid is None:
            rid = self._run_ids[id(facts)] = f"r{len(self._run_ids) + 1}"
            self._run_refs.append(facts)
        return rid

    def _write_run(self, facts: RunFacts, set_run: bool = False) -> None:
        rid = self._run_id(facts)
        now = encode_facts(facts, self.origin)
        plain = self._plain.get(rid, {})
        # Compared before redaction, and only the fields that changed redacted: redacting a
        # run's whole facts every second was the recorder's largest cost. Redaction is a
        # function of the value alone, so an unchanged field's redacted form is unchanged.
        changed = redact({k: v for k, v in now.items() if k not in plain or plain[k] != v},
                         self.secrets)
        for name in PATCH_FIELDS:  # against the field as last written (redacted again)
            if name in changed and name in plain:
                patch = patch_of(redact(plain[name], self.secrets), changed[name])
                if patch is not None:
                    changed[name] = patch
        if changed or set_run:
            self._write({"type": "run", "run": rid, "set": set_run, "facts": changed})
            self._plain[rid] = now
        self._write_log(rid, facts)

    def _write_log(self, rid: str, facts: RunFacts) -> None:
        lines = facts.log_lines
        if not lines:
            return
        last = self._last_line.get(rid)
        if last is not None and lines[-1] is last:
            return
        new = []
        for entry in reversed(lines):  # the entries after the last one written
            if entry is last:
                break
            new.append(entry)
        new.reverse()
        self._last_line[rid] = lines[-1]
        self._write({"type": "log", "run": rid,
                     "lines": [[at - self.origin, redact_text(text, self.secrets)]
                               for at, text in new]})

    def _sample(self, force: bool) -> None:
        version = self.store.versions.get("run", 0)
        if force or version != self._run_version:
            self._run_version = version
            for facts in self.store.runs or list(self.store.history.values()):
                self._write_run(facts)
        load = loose(self.store.load)
        if load != self._load:
            self._load = load
            self._write({"type": "load", "load": load})

    def _catch_up(self) -> None:
        for facts in self.store.runs:  # each set, so the replay's history and runs hold it
            if facts is not self.store.run:
                self._write_run(facts, set_run=True)
        if self.store.run is not None:  # set last: set_run drops the server's readings
            self._write_run(self.store.run, set_run=True)
        for e in self.store.events:
            self._write({"type": "event", "wall": e.wall, "level": e.level,
                         "text": redact_text(e.text, self.secrets)})
        for key, reading in self.store.readings.items():
            good = self.store.good.get(key)
            if good is not None and good is not reading:
                self._write_reading(key, good)
            self._write_reading(key, reading)
        self._flush()
