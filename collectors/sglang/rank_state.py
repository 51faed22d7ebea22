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
        "hicache_bytes", "hicache_lines", "coords", "label", "swa_pool", "all_swa", "swa_kv",
        "mamba",
    )

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.coords: dict[str, int] = {}  # the dimensions its prefix names: {"DP": 1, "TP": 0}
        self.label = ""  # those as printed: "DP1 TP0"
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
        # "Use sliding window memory pool. full_layer_tokens=.., swa_layer_tokens=..": the
        # latest (a post-capture resize restates it); all_swa: the "(all SWA)" form.
        self.swa_pool: dict[str, int] = {}
        self.all_swa = False
        # "SWAKVPool mem usage: X GB, swa size: .., full size: ..": total_gb, swa, full.
        self.swa_kv: dict[str, float | int] = {}
        # "Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size: X GB, ..".
        self.mamba: dict[str, float | int] = {}

    def _main_pool(self, full: int | None) -> KvPool:
        """The pool whose size is the capacity: a post-capture resize's, else the one
        labelled or sized as the full pool (a SWA model logs its SWA pool too, in either
        order), else the first."""
        post = [p for p in self.pools if p.label == "post-capture"]
        if post:
            return post[-1]
        for pool in self.pools:
            if (pool.label or "").lower() == "full":
                return pool
        if full is not None:
            for pool in self.pools:
                if pool.tokens == full:
                    return pool
        return self.pools[0] if self.pools else KvPool()

    def _capacity(self, pool: KvPool, sizes: dict[str, int],
                  sizing: dict[str, float | int | str]) -> tuple[int | None, str | None]:
        """The rank's KV capacity in tokens and the line that states it."""
        if self.all_swa and "swa" in self.swa_pool:
            return self.swa_pool["swa"], "sliding window pool (all SWA): swa_layer_tokens"
        if "full" in self.swa_pool:
            return self.swa_pool["full"], "sliding window pool: full_layer_tokens"
        if isinstance(self.swa_kv.get("full"), int):
            return int(self.swa_kv["full"]), "SWAKVPool: full size"
        if pool.tokens is not None:
            return pool.tokens, "KV Cache is allocated: #tokens"
        # A hybrid model prints no "KV Cache is allocated": its full pool is the capacity.
        full = sizes.get("full", sizing.get("full_tokens"))
        if isinstance(full, int | float):
            return int(full), "pool sizes: full"
        return None, None

    def _total(self, pool: KvPool, hybrid: bool,
               sizing: dict[str, float | int | str]) -> tuple[float | None, str | None]:
        """The rank's KV pools in GiB and where that figure comes from."""
        if isinstance(self.swa_kv.get("total_gb"), float | int):
            return float(self.swa_kv["total_gb"]), "SWAKVPool mem usage"
        if hybrid and pool.label != "post-capture" and len(self.pools) >= 2:
            pair = sum_known(p.total_gb for p in self.pools[:2])
            if pair is not None:
                return pair, "derived: the full and SWA pools' sizes added"
        if pool.total_gb is not None:
            return pool.total_gb, "KV Cache is allocated"
        if isinstance(sizing.get("available_bytes_gb"), float | int):
            # The sizing's available bytes are what a hybrid model's pools take together.
            return float(sizing["available_bytes_gb"]), "memory calculation: available_bytes"
        if isinstance(sizing.get("kv_budget_gb"), float | int):
            return float(sizing["kv_budget_gb"]), "derived: the memory available for the KV " \
                "cache (no line states the pool's size)"
        return None, None

    def freeze(self, index: int | None = None) -> RankFacts:
        main = self.loads[0] if self.loads else WeightLoad()
        sizing = self.kv_sizings[0] if self.kv_sizings else {}
        sizes = dict(self.pool_sizes[0]) if self.pool_sizes else {}
        for name in ("full", "swa"):  # the sliding-window lines' word over a sizes line's
            stated = self.swa_pool.get(name, self.swa_kv.get(name))
            if isinstance(stated, int):
                sizes[name] = stated
        pool = self._main_pool(sizes.get("full"))
        tokens, tokens_from = self._capacity(pool, sizes, sizing)
        hybrid = bool(self.swa_pool or self.swa_kv)
        total, total_from = self._total(pool, hybrid, sizing)
        mamba_gb = sum_known(v for k, v in self.mamba.items() if k.endswith("_gb"))
        return RankFacts(
            rank=self.rank if index is None else index,
            coords=dict(self.coords),
            label=self.label,
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
            kv_tokens_from=tokens_from,
            kv_total_from=total_from,
            mamba_state=dict(self.mamba),
            mamba_state_gb=mamba_gb,
        )

