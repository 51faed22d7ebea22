"""Finding a recording file's sessions and reading its lines, whatever a crash left in it.

A recording is JSON lines, one session after another, each from its header line on. A
killed recorder leaves a half-written last line; a later append (an older engram-top, a
--record file used again) then writes its header right after that half line, on the same
line; some filesystems leave a run of NUL bytes where a crash cut the file. None of that
makes the rest unreadable: the scan finds every header (at a line's start, or glued after
the damage), each session is read from its header on, and every line that cannot be read is
skipped and named (a Skip: its line and why) for the readers to say.

The file is read in blocks, and lines in bounded lengths: a file of a hundred megabytes, or
a binary blob without a newline, never sits in memory whole.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from engram_top.record.file_format import FORMAT, RecordingError

BLOCK = 1 << 20  # read at a time by the scan
# A longer line is damage: the longest record the recorder writes is a run's catch-up of
# its log (400 lines, each cut at 64 KiB by the supervisor's tail).
MAX_LINE = 32 << 20
# A header line's start, as the recorder writes it and as a hand-written file may.
HEADERS = (b'{"type":"header"', b'{"type": "header"')
_CARRY = max(map(len, HEADERS)) - 1
_SAMPLE = 1 << 16  # of a long damaged line, what is looked at to say what it is
MAX_REASON = 200  # characters of a reason kept (an unknown value is quoted in it)
SHOWN_REASONS, SHOWN_RANGES = 4, 4  # what a summary of many skipped lines lists


@dataclasses.dataclass(frozen=True)
class Skip:
    """A line (or lines ``line`` to ``last``) that could not be read, and why."""

    line: int
    reason: str
    last: int | None = None

    @property
    def count(self) -> int:
        return 1 if self.last is None else self.last - self.line + 1

    @property
    def lines(self) -> str:
        return str(self.line) if self.last is None else f"{self.line}-{self.last}"


@dataclasses.dataclass
class Span:
    """One session's place in the file: its header's line and the bytes of its records."""

    number: int  # 1-based, in file order
    line: int  # its header's line number
    start: int  # the first byte after its header line
    end: int  # where its records end: the next session's line, or the file's end
    last_line: int  # the last line of its records
    header: dict[str, Any]
    problem: str | None = None  # why it cannot be read (a newer format); None when it can
    ends_in_next: bool = False  # the next session's header is glued to its last line


@dataclasses.dataclass
class Scan:
    path: Path
    spans: list[Span]
    skips: list[Skip]  # lines outside any readable session
    truncated: bool  # the file's last line has no newline

    def pick(self, session: int | None) -> Span:
        """A session by number, by default the last one this engram-top can read."""
        readable = [s for s in self.spans if s.problem is None]
        if session is None:
            if not readable:
                raise RecordingError(f"{self.path}:{self.spans[0].line}: "
                                     f"{self.spans[0].problem}")
            return readable[-1]
        if not 1 <= session <= len(self.spans):
            raise RecordingError(f"{self.path}: no session {session}: it holds "
                                 f"{len(self.spans)}")
        span = self.spans[session - 1]
        if span.problem is not None:
            raise RecordingError(f"{self.path}:{span.line}: session {session}: {span.problem}")
        return span


def open_file(path: Path) -> BinaryIO:
    """A recording file opened for reading; RecordingError says why it cannot be."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise RecordingError(f"{path}: a folder, not a recording file")
        if not stat.S_ISREG(mode):  # a pipe would block the open; a device never ends
            raise RecordingError(f"{path}: not a regular file (a pipe or a device): save "
                                 "the recording to a file first")
        return open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read: {exc.strerror or exc}") from None


def scan(path: Path) -> Scan:
    """Every session of a recording file, and what lies outside them. RecordingError when
    the file cannot be read or holds no session at all."""
    with open_file(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise RecordingError(f"{path}: empty: not an engram-top recording")
            hits, lines = _find_headers(f, size)
            f.seek(size - 1)
            truncated = f.read(1) != b"\n"
            total_lines = lines + (1 if truncated else 0)
            spans, skips = _spans(f, path, hits, size, total_lines)
        except OSError as exc:
            raise RecordingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return Scan(path, spans, skips, truncated)


def _find_headers(f: BinaryIO, size: int) -> tuple[list[tuple[int, int, int]], int]:
    """(offset, line start, line number) of every header needle, and the file's newlines.
    One pass in blocks, the block's tail carried over so a needle across two is found."""
    hits: list[tuple[int, int, int]] = []
    base, carry, newlines, last_nl = 0, b"", 0, -1
    f.seek(0)
    while base + len(carry) < size:
        block = f.read(min(BLOCK, size - base - len(carry)))
        if not block:
            break
        buf = carry + block
        found = []
        for needle in HEADERS:
            at = buf.find(needle)
            while at >= 0:
                if at + len(needle) > len(carry):  # not wholly in the last block's tail
                    found.append(at)
                at = buf.find(needle, at + 1)
        for at in sorted(found):
            nl = buf.rfind(b"\n", 0, at)
            line_start = base + nl + 1 if nl >= 0 else last_nl + 1
            hits.append((base + at, line_start, newlines + buf.count(b"\n", 0, at) + 1))
        keep = min(_CARRY, len(buf))
        done = len(buf) - keep
        newlines += buf.count(b"\n", 0, done)
        nl = buf.rfind(b"\n", 0, done)
        if nl >= 0:
            last_nl = base + nl
        base += done
        carry = buf[done:]
    return hits, newlines + carry.count(b"\n")


def _spans(f: BinaryIO, path: Path, hits: list[tuple[int, int, int]], size: int,
           total_lines: int) -> tuple[list[Span], list[Skip]]:
    starts: list[tuple[int, int, int, int, dict[str, Any]]] = []  # at, line start, no, end
    for at, line_start, number in hits:
        if starts and starts[-1][1] == line_start:
            continue  # a second needle on a header's line: inside the header itself
        f.seek(at)
        raw = f.readline(MAX_LINE + 1)
        header = _header_of(raw)
        if header is not None:
            starts.append((at, line_start, number, at + len(raw), header))
    if not starts or starts[0][0] != 0:
        first = _first_line_header(f)  # a hand-written header, its keys in another order
        if first is not None:
            starts.insert(0, first)
    if not starts:
        raise RecordingError(_no_session(f, path))
    skips: list[Skip] = []
    _, line_start, number, _, _ = starts[0]
    if number > 1 and not _blank(f, 0, line_start):
        skips.append(Skip(1, "before the first session's header: not part of a session",
                          number - 1 if number > 2 else None))
    spans: list[Span] = []
    for i, (at, line_start, number, after, header) in enumerate(starts):
        if at > line_start:  # glued after damage on its line
            skips.append(Skip(number, _glued_reason(f, line_start, at, i + 1)))
        nxt = starts[i + 1] if i + 1 < len(starts) else None
        end = nxt[1] if nxt else size
        last_line = (nxt[2] - 1) if nxt else total_lines
        spans.append(Span(i + 1, number, min(after, end), end, max(number, last_line),
                          header, _format_problem(header),
                          ends_in_next=nxt is not None and nxt[0] > nxt[1]))
    for span, following in zip(spans, spans[1:], strict=False):
        if not span.ends_in_next:  # a glued header's damage is said above
            skip = _boundary_skip(f, span, following)
            if skip is not None:
                skips.append(skip)
    for span in spans:
        if span.problem is not None and span.last_line > span.line:
            skips.append(Skip(span.line, f"session {span.number}: {span.problem}",
                              span.last_line))
        elif span.problem is not None:
            skips.append(Skip(span.line, f"session {span.number}: {span.problem}"))
    skips.sort(key=lambda s: s.line)
    return spans, skips


def _boundary_skip(f: BinaryIO, span: Span, nxt: Span) -> Skip | None:
    """A session's last line, when it is the half line a crash left before the next
    session was appended: said whichever session is read."""
    begin = _line_start(f, span.start, span.end - 1)
    problem: str | None
    if begin is None:
        problem = "a line too long to be a record (binary data?)"
    else:
        f.seek(begin)
        raw = f.read(span.end - 1 - begin)
        if not raw.strip():
            return None
        _, problem = parse_line(raw, newline=True)
        if problem is None:
            return None
    return Skip(span.last_line, reason_text(problem) + f"; session {nxt.number} starts on "
                                                       f"line {nxt.line}")


def _line_start(f: BinaryIO, floor: int, end: int) -> int | None:
    """Where the line ending at ``end`` starts (not before ``floor``), looking back in
    blocks; None when it is longer than a record can be."""
    at = end
    while at > floor:
        begin = max(floor, at - BLOCK)
        f.seek(begin)
        nl = f.read(at - begin).rfind(b"\n")
        if nl >= 0:
            return begin + nl + 1
        if end - begin > MAX_LINE:
            return None
        at = begin
    return floor


def _header_of(raw: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) and obj.get("type") == "header" else None


def _first_line_header(f: BinaryIO) -> tuple[int, int, int, int, dict[str, Any]] | None:
    f.seek(0)
    raw = f.readline(MAX_LINE + 1)
    header = _header_of(raw) if raw.endswith(b"\n") or len(raw) <= MAX_LINE else None
    return None if header is None else (0, 0, 1, len(raw), header)


def _format_problem(header: dict[str, Any]) -> str | None:
    version = header.get("format")
    if version == FORMAT and not isinstance(version, bool):
        return None
    newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT
    return (f"recording format {reason_text(repr(version))}"
            + (", from a newer engram-top" if newer else "")
            + f": this engram-top reads format {FORMAT}")


def _no_session(f: BinaryIO, path: Path) -> str:
    """What a file without a session header is, as its first line says."""
    for number, raw, _newline, _end in read_lines(f, 0, None, 1):
        if raw is not None and not raw.strip():
            continue
        obj, problem = parse_line(raw, newline=True)
        if problem is not None:
            return f"{path}:{number}: {problem}"
        if isinstance(obj, dict) and obj.get("type") == "header":
            return f"{path}:{number}: {_format_problem(obj)}"
        return f"{path}:{number}: not an engram-top recording (no header line)"
    return f"{path}: empty: not an engram-top recording"


def _blank(f: BinaryIO, start: int, end: int) -> bool:
    if end - start > 4096:
        return False
    f.seek(start)
    return not f.read(end - start).strip()


def _glued_reason(f: BinaryIO, line_start: int, at: int, session: int) -> str:
    """The damage a later session's header was written after, on the same line."""
    size = at - line_start
    f.seek(line_start)
    if size <= _SAMPLE:
        what = damage(f.read(size))
    else:  # its two ends tell a NUL run or a binary blob from a record without its end
        head = f.read(_SAMPLE // 2)
        f.seek(at - _SAMPLE // 2)
        tail = f.read(_SAMPLE // 2)
        what = damage(head + tail) if b"\0" in head + tail or not _utf8(head + tail) \
            else "a line too long to be a record (binary data?)"
    return f"{what}; session {session} starts on the same line, after it"


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(raw) - 4  # cut in a character by the sampling
    return True


def damage(raw: bytes) -> str:
    """What a line that is not a record looks like, in a few words."""
    # Said the same way on every line it fits, so a summary groups them.
    if b"\0" in raw and not raw.strip(b"\0 \t\r"):
        return "a run of NUL bytes (what a crash leaves on some filesystems)"
    if b"\0" in raw:
        return "NUL bytes in it (what a crash leaves on some filesystems)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text: binary data, not a record"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        if cut_short(text, exc):
            return "half-written line (it stops before its end)"
        return f"not JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return "not a record (nested too deeply to read)"
    return "not a record"


def cut_short(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether a line that is not JSON is the start of a record, cut off: an object begun
    and never closed, where the reading ran out."""
    body = text.strip()
    return body.startswith("{") and (not body.endswith("}") or exc.pos >= len(body)
                                     or exc.msg.startswith("Unterminated string"))


def read_lines(f: BinaryIO, start: int, end: int | None,
               line: int) -> Iterator[tuple[int, bytes | None, bool, int]]:
    """(line number, the line without its newline (None when longer than MAX_LINE: not
    kept), whether it ended with a newline, the offset after it) from ``start`` to ``end``
    (None: the file's end)."""
    f.seek(start)
    pos = start
    while end is None or pos < end:
        want = MAX_LINE + 1 if end is None else min(MAX_LINE + 1, end - pos)
        raw = f.readline(want)
        if not raw:
            return
        pos += len(raw)
        if raw.endswith(b"\n"):
            yield line, raw[:-1], True, pos
        elif len(raw) > MAX_LINE:  # too long to be a record: passed over unread
            newline = False
            while end is None or pos < end:
                more = f.readline(BLOCK if end is None else min(BLOCK, end - pos))
                if not more:
                    break
                pos += len(more)
                if more.endswith(b"\n"):
                    newline = True
                    break
            yield line, None, newline, pos
        else:
            yield line, raw, False, pos
        line += 1


def parse_line(raw: bytes | None, *, newline: bool) -> tuple[Any, str | None]:
    """A line's JSON object, or None and why it is not one. ``newline``: it ended with
    one (a file's last line without it is the half line a killed recorder leaves)."""
    if raw is None:
        return None, "a line too long to be a record (binary data?)"
    if b"\0" in raw:
        return None, damage(raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, damage(raw)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        if not newline and cut_short(text, exc):
            return None, "half-written last line (was the recording process killed?)"
        return None, damage(raw)
    except RecursionError:
        return None, "not a record (nested too deeply to read)"
    if not isinstance(obj, dict):
        return None, f"not a record: a JSON {_json_kind(obj)}, where a record is an object"
    return obj, None


def _json_kind(obj: Any) -> str:
    if isinstance(obj, list):
        return "list"
    if isinstance(obj, str):
        return "string"
    if isinstance(obj, bool):
        return "true/false"
    return "null" if obj is None else "number"


def reason_text(text: str) -> str:
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"


def skipped_text(path: Path | str, skips: list[Skip]) -> str | None:
    """One line saying which lines were skipped and why, grouped by reason when many:
    "FILE: 3 lines skipped: 579 (half-written line ...); 1200-1210 (a run of NUL ...)"."""
    if not skips:
        return None
    total = sum(s.count for s in skips)
    if len(skips) == 1 and total == 1:
        return f"{path}:{skips[0].line}: skipped: {skips[0].reason}"
    groups: dict[str, list[Skip]] = {}
    for s in sorted(skips, key=lambda s: s.line):
        groups.setdefault(s.reason, []).append(s)
    parts = []
    for reason, items in list(groups.items())[:SHOWN_REASONS]:
        ranges = [s.lines for s in _merged(items)]
        more = len(ranges) - SHOWN_RANGES
        parts.append(", ".join(ranges[:SHOWN_RANGES])
                     + (f" and {more} more" if more > 0 else "") + f" ({reason})")
    rest = list(groups.items())[SHOWN_REASONS:]
    if rest:
        n = sum(s.count for _, items in rest for s in items)
        parts.append(f"{n} more line{'s' * (n != 1)} for {len(rest)} other reason"
                     f"{'s' * (len(rest) != 1)}")
    return f"{path}: {total} line{'s' * (total != 1)} skipped: " + "; ".join(parts)


def _merged(items: list[Skip]) -> list[Skip]:
    """Consecutive lines of one reason as one range."""
    out: list[Skip] = []
    for s in items:
        prev = out[-1] if out else None
        if prev is not None and (prev.last or prev.line) + 1 == s.line:
            out[-1] = Skip(prev.line, prev.reason, s.last or s.line)
        else:
            out.append(s)
    return out
