"""Every figure a server gives is bounded where it enters, in one place: a ServerData leaves
its collector (and a recording its reader) with each number inside its physical range, or
None with the reason kept in ``unavailable``, and the rest of the reading kept.

Why here and not where a figure is drawn: a number from outside reaches loops (a HiCache
pool per TP rank), int() and float() (a 400-digit integer cannot become a float), bars and
JSON. A `tp_size` of 1e30 once made the client allocate without bound, a gauge of 1e308
crashed the dashboard's bars. Ranges are generous (a figure a real node could never show
is refused; an odd one a real node might is kept): their job is safety, not judgement.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from collectors.readings import ServerData, finite

MAX_RANKS = 4096  # TP x DP x PP of the largest deployments, with room
MAX_GIB = 100_000.0  # memory on one GPU or host, in GiB (or SGLang's "GB")
MAX_TOKENS = 1e15
MAX_COUNT = 1e15  # requests, events, tokens since a server started
MAX_RATE = 1e15  # per second: tokens, requests, bytes
MAX_SHARE = 10.0  # a usage or a hit rate, 0..1; a server's rounding may pass 1 a little
ANY = 1e15  # a number of a field not named below

RANGES: dict[str, tuple[float, float]] = {
    "tp_size": (1, MAX_RANKS),
    "max_total_num_tokens": (0, MAX_TOKENS),
    "weight_gb": (0, MAX_GIB), "kv_cache_gb": (0, MAX_GIB), "graph_gb": (0, MAX_GIB),
    "token_usage": (0, MAX_SHARE), "full_token_usage": (0, MAX_SHARE),
    "swa_token_usage": (0, MAX_SHARE), "mamba_usage": (0, MAX_SHARE),
    "cache_hit_rate": (0, MAX_SHARE), "cache_hit_rate_since_start": (0, MAX_SHARE),
    "num_running_reqs": (0, MAX_COUNT), "num_queue_reqs": (0, MAX_COUNT),
    "num_retracted_reqs": (0, MAX_COUNT), "num_paused_reqs": (0, MAX_COUNT),
    "num_used_tokens": (0, MAX_TOKENS), "kv_used_tokens": (0, MAX_TOKENS),
    "kv_available_tokens": (0, MAX_TOKENS), "kv_evictable_tokens": (0, MAX_TOKENS),
    "hicache_host_used_tokens": (0, MAX_TOKENS), "hicache_host_total_tokens": (0, MAX_TOKENS),
    "cached_tokens_total": (0, MAX_COUNT), "aborted_requests_total": (0, MAX_COUNT),
}
# The server arguments engram-top reads itself (the HiCache pools, the fit, the Engram
# setting); another argument is shown as it is, never computed with.
ARG_RANGES: dict[str, tuple[float, float]] = {
    "tp_size": (1, MAX_RANKS), "dp_size": (1, MAX_RANKS), "pp_size": (1, MAX_RANKS),
    "ep_size": (1, MAX_RANKS), "page_size": (1, 1 << 20), "mem_fraction_static": (0, 1),
    "hicache_size": (0, 1e6), "hicache_ratio": (0, 1e3), "swa_full_tokens_ratio": (0, 1e3),
}


def index(text: str, most: int = MAX_RANKS) -> int | None:
    """A rank or GPU label as an index: ASCII digits up to ``most``; else None ("²" is a
    digit to str.isdigit() but not to int(); "99999999999" is no rank)."""
    text = text.strip()
    if text.isascii() and text.isdigit() and len(text) <= 18 and int(text) <= most:
        return int(text)
    return None


def outside(value: object, lo: float, hi: float) -> str | None:
    """Why a number is not a figure in lo..hi (None: it is, or it is not a number at all).
    An int is compared as it is: a 400-digit one never becomes a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # finite() said it
    if lo <= value <= hi:
        return None
    shown = f"{value:.3g}" if isinstance(value, float) or abs(value) < 10**18 else \
        "an integer of more than 18 digits"
    return f"n/a: {shown} is outside {lo:g}..{hi:g}"


def bounded(data: ServerData) -> ServerData:
    """The same data with every figure non-finite (finite()) or outside its range made None,
    and why kept in ``unavailable`` (a server argument's under ``server_args.NAME``)."""
    data = finite(data)
    changes: dict[str, Any] = {}
    why = dict(data.unavailable)
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        reason = outside(value, *RANGES.get(f.name, (-ANY, ANY)))
        if reason is not None:
            changes[f.name] = None
            why.setdefault(f.name, reason)
    args = dict(data.server_args)
    for key, value in data.server_args.items():
        reason = outside(value, *ARG_RANGES.get(key, (-ANY, ANY)))
        if reason is not None:
            del args[key]
            why.setdefault(f"server_args.{key}", reason)
    if args != data.server_args:
        changes["server_args"] = args
    ranks = {rank: {k: v for k, v in figures.items()
                    if outside(v, *RANGES.get(k, (-ANY, ANY))) is None}
             for rank, figures in data.ranks.items()
             if isinstance(rank, int) and 0 <= rank < MAX_RANKS}
    if ranks != data.ranks:
        changes["ranks"] = ranks
    by_rank = {r: v for r, v in data.hicache_load_back_by_rank.items()
               if isinstance(r, int) and 0 <= r < MAX_RANKS and outside(v, 0, MAX_RATE) is None}
    if by_rank != data.hicache_load_back_by_rank:
        changes["hicache_load_back_by_rank"] = by_rank
    by_source = {s: v for s, v in data.cached_tokens_by_source.items()
                 if outside(v, 0, MAX_COUNT) is None}
    if by_source != data.cached_tokens_by_source:
        changes["cached_tokens_by_source"] = by_source
    if not changes:
        return data
    return dataclasses.replace(data, **changes, unavailable=why)
