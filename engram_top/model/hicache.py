"""SGLang's hierarchical KV cache (HiCache) host tier, from the store: its host pools (the
start-up log, else the server's --hicache-size) and its traffic (the metrics page).

Pure, over a RunStore; engram_top.model.facts gives it to the panels, alerts and exports.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from collectors.readings import ServerData
from collectors.source import SourceName
from collectors.startup_facts import ServerArgsFacts, StartupFacts
from collectors.units import GB
from engram_top.model.store import RunStore
from engram_top.model.views import HiCacheView


def hicache_facts(store: RunStore) -> HiCacheView | None:
    """The watched server's HiCache host tier, or None where nothing says it has one (no
    start-up line, no --enable-hierarchical-cache, no HiCache figure on its page)."""
    run = store.run
    startup = run.startup if run is not None else StartupFacts()
    server: ServerData | None = store.data(SourceName.SERVER)
    args = _server_args(startup, server)
    logged = _logged_pools(startup)
    reported = server is not None and any(v is not None for v in (
        server.hicache_host_used_tokens, server.hicache_host_total_tokens,
        server.hicache_load_back_bytes_per_s, server.hicache_backup_bytes_per_s,
        server.hicache_dropped_host_pressure_per_s))
    if not logged and args.get("enable_hierarchical_cache") is not True and not reported:
        return None
    tp = _count(args.get("tp_size"))
    if tp is None and server is not None:
        tp = server.tp_size
    per_rank, ranks, pool, source = _pools(logged, tp, _number(args.get("hicache_size")))
    by_rank = _load_back_by_rank(server, ranks)
    load_back = round(sum(by_rank.values()), 3) if by_rank else None
    backup = server.hicache_backup_bytes_per_s if server is not None else None
    if backup is not None and ranks:
        backup *= ranks  # each rank backs up its own copy: the reporting scheduler's figure
    return HiCacheView(
        pool_bytes_per_rank=per_rank, ranks=ranks, pool_bytes=pool,
        used_tokens=_int(server.hicache_host_used_tokens) if server else None,
        total_tokens=_int(server.hicache_host_total_tokens) if server else None,
        load_back_bytes_per_s=load_back, backup_bytes_per_s=backup,
        dropped_host_pressure_per_s=server.hicache_dropped_host_pressure_per_s
        if server else None,
        evicted_per_s=server.evicted_tokens_per_s if server else None,
        source=source, load_back_by_rank=by_rank)


def _server_args(startup: StartupFacts, server: ServerData | None) -> dict[str, Any]:
    """The server's arguments: the log's ServerArgs dump, else what /server_info gave."""
    out: dict[str, Any] = dict(server.server_args) if server is not None else {}
    out.update(typed_args(startup.server_args))
    return out


def typed_args(logged: ServerArgsFacts | None) -> dict[str, Any]:
    """The settings a log's ServerArgs dump gave a type to, by name (None: not given)."""
    if logged is None:
        return {}
    return {f.name: value for f in fields(logged)
            if f.name != "raw" and (value := getattr(logged, f.name)) is not None}


def _logged_pools(startup: StartupFacts) -> dict[int, float]:
    """Each rank's host pool bytes, as its "Allocating .. host memory" lines said."""
    return {rank: facts.hicache_host_bytes for rank, facts in startup.ranks.items()
            if facts.hicache_host_bytes is not None}


def _pools(logged: dict[int, float], tp: int | None, size_gb: float | None
           ) -> tuple[float | None, int | None, float | None, str]:
    """(bytes per rank, ranks, bytes over the ranks, the source). A log whose other ranks'
    lines are missing (cut, or ranks that log nothing) counts them at the lowest rank's
    size: every TP rank allocates the same pool."""
    if logged:
        per_rank = logged[min(logged)]
        ranks = max(tp or 0, len(logged))
        pool = sum(logged.values()) + (ranks - len(logged)) * per_rank
        told = f"{len(logged)} of {ranks} ranks" if len(logged) < ranks else f"{ranks} ranks"
        return per_rank, ranks, pool, f"log: Allocating .. host memory ({told})"
    if size_gb is not None and size_gb > 0:
        per_rank = size_gb * GB  # --hicache-size is GB of 1e9 bytes, per rank
        return per_rank, tp, None if tp is None else per_rank * tp, "--hicache-size"
    return None, tp, None, "sized by --hicache-ratio: the log's Allocating line not seen"


def _load_back_by_rank(server: ServerData | None, ranks: int | None) -> dict[int, float]:
    """Each rank's load-back bytes per second: the page's own per-rank series, and for a
    rank it does not report, the reporting scheduler's figure (every TP rank loads back its
    own copy of the same tokens)."""
    if server is None or server.hicache_load_back_bytes_per_s is None:
        return dict(server.hicache_load_back_by_rank) if server is not None else {}
    out = dict(server.hicache_load_back_by_rank)
    for rank in range(ranks or 1):
        out.setdefault(rank, server.hicache_load_back_bytes_per_s)
    return out


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: object) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() and number > 0 else None


def _int(value: float | None) -> int | None:
    return None if value is None or not math.isfinite(value) else int(value)


def engram_rx_estimate(rx_by_gpu: dict[int, float | None],
                       view: HiCacheView | None) -> dict[int, float | None]:
    """Each GPU's PCIe receive less HiCache's load-back on its rank (rank r on GPU r): an
    ESTIMATE of the Engram rows' traffic (serving metrics do not see that traffic; the link's
    counters see both). None where the receive or the GPU's load-back is not known: HiCache
    off or silent estimates nothing rather than call the whole receive Engram's."""
    by_rank = view.load_back_by_rank if view is not None else {}
    out: dict[int, float | None] = {}
    for gpu, rx in rx_by_gpu.items():
        load_back = by_rank.get(gpu)
        out[gpu] = None if rx is None or load_back is None else max(0.0, rx - load_back)
    return out
