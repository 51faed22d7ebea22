"""Readers of single SGLang log messages that carry figures as ``key=value`` pairs: the
ServerArgs dump, memory profiling, the KV sizing lines of hybrid models (DeepSeek-V4's
several pools), and the Engram layers' statistics. Pure functions over the message text
(the prefix already removed), for the start-up log parser's handlers; each returns plain
values and never raises on odd text. typed_server_args keeps, of a ServerArgs dump, the
settings a placement reading needs, each of its type.

Spellings read, by pattern rather than by sample (SGLang renames these lines between
builds): ``<tag> memory calculation: ...`` (``DSV4``, ``DSv4``, ``SW KV`` and any other
tag), ``<tag> pool sizes: ...``, ``Initialize <Name>TokenToKVPool with ...`` (pairs split by
commas or blanks), ``<tag> SWA sizing: ...``.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from collectors.startup_facts import ServerArgsFacts, server_args_facts

# "name=12.5 GB", "full_token=5875712", "hit_rate=12.5%": a name, a number, a unit.
_NUM_PAIR = re.compile(
    r"([A-Za-z_#][\w#+]*)\s*=\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(GB|GiB|MB|MiB|%)?"
)
_ANY_PAIR = re.compile(r"([A-Za-z_#][\w#+\-]*)\s*=\s*([^,\s]+)")
_GIB_PER = {"GB": 1.0, "GiB": 1.0, "MB": 1 / 1024, "MiB": 1 / 1024}

# What a pool is called in the sizes line, by the names the pool's constructor uses.
POOL_ALIASES = {
    "full": "full", "full_size": "full", "size": "full",
    "swa": "swa", "swa_size": "swa",
    "c4": "c4", "c4_size": "c4",
    "c128": "c128", "c128_size": "c128",
    "c4_state": "c4_state", "c4_state_pool_size": "c4_state",
    "c128_state": "c128_state", "c128_state_pool_size": "c128_state",
}

MAX_ARGS = 1000  # keys kept of a ServerArgs dump
MAX_ARG_TEXT = 300  # characters kept of a value that is not a plain literal
MAX_ARGS_LINE = 256 * 1024  # characters of the dump read at all
# Values never kept: SGLang prints its ServerArgs with the API keys in them.
_SECRET = re.compile(r"(?:^|_)(?:api_key|key|token|secret|password|passwd)$", re.IGNORECASE)


def _number(text: str) -> int | float:
    value = float(text)
    if value.is_integer() and "." not in text and "e" not in text.lower():
        return int(value)
    return value + 0.0


def numeric_pairs(text: str) -> dict[str, int | float]:
    """Every ``name=number`` of the text; figures with a memory unit in GiB (SGLang's "GB"),
    under ``name_gb``; percentages under ``name_pct``. The first of a name wins."""
    out: dict[str, int | float] = {}
    for name, value, unit in _NUM_PAIR.findall(text):
        try:
            number = _number(value)
        except ValueError:
            continue
        if unit in _GIB_PER:
            out.setdefault(f"{name}_gb", round(number * _GIB_PER[unit], 6))
        elif unit == "%":
            out.setdefault(f"{name}_pct", number)
        else:
            out.setdefault(name, number)
    return out


def sizing_tag(msg: str, needle: str) -> str:
    """The words before ``needle`` ("DSV4", "DSv4", "SW KV"), as printed."""
    head = msg[: msg.find(needle)].strip()
    return head.rsplit("]", 1)[-1].strip()


def memory_calculation(msg: str) -> dict[str, Any]:
    """``DSV4 memory calculation: bytes_per_full_token=2210.40, available_bytes=12.10 GB,
    c128_state_fixed=0.00 GB, swa_fixed=0.41 GB, full_token=5875712``: the figures, and the
    full pool's tokens under ``full_tokens`` (spelt full_token or full_tokens)."""
    body = msg[msg.find("memory calculation") + len("memory calculation"):]
    out: dict[str, Any] = {"line": sizing_tag(msg, "memory calculation")}
    out.update(numeric_pairs(body))
    full = out.get("full_token", out.get("full_tokens"))
    if isinstance(full, int | float):
        out["full_tokens"] = int(full)
    return out


def pool_sizes(msg: str) -> dict[str, int]:
    """``DSV4 pool sizes: full=.., swa=.., c4=.., ..`` or ``Initialize
    DeepSeekV4TokenToKVPool with max_num_reqs=.. swa_size=.. c4_size=..``: tokens (or
    slots) per pool, under the pool's short name; other counts keep their own names."""
    out: dict[str, int] = {}
    for name, value in numeric_pairs(msg).items():
        if isinstance(value, float) and not value.is_integer():
            continue
        key = POOL_ALIASES.get(name, name)
        out.setdefault(key, int(value))
    return out


def swa_sizing(msg: str) -> dict[str, Any]:
    """``DSV4 SWA sizing: mode=cap, swa_tokens=20480, request_cap+headroom=20480, ..``."""
    body = msg[msg.find("sizing:") + len("sizing:"):]
    out: dict[str, Any] = {}
    for name, value in _ANY_PAIR.findall(body):
        try:
            out.setdefault(name, _number(value))
        except ValueError:
            out.setdefault(name, value)
    return out


def memory_profiling(msg: str) -> dict[str, float]:
    """``Memory profiling: available_gpu_memory=61.20 GB, total_gpu_memory=139.80 GB,
    mem_fraction_static=0.70, rest_memory=24.75 GB``."""
    return {k: float(v) for k, v in numeric_pairs(msg[msg.find("profiling"):]).items()}


_CACHE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB)(?:\((\d+)-way\))?")


def engram_layer(msg: str) -> dict[str, Any] | None:
    """``Engram layer=14 lookups=7311 hit_rate=12.5% reads=6397 cache=1.0GiB(4-way)
    scales=0.2GiB threads=64 packed=True``: numbers as numbers, sizes in GiB, the cache's
    associativity as ``cache_ways``; keys this reader does not know are kept as text."""
    body = msg[msg.find("Engram layer="):]
    out: dict[str, Any] = {}
    for name, value in _ANY_PAIR.findall(body):
        if name in out:
            continue
        size = _CACHE.fullmatch(value)
        if size is not None:
            out[f"{name}_gib"] = round(float(size.group(1)) * _GIB_PER[size.group(2)], 6)
            if size.group(3):
                out[f"{name}_ways"] = int(size.group(3))
        elif value.endswith("%"):
            try:
                out[f"{name}_pct"] = float(value[:-1])
            except ValueError:
                out[name] = value
        elif value in ("True", "False"):
            out[name] = value == "True"
        else:
            try:
                out[name] = _number(value)
            except ValueError:
                out[name] = value[:MAX_ARG_TEXT]
    return out if isinstance(out.get("layer"), int) else None


# --------------------------------------------------------------------------- ServerArgs

_OPEN = {"(": ")", "[": "]", "{": "}"}


def _top_level(text: str) -> list[str]:
    """``a=1, b=[1, 2], c='x, y'`` -> ``["a=1", "b=[1, 2]", "c='x, y'"]``: commas inside
    brackets or quotes kept. Unbalanced text ends the last part where the text ends."""
    parts: list[str] = []
    stack: list[str] = []
    quote = ""
    start = i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            stack.append(_OPEN[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif ch == "," and not stack:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _literal(text: str) -> Any:
    """A repr'd value as Python data when it is a plain literal, else its text (an enum's
    ``<X.Y: 'y'>``, ``PosixPath('/x')``), cut to MAX_ARG_TEXT."""
    if len(text) <= 4 * MAX_ARG_TEXT:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return text[:MAX_ARG_TEXT]


def server_args(msg: str) -> dict[str, Any]:
    """The keyword arguments of a ``ServerArgs(...)`` repr, by name, as Python values;
    secrets (api_key and the like) redacted, the count bounded."""
    start = msg.find("ServerArgs(")
    if start < 0:
        return {}
    body = msg[start + len("ServerArgs("):MAX_ARGS_LINE]
    if body.endswith(")"):
        body = body[:-1]
    out: dict[str, Any] = {}
    for part in _top_level(body):
        if len(out) >= MAX_ARGS:
            break
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            continue
        parsed = _literal(value.strip())
        if _SECRET.search(key) and parsed not in (None, "", False):
            parsed = "<redacted>"
        out[key] = parsed
    return out


# Older and newer names of the same setting.
_ARG_ALIASES = {"ep_size": ("moe_ep_size", "expert_parallel_size"),
                "tp_size": ("tensor_parallel_size",), "dp_size": ("data_parallel_size",)}


def typed_server_args(raw: dict[str, object]) -> ServerArgsFacts:
    """The settings a placement reading needs from a ServerArgs dump, each of its type or
    None (a bool is no int here; an int is a float)."""
    stated = dict(raw)
    for name, aliases in _ARG_ALIASES.items():
        for alias in aliases:
            if stated.get(name) is None:
                stated[name] = raw.get(alias)
    return server_args_facts(stated, raw=dict(raw))
