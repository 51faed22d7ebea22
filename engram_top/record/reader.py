"""Reading a recording file back: one session's records for a replay, every session's runs
for a comparison. What cannot be read is skipped and said (engram_top.record.scan finds
the sessions and names the damage); only a file without any readable session is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from engram_top.compare.run_result import RunResult
from engram_top.compare.runs import run_results
from engram_top.model.store import Event, RunFacts
from engram_top.record.file_format import (
    MAX_T,
    Patch,
    RecordingError,
    check_time,
    copied_fields,
    decode_facts_fields,
    decode_fields,
    decode_reading,
    unloose,
    update_facts,
)
from engram_top.record.scan import (
    Scan,
    Skip,
    Span,
    open_file,
    parse_line,
    read_lines,
    reason_text,
    scan,
    skipped_text,
)
from scenarios import engines

RECORD_TYPES = ("reading", "event", "run", "log", "load", "end")


@dataclasses.dataclass
class Recording:
    """A parsed recording: monotonic times already on the replay's clock (``origin`` + t).

    One session of a file: a file that two sessions wrote to (an old --record path used
    twice) holds two, each from its header line on; ``session`` says which of ``sessions``
    this is (1-based). ``skips``: the lines that could not be read (the file's, outside any
    session, and this session's own)."""

    path: Path
    header: dict[str, Any]
    records: list[tuple[float, str, Any]]  # (t, type, payload), in time order
    first_runs: dict[str, dict[str, Any]]  # run id -> the fields of its first record
    skips: list[Skip] = dataclasses.field(default_factory=list)
    session: int = 1
    sessions: int = 1
    lines: tuple[int, int] = (1, 1)  # this session's first and last line
    disorder: list[int] = dataclasses.field(default_factory=list)  # lines earlier in time

    @property
    def duration(self) -> float:
        return self.records[-1][0] if self.records else 0.0

    @property
    def skipped(self) -> int:
        """Lines skipped."""
        return sum(s.count for s in self.skips)

    def notes(self) -> list[tuple[str, str]]:
        """(level, text) a reader says of this file beside its data: its sessions, the
        lines skipped and why, records out of time order."""
        out: list[tuple[str, str]] = []
        if self.sessions > 1:
            out.append(("info", f"{self.path}: session {self.session} of {self.sessions}, "
                                f"lines {self.lines[0]}-{self.lines[1]} (--session N for "
                                "another)"))
        skipped = skipped_text(self.path, self.skips)
        if skipped is not None:
            out.append(("warning", skipped + "; the rest was read"))
        if self.disorder:
            n = len(self.disorder)
            out.append(("warning", f"{self.path}: {n} record{'s' * (n != 1)} earlier than "
                                   f"the one before (first on line {self.disorder[0]}): "
                                   "played in time order"))
        return out


class SessionReader:
    """Takes one session's lines, one at a time, into a Recording: a record, or a Skip."""

    def __init__(self, rec: Recording, said: list[Skip], origin: float,
                 kinds: tuple[str, ...] | None = None) -> None:
        self.rec, self.origin = rec, origin
        self.said = {s.line for s in said}  # named by the scan already (a boundary's half line)
        self.kinds = kinds  # record types decoded and kept (None: all)
        self.latest = 0.0

    def take(self, number: int, raw: bytes | None,
             newline: bool) -> tuple[float, str, Any] | None:
        if (raw is not None and not raw.strip()) or number in self.said:
            return None  # a blank line, or one the scan named
        obj, problem = parse_line(raw, newline=newline)
        if problem is None:
            try:
                record = self._record(obj)
            except ValueError as exc:
                problem = str(exc)
            except RecursionError:
                problem = "not a record (nested too deeply to read)"
            except Exception as exc:  # noqa: BLE001 (a line never stops the reading)
                problem = f"cannot be read ({type(exc).__name__}: {exc})"
            else:
                if record is not None and record[0] < self.latest:
                    self.rec.disorder.append(number)
                elif record is not None:
                    self.latest = record[0]
                return record
        self.rec.skips.append(Skip(number, reason_text(problem)))
        return None

    def _record(self, obj: dict[str, Any]) -> tuple[float, str, Any] | None:
        kind = obj.get("type")
        if kind == "header":
            raise ValueError("a session header inside a session (its keys in another order "
                             "than the recorder writes them?)")
        if self.kinds is not None and kind in RECORD_TYPES and kind not in self.kinds:
            return None  # not wanted: not decoded
        return take_record(obj, self.origin, self.rec.first_runs)


def read_session(found: Scan, span: Span, origin: float = 0.0,
                 kinds: tuple[str, ...] | None = None) -> Recording:
    """One session read whole, records sorted by time."""
    rec = new_recording(found, span)
    reader = SessionReader(rec, found.skips, origin, kinds)
    with open_file(found.path) as f:
        try:
            for number, raw, newline, _ in read_lines(f, span.start, span.end, span.line + 1):
                record = reader.take(number, raw, newline)
                if record is not None:
                    rec.records.append(record)
        except OSError as exc:
            raise RecordingError(f"{found.path}: cannot read: {exc.strerror or exc}") from None
    rec.records.sort(key=lambda r: r[0])  # stable: same-time records keep their order
    return rec


def new_recording(found: Scan, span: Span) -> Recording:
    """An empty Recording of a session, the file's own skips already in it."""
    return Recording(found.path, span.header, [], {}, skips=list(found.skips),
                     session=span.number, sessions=len(found.spans),
                     lines=(span.line, span.last_line))


def read_sessions(path: Path | str, origin: float = 0.0,
                  kinds: tuple[str, ...] | None = None) -> list[Recording]:
    """Every readable session of a recording file, in file order; RecordingError when the
    file holds none. The file's own skips are in the first one's."""
    found = scan(Path(path))
    out: list[Recording] = []
    for span in found.spans:
        if span.problem is None:
            rec = read_session(found, span, origin, kinds)
            if out:
                rec.skips = [s for s in rec.skips if s not in found.skips]
            out.append(rec)
    if not out:
        found.pick(None)  # raises: what the first session is
    return out


def read_recording(path: Path | str, origin: float = 0.0,
                   session: int | None = None) -> Recording:
    """One session of a recording: ``session`` (1-based), by default the last one."""
    found = scan(Path(path))
    return read_session(found, found.pick(session), origin)


def is_recording(path: Path | str) -> bool:
    """Whether the file holds a recording's header line near its start (an unreadable file:
    False). A header after some damage counts: the readers skip the damage."""
    try:
        with open_file(Path(path)) as f:
            head = f.read(1 << 20)
    except (OSError, RecordingError):
        return False
    try:
        obj = json.loads(head.split(b"\n", 1)[0])
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict) and obj.get("type") == "header" and "format" in obj:
        return True
    return any(needle in head for needle in (b'{"type":"header","format"',
                                             b'{"type": "header", "format"'))


def take_record(obj: dict[str, Any], origin: float,
                first_runs: dict[str, dict[str, Any]]) -> tuple[float, str, Any]:
    """A record object as (t, type, payload); ValueError says what is wrong with it."""
    kind = obj.get("type")
    t = obj.get("t")
    if kind not in RECORD_TYPES:
        raise ValueError(f"unknown record type {reason_text(repr(kind))} (from a newer "
                         "engram-top?)")
    if not isinstance(t, int | float) or isinstance(t, bool):
        raise ValueError(f"{kind}: 't' missing or not a number")
    if not 0 <= t <= MAX_T:  # also NaN
        raise ValueError(f"{kind}: 't' is {t}: not a time within a recording "
                         f"(0 to {MAX_T / 86400:.0f} days from its start)")
    payload: Any = None
    if kind == "reading":
        if not isinstance(obj.get("kind"), str):
            raise ValueError("reading: 'kind' missing")
        payload = (obj["kind"], decode_reading(obj.get("reading"), origin, "reading"))
    elif kind == "event":
        ev = {k: obj.get(k) for k in ("wall", "level", "text")}
        check_time(ev["wall"], "event.wall")
        payload = decode_fields(Event, ev, "event")
    elif kind == "run":
        payload = _run_payload(obj, origin, first_runs)
    elif kind == "log":
        lines = obj.get("lines")
        if not isinstance(obj.get("run"), str) or not isinstance(lines, list) or not all(
                isinstance(x, list) and len(x) == 2 and isinstance(x[1], str)
                and isinstance(x[0], int | float) and not isinstance(x[0], bool)
                and math.isfinite(x[0]) for x in lines):
            raise ValueError("log: expected 'run' and 'lines' as [[t, text], ...]")
        payload = (obj["run"], [(float(a) + origin, s) for a, s in lines])
    elif kind == "load":
        payload = unloose(obj["load"]) if isinstance(obj.get("load"), dict) else None
        if not isinstance(payload, dict):
            raise ValueError("load: expected an object")
        check_load(payload)
    return float(t), kind, payload


_LOAD_COUNTS = ("concurrency", "sent", "completed", "failed", "output_tokens", "good")


def check_load(load: dict[str, Any]) -> None:
    """The synthetic load's counters as the session writes them (the panel reads them)."""
    if not load:
        return  # no load: as a fresh store has it
    missing = [k for k in ("concurrency", "completed", "failed") if k not in load]
    if missing:
        raise ValueError(f"load: missing {missing}")
    for key in _LOAD_COUNTS:
        value = load.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"load.{key}: expected a whole number, got {value!r}"[:200])
    node_s = load.get("node_s")
    if node_s is not None and (isinstance(node_s, bool) or not isinstance(node_s, int | float)
                               or not math.isfinite(node_s)):
        raise ValueError(f"load.node_s: expected seconds, got {node_s!r}"[:200])
    if not isinstance(load.get("last_error"), str | None):
        raise ValueError("load.last_error: expected text")


def _run_payload(obj: dict[str, Any], origin: float,
                 first_runs: dict[str, dict[str, Any]]) -> tuple[str, bool, dict[str, Any]]:
    rid = obj.get("run")
    if not isinstance(rid, str):
        raise ValueError("run: 'run' missing")
    fields = decode_facts_fields(obj.get("facts"), origin, "run.facts")
    if rid not in first_runs:
        if any(isinstance(v, Patch) for v in fields.values()):
            raise ValueError(f"run {rid}: its first record patches what it never set")
        try:
            RunFacts(**fields)  # the first record of a run must hold all it needs
        except TypeError as exc:
            raise ValueError(f"run {rid}: its first record lacks fields ({exc})") from None
        # Recordings from before runs carried their engine's own-poll patterns (or its
        # name) were all of servers that speak the default engine's dialect; those from
        # before they carried its words, of the engine they name.
        default = engines.get(engines.DEFAULT)
        fields.setdefault("own_polls", default.own_polls)
        fields.setdefault("engine", default.speaks)
        if "words" not in fields and isinstance(fields["engine"], str):
            fields["words"] = dict((engines.speaking(fields["engine"]) or default).words)
        first_runs[rid] = fields
    return rid, bool(obj.get("set")), fields


def runs_from_recording(path: Path | str, notes: list[str] | None = None) -> list[RunResult]:
    """Every run of a recording that became ready and has figures, as RunResults for the
    comparison (source "recording:<file name>", trials numbered per scenario from 0). A run
    still serving when the recording ended counts with the figures it had then. What could
    not be read is said in ``notes``."""
    done = [r for r in facts_from_recording(path, notes) if r.ready_at is not None]
    return run_results(done, source=f"recording:{Path(path).name}")


def facts_from_recording(path: Path | str, notes: list[str] | None = None) -> list[RunFacts]:
    """Every run of a recording (each session's), its facts as they last stood."""
    sessions = read_sessions(path, kinds=("run",))
    done: list[RunFacts] = []
    for rec in sessions:  # every session of the file: run ids are per session
        if notes is not None:
            skipped = skipped_text(rec.path, rec.skips)
            if skipped is not None:
                notes.append(skipped + "; its runs were read from the rest")
        runs: dict[str, RunFacts] = {}
        for _, kind, payload in rec.records:
            if kind == "run":
                rid, _, fields = payload
                if rid not in runs:  # its first record in the file: in time, it may not be
                    runs[rid] = RunFacts(**copied_fields(rec.first_runs[rid]))
                update_facts(runs[rid], fields)
        done += runs.values()
    return done
