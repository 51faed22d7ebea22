"""What a container runtime, an orchestrator or a log shipper wraps around a server's own log
line, taken off: a JSON record ({"log": ..., "time": ...} of docker's json-file, {"message":
..., "timestamp": ...} of a shipper, journald's {"MESSAGE": ...}, Cloud Logging's
textPayload or jsonPayload.message), containerd's CRI head (``<time> stdout F ``), docker
compose's ``name  | ``, an ISO or ``YYYY-MM-DD HH:MM:SS`` time (``docker logs -t``, ``kubectl
logs --timestamps``, a shipper's ``time | ``), a syslog head, kubectl's ``[pod/..] ``.

Engine-neutral: each engine's reader takes its own prefix off what is left. The wrapper's
time (read as UTC: only differences matter) is returned apart, for lines that carry none of
their own or whose own time lacks the year.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from collectors.figure_bounds import index

OUTER = re.compile(
    r"(?:(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?\s+"
    r"|(?:stdout|stderr) [FP] "  # containerd's CRI log format, after its time
    r"|\|\s"  # a shipper's separator after its time
    r"|[\w.\-]+\s+\|\s?"  # docker compose: "service-1  | "
    r"|[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?:\s"  # syslog
    r"|\[pod/[^\]]*\]\s"  # kubectl logs --prefix
    r")+")
# The keys a JSON record keeps its line and its time under, most specific first.
MESSAGE_KEYS = ("log", "message", "msg", "MESSAGE", "textPayload", "line", "text")
TIME_KEYS = ("time", "timestamp", "@timestamp", "ts", "asctime", "__REALTIME_TIMESTAMP")
MAX_JSON = 1024 * 1024  # a longer "record" is text, not something a shipper wrote
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)([.,]\d+)?")


def unwrap(line: str) -> tuple[str, float | None]:
    """The server's own line, and the time its wrapper gave it (None when none did)."""
    t: float | None = None
    text = line
    if text[:1] == "{" and len(text) <= MAX_JSON:
        text, t = _json_record(text)
    m = OUTER.match(text) if text[:1] != "[" or text.startswith("[pod/") else None
    if m is not None and m.end() > 0:
        if m.group("time") and t is None:
            t = utc_seconds(m.group("date"), m.group("time"), m.group("frac"))
        text = text[m.end():]
    return text, t


def _json_record(text: str) -> tuple[str, float | None]:
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return text, None
    if not isinstance(record, dict):
        return text, None
    payload = record.get("jsonPayload")
    if isinstance(payload, dict):  # Cloud Logging keeps the line one level down
        record = {**record, **payload}
    message = next((record[k] for k in MESSAGE_KEYS if isinstance(record.get(k), str)), None)
    if message is None:
        return text, None
    return message.rstrip("\r\n"), _record_time(record)


def _record_time(record: dict[str, object]) -> float | None:
    for key in TIME_KEYS:
        value = record.get(key)
        if isinstance(value, str) and (m := _ISO.search(value)):
            return utc_seconds(m.group(1), m.group(2), m.group(3))
        if key == "__REALTIME_TIMESTAMP" and isinstance(value, str) \
                and (us := index(value, 10**17)) is not None:
            return us / 1e6  # journald: microseconds since the epoch
        if isinstance(value, int | float) and not isinstance(value, bool) \
                and 0 < value < 1e11:  # epoch seconds (a shipper's "ts")
            return float(value)
    return None


def utc_seconds(date: str, clock: str, frac: str | None) -> float | None:
    """``2026-04-19`` ``12:59:18`` ``.350`` as epoch seconds, read as UTC."""
    try:
        base = datetime.strptime(f"{date} {clock}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return base.timestamp() + (float("0." + frac[1:]) if frac and frac[1:].isascii()
                             and frac[1:].isdigit() else 0.0)
