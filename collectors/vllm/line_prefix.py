"""A vLLM log line's prefix, off its message: the process tags, torch's rank, the level,
the time, the file that logged.

vLLM's own line is ``[(Proc attrs) ...] LEVEL MM-DD HH:MM:SS[.fff] [file.py:123] msg``: none,
one or nested process tags (``(EngineCore_DP0 pid=3)``, ``(Worker_PP1_TP0 pid=9)``,
``(VllmWorker rank=1 pid=9)``, ``(VllmWorkerProcess pid=9)``, ``(RayWorkerWrapper pid=9,
ip=10.0.0.2)``, ``(APIServer pid=1) (DPEngineCoreActor pid=5, ip=..)``), the file without
its opening bracket before 0.6, and no date at all where a logging config leaves it out.
torch's elastic launcher puts ``[rank3]:`` before a worker's lines and tracebacks; c10d
and NCCL write ``[rank3]:[E227 09:12:34.5 ProcessGroupNCCL.cpp:616] msg``. A time-only
``HH:MM:SS`` can stand before all of it (a handler's own format). What a container or a
shipper wraps around the line is taken off first (collectors.log_envelope).
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass

from collectors.log_envelope import unwrap

_TOD = re.compile(r"(\d\d):(\d\d):(\d\d)(?:[.,]\d+)?\s+")
_TAG = re.compile(r"\((?P<name>[A-Za-z_][\w.\-]*)(?P<attrs>(?:,?\s+[\w.]+=[^\s,)]*)*)\)\s*")
_ATTR = re.compile(r"([\w.]+)=([^\s,)]*)")
_TORCH_RANK = re.compile(r"\[rank(\d+)\]:\s?")
_LEVEL = re.compile(r"(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::\s+|\s+)")
_DATE = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+")
_FILE = re.compile(r"\[?[\w./<>-]+\.py:\d+\]\s?")
# c10d/NCCL's own head after a torch rank: "[E227 09:12:34.567891 ProcessGroupNCCL.cpp:616] "
_C10D = re.compile(r"\[[EWI]\d{3,4} \d\d:\d\d:\d\d(?:\.\d+)? [\w.]+:\d+\]\s?")
HALF_YEAR = 183 * 86400.0


@dataclass(frozen=True, slots=True)
class VllmLine:
    msg: str
    tags: tuple[tuple[str, dict[str, str]], ...] = ()  # (name, attrs), outermost first
    torch_rank: int | None = None
    level: str | None = None  # None: a raw line (a traceback, a bar, a continuation)
    own_time: tuple[int, int, int, int, int, str] | None = None  # month, day, h, m, s, frac
    tod: int | None = None  # seconds of the day, where only a time stood before the line
    outer_t: float | None = None

    @property
    def proc(self) -> str | None:
        return self.tags[-1][0] if self.tags else None

    @property
    def attrs(self) -> dict[str, str]:
        return self.tags[-1][1] if self.tags else {}


def split(raw: str) -> VllmLine:
    text, outer_t = unwrap(raw)
    pos = 0
    tod = None
    if (m := _TOD.match(text)) is not None:
        tod = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))
        pos = m.end()
    tags: list[tuple[str, dict[str, str]]] = []
    torch_rank = None
    while True:
        if (m := _TAG.match(text, pos)) is not None:
            tags.append((m["name"], dict(_ATTR.findall(m["attrs"]))))
        elif torch_rank is None and (m := _TORCH_RANK.match(text, pos)) is not None:
            torch_rank = int(m.group(1))
        else:
            break
        pos = m.end()
    if torch_rank is not None and (m := _C10D.match(text, pos)) is not None:
        pos = m.end()
    level = own = None
    if (m := _LEVEL.match(text, pos)) is not None:
        level = m.group(1)
        pos = m.end()
        if (d := _DATE.match(text, pos)) is not None:
            mo, day, h, mi, s = (int(d.group(i)) for i in range(1, 6))
            own = (mo, day, h, mi, s, d.group(6) or "")
            pos = d.end()
        if (f := _FILE.match(text, pos)) is not None:
            pos = f.end()
    return VllmLine(text[pos:] if level or tags or torch_rank is not None or tod is not None else
                    text.strip(), tuple(tags), torch_rank, level, own, tod, outer_t)


class Clock:
    """Each line's time: the caller's, else the wrapper's (it has the year), else vLLM's own
    (no year: this year's, a year added where the log crosses New Year), else a time of day
    (days counted from midnight wraps), else the previous line's. Never earlier than the
    line before: lines of several processes interleave out of order by a little, and a
    timeline must not run backwards."""

    def __init__(self) -> None:
        self.last: float | None = None
        self._year = time.gmtime().tm_year
        self._day = 0.0
        self._tod_last = -1
        self._wrapped = False  # vLLM's own lines came with a wrapper's time

    def time_of(self, line: VllmLine, at: float | None) -> float | None:
        own = line.level is not None or bool(line.tags) or line.torch_rank is not None \
            or line.tod is not None
        if own and line.outer_t is not None:
            self._wrapped = True
        if at is None and not own and line.outer_t is not None and not self._wrapped:
            # A line that is not vLLM's (another process's output, a paste's stray line)
            # with a wrapper's time, in a log whose own lines have none: its clock is not
            # the log's, and "never earlier than the line before" would pin every later
            # line to it.
            return self.last
        t = at if at is not None else line.outer_t
        if t is None and line.own_time is not None:
            t = self._own(line.own_time)
        if t is None and line.tod is not None:
            if self._tod_last >= 0 and line.tod < self._tod_last - 43200:
                self._day += 86400.0
            self._tod_last = line.tod
            t = self._day + line.tod
        if t is None:
            return self.last
        if self.last is not None and t < self.last:
            t = self.last
        self.last = t
        return t

    def _own(self, stamp: tuple[int, int, int, int, int, str]) -> float | None:
        mo, day, h, mi, s, frac = stamp
        if not (1 <= mo <= 12 and 1 <= day <= 31 and h < 24 and mi < 60 and s < 62):
            return None
        t = float(calendar.timegm((self._year, mo, day, h, mi, s, 0, 0, 0)))
        if self.last is not None and t < self.last - HALF_YEAR:  # December, then January
            self._year += 1
            return self._own(stamp)
        return t + (float("0." + frac) if frac else 0.0)
