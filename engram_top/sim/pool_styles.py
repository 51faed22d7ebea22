"""The memory pool phase's lines in other models' shapes (`sim serve --kv-pools`): the same
KV bytes and the same full-pool capacity as DeepSeek-V4's configurator gives, said as

- swa: SGLang's hybrid sliding-window pool (models with full and SWA layers): "Use sliding
  window memory pool. full_layer_tokens=F, swa_layer_tokens=S" then "SWAKVPool mem usage:
  X GB, swa size: S, full size: F". The SWA pool is swa_full_tokens_ratio of the full one, so
  it is the smaller figure; the capacity is the full pool's.
- mamba: a hybrid linear-attention model's: "Mamba Cache is allocated. max_mamba_cache_size:
  N, conv_state size: X GB, ssm_state size: Y GB" (the recurrent state of N request slots,
  out of the fixed pools' bytes), then the full-attention layers' "KV Cache is allocated.
  ..., #tokens: F, K size: ..., V size: ..." with the rest.

SGLang's GB here is 2**30 bytes (its memory_pool's GB)."""

from __future__ import annotations

from collectors.units import GIB
from engram_top.sim.memory import MemoryPlan
from engram_top.sim.pools import PAGE_SIZE

CONV_SHARE = 0.0625  # of the Mamba state: the short convolution's window; the SSM has the rest


def swa_tokens(mem: MemoryPlan, ratio: float) -> int:
    """SGLang's hybrid pool: swa = full x ratio, in whole pages."""
    return int(mem.kv_tokens * ratio) // PAGE_SIZE * PAGE_SIZE


def lines(style: str, mem: MemoryPlan, swa_ratio: float) -> list[str]:
    """The pool lines one rank prints for ``style`` (dsv4: the configurator's own)."""
    full = mem.kv_tokens
    if style == "swa":
        swa = swa_tokens(mem, swa_ratio)
        return [f"Use sliding window memory pool. full_layer_tokens={full}, "
                f"swa_layer_tokens={swa}",
                f"SWAKVPool mem usage: {mem.kv_bytes / GIB:.2f} GB, swa size: {swa}, "
                f"full size: {full}"]
    if style == "mamba":
        state = mem.pools.fixed_bytes
        kv = max(0, mem.kv_bytes - state)
        return [f"Mamba Cache is allocated. max_mamba_cache_size: {mem.pools.max_num_reqs + 1}, "
                f"conv_state size: {state * CONV_SHARE / GIB:.2f}GB, "
                f"ssm_state size: {state * (1 - CONV_SHARE) / GIB:.2f}GB ",
                f"KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: {full}, "
                f"K size: {kv / 2 / GIB:.2f} GB, V size: {kv / 2 / GIB:.2f} GB"]
    return mem.pools.log_lines(mem.kv_bytes)
