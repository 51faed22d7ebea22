"""How large SGLang makes each TP rank's HiCache host pool, read from a scenario's arguments,
for the fit check (scenarios.fit).

`--hicache-size` (decimal GB per rank) wins over `--hicache-ratio` (times the rank's device
KV pool). With neither and `--enable-hierarchical-cache`, SGLang since sglang PR 40135
(2026-09) sizes the pool to fit: its default ratio (2) lowered until the node's ranks' pools
fit `--hicache-host-memory-fraction` (0.8) of the host memory available less a 10 GiB
reserve, the ranks agreeing on one reading of it. Whether that reading comes before or after
the Engram tables load is not said, so the check takes the case where the pool adapts (what
the rest needs comes off first); the server's log says the size it took ("Allocating ..
host memory"), and the ledger reads that.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.units import GB, GIB

DEFAULT_RATIO = 2.0
DEFAULT_FRACTION = 0.8
RESERVE_BYTES = 10 * GIB


@dataclass(frozen=True)
class HiCacheSize:
    """A rank's host pool as the arguments set it: fixed, or sized by SGLang at start."""

    fixed_bytes_per_rank: int = 0  # --hicache-size or --hicache-ratio's pool; 0: none or auto
    auto: bool = False
    cap_bytes_per_rank: int = 0  # with auto: the default ratio's pool, never exceeded
    fraction: float = DEFAULT_FRACTION
    source: str = ""  # "--hicache-size", "--hicache-ratio 1.5", "auto"; "" without HiCache

    def per_rank(self, available_bytes: int | None, rest_bytes: float, ranks: int) -> int:
        """Each rank's pool on a node with ``available_bytes`` (MemAvailable; None unknown)
        of which the rest of the server takes ``rest_bytes``."""
        if not self.auto:
            return self.fixed_bytes_per_rank
        if available_bytes is None:
            return self.cap_bytes_per_rank  # nothing to size by: the most it would take
        budget = self.fraction * max(0.0, available_bytes - rest_bytes - RESERVE_BYTES)
        return int(min(self.cap_bytes_per_rank, budget / max(1, ranks)))


def hicache_size(*, enabled: bool, size_gb: float | None, ratio: float | None,
                 fraction: float | None, kv_bytes_per_rank: int) -> HiCacheSize:
    """The pool the arguments ask for: ``enabled`` by --enable-hierarchical-cache, the
    numbers as given (None: not given or not a number)."""
    if size_gb is not None and size_gb > 0:  # 0 means unset, as SGLang reads it
        # Counted even without --enable-hierarchical-cache: a size given is a pool meant.
        return HiCacheSize(int(size_gb * GB), source="--hicache-size")
    if not enabled:  # a ratio alone is the default of a cache that is off
        return HiCacheSize()
    if ratio is not None and ratio > 0:
        return HiCacheSize(int(ratio * kv_bytes_per_rank), source=f"--hicache-ratio {ratio:g}")
    share = fraction if fraction is not None and 0 < fraction <= 1 else DEFAULT_FRACTION
    return HiCacheSize(auto=True, cap_bytes_per_rank=int(DEFAULT_RATIO * kv_bytes_per_rank),
                       fraction=share, source="auto")
