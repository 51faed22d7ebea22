"""A recording opened for the dashboard's replay at once, and read on a thread while it plays.

`read_recording` parses a whole file before anything shows: two seconds for an hour on this
kind of machine. A replay needs only its first seconds to draw its first frame, so this
opens a file in a few milliseconds: one pass over its bytes finds the sessions (their header
lines) and the selected session's last record (its duration, a half-written last line), the
first few hundred lines are read at once (so a damaged file is refused as FILE:LINE as it
always was), and a thread reads the rest in order. The replay applies what has been read;
a seek past it catches up as the thread goes (`fraction` says how far it is).

A damaged line further on does not stop the opening: the thread stops there, `error` says
FILE:LINE and what is wrong, and the replay plays up to it and says so.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from engram_top.recording import Recording, RecordingError, _check_header, _take_record
from engram_top.recording_format import MAX_T

EAGER_LINES = 100  # read before the replay opens: its first frame, and a damaged head
CHUNK = 500  # records a reading thread hands over at a time, in time order
# A header line's start, as the recorder writes it and as a hand-written test file may.
_HEADERS = (b'{"type":"header"', b'{"type": "header"')
_TAIL = 64 * 1024  # how much of the end is read for the duration


class LazyRecording(Recording):
    """One session of a recording file, read as it plays. The same fields as a Recording
    (records, first_runs, duration, ...), with ``records`` growing until ``loaded``."""

    def __init__(self, path: Path, header: dict[str, Any], *, start: int, end: int,
                 first_line: int, duration: float, origin: float, session: int,
                 sessions: int, skipped: int, truncated_tail: bool) -> None:
        super().__init__(path, header, [], {}, skipped=skipped, session=session,
                         sessions=sessions)
        self._start, self._end, self._line = start, end, first_line
        self._duration = duration
        self._origin = origin
        self._truncated_tail = truncated_tail  # the file's last line, half written
        self._pos = start  # bytes read so far
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loaded = False
        self.error: RecordingError | None = None
        self._read(EAGER_LINES)  # raises RecordingError: refused at once, as before

    @property
    def duration(self) -> float:
        return max(self._duration, self.records[-1][0] if self.records else 0.0)

    @property
    def fraction(self) -> float:
        """How much of the session has been read, 0..1."""
        span = self._end - self._start
        return 1.0 if self.loaded or span <= 0 else (self._pos - self._start) / span

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

    def _read_rest(self) -> None:
        try:
            self._read(None)
        except RecordingError as exc:
            self.error = exc  # the replay says so, and plays up to here

    def _read(self, limit: int | None) -> None:
        """Read up to ``limit`` more lines (all with None), handing records over in chunks
        sorted by time (the recorder writes them nearly in order: a reading's time is when
        it was taken, a little before it is written)."""
        chunk: list[tuple[float, str, Any]] = []
        done = 0
        with open(self.path, "rb") as f:
            f.seek(self._pos)
            while self._pos < self._end and (limit is None or done < limit):
                if self._stop.is_set():
                    return
                raw = f.readline(self._end - self._pos)
                self._pos += len(raw)
                self._line += 1
                done += 1
                last = self._pos >= self._end
                self._take(raw, chunk, last)
                if len(chunk) >= CHUNK:
                    self._hand_over(chunk)
        self._hand_over(chunk)
        if self._pos >= self._end:
            self.loaded = True

    def _take(self, raw: bytes, chunk: list[tuple[float, str, Any]], last: bool) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if not line:
            return
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if last and self._truncated_tail:
                return  # the half line a killed recorder leaves: counted at the opening
            raise RecordingError(f"{self.path}:{self._line}: not JSON ({exc.msg} at column "
                                 f"{exc.colno})") from None
        except RecursionError:
            raise RecordingError(f"{self.path}:{self._line}: not a record (nested too deeply "
                                 "to read)") from None
        holder = Recording(self.path, self.header, chunk, self.first_runs)
        try:
            _take_record(holder, obj, self._origin)
        except ValueError as exc:
            raise RecordingError(f"{self.path}:{self._line}: {exc}") from None

    def _hand_over(self, chunk: list[tuple[float, str, Any]]) -> None:
        if chunk:
            chunk.sort(key=lambda r: r[0])  # stable: same-time records keep their order
            self.records.extend(chunk)  # one step: the replay never sees half a chunk
            chunk.clear()


def open_recording(path: Path | str, origin: float = 0.0,
                   session: int | None = None) -> LazyRecording:
    """One session of a recording (by default the last), ready to play at once."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise RecordingError(f"{path}: empty: not an engram-top recording")
    starts = _header_lines(data)
    if not starts or starts[0] != 0:
        # What the full reader says for a file without a header first: its first line.
        first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
        try:
            obj = json.loads(first)
        except json.JSONDecodeError as exc:
            raise RecordingError(f"{path}:1: not JSON ({exc.msg} at column {exc.colno})") \
                from None
        except RecursionError:
            raise RecordingError(f"{path}:1: not a record (nested too deeply to "
                                 "read)") from None
        raise RecordingError(f"{path}:1: not an engram-top recording (no header line)") \
            if not (isinstance(obj, dict) and obj.get("type") == "header") else \
            RecordingError(f"{path}:1: {_header_problem(obj)}")
    index = len(starts) if session is None else session
    if not 1 <= index <= len(starts):
        raise RecordingError(f"{path}: no session {session}: it holds {len(starts)}")
    start = starts[index - 1]
    end = starts[index] if index < len(starts) else len(data)
    head_end = data.find(b"\n", start, end)
    head_end = end if head_end < 0 else head_end
    line_no = data.count(b"\n", 0, start) + 1
    try:
        header = _check_header(json.loads(data[start:head_end]))
    except (ValueError, RecursionError) as exc:
        raise RecordingError(f"{path}:{line_no}: {exc}") from None
    truncated = end == len(data) and not data.endswith(b"\n")
    duration, skipped = _tail(data, head_end, end, truncated)
    return LazyRecording(path, header, start=head_end + 1 if head_end < end else end, end=end,
                         first_line=line_no, duration=duration, origin=origin,
                         session=index, sessions=len(starts), skipped=skipped,
                         truncated_tail=truncated)


def _header_lines(data: bytes) -> list[int]:
    """Where each header line starts: bytes.find, not a regex (a regex's line anchors cost a
    tenth of a second over an hour's file)."""
    out: list[int] = []
    for needle in _HEADERS:
        at = data.find(needle)
        while at >= 0:
            if at == 0 or data[at - 1] == 0x0A:
                out.append(at)
            at = data.find(needle, at + 1)
    return sorted(out)


def _header_problem(obj: Any) -> str:
    try:
        _check_header(obj)
    except ValueError as exc:
        return str(exc)
    return "unreadable header"


def _tail(data: bytes, start: int, end: int, truncated: bool) -> tuple[float, int]:
    """(the latest time among the session's last lines, 1 if its last line is a killed
    recorder's half line). Lines that do not parse are left to the reading to name."""
    tail = data[max(start, end - _TAIL):end].split(b"\n")
    skipped = 0
    if truncated and tail:
        try:
            json.loads(tail[-1])
        except (ValueError, RecursionError):
            skipped = 1
    latest = 0.0
    for raw in tail[-64:]:
        try:
            t = json.loads(raw).get("t")
        except (ValueError, RecursionError, AttributeError):
            continue
        if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= MAX_T:
            latest = max(latest, float(t))  # a damaged time is the reading's to name
    return latest, skipped
