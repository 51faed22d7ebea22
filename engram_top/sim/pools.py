"""DeepSeek-V4's KV pools per GPU, sized the way SGLang's DSV4 pool configurator sizes them.

SGLang gives the KV budget first to the fixed pools: the sliding-window (SWA) pool, which
"cap mode" sizes from the request cap rather than from the full pool, and the c128
compression state (none here: the online c128 compressor keeps no ring). The full pool
(compressed tokens of every layer: what "KV capacity" means for this model) gets the rest,
and the compressed pools follow it: c4 = full / 4, c128 = full / 128.
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.units import GIB
from engram_top.seed.reference import Reference

PAGE_SIZE = 256  # SGLang's dsv4 attention backend fixes the page size at 256 tokens
CHUNKED_PREFILL_SIZE = 8192  # SGLang's default on a GPU this large


@dataclass(frozen=True)
class Dsv4Pools:
    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int
    c128_state: int
    swa_cap: int  # request cap + headroom, in tokens
    prefix_tails: int
    max_num_reqs: int
    bytes_per_full_token: float
    swa_fixed_bytes: int
    c128_state_fixed_bytes: int = 0

    @property
    def fixed_bytes(self) -> int:
        return self.swa_fixed_bytes + self.c128_state_fixed_bytes

    def log_lines(self, available_bytes: int) -> list[str]:
        """The configurator's lines, then the pool's own, as one rank prints them.

        ``available_bytes`` is the whole KV budget: SGLang prints it before taking the
        fixed pools out, so full_token = (available - fixed) / bytes_per_full_token.
        """
        return [
            f"DSV4 SWA sizing: mode=cap, swa_tokens={self.swa}, "
            f"request_cap+headroom={self.swa_cap}, prefix_tails={self.prefix_tails}",
            f"DSV4 memory calculation: bytes_per_full_token={self.bytes_per_full_token:.2f}, "
            f"available_bytes={available_bytes / GIB:.2f} GB, "
            f"c128_state_fixed={self.c128_state_fixed_bytes / GIB:.2f} GB, "
            f"swa_fixed={self.swa_fixed_bytes / GIB:.2f} GB, full_token={self.full}",
            f"DSV4 pool sizes: full={self.full}, swa={self.swa}, c4={self.c4}, "
            f"c128={self.c128}, c4_state={self.c4_state}, c128_state={self.c128_state}",
            # The c128 state is sized per request slot once concurrency is known (slots =
            # max_num_reqs + 1), which is why this line and the sizes line differ there.
            f"Initialize DeepSeekV4TokenToKVPool with max_num_reqs={self.max_num_reqs} "
            f"swa_size={self.swa} c4_size={self.c4} c4_logical_size={self.c4} "
            f"c128_size={self.c128} c4_state_pool_size={self.c4_state} "
            f"c128_state_pool_size={self.max_num_reqs + 1}",
        ]


def swa_cap_tokens(ref: Reference) -> int:
    """Cap mode: every running request's window (which can straddle two pages), one
    prefill chunk, and the window tails of a few cached prefixes, in whole pages."""
    m = ref.kv_pools
    span = m.sliding_window + PAGE_SIZE
    max_running = ref.placements["device"].service.max_running_requests
    cap = max_running * span + CHUNKED_PREFILL_SIZE + m.swa_prefix_tails * span
    return -(-cap // PAGE_SIZE) * PAGE_SIZE


def fixed_bytes(ref: Reference) -> int:
    """KV budget bytes the full pool never gets: the same for every placement."""
    return swa_cap_tokens(ref) * ref.kv_pools.swa_bytes_per_token


def size_pools(ref: Reference, full: int) -> Dsv4Pools:
    m = ref.kv_pools
    swa = swa_cap_tokens(ref)
    return Dsv4Pools(
        full=full, swa=swa, c4=full // 4, c128=full // 128,
        c4_state=swa // PAGE_SIZE * m.c4_ring_size, c128_state=0,
        swa_cap=swa, prefix_tails=m.swa_prefix_tails,
        max_num_reqs=ref.placements["device"].service.max_running_requests,
        bytes_per_full_token=ref.kv_bytes_per_token,
        swa_fixed_bytes=swa * m.swa_bytes_per_token,
    )
