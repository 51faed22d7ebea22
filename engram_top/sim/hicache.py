"""The simulated server's hierarchical KV cache (SGLang's HiCache, `sim serve --hicache-size
GB`): a host pool on every TP rank, its start-up line, its traffic and its metrics.

The model, kept small: a finished request's KV is backed up to the host pool (GPU -> host)
as the device cache evicts it; a pool that is full drops the backup for host pressure (the
pool keeps what it holds: nothing here is ever asked for it again but its prefixes). A new
request loads back half its prompt from what the pool holds (host -> GPU: the earlier turns
of a conversation), on every rank, over each GPU's PCIe link. The page is SGLang's radix
cache collector's: per-rank byte counters, per-scheduler token counters.
"""

from __future__ import annotations

from typing import Any, Protocol

from collectors.units import GB
from engram_top.seed.reference import Reference
from engram_top.sim.metrics_page import MetricsPage
from scenarios.hicache_size import HiCacheSize, hicache_size

LOAD_BACK_SHARE = 0.5  # of a new prompt, found in the host pool while it holds that much
DROP_REASON = "host_pressure"


def log_line(pool_bytes_per_rank: int) -> str:
    """SGLang's line, its "GB" as SGLang computes it (bytes / 1e9)."""
    return f"Allocating {pool_bytes_per_rank / GB:.2f} GB host memory for hierarchical KV cache."


class _Server(Protocol):
    """The simulated SGLang server's core (engram_top.sim.core.ServerCore), as a pool needs it."""

    hicache: HiCacheSim | None
    ref: Reference
    metrics: MetricsPage


def put_on_page(core: _Server, pool_bytes_per_rank: int) -> None:
    """A host pool per rank (0: none) on the server's page from now on; set once: at the
    start for a size or a ratio, at the KV phase for one SGLang sizes itself."""
    if core.hicache is None and pool_bytes_per_rank > 0:
        core.hicache = HiCacheSim.on_page(pool_bytes_per_rank, core.ref, core.metrics)


def pool_size(args: Any, kv_bytes_per_rank: int) -> HiCacheSize:
    """The host pool per rank `sim serve`'s arguments ask for, sized as SGLang sizes it
    (scenarios.hicache_size): a size, a ratio of the KV pool, or SGLang's own sizing."""
    return hicache_size(
        enabled=bool(getattr(args, "enable_hierarchical_cache", False)),
        size_gb=getattr(args, "hicache_size", None), ratio=getattr(args, "hicache_ratio", None),
        fraction=getattr(args, "hicache_host_memory_fraction", None),
        kv_bytes_per_rank=kv_bytes_per_rank)


class HiCacheSim:
    def __init__(self, pool_bytes_per_rank: int, bytes_per_token: float, ranks: int) -> None:
        self.pool_bytes_per_rank = pool_bytes_per_rank
        self.bytes_per_token = bytes_per_token
        self.ranks = ranks
        self.total_tokens = int(pool_bytes_per_rank // bytes_per_token)
        self.used_tokens = 0
        self.load_back_bytes = 0.0  # each rank's
        self.backup_bytes = 0.0  # each rank's
        self.dropped_tokens = 0.0
        self.evicted_tokens = 0.0

    @classmethod
    def on_page(cls, pool_bytes_per_rank: int, ref: Reference, m: MetricsPage) -> HiCacheSim:
        """A pool on every rank, its families declared on the server's page."""
        sim = cls(pool_bytes_per_rank, ref.kv_bytes_per_token, ref.gpus)
        sim.declare(m)
        return sim

    def load_back(self, prompt_tokens: int) -> float:
        """A new prompt: the bytes every rank together reads back from the host."""
        tokens = min(int(prompt_tokens * LOAD_BACK_SHARE), self.used_tokens)
        nbytes = tokens * self.bytes_per_token
        self.load_back_bytes += nbytes
        return nbytes * self.ranks

    def back_up(self, tokens: int) -> None:
        """A finished request's KV leaves the device cache for the host pool, or is dropped
        where the pool has no room left."""
        self.evicted_tokens += tokens
        kept = max(0, min(tokens, self.total_tokens - self.used_tokens))
        self.used_tokens += kept
        self.backup_bytes += kept * self.bytes_per_token
        self.dropped_tokens += tokens - kept

    @staticmethod
    def declare(m: MetricsPage) -> None:
        for name, help_text in (
                ("sglang:hicache_host_used_tokens", "Tokens held in the host KV cache."),
                ("sglang:hicache_host_total_tokens", "Capacity of the host KV cache (tokens).")):
            m.declare(name, "gauge", help_text)
        for name, help_text in (
                ("sglang:load_back_bytes_total", "Bytes loaded back from host to device."),
                ("sglang:hicache_backup_bytes_total", "Bytes backed up from device to host."),
                ("sglang:hicache_dropped_tokens_total", "Tokens dropped instead of backed up."),
                ("sglang:evicted_tokens_total", "Tokens evicted from the device cache.")):
            m.declare(name, "counter", help_text)

    def render(self, m: MetricsPage, rank_labels: dict[str, str]) -> None:
        """One scheduler's series (``rank_labels`` carry its tp_rank)."""
        m.set("sglang:hicache_host_used_tokens", rank_labels, self.used_tokens)
        m.set("sglang:hicache_host_total_tokens", rank_labels, self.total_tokens)
        m.set("sglang:load_back_bytes_total", rank_labels, self.load_back_bytes)
        m.set("sglang:hicache_backup_bytes_total", rank_labels, self.backup_bytes)
        m.set("sglang:hicache_dropped_tokens_total", {**rank_labels, "reason": DROP_REASON},
              self.dropped_tokens)
        m.set("sglang:evicted_tokens_total", rank_labels, self.evicted_tokens)
