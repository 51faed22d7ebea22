"""Log lines a shipper wrapped in JSON: docker's json-file driver (``{"log": "..\\n",
"stream": "stderr", "time": ".."}``), Kubernetes and cloud collectors (``message``, ``msg``,
``textPayload``, ``MESSAGE``), a structured logger's own (``{"timestamp": .., "level": ..,
"message": ..}``). The text inside is SGLang's line as it would have been printed; a message
with newlines in it (a traceback logged as one record) is several lines. Pure.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# Where the printed text is, by the shippers' names for it, most specific first.
_MESSAGE_KEYS = ("log", "message", "msg", "textPayload", "MESSAGE", "text")
_TIME_KEYS = ("time", "timestamp", "@timestamp", "ts", "asctime", "date",
              "__REALTIME_TIMESTAMP")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)([.,]\d+)?")
MAX_JSON_LINE = 1024 * 1024  # longer lines are read as text: no shipper writes one
MAX_PIECES = 1000  # lines kept of one record (a traceback is tens)


def unwrap(line: str) -> tuple[list[str], Any] | None:
    """The lines a JSON record carries and its time field's value as given (None when it
    has none); None when the line is no JSON record with a message."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")) or len(text) > MAX_JSON_LINE:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    message = _message(record)
    if message is None:
        return None
    pieces = message.rstrip("\r\n").split("\n")[:MAX_PIECES]
    when = next((record[k] for k in _TIME_KEYS if k in record), None)
    return pieces, when


def _message(record: dict[str, Any]) -> str | None:
    for key in _MESSAGE_KEYS:
        value = record.get(key)
        if isinstance(value, str):
            return value
    payload = record.get("jsonPayload")  # Google Cloud Logging's structured entries
    if isinstance(payload, dict):
        return _message(payload)
    return None


def iso_parts(value: Any) -> tuple[str, str, str | None] | None:
    """(date, time, fraction) of an ISO or ``YYYY-MM-DD HH:MM:SS,mmm`` time; None for other
    values (epoch numbers are read by the caller)."""
    if not isinstance(value, str):
        return None
    m = _ISO.search(value)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def epoch_seconds(value: Any) -> float | None:
    """An epoch time as a number (or its text), in seconds: milliseconds, microseconds
    (journald) and nanoseconds are told by their size."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        return None
    while number > 1e11:  # past year 5138 in seconds: a finer unit
        number /= 1000.0
    return number
