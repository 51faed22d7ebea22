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
KV_BUDGET = re.compile(r"[Aa]vailable memory for KV cache is\s*(\d{1,9}(?:\.\d{1,9})?)\s*GB")
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
# "Capture cuda graph failed: ..", "Capture prefill CUDA graph failed", "Capture CPU graph
# failed" (builds word it their own way; a failure all the same).
GRAPH_FAILED = re.compile(r"Capture\b.*?\bgraphs?\b.*?\bfail", re.IGNORECASE)
# "Full KV Cache is allocated.", "SWA KV Cache is allocated." (a SWA model's two pools);
# the label is the words before "KV Cache".
_POOL_LABEL = re.compile(r"([\w][\w .\-]*?)\s+KV Cache is allocated")
# "SWAKVPool mem usage: 77.63 GB, swa size: 1048576, full size: 1310720" ("VA upper bound"
# in place of "mem usage" where the pools are reserved, not backed, until after capture).
SWA_KV_POOL = re.compile(
    r"SWAKVPool\s+(mem usage|VA upper bound)\s*[:=]\s*" + NUM + r"\s*GB", re.IGNORECASE)
SWA_KV_SIZE = re.compile(r"\b(swa|full)[\s_]+size\s*[:=]\s*(\d+)", re.IGNORECASE)
# "Mamba Cache is allocated. max_mamba_cache_size: 656, conv_state size: 0.12GB, ssm_state
# size: 12.30GB intermediate_ssm_state_cache size: 0.00GB ..": counts and sizes by name.
STATE_FIELD = re.compile(
    r"([A-Za-z_]\w*?)(?:\s+size)?\s*[:=]\s*" + NUM + r"\s*(GB|GiB|MB|MiB)?(?![\w.])")
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


def pool_label(msg: str) -> str | None:
    """The label before "KV Cache is allocated" ("Full", "SWA"), None where there is none."""
    m = _POOL_LABEL.search(msg)
    if m is None:
        return None
    label = m.group(1).strip()
    return label[:60] if label else None


_GIB = {"GB": 1.0, "GiB": 1.0, "MB": 1 / 1024, "MiB": 1 / 1024}


def state_fields(body: str) -> dict[str, float | int]:
    """``name: N`` counts and ``name size: X GB`` sizes (under ``name_gb``, GiB) of a
    state pool's line; the first of a name wins."""
    out: dict[str, float | int] = {}
    for name, value, unit in STATE_FIELD.findall(body):
        if unit:
            out.setdefault(f"{name}_gb", round(nz(float(value)) * _GIB[unit], 6))
        elif "." not in value:
            out.setdefault(name, int(value))
    return out
