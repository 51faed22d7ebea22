"""A SGLang log line's prefix: its time and rank, off the message.

Lines are matched on their message text, never on the prefix, because the prefix changes
between builds and processes: ``[ts] msg``, ``[ts TP0] msg``, ``[ts DP0 TP0 EP0] msg``,
``[HH:MM:SS TP0] msg`` (time only), ``[ts] INFO file.py:123: msg``, ``[gpu_id=0] msg`` (2024
builds), bare ``msg`` and uvicorn's ``INFO:     msg``. What a container or log shipper puts in
front (``name  | `` of docker compose, an ISO or ``YYYY-MM-DD HH:MM:SS`` time, a syslog head,
``[pod/..]``) is taken off first; its time serves a line that has none of SGLang's own.

Times: a line's time is the caller's ``at`` (monotonic arrival time) when given, else the
prefix timestamp (second resolution, read as UTC so that only differences matter), else the
time of the previous timed line. A line where another process's output ends and an SGLang
line starts without a newline (``...refleaks.html[2026-11-29 19:50:11] msg``) is read from the
glued ``[ts]`` prefix on.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# "[2026-02-04 10:11:12]", "[2026-02-04 10:11:12 DP0 TP0 EP0]" or the time-only
# "[10:11:12 TP0]": group 1 the date (or None), 2 the time, 3 its fraction, 4 the tags.
PREFIX = re.compile(
    r"\[(?:(\d{4}-\d\d-\d\d)[ T])?(\d\d:\d\d:\d\d)([.,]\d+)?((?:\s[^\]]*)?)\]\s?")
# What a container runtime or log shipper writes before SGLang's own line, any of them in
# any order: docker compose's "name  | ", an ISO or "YYYY-MM-DD HH:MM:SS" time (docker logs
# -t, kubectl --timestamps, a shipper), a syslog/journald head, kubectl's "[pod/x/y] ".
OUTER = re.compile(
    r"(?:[\w.\-]+\s+\|\s?"
    r"|(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?\s"
    r"|[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?:\s"
    r"|\[pod/[^\]]*\]\s)+"
)
_LEVEL = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w.\-/]+:\d+:\s*")
_GPU_ID = re.compile(r"\[gpu_id=(\d+)\]\s*")
_TP = re.compile(r"\bTP(\d+)\b")


class LogLine:
    """A line split into time, rank and message; built only for lines a needle matched."""

    __slots__ = ("t", "rank", "msg")

    def __init__(self, t: float | None, rank: int, msg: str) -> None:
        self.t = t
        self.rank = rank
        self.msg = msg


def find_prefix(msg: str) -> tuple[re.Match[str] | None, str]:
    """SGLang's ``[ts ..]`` prefix of a message and the message from it on: at the start,
    or after another process's output glued in front (two writers, one file, no newline
    between)."""
    m = PREFIX.match(msg)
    if m is None and "[" in msg:
        m = PREFIX.search(msg)
        if m is not None:
            msg = msg[m.start():]
            m = PREFIX.match(msg)
    return m, msg


class LineClock:
    """Reads prefixes into times, remembering what a later line needs: the previous line's
    time, the last timestamp parsed (a log repeats it line after line), and the days passed
    for time-only prefixes (counted from midnight wraps). It outlives a relaunch: the log's
    clock goes on."""

    __slots__ = ("last_t", "_ts_cache", "_tod_day", "_tod_last")

    def __init__(self) -> None:
        self.last_t: float | None = None
        self._ts_cache: tuple[str, float] = ("", 0.0)
        self._tod_day = 0.0
        self._tod_last = -1.0

    def strip_outer(self, line: str) -> tuple[str, float | None]:
        """The line without a container's or shipper's head, and that head's time."""
        outer_t: float | None = None
        if line and (line[0] != "[" or line.startswith("[pod/")):
            m = OUTER.match(line)
            if m is not None:  # a container's or shipper's head: off, its time kept
                if m.group("time"):
                    outer_t = self.parse_ts(m.group("date"), m.group("time"), m.group("frac"))
                line = line[m.end():]
        return line, outer_t

    def prefix_time(self, line: str) -> float | None:
        m, _ = find_prefix(line)
        return self.parse_ts(m.group(1), m.group(2), m.group(3)) if m else None

    def parse_ts(self, date: str | None, clock: str, frac: str | None) -> float | None:
        if date is None:  # "[HH:MM:SS TP0]": seconds of the day, days counted from wraps
            try:
                h, mi, sec = (int(x) for x in clock.split(":"))
            except ValueError:
                return None
            of_day = h * 3600.0 + mi * 60.0 + sec
            if self._tod_last >= 0 and of_day < self._tod_last - 43200:
                self._tod_day += 86400.0
            self._tod_last = of_day
            base = self._tod_day + of_day
        else:
            ts = f"{date} {clock}"
            if ts == self._ts_cache[0]:
                base = self._ts_cache[1]
            else:
                try:
                    base = datetime.strptime(ts, "%Y-%m-%d %H:%M:%S").replace(
                        tzinfo=UTC
                    ).timestamp()
                except ValueError:
                    return None
                self._ts_cache = (ts, base)
        return base + float("0." + frac[1:]) if frac else base

    def split(self, line: str, at: float | None, outer_t: float | None = None) -> LogLine:
        """Time, rank and message. The time: ``at``, else SGLang's prefix, else the time a
        container put in front (``outer_t``), else the previous line's."""
        t = at
        rank: int | None = None
        m, msg = find_prefix(line.lstrip())
        if m:
            if t is None:
                t = self.parse_ts(m.group(1), m.group(2), m.group(3))
            tp = _TP.search(m.group(4))
            if tp:
                rank = int(tp.group(1))
            msg = msg[m.end():]
        lvl = _LEVEL.match(msg)
        if lvl:
            msg = msg[lvl.end():]
        gpu = _GPU_ID.match(msg)
        if gpu:
            # 2024 builds tagged scheduler lines with the GPU id, which was the TP rank.
            if rank is None:
                rank = int(gpu.group(1))
            msg = msg[gpu.end():]
        if t is None:
            t = outer_t
        if t is None:
            t = self.last_t
        else:
            self.last_t = t
        return LogLine(t, rank if rank is not None else 0, msg)

