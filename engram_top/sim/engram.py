"""Engram lookups of a host placement: the rows each token reads from the host tables, and
the per-layer statistics line some DeepSeek-V4.1 builds log periodically:

    Engram layer=14 lookups=7311 hit_rate=12.5% reads=6397 cache=1.0GiB(4-way) scales=0.2GiB
    threads=64 packed=True

Lookups and reads count since the last line; a hit is served by the on-GPU row cache, a
read crosses PCIe. Only rank 0 logs them, as it does the batch lines.
"""

from __future__ import annotations

LAYERS = (1, 14)  # the layers of the two Engram tables (startup.TABLES: L1, L14)
ROWS_PER_TOKEN = 16  # assumption: n-gram rows one token looks up per table
ROW_BYTES = 272  # assumption: one fp8 row plus its scales
# Assumption: hashed n-gram rows are mostly cold; a 1 GiB row cache catches the frequent
# ones. DeepSeek-V4.1 logs show hit rates of this order.
HIT_RATE = 0.125
CACHE_FIELDS = "cache=1.0GiB(4-way) scales=0.2GiB threads=64 packed=True"
LOG_INTERVAL_S = 2.0  # wall seconds between statistics lines while tokens flow


class EngramStats:
    """Counts the tokens run through the model since the last statistics line."""

    def __init__(self) -> None:
        self.tokens = 0

    def add(self, tokens: int) -> int:
        """Record ``tokens`` run through the model; returns the bytes read from the host."""
        self.tokens += tokens
        lookups = tokens * ROWS_PER_TOKEN
        return (lookups - round(lookups * HIT_RATE)) * ROW_BYTES * len(LAYERS)

    def lines(self) -> list[str]:
        """One line per layer for the tokens since the last call; none when idle."""
        if not self.tokens:
            return []
        lookups = self.tokens * ROWS_PER_TOKEN
        reads = lookups - round(lookups * HIT_RATE)
        self.tokens = 0
        return [f"Engram layer={layer} lookups={lookups} "
                f"hit_rate={100 * (lookups - reads) / lookups:.1f}% reads={reads} "
                f"{CACHE_FIELDS}" for layer in LAYERS]
