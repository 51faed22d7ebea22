"""A hybrid model's state beyond its KV tokens, as the start-up log states it: the Mamba
state pool of a hybrid linear-attention model ("Mamba Cache is allocated. max_mamba_cache_size:
N, conv_state size: X GB, ssm_state size: Y GB"), per GPU, with its use from the metrics page
(SGLang's mamba_usage). None where the server has no such pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engram_top.model.store import RunStore


@dataclass(frozen=True)
class MambaView:
    slots: int | None  # request slots the state pool holds (max_mamba_cache_size)
    conv_gb: float | None  # SGLang's "GB" (GiB), per GPU
    ssm_gb: float | None
    total_gb: float | None  # conv + ssm (+ any other state the line names), per GPU
    usage: float | None  # 0..1, from the page


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def mamba_facts(store: RunStore, usage: float | None = None) -> MambaView | None:
    """The first rank's Mamba pool that the log states (each rank alike on a TP node)."""
    run = store.run
    if run is None:
        return None
    for rank in run.startup.ranks.values():
        state = rank.mamba_state
        if not state:
            continue
        slots = _num(state.get("max_mamba_cache_size"))
        return MambaView(slots=None if slots is None else int(slots),
                         conv_gb=_num(state.get("conv_state_gb")),
                         ssm_gb=_num(state.get("ssm_state_gb")),
                         total_gb=rank.mamba_state_gb, usage=usage)
    return None
