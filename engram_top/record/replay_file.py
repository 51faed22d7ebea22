"""A recording opened for the dashboard's replay at once, and read on a thread while it plays.

`read_recording` parses a whole session before anything shows: two seconds for an hour on
this kind of machine. A replay needs only its first seconds to draw its first frame, so this
opens a file in a few milliseconds: the scan finds the sessions (engram_top.record.scan),
the end of the selected one gives its duration (and whether its last line is half written),
the first hundred lines are read at once, and a thread reads the rest in order. The replay
applies what has been read; a seek past it catches up as the thread goes (`fraction` says
how far it is).

A line that cannot be read is skipped and named (``skips``), as the whole read does; a
record earlier in time than what was handed over already waits in ``take_late`` for the
replay to put in its place. Only a file that can no longer be read stops the thread:
``error`` says so, and the replay plays up to there.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from engram_top.record.file_format import MAX_T, RecordingError
from engram_top.record.reader import Recording, SessionReader, new_recording
from engram_top.record.scan import (
    Scan,
    Skip,
    Span,
    open_file,
    parse_line,
    read_lines,
    scan,
)

EAGER_LINES = 100  # read before the replay opens: its first frame
CHUNK = 500  # records a reading thread hands over at a time, in time order
_TAIL = 64 * 1024  # how much of the end is read for the duration


class LazyRecording(Recording):
    """One session of a recording file, read as it plays. The same fields as a Recording
    (records, first_runs, duration, skips ...), with ``records`` growing until ``loaded``."""

    def __init__(self, found: Scan, span: Span, origin: float) -> None:
        base = new_recording(found, span)
        super().__init__(base.path, base.header, [], {}, skips=base.skips,
                         session=base.session, sessions=base.sessions, lines=base.lines)
        index = found.spans.index(span)
        self._reader = SessionReader(self, found.skips, origin)
        self._start, self._end = span.start, span.end
        self._pos, self._line = span.start, span.line + 1  # bytes and lines read so far
        last = index == len(found.spans) - 1
        self._duration, tail_skip = _tail(found.path, span, last and found.truncated)
        self._tail_line = None if tail_skip is None else tail_skip.line
        if tail_skip is not None:  # known now: said at the opening with the rest
            self.skips.append(tail_skip)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._late: list[tuple[float, str, Any]] = []
        self._thread: threading.Thread | None = None
        self.loaded = False
        self.error: RecordingError | None = None
        self._read(EAGER_LINES)  # raises RecordingError: a file that cannot be read

    @property
    def duration(self) -> float:
        return max(self._duration, self.records[-1][0] if self.records else 0.0)

    @property
    def fraction(self) -> float:
        """How much of the session has been read, 0..1."""
        span = self._end - self._start
        if self.loaded or span <= 0:
            return 1.0
        # Never 1 before `loaded`: the last lines are read before their chunk is handed over,
        # and a reader told "all read" must find every record in `records`.
        return min(0.999, (self._pos - self._start) / span)

    def start(self) -> None:
        """Read the rest on a thread of its own."""
        if self._thread is None and not self.loaded:
            self._thread = threading.Thread(target=self._read_rest, name="recording",
                                            daemon=True)
            self._thread.start()

    def load_all(self) -> None:
        """Read the rest here and now (a headless snapshot of a given second needs it)."""
        if self._thread is not None:
            self._thread.join()
        elif not self.loaded:
            self._read(None)
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def take_late(self) -> list[tuple[float, str, Any]]:
        """Records read after later ones were handed over (the file had them out of time
        order): the replay puts them in their place."""
        with self._lock:
            late, self._late = self._late, []
        return late

    def _read_rest(self) -> None:
        try:
            self._read(None)
        except RecordingError as exc:
            self.error = exc  # the replay says so, and plays up to here

    def _read(self, limit: int | None) -> None:
        """Read up to ``limit`` more lines (all with None), handing records over in chunks
        sorted by time."""
        chunk: list[tuple[float, str, Any]] = []
        done = 0
        try:
            with open_file(self.path) as f:
                for number, raw, newline, pos in read_lines(f, self._pos, self._end,
                                                            self._line):
                    if self._stop.is_set():
                        return
                    self._pos, self._line = pos, number + 1
                    if number != self._tail_line:  # the half last line: skipped already
                        record = self._reader.take(number, raw, newline)
                        if record is not None:
                            chunk.append(record)
                    done += 1
                    if len(chunk) >= CHUNK:
                        self._hand_over(chunk)
                    if limit is not None and done >= limit:
                        break
        except OSError as exc:
            raise RecordingError(f"{self.path}:{self._line}: cannot read further: "
                                 f"{exc.strerror or exc}") from None
        finally:
            self._hand_over(chunk)
        if self._pos >= self._end:
            self.loaded = True

    def _hand_over(self, chunk: list[tuple[float, str, Any]]) -> None:
        if not chunk:
            return
        chunk.sort(key=lambda r: r[0])  # stable: same-time records keep their order
        with self._lock:
            latest = self.records[-1][0] if self.records else None
            cut = 0
            if latest is not None:
                while cut < len(chunk) and chunk[cut][0] < latest:
                    cut += 1
            self._late.extend(chunk[:cut])
            self.records.extend(chunk[cut:])  # one step: the replay never sees half a chunk
        chunk.clear()


def open_recording(path: Path | str, origin: float = 0.0,
                   session: int | None = None) -> LazyRecording:
    """One session of a recording (by default the last readable one), ready to play at
    once. RecordingError when the file cannot be read or holds no readable session."""
    found = scan(Path(path))
    return LazyRecording(found, found.pick(session), origin)


def _tail(path: Path, span: Span, truncated: bool) -> tuple[float, Skip | None]:
    """(the latest time among the session's last lines, its last line when that is a
    killed recorder's half line). Other lines that do not parse are the reading's to name."""
    begin = max(span.start, span.end - _TAIL)
    try:
        with open_file(path) as f:
            f.seek(begin)
            tail = f.read(span.end - begin).split(b"\n")
    except (OSError, RecordingError):
        return 0.0, None  # the reading says what is wrong
    skip = None
    whole = len(tail) > 1 or begin == span.start  # the last line, not the end of a long one
    if truncated and whole and tail[-1].strip():
        _, problem = parse_line(tail[-1], newline=False)
        if problem is not None:
            skip = Skip(span.last_line, problem)
    latest = 0.0
    for raw in tail[-64:]:
        try:
            t = json.loads(raw).get("t")
        except (ValueError, RecursionError, AttributeError):
            continue
        if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= MAX_T:
            latest = max(latest, float(t))  # a damaged time is the reading's to name
    return latest, skip
