"""Patterns of SGLang's log messages and the number readers their handlers share: pure,
no state. A line's prefix (time, ranks) is read by :mod:`collectors.sglang.line_prefix`,
failures by :mod:`collectors.sglang.failures`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

NUM = r"(-?\d+(?:\.\d+)?)"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
AVAIL = re.compile(r"avail mem=\s*" + NUM + r"\s*GB")
MEM_USAGE = re.compile(r"mem usage=\s*" + NUM + r"\s*GB")
ELAPSED = re.compile(r"(?:elapsed=|Time elapsed:)\s*" + NUM + r"\s*s\b")
KV_FIELD = re.compile(
    r"(?<![\w])(#tokens|KV size|K size|V size|Landmark size|Cache size)\s*:\s*" + NUM
)
KV_DTYPE = re.compile(r"Using KV cache dtype:\s*(\S+)")
KV_INLINE_DTYPE = re.compile(r"(?<![\w#])dtype\s*[:=]\s*([\w.]+)")
# "Allocating 8.00 GB host memory for hierarchical KV cache." (HiCache's host pool, one line
# per rank; this "GB" is 1e9 bytes: SGLang divides by 1e9 here, unlike its other lines).
HICACHE_HOST = re.compile(
    r"Allocating\s+(\d[\d,]*(?:\.\d+)?)\s*GB host memory for hierarchical KV cache",
    re.IGNORECASE,
)
DIST = re.compile(r"Init (?:torch distributed|parallel)\s+(begin|end)", re.IGNORECASE)
AVAILABLE = re.compile(r"available_(\w+?)_mem")
# "/path/x.py:71: UserWarning: msg" (after an optional "[ts]" prefix): Python's warnings.
PY_WARNING = re.compile(r"^(?:\[[^\]]*\]\s*)?\S+:\d+: (?:[\w.]+\.)?\w*Warning: ")
GRAPH = re.compile(r"Capture\s+(.*?)\s*cuda graph\s+(begin|end)\b", re.IGNORECASE)
PAIR = re.compile(r"(\w+)=([^,\s]+)")
PID = re.compile(r"Started server process \[(\d+)\]")
URL = re.compile(r"Uvicorn running on (\S+)")
ENGRAM_TABLE = re.compile(
    r"engram host table\s*(?P<label>[^:]*?)\s*:\s*layout=(?P<layout>[\w-]+)\s*,\s*"
    r"(?P<res>\d[\d,]*(?:\.\d+)?)\s*MiB resident\s*,\s*"
    r"(?P<huge>\d[\d,]*(?:\.\d+)?)\s*MiB in huge pages\s*\(\s*(?P<pct>\d+(?:\.\d+)?)\s*%\s*\)"
    r"(?P<rest>.*)$",
    re.IGNORECASE,
)
UNPINNED = re.compile(r"\bunpinned\b", re.IGNORECASE)
PINNED = re.compile(r"\bpinned\b", re.IGNORECASE)
ENGRAM_KEY = re.compile(r"\b(placement|replication|lookup)\b[\"']?\s*[:=]\s*[\"']?([\w-]+)")
# "key: value" pairs of batch lines; keys start with '#' or a letter, so a leading ". " or
# " [iter]" after "batch" is skipped.
BATCH_FIELD = re.compile(r"(#?[A-Za-z][\w\-/() ]*?)\s*:\s*([^,]+)")

SUMMARY_INT = (
    "max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
    "max_running_requests", "context_len",
)


def nz(value: float) -> float:
    """``-0.00`` printed by SGLang (a memory delta that rounds to zero) is 0.0, not -0.0."""
    return 0.0 if value == 0 else value


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return nz(float(text.split()[0].rstrip(".,")))
    except (ValueError, IndexError):
        return None


def to_int(text: str | None) -> int | None:
    value = to_float(text)
    return None if value is None else int(value)


def to_bool(text: str | None) -> bool | None:
    if text is None:
        return None
    word = text.strip().lower()
    return True if word == "true" else False if word == "false" else None


def group_float(rx: re.Pattern[str], text: str) -> float | None:
    m = rx.search(text)
    return nz(float(m.group(1))) if m else None


def _top_level_parts(text: str) -> list[str]:
    """``a=1, b={c=2, d=3}, e=4`` -> ``["a=1", "b={c=2, d=3}", "e=4"]`` (commas in braces kept)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def timing_pairs(text: str, prefix: str = "", out: dict[str, float] | None = None,
                 depth: int = 0) -> dict[str, float]:
    """``key=seconds`` pairs; ``key={k=v, ..}`` groups flattened to ``key.k``. Values that are
    not finite numbers are left out."""
    out = {} if out is None else out
    for part in _top_level_parts(text):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if value.startswith("{"):
            if depth < 4:
                timing_pairs(value[1:].rstrip("}"), f"{prefix}{key}.", out, depth + 1)
            continue
        number = to_float(value)
        if number is not None and math.isfinite(number):
            out[prefix + key] = number
    return out


def mib(text: str) -> float:
    return float(text.replace(",", ""))


def sum_known(values: Iterable[float | None]) -> float | None:
    """Sum of the known values; None when none is known (unknown is not zero)."""
    known = [v for v in values if v is not None]
    return round(sum(known), 6) if known else None


def batch_fields(msg: str, head: str) -> dict[str, str]:
    body = msg[msg.find(head) + len(head):]
    return {k.strip(): v.strip() for k, v in BATCH_FIELD.findall(body)}
