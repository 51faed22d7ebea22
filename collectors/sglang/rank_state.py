"""One rank's start-up figures while its log lines come in; frozen into RankFacts."""

from __future__ import annotations

from collectors.sglang.log_patterns import sum_known
from collectors.startup_facts import GraphCapture, KvPool, RankFacts, WeightLoad


class RankState:
    """Mutable per-rank state; frozen into RankFacts by facts()."""

    __slots__ = (
        "rank", "dist_begins", "dist_ends", "dist_elapsed_s", "dist_mem_gb", "baseline_gb",
        "loads", "open_load", "pools", "pool_ends", "pool_end_avail_gb", "kv_dtype", "graphs",
        "open_graphs", "kv_open", "profile", "swa_sizing", "kv_sizings", "pool_sizes",
        "hicache_bytes", "hicache_lines",
    )

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.dist_begins = 0
        self.dist_ends = 0
        self.dist_elapsed_s: float | None = None
        self.dist_mem_gb: float | None = None
        self.baseline_gb: float | None = None
        self.loads: list[WeightLoad] = []
        self.open_load: int | None = None
        self.pools: list[KvPool] = []
        self.pool_ends = 0
        self.pool_end_avail_gb: float | None = None
        self.kv_dtype: str | None = None
        self.graphs: list[GraphCapture] = []
        self.open_graphs: dict[str, int] = {}  # kind -> index of a capture awaiting its end
        self.kv_open: int | None = None  # the KV pass a sizing line opened (pool_ends then)
        self.profile: dict[str, float] = {}
        self.swa_sizing: dict[str, float | int | str] = {}
        self.kv_sizings: list[dict[str, float | int | str]] = []
        self.pool_sizes: list[dict[str, int]] = []  # main model's, then a draft model's
        self.hicache_bytes: float | None = None  # HiCache's host pools on this rank
        self.hicache_lines = 0

    def freeze(self) -> RankFacts:
        main = self.loads[0] if self.loads else WeightLoad()
        pool = self.pools[0] if self.pools else KvPool()
        sizing = self.kv_sizings[0] if self.kv_sizings else {}
        sizes = self.pool_sizes[0] if self.pool_sizes else {}
        # A hybrid model prints no "KV Cache is allocated": its full pool is the capacity,
        # and the sizing's available bytes are what its pools take together.
        tokens = pool.tokens
        if tokens is None:
            full = sizes.get("full", sizing.get("full_tokens"))
            tokens = int(full) if isinstance(full, int | float) else None
        total = pool.total_gb
        if total is None and isinstance(sizing.get("available_bytes_gb"), float | int):
            total = float(sizing["available_bytes_gb"])
        return RankFacts(
            rank=self.rank,
            dist_init_elapsed_s=self.dist_elapsed_s,
            dist_init_mem_usage_gb=self.dist_mem_gb,
            memory_baseline_gb=self.baseline_gb,
            weights_begin_avail_gb=main.begin_avail_gb,
            weights_elapsed_s=main.elapsed_s,
            weights_type=main.model_type,
            weights_dtype=main.dtype,
            weights_quant=main.quant,
            weights_avail_gb=main.avail_gb,
            weights_gb=main.mem_usage_gb,
            all_weights_gb=sum_known(w.mem_usage_gb for w in self.loads),
            kv_dtype=pool.dtype if pool.dtype is not None else self.kv_dtype,
            kv_tokens=tokens,
            k_size_gb=pool.k_size_gb,
            v_size_gb=pool.v_size_gb,
            kv_size_gb=pool.kv_size_gb,
            kv_total_gb=total,
            all_kv_gb=sum_known(p.total_gb for p in self.pools) if self.pools else total,
            pool_end_avail_gb=self.pool_end_avail_gb,
            graph_begin_avail_gb=self.graphs[0].begin_avail_gb if self.graphs else None,
            graph_mem_usage_gb=sum_known(g.mem_usage_gb for g in self.graphs),
            graph_elapsed_s=sum_known(g.elapsed_s for g in self.graphs),
            graph_avail_gb=next(
                (g.avail_gb for g in reversed(self.graphs) if g.avail_gb is not None), None
            ),
            weight_loads=tuple(self.loads),
            kv_pools=tuple(self.pools),
            graph_captures=tuple(self.graphs),
            memory_profile=dict(self.profile),
            swa_sizing=dict(self.swa_sizing),
            kv_sizing=dict(sizing),
            pool_sizes=dict(sizes),
            draft_pool_sizes=dict(self.pool_sizes[1]) if len(self.pool_sizes) > 1 else {},
            hicache_host_bytes=self.hicache_bytes,
            hicache_host_lines=self.hicache_lines,
        )

