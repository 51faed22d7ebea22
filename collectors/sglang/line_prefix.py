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
    r"|(?:stdout|stderr) [FP] "  # containerd's CRI log format, after its time
    r"|[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?:\s"
    r"|\[pod/[^\]]*\]\s)+"
)
_LEVEL = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w.\-/]+:\d+:\s*")
_GPU_ID = re.compile(r"\[gpu_id=(\d+)\]\s*")
# A rank's place in the prefix: "DP1 PP0 ATTN_CP0 MOE_DP0 TP3 EP3" (SGLang names only the
# dimensions that are larger than one, in this order). MOE_DP and ATTN_CP are whole words:
# their "DP"/"CP" is not read as the DP dimension.
_DIM = re.compile(r"(?<![\w])(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)\b")
DIMS = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")
_DIM_AT = {name: i for i, name in enumerate(DIMS)}
# PyTorch's own lines of a rank ("[rank3]:[E227 10:11:12.38 ProcessGroupNCCL.cpp:616] ..")
# and an elastic launcher's copy of a worker's output ("[rank0]: Traceback ..", every line
# of it, indentation kept after the one blank).
_TORCH_RANK = re.compile(r"\[rank(\d+)\]: ?")
RankKey = tuple[int, ...]  # one index per DIMS entry, 0 where the prefix names none
NO_PLACE: RankKey = (0,) * len(DIMS)


class LogLine:
    """A line split into time, rank and message; built only for lines a needle matched."""

    __slots__ = ("t", "rank", "msg", "key", "label")

    def __init__(self, t: float | None, rank: int, msg: str,
                 key: RankKey = NO_PLACE, label: str = "") -> None:
        self.t = t
        self.rank = rank  # the TP rank (what single-dimension logs key ranks by)
        self.msg = msg
        self.key = key  # the rank's place in every dimension its prefix names
        self.label = label  # those dimensions as printed: "DP1 TP0", "" for none


def rank_key(tags: str) -> tuple[RankKey, str] | None:
    """A prefix's tags as a key over DIMS and their label; None when they name no rank."""
    found = _DIM.findall(tags)
    if not found:
        return None
    key = [0] * len(DIMS)
    for name, idx in found:
        key[_DIM_AT[name]] = int(idx)
    return tuple(key), " ".join(f"{name}{idx}" for name, idx in found)


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

    __slots__ = ("last_t", "outer_rank", "_ts_cache", "_tod_day", "_tod_last")

    def __init__(self) -> None:
        self.last_t: float | None = None
        self.outer_rank: int | None = None  # "[rank3]:" of the line strip_outer took off
        self._ts_cache: tuple[str, float] = ("", 0.0)
        self._tod_day = 0.0
        self._tod_last = -1.0

    def strip_outer(self, line: str) -> tuple[str, float | None]:
        """The line without a container's or shipper's head, and that head's time."""
        outer_t: float | None = None
        self.outer_rank = None
        if line and (line[0] != "[" or line.startswith("[pod/")):
            m = OUTER.match(line)
            if m is not None:  # a container's or shipper's head: off, its time kept
                if m.group("time"):
                    outer_t = self.parse_ts(m.group("date"), m.group("time"), m.group("frac"))
                line = line[m.end():]
        if line.startswith("[rank"):
            m = _TORCH_RANK.match(line)
            if m is not None:
                self.outer_rank = int(m.group(1))
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
        key: RankKey | None = None
        label = ""
        m, msg = find_prefix(line.lstrip())
        if m:
            if t is None:
                t = self.parse_ts(m.group(1), m.group(2), m.group(3))
            place = rank_key(m.group(4))
            if place is not None:
                key, label = place
                rank = key[_DIM_AT["TP"]]
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
        if rank is None and self.outer_rank is not None:
            rank = self.outer_rank  # torch's global rank: the TP rank on one TP group
        if t is None:
            t = outer_t
        if t is None:
            t = self.last_t
        else:
            self.last_t = t
        if key is None:
            key = tuple(rank or 0 if d == "TP" else 0 for d in DIMS)
            label = f"TP{rank}" if rank is not None else ""
        return LogLine(t, rank if rank is not None else 0, msg, key, label)

